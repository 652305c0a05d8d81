"""Real RL with an adaptive drafter: the task (``task``), policy pre-training (``pretrain``), GRPO
(``grpo``), the drafter's training loop (``drafter_train``), the padded target SD speedups are
measured on (``padded_target``) and the whole adaptive run (``adaptive_run``)."""
