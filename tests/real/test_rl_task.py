"""The RL task, its tokenizer, the cache-free training forward and pre-training (all CPU, < 60 s).

Covers: task determinism and its heavy-tailed solution lengths; the reward on right, wrong and
garbage responses; tokenizer round trips, through ``transformers.AutoTokenizer`` from a saved
folder too; ``forward_train`` equal to the cached prefill in float64 (plain, padded, packed, with a
sliding window) with gradients reaching every parameter; a short pre-training run lowering the
loss, identically twice; and the saved model folder loading back to identical logits.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
import statistics
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

from tltcore.errors import InputError  # noqa: E402
from tltcore.model_config import ModelConfig  # noqa: E402
from tltreal.model.tokenizer import build_tokenizer, load  # noqa: E402
from tltreal.model.train_forward import next_token_logprobs, pack_sequences, token_logprobs  # noqa: E402
from tltreal.model.transformer import causal_mask  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.rl.pretrain import (  # noqa: E402
    PretrainConfig,
    accuracy_by_difficulty,
    encode_example,
    greedy_generate,
    learning_rate,
    load_pretrained,
    pretrain,
    save_pretrained,
)
from tltreal.rl.task import Problem, TaskConfig, make_problem, parse_answer, reward, sample_problems  # noqa: E402

from .tiny_models import MICRO  # noqa: E402

SMALL = replace(MICRO, vocab_size=56)
TINY_PRETRAIN = PretrainConfig(steps=30, sequences=8, row_len=128, layers=2, hidden=32, heads=4, kv_heads=2,
                               intermediate=64, warmup=5, lr=3e-3)


# ---- task ----------------------------------------------------------------------------------------------
def test_problem_solution_is_a_correct_worked_chain():
    p = make_problem(random.Random(3), 4)
    lines = p.solution.splitlines()
    assert p.steps == 4 and len(lines) == 5 and p.prompt.endswith(" repeat 04\n")
    start, add = int(p.prompt.split()[1]), int(p.prompt.split()[3])
    assert 0 <= start < 100 and 1 <= add <= 9
    x = start
    for k, line in zip((4, 3, 2, 1), lines[:-1], strict=True):
        assert line == f"{k:02d} {x:02d}+{add}={(x + add) % 100:02d}"  # fixed layout: every line alike
        x = (x + add) % 100
    assert lines[-1] == f"answer {x:02d}" and p.answer == f"{x:02d}"
    wide = make_problem(random.Random(3), 3, TaskConfig(digits=3, max_add=250, max_steps=200))
    assert wide.prompt.startswith("start ") and " repeat 003\n" in wide.prompt
    assert len(wide.solution.splitlines()[0]) == len("003 123+045=168")


def test_sampling_is_deterministic_and_seed_dependent():
    assert sample_problems(50, seed=7) == sample_problems(50, seed=7)
    assert sample_problems(50, seed=7) != sample_problems(50, seed=8)
    assert {p.steps for p in sample_problems(20, seed=1, difficulty=5)} == {5}


def test_solution_lengths_are_heavy_tailed():
    cfg = TaskConfig()
    problems = sample_problems(2000, seed=0, cfg=cfg)
    lengths = sorted(len(p.solution) for p in problems)
    median, p99 = statistics.median(lengths), lengths[int(0.99 * len(lengths))]
    assert p99 >= 5 * median, (median, p99)  # most are short, a few are very long
    steps = [p.steps for p in problems]
    assert min(steps) >= cfg.min_steps and max(steps) == cfg.max_steps  # the cap is reached, not exceeded


@pytest.mark.parametrize("bad", [{"digits": 0}, {"min_steps": 5, "max_steps": 2}, {"tail_alpha": 0.0},
                                 {"max_add": 100}, {"max_add": 0}])
def test_task_config_refuses_bad_knobs(bad):
    with pytest.raises(InputError):
        TaskConfig(**bad)


def test_reward_right_wrong_and_garbage():
    p = Problem("start 01 add 2 repeat 01\n", "01 01+2=03\nanswer 03", "03", 1)
    assert reward(p, p.solution) == 1.0
    assert reward(p, "answer 3") == 1.0  # the number, not its padding, is checked
    assert reward(p, "01 01+2=03\nanswer 03\n\n  ") == 1.0
    assert reward(p, "01 01+2=04\nanswer 04") == 0.0
    assert reward(p, "answer 03\nand then more") == 0.0  # only the final line counts
    for garbage in ("", "\n\n", "answer", "answer -3", "answer 0x3", "answer 3.0", "answer " + "9" * 5000,
                    "\x00\udcff", None, 3, b"answer 03", ["answer 03"]):
        assert reward(p, garbage) == 0.0
    assert parse_answer("x\nanswer 42") == 42


# ---- tokenizer -------------------------------------------------------------------------------------------
def test_tokenizer_round_trip_and_ids():
    tok = build_tokenizer()
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    for p in sample_problems(20, seed=2):
        text = p.prompt + p.solution
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert tok.decode([tok.bos_id, *ids, tok.eos_id]) == text  # specials are not text
    assert len(tok.encode("answer")) == 1 and len(tok.encode("start 05")) == 4
    assert tok.encode("x", bos=True)[0] == tok.bos_id
    assert tok.decode([10_000, -1, tok.encode("7")[0]]) == "7"  # never raises on bad ids
    assert tok.unk_id in tok.encode("Answer")  # out-of-vocabulary characters become <unk>


def test_tokenizer_saves_for_autotokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    tok = build_tokenizer()
    tok.save(tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= names
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    again = load(tmp_path)
    assert hf.eos_token_id == tok.eos_id and hf.bos_token_id == tok.bos_id and hf.pad_token_id == tok.pad_id
    for p in sample_problems(10, seed=4):
        text = p.prompt + p.solution
        assert hf(text, add_special_tokens=False)["input_ids"] == tok.encode(text) == again.encode(text)
        assert hf(text)["input_ids"] == tok.encode(text, bos=True)  # BOS added by default, as Llama's
        ids = [*tok.encode(text, bos=True), tok.eos_id]
        assert hf.decode(ids, skip_special_tokens=True) == tok.decode(ids) == text


def test_tokenizer_load_errors(tmp_path):
    with pytest.raises(InputError, match=r"no tokenizer\.json"):
        load(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(InputError, match="not a readable"):
        load(tmp_path)


# ---- forward_train ---------------------------------------------------------------------------------------
def cached_prefill(model, tokens):
    b, t = tokens.shape
    cache = model.new_cache(b, t)
    return model(tokens, torch.arange(t).expand(b, t), cache, torch.arange(b), torch.zeros(b, dtype=torch.long),
                 causal_mask(b, t))


@pytest.mark.parametrize("cfg", [SMALL, ModelConfig(**{**SMALL.__dict__, "model_type": "qwen2", "qkv_bias": True,
                                                       "sliding_window": 3, "sliding_layers": (1,)})],
                         ids=["llama", "qwen2-sliding"])
def test_forward_train_equals_cached_prefill(cfg):
    model = random_model(cfg, seed=1, dtype=torch.float64, std=0.2)
    tokens = torch.randint(0, cfg.vocab_size, (3, 11), generator=torch.Generator().manual_seed(0))
    ref_logits, ref_hidden = cached_prefill(model, tokens)
    logits, hidden = model.forward_train(tokens)
    assert (logits - ref_logits).abs().max() < 1e-10 and (hidden - ref_hidden).abs().max() < 1e-10


def test_forward_train_padding_and_packing_match_each_sequence_alone():
    model = random_model(SMALL, seed=2, dtype=torch.float64, std=0.2)
    tokens = torch.randint(0, 56, (3, 10), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([4, 10, 7])
    padded, _ = model.forward_train(tokens, lengths=lengths)
    alone = [model.forward_train(tokens[i:i + 1, :n])[0][0] for i, n in enumerate(lengths.tolist())]
    for i, n in enumerate(lengths.tolist()):
        assert (padded[i, :n] - alone[i]).abs().max() < 1e-10
    row = torch.cat([tokens[i, :n] for i, n in enumerate(lengths.tolist())])[None]
    segments = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths.tolist())])[None]
    packed, _ = model.forward_train(row, segment_ids=segments)
    assert (packed[0] - torch.cat(alone)).abs().max() < 1e-10
    with pytest.raises(InputError):
        model.forward_train(tokens, lengths=lengths, segment_ids=torch.zeros_like(tokens))


def test_forward_train_gradients_reach_every_parameter():
    model = random_model(SMALL, seed=3, dtype=torch.float64, std=0.2)
    tokens = torch.randint(0, 56, (2, 9), generator=torch.Generator().manual_seed(2))
    logits, _ = model.forward_train(tokens)
    next_token_logprobs(logits, tokens).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_token_logprobs_match_log_softmax():
    logits = torch.randn(2, 5, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    targets = torch.randint(0, 7, (2, 5), generator=torch.Generator().manual_seed(1))
    expected = logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0]
    assert torch.allclose(token_logprobs(logits, targets), expected)
    assert token_logprobs(logits.to(torch.bfloat16), targets).dtype == torch.float32
    assert next_token_logprobs(logits, targets).shape == (2, 4)


def test_pack_sequences_targets_weights_and_truncation():
    batch = pack_sequences([[1, 5, 6, 2], [1, 7, 2], [1, 8, 9, 9, 9, 9]], row_len=5, pad_id=0,
                           loss_weights=[[0, 0, 1, 2], [False, True, True], [0.0] + [1.0] * 5])
    assert batch.tokens.tolist() == [[1, 5, 6, 2, 0], [1, 7, 2, 0, 0], [1, 8, 9, 9, 9]]
    assert batch.segment_ids.tolist() == [[0, 0, 0, 0, -1], [1, 1, 1, -1, -1], [2, 2, 2, 2, 2]]
    assert batch.targets[0].tolist() == [5, 6, 2, 0, 0]
    assert batch.weights.tolist() == [[0, 1, 2, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]]


# ---- pre-training -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_run():
    return pretrain(TINY_PRETRAIN)


def test_pretrain_lowers_the_loss_deterministically(tiny_run):
    _, _, metrics = tiny_run
    assert len(metrics.losses) == 30 and metrics.tokens > 0 and metrics.seconds > 0
    assert sum(metrics.losses[-5:]) / 5 < 0.8 * sum(metrics.losses[:5]) / 5
    _, _, again = pretrain(TINY_PRETRAIN)
    assert again.losses == metrics.losses
    _, _, other = pretrain(PretrainConfig(**{**TINY_PRETRAIN.__dict__, "steps": 3, "seed": 1}))
    assert other.losses != metrics.losses[:3]


def test_encode_example_weights():
    tok = build_tokenizer()
    for steps in (1, 3):
        p = make_problem(random.Random(0), steps)
        ids, weights = encode_example(tok, p, first_line_weight=8)
        n_prompt = len(tok.encode(p.prompt, bos=True))
        n_first = len(tok.encode(p.solution.splitlines()[0] + "\n"))
        assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id and tok.decode(ids) == p.prompt + p.solution
        assert weights[:n_prompt] == [0.0] * n_prompt  # the prompt is random: not a target
        assert weights[n_prompt:n_prompt + n_first] == [8.0] * n_first  # the line computed from the prompt
        assert weights[n_prompt + n_first:] == [1.0] * (len(ids) - n_prompt - n_first)


def test_learning_rate_warms_up_then_decays():
    cfg = PretrainConfig(steps=100, warmup=10, lr=1e-3, min_lr_ratio=0.1)
    lrs = [learning_rate(cfg, s) for s in range(100)]
    assert lrs[0] < lrs[9] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(1e-4, rel=0.05)
    assert all(a >= b for a, b in itertools.pairwise(lrs[10:]))


def test_save_pretrained_round_trip(tiny_run, tmp_path):
    model, tok, _ = tiny_run
    folder = save_pretrained(model, tok, tmp_path / "model")
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json"} <= names
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left behind
    raw = json.loads((folder / "config.json").read_text())
    assert raw["model_type"] == "llama" and raw["eos_token_id"] == tok.eos_id and raw["vocab_size"] == tok.vocab_size
    loaded, tok2 = load_pretrained(folder)
    assert loaded.cfg == model.cfg
    tokens = torch.tensor([tok.encode("start 05 add 7 repeat 02\n02 05+7=12\n", bos=True)])
    with torch.no_grad():
        assert torch.equal(loaded.forward_train(tokens)[0], model.forward_train(tokens)[0])
    assert tok2.encode("answer 12") == tok.encode("answer 12")
    save_pretrained(model, tok, folder)  # tlt's own folder: replaced
    (folder / "mine.txt").write_text("user data")
    with pytest.raises(InputError):
        save_pretrained(model, tok, folder)  # a folder with the user's files is not replaced
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():  # the folder is a Llama checkpoint transformers (and so vLLM) reads as is
        assert (hf(tokens).logits - model.forward_train(tokens)[0]).abs().max() < 1e-4


def test_greedy_generate_and_accuracy_run(tiny_run):
    model, tok, _ = tiny_run
    model = copy.deepcopy(model).to(torch.float64)  # float64: batching cannot flip a near-tie
    prompts = [p.prompt for p in sample_problems(3, seed=5, difficulty=2)]
    batched = greedy_generate(model, tok, prompts, max_new_tokens=12)
    assert len(batched) == 3 and all(isinstance(t, str) for t in batched)
    assert [greedy_generate(model, tok, [p], max_new_tokens=12)[0] for p in prompts] == batched
    acc = accuracy_by_difficulty(model, tok, (1, 2), per_difficulty=2)
    assert set(acc) == {1, 2} and all(0.0 <= a <= 1.0 for a in acc.values())
