"""The one line an interrupted ``tlt`` prints: shared by the light entry point (:mod:`tltcli`) and the
commands (:mod:`tltcli.cli`), so neither imports the other for it."""

from __future__ import annotations

#: The one line an interrupted ``tlt`` prints, wherever the interrupt came.
INTERRUPTED = "tlt: interrupted; nothing half written was left behind"
