"""Where the team's shared, third-party data lives: a search path, never a copy in the repository.

``$TLT_SHARED_DIR`` when set, else ``../shared`` beside the source checkout tlt runs from (beside the
current directory when tlt is installed from a wheel). The one implementation of that rule:
``tltsim.traces.catalog.shared_dir`` (traces) calls :func:`shared_dir`; it lives in :mod:`tltcore`
because the core imports no engine.
Measured GPU profiles (``gpu-profiles/``) are found through :func:`gpu_profiles_dir`.
"""

from __future__ import annotations

import os
from pathlib import Path

SHARED_ENV = "TLT_SHARED_DIR"
#: An explicit folder holding the GPU profiles (the ``vidur/`` tree), ahead of the shared folder.
GPU_PROFILES_ENV = "TLT_GPU_PROFILES"
_CHECKOUT = Path(__file__).resolve().parents[1]


def project_root() -> Path:
    """The source checkout tlt runs from, or the current directory for an installed package."""
    return _CHECKOUT if (_CHECKOUT / "pyproject.toml").is_file() else Path.cwd()


def shared_dir() -> Path:
    """The team's shared folder: ``$TLT_SHARED_DIR``, else ``../shared`` beside the checkout."""
    env = os.environ.get(SHARED_ENV, "")
    return Path(env).expanduser() if env else project_root().parent / "shared"


def gpu_profiles_search_path() -> list[Path]:
    """Folders searched for the measured GPU profiles, in order: ``$TLT_GPU_PROFILES``, then
    ``<shared>/gpu-profiles``."""
    env = os.environ.get(GPU_PROFILES_ENV, "")
    return [*([Path(env).expanduser()] if env else []), shared_dir() / "gpu-profiles"]


def gpu_profiles_dir() -> Path | None:
    """The first folder on :func:`gpu_profiles_search_path` that holds a ``vidur/`` tree, or None."""
    for folder in gpu_profiles_search_path():
        if (folder / "vidur").is_dir():
            return folder
    return None
