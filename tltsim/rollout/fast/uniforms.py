"""The worker's acceptance draws as a stream that can be rewound.

A stochastic SD block draws the accept lengths of ``k`` iterations at once and cuts the block at the
first finish; the draws of the iterations after it must go back, so that the next block starts where
the per-iteration reference's next draw would. A Generator's doubles do not depend on how the calls
are chunked, so drawing ahead in chunks and handing them out gives the reference's numbers.
"""

from __future__ import annotations

import numpy as np


class UniformStream:
    """The uniform numbers of a worker's RNG as a stream that can be rewound. ``random(n)`` returns
    the next ``n`` numbers of ``rng.random``'s stream -- the ones ``rng.random(n)`` would return
    there -- generated ahead in chunks; ``pos -= m`` gives back the last ``m`` taken (at most the
    last call's). The worker's RNG serves nothing else, so drawing ahead changes nothing."""

    __slots__ = ("buf", "pos", "rng")
    CHUNK = 8192

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng, self.buf, self.pos = rng, np.empty(0), 0

    def random(self, n: int) -> np.ndarray:
        end = self.pos + n
        if end > len(self.buf):
            self.buf = np.concatenate([self.buf[self.pos:], self.rng.random(max(n, self.CHUNK))])
            self.pos, end = 0, n
        out = self.buf[self.pos:end]
        self.pos = end
        return out
