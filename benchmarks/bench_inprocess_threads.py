"""In-process fits over threads (``n_jobs``) on a blobs problem, one JSON line per fit.

Compares library versions on the same machine in one call: run it once per checkout with that
checkout's root as ``--code`` (imported instead of the installed dmcsvm), alternating, e.g.

    for T in 16 8 4; do for c in new old; do
        python benchmarks/bench_inprocess_threads.py --code $c --threads $T --out fits.jsonl
    done; done

``--threads 0`` only compiles (a warm-up per checkout, so each timed fit finds numba's cache).
Written for the 16-core node of scaling.md, where in-process fits slowed from 2 to 16 threads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", default=None, help="checkout root to import dmcsvm from")
    ap.add_argument("--threads", default="1,4,8,16")
    ap.add_argument("--n", type=int, default=64000)
    ap.add_argument("--out", default=None, help="append the JSON lines to this file")
    a = ap.parse_args(argv)
    if a.code:
        sys.path.insert(0, str(Path(a.code).resolve()))
    sys.path.insert(1, str(Path(__file__).resolve().parent))
    import numpy as np
    from _harness import blobs

    import dmcsvm
    from dmcsvm import MulticlassSVC

    X, y = blobs(a.n, 32, 10)
    MulticlassSVC(C=10, n_jobs=1, solver_options={"batch_size": 50}).fit(X[:300], y[:300])
    MulticlassSVC(C=10, n_jobs=4, solver_options={"batch_size": 50}).fit(X[:3000], y[:3000])
    for T in (int(t) for t in a.threads.split(",")):
        if T <= 0:
            continue
        c = MulticlassSVC(
            C=10, gamma="scale", n_jobs=T, solver_options={"batch_size": 1000, "disk_cache_size": 0}
        )
        t = time.perf_counter()
        c.fit(X, y)
        wall = time.perf_counter() - t
        h = c.history_
        line = json.dumps(
            {
                "library": os.path.dirname(dmcsvm.__file__),
                "n": a.n,
                "threads": T,
                "fit_s": round(wall, 3),
                "rounds": int(c.n_iter_),
                "dual": float(h["dual"][-1]),
                "load": os.getloadavg()[0],
                **{
                    k: round(float(np.sum(h[k])), 3)
                    for k in ("t_solve", "t_parts", "t_kernel", "t_update", "t_select")
                },
            }
        )
        print(line, flush=True)
        if a.out:
            with open(a.out, "a") as fh:
                fh.write(line + "\n")


if __name__ == "__main__":
    main()
