"""The target model and what it reads and writes: the Llama / Qwen2 transformer (``transformer``) and
its weights (``weights``: init, random, load, save), the slab KV cache (``kv_cache``), per-request
sampling (``sampling``), the RL task's tokenizer (``tokenizer``) and the training forward's
helpers (``train_forward``: packing, per-token log-probs)."""
