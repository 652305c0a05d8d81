"""Fixtures of the cost-model tests (``__init__.py`` says why this folder is a package)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .profile_fixtures import write_profiles


@pytest.fixture
def synthetic_profiles(tmp_path: Path) -> Path:
    """A noiseless synthetic profile folder for H100 (four models, TP 1..8, 1..4096 tokens)."""
    return write_profiles(tmp_path / "profiles")
