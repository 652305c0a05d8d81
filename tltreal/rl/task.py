"""A synthetic reasoning task with verifiable answers and long-tailed solution lengths.

Why this task: TLT's whole premise is that RL rollouts have a long tail -- most responses are
short, a few run to the length cap -- and that the slowest ones set the step time. To run a *real*
GRPO loop on a CPU with a model small enough to train in minutes, we need a task that (a) a tiny
transformer can learn, (b) has an exactly checkable answer (so the reward is a rule, not a model),
and (c) whose worked solutions have a heavy-tailed length distribution. Real reasoning traces get
their tail from hard problems needing many steps; here the number of steps is drawn from a discrete
Pareto distribution clipped to a cap, so the same mechanism (more steps -> longer response, more
chances to slip) produces the tail.

The problem: count up from a start value in steps of a small increment, modulo ``10**digits``,
one step per line, with a countdown so the model knows when to stop::

    prompt:   start 37 add 8 repeat 03\\n
    solution: 03 37+8=45\\n
              02 45+8=53\\n
              01 53+8=61\\n
              answer 61

Every step only needs the previous line: a local rule a small model learns in minutes, while
errors still compound with length, so long problems are harder. Numbers are zero-padded to
``TaskConfig.digits`` digits, the increment to the digits of ``max_add`` and the counter to those of
``max_steps``. Fixed widths are deliberate: every line of every problem has the same layout, so
"copy the previous line's result" is a fixed-offset lookback, which a tiny model learns in a few
hundred steps (with variable widths, or a two-digit increment, a 4-layer 128-wide model was still
at chance after several CPU-minutes).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from tltcore.errors import InputError

ANSWER_WORD = "answer"
PROMPT_WORDS = ("start", "add", "repeat")
_ANSWER_LINE = re.compile(rf"^{ANSWER_WORD} ([0-9]{{1,18}})$")
#: Solution formats (the designed drift of issue 26, item 2): ``verbose`` writes each step as
#: ``03 37+8=45``, ``terse`` drops the operand the line above already shows, ``03 +8=45``. Both need the
#: same lookbacks (the previous line's result, the increment), so a small model learns both; a first
#: terse format, ``03 45``, made it fetch the increment from the prompt at a varying distance and a
#: 600-step pre-training on a 20% mix solved 15% of one-line terse problems. Pre-trained on a mix (say
#: 80% verbose) and rewarded for one format (:func:`format_reward`), GRPO moves the policy from one
#: format to the other: a drift of the policy's *text*, by design, which a drafter trained on the old
#: format has not seen.
FORMATS = ("verbose", "terse")
_STEP_LINES = {"verbose": re.compile(r"^[0-9]+ [0-9]+\+[0-9]+=[0-9]+$"),
               "terse": re.compile(r"^[0-9]+ \+[0-9]+=[0-9]+$")}


@dataclass(frozen=True)
class TaskConfig:
    """Knobs of the task. The step count of a sampled problem is
    ``min(max_steps, floor(min_steps * U ** (-1 / tail_alpha)))`` for ``U ~ Uniform(0, 1]``: a
    discrete Pareto law whose smaller ``tail_alpha`` means a heavier tail. The defaults give a
    median of 2 steps, a 90th percentile of 13 and 2.5% of problems at the 64-step cap (mean 5.8):
    the cap plays the part of the response-length limit that real long-tail rollouts run into."""

    digits: int = 2
    max_add: int = 9
    min_steps: int = 1
    max_steps: int = 64
    tail_alpha: float = 0.9

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 6:
            raise InputError(f"must be in [1, 6], got {self.digits}", field="digits")
        if not 1 <= self.max_add < self.modulus:
            raise InputError(f"must be in [1, {self.modulus - 1}], got {self.max_add}", field="max_add")
        if not 1 <= self.min_steps <= self.max_steps:
            raise InputError(f"need 1 <= min_steps <= max_steps, got {self.min_steps}, {self.max_steps}",
                             field="min_steps")
        if not (math.isfinite(self.tail_alpha) and self.tail_alpha > 0):
            raise InputError(f"must be a positive number, got {self.tail_alpha}", field="tail_alpha")

    @property
    def modulus(self) -> int:
        return 10**self.digits

    def counter_width(self, steps: int) -> int:
        """Digits of the step counter: those of ``max_steps`` (so every line of every problem has
        the same layout), more only for a ``make_problem`` call beyond the cap."""
        return max(len(str(self.max_steps)), len(str(steps)))


@dataclass(frozen=True)
class Problem:
    """One problem: the prompt the policy sees, a worked solution (the pre-training target) and the
    final answer the reward checks. ``steps`` is the difficulty (number of solution lines before
    the answer line)."""

    prompt: str
    solution: str
    answer: str
    steps: int


def _num(value: int, cfg: TaskConfig) -> str:
    return f"{value:0{cfg.digits}d}"


def make_problem(rng: random.Random, difficulty: int, cfg: TaskConfig | None = None, *,
                 fmt: str = "verbose") -> Problem:
    """A problem with ``difficulty`` steps and a random start value and increment drawn from ``rng``,
    its worked solution in format ``fmt`` (:data:`FORMATS`; the prompt is the same in both)."""
    cfg = cfg or TaskConfig()
    if isinstance(difficulty, bool) or not isinstance(difficulty, int) or difficulty < 1:
        raise InputError(f"must be a positive integer, got {difficulty!r}", field="difficulty")
    if fmt not in FORMATS:
        raise InputError(f"must be one of {', '.join(FORMATS)}, got {fmt!r}", field="fmt")
    start = rng.randrange(cfg.modulus)
    add = rng.randint(1, cfg.max_add)
    step = f"{add:0{len(str(cfg.max_add))}d}"
    width = cfg.counter_width(difficulty)
    prompt = f"start {_num(start, cfg)} add {step} repeat {difficulty:0{width}d}\n"
    lines, x = [], start
    for left in range(difficulty, 0, -1):
        y = (x + add) % cfg.modulus
        body = f"{_num(x, cfg) if fmt == 'verbose' else ''}+{step}={_num(y, cfg)}"
        lines.append(f"{left:0{width}d} {body}\n")
        x = y
    answer = _num(x, cfg)
    return Problem(prompt, "".join(lines) + f"{ANSWER_WORD} {answer}", answer, difficulty)


#: Share of the problem space held out for evaluation (issue 44, item 4). Why a split of the space and not
#: separately seeded draws: the space is small (100 start values x 9 increments per step count, 900
#: problems), so 640 GRPO training problems and 64 evaluation problems drawn independently shared 8, 5 and
#: 9 problems across seeds 0-2 of the committed run; a split makes the two disjoint by construction.
HELD_OUT_SHARE = 0.125
#: The two halves of the split: ``train`` (GRPO's problems, pre-training's when it excludes the held-out
#: ones) and ``held-out`` (evaluation only).
SPLITS = ("train", "held-out")
_SPLIT_TRIES = 100_000


def held_out(problem: Problem) -> bool:
    """Whether ``problem`` lies in the held-out split: a hash of its parameters (the prompt, which fixes
    the start value, the increment and the step count, and not the solution format) falls in the lowest
    :data:`HELD_OUT_SHARE` of the hash range. A hash, not a range of start values: every step count and
    increment keeps the same share of held-out problems, so evaluation sees the same mix as training.
    blake2b, not :func:`hash`: Python randomises string hashes per process."""
    digest = hashlib.blake2b(problem.prompt.encode("ascii"), digest_size=8).digest()
    return int.from_bytes(digest, "big") < HELD_OUT_SHARE * 2**64


def make_split_problem(rng: random.Random, difficulty: int, split: str, cfg: TaskConfig | None = None, *,
                       fmt: str = "verbose") -> Problem:
    """:func:`make_problem` drawn again (same ``difficulty``) until the problem lies in ``split``
    (:data:`SPLITS`): uniform over that split's problems of this step count. A task whose space holds no
    problem of the split at this step count is an error, not an endless loop."""
    if split not in SPLITS:
        raise InputError(f"must be one of {', '.join(SPLITS)}, got {split!r}", field="split")
    want = split == "held-out"
    for _ in range(_SPLIT_TRIES):
        problem = make_problem(rng, difficulty, cfg, fmt=fmt)
        if held_out(problem) == want:
            return problem
    raise InputError(f"no {split} problem with {difficulty} steps in {_SPLIT_TRIES:,} draws (the task's problem "
                     "space is too small to split)", field="split")


def sample_difficulty(rng: random.Random, cfg: TaskConfig | None = None) -> int:
    """A step count from the clipped discrete Pareto law of :class:`TaskConfig`."""
    cfg = cfg or TaskConfig()
    u = 1.0 - rng.random()  # (0, 1]: never divides by zero
    return min(cfg.max_steps, int(cfg.min_steps * u ** (-1.0 / cfg.tail_alpha)))


def sample_problems(n: int, seed: int, cfg: TaskConfig | None = None, *,
                    difficulty: int | None = None) -> list[Problem]:
    """``n`` problems, identical for identical arguments. Step counts follow the heavy-tailed law
    unless ``difficulty`` fixes them (for accuracy-by-difficulty evaluation)."""
    cfg = cfg or TaskConfig()
    if n < 0:
        raise InputError(f"must be >= 0, got {n}", field="n")
    rng = random.Random(f"tlt-rl-task:{seed}")
    out = []
    for _ in range(n):
        steps = difficulty if difficulty is not None else sample_difficulty(rng, cfg)
        out.append(make_problem(rng, steps, cfg))
    return out


def parse_answer(response_text: object) -> int | None:
    """The integer on the response's final non-empty line if that line reads ``answer <digits>``;
    None for anything else (wrong type, no answer line, text after the answer, garbage)."""
    if not isinstance(response_text, str):
        return None
    lines = [line.strip() for line in response_text.splitlines() if line.strip()]
    if not lines:
        return None
    m = _ANSWER_LINE.match(lines[-1])
    return int(m.group(1)) if m else None


def reward(problem: Problem, response_text: object) -> float:
    """1.0 if the final answer line parses and equals the problem's answer, else 0.0; never raises.

    Only the final line counts (as in math-RL verifiers that read the boxed final answer): a
    response that states the answer and then rambles on gets nothing, which is what teaches the
    policy to stop.
    """
    got = parse_answer(response_text)
    return 1.0 if got is not None and got == int(problem.answer) else 0.0


def solution_format(response_text: object) -> str:
    """``verbose`` or ``terse`` when every non-empty line before the last is a step line of that
    format (:data:`FORMATS`), else ``other`` (no step lines, mixed formats, garbage); the answer line
    is not looked at, so a wrong answer still has a format."""
    if not isinstance(response_text, str):
        return "other"
    lines = [line.strip() for line in response_text.splitlines() if line.strip()][:-1]
    for fmt in FORMATS:
        if lines and all(_STEP_LINES[fmt].match(line) for line in lines):
            return fmt
    return "other"


def format_reward(problem: Problem, response_text: object, *, prefer: str = "terse",
                  other_weight: float = 0.0) -> float:
    """The drift run's reward: :func:`reward` (the answer must be right), times 1 in the ``prefer``
    format and ``other_weight`` in any other. Why a product: only a right answer pays, so the policy
    is pushed to switch format without being paid to give up the answer. Why 0 by default: with 0.25,
    a policy pre-trained on 20% terse text (one-line greedy accuracy 0.95) moved *away* from terse
    over 20 GRPO steps (held-out terse share 0.28 -> 0.15, seed 0): its verbose answers were right
    often enough more that a quarter of their reward beat the terse ones."""
    if prefer not in FORMATS:
        raise InputError(f"must be one of {', '.join(FORMATS)}, got {prefer!r}", field="prefer")
    base = reward(problem, response_text)
    return base if solution_format(response_text) == prefer else base * other_weight


def format_bonus_reward(problem: Problem, response_text: object, *, prefer: str = "terse") -> float:
    """The designed drift's dense reward: half for the right answer (any format), half for writing in
    the ``prefer`` format (right or wrong). Why not :func:`format_reward`: a policy pre-trained on 20%
    terse text answers right *and* terse in about 1% of its rollouts, so a reward paying only that gives
    GRPO almost no group with reward spread; measured with 16 x 8 rollouts at lr 5e-5, the terse share
    of the rollouts stayed at 0.24-0.34 over 6 steps and greedy text stayed 98% verbose. Paying the format
    on its own puts spread into nearly every group (30% of samples are terse), so the format moves within
    tens of steps, while the answer half keeps paying right answers."""
    if prefer not in FORMATS:
        raise InputError(f"must be one of {', '.join(FORMATS)}, got {prefer!r}", field="prefer")
    return 0.5 * reward(problem, response_text) + 0.5 * float(solution_format(response_text) == prefer)



#: What a rollout may be paid for, by name: ``answer`` the right final answer (:func:`reward`); ``terse``
#: the right answer in the terse format only (:func:`format_reward`), the designed drift of issue 26;
#: ``format`` half for the right answer, half for the terse format (:func:`format_bonus_reward`), the same
#: drift with a dense signal. ``tlt real grpo``, ``tlt real rl`` and their CLI all read this one table.
REWARDS = ("answer", "terse", "format")


def paid(kind: str) -> Callable[[Problem, object], float]:
    """The reward function named ``kind`` (:data:`REWARDS`)."""
    if kind not in REWARDS:
        raise InputError(f"must be one of {', '.join(REWARDS)}, got {kind!r}", field="reward_kind")
    return {"answer": reward, "terse": format_reward, "format": format_bonus_reward}[kind]


__all__ = ["ANSWER_WORD", "FORMATS", "HELD_OUT_SHARE", "PROMPT_WORDS", "REWARDS", "SPLITS", "Problem", "TaskConfig",
           "format_bonus_reward", "format_reward", "held_out", "make_problem", "make_split_problem", "paid",
           "parse_answer", "reward", "sample_difficulty", "sample_problems", "solution_format"]
