"""One generation run from plain settings: the code behind ``tlt real generate`` and the benchmark.

Builds the target (random weights from a seed, or safetensors), a drafter (random EAGLE layer,
oracle = the target itself, or none), the policy (``tltsim.policy.registry.make_policy`` spec),
random prompts, and runs the engine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from tltreal.config import ModelConfig
from tltreal.drafter import DraftModel, OracleDrafter, random_drafter
from tltreal.engine import Engine, EngineConfig, RunResult
from tltreal.model import Transformer, load_model, random_model
from tltreal.sampling import SamplingParams
from tltsim.errors import InputError

DRAFTERS = ("random", "oracle", "none")
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

    def validate(self) -> None:
        if self.prompts < 1 or self.max_tokens < 1 or self.prompt_len < 1:
            raise InputError("prompts, max-tokens and prompt-len must be >= 1")
        if self.drafter not in DRAFTERS:
            raise InputError(f"drafter '{self.drafter}' is not one of {DRAFTERS}", field="drafter")
        if self.dtype not in DTYPES:
            raise InputError(f"dtype '{self.dtype}' is not one of {tuple(DTYPES)}", field="dtype")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise InputError("temperature must be >= 0 and top-p in (0, 1]")

    def to_dict(self) -> dict:
        return asdict(self)


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
    from tltsim.policy.registry import make_policy

    settings.validate()
    policy = make_policy(settings.policy, seed=settings.seed)
    target = target if target is not None else build_target(cfg, settings)
    drafter = build_drafter(settings.drafter, target, settings.seed)
    batch = settings.max_batch or settings.prompts
    engine = Engine(target, policy, drafter,
                    EngineConfig(max_batch=batch, max_len=settings.prompt_len + settings.max_tokens + 1))
    for i, prompt in enumerate(random_prompts(settings.prompts, settings.prompt_len, cfg.vocab_size,
                                              settings.seed)):
        engine.add_request(prompt, settings.max_tokens,
                           SamplingParams(settings.temperature, settings.top_p, seed=settings.seed * 100_003 + i))
    try:
        return engine.run()
    except ValueError as exc:  # e.g. a policy choosing SD with no drafter
        raise InputError(str(exc)) from None


def write_results(result: RunResult, settings: GenerateSettings, cfg: ModelConfig, out: Path) -> None:
    """Event log (Parquet, or CSV if ``out`` ends in .csv) plus the resolved settings as JSON."""
    import json

    from tltsim.atomic import write_text, write_with

    if out.suffix == ".csv":
        write_with(out, lambda tmp: result.events.to_csv(tmp, index=False))
    else:
        write_with(out, lambda tmp: result.events.to_parquet(tmp, index=False))
    resolved = {"settings": settings.to_dict(), "model": cfg.to_hf_dict()}
    write_text(out.with_name(out.stem + ".config.json"), json.dumps(resolved, indent=2) + "\n")
