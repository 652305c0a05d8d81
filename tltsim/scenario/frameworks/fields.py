"""Mapping steps both framework mappers take: the model, integers with their ranges, the GPU count, the
samples per prompt against the trace that will be simulated, the engine limits and a speculative
decoding setting the rollout engine was given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tltcore.config import suggest
from tltcore.errors import InputError
from tltsim.scenario.frameworks.common import ConfigTree, Conversion, Found, Unresolved, source_text
from tltsim.scenario.schema import DEFAULT_TRACE, ModelSection


def require(tree: ConfigTree, key: str, what: str) -> Found | Unresolved:
    """``key``'s value; absent altogether is an error naming the file and the key (the file is not
    the framework's config, or an override removed it)."""
    found = tree.get(key)
    if isinstance(found, Unresolved) and found.absent:
        raise InputError(f"missing; {what} has it", path=tree.path, field=key)
    return found


def integer(tree: ConfigTree, found: Found | Unresolved, *, low: int = 1) -> int | None:
    """A found value as an integer ``>= low`` (a float with no fraction, as YAML may give ``8.0``), an
    error naming the key otherwise; None (with no error) when it was unresolved."""
    if isinstance(found, Unresolved):
        return None
    v = found.value
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise InputError(f"must be an integer, got {found.value!r}", path=tree.path, field=found.key)
    if v < low:
        raise InputError(f"must be >= {low}, got {v}", path=tree.path, field=found.key)
    return v


def set_int(conv: Conversion, tree: ConfigTree, key: str, dotted: str, what: str, *, low: int = 1,
            required: bool = True) -> int | None:
    """Map integer ``key`` to scenario field ``dotted``; unresolved: a note and the field's default."""
    found = require(tree, key, what) if required else tree.get(key)
    if isinstance(found, Unresolved):
        if found.absent:
            return None
        conv.note(key, f"{found.why}; {dotted} keeps tlt's default")
        return None
    value = integer(tree, found, low=low)
    conv.set(dotted, value, source_text(tree, found))
    return value


def set_fraction(conv: Conversion, tree: ConfigTree, key: str, dotted: str) -> None:
    """Map a fraction in (0, 1] (``gpu_memory_utilization``) when the config has it."""
    found = tree.get(key)
    if isinstance(found, Unresolved):
        if not found.absent:
            conv.note(key, f"{found.why}; {dotted} keeps tlt's default")
        return
    v = found.value
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 1:
        raise InputError(f"must be a fraction in (0, 1], got {v!r}", path=tree.path, field=key)
    conv.set(dotted, float(v), source_text(tree, found))


def set_model(conv: Conversion, tree: ConfigTree, key: str, what: str) -> None:
    """``model.name`` from the framework's model path: a preset, a hub id of tlt's catalog, or a local
    folder (or file) with a config.json here; anything else is a note and the default model."""
    from tltcore.model_catalog import catalog
    from tltcore.model_shape import resolve_model

    found = require(tree, key, what)
    default = ModelSection.model_fields["name"].default
    if isinstance(found, Unresolved):
        conv.note(key, f"{found.why}; model.name keeps tlt's default '{default}' (--set model.name=HUB_ID)")
        conv.set("model.name", default, f"tlt's default: {key} {found.why}", key=key)
        return
    name = str(found.value).strip()
    try:
        _, where = resolve_model(name)
    except InputError:
        ids = list(catalog())
        hint = suggest(name, ids) or suggest(name.rsplit("/", 1)[-1], [i.rsplit("/", 1)[-1] for i in ids])
        conv.note(key, f"'{name}' is neither a model of tlt's catalog (tlt model list) nor a folder with a "
                  f"config.json on this machine{hint}; model.name keeps tlt's default '{default}': give "
                  "--set model.name=HUB_ID, or a path to the model's config.json")
        conv.set("model.name", default, f"tlt's default: {key} = '{name}' is not a model tlt knows", key=key)
        return
    local = Path(name).expanduser()
    value = str(local.resolve()) if isinstance(where, Path) and local.exists() else name
    conv.set("model.name", value, source_text(tree, found))


