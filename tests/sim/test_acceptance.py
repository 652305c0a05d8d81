"""Acceptance model: chain formula, the paper-fitted tree preset, sampling, presets."""


import numpy as np
import pytest

from analysis.paper_fidelity import paper_tables_dir
from tltcore.acceptance import (
    PAPER_QWEN32B_TP4_PARAMS,
    PAPER_TOPK,
    AcceptanceModel,
    AcceptSampler,
    ChainAcceptance,
    TreeAcceptance,
    fit_tree_acceptance,
    get_acceptance,
    load_depth_verify_table,
    paper_qwen32b_tp4,
)
from tltcore.drafter.state import DrafterState
from tltcore.errors import InputError
from tltcore.policy.base import NO_SD, SDConfig

PAPER = paper_tables_dir()  # ../shared/paper, else the vendored tests/data/paper: never skipped


def paper_rows():
    path = PAPER / "sd_depth_verify_bs1.csv"
    return load_depth_verify_table(path)


def test_protocol_and_no_sd():
    for model in (paper_qwen32b_tp4(), ChainAcceptance((0.7,))):
        assert isinstance(model, AcceptanceModel)
        assert model.expected_accept_length(NO_SD) == 1.0
        assert (AcceptSampler(model).draw(NO_SD, 5, np.random.default_rng(0)) == 1).all()


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 0.95])
@pytest.mark.parametrize("k", [1, 4, 8])
def test_chain_matches_closed_formula(alpha, k):
    expected = k + 1 if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    assert ChainAcceptance((alpha,)).expected_accept_length(SDConfig.chain(k)) == pytest.approx(expected)


def test_chain_alpha_to_one_approaches_depth_plus_one():
    lengths = [ChainAcceptance((a,)).expected_accept_length(SDConfig.chain(6)) for a in (0.9, 0.99, 0.999, 1.0)]
    assert lengths == sorted(lengths)
    assert lengths[-1] == pytest.approx(7.0)
    assert 7.0 - lengths[-2] < 0.03


def test_chain_per_position_alphas():
    model = ChainAcceptance((0.9, 0.5))  # later positions reuse 0.5
    assert model.expected_accept_length(SDConfig.chain(3)) == pytest.approx(1 + 0.9 + 0.45 + 0.225)


def test_paper_preset_within_5_percent_of_every_row():
    model = paper_qwen32b_tp4()
    for depth, verify, measured in paper_rows():
        predicted = model.expected_accept_length(SDConfig(depth, PAPER_TOPK, verify))
        assert predicted == pytest.approx(measured, rel=0.05), (depth, verify)


def test_refit_reproduces_stored_constants():
    fit = fit_tree_acceptance(paper_rows())
    assert fit.max_rel_error < 0.05
    assert fit.model.params == pytest.approx(PAPER_QWEN32B_TP4_PARAMS, rel=1e-3)


def test_tree_monotone_in_depth_verify_and_drafter_quality():
    model = paper_qwen32b_tp4()
    e = model.expected_accept_length
    assert e(SDConfig(8, 8, 16)) < e(SDConfig(8, 8, 32)) < e(SDConfig(8, 8, 64))
    assert e(SDConfig(4, 8, 32)) < e(SDConfig(8, 8, 32)) <= 9
    assert e(SDConfig(8, 4, 32)) >= e(SDConfig.chain(8))  # branching helps
    stale = DrafterState(version=1, quality=0.8)
    assert 1 < e(SDConfig(8, 4, 32), stale) < e(SDConfig(8, 4, 32))
    # per-position scales: only later positions degraded -> in between
    later = DrafterState(version=2, position_scale=(1.0, 1.0, 0.8))
    assert e(SDConfig(8, 4, 32), stale) < e(SDConfig(8, 4, 32), later) < e(SDConfig(8, 4, 32))
    # quality q multiplies the reach of depth d by q^d (acceptance compounds along the path)
    reach, stale_reach = model.reach(SDConfig(8, 4, 32)), model.reach(SDConfig(8, 4, 32), stale)
    assert stale_reach == pytest.approx(reach * 0.8 ** np.arange(1, 9))


@pytest.mark.parametrize(("model", "drafter"), [(paper_qwen32b_tp4(), DrafterState()),
                                               (ChainAcceptance((0.8,)), DrafterState()),
                                               (paper_qwen32b_tp4(), DrafterState(1, quality=0.7))])
