"""A tiny fixed-vocabulary tokenizer for :mod:`tltreal.rl.task`, built offline.

Why not a pretrained tokenizer: nothing may be downloaded, and a 100K-entry vocabulary would make
the LM head of a 1M-parameter model most of its weights. The task's text is digits, a few operators,
spaces, newlines and four words, so the vocabulary is those characters (all lowercase letters too,
so any lowercase text round-trips), the task's words as single tokens (shorter sequences, cheaper
training and rollout), and the special tokens ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>``.

It is a real :class:`tokenizers.Tokenizer` (a WordLevel model behind a regex pre-tokenizer that
isolates each word or single character, and a Fuse decoder that joins pieces without spaces), so
:meth:`TaskTokenizer.save` writes ``tokenizer.json`` + ``tokenizer_config.json`` +
``special_tokens_map.json`` that ``transformers.AutoTokenizer.from_pretrained(folder)`` and vLLM
load with no network access, and they tokenize exactly as :meth:`TaskTokenizer.encode` does. The
Hugging Face tokenizer prepends ``<bos>`` by default (as Llama's does), so a prompt handed to vLLM
as text gets the same first token as the pre-training sequences.
"""

from __future__ import annotations

import json
import string
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from tltcore.errors import InputError, reason
from tltreal.rl.task import ANSWER_WORD, PROMPT_WORDS

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
CHARS = tuple(string.digits + "+-*/=:()., \n" + string.ascii_lowercase)
WORDS = (ANSWER_WORD, *PROMPT_WORDS)
FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# Written as the class name transformers 4 and 5 both resolve (5 saves "TokenizersBackend", which 4 lacks).
TOKENIZER_CLASS = "PreTrainedTokenizerFast"


def _backend() -> Tokenizer:
    vocab = {tok: i for i, tok in enumerate((*SPECIALS, *CHARS, *WORDS))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Longest words first so a word is never split into its letters; [\s\S] takes any single
    # character (newline included), so every character becomes its own piece.
    pattern = "|".join(sorted(WORDS, key=len, reverse=True)) + r"|[\s\S]"
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A $B:1",
                                                       special_tokens=[(BOS, vocab[BOS])])
    tok.add_special_tokens(list(SPECIALS))
    return tok


class TaskTokenizer:
    """Encode / decode the task's text; ids are stable (specials 0-3, then characters, then words)."""

    def __init__(self, backend: Tokenizer) -> None:
        ids = {name: backend.token_to_id(name) for name in SPECIALS}
        missing = [name for name, i in ids.items() if i is None]
        if missing:
            raise InputError(f"tokenizer lacks the special tokens {missing}")
        self.backend = backend
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (int(i) for i in ids.values() if i is not None)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, bos: bool = False) -> list[int]:
        """Token ids of ``text`` (characters outside the vocabulary become ``<unk>``); ``bos``
        prepends ``<bos>``, as the Hugging Face tokenizer does by default."""
        ids = self.backend.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if bos else list(ids)

    def decode(self, ids: Iterable[int], *, skip_special: bool = True) -> str:
        """Text of ``ids``. Special tokens are dropped by default (a response's ``<eos>`` is not
        text); ids outside the vocabulary are dropped too, so decoding never raises."""
        size = self.vocab_size
        clean = [int(i) for i in ids if 0 <= int(i) < size]
        return self.backend.decode(clean, skip_special_tokens=skip_special)

    def hf_tokenizer(self) -> object:
        """The ``transformers`` fast tokenizer for this vocabulary (imports transformers: slow)."""
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(tokenizer_object=self.backend, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                       unk_token=UNK, clean_up_tokenization_spaces=False)

    def save(self, folder: str | Path) -> Path:
        """Write the Hugging Face tokenizer files into ``folder`` (created if needed), each one
        atomically. ``tokenizer_config.json`` names :data:`TOKENIZER_CLASS` so that transformers 4
        and 5 (and vLLM on either) load it through ``AutoTokenizer`` without network access."""
        from tltcore.atomic import write_text

        folder = Path(folder)
        with tempfile.TemporaryDirectory() as tmp:
            self.hf_tokenizer().save_pretrained(tmp)  # type: ignore[attr-defined]
            config = json.loads((Path(tmp) / "tokenizer_config.json").read_text(encoding="utf-8"))
            tokenizer_json = (Path(tmp) / "tokenizer.json").read_text(encoding="utf-8")
        config["tokenizer_class"] = TOKENIZER_CLASS
        config.pop("backend", None)
        specials = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "unk_token": UNK}
        write_text(folder / "tokenizer.json", tokenizer_json)
        write_text(folder / "tokenizer_config.json", json.dumps(config, indent=2, sort_keys=True) + "\n")
        write_text(folder / "special_tokens_map.json", json.dumps(specials, indent=2) + "\n")
        return folder


def build_tokenizer() -> TaskTokenizer:
    """The task tokenizer, built from the fixed vocabulary (no file, no network)."""
    return TaskTokenizer(_backend())


def load(folder: str | Path) -> TaskTokenizer:
    """Read ``tokenizer.json`` from a model folder written by :meth:`TaskTokenizer.save`."""
    path = Path(folder)
    path = path / "tokenizer.json" if path.is_dir() else path
    if not path.is_file():
        raise InputError("no tokenizer.json found", path=path)
    try:
        backend = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises plain Exception subclasses for bad JSON / schema
        first = reason(exc, 200)
        raise InputError(f"not a readable tokenizer.json ({first})", path=path) from None
    try:
        return TaskTokenizer(backend)
    except InputError as exc:
        raise InputError(exc.message, path=path) from None


__all__ = ["BOS", "EOS", "PAD", "SPECIALS", "UNK", "TaskTokenizer", "build_tokenizer", "load"]
