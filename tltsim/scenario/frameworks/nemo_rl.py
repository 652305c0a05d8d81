"""A tlt scenario from a NeMo-RL GRPO config (``tlt scenario from-nemo-rl``).

The layout is NeMo-RL's own (NVIDIA-NeMo/RL ``examples/configs/grpo_math_1B.yaml``; ``grpo_math_8B.yaml``
inherits it through ``defaults: "grpo_math_1B.yaml"``). ``defaults`` (one file or a list, relative to
the file naming them, each loaded with its own defaults first, later ones winning) and a mapping's
``_override_: true`` (it replaces the inherited mapping instead of merging into it) follow
``nemo_rl/utils/config.py`` (``load_config_with_inheritance``, ``merge_with_override``); overrides on
the command line are Hydra's, as ``parse_hydra_overrides`` there applies them.

What maps (NeMo-RL key -> scenario field):

=====================================================  ===============================================
``policy.model_name``                                  ``model.name``
``policy.generation.vllm_cfg.tensor_parallel_size``    ``cluster.tp``
``cluster.num_nodes`` x ``cluster.gpus_per_node``      ``cluster.gpus`` (colocated generation); with
                                                       ``policy.generation.colocated.enabled: false``
                                                       its ``resources`` (the generation GPUs)
``grpo.num_prompts_per_step``                          ``trace.prompts_per_step``
``grpo.num_generations_per_prompt``                    ``trace.samples`` / ``trace.expand_samples``
``policy.generation.max_new_tokens``                   ``trace.cap`` (NeMo-RL sets it to
(``policy.max_total_sequence_length``)                 ``policy.max_total_sequence_length``)
``policy.generation.vllm_cfg.gpu_memory_utilization``  ``engine.kv_mem_fraction``
``policy.generation.vllm_kwargs.max_num_seqs`` /       ``engine.max_batch`` / ``engine.prefill_budget``
``max_num_batched_tokens``
``policy.generation.vllm_kwargs.speculative_config``   ``policies`` (+ ``static:SHAPE``), ``drafter.kind``
=====================================================  ===============================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tltcore.errors import InputError
from tltsim.scenario.frameworks.common import (
    ConfigTree,
    Conversion,
    Found,
    Unresolved,
    apply_overrides,
    read_yaml_tree,
    with_sets,
)
from tltsim.scenario.frameworks.fields import (
    assume_gpu,
    fit_samples,
    require,
    set_fraction,
    set_gpus,
    set_int,
    set_model,
    set_speculative,
)

WHAT = "a NeMo-RL GRPO config (examples/configs/grpo_math_1B.yaml)"
GEN = "policy.generation"
MAX_DEPTH = 32  # defaults chains deeper than this are a loop in all but name


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """OmegaConf.merge of plain data (mappings merge key by key, anything else is replaced), with
    NeMo-RL's ``_override_: true`` replacing a mapping whole."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and value.get("_override_") is True:
            out[key] = {k: v for k, v in value.items() if k != "_override_"}
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _load(path: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    p, data = read_yaml_tree(path, "NeMo-RL config")
    real = p.resolve()
    if real in chain or len(chain) > MAX_DEPTH:
        loop = " -> ".join(str(x) for x in (*chain, real))
        raise InputError(f"defaults loop: {loop}", path=chain[0] if chain else p, field="defaults")
    defaults = data.pop("defaults", None)
    if defaults is None:
        return data
    names = [defaults] if isinstance(defaults, str) else defaults
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
        raise InputError("must be a file name or a list of file names (NeMo-RL's inheritance)", path=p,
                         field="defaults")
    merged: dict[str, Any] = {}
    for name in names:
        parent = Path(name.strip())
        parent = parent if parent.is_absolute() else p.parent / parent
        if not parent.is_file():
            raise InputError(f"'{name}' is not a file (looked for {parent})", path=p, field="defaults")
        merged = _merge(merged, _load(parent, (*chain, real)))
    return _merge(merged, data)


def load(config: str | Path, overrides: tuple[str, ...] = ()) -> ConfigTree:
    """The NeMo-RL config with its ``defaults`` merged in and the command line's overrides applied."""
    path = Path(config)
    data = _load(path, ())
    tree, given = apply_overrides(data, overrides, what=f"NeMo-RL config {path.name}")
    return ConfigTree(tree, path, overridden=given)


def convert(tree: ConfigTree, overrides: tuple[str, ...] = (), sets: tuple[str, ...] = ()) -> Conversion:
    """The scenario fields a NeMo-RL GRPO config gives, and what it could not map."""
    conv = with_sets(Conversion("nemo-rl", tree.path, tuple(overrides)), sets)
    set_model(conv, tree, "policy.model_name", WHAT)
    set_int(conv, tree, f"{GEN}.vllm_cfg.tensor_parallel_size", "cluster.tp", WHAT)
    colocated = tree.value(f"{GEN}.colocated.enabled", True)
    resources = f"{GEN}.colocated.resources"
    if colocated is False and tree.value(f"{resources}.num_nodes") is not None:
        set_gpus(conv, tree, f"{resources}.num_nodes", f"{resources}.gpus_per_node", WHAT)
        conv.note("cluster.num_nodes", "generation runs on its own GPUs (policy.generation.colocated.enabled = "
                  "false): cluster.gpus counts those only")
    else:
        set_gpus(conv, tree, "cluster.num_nodes", "cluster.gpus_per_node", WHAT)
    set_int(conv, tree, "grpo.num_prompts_per_step", "trace.prompts_per_step", WHAT)
    cap_key = f"{GEN}.max_new_tokens"
    if isinstance(tree.get(cap_key), Unresolved):
        cap_key = "policy.max_total_sequence_length"
    set_int(conv, tree, cap_key, "trace.cap", WHAT)
    set_fraction(conv, tree, f"{GEN}.vllm_cfg.gpu_memory_utilization", "engine.kv_mem_fraction")
    set_int(conv, tree, f"{GEN}.vllm_kwargs.max_num_seqs", "engine.max_batch", WHAT, required=False)
    set_int(conv, tree, f"{GEN}.vllm_kwargs.max_num_batched_tokens", "engine.prefill_budget", WHAT, required=False)
    fit_samples(conv, tree, require(tree, "grpo.num_generations_per_prompt", WHAT))
    backend = tree.get(f"{GEN}.backend")
    engine = str(backend.value).strip().lower() if isinstance(backend, Found) else None
    if engine is not None:
        conv.note(backend.key, f"= {backend.value}: no scenario field" + (
            " (tlt prices vLLM rollouts with its continuous-batching engine model)" if engine == "vllm" else
            "; tlt models vLLM-style continuous batching, not this backend"))
    set_speculative(conv, tree, "vllm" if engine == "vllm" else None, f"{GEN}.vllm_kwargs.speculative_config", None)
    _notes(conv, tree)
    return conv


def _notes(conv: Conversion, tree: ConfigTree) -> None:
    steps, epochs = tree.get("grpo.max_num_steps"), tree.get("grpo.max_num_epochs")
    if isinstance(steps, Found):
        conv.note(steps.key, f"= {steps.value} steps (at most; also bounded by grpo.max_num_epochs"
                  + (f" = {epochs.value}" if isinstance(epochs, Found) else "") + "): not a scenario field "
                  "(trace.num_steps is how many steps are simulated); scale the per-step time by it")
    turns = tree.get("grpo.max_rollout_turns")
    if isinstance(turns, Found) and turns.value not in (1, None):
        conv.note(turns.key, f"= {turns.value}: multi-turn rollouts are not modelled (one turn per sample)")
    total = tree.get("policy.max_total_sequence_length")
    if isinstance(total, Found):
        conv.note(total.key, f"= {total.value}: prompt + response limit of the engine; the response cap is "
                  "trace.cap and prompt lengths come from the trace")
    temperature = tree.get(f"{GEN}.temperature")
    if isinstance(temperature, Found):
        conv.note(temperature.key, f"= {temperature.value}: acceptance presets were measured at their own "
                  "sampling settings; tlt does not rescale acceptance by temperature")
    assume_gpu(conv, "NeMo-RL")
