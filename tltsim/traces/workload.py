"""Turn a trace into RL-step workloads: the requests one synchronous rollout step must serve.

A per-step trace yields its own steps. A trace without steps (one snapshot of a policy, e.g.
AIME samples) is cut into steps by sampling ``prompts_per_step`` prompt groups per step, seeded, without
replacement until the pool is exhausted (then reshuffled), exactly how an RL data loader walks a
dataset epoch by epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tltsim.errors import InputError


@dataclass(frozen=True)
class StepWorkload:
    """The requests of one RL step. Arrays are aligned, one entry per response, in group order."""

    step: int
    source: str
    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray
    hit_cap: np.ndarray

    @property
    def n_requests(self) -> int:
        return len(self.response_tokens)

    @property
    def n_groups(self) -> int:
        return len(np.unique(self.group_ids))


def _to_step(df: pd.DataFrame, step: int, cap: int | None, default_prompt_tokens: int) -> StepWorkload:
    df = df.sort_values(["group_id", "sample_idx"], kind="stable")
    resp = df["response_tokens"].to_numpy(np.int64)
    hit = df["hit_cap"].to_numpy(bool)
    if cap is not None:
        hit = hit | (resp >= cap)
        resp = np.minimum(resp, cap)
    prompt = df["prompt_tokens"].fillna(default_prompt_tokens).to_numpy(np.int64)
    sources = df["source"].unique()
    return StepWorkload(step=step, source=",".join(map(str, sources)),
                        group_ids=df["group_id"].to_numpy(str), prompt_tokens=prompt,
                        response_tokens=resp, hit_cap=hit)


def _take_samples(df: pd.DataFrame, samples: int | None) -> pd.DataFrame:
    """The first ``samples`` responses (by sample_idx) of every group in every step."""
    if samples is None:
        return df
    if samples < 1:
        raise InputError(f"samples_per_prompt must be >= 1, got {samples}", field="samples_per_prompt")
    ordered = df.sort_values(["step", "group_id", "sample_idx"], kind="stable")
    return ordered.groupby(["step", "group_id"], sort=False).head(samples)


def build_workload(df: pd.DataFrame, *, steps: Sequence[int] | None = None, num_steps: int | None = None,
                   prompts_per_step: int | None = None, samples_per_prompt: int | None = None,
                   cap: int | None = None, default_prompt_tokens: int = 128,
                   seed: int = 0) -> list[StepWorkload]:
    """Steps of a trace as :class:`StepWorkload` objects.

    - ``steps``: keep only these trace steps (per-step traces).
    - ``prompts_per_step`` (G): with a per-step trace, subsample G groups in each step; with a trace
      that has one step, build ``num_steps`` steps (default: as many as the pool fills) of G groups.
    - ``samples_per_prompt`` (n): keep the first n samples of each group.
    - ``cap``: clip responses to ``cap`` tokens and mark them ``hit_cap`` (censored).
    - ``default_prompt_tokens``: used where the trace has no prompt length.
    """
    if cap is not None and cap < 1:
        raise InputError(f"cap must be >= 1, got {cap}", field="cap")
    if prompts_per_step is not None and prompts_per_step < 1:
        raise InputError(f"prompts_per_step must be >= 1, got {prompts_per_step}", field="prompts_per_step")
    rng = np.random.default_rng(seed)
    df = _take_samples(df, samples_per_prompt)
    trace_steps = sorted(df["step"].unique())
    per_step = len(trace_steps) > 1 or steps is not None
    if steps is not None:
        unknown = sorted(set(steps) - set(trace_steps))
        if unknown:
            raise InputError(f"steps {unknown} not in trace (has {trace_steps})", field="steps")
        df = df[df["step"].isin(steps)]
        trace_steps = sorted(set(steps))
    if per_step or prompts_per_step is None:
        out = []
        for s in trace_steps:
            part = df[df["step"] == s]
            if prompts_per_step is not None:
                groups = part["group_id"].unique()
                keep = rng.choice(groups, size=min(prompts_per_step, len(groups)), replace=False)
                part = part[part["group_id"].isin(keep)]
            out.append(_to_step(part, int(s), cap, default_prompt_tokens))
        return out
    return _sample_steps(df, num_steps, prompts_per_step, cap, default_prompt_tokens, rng)


def _sample_steps(df: pd.DataFrame, num_steps: int | None, g: int, cap: int | None,
                  default_prompt_tokens: int, rng: np.random.Generator) -> list[StepWorkload]:
    groups = df["group_id"].unique()
    if num_steps is None:
        num_steps = max(1, len(groups) // g)
    by_group = dict(tuple(df.groupby("group_id", sort=False)))
    pool: list = []
    out = []
    for s in range(num_steps):
        chosen: list = []
        while len(chosen) < min(g, len(groups)):
            if not pool:
                pool = list(rng.permutation(groups))
            cand = pool.pop()
            if cand not in chosen:
                chosen.append(cand)
        out.append(_to_step(pd.concat([by_group[c] for c in chosen]), s, cap, default_prompt_tokens))
    return out
