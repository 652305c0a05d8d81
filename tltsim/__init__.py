"""tltsim: discrete-event simulator of speculative decoding in RL rollouts, plus the policy layer
shared with the real engine (``tltreal``)."""

__version__ = "0.1.0"
