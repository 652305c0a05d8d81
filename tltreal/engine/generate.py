"""One generation run from plain settings: the code behind ``tlt real generate`` and the benchmark.

Builds the target (random weights from a seed, or safetensors), a drafter (random EAGLE layer,
oracle = the target itself, or none), the policy (``tltcore.policy.registry.make_policy`` spec),
random prompts, and runs the engine.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from tltcore.errors import InputError
from tltcore.input_files import check_input
from tltcore.model_config import ModelConfig
from tltcore.policy.base import MAX_DEPTH, MAX_TOPK, MAX_VERIFY, SDPolicy
from tltcore.policy.shapes import policy_shapes, tree_limits
from tltreal.engine.engine import Engine
from tltreal.engine.engine_config import EngineConfig
from tltreal.engine.memory_plan import HEADROOM, available_bytes, estimate
from tltreal.engine.requests import RunResult
from tltreal.model.sampling import SamplingParams
from tltreal.model.transformer import Transformer
from tltreal.model.weights import load_model, random_model
from tltreal.spec_decode.proposers import DraftModel, NgramProposer, OracleDrafter, random_drafter

MAX_DRAFT_NODES = (MAX_DEPTH - 1) * MAX_TOPK  # policies whose shapes are unknown: the SDConfig bounds

DRAFTERS = ("random", "oracle", "ngram", "none")  # ngram: model-free (TLT-Base), chains only
MAX_PROMPTS = 1_000_000
MAX_TOKENS = 10_000_000
MAX_BATCH = 65_536
MAX_TEMPERATURE = 100.0
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16}


@dataclass(frozen=True)
class GenerateSettings:
    """Everything a run depends on (written next to its results for reproduction)."""

    prompts: int = 8
    max_tokens: int = 64
    prompt_len: int = 16
    policy: str = "no-sd"
    drafter: str = "random"
    max_batch: int = 0  # 0: all prompts at once
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    dtype: str = "float32"
    weights: str | None = None
    init_std: float = 0.02
    prompts_file: str | None = None  # JSONL of token-id prompts (replaces the random ones)
    tokenizer: str | None = None  # local tokenizer folder, for {"text": ...} prompts
    ignore_eos: bool = False  # run every request to max_tokens (forced-length replay)

    def validate(self) -> None:
        """Every setting in range, each problem one line naming its option (the context length is
        checked by :func:`engine_config`, which knows the longest prompt)."""
        for name, value, lo, hi in (("--prompts", self.prompts, 1, MAX_PROMPTS),
                                    ("--max-tokens", self.max_tokens, 1, MAX_TOKENS),
                                    ("--prompt-len", self.prompt_len, 1, MAX_TOKENS),
                                    ("--batch", self.max_batch, 0, MAX_BATCH),
                                    ("--seed", self.seed, 0, 2**63 - 1)):
            if isinstance(value, bool) or not lo <= value <= hi:
                raise InputError(f"must be an integer in [{lo}, {hi:,}], got {value}", field=name)
        if self.drafter not in DRAFTERS:
            raise InputError(f"'{self.drafter}' is not one of {', '.join(DRAFTERS)}", field="--drafter")
        if self.dtype not in DTYPES:
            raise InputError(f"'{self.dtype}' is not one of {', '.join(DTYPES)}", field="--dtype")
        if not (math.isfinite(self.temperature) and 0 <= self.temperature <= MAX_TEMPERATURE):
            raise InputError(f"must be a number in [0, {MAX_TEMPERATURE}] (0 = greedy), got {self.temperature}",
                             field="--temperature")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise InputError(f"must be a number in (0, 1], got {self.top_p}", field="--top-p")

    def to_dict(self) -> dict:
        return asdict(self)


def read_prompts(path: str | Path, cfg: ModelConfig, tokenizer: str | None = None) -> list[list[int]]:
    """Prompts from a JSONL file, one per line: a list of token ids, ``{"tokens": [...]}``, or
    ``{"text": "..."}`` (needs ``tokenizer``, a local Hugging Face tokenizer folder). Every problem is
    one line naming the file and line."""
    import json

    path = Path(path)
    try:
        check_input(path, "--prompts-file", what="a JSONL file", missing_ok=True)
        lines = path.read_bytes().decode("utf-8-sig").splitlines()
    except FileNotFoundError:
        raise InputError("file not found", path=path, field="--prompts-file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read as UTF-8 text ({type(exc).__name__})", path=path) from None
    encode = None
    prompts: list[list[int]] = []
    for row, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            raise InputError("not a JSON value", path=path, row=row) from None
        if isinstance(item, dict) and "text" in item and isinstance(item["text"], str):
            if tokenizer is None:
                raise InputError("a text prompt needs --tokenizer (a local tokenizer folder)", path=path, row=row)
            if encode is None:
                encode = _tokenizer(tokenizer)
            item = encode(item["text"])
        elif isinstance(item, dict):
            item = item.get("tokens")
        if not isinstance(item, list) or not item or any(
                isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < cfg.vocab_size for t in item):
            raise InputError(f"expected a non-empty list of token ids in [0, {cfg.vocab_size}), or "
                             '{"tokens": [...]} or {"text": "..."}', path=path, row=row)
        prompts.append(item)
        if len(prompts) > MAX_PROMPTS:
            raise InputError(f"more than {MAX_PROMPTS:,} prompts", path=path)
    if not prompts:
        raise InputError("holds no prompts", path=path)
    return prompts


def _tokenizer(folder: str):
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as exc:  # missing folder, no tokenizer files, transformers absent: one line
        raise InputError(f"cannot load a tokenizer ({type(exc).__name__})", path=folder, field="--tokenizer") from None
    return lambda text: list(tok(text, add_special_tokens=False)["input_ids"])


def engine_config(cfg: ModelConfig, settings: GenerateSettings, policy: SDPolicy, prompt_len: int | None = None,
                  device: str = "cpu") -> EngineConfig:
    """The engine's capacity for these settings: tree buffers sized to the policy's largest draft
    shape, checked against the vocabulary and the free memory before anything is allocated."""
    shapes = policy_shapes(policy)
    if shapes and settings.drafter == "none":
        raise InputError(f"policy '{settings.policy}' speculates but --drafter is none; give --drafter random, "
                         "oracle or ngram, or --policy no-sd", field="--drafter")
    trees = sorted({s.name for s in shapes or () if s.topk != 1})
    if settings.drafter == "ngram" and (trees or shapes is None):
        raise InputError(f"--drafter ngram drafts chains (topk 1) but policy '{settings.policy}' may choose "
                         f"{', '.join(trees) or 'any tree'}; give chain shapes such as static:4_1_4",
                         field="--policy")
    widest = max((s.topk for s in shapes or ()), default=0)
    if widest > cfg.vocab_size:
        raise InputError(f"policy '{settings.policy}' drafts top-{widest} but the vocabulary has {cfg.vocab_size} "
                         "tokens", field="--policy")
    max_verify, max_nodes = tree_limits(shapes) if shapes is not None else (MAX_VERIFY, MAX_DRAFT_NODES)
    longest = prompt_len if prompt_len is not None else settings.prompt_len
    if longest + settings.max_tokens > cfg.max_position_embeddings:
        raise InputError(f"the longest prompt ({longest} tokens) + {settings.max_tokens} new tokens exceeds the "
                         f"model's context of {cfg.max_position_embeddings:,} tokens (max_position_embeddings); "
                         "lower --max-tokens or --prompt-len", field="--max-tokens")
    engine_cfg = EngineConfig(max_batch=settings.max_batch or settings.prompts,
                              max_len=longest + settings.max_tokens + 1,
                              max_verify=max(max_verify, 1), max_draft_nodes=max(max_nodes, 1),
                              eos_token_ids=() if settings.ignore_eos else cfg.eos_token_ids)
    need = estimate(cfg, dtype_bytes=DTYPES[settings.dtype].itemsize, max_batch=engine_cfg.max_batch,
                    max_len=engine_cfg.max_len, max_verify=engine_cfg.max_verify,
                    max_draft_nodes=engine_cfg.max_draft_nodes, drafter=settings.drafter == "random")
    free = available_bytes(device)
    if free is not None and need.total > HEADROOM * free:
        raise InputError(f"this run needs {need.describe()} but {free / 1e9:.1f} GB is free on {device}; lower "
                         "--batch, --prompts, --max-tokens or --prompt-len, or use a smaller --dtype",
                         field="--batch")
    return engine_cfg


def build_target(cfg: ModelConfig, settings: GenerateSettings) -> Transformer:
    dtype = DTYPES[settings.dtype]
    if settings.weights:
        return load_model(cfg, settings.weights, dtype=dtype)
    return random_model(cfg, seed=settings.seed, dtype=dtype, std=settings.init_std)


def build_drafter(kind: str, target: Transformer, seed: int) -> DraftModel | None:
    if kind == "oracle":
        return OracleDrafter(target)
    if kind == "random":
        return random_drafter(target, seed=seed + 1)
    return None


def random_prompts(n: int, prompt_len: int, vocab: int, seed: int) -> list[list[int]]:
    """``n`` prompts of random tokens, lengths uniform in ``[ceil(prompt_len / 2), prompt_len]``."""
    g = torch.Generator().manual_seed(seed)
    lo = (prompt_len + 1) // 2
    lengths = torch.randint(lo, prompt_len + 1, (n,), generator=g).tolist()
    return [torch.randint(0, vocab, (k,), generator=g).tolist() for k in lengths]


def generate(cfg: ModelConfig, settings: GenerateSettings, target: Transformer | None = None) -> RunResult:
    """Run ``settings.prompts`` random prompts through the engine under ``settings.policy``."""
    from tltcore.policy.registry import make_policy

    given = read_prompts(settings.prompts_file, cfg, settings.tokenizer) if settings.prompts_file else None
    if given is not None:
        settings = replace(settings, prompts=len(given))
    settings.validate()
    policy = make_policy(settings.policy, seed=settings.seed)
    longest = max(len(p) for p in given) if given is not None else settings.prompt_len
    engine_cfg = engine_config(cfg, settings, policy, prompt_len=longest)  # sizes checked before any allocation
    prompts = given if given is not None else random_prompts(settings.prompts, settings.prompt_len, cfg.vocab_size,
                                                             settings.seed)
    target = target if target is not None else build_target(cfg, settings)
    # A policy that never drafts gets no drafter (nothing built, nothing printed as if it were used).
    speculates = policy_shapes(policy) != ()
    ngram = speculates and settings.drafter == "ngram"
    drafter = build_drafter(settings.drafter, target, settings.seed) if speculates and not ngram else None
    engine = Engine(target, policy, drafter, engine_cfg, proposer=NgramProposer() if ngram else None)
    for i, prompt in enumerate(prompts):
        engine.add_request(prompt, settings.max_tokens,
                           SamplingParams(settings.temperature, settings.top_p, seed=settings.seed * 100_003 + i))
    try:
        return engine.run()
    except ValueError as exc:  # e.g. a policy choosing SD with no drafter
        raise InputError(str(exc)) from None


def tokens_jsonl(result: RunResult, eos_token_ids: tuple[int, ...]) -> str:
    """One JSON line per request, in submission order: prompt, generated tokens, why it stopped."""
    import json

    lines = []
    for rid in sorted(result.outputs):
        out = result.outputs[rid]
        finish = "eos" if out and out[-1] in eos_token_ids else "length"
        lines.append(json.dumps({"request": rid, "prompt": result.prompts[rid], "tokens": out, "finish": finish}))
    return "\n".join(lines) + "\n"


def write_results(result: RunResult, settings: GenerateSettings, cfg: ModelConfig, out: Path) -> None:
    """Event log (Parquet, or CSV if ``out`` ends in .csv), the generated tokens as JSONL
    (``<stem>.tokens.jsonl``) and, last, the resolved settings as JSON (``<stem>.config.json``) with
    the SHA-256 of the other two: that record is how a later run tells the companion files tlt wrote
    from a user's files of the same name (:func:`tltreal.engine.outputs.check_generate_outputs`). Written last, so
    a run killed before it leaves files the next run refuses to overwrite without --force: the safe side."""
    import json

    from tltcore.atomic import write_text, write_with
    from tltcore.input_files import sha256_of
    from tltreal.engine.outputs import GENERATE_COMMAND, generate_outputs

    files = generate_outputs(out)
    eos = () if settings.ignore_eos else cfg.eos_token_ids
    write_text(files["tokens"], tokens_jsonl(result, eos))
    if out.suffix == ".csv":
        write_with(out, lambda tmp: result.events.to_csv(tmp, index=False))
    else:
        write_with(out, lambda tmp: result.events.to_parquet(tmp, index=False))
    resolved = {"tool": "tlt", "command": GENERATE_COMMAND,
                "files": {files[k].name: sha256_of(files[k]) for k in ("events", "tokens")},
                "settings": settings.to_dict(), "model": cfg.to_hf_dict()}
    write_text(files["config"], json.dumps(resolved, indent=2) + "\n")
