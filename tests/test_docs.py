"""The README and the docs site say only what is true of this checkout.

- README.md stays a page for users: at most 250 lines and 25 KB, and no commit hashes anywhere in the
  README or docs/ (the history belongs in git and in the reports).
- Every relative link and image in README.md and docs/**/*.md resolves to a file or folder of the
  repository (links into the generated CLI reference, to one of its generated pages).
- Every `tlt ...` command shown in a code block names real sub-commands and only options that command
  has; every `--set section.field=...` names a scenario field; every `--set` of a policy or of a field
  inside one (`policies.1.threshold=8`, typed per policy kind) resolves, through the code the CLI uses,
  on the command's scenario (a bundled one, or the defaults) with its `--policy` list; every
  `python -m MODULE` names a module that exists and every `python path.py` a file that exists.
- Every TOML block is a valid scenario, or with `axes` a valid sweep spec.
- The CLI reference is generated from the typer app: one page per top-level command, each in the nav of
  mkdocs.yml, with every option of every command.

`mkdocs build --strict` itself runs in `make test` (it also checks every page is reachable and every
link and anchor resolves inside the built site).
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import shlex
import sys
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "docs"))
import gen_cli

DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
HASH = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@pytest.fixture(scope="module")
def cli_pages() -> dict[str, str]:
    return gen_cli.pages()


@pytest.fixture(scope="module")
def root():
    return gen_cli.root_command()


def test_the_readme_is_a_page_for_users():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert len(text.encode()) <= 25_000
    for needed in ("make run", "make test", "tlt advise --scenario", "tlt advise --trace", "docs/accuracy.md"):
        assert needed in text, needed


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_commit_hashes_in_user_facing_prose(page):
    found = HASH.findall(page.read_text())
    assert not found, f"{_rel(page)}: commit hashes {found} (history belongs in git and the reports)"


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    return [t for t in LINK.findall(text) if not t.startswith(("http://", "https://", "mailto:", "#"))]


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_resolves(page, cli_pages):
    generated = {f"docs/reference/cli/{name}" for name in cli_pages}
    missing = []
    for target in _links(page):
        path = (page.parent / target.split("#", 1)[0]).resolve()
        rel = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)
        if not (path.exists() or rel in generated):
            missing.append(target)
    assert not missing, f"{_rel(page)}: links to nothing: {missing}"


def _commands(page: Path) -> list[list[str]]:
    """Every command line of the page's code blocks, continuation lines joined, comments dropped."""
    out = []
    for block in FENCE.findall(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            try:
                words = shlex.split(line)
            except ValueError:
                continue
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):  # VAR=value prefixes
                words = words[1:]
            if words:
                out.append(words)
    return out


def _check_tlt(words: list[str], root) -> list[str]:
    command, path, problems = root, ["tlt"], []
    rest = words[1:]
    while rest and getattr(command, "commands", None) and not rest[0].startswith("-"):
        name = rest.pop(0)
        if name not in command.commands:
            return [f"`{' '.join(path)}` has no sub-command {name!r}"]
        command, path = command.commands[name], [*path, name]
    known = {"--help"}
    for param in command.params:
        known.update(param.opts)
        known.update(param.secondary_opts)
    for word in rest:
        word = word.strip("[]")
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            if name not in known:
                problems.append(f"`{' '.join(path)}` has no option {name}")
    return problems


@pytest.fixture(scope="module")
def scenario_fields() -> dict[str, set[str]]:
    from tltsim.scenario.schema import Scenario

    schema = Scenario.model_json_schema()
    fields: dict[str, set[str]] = {}
    for section, spec in schema["properties"].items():
        ref = spec.get("$ref") or next((a.get("$ref") for a in spec.get("anyOf", []) if "$ref" in a), None)
        sub = schema["$defs"][ref.rsplit("/", 1)[1]] if ref else {}
        fields[section] = set(sub.get("properties", {}))
    return fields


def _check_set(value: str, fields: dict[str, set[str]]) -> list[str]:
    dotted = value.split("=", 1)[0]
    section, _, field = dotted.partition(".")
    if section not in fields:
        return [f"--set {dotted}: no scenario section {section!r}"]
    if field and fields[section] and field.split(".", 1)[0] not in fields[section]:
        return [f"--set {dotted}: section {section!r} has no field {field!r}"]
    return []


POLICY_FIELDS = ("policies", "presets_policy")


