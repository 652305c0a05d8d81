"""Scenarios: what to simulate, as a typed tree of frozen pydantic models loaded from TOML.

A scenario names the trace steps, the model, the cluster layout, the engine limits, the cost and
acceptance models, the drafter, the SD policies to compare and a seed. Every field has a dotted path
(``cluster.tp``, ``cost.sd_overhead_s``, ``policies``) used in error messages, by ``--set`` and by
sweeps; the generic machinery (TOML, overrides on raw data, errors) is :mod:`tltcore.config`. The
package's parts:

* :mod:`~tltsim.scenario.schema` — the sections and :class:`Scenario`, their constraints and checks;
* :mod:`~tltsim.scenario.resolve` — a file and settings to one checked scenario (:func:`resolve`);
* :mod:`~tltsim.scenario.policy_paths` — dotted paths into the policy specs (``policies.1.threshold``);
* :mod:`~tltsim.scenario.identity` — the resolved TOML and the content hash;
* :mod:`~tltsim.scenario.workload` — the trace steps it names (:func:`load_steps`);
* :mod:`~tltsim.scenario.build` — acceptance and cost models, engine, :func:`prepare`;
* :mod:`~tltsim.scenario.run` — :func:`run_policy`, :func:`run_each`, :func:`compare_policies`.

Every model constant a user may question is a field: GPU efficiencies, SD overheads, the switch
re-prefill budget fraction, the drafter's quality, the acceptance parameters. Scenarios (frozen
models), never closures, cross process boundaries: a worker process rebuilds its inputs with
:func:`prepare`. ``tlt sim schema`` prints the JSON schema (``Scenario.model_json_schema()``).

Defaults (a scenario file may be empty) show the long tail on a real trace: all 4,768 AIME
responses of ``r1distill_qwen1.5b_aime_8samples`` (596 prompts x 8, up to 16K tokens) as one RL
step, Qwen2.5-7B on 64 H100 with TP 4 (16 rollout workers), the veRL engine limits
(``max_num_seqs`` 1024, ``gpu_memory_utilization`` 0.9, ``max_num_batched_tokens`` 8192), ``no-sd``
vs ``elastic+beg-mab``, the paper-fitted tree acceptance in expected-value mode.
"""

from __future__ import annotations

from tltcore.config import MAX_GPUS, MAX_SECONDS
from tltsim.scenario.build import (
    SimInputs,
    cost_model,
    describe_acceptance,
    describe_gpu,
    drafter_acceptance,
    graph_memory_bytes,
    is_borrowed,
    make_policies,
    prepare,
)
from tltsim.scenario.identity import (
    policies_with_baseline,
    policy_names,
    resolved_dict,
    scenario_hash,
    scenario_toml,
    trace_fingerprint,
)
from tltsim.scenario.resolve import (
    BUNDLED_SCENARIOS,
    RL_ONLY_FIELDS,
    RL_ONLY_SECTIONS,
    Resolved,
    apply_override,
    bundled_scenarios,
    field_paths,
    load_scenario,
    resolve,
    scenario_from_dict,
    set_field,
    set_fields,
    setting_type,
    split_policy_specs,
    validate,
    validate_data,
    with_values,
)
from tltsim.scenario.run import compare_policies, run_each, run_policy
from tltsim.scenario.schema import (
    BASELINE_POLICY,
    CUDA_GRAPH_MODES,
    DEFAULT_POLICIES,
    DEFAULT_POLICY_NAMES,
    DEFAULT_TRACE,
    MAX_BATCH,
    MAX_PREFILL_BUDGET,
    MAX_PROMPTS,
    MAX_RESPONSES,
    MAX_SEED,
    MAX_STEPS,
    MAX_TP,
    MAX_WORKERS,
    AcceptanceSection,
    ClusterSection,
    CostSection,
    DrafterConfig,
    EngineSection,
    ModelSection,
    RLPhaseConfig,
    Scenario,
    SpotTrainerConfig,
    TraceSection,
    acceptance_model,
    cluster_gpu,
    gpu_efficiencies,
    scenario_gpu,
)
from tltsim.scenario.workload import load_steps, trace_rows

__all__ = [
    "BASELINE_POLICY",
    "BUNDLED_SCENARIOS",
    "CUDA_GRAPH_MODES",
    "DEFAULT_POLICIES",
    "DEFAULT_POLICY_NAMES",
    "DEFAULT_TRACE",
    "MAX_BATCH",
    "MAX_GPUS",
    "MAX_PREFILL_BUDGET",
    "MAX_PROMPTS",
    "MAX_RESPONSES",
    "MAX_SECONDS",
    "MAX_SEED",
    "MAX_STEPS",
    "MAX_TP",
    "MAX_WORKERS",
    "RL_ONLY_FIELDS",
    "RL_ONLY_SECTIONS",
    "AcceptanceSection",
    "ClusterSection",
    "CostSection",
    "DrafterConfig",
    "EngineSection",
    "ModelSection",
    "RLPhaseConfig",
    "Resolved",
    "Scenario",
    "SimInputs",
    "SpotTrainerConfig",
    "TraceSection",
    "acceptance_model",
    "apply_override",
    "bundled_scenarios",
    "cluster_gpu",
    "compare_policies",
    "cost_model",
    "describe_acceptance",
    "describe_gpu",
    "drafter_acceptance",
    "field_paths",
    "gpu_efficiencies",
    "graph_memory_bytes",
    "is_borrowed",
    "load_scenario",
    "load_steps",
    "make_policies",
    "policies_with_baseline",
    "policy_names",
    "prepare",
    "resolve",
    "resolved_dict",
    "run_each",
    "run_policy",
    "scenario_from_dict",
    "scenario_gpu",
    "scenario_hash",
    "scenario_toml",
    "set_field",
    "set_fields",
    "setting_type",
    "split_policy_specs",
    "trace_fingerprint",
    "trace_rows",
    "validate",
    "validate_data",
    "with_values",
]
