"""tltreal: real execution — a native PyTorch/Triton engine with lossless speculative decoding.

Heavy imports (torch, triton) happen inside the submodules that need them, so ``import tltreal``
and the ``tlt`` CLI work on a machine with only the simulator installed.

Modules, one concept each: ``config`` (ModelConfig from an HF config.json), ``model`` (Llama/Qwen2
target), ``kv_cache`` (slab cache + slot pool), ``drafter`` (EAGLE / oracle drafters, draft-tree
expansion), ``tree`` (tree tensors and masks), ``sampling`` (per-request greedy / temperature /
top-p), ``verify`` (lossless acceptance reference), ``kernels`` (Triton kernels + references +
switch), ``engine`` (continuous batching, policy loop, telemetry), ``generate`` (one run from
settings) and ``cli`` (``tlt real``).
"""
