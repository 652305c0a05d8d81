"""`tlt scenario …`: scenarios from an RL framework's own config.

``tlt scenario from-verl CONFIG.yaml [OVERRIDES...]`` and ``tlt scenario from-nemo-rl CONFIG.yaml
[OVERRIDES...]`` read the framework's YAML (with the launch script's Hydra-style overrides), write a
scenario file (TOML, or YAML for a ``.yaml`` / ``.yml`` ``--out``) whose every field says where it came
from, and print what could not be mapped (:mod:`tltsim.scenario.frameworks`). The file is checked as
``--scenario`` reads it before it is written, and a file the command did not write is never replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from tltcore.errors import InputError

app = typer.Typer(help="Scenarios from an RL framework's own config (verl, NeMo-RL).", no_args_is_help=True)

OVERRIDES_HELP = ("Hydra-style overrides as the framework's launch script passes them: key=value, +key=value "
                  "(a new key), ++key=value, ~key.")
OUT_HELP = ("Scenario file to write: TOML, or YAML when it ends .yaml/.yml. A file this command did not write is "
            "never replaced.")
SET_HELP = ("A scenario field the config does not give (or to replace a mapped one): --set cluster.gpu=H200, "
            "--set trace.name=FILE. Repeatable.")


def _convert(framework: str, config: Path, overrides: list[str] | None, out: Path, sets: list[str] | None,
             load: Callable, convert: Callable) -> None:
    from tltcore.atomic import check_not_inputs, check_output_file, write_text
    from tltcore.config_files import YAML_SUFFIXES
    from tltsim.scenario.frameworks.common import checked, scenario_text, written_by_us

    suffix = out.suffix.lower()
    if suffix not in (".toml", *YAML_SUFFIXES):
        raise InputError("give a .toml or .yaml file name (the scenario's format follows it)", field="--out")
    check_output_file(out, writer=f"tlt scenario from-{framework}", written_by=written_by_us)
    check_not_inputs(out, [config])
    given = tuple(overrides or ())
    tree = load(config, given)
    conv = convert(tree, given, tuple(sets or ()))
    checked(conv)
    text = scenario_text(conv, as_yaml=suffix in YAML_SUFFIXES)
    write_text(out, text)
    typer.echo(f"scenario: {out}")
    for m in conv.fields():
        typer.echo(f"  {m.field} = {m.value!r}  <- {m.source}")
    if conv.notes:
        typer.echo("not mapped:")
        for n in conv.notes:
            typer.echo(f"  {n.key}: {n.why}")
    typer.echo(f"next: tlt sim run --scenario {out}   or   tlt advise --scenario {out}")


@app.command("from-verl")
def from_verl(
    config: Annotated[Path, typer.Argument(help="verl trainer config, composed (python3 -m verl.trainer.main_ppo "
                                           "--cfg job > config.yaml, or verl's _generated_ppo_trainer.yaml).")],
    overrides: Annotated[list[str] | None, typer.Argument(help=OVERRIDES_HELP, show_default=False)] = None,
    out: Annotated[Path, typer.Option("--out", help=OUT_HELP)] = Path("scenario.toml"),
    set_: Annotated[list[str] | None, typer.Option("--set", help=SET_HELP, show_default=False)] = None,
) -> None:
    """Write a scenario from a verl PPO/GRPO trainer config: model, rollout TP, GPUs, batch, samples per
    prompt, response cap, engine limits and a speculative setting; prints what it could not map."""
    from tltsim.scenario.frameworks import verl

    _convert("verl", config, overrides, out, set_, verl.load, verl.convert)


@app.command("from-nemo-rl")
def from_nemo_rl(
    config: Annotated[Path, typer.Argument(help="NeMo-RL GRPO config (examples/configs/grpo_math_1B.yaml layout; "
                                           "its defaults: files are merged in).")],
    overrides: Annotated[list[str] | None, typer.Argument(help=OVERRIDES_HELP, show_default=False)] = None,
    out: Annotated[Path, typer.Option("--out", help=OUT_HELP)] = Path("scenario.toml"),
    set_: Annotated[list[str] | None, typer.Option("--set", help=SET_HELP, show_default=False)] = None,
) -> None:
    """Write a scenario from a NeMo-RL GRPO config: model, generation TP, GPUs, prompts per step,
    generations per prompt, response cap and engine limits; prints what it could not map."""
    from tltsim.scenario.frameworks import nemo_rl

    _convert("nemo-rl", config, overrides, out, set_, nemo_rl.load, nemo_rl.convert)
