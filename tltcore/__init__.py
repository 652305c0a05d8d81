"""tltcore: the vocabulary both engines speak — errors, atomic results folders, input checks, model
shape and hardware, the SD configuration, the policy contract and the policies, the acceptance and cost
models, drafter state and dynamics, the Spot Trainer contract, dealing, the event log and its summary.

It imports no SimPy, torch or vLLM, and neither engine: ``tltsim`` (the simulator) and ``tltreal``
(real execution) import it and never each other (import-linter contracts in pyproject.toml).
"""

__version__ = "0.2.0"  # 0.2: core v2 (event log v2, explicit policy decisions); enters scenario hashes
