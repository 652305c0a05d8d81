"""The messages between the real Spot Trainer's coordinator (:mod:`tltreal.spot.trainer`) and its
worker processes (:mod:`tltreal.spot.worker_process`), and what they carry: the rollout request,
the worker's config, samples as plain arrays.

**Protocol.** Commands arrive on a ``multiprocessing.Queue`` (the coordinator is its only writer, so
a dead worker cannot wedge it); replies leave on the write end of a one-way ``Pipe`` that only the
worker holds, so if it dies mid-message the coordinator reads end-of-file instead of blocking. Every
message is a small frozen dataclass of plain Python and numpy values (no torch tensors: torch would
pass those as shared-memory handles that die with their sender).

=================================== ===================================================================
command                             reply
=================================== ===================================================================
(process start)                     :class:`Ready`
:class:`LoadPolicy` (weights file)  :class:`Loaded` ``what="policy"`` with a digest of the weights
:class:`LoadDrafter` (ckpt folder)  :class:`Loaded` ``what="drafter"``, the version and digest loaded
:class:`Generate` (requests)        one :class:`Finished` per response *as soon as it finishes*
                                    (tokens, the target's hidden states, the finish time), then
                                    :class:`Generated` (the worker is released: its engine is gone)
:class:`Train` (samples)            :class:`Trained` once the session stopped (preempted or done)
                                    and its last checkpoint write is on disk
:class:`AddSamples` (while training) nothing: the samples join the session's buffer
:class:`Shutdown`                   the process exits
(busy, silent for ``HEARTBEAT_S``)  :class:`Alive` (``tltreal.spot.worker_process.HEARTBEAT_S``)
=================================== ===================================================================

Any exception becomes one :class:`Failed` reply (message + traceback) and the process exits, so the
coordinator raises one clear error instead of waiting forever; :class:`Alive` heartbeats let it tell
a long generation or session from a hung worker.

Times are ``time.monotonic()`` stamps: one system-wide clock on Linux, so the coordinator can
compare them with its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tltreal.rl.drafter_train import DrafterTrainerConfig
from tltreal.spot.sample_buffer import Sample

#: Torch dtypes a worker may run in, by name (the config crosses the process boundary as text).
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


# ---- the contract's request ------------------------------------------------------------------------
@dataclass(frozen=True)
class RolloutRequest:
    """One response to generate: ``prompt`` token ids, at most ``max_new_tokens`` new tokens; ``group``
    is the prompt it answers (GRPO's group); ``seed`` seeds its own sampler (``temperature`` 0 is
    greedy)."""

    rid: int
    prompt: tuple[int, ...]
    max_new_tokens: int
    group: int
    seed: int
    temperature: float = 1.0


# ---- configuration ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerConfig:
    """What a worker needs to know for its life (everything picklable: it crosses ``spawn``)."""

    worker: int
    model_config: Any  # tltcore.model_config.ModelConfig
    dtype: str
    sd_policy: str
    max_batch: int
    max_len: int
    eos_token_ids: tuple[int, ...]
    trainer: DrafterTrainerConfig
    checkpoint_dir: str
    initial_drafter: str  # safetensors file with the version-0 drafter (used while no checkpoint exists)
    max_train_steps: int
    checkpoint_every: int
    window_tokens: int
    keep_steps: int
    keep_checkpoints: int = 3
    seed: int = 0


# ---- messages: commands ----------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadPolicy:
    path: str


@dataclass(frozen=True)
class LoadDrafter:
    """Load the latest committed drafter checkpoint (the initial drafter if none exists)."""


@dataclass(frozen=True)
class Generate:
    step: int
    requests: tuple[RolloutRequest, ...]


@dataclass(frozen=True)
class WireSample:
    """A :class:`~tltreal.spot.sample_buffer.Sample` as plain arrays (tokens ``[n]``, hidden ``[n, H]``)."""

    tokens: np.ndarray
    hidden: np.ndarray
    step: int
    prompt_len: int = 0


@dataclass(frozen=True)
class Train:
    """Start a session on ``samples``; ``streaming``: more arrive as :class:`AddSamples` (spot), so
    an empty buffer means wait, not stop."""

    step: int
    samples: tuple[WireSample, ...]
    streaming: bool = True


@dataclass(frozen=True)
class AddSamples:
    samples: tuple[WireSample, ...]


@dataclass(frozen=True)
class Shutdown:
    pass


# ---- messages: replies -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Ready:
    worker: int
    pid: int


@dataclass(frozen=True)
class Loaded:
    worker: int
    what: str  # "policy" | "drafter"
    version: int  # drafter version (0 for the initial drafter; -1 for a policy)
    digest: str


@dataclass(frozen=True)
class Finished:
    worker: int
    rid: int
    output: tuple[int, ...]
    hidden: np.ndarray  # [len(prompt) + len(output), H]: the target's last hidden state at every token
    t: float


@dataclass(frozen=True)
class Generated:
    """The worker's share is done and its engine freed: it is released."""

    worker: int
    requests: int
    start_t: float
    released_t: float
    accept_length: float
    sd_iterations: int  # decode iterations that verified a draft
    sd_tokens: int  # tokens emitted by those iterations (bonus included)
    sd_request_iterations: int  # sum of their batch sizes


@dataclass(frozen=True)
class Trained:
    worker: int
    start_t: float
    end_t: float  # optimizer steps stopped here (before waiting for the last checkpoint write)
    committed_t: float  # the last checkpoint write was on disk here
    steps: int
    windows: int
    tokens: int
    versions: tuple[int, ...]
    preempted: bool
    losses: tuple[float, ...] = ()


@dataclass(frozen=True)
class Alive:
    worker: int


@dataclass(frozen=True)
class Failed:
    worker: int
    message: str
    traceback: str


Reply = Ready | Loaded | Finished | Generated | Trained | Alive | Failed


# ---- helpers shared with the coordinator -----------------------------------------------------------
def weights_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over names and bytes (sorted by name): equal digests, equal weights."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def wire_array(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()  # numpy has no bfloat16


def to_wire(sample: Sample) -> WireSample:
    return WireSample(wire_array(sample.tokens), wire_array(sample.hidden), sample.step, sample.prompt_len)


def from_wire(s: WireSample) -> Sample:
    return Sample(torch.from_numpy(np.asarray(s.tokens, dtype=np.int64)), torch.from_numpy(np.asarray(s.hidden)),
                  s.step, s.prompt_len)


__all__ = ["DTYPES", "AddSamples", "Alive", "Failed", "Finished", "Generate", "Generated", "LoadDrafter", "LoadPolicy",
           "Loaded", "Ready", "Reply", "RolloutRequest", "Shutdown", "Train", "Trained", "WireSample", "WorkerConfig",
           "from_wire", "to_wire", "weights_digest", "wire_array"]
