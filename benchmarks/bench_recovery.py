"""Coordinator memory across a long fit and the time to recover a worker lost late, before and
after recovery-from-state replaced the replayed message log.

Both variants run the same fit in the same invocation, one after the other, each in its own
process:

* ``before``: the engine of commit ``e32ede4`` (the DaskExecutor logged every round's message and
  rebuilt a lost partition by replaying the whole log to it), imported from a git worktree of that
  commit (``--old``, created with ``git worktree add`` when missing);
* ``after``: this checkout (a lost partition is rebuilt from the coordinator's state,
  ``F = K(X_part, X_SV) B_SV``: one kernel block; nothing is logged per round).

The fit: synthetic 10-class data, ``--n`` x ``--d`` float32 (low intrinsic dimension, as
``tests/test_fault_tolerance.py``), RBF kernel, the core solver (``solve``) with ``batch_size``
200, ``tol = 1e-6`` and no gap stop (at the defaults it converges after about 250 rounds; at most
``--rounds``), on a LocalCluster of 2 single-thread worker processes (3 row partitions).  After
round ``--kill-at`` the worker holding partition 1 is killed (SIGKILL; its nanny restarts it); the
next round finds it gone and the executor rebuilds its partitions.  Measured:

* the coordinator's resident memory (``VmRSS`` of this process) every 10 rounds; growth per round
  by a least-squares line over rounds 50 .. kill-at;
* the recovery time the executor records (``DaskExecutor.recoveries``: from the moment the round
  finds the partition gone to its answer from the rebuilt partition) and the wall time of the
  round that recovered;
* the final dual objective and how many rounds ran.

Outputs ``results/recovery.json`` and ``results/recovery.md`` (machine, load before/after).

Usage::

    python benchmarks/bench_recovery.py          # 10000 x 2048, <= 350 rounds, kill at 200
    python benchmarks/bench_recovery.py --n 4000 --rounds 60 --kill-at 50    # a quick look
    python benchmarks/bench_recovery.py --n 2000 --d 64 --rounds 40 --kill-at 20 --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OLD_COMMIT = "e32ede4"


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def make_data(n, d, m=10, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(m, 8))
    proj = rng.normal(size=(8, d)) / np.sqrt(d)
    y = rng.integers(0, m, n).astype(np.int64)
    X = ((centres[y] + rng.standard_normal((n, 8))) @ proj).astype(np.float32)
    X += np.float32(0.01) * rng.standard_normal(X.shape, dtype=np.float32)
    return X, y


def run_variant(a) -> dict:
    """One fit with a late worker kill (runs in a child process; ``dmcsvm`` is whichever the
    PYTHONPATH gives)."""
    from distributed import Client, LocalCluster

    import dmcsvm
    from dmcsvm.coordinators.crammer_singer import SolverSettings, solve
    from dmcsvm.engine.dask import DaskExecutor
    from dmcsvm.engine.partition import PartitionSettings
    from dmcsvm.kernels import KernelSpec
    from dmcsvm.numerics import pattern as pt

    X, y = make_data(a.n, a.d)
    m = int(y.max()) + 1
    spec = KernelSpec("rbf", 1.0)
    s = SolverSettings(C=10.0, tol=1e-6, gap_tol=0.0, batch_size=a.batch, max_iter=a.rounds).check()
    ps = PartitionSettings(
        kernel=spec.to_dict(),
        C=s.C,
        selection=pt.SEL_BMG,
        tol=s.tol,
        n_candidates=a.batch,
        pcls=np.arange(m),
        cache_bytes=0,
        kernel_dtype="float32",
    )
    out = {"dmcsvm_path": os.path.dirname(dmcsvm.__file__), "rss": [], "killed_at": None}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as lc,
        Client(lc) as client,
    ):
        ex = DaskExecutor(client, n_partitions=3)
        ex.start(X, y, y, ps)
        out["has_log"] = hasattr(ex, "log")

        def on_round(rounds, B):
            if rounds % 10 == 0:
                out["rss"].append((rounds, rss_mb()))
            if rounds == a.kill_at and out["killed_at"] is None:
                victim = ex.placement[1]
                pid = client.run(os.getpid, workers=[victim])[victim]
                os.kill(pid, signal.SIGKILL)
                out["killed_at"] = rounds
                out["log_entries_at_kill"] = len(getattr(ex, "log", []))
                out["log_mb_at_kill"] = (
                    sum(
                        sum(v.nbytes for v in op[1].values() if hasattr(v, "nbytes"))
                        for op in getattr(ex, "log", [])
                        if op[0] == "step"
                    )
                    / 2**20
                )

        t0 = time.perf_counter()
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = solve(ex, a.n, np.arange(m), spec, s, a.d, False, on_round=on_round)
        out["fit_s"] = time.perf_counter() - t0
        out["recoveries"] = [(int(k), str(dw), str(nw), float(t)) for k, dw, nw, t in ex.recoveries]
        ex.close()
    h = r.history
    out["rounds"] = int(r.n_iter)
    out["n_sv"] = int(len(r.support))
    out["dual"] = float(h["dual"][-1])
    out["gap"] = float(h["gap"][-1])
    k = out["killed_at"]
    if k is not None and k < len(h["t_round"]):
        out["t_round_recovering"] = float(h["t_round"][k])
        out["t_round_median"] = float(np.median(h["t_round"]))
    out["rss_final_mb"] = rss_mb()
    return out


def growth_per_round(rss, lo, hi):
    pts = [(r, v) for r, v in rss if lo <= r <= hi]
    if len(pts) < 2:
        return float("nan")
    r, v = np.array(pts, dtype=float).T
    return float(np.polyfit(r, v, 1)[0])


def ensure_old(path):
    """The tree of ``OLD_COMMIT`` at ``path``, exported with ``git archive`` when missing (a plain
    directory: nothing is registered in the repository, unlike a worktree)."""
    if not os.path.isdir(os.path.join(path, "dmcsvm")):
        os.makedirs(path, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", REPO, "archive", OLD_COMMIT], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", path], input=archive, check=True)
    return path


def main():
    sys.path.insert(0, HERE)
    import _report

    p = _report.parser(__doc__.split("\n")[0], "recovery.json")
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--d", type=int, default=2048)
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--rounds", type=int, default=350)
    p.add_argument("--kill-at", type=int, default=200)
    p.add_argument(
        "--old",
        default="/tmp/dmcsvm-old-e32ede4",
        help="the replaying engine's tree (exported from git when missing)",
    )
    p.add_argument("--variant", choices=["before", "after"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.variant:
        print(json.dumps(run_variant(a)))
        return
    run = _report.Run(
        __file__,
        "recovery: replayed log vs rebuild from state",
        {k: getattr(a, k) for k in ("n", "d", "batch", "rounds", "kill_at")},
    )
    variants = {}
    old = ensure_old(a.old)
    args = [
        sys.executable,
        os.path.abspath(__file__),
        "--n",
        str(a.n),
        "--d",
        str(a.d),
        "--batch",
        str(a.batch),
        "--rounds",
        str(a.rounds),
        "--kill-at",
        str(a.kill_at),
    ]
    for name, root in (("before", old), ("after", REPO)):
        env = dict(os.environ, PYTHONPATH=root)
        t = time.perf_counter()
        r = subprocess.run(args + ["--variant", name], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{name} failed:\n{r.stderr[-4000:]}")
        v = json.loads(r.stdout.strip().splitlines()[-1])
        v["wall_s"] = time.perf_counter() - t
        v["rss_growth_mb_per_round"] = growth_per_round(v["rss"], 50, a.kill_at)
        v["recovery_s"] = max((t_ for *_, t_ in v["recoveries"]), default=float("nan"))
        variants[name] = v
        print(
            f"{name}: {v['rounds']} rounds, RSS {v['rss'][0][1]:.0f} -> "
            f"{v['rss_final_mb']:.0f} MB ({v['rss_growth_mb_per_round']:.3f} MB/round), "
            f"recovery {v['recovery_s']:.2f} s, dual {v['dual']:.9g}",
            flush=True,
        )
    res = run.envelope(variants, old_commit=OLD_COMMIT)
    _report.write(res, a.out, markdown(res))


def markdown(res) -> str:
    import _report

    variants = res.get("results") or res["variants"]  # "variants": before the envelope
    s, b, f = res["settings"], variants["before"], variants["after"]

    def rss_at(v, r):
        return min(v["rss"], key=lambda p: abs(p[0] - r))[1]

    rows = [
        ("coordinator RSS at round 50 (MB)", f"{rss_at(b, 50):.0f}", f"{rss_at(f, 50):.0f}"),
        (
            f"coordinator RSS at round {s['kill_at']} (MB)",
            f"{rss_at(b, s['kill_at']):.0f}",
            f"{rss_at(f, s['kill_at']):.0f}",
        ),
        ("coordinator RSS at the end (MB)", f"{b['rss_final_mb']:.0f}", f"{f['rss_final_mb']:.0f}"),
        (
            f"RSS growth per round, rounds 50..{s['kill_at']} (MB)",
            f"{b['rss_growth_mb_per_round']:.3f}",
            f"{f['rss_growth_mb_per_round']:.3f}",
        ),
        (
            "message log at the kill (entries / MB of arrays)",
            f"{b.get('log_entries_at_kill', 0)} / {b.get('log_mb_at_kill', 0):.0f}",
            f"{f.get('log_entries_at_kill', 0)} / {f.get('log_mb_at_kill', 0):.0f}",
        ),
        ("partitions rebuilt", str(len(b["recoveries"])), str(len(f["recoveries"]))),
        (
            "recovery time (s, the slowest partition)",
            f"{b['recovery_s']:.2f}",
            f"{f['recovery_s']:.2f}",
        ),
        (
            "wall time of the round that recovered (s)",
            f"{b.get('t_round_recovering', 0):.2f}",
            f"{f.get('t_round_recovering', 0):.2f}",
        ),
        (
            "median round (s)",
            f"{b.get('t_round_median', 0):.3f}",
            f"{f.get('t_round_median', 0):.3f}",
        ),
        ("rounds run", str(b["rounds"]), str(f["rounds"])),
        ("support vectors at the end", str(b["n_sv"]), str(f["n_sv"])),
        ("final dual objective", f"{b['dual']:.10g}", f"{f['dual']:.10g}"),
        ("whole fit incl. cluster start (s)", f"{b['wall_s']:.0f}", f"{f['wall_s']:.0f}"),
    ]
    L = [
        "# Recovery: replayed log (before) vs rebuild from the coordinator's state (after)",
        "",
        f"{s['n']} x {s['d']} float32 synthetic, 10 classes, RBF, batch {s['batch']}, "
        f"{s['rounds']} rounds, LocalCluster 2 workers x 1 thread, 3 partitions; the worker of "
        f"partition 1 killed (SIGKILL) after round {s['kill_at']}.  "
        f"`benchmarks/bench_recovery.py`; before = commit {OLD_COMMIT}.",
        "",
        *_report.md_table(["", "before (replay)", "after (state)"], rows),
    ]
    L += [
        "",
        "RSS growth after the change is the row bank (X rows of every pattern that entered a "
        "batch, which holds the support vectors: it follows the support set, at most n x d) "
        "and the history; before, each round also logged its message (the batch's X rows "
        "and dB) for the replay.",
        "",
        _report.machine_line(res)
        + "  "
        + _report.load_line(res)
        + " (other engineers' tests share the 2 cores: times are indicative only, memory is "
        "not affected).",
        "",
    ]
    return "\n".join(L)


if __name__ == "__main__":
    main()
