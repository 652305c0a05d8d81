"""`tlt demo`: the main job run by `make run`."""

from __future__ import annotations


def demo() -> None:
    """Analyse the default trace and write a small report under reports/demo/."""
    raise NotImplementedError
