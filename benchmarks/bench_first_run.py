"""Where the README's first run goes: ``dmcsvm demo`` cold (empty numba cache) vs warm.

Each run is a fresh subprocess ``python -m dmcsvm.cli demo --json`` with ``NUMBA_CACHE_DIR`` set
to a directory of this benchmark: *cold* = a new empty directory (nothing compiled yet, as on a
fresh install), *warm* = the same directory again.  Every process of the run (the coordinator and
the LocalCluster's worker processes, which inherit the environment) shares that cache.  Modes
(``--modes``): ``cluster-nowarmup`` = ``--no-warmup`` (each process compiles what it meets: the
behaviour before the warm-up); ``cluster`` = the default (the coordinator compiles once in a
background thread while the LocalCluster starts, the workers load the cache); ``inprocess`` (one
process, one thread: what compiling every specialization once costs).

Recorded per run: wall time of the command; CPU time of the whole process tree (every process is
reaped by its parent, so its CPU reaches ours; load-independent, unlike wall time on a shared
box); the interpreter + imports (a separate ``python -c 'import dmcsvm.cli, distributed'``); the
LocalCluster start and the wait for the warm-up as the demo prints them; fit and predict times
from its JSON; numba's cache traffic from ``NUMBA_DEBUG_CACHE=1`` (``data saved`` = one
specialization compiled by some process, ``data loaded`` = one loaded from the cache); the load
average.  JSON to ``benchmarks/results/first_run.json`` (``--out``).

    python benchmarks/bench_first_run.py [--repeat 2] [--local-workers 2] [--modes ...]
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import _report


def _cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(cmd, env):
    """Wall seconds, CPU seconds of the whole process tree (every process of the run is reaped
    by its parent, so its CPU time reaches ours) and the output."""
    c, t = _cpu_children(), time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {p.stderr[-2000:]}")
    return wall, _cpu_children() - c, p.stdout + p.stderr


def imports_seconds(env):
    wall, cpu, _ = _run([sys.executable, "-c", "import dmcsvm.cli, distributed"], env)
    return wall, cpu


def demo(cache_dir, mode, workers):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, NUMBA_DEBUG_CACHE="1")
    cmd = [sys.executable, "-m", "dmcsvm.cli", "demo", "--json", "--local-workers", str(workers)]
    warmup = mode == "cluster"
    if mode == "cluster-nowarmup":
        cmd.append("--no-warmup")
    elif mode == "inprocess":
        cmd += ["--in-process", "--n-jobs", "1"]
    load0 = os.getloadavg()[0]
    wall, cpu, out = _run(cmd, env)
    res = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    # the demo compiles first, then starts the LocalCluster (since c. 2026-11-27; before, the
    # two overlapped and the cluster line said "in", now "after": both are seconds from the start)
    started = re.search(r"started LocalCluster.* (?:in|after) ([0-9.]+) s", out)
    ready = re.search(r"numba code ready .* after ([0-9.]+) s", out)
    return {
        "mode": mode,
        "warmup": warmup,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "cluster_ready_s": float(started.group(1)) if started else None,
        "warmup_done_s": float(ready.group(1)) if ready else None,
        "fit_s": res["fit_seconds"],
        "predict_s": res["predict_seconds"],
        "rounds": res["rounds"],
        "accuracy": res["accuracy"],
        "numba_compiled": out.count("[cache] data saved"),
        "numba_loaded": out.count("[cache] data loaded"),
        "loadavg_1min_before": round(load0, 2),
        "loadavg_1min_after": round(os.getloadavg()[0], 2),
    }


def main(argv=None):
    ap = _report.parser(__doc__, "first_run.json")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--local-workers", type=int, default=min(os.cpu_count() or 1, 4))
    ap.add_argument(
        "--modes",
        nargs="+",
        default=["cluster-nowarmup", "cluster"],
        choices=["cluster-nowarmup", "cluster", "inprocess"],
        help="LocalCluster without / with the warm-up; in-process on 1 thread (one "
        "process: what compiling everything once costs)",
    )
    a = ap.parse_args(argv)
    run = _report.Run(__file__, "first_run", _report.settings_of(a))
    rows = []
    for r in range(a.repeat):
        for mode in a.modes:
            cache = tempfile.mkdtemp(prefix="dmcsvm-numba-cache-")
            try:
                imp, imp_cpu = imports_seconds(dict(os.environ, NUMBA_CACHE_DIR=cache))
                for state in ("cold", "warm"):
                    row = demo(cache, mode, a.local_workers)
                    row.update(
                        state=state,
                        repeat=r,
                        imports_s=round(imp, 2),
                        imports_cpu_s=round(imp_cpu, 2),
                    )
                    rows.append(row)
                    print(
                        f"{state:4s} {mode:16s}: wall {row['wall_s']:6.1f} s  "
                        f"cpu {row['cpu_s']:6.1f} s  "
                        f"imports {row['imports_s']:.1f}  warm-up done {row['warmup_done_s']}  "
                        f"cluster ready {row['cluster_ready_s']}  fit {row['fit_s']:.1f}  "
                        f"compiled {row['numba_compiled']}  loaded {row['numba_loaded']}  "
                        f"load {row['loadavg_1min_before']}",
                        flush=True,
                    )
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    _report.write(run.envelope(rows, cores=os.cpu_count()), a.out, markdown(rows))
    print(f"written {a.out}")


def markdown(rows) -> str:
    """One line per demo run: where its time went."""
    head = [
        "state",
        "mode",
        "repeat",
        "wall s",
        "cpu s",
        "imports s",
        "warm-up done at s",
        "cluster ready at s",
        "fit s",
        "numba compiled / loaded",
        "load 1m",
    ]
    body = [
        [
            r["state"],
            r["mode"],
            r["repeat"],
            r["wall_s"],
            r["cpu_s"],
            r["imports_s"],
            r["warmup_done_s"],
            r["cluster_ready_s"],
            r["fit_s"],
            f"{r['numba_compiled']} / {r['numba_loaded']}",
            r["loadavg_1min_before"],
        ]
        for r in rows
    ]
    return (
        "\n".join(
            ["# First run of `dmcsvm demo`: cold vs warm numba cache", ""]
            + _report.md_table(head, body, "lll" + "r" * 8)
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
