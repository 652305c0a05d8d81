"""Turn a trace into RL-step workloads: the requests one synchronous rollout step must serve.

A per-step trace yields its own steps. A trace without steps (one snapshot of a policy, e.g. AIME
samples) is cut into steps by sampling ``prompts_per_step`` prompt groups per step, seeded, without
replacement until the pool is exhausted (then reshuffled), exactly how an RL data loader walks a
dataset epoch by epoch. Requests keep the trace's row order; which worker serves which group is
decided later by :func:`tltsim.rollout.deal` (a seeded shuffle by default).

**Censored lengths.** A response that hit the generation cap (``hit_cap``) was cut there: its
recorded length is the cap, give or take tokenizer accounting (15,998 vs 16,000), not its natural
length. With ``snap_capped`` (the default) every capped response is simulated at exactly its
source's cap, so capped responses finish together as they do in the engine that produced the
trace; the cap is ``cap`` when given, else the row's ``response_cap`` column, else the longest
capped response of the same source. :attr:`StepWorkload.capped` counts them; run summaries show it.

**Expanding one-sample traces** (``expand_samples = n``). GRPO-style steps generate n samples per
prompt, and a step's tail depends on how much sibling lengths spread. Dispersion model, fitted on
the multi-sample traces in ``../shared/traces``: within a prompt group, log response lengths are
normal around the group's log-median with standard deviation ``sigma``. The pooled within-group
standard deviation of log lengths (uncapped rows, groups of 8) is 0.326 on
``r1distill_qwen1.5b_aime_8samples`` (AIME, R1-distill) and 0.326 on PolyTrace's
``verl_video_qwen2.5-vl-7b``, 0.237 on its cap-saturated ``rllm_deepcoder_14b_16k`` and 0.81 on the
multi-turn ``search_r1`` run; :data:`DEFAULT_DISPERSION_SIGMA` = 0.33 is the single-turn reasoning
value. Given one observed sample ``x`` of a prompt, its group's log-median is drawn as
``log x - sigma * u`` and the ``n - 1`` siblings as ``log-median + sigma * z`` (u, z standard
normal, seeded), rounded and clipped to ``[1, cap]`` (marked ``hit_cap`` at the cap; without a cap
only the readers' 10^7 bound applies). The observed sample stays sample 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tltcore.errors import InputError

DEFAULT_DISPERSION_SIGMA = 0.33
MAX_SAMPLES_PER_PROMPT = 1024
MAX_RESPONSE_TOKENS = 10**7  # the trace readers' bound: far above any model's context


@dataclass(frozen=True)
class StepWorkload:
    """The requests of one RL step. Arrays are aligned, one entry per response, in trace order."""

    step: int
    source: str
    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray
    hit_cap: np.ndarray
    #: The response cap the engine ran these requests under (its max_new_tokens, veRL's
    #: ``response_length``): the largest of the rows' caps (:func:`_known_caps`), None when a row's
    #: source declares none and none of its responses hit one. Knowledge every engine has (the
    #: simulator reads it from the trace); ``cost-aware`` prices the longest step it allows.
    cap: int | None = None

    @property
    def n_requests(self) -> int:
        return len(self.response_tokens)

    @property
    def n_groups(self) -> int:
        return len(np.unique(self.group_ids))

    @property
    def capped(self) -> int:
        """Responses cut at the generation cap (censored lengths, simulated at the cap)."""
        return int(np.count_nonzero(self.hit_cap))


def _known_caps(df: pd.DataFrame, cap: int | None) -> np.ndarray:
    """Per row, its source's own cap (the row's ``response_cap``, else the longest response the trace
    marks capped in that source), lowered to ``cap`` when the scenario caps harder; NaN where none is
    known. A capped response is snapped to it. ``response_cap`` is numeric here (NaN where unparsed):
    :func:`build_workload` parses it once for every step."""
    marked = df["response_tokens"].where(df["hit_cap"])
    own = marked.groupby(df["source"]).transform("max")
    if "response_cap" in df.columns:
        declared = df["response_cap"]
        own = declared.where(declared.notna(), own)
    own = own.to_numpy(np.float64)
    if cap is not None:
        own = np.where(np.isnan(own), cap, np.minimum(own, cap))
    return own


def _to_step(df: pd.DataFrame, step: int, cap: int | None, snap_capped: bool,
             default_prompt_tokens: int) -> StepWorkload:
    resp = df["response_tokens"].to_numpy(np.int64)
    hit = df["hit_cap"].to_numpy(bool)
    if cap is not None:
        hit = hit | (resp >= cap)
        resp = np.minimum(resp, cap)
    caps = _known_caps(df, cap)
    if snap_capped and hit.any():  # a capped row's cap is always known: its own source marks it, or `cap` cut it
        resp = np.where(hit, caps, resp).astype(np.int64)
    prompt = df["prompt_tokens"].fillna(default_prompt_tokens).to_numpy(np.int64)
    sources = df["source"].unique()
    known = len(caps) > 0 and not np.isnan(caps).any()
    return StepWorkload(step=step, source=",".join(map(str, sources)),
                        group_ids=df["group_id"].to_numpy(str), prompt_tokens=prompt,
                        response_tokens=resp, hit_cap=hit, cap=int(caps.max()) if known else None)


def _take_samples(df: pd.DataFrame, samples: int | None) -> pd.DataFrame:
    """The first ``samples`` responses (by sample_idx) of every group in every step, trace order kept."""
    if samples is None:
        return df
    if samples < 1:
        raise InputError(f"samples_per_prompt must be >= 1, got {samples}", field="samples_per_prompt")
    rank = df.groupby(["step", "group_id"], sort=False)["sample_idx"].rank(method="first")
    return df[rank <= samples]


def expand_samples(df: pd.DataFrame, n: int, *, sigma: float = DEFAULT_DISPERSION_SIGMA, cap: int | None = None,
                   seed: int = 0) -> pd.DataFrame:
    """Every one-sample group grown to ``n`` samples by the dispersion model (module docstring)."""
    if not 1 <= n <= MAX_SAMPLES_PER_PROMPT:
        raise InputError(f"must be in [1, {MAX_SAMPLES_PER_PROMPT}], got {n}", field="expand_samples")
    if not (np.isfinite(sigma) and 0 <= sigma <= 5):
        raise InputError(f"must be in [0, 5], got {sigma}", field="dispersion_sigma")
    sizes = df.groupby(["step", "group_id"], sort=False)["response_tokens"].transform("size")
    if (sizes > 1).any():
        raise InputError(f"the trace already has up to {int(sizes.max())} samples per prompt; expand_samples "
                         "grows one-sample traces (use samples to take fewer)", field="expand_samples")
    if n == 1:
        return df
    rng = np.random.default_rng([seed, 0x657870])
    x = df["response_tokens"].to_numpy(np.float64)
    log_median = np.log(x) - sigma * rng.standard_normal(len(x))
    siblings = np.exp(log_median[:, None] + sigma * rng.standard_normal((len(x), n - 1)))
    upper = cap if cap is not None else MAX_RESPONSE_TOKENS
    lengths = np.concatenate([x[:, None], np.clip(np.rint(siblings), 1, upper)], axis=1)
    out = df.loc[df.index.repeat(n)].copy()
    out["sample_idx"] = np.tile(np.arange(n), len(df))
    out["response_tokens"] = lengths.ravel().astype(np.int64)
    born = np.tile(np.arange(n) > 0, len(df))
    out["hit_cap"] = out["hit_cap"].to_numpy(bool) | (born & (out["response_tokens"].to_numpy() >= upper))
    return out.reset_index(drop=True)


def build_workload(df: pd.DataFrame, *, steps: Sequence[int] | None = None, num_steps: int | None = None,
                   prompts_per_step: int | None = None, samples_per_prompt: int | None = None,
                   expand_to: int | None = None, dispersion_sigma: float = DEFAULT_DISPERSION_SIGMA,
                   cap: int | None = None, snap_capped: bool = True, default_prompt_tokens: int = 128,
                   seed: int = 0) -> list[StepWorkload]:
    """Steps of a trace as :class:`StepWorkload` objects.

    - ``steps``: keep only these trace steps (per-step traces).
    - ``prompts_per_step`` (G): with a per-step trace, subsample G groups in each step; with a trace
      that has one step, build ``num_steps`` steps (default: as many as the pool fills) of G groups.
    - ``samples_per_prompt`` (n): keep the first n samples of each group; ``expand_to``: grow
      one-sample groups to that many samples (:func:`expand_samples`).
    - ``cap``: clip responses to ``cap`` tokens and mark them ``hit_cap`` (censored);
      ``snap_capped``: simulate every capped response at exactly its cap (module docstring).
    - ``default_prompt_tokens``: used where the trace has no prompt length.
    """
    if cap is not None and cap < 1:
        raise InputError(f"cap must be >= 1, got {cap}", field="cap")
    if prompts_per_step is not None and prompts_per_step < 1:
        raise InputError(f"prompts_per_step must be >= 1, got {prompts_per_step}", field="prompts_per_step")
    rng = np.random.default_rng(seed)
    df = _take_samples(df, samples_per_prompt)
    if expand_to is not None:
        df = expand_samples(df, expand_to, sigma=dispersion_sigma, cap=cap, seed=seed)
    if "response_cap" in df.columns:  # parsed once for every step's _known_caps (per step: a third of a 100-step build)
        df = df.assign(response_cap=pd.to_numeric(df["response_cap"], errors="coerce"))
    trace_steps = sorted(df["step"].unique())
    per_step = len(trace_steps) > 1 or steps is not None
    if steps is not None:
        unknown = sorted(set(steps) - set(trace_steps))
        if unknown:
            raise InputError(f"steps {unknown} not in trace (has {trace_steps[:20]})", field="steps")
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
            out.append(_to_step(part, int(s), cap, snap_capped, default_prompt_tokens))
        return out
    return _sample_steps(df, num_steps, prompts_per_step, cap, snap_capped, default_prompt_tokens, rng)


def _sample_steps(df: pd.DataFrame, num_steps: int | None, g: int, cap: int | None, snap_capped: bool,
                  default_prompt_tokens: int, rng: np.random.Generator) -> list[StepWorkload]:
    groups = df["group_id"].unique()
    if num_steps is None:
        num_steps = max(1, len(groups) // g)
    # row positions of each group (trace order within a group): a step is one index gather of the
    # frame, not a concatenation of hundreds of per-group frames
    codes, uniq = pd.factorize(df["group_id"], sort=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(uniq)))])
    code_of = {g: i for i, g in enumerate(uniq)}
    pool: list = []
    out = []
    for s in range(num_steps):
        chosen: list = []
        seen: set = set()
        while len(chosen) < min(g, len(groups)):
            if not pool:
                pool = list(rng.permutation(groups))
            cand = pool.pop()
            if cand not in seen:
                seen.add(cand)
                chosen.append(cand)
        rows = np.concatenate([order[bounds[c]:bounds[c + 1]] for c in (code_of[x] for x in chosen)])
        out.append(_to_step(df.iloc[rows], s, cap, snap_capped, default_prompt_tokens))
    return out
