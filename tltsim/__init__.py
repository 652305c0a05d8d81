"""tltsim: discrete-event simulator of speculative decoding in RL rollouts, plus the policy layer
shared with the real engine (``tltreal``)."""

__version__ = "0.2.0"  # 0.2: core v2 (event log v2, explicit policy decisions)
