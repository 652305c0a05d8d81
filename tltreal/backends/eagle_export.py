"""Export the target and its trained EAGLE drafter as folders vLLM loads (DESIGN §2.3).

``vllm.LLM(model=TARGET, speculative_config={"method": "eagle", "model": EAGLE, ...})``:

* **TARGET** is a Hugging Face Llama folder: ``config.json`` (:meth:`ModelConfig.to_hf_dict`, the
  project's one writer of it), ``model.safetensors`` (the engine's names are HF's) and a tokenizer
  (copied from a given folder, e.g. the project's task tokenizer, or :func:`write_id_tokenizer`).
* **EAGLE** is an EAGLE-1 checkpoint in the layout of the original EAGLE releases, which vLLM's
  ``EagleLlamaForCausalLM`` (``model_executor/models/llama_eagle.py``) reads: a plain Llama
  ``config.json`` with the target's shape and ``num_hidden_layers = 1`` (vLLM wraps it in its
  ``EAGLEConfig`` and renames the architecture ``EagleLlamaForCausalLM``), and weights ``fc.weight``
  ``[H, 2H]`` and ``layers.0.*`` with no ``input_layernorm`` (vLLM's first EAGLE layer has none
  either) and no ``embed_tokens`` / ``lm_head``: without them vLLM shares the target's, exactly the
  frozen sharing of :class:`~tltreal.spec_decode.proposers.eagle.EagleDrafter`. Its ``fc`` input order is
  ``[embed ; hidden]`` and its hidden input is the target's last hidden state after the final norm,
  as ours.

vLLM's EAGLE-1 exists for Llama targets only (there is no ``EagleQwen2ForCausalLM``), so a Qwen2
target is refused with one line. Each folder is built aside and swapped in whole
(:func:`tltcore.atomic.atomic_dir`): a failed export leaves no half-written model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tltcore.atomic import atomic_dir
from tltcore.errors import InputError
from tltcore.model_config import ModelConfig
from tltreal.model.transformer import Transformer
from tltreal.model.weights import save_model
from tltreal.spec_decode.proposers.eagle import EagleDrafter

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "added_tokens.json")
WEIGHTS = "model.safetensors"


def _check_llama(cfg: ModelConfig) -> None:
    if cfg.model_type != "llama":
        raise InputError(f"vLLM's EAGLE-1 drafter (EagleLlamaForCausalLM) exists for Llama targets only, not "
                         f"{cfg.model_type!r}", field="model_type")


def _write_config(folder: Path, hf: dict) -> None:
    (folder / "config.json").write_text(json.dumps(hf, indent=1) + "\n", encoding="utf-8")


def eagle_config(cfg: ModelConfig) -> dict:
    """The EAGLE-1 drafter's ``config.json``: the target's Llama config with one layer."""
    _check_llama(cfg)
    hf = cfg.to_hf_dict()
    hf.update(num_hidden_layers=1, architectures=["LlamaForCausalLM"], dtype="float32")
    return hf


def write_id_tokenizer(folder: str | Path, vocab_size: int, *, eos_token_id: int | None = None,
                       model_max_length: int = 1 << 20) -> Path:
    """A minimal offline tokenizer: token ``i`` is the word ``t<i>`` (WordLevel over whitespace), so
    ids round-trip through text (``"t3 t17"``) and ``AutoTokenizer``/vLLM load it with no network.
    For exported targets that have no tokenizer of their own (random or synthetic-task weights)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(folder / "tokenizer.json"))
    config: dict = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
                    "unk_token": "t0", "clean_up_tokenization_spaces": False}
    if eos_token_id is not None:
        config["eos_token"] = f"t{eos_token_id}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    return folder


def _copy_tokenizer(src: Path, dest: Path) -> None:
    found = [src / n for n in TOKENIZER_FILES if (src / n).is_file()]
    if not any(p.name in ("tokenizer.json", "tokenizer.model", "vocab.json") for p in found):
        raise InputError("no tokenizer files (tokenizer.json, tokenizer.model or vocab.json) in it", path=src,
                         field="tokenizer")
    for p in found:
        shutil.copyfile(p, dest / p.name)


def export_target(target: Transformer, folder: str | Path, *, tokenizer: str | Path | None = None,
                  force: bool = False) -> Path:
    """The target as an HF Llama folder (module docstring); ``tokenizer``: a folder to copy the
    tokenizer from (default: :func:`write_id_tokenizer`)."""
    cfg = target.cfg
    _check_llama(cfg)
    with atomic_dir(folder, kind="model", force=force, field="target") as tmp:
        hf = cfg.to_hf_dict()
        hf["dtype"] = str(target.dtype).removeprefix("torch.")
        _write_config(tmp, hf)
        save_model(target, tmp / WEIGHTS)
        if tokenizer is not None:
            _copy_tokenizer(Path(tokenizer), tmp)
        else:
            eos = cfg.eos_token_ids[0] if cfg.eos_token_ids else None
            write_id_tokenizer(tmp, cfg.vocab_size, eos_token_id=eos, model_max_length=cfg.max_position_embeddings)
    return Path(folder)


def export_eagle(drafter: EagleDrafter, folder: str | Path, *, force: bool = False) -> Path:
    """The drafter as an EAGLE-1 checkpoint folder (module docstring)."""
    from safetensors.torch import save_file

    hf = eagle_config(drafter.cfg)
    hf["dtype"] = str(drafter.dtype).removeprefix("torch.")
    state = {k: v.detach().to("cpu").contiguous() for k, v in drafter.state_dict().items()}
    if any(k.startswith(("embed_tokens", "lm_head")) or "input_layernorm" in k for k in state):
        raise InputError("drafter state holds shared or missing-in-vLLM weights", field="drafter")
    with atomic_dir(folder, kind="model", force=force, field="eagle") as tmp:
        _write_config(tmp, hf)
        save_file(state, str(tmp / WEIGHTS), metadata={"format": "pt"})
    return Path(folder)


def export_for_vllm(target: Transformer, drafter: EagleDrafter, folder: str | Path, *,
                    tokenizer: str | Path | None = None, force: bool = False) -> tuple[Path, Path]:
    """Both folders under ``folder``: ``target/`` and ``eagle/``; returns their paths."""
    if drafter.__dict__["_target"] is not target:
        raise InputError("the drafter was built on another target (its embedding and LM head are that one's)",
                         field="drafter")
    folder = Path(folder)
    return (export_target(target, folder / "target", tokenizer=tokenizer, force=force),
            export_eagle(drafter, folder / "eagle", force=force))


__all__ = ["eagle_config", "export_eagle", "export_for_vllm", "export_target", "write_id_tokenizer"]