def _check_policy_sets(words: list[str]) -> list[str]:
    """Resolve the command's policy settings as ``tlt sim run`` does (:func:`tltsim.scenario.resolve`
    with ``--set`` parsed by the CLI's own parser and ``--policy`` as the ``policies`` list), on its
    ``--scenario`` when that is a bundled name or a file of the repository, else on the defaults.
    A scenario file the docs only name (``s.toml``) cannot be read, so there each path's fields are
    checked against every spec kind's fields instead."""
    from tltcli.sim import _parse_sets
    from tltcore.errors import InputError
    from tltcore.policy.spec import KIND_CLASSES
    from tltsim.scenario import bundled_scenarios
    from tltsim.scenario.resolve import resolve

    pairs = list(itertools.pairwise(words))
    sets = [v for f, v in pairs if f == "--set" and v.split("=", 1)[0].split(".", 1)[0].strip() in POLICY_FIELDS]
    if not sets:
        return []
    policies = tuple(v for f, v in pairs if f == "--policy")
    scenario = next((v for f, v in pairs if f == "--scenario"), None)
    if scenario is not None and scenario not in bundled_scenarios() and not (REPO / scenario).is_file():
        known = {f for cls in KIND_CLASSES.values() for f in cls.model_fields if f != "kind"}
        return [f"--set {v}: no policy kind has a field {part!r}" for v in sets
                for part in v.split("=", 1)[0].split(".")[1:] if not part.isdigit() and part not in known]
    settings = [("policies", policies, "--policy")] if policies else []
    try:
        resolve(REPO / scenario if scenario and (REPO / scenario).is_file() else scenario,
                settings + _parse_sets(sets))
    except InputError as exc:
        return [f"{' '.join(sets)}: {exc}"]
    return []


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_command_shown_is_valid(page, root, scenario_fields):
    problems = []
    for words in _commands(page):
        if words[0] == "tlt":
            problems += _check_tlt(words, root)
            problems += [p for i, w in enumerate(words[:-1]) if w == "--set"
                         for p in _check_set(words[i + 1], scenario_fields)]
            problems += _check_policy_sets(words)
        elif words[0] == "python" and len(words) > 1:
            if words[1] == "-m" and len(words) > 2 and words[2] != "pytest":
                if importlib.util.find_spec(words[2]) is None:
                    problems.append(f"no module {words[2]}")
            elif words[1].endswith(".py") and not (REPO / words[1]).is_file():
                problems.append(f"no file {words[1]}")
    assert not problems, f"{_rel(page)}: " + "; ".join(problems)


TOML_BLOCK = re.compile(r"^```toml\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("page", [p for p in PAGES if TOML_BLOCK.search(p.read_text())], ids=_rel)
def test_every_toml_block_is_a_valid_scenario_or_sweep(page, tmp_path):
    """A scenario block (``policies`` as text or tables) resolves as ``--scenario FILE`` would; a sweep
    block (with ``axes``; ``base`` a bundled scenario) expands its axes' paths as ``tlt sweep`` does."""
    import tomllib

    from tltcore.errors import InputError
    from tltsim.scenario.resolve import resolve
    from tltsim.sweep.spec import parse_spec

    problems = []
    for i, block in enumerate(TOML_BLOCK.findall(page.read_text())):
        path = tmp_path / f"block{i}.toml"
        path.write_text(block)
        try:
            if "axes" in tomllib.loads(block):
                parse_spec(block, path=path)
            else:
                resolve(path)
        except (InputError, tomllib.TOMLDecodeError) as exc:
            problems.append(f"TOML block {i + 1}: {exc}")
    assert not problems, f"{_rel(page)}: " + "; ".join(problems)


def test_the_pages_show_the_commands_users_start_with():
    shown = {" ".join(w[:3]) for page in PAGES for w in _commands(page) if w[0] == "tlt"}
    for command in ("tlt advise --scenario", "tlt sim run", "tlt trace stats", "tlt sweep run", "tlt real generate",
                    "tlt validate --scenario"):
        assert any(s.startswith(command) for s in shown), command


def test_the_example_model_commands_are_shown():
    """tests/real/test_example_model.py runs these two commands on examples/tiny-llama."""
    shown = [" ".join(w) for w in _commands(DOCS / "guide" / "real-engine.md")]
    assert any(c.startswith("tlt real generate --config examples/tiny-llama/config.json") for c in shown)
    assert any("--prompts-file examples/tiny-llama/prompts.jsonl" in c for c in shown)


def test_the_cli_reference_is_generated_from_the_app(cli_pages, root):
    nav = (REPO / "mkdocs.yml").read_text()
    names = sorted(n for n, c in root.commands.items() if not c.hidden)
    assert set(cli_pages) == {"index.md", *(f"{n}.md" for n in names)}
    for name in names:
        assert f"reference/cli/{name}.md" in nav, f"tlt {name} is not in the nav"
        page = cli_pages[f"{name}.md"]
        for path, command in gen_cli.walk(root.commands[name], ("tlt", name)):
            assert f"`{' '.join(path)}`" in page
            for param in command.params:
                if not getattr(param, "hidden", False) and param.param_type_name == "option":
                    assert f"`{param.opts[0]}`" in page, (path, param.opts[0])
    assert not list((DOCS / "reference").rglob("cli/*.md")), "the CLI reference is generated, not committed"
