"""tltreal: real execution — a native PyTorch/Triton engine with lossless speculative decoding.

Heavy imports (torch, triton) happen inside the submodules that need them, so ``import tltreal``
and the ``tlt`` CLI work on a machine with only the simulator installed. Every package's
``__init__`` is a docstring only: import from the module that defines a name.

Concept folders, one concept per module:

- ``model`` — the Llama/Qwen2 target (``transformer``, ``weights``), the slab KV cache
  (``kv_cache``), per-request sampling (``sampling``), the task tokenizer (``tokenizer``), the
  training forward's helpers (``train_forward``);
- ``spec_decode`` — draft proposers (``proposers``), draft trees (``tree``, ``tree_search``),
  lossless verification (``verify``) and the Triton kernels + references + switch (``kernels``);
- ``engine`` — the native engine (``engine``: continuous batching, policy loop; ``engine_config``,
  ``requests``, ``sd_step``, ``switch``, ``records``), the memory plan of a run (``memory_plan``),
  one run from settings (``generate``) and its output files (``outputs``);
- ``spot`` — the real Spot Trainer: coordinator (``trainer``, ``contract``), worker process
  (``worker_process``, ``messages``), the sample store (``sample_buffer``: ``SampleBuffer``) and
  drafter checkpoints (``drafter_checkpoint``);
- ``rl`` — the RL task (``task``), pre-training (``pretrain``), GRPO (``grpo``), drafter training
  (``drafter_train``), the padded target (``padded_target``) and the adaptive run
  (``adaptive_run``);
- ``backends`` — vLLM (``vllm_backend``) and the EAGLE export it loads (``eagle_export``);
- ``validation`` — schedule replays (``replay``), the cost profiler (``profiler``), the simulator's
  validation (``validate``) and drafter-dynamics fits (``dynamics_fit``).

The CLI (``tlt real``) lives in :mod:`tltcli.real`.
"""
