"""tltsim: discrete-event simulator of speculative decoding in RL rollouts. The policies, cost and
acceptance models it replays live in ``tltcore``, shared with the real engine (``tltreal``)."""

from tltcore import __version__

__all__ = ["__version__"]
