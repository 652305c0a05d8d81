"""The pieces the three-drafter RL run (tltreal.rl.adaptive_run) adds: a response-only drafter loss
(TLT's released trainer), the prompt length carried from the rollout to the trainer, the speedup of
several drafters against shared plain runs with every repeat kept, the reward the designed drift pays
and the run's configuration checks.

What must hold: the response-only loss is the mean over response pairs exactly (prompt pairs weigh
nothing, so changing what they predict changes nothing); a sample's prompt length survives the wire
to a worker and the buffer's copy; each drafter's per-repeat speedups are its own SD runs against the
plain run of the same repeat; the drift's reward pays only terse right answers.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from conftest import hang_seconds  # noqa: E402
from tltcore.errors import InputError  # noqa: E402
from tltcore.model_config import ModelConfig  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.rl.adaptive_run import AdaptiveRunConfig, policy_samples  # noqa: E402
from tltreal.rl.drafter_train import FASTRL_WEIGHTS, DrafterTrainerConfig, drafter_loss, pack, train_steps  # noqa: E402
from tltreal.rl.padded_target import measure_drafter_speedups, pad_target, rebind_drafter  # noqa: E402
from tltreal.rl.task import make_problem, paid  # noqa: E402
from tltreal.spec_decode.proposers.eagle import random_drafter  # noqa: E402
from tltreal.spot.messages import from_wire, to_wire  # noqa: E402
from tltreal.spot.sample_buffer import Sample, SampleBuffer, Window, target_sample  # noqa: E402

from .drafter_fixtures import progressions  # noqa: E402

SMALL = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=256)


def _sample(target, n: int, seed: int, prompt_len: int) -> Sample:
    gen = torch.Generator().manual_seed(seed)
    s = target_sample(target, torch.randint(0, target.cfg.vocab_size, (n,), generator=gen))
    return dataclasses.replace(s, prompt_len=prompt_len)


# ---- the response-only loss -----------------------------------------------------------------------
def test_response_only_loss_is_the_mean_over_response_pairs():
    target = random_model(SMALL, seed=0, dtype=torch.float64)
    drafter = random_drafter(target, seed=1)
    windows = [Window(_sample(target, 14, 3, prompt_len=5), 0, 14), Window(_sample(target, 9, 4, prompt_len=0), 0, 9),
               Window(_sample(target, 20, 5, prompt_len=12), 8, 20)]
    full = drafter_loss(drafter, pack(windows))
    masked = drafter_loss(drafter, pack(windows, response_only=True))
    # pair j counts iff its token is a response token: j >= prompt_len (positions, not window offsets)
    keep = torch.tensor([j >= 5 for j in range(14)] + [True] * 9 + [j >= 12 for j in range(8, 20)])
    assert torch.equal(masked.weights.bool(), keep)
    assert torch.allclose(masked.per_pair, full.per_pair, rtol=0, atol=0)  # per-pair losses are unchanged
    assert float(masked.total.detach()) == pytest.approx(float(full.per_pair[keep].mean().detach()), rel=0, abs=1e-12)
    assert float(full.total.detach()) == pytest.approx(float(full.per_pair.mean().detach()), rel=0, abs=1e-12)


def test_the_trainer_minimises_the_response_only_loss_when_asked():
    """DrafterTrainer.step packs with the config's response_only: the loss it steps on is the mean over
    response pairs (and over every pair without it)."""
    from tltreal.rl.drafter_train import DrafterTrainer

    target = random_model(SMALL, seed=0, dtype=torch.float64)
    window = Window(_sample(target, 16, 7, prompt_len=6), 0, 16)
    for response_only in (True, False):
        drafter = random_drafter(target, seed=1)
        before = drafter_loss(drafter, pack([window]))
        cfg = DrafterTrainerConfig(lr=3e-3, samples_per_step=1, seed=0, response_only=response_only)
        parts = DrafterTrainer(drafter, cfg).step([window])
        want = before.per_pair[6:].mean() if response_only else before.per_pair.mean()
        assert float(parts.total.detach()) == pytest.approx(float(want.detach()), rel=0, abs=1e-12)
    buf = SampleBuffer(window_tokens=64, one_step_offset=False)
    buf.add(window.sample)
    assert train_steps(random_drafter(target, seed=1), buf, 2, cfg).steps == 2


def test_fastrl_weights_are_half_and_half():
    assert FASTRL_WEIGHTS == (0.5, 0.5)
    cfg = AdaptiveRunConfig(drafter_loss="fastrl").drafter_trainer(lr=1e-3, steps=5, seed=0)
    assert (cfg.hidden_weight, cfg.ce_weight, cfg.response_only) == (0.5, 0.5, True)
    cfg = AdaptiveRunConfig(response_only=False).drafter_trainer(lr=1e-3, steps=5, seed=0)
    assert (cfg.hidden_weight, cfg.ce_weight, cfg.response_only) == (1.0, 0.1, False)


# ---- the prompt length travels with the sample ---------------------------------------------------------
def test_prompt_length_survives_the_wire_and_the_buffer():
    target = random_model(SMALL, seed=0, dtype=torch.float32)
    s = _sample(target, 11, 2, prompt_len=4)
    back = from_wire(to_wire(s))
    assert back.prompt_len == 4 and torch.equal(back.tokens, s.tokens)
    buf = SampleBuffer()
    buf.add(s)
    assert buf.samples(0)[0].prompt_len == 4
    with pytest.raises(ValueError, match="prompt_len"):
        dataclasses.replace(s, prompt_len=12)


def test_policy_samples_carry_their_prompt_length_and_repeat_with_the_seed():
    from tltreal.model.tokenizer import build_tokenizer
    from tltreal.rl.pretrain import PretrainConfig, new_model

    tok = build_tokenizer()
    model = new_model(PretrainConfig(layers=1, hidden=32, heads=2, kv_heads=1, intermediate=64), tok).eval()
    import random

    problems = [make_problem(random.Random(i), 2) for i in range(3)]
    a = policy_samples(model, tok, problems, cap=6, temperature=1.0, seed=5)
    b = policy_samples(model, tok, problems, cap=6, temperature=1.0, seed=5)
    for p, s, t in zip(problems, a, b, strict=True):
        assert s.prompt_len == len(tok.encode(p.prompt, bos=True))
        assert torch.equal(s.tokens, t.tokens) and torch.equal(s.hidden, t.hidden)
        assert len(s) <= s.prompt_len + 6


# ---- several drafters' speedups against shared plain runs -------------------------------------------------
def test_drafter_speedups_keep_every_repeat_and_share_the_plain_runs(monkeypatch):
    from tltreal.rl import padded_target

    cfg = dataclasses.replace(SMALL, vocab_size=64, hidden_size=64, intermediate_size=96)
    target = random_model(cfg, seed=0, dtype=torch.float64)
    big = pad_target(target, extra_layers=1, intermediate_size=2 * cfg.intermediate_size)
    drafters = {name: rebind_drafter(random_drafter(target, seed=s), big) for name, s in (("a", 1), ("b", 2))}
    prompts = progressions(2, 5, seed=3, vocab=cfg.vocab_size)
    real_run = padded_target._run
    walls = iter([2.0, 1.0, 4.0,  # repeat 1: plain, a, b
                  3.0, 1.5, 1.0,  # repeat 2
                  2.5, 2.5, 5.0])  # repeat 3
    calls = []

    def timed(target, drafter, prompts, **kw):
        _, _, accept, out = real_run(target, drafter, prompts, **kw)
        calls.append(drafter)
        return next(walls), 0.0, accept, out

    monkeypatch.setattr(padded_target, "_run", timed)
    got = measure_drafter_speedups(big, drafters, prompts, batch=2, new_tokens=6, depth=3, repeats=3, warmup=False)
    assert calls == [None, drafters["a"], drafters["b"]] * 3  # plain first in every repeat, then each drafter
    assert got["a"].per_repeat == pytest.approx((2.0, 2.0, 1.0))  # tokens equal (greedy): plain wall / SD wall
    assert got["b"].per_repeat == pytest.approx((0.5, 3.0, 0.5))
    assert got["a"].speedup == pytest.approx(2.5 / 1.5) and got["b"].speedup == pytest.approx(2.5 / 4.0)
    assert got["a"].outputs_identical and got["b"].outputs_identical and got["a"].repeats == 3
    with pytest.raises(ValueError):
        measure_drafter_speedups(big, {}, prompts, batch=2, new_tokens=6, depth=3)


# ---- the drift's reward and the run's checks ------------------------------------------------------------------------
def test_the_drift_pays_terse_right_answers_only():
    import random

    verbose = make_problem(random.Random(1), 3)
    terse = make_problem(random.Random(1), 3, fmt="terse")
    assert paid("answer")(verbose, verbose.solution) == 1.0 and paid("answer")(verbose, terse.solution) == 1.0
    assert paid("terse")(verbose, verbose.solution) == 0.0 and paid("terse")(verbose, terse.solution) == 1.0
    wrong = terse.solution.rsplit(" ", 1)[0] + " 00" if terse.answer != "00" else terse.solution[:-1] + "1"
    assert paid("terse")(verbose, wrong) == 0.0
    # the dense drift: half for the right answer, half for the terse format, each on its own
    fmt = paid("format")
    assert fmt(verbose, terse.solution) == 1.0 and fmt(verbose, verbose.solution) == 0.5
    assert fmt(verbose, wrong) == 0.5 and fmt(verbose, "garbage") == 0.0
    assert fmt(verbose, verbose.solution.rsplit(" ", 1)[0] + " 00" if verbose.answer != "00" else "x") == 0.0
    with pytest.raises(InputError):
        paid("shorter")


@pytest.mark.parametrize(("field", "kw"), [("reward_kind", {"reward_kind": "shorter"}),
                                           ("drafter_loss", {"drafter_loss": "mse"}),
                                           ("upper_every", {"upper_every": -1}),
                                           ("upper_samples", {"upper_samples": -3}),
                                           ("speedup_repeats", {"speedup_repeats": 0}),
                                           ("band_low", {"band_low": 0.9, "band_high": 0.5}),
                                           ("depth", {"depth": 0})])
def test_config_names_the_bad_field(field, kw):
    with pytest.raises(InputError) as err:
        AdaptiveRunConfig(**kw)
    assert err.value.field == field


def test_the_spot_trainer_records_each_rollouts_prompt_length(tmp_path):
    """The coordinator's buffer (what the upper bound and the workers train on) knows where each
    response starts, so the response-only loss skips exactly the prompt."""
    from tltreal.spot.contract import SpotConfig
    from tltreal.spot.messages import RolloutRequest
    from tltreal.spot.trainer import SpotTrainer

    from .tiny_models import TINY_V64

    cfg = dataclasses.replace(TINY_V64, max_position_embeddings=128)
    target = random_model(cfg, seed=0, dtype=torch.float32)
    spot = SpotConfig(n_workers=1, training="never", sd_policy="no-sd", max_batch=4, max_len=64,
                      start_method="forkserver", timeout_s=hang_seconds(12))
    prompts = [(1, 2, 3), (4, 5, 6, 7, 8)]
    reqs = [RolloutRequest(i, p, 4, i, i, 1.0) for i, p in enumerate(prompts)]
    with SpotTrainer(spot, tmp_path / "spot", target.cfg, None) as trainer:
        trainer.run_step(0, target, reqs)
        got = sorted((len(s), s.prompt_len, tuple(s.tokens[:s.prompt_len].tolist())) for s in trainer.buffer.samples(0))
    assert [(p, t) for _, p, t in got] == sorted((len(p), p) for p in prompts)
    assert all(n > p for n, p, _ in got)
