"""The simulator checked against real runs: replays of recorded schedules (``replay``), the cost
profiler (``profiler``), the validation itself (``validate``) and the fit of drafter dynamics to a
real run's accept curves (``dynamics_fit``)."""
