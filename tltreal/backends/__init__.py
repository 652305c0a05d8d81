"""Other engines: vLLM driven by the same SD policies (``vllm_backend``) and the EAGLE export it
loads (``eagle_export``)."""
