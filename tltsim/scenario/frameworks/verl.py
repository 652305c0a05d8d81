"""A tlt scenario from a verl PPO/GRPO trainer config (``tlt scenario from-verl``).

The layout is verl's own (volcengine/verl ``verl/trainer/config/ppo_trainer.yaml``, composed by Hydra;
``_generated_ppo_trainer.yaml`` beside it is the flat form): one tree, amended by the launch script's
overrides (``examples/grpo_trainer/run_qwen2-7b.sh``: ``actor_rollout_ref.rollout.n=5`` ...). A file
that still holds Hydra's ``defaults:`` list is refused: composing verl's config groups needs verl
itself, and ``python3 -m verl.trainer.main_ppo --cfg job [overrides]`` prints the composed tree.

What maps (verl key -> scenario field):

========================================================  ===========================================
``actor_rollout_ref.model.path``                          ``model.name`` (catalog hub id, local folder)
``actor_rollout_ref.rollout.tensor_model_parallel_size``  ``cluster.tp``
``trainer.nnodes`` x ``trainer.n_gpus_per_node``          ``cluster.gpus`` (hybrid engine: every GPU
                                                          also rolls out)
``data.train_batch_size``                                 ``trace.prompts_per_step`` (prompts, not
                                                          responses, in verl)
``actor_rollout_ref.rollout.n``                           ``trace.samples`` / ``trace.expand_samples``
``actor_rollout_ref.rollout.response_length``             ``trace.cap`` (verl sets it from
(``data.max_response_length``)                            ``data.max_response_length``)
``actor_rollout_ref.rollout.max_num_seqs``                ``engine.max_batch``
``actor_rollout_ref.rollout.gpu_memory_utilization``      ``engine.kv_mem_fraction``
``actor_rollout_ref.rollout.max_num_batched_tokens``      ``engine.prefill_budget``
``...rollout.engine_kwargs.vllm.speculative_config``,     ``policies`` (+ ``static:SHAPE``),
``...rollout.engine_kwargs.sglang.speculative_*``         ``drafter.kind``
``trainer.rollout_data_dir`` (a folder that exists)       ``trace.name``; ``trace.tokenizer`` from
                                                          the model folder's ``tokenizer.json``
========================================================  ===========================================
"""

from __future__ import annotations

from pathlib import Path

