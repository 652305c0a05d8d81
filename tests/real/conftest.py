"""Session-scoped tiny models that several test modules of tests/real share (shapes in tiny_models.py).

Built once per session, so a test must not change them: one that trains, patches or rewrites a model
takes ``copy.deepcopy`` of it or builds its own. Torch is imported inside the fixtures: the modules
here that need no torch still run without it. (``__init__.py`` says why this folder is a package.)
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_target():
    """The engine tests' float64 target: :data:`~tiny_models.TINY` with seed 1 and std 0.1."""
    import torch

    from tltreal.model.weights import random_model

    from .tiny_models import TINY

    return random_model(TINY, seed=1, dtype=torch.float64, std=0.1)


@pytest.fixture(scope="session")
def progression_target():
    """The float32 target trained on arithmetic progressions (``drafter_fixtures.train_target``, 150
    steps): drafter training and the EAGLE export train their drafters against it."""
    from .drafter_fixtures import train_target

    return train_target(steps=150)
