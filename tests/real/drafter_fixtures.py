"""Shared by the drafter-training and EAGLE-export tests, and the kill test's worker process.

Why a trained target: a random target's greedy continuations are noise that one drafter layer
cannot predict, so acceptance would say nothing about training. Arithmetic progressions modulo the
vocabulary (``a, a+d, a+2d, ...`` for a few step sizes ``d``) are learnt by a tiny Llama in a few
hundred AdamW steps on one CPU core; its next token then depends on the context (which ``d``), so
the drafter needs the target's hidden state to predict it.

Run as a script (``python tests/real/drafter_fixtures.py DIR SEED``) it is the kill test's worker:
it resumes from the newest checkpoint in DIR (``start V``) and then trains and checkpoints in a loop
(alternating synchronous and background writes) until it is killed, printing ``begin NAME`` and
``done NAME`` around each file write so the test can aim its kills inside writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

from tltcore.model_config import ModelConfig
from tltreal.model.transformer import Transformer
from tltreal.model.weights import random_model

#: head_dim 32 (vLLM's CPU attention backend supports it); 2 layers, so hidden states carry context.
CFG = ModelConfig(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
STEPS = (1, 2, 3)


def progression(start: int, step: int, n: int, vocab: int = CFG.vocab_size) -> list[int]:
    """``start, start + step, ...`` modulo ``vocab`` (``n`` tokens)."""
    return [(start + i * step) % vocab for i in range(n)]


def progressions(n: int, length: int, seed: int, vocab: int = CFG.vocab_size) -> list[list[int]]:
    """``n`` seeded progressions with random starts and step sizes from :data:`STEPS`."""
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, vocab, (n,), generator=gen).tolist()
    steps = torch.randint(0, len(STEPS), (n,), generator=gen).tolist()
    return [progression(a, STEPS[s], length, vocab) for a, s in zip(starts, steps, strict=True)]


def target_logits_train(model: Transformer, tokens: torch.Tensor) -> torch.Tensor:
    """Gradient-enabled causal forward of the target ``[B, T] -> [B, T, V]`` (cache-free layers)."""
    return model.forward_train(tokens)[0]


def train_target(cfg: ModelConfig = CFG, *, steps: int = 250, batch: int = 16, length: int = 48,
                 seed: int = 0, lr: float = 3e-3) -> Transformer:
    """A float32 target trained on progressions (next-token cross-entropy, AdamW); deterministic."""
    torch.manual_seed(seed)
    model = random_model(cfg, seed=seed, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    for i in range(steps):
        tokens = torch.tensor(progressions(batch, length, seed * 100_003 + i, cfg.vocab_size))
        logits = target_logits_train(model, tokens)
        loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model.eval()


# ---- the kill test's worker ------------------------------------------------------------------------
#: Big enough that writing a checkpoint (weights + AdamW moments, ~40 MB) is most of the loop's time,
#: so random kills land inside writes.
KILL_CFG = ModelConfig(vocab_size=64, hidden_size=384, intermediate_size=1536, num_hidden_layers=1,
                       num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)


def kill_worker(folder: Path, seed: int) -> None:
    """Train and checkpoint forever (module docstring)."""
    import tltreal.spot.drafter_checkpoint as checkpoints
    from tltreal.spot.drafter_checkpoint import AsyncCheckpointer, load_latest, restore, save_checkpoint

    write = checkpoints.atomic_write

    def traced(path: Path, writer: object) -> Path:
        print("begin", path.name, flush=True)
        out = write(path, writer)
        print("done", path.name, flush=True)
        return out

    checkpoints.atomic_write = traced  # write_snapshot looks it up at call time
    from tltreal.rl.drafter_train import DrafterTrainer, DrafterTrainerConfig
    from tltreal.spec_decode.proposers.eagle import random_drafter
    from tltreal.spot.sample_buffer import SampleBuffer, target_sample

    torch.set_num_threads(1)
    target = random_model(KILL_CFG, seed=0)
    drafter = random_drafter(target, seed=1)
    trainer = DrafterTrainer(drafter, DrafterTrainerConfig(lr=1e-3, samples_per_step=2, window_tokens=16,
                                                           seed=seed))
    latest = load_latest(folder)
    version = 0
    if latest is not None:
        restore(drafter, latest, trainer.optimizer)
        version = latest.version
    print("start", version, flush=True)
    buffer = SampleBuffer(window_tokens=16)
    for seq in progressions(4, 32, seed, KILL_CFG.vocab_size):
        buffer.add(target_sample(target, seq))
    with AsyncCheckpointer(folder, keep=3) as background:
        while True:
            trainer.train(buffer, 1)
            version += 1
            if version % 2:
                save_checkpoint(drafter, folder, version=version, step=trainer.steps_done,
                                optimizer=trainer.optimizer, keep=3)
            else:
                background.save(drafter, version=version, step=trainer.steps_done, optimizer=trainer.optimizer)


if __name__ == "__main__":
    kill_worker(Path(sys.argv[1]), int(sys.argv[2]))