@pytest.mark.parametrize("config", [SDConfig(8, 4, 32), SDConfig(3, 2, 5), SDConfig.chain(5)])
def test_sampled_lengths_follow_the_exact_distribution(model, drafter, config):
    """The sampler the simulator uses: right support (the bonus token always emitted), mean and
    per-length frequencies of the model's distribution."""
    samples = AcceptSampler(model).draw(config, 200_000, np.random.default_rng(7), drafter)
    assert samples.dtype.kind == "i"
    assert samples.min() >= 1 and samples.max() <= config.depth + 1
    probs = model.accept_length_probs(config, drafter)
    mean = model.expected_accept_length(config, drafter)
    std = np.sqrt((probs * (np.arange(1, probs.size + 1) - mean) ** 2).sum())
    assert abs(samples.mean() - mean) < 5 * std / np.sqrt(samples.size)
    freq = np.bincount(samples, minlength=config.depth + 2)[1:] / samples.size
    assert freq == pytest.approx(probs, abs=5 * np.sqrt(0.25 / samples.size))


def test_sampling_is_deterministic_given_seed():
    sampler = AcceptSampler(paper_qwen32b_tp4())
    a = sampler.draw(SDConfig(8, 4, 32), 100, np.random.default_rng(3))
    b = sampler.draw(SDConfig(8, 4, 32), 100, np.random.default_rng(3))
    assert (a == b).all()


def _searched(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The inverse CDF as a binary search per draw (what the sampler's lookup table must give)."""
    return np.searchsorted(np.concatenate(([-np.inf], cdf[:-1])), u * float(cdf[-1]), side="right")


def test_the_samplers_lookup_table_gives_the_searchs_ints_at_and_beside_every_edge():
    """``AcceptSampler``'s buckets (``tltcore.acceptance._Buckets``) are the binary search draw for draw:
    random distributions (zero probabilities, so equal edges; a total a few ulps off 1; one length; an
    edge at a bucket's boundary), uniform draws, and draws whose ``u * total`` lands on an edge or
    its neighbours either side (where a bucket holds an edge and the search decides)."""
    from tltcore.acceptance import _Buckets

    rng = np.random.default_rng(5)
    cases = [np.array([1.0]), np.array([0.25, 0.25, 0.5]), np.array([0.0, 0.5, 0.0, 0.5]),
             np.array([2.0 ** -14 * 3, 0.5, 0.5 - 2.0 ** -14 * 3])]
    for _ in range(60):
        p = rng.random(int(rng.integers(2, 12))) * (rng.random(1) < 0.8)
        p[rng.random(len(p)) < 0.2] = 0.0
        cases.append(p / p.sum() if p.sum() > 0 else np.full(len(p), 1.0 / len(p)))
    marked = 0
    for probs in cases:
        cdf = np.cumsum(probs)
        buckets = _Buckets(cdf)
        assert buckets.table is not None
        u = rng.random(20_000)
        at = [e / cdf[-1] for e in cdf[:-1]]
        near = np.array([np.nextafter(x, d) for x in at for d in (-1.0, 1.0)] + at)
        u = np.concatenate([u, near[(near >= 0.0) & (near < 1.0)]])
        got, want = buckets.lengths(u), _searched(cdf, u)
        assert got.dtype == want.dtype
        assert np.array_equal(got, want)
        marked += int((buckets.table < 0).sum())
    assert marked > 0
    # not finite: the search for every draw
    nan = _Buckets(np.array([0.5, np.nan, 1.0]))
    assert nan.table is None
    u = rng.random(100)
    assert np.array_equal(nan.lengths(u), _searched(np.array([0.5, np.nan, 1.0]), u))


def test_presets_and_errors():
    assert get_acceptance("paper-qwen32b").params == paper_qwen32b_tp4().params
    assert get_acceptance("CHAIN-0.8").alphas == (0.8,)
    for bad in ("chain-1.5", "chain-x", "eagle"):
        with pytest.raises(InputError, match="unknown acceptance model"):
            get_acceptance(bad)
    with pytest.raises(InputError, match=r"drafter\.quality"):
        ChainAcceptance((0.9,)).expected_accept_length(SDConfig.chain(3), DrafterState(quality=1.2))
    with pytest.raises(InputError, match="coverage"):
        TreeAcceptance(1.5, 0.1, 0.0)
