"""Scenarios from RL frameworks' own configs: verl (:mod:`.verl`) and NeMo-RL (:mod:`.nemo_rl`), over
one shared reader of their YAML, Hydra-style overrides and ``${...}`` interpolations (:mod:`.common`)."""
