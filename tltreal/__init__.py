"""tltreal: real execution — a native PyTorch/Triton engine with lossless speculative decoding.

Heavy imports (torch, triton) happen inside the submodules that need them, so ``import tltreal``
and the ``tlt`` CLI work on a machine with only the simulator installed.
"""
