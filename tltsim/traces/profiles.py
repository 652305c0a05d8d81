"""Parametric long-tail profiles built from published statistics, for when no trace file exists.

The Intern-S1 production math RLVR response-length mixture: four normal components with the
published weights, output means/sds and input means. The component is drawn per prompt group (a
group's samples share a problem type); each response length is drawn from it and clipped to
``[1, cap]``. Clipped responses are marked ``hit_cap`` — that is what an RL rollout with a length cap
does to them. Input lengths are normal around the published means with a 25% coefficient of
variation (the sds were not published: an assumption), at least 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tltsim.traces.schema import TRACE_COLUMNS


@dataclass(frozen=True)
class MixtureProfile:
    """A normal mixture of response lengths with per-component input means."""

    name: str
    weights: tuple[float, ...]
    output_means: tuple[float, ...]
    output_sds: tuple[float, ...]
    input_means: tuple[float, ...]
    input_cv: float = 0.25

    def sample(self, n_groups: int, samples: int = 8, *, cap: int = 32768, steps: int = 1,
               seed: int = 0) -> pd.DataFrame:
        """``steps`` RL steps of ``n_groups`` prompt groups x ``samples`` responses, canonical schema."""
        rng = np.random.default_rng(seed)
        w = np.asarray(self.weights) / np.sum(self.weights)
        g_total = n_groups * steps
        comp = rng.choice(len(w), size=g_total, p=w)
        comp_r = np.repeat(comp, samples)
        out = rng.normal(np.take(self.output_means, comp_r), np.take(self.output_sds, comp_r))
        resp = np.clip(np.rint(out), 1, cap).astype(np.int64)
        in_mean = np.take(self.input_means, comp)
        prompt = np.maximum(1, np.rint(rng.normal(in_mean, self.input_cv * in_mean))).astype(np.int64)
        group = np.arange(g_total)
        step = group // n_groups
        ids = [f"s{s}_g{g}" for s, g in zip(step, group, strict=True)]
        df = pd.DataFrame({
            "source": f"profile/{self.name}",
            "step": np.repeat(step, samples),
            "prompt_id": np.repeat(ids, samples),
            "group_id": np.repeat(ids, samples),
            "sample_idx": np.tile(np.arange(samples), g_total),
            "prompt_tokens": np.repeat(prompt, samples),
            "response_tokens": resp,
            "hit_cap": np.rint(out) >= cap,
        })
        return df.astype(TRACE_COLUMNS)


INTERN_S1_MATH = MixtureProfile(
    name="intern_s1_math",
    weights=(0.359, 0.074, 0.373, 0.194),
    output_means=(4959, 12720, 9175, 17655),
    output_sds=(2192, 6067, 3416, 5267),
    input_means=(113, 266, 145, 138),
)

PROFILES = {INTERN_S1_MATH.name: INTERN_S1_MATH}
