"""How long counting, refusing and listing the head of a big sweep take (a printed figure, not a test).

``python tests/sweep/bench_points.py`` writes three specs to a temp folder -- a 300 x 300 grid
(90,000 points), a 1000 x 1000 grid (1,000,000, the limit) and one point more than the limit --
and prints, in-process (Python start-up excluded), the seconds to read and count each, to refuse the
last, and to resolve the first 100 points of the 90,000 as ``tlt sweep points`` does. Before the
lazy count ``tlt sweep points`` resolved every point first: more than 150 s for the 90,000.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path

from tltcore.errors import InputError
from tltsim.sweep.spec import MAX_POINTS, iter_points, load_spec


def grid(n: int, extra_seed: bool = False) -> str:
    seeds = ([0] if extra_seed else []) + list(range(1, n + 1))
    quality = [round(0.5 + i / (20 * n), 6) for i in range(n)]
    return f"[[axes]]\nseed = {seeds}\n\"drafter.quality\" = {quality}\n"


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="tlt-bench-points-"))
    for name, text in (("g90k", grid(300)), ("g1m", grid(1000)), ("over", grid(1000, extra_seed=True))):
        path = folder / f"{name}.toml"
        path.write_text(text, encoding="utf-8")
        t0 = time.perf_counter()
        try:
            spec = load_spec(path)
            what = f"counted {spec.size:,} points"
        except InputError as exc:
            spec, what = None, f"refused ({str(exc).split(': ', 1)[1][:60]})"
        print(f"{name}: {what} in {time.perf_counter() - t0:.3f} s (limit {MAX_POINTS:,})")
        if spec is not None and name == "g90k":
            t0 = time.perf_counter()
            head = list(itertools.islice(iter_points(spec), 100))
            print(f"{name}: first {len(head)} points resolved in {time.perf_counter() - t0:.3f} s")


if __name__ == "__main__":
    main()