def set_gpus(conv: Conversion, tree: ConfigTree, nodes_key: str, per_node_key: str, what: str) -> None:
    """``cluster.gpus`` = nodes x GPUs per node."""
    nodes, per_node = require(tree, nodes_key, what), require(tree, per_node_key, what)
    n, g = integer(tree, nodes), integer(tree, per_node)
    if n is None or g is None:
        bad = nodes if isinstance(nodes, Unresolved) else per_node
        assert isinstance(bad, Unresolved)
        conv.note(bad.key, f"{bad.why}; cluster.gpus keeps tlt's default")
        return
    assert isinstance(nodes, Found) and isinstance(per_node, Found)
    conv.set("cluster.gpus", n * g, f"{source_text(tree, nodes)} x {source_text(tree, per_node)}")


def fit_samples(conv: Conversion, tree: ConfigTree, found: Found | Unresolved) -> None:
    """Samples per prompt against the trace the scenario will simulate: ``trace.samples`` where the
    trace has at least that many per prompt, ``trace.expand_samples`` for a one-sample trace (grown by
    the dispersion model), a note where neither fits. Also notes a batch larger than the trace's pool
    and a response cap above the trace's own (responses longer than the trace's cap were never seen)."""
    n = integer(tree, found)
    if n is None:
        assert isinstance(found, Unresolved)
        conv.note(found.key, f"{found.why}; the trace's own samples per prompt are simulated")
        return
    assert isinstance(found, Found)
    if conv.get("trace.name") is None:
        conv.set("trace.name", DEFAULT_TRACE, "tlt's default trace: the config names none (--set trace.name=...)",
                 key="trace.name")
    given = [f for f in ("trace.samples", "trace.expand_samples") if f in conv.sets]
    if given:
        conv.note(found.key, f"= {n}: replaced by --set {given[0]}")
    name = conv.get("trace.name")
    try:
        from tltsim.scenario.schema import TraceSection
        from tltsim.scenario.workload import trace_rows

        # the trace as the scenario will read it: its column mapping and tokenizer (a verl dump is text)
        df = trace_rows(TraceSection(name=name, map=conv.get("trace.map"), tokenizer=conv.get("trace.tokenizer")))
    except (InputError, OSError) as exc:
        conv.note(found.key, f"= {n}: the trace {name} could not be read here to fit samples per prompt ({exc}); "
                  "give trace.samples or trace.expand_samples with --set")
        return
    sizes = df.groupby(["step", "group_id"], sort=False).size()
    most = int(sizes.max()) if len(sizes) else 0
    if given:
        pass
    elif most == 1:
        conv.set("trace.expand_samples", n, source_text(tree, found) + f"; {name} has one sample per prompt")
    elif n <= most:
        conv.set("trace.samples", n, source_text(tree, found) + f"; {name} has {most} per prompt")
    else:
        conv.note(found.key, f"= {n} samples per prompt, but the trace {name} has {most} per prompt (and only a "
                  f"one-sample trace can be expanded): {most} are simulated; give a trace with >= {n} samples "
                  "per prompt (--set trace.name=...)")
    groups = int(sizes.groupby(level=0).size().max()) if len(sizes) else 0
    prompts = conv.get("trace.prompts_per_step")
    if isinstance(prompts, int) and prompts > groups:
        conv.note("trace.prompts_per_step", f"= {prompts} prompts per step, but the trace {name} has {groups} prompt "
                  f"groups per step: each simulated step has {groups}")
    cap = conv.get("trace.cap")
    capped = df.loc[df["hit_cap"].astype(bool), "response_tokens"]
    if isinstance(cap, int) and len(capped) and cap > int(capped.max()):
        conv.note("trace.cap", f"= {cap}, but the trace {name} was generated with a cap of {int(capped.max()):,} "
                  "tokens: its capped responses stay at that length (their natural length is unknown)")


