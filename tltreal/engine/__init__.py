"""The native engine: configuration (``engine_config``), requests and results (``requests``), the
continuous-batching loop (``engine``), one SD iteration (``sd_step``), the elastic switch's
re-prefill (``switch``), the opt-in per-request records (``records``), the memory a run will
allocate (``memory_plan``), one run from settings (``generate``) and its output files (``outputs``).

Nothing is imported here: ``outputs`` and ``memory_plan`` need no torch, and the CLI imports them
on a machine without it."""
