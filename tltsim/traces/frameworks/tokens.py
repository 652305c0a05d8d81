"""Token counts from text, with the user's own tokenizer: for dumps that hold text only (verl).

Never estimated from characters: without a tokenizer a text-only dump is refused with one line
saying what to pass. The tokenizer is a local ``tokenizer.json`` (or a folder holding one, such as
a Hugging Face model folder) read with the ``tokenizers`` package; nothing is downloaded.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from tltcore.errors import InputError

TOKENIZER_FIELD = "trace.tokenizer"


def tokenizer_file(path: str | Path) -> Path:
    """The ``tokenizer.json`` that ``path`` names (the file, or a folder holding it)."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise InputError("no tokenizer.json there (give the policy model's tokenizer.json, or its folder)",
                         path=Path(path), field=TOKENIZER_FIELD)
    return p


@lru_cache(maxsize=2)
def _load(path: str, mtime_ns: int) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise InputError("counting tokens needs the 'tokenizers' package: pip install tokenizers", path=path,
                         field=TOKENIZER_FIELD) from None
    try:
        return Tokenizer.from_file(path)
    except Exception as exc:  # the Rust side raises plain Exception on any malformed file
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise InputError(f"cannot read the tokenizer: {first}", path=path, field=TOKENIZER_FIELD) from None


def count_tokens(texts: list[str], tokenizer: str | Path) -> list[int]:
    """Tokens in each text, without special tokens added (the text already holds what was decoded)."""
    p = tokenizer_file(tokenizer)
    tok = _load(str(p), p.stat().st_mtime_ns)
    return [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]
