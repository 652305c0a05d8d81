"""TLT's Spot Trainer in the simulator: the drafter-training contract both halves implement
(``coordinator``: worker states, who trains, preemption, checkpoints), the simulated trainer that runs
it (``trainer``) and the data buffer's coverage model (``coverage``: how much of a step's response
data training has seen when it is preempted)."""
