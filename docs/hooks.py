"""mkdocs hooks: the generated CLI reference, and links from the docs to the rest of the repository.

- The CLI reference (``reference/cli/*.md``) is generated from the typer app at every build
  (``docs/gen_cli.py``); no page of it is committed.
- A page may link to any file of the repository by its relative path from ``docs/`` (``../reports/...``,
  ``../tltsim/advise.py``), which is what GitHub shows. The hook checks the target exists (a missing one
  is a warning, so ``mkdocs build --strict`` fails), copies it into the site at the same path, and
  rewrites the link to that copy. Every tracked file under ``reports/`` is copied, so a report's README
  renders with its figures; a link to a folder goes to its README.md.
"""

from __future__ import annotations

import logging
import posixpath
import re
import subprocess
import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.plugins.tlt_docs")
LINK = re.compile(r"(\]\()([^)\s]+)(\))")
SKIP = ("http://", "https://", "mailto:", "#", "/")


def _repo(config) -> Path:
    return Path(config["docs_dir"]).resolve().parent


def _tracked(repo: Path, folder: str) -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", folder], cwd=repo, capture_output=True, text=True,
                             check=True).stdout
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
    if not names:  # not a git checkout: every file under the folder
        names = [p.relative_to(repo).as_posix() for p in (repo / folder).rglob("*") if p.is_file()]
    return sorted(n for n in names if (repo / n).is_file())


def repo_target(src_uri: str, target: str, repo: Path) -> str | None:
    """The repository path a link on the page ``docs/<src_uri>`` points to outside ``docs/``, or None
    (a link inside the docs, an absolute URL or an anchor). A folder becomes its README.md."""
    if target.startswith(SKIP):
        return None
    path = target.split("#", 1)[0]
    if not path:
        return None
    resolved = posixpath.normpath(posixpath.join("docs", posixpath.dirname(src_uri), path))
    if resolved == "docs" or resolved.startswith("docs/") or resolved.startswith(".."):
        return None if not resolved.startswith("..") else resolved
    if (repo / resolved).is_dir():
        resolved = posixpath.join(resolved, "README.md")
    return resolved


def on_files(files: Files, config) -> Files:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gen_cli import pages

    for name, text in pages().items():
        files.append(File.generated(config, f"reference/cli/{name}", content=text))
    repo = _repo(config)
    wanted = set(_tracked(repo, "reports"))
    for page in list(files.documentation_pages()):
        if page.generated_by:
            continue
        for _, target, _ in LINK.findall(Path(page.abs_src_path).read_text()):
            path = repo_target(page.src_uri, target, repo)
            if path and not path.startswith("..") and (repo / path).is_file():
                wanted.add(path)
    for path in sorted(wanted):
        if files.get_file_from_path(path) is None:
            files.append(File.generated(config, path, abs_src_path=str(repo / path)))
    return files


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    if page.file.generated_by:
        return markdown
    repo = _repo(config)
    here = posixpath.dirname(page.file.src_uri)

    def fix(match: re.Match) -> str:
        target = match.group(2)
        path = repo_target(page.file.src_uri, target, repo)
        if path is None:
            return match.group(0)
        if path.startswith("..") or not (repo / path).is_file():
            log.warning("%s links to '%s': no such file in the repository", page.file.src_uri, target)
            return match.group(0)
        anchor = "#" + target.split("#", 1)[1] if "#" in target else ""
        return f"{match.group(1)}{posixpath.relpath(path, here or '.')}{anchor}{match.group(3)}"

    return LINK.sub(fix, markdown)
