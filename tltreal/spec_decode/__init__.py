"""Lossless speculative decoding: draft proposers (``proposers``: EAGLE, oracle, pinned, n-gram),
draft-tree tensors and masks (``tree``), draft-tree expansion (``tree_search``), the lossless
acceptance reference (``verify``) and the Triton kernels with their references and switch
(``kernels``)."""
