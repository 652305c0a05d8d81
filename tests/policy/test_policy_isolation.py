"""The policy layer (and the drafter state and training contract it carries) is shared by the
simulator and the real engine: it must import no engine."""

from __future__ import annotations

import subprocess
import sys


def test_policy_layer_imports_no_engine() -> None:
    code = ("import sys, tltcore.policy, tltcore.policy.registry, tltcore.spot_coordinator, "
            "tltcore.policy.recent_accept, tltcore.drafter.state; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'simpy', 'torch', 'triton', 'vllm'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
