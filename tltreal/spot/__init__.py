"""The real Spot Trainer: the coordinator (``trainer``) and its contract (``contract``: config,
reports, training policies), the worker process (``worker_process``) and the messages between them
(``messages``), the store of rollout samples drafter training draws from (``sample_buffer``) and
the drafter's atomic, asynchronous checkpoints (``drafter_checkpoint``)."""