def set_speculative(conv: Conversion, tree: ConfigTree, engine: str | None, vllm_key: str | None,
                    sglang_key: str | None) -> None:
    """The rollout engine's own speculative decoding setting, as a compared policy (``static:SHAPE``)
    and ``drafter.kind``: vLLM's ``speculative_config`` (``method``, ``num_speculative_tokens``, a
    chain) or SGLang's ``speculative_algorithm`` / ``_num_steps`` / ``_eagle_topk`` /
    ``_num_draft_tokens`` (names as :mod:`tltsim.advise_export` writes them)."""
    from tltsim.advise_export import SGLANG_ALGORITHM_OF, VLLM_METHODS
    from tltsim.scenario.schema import DEFAULT_POLICY_NAMES

    shape: str | None = None
    kind: str | None = None
    where = ""
    if vllm_key is not None and engine in (None, "vllm"):
        spec = tree.get(vllm_key)
        if isinstance(spec, Found) and isinstance(spec.value, dict) and spec.value:
            cfg = spec.value
            method = str(cfg.get("method", "")).strip()
            kinds = {v: k for k, v in VLLM_METHODS.items()}
            k = cfg.get("num_speculative_tokens")
            if method not in kinds or not isinstance(k, int) or isinstance(k, bool) or k < 1:
                conv.note(vllm_key, f"{_short(cfg)}: tlt maps vLLM methods {', '.join(sorted(kinds))} with an integer "
                          "num_speculative_tokens; this one is not compared")
                return
            kind, shape, where = kinds[method], f"{k}_1_{k}", f"{vllm_key} = {_short(cfg)}"
            if cfg.get("model") and kind == "draft-model":
                conv.note(f"{vllm_key}.model", f"'{cfg['model']}': drafter.draft_model keeps tlt's default; give "
                          "--set drafter.draft_model=HUB_ID")
    if shape is None and sglang_key is not None and engine in (None, "sglang"):
        kw = tree.get(sglang_key)
        if isinstance(kw, Found) and isinstance(kw.value, dict) and kw.value.get("speculative_algorithm"):
            cfg = kw.value
            algorithm = str(cfg["speculative_algorithm"]).strip().upper()
            kinds = {v: k for k, v in SGLANG_ALGORITHM_OF.items()}
            steps, topk, draft = (cfg.get(f"speculative_{x}") for x in ("num_steps", "eagle_topk", "num_draft_tokens"))
            ints = all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in (steps, topk, draft))
            if algorithm not in kinds or not ints or draft < 2:
                conv.note(sglang_key, f"speculative settings {_short(cfg)}: tlt maps SGLang algorithms "
                          f"{', '.join(sorted(kinds))} with integer num_steps, eagle_topk and num_draft_tokens; "
                          "this one is not compared")
                return
            # SGLang's num_draft_tokens counts the verified root token; tlt's verify tokens do not (advise_export)
            kind, shape, where = kinds[algorithm], f"{steps}_{topk}_{draft - 1}", f"{sglang_key} = {_short(cfg)}"
    if shape is None:
        return
    policies = [*DEFAULT_POLICY_NAMES, f"static:{shape}"]
    conv.set("policies", policies, f"{where}: your setting compared as static:{shape} beside tlt's defaults")
    conv.set("drafter.kind", kind, where)


def _short(value: Any) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= 120 else text[:117] + "..."


def assume_gpu(conv: Conversion, framework: str) -> None:
    """The configs name no GPU model: the scenario states the one it assumes."""
    from tltsim.scenario.schema import ClusterSection

    gpu = ClusterSection.model_fields["gpu"].default
    conv.set("cluster.gpu", gpu, f"assumed: {framework}'s config does not name the GPU model (--set cluster.gpu=NAME)",
             key="cluster.gpu")