from tltcore.errors import InputError
from tltsim.scenario.frameworks.common import (
    ConfigTree,
    Conversion,
    Found,
    Unresolved,
    apply_overrides,
    read_yaml_tree,
    source_text,
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

WHAT = "a verl trainer config (verl/trainer/config/ppo_trainer.yaml)"
MODEL_PATH = "actor_rollout_ref.model.path"
ROLLOUT = "actor_rollout_ref.rollout"


def load(config: str | Path, overrides: tuple[str, ...] = ()) -> ConfigTree:
    """The verl config with the launch script's overrides applied."""
    path, data = read_yaml_tree(config, "verl config")
    if "defaults" in data:
        raise InputError("holds Hydra's defaults list, which only verl can compose; give the composed config: "
                         "python3 -m verl.trainer.main_ppo --cfg job [your overrides] > config.yaml (or verl's "
                         "verl/trainer/config/_generated_ppo_trainer.yaml)", path=path, field="defaults")
    tree, given = apply_overrides(data, overrides, what=f"verl config {path.name}")
    return ConfigTree(tree, path, overridden=given)


def convert(tree: ConfigTree, overrides: tuple[str, ...] = (), sets: tuple[str, ...] = ()) -> Conversion:
    """The scenario fields a verl config gives, and what it could not map."""
    conv = with_sets(Conversion("verl", tree.path, tuple(overrides)), sets)
    set_model(conv, tree, MODEL_PATH, WHAT)
    set_int(conv, tree, f"{ROLLOUT}.tensor_model_parallel_size", "cluster.tp", WHAT)
    set_gpus(conv, tree, "trainer.nnodes", "trainer.n_gpus_per_node", WHAT)
    set_int(conv, tree, "data.train_batch_size", "trace.prompts_per_step", WHAT)
    # verl's vLLM/SGLang rollouts stop at the rollout's response_length, which defaults to data.max_response_length
    absent = isinstance(tree.get(f"{ROLLOUT}.response_length"), Unresolved)
    cap_key = "data.max_response_length" if absent else f"{ROLLOUT}.response_length"
    set_int(conv, tree, cap_key, "trace.cap", WHAT)
    set_int(conv, tree, f"{ROLLOUT}.max_num_seqs", "engine.max_batch", WHAT, required=False)
    set_fraction(conv, tree, f"{ROLLOUT}.gpu_memory_utilization", "engine.kv_mem_fraction")
    set_int(conv, tree, f"{ROLLOUT}.max_num_batched_tokens", "engine.prefill_budget", WHAT, required=False)
    _rollout_dump(conv, tree)
    fit_samples(conv, tree, require(tree, f"{ROLLOUT}.n", WHAT))
    engine = _engine(conv, tree)
    set_speculative(conv, tree, engine, f"{ROLLOUT}.engine_kwargs.vllm.speculative_config",
                    f"{ROLLOUT}.engine_kwargs.sglang")
    _notes(conv, tree)
    return conv


def _engine(conv: Conversion, tree: ConfigTree) -> str | None:
    found = tree.get(f"{ROLLOUT}.name")
    if isinstance(found, Unresolved):
        conv.note(found.key, f"{found.why}; tlt models a vLLM/SGLang-style engine either way")
        return None
    name = str(found.value).strip().lower()
    if name in ("vllm", "sglang"):
        conv.note(found.key, f"= {name}: no scenario field (tlt prices vLLM and SGLang rollouts with the same "
                  "continuous-batching engine model)")
        return name
    conv.note(found.key, f"= {found.value}: tlt models vLLM/SGLang-style continuous batching, not this engine")
    return None


def _rollout_dump(conv: Conversion, tree: ConfigTree) -> None:
    """``trainer.rollout_data_dir``: verl's per-step rollout dumps, the trace of this very run where they
    exist on this machine."""
    found = tree.get("trainer.rollout_data_dir")
    if not isinstance(found, Found) or found.value in (None, ""):
        return
    folder = Path(str(found.value)).expanduser()
    if folder.is_dir():
        conv.set("trace.name", str(folder.resolve()), source_text(tree, found) + " (verl's rollout dumps)")
        _dump_tokenizer(conv, tree)
    else:
        conv.note(found.key, f"= {found.value}: no such folder here, so the default trace is simulated; once the "
                  "dumps are on this machine give --set trace.name=FOLDER")


def _dump_tokenizer(conv: Conversion, tree: ConfigTree) -> None:
    """verl's dumps hold text, not token counts (:mod:`tltsim.traces.frameworks.verl`): the model's own
    ``tokenizer.json`` counts them where the model path is a folder here; otherwise say what to pass."""
    model = tree.get(MODEL_PATH)
    if isinstance(model, Found) and model.value not in (None, ""):
        tokenizer = Path(str(model.value)).expanduser() / "tokenizer.json"
        if tokenizer.is_file():
            conv.set("trace.tokenizer", str(tokenizer.resolve()), source_text(tree, model) + " (its tokenizer.json)")
            return
    conv.note("trace.tokenizer", "verl's rollout dumps hold text: tokens are counted with the model's tokenizer.json, "
              f"and {MODEL_PATH} is not a folder holding one here (--set trace.tokenizer=PATH/tokenizer.json, unless "
              "the dumps log response_length)")


def _notes(conv: Conversion, tree: ConfigTree) -> None:
    """Keys that matter for rollout time but have no scenario field."""
    steps, epochs = tree.get("trainer.total_training_steps"), tree.get("trainer.total_epochs")
    if isinstance(steps, Found) and steps.value is not None:
        conv.note(steps.key, f"= {steps.value} training steps: not a scenario field (trace.num_steps is how many "
                  "steps are simulated); scale the per-step time by it")
    elif isinstance(epochs, Found) and epochs.value is not None:
        conv.note(epochs.key, f"= {epochs.value} epochs: the steps per epoch depend on the data set's size "
                  "(prompts / data.train_batch_size), which the config does not hold")
    prompt = tree.get("data.max_prompt_length")
    if isinstance(prompt, Found):
        conv.note(prompt.key, f"= {prompt.value}: a limit, not a length; prompt lengths come from the trace "
                  "(trace.default_prompt_tokens where it has none)")
    temperature = tree.get(f"{ROLLOUT}.temperature")
    if isinstance(temperature, Found):
        conv.note(temperature.key, f"= {temperature.value}: acceptance presets were measured at their own "
                  "sampling settings; tlt does not rescale acceptance by temperature")
    for key, off in ((f"{ROLLOUT}.over_sample_rate", 0), (f"{ROLLOUT}.multi_turn.enable", False),
                     ("actor_rollout_ref.hybrid_engine", True)):
        found = tree.get(key)
        if isinstance(found, Found) and found.value not in (off, None):
            conv.note(key, f"= {found.value}: not modelled (tlt simulates single-turn rollouts of the whole batch "
                      "on the training GPUs)")
    assume_gpu(conv, "verl")
