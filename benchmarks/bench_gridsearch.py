"""``GridSearchCV(MulticlassSVC(), grid, n_jobs=k)``: does it oversubscribe?

Runs the same grid search (digits, 1347 training rows, C x gamma = 2 x 2, 3-fold: 12 fits + a
refit) in a fresh subprocess per configuration:

- ``gs=1 est=None``: GridSearchCV(n_jobs=1), the estimator's default ``n_jobs=None``: every
  core this process may use, one fit at a time;
- ``gs=2 est=None``: GridSearchCV(n_jobs=2) with the default: each of joblib's two worker
  processes gets ``cores // 2`` (joblib's OMP_NUM_THREADS, which ``n_jobs=None`` reads), so two
  fits run side by side on their share and the cores are not oversubscribed;
- ``gs=2 est=-1``: GridSearchCV(n_jobs=2) with ``n_jobs=-1`` in the estimator: 2 fits x every
  core threads, the oversubscription a default must not cause.

While each runs, the parent samples the process tree every 50 ms (psutil): threads alive, and
threads *running* (state R) in the tree; and reports wall time, CPU time of the tree,
``os.getloadavg()`` before/after, and the machine's core count.  Results go to
``benchmarks/results/gridsearch.json``.  Other load on the machine shows in the load averages
(they are machine-wide); the running-thread samples count only this benchmark's threads.

    python benchmarks/bench_gridsearch.py [--repeat 2] [--quick] [--out FILE]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import _report

CHILD = r"""
import sys, time, json
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, train_test_split
from dmcsvm import MulticlassSVC
X, y = load_digits(return_X_y=True)
X = (X / 16.0).astype(np.float32)
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
MulticlassSVC(n_jobs=1).fit(Xtr[:200], ytr[:200])       # compile / load numba outside the timing
gs_jobs, est_jobs = int(sys.argv[1]), (None if sys.argv[2] == "None" else int(sys.argv[2]))
print("READY", flush=True)
t = time.perf_counter()
gs = GridSearchCV(MulticlassSVC(C=10, n_jobs=est_jobs),
                  {"C": [1.0, 10.0], "gamma": ["scale", 0.02]}, cv=3, n_jobs=gs_jobs)
gs.fit(Xtr, ytr)
wall = time.perf_counter() - t
best = {k: str(v) for k, v in gs.best_params_.items()}
print("RESULT " + json.dumps({"wall_s": wall, "best_params": best,
                              "test_accuracy": float(gs.score(Xte, yte))}), flush=True)
"""


def _tree(proc):
    try:
        return [proc] + proc.children(recursive=True)
    except Exception:
        return [proc]


def run_config(gs_jobs, est_jobs):
    import psutil

    env = dict(os.environ)
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(gs_jobs), str(est_jobs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    root = psutil.Process(p.pid)
    line = p.stdout.readline()
    while line and not line.startswith("READY"):
        line = p.stdout.readline()
    load0 = os.getloadavg()
    threads, running = [], []
    cpu0 = sum(sum(q.cpu_times()[:2]) for q in _tree(root))
    t0 = time.perf_counter()
    import threading

    done = threading.Event()
    out = {}

    def reader():
        for ln in p.stdout:
            if ln.startswith("RESULT "):
                out.update(json.loads(ln[7:]))
        done.set()

    threading.Thread(target=reader, daemon=True).start()
    cpu_last = {}
    while not done.is_set():
        n_thr = n_run = 0
        for q in _tree(root):
            try:
                n_thr += q.num_threads()
                n_run += sum(1 for t in _task_states(q.pid) if t == "R")
                cpu_last[q.pid] = sum(q.cpu_times()[:2])
            except psutil.Error:
                pass
        threads.append(n_thr)
        running.append(n_run)
        time.sleep(0.05)
    wall_outer = time.perf_counter() - t0
    p.wait()
    load1 = os.getloadavg()
    err = p.stderr.read()
    if p.returncode != 0:
        raise RuntimeError(err[-2000:])
    cpu = sum(cpu_last.values()) - cpu0
    run_sorted = sorted(running)
    return {
        "gridsearch_n_jobs": gs_jobs,
        "estimator_n_jobs": est_jobs,
        "wall_s": round(out["wall_s"], 2),
        "wall_outer_s": round(wall_outer, 2),
        "cpu_s": round(cpu, 2),
        "cpu_per_wall": round(cpu / out["wall_s"], 2),
        "threads_alive_max": max(threads),
        "running_threads_max": max(running),
        "running_threads_mean": round(sum(running) / len(running), 2),
        "running_threads_p90": run_sorted[int(0.9 * (len(run_sorted) - 1))],
        "loadavg_before": [round(v, 2) for v in load0],
        "loadavg_after": [round(v, 2) for v in load1],
        "best_params": out["best_params"],
        "test_accuracy": out["test_accuracy"],
    }


def _task_states(pid):
    """Scheduler state letter of every thread of ``pid`` (Linux /proc)."""
    base = f"/proc/{pid}/task"
    states = []
    try:
        for tid in os.listdir(base):
            try:
                with open(f"{base}/{tid}/stat") as fh:
                    s = fh.read()
                states.append(s[s.rindex(")") + 2])
            except OSError:
                pass
    except OSError:
        pass
    return states


def main(argv=None):
    ap = _report.parser(__doc__, "gridsearch.json")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: one repeat of GridSearchCV(n_jobs=1) only (~1 min)",
    )
    a = ap.parse_args(argv)
    run = _report.Run(__file__, "gridsearch", _report.settings_of(a))
    configs = [(1, None)] if a.quick else [(1, None), (2, None), (2, -1)]
    if a.quick:
        a.repeat = 1
    rows = []
    for r in range(a.repeat):
        for gs_jobs, est_jobs in configs:
            row = run_config(gs_jobs, est_jobs)
            row["repeat"] = r
            rows.append(row)
            print(
                f"gs n_jobs={gs_jobs} est n_jobs={est_jobs!s:4}: wall {row['wall_s']:6.2f} s  "
                f"cpu {row['cpu_s']:6.2f} s  running threads mean {row['running_threads_mean']}"
                f" p90 {row['running_threads_p90']} max {row['running_threads_max']}  "
                f"alive max {row['threads_alive_max']}  load {row['loadavg_before'][0]} -> "
                f"{row['loadavg_after'][0]}",
                flush=True,
            )
    _report.write(run.envelope(rows, cores=os.cpu_count()), a.out, markdown(rows))
    print(f"written {a.out}")


def markdown(rows) -> str:
    """One line per GridSearchCV run: wall and CPU time, threads running."""
    head = [
        "GridSearchCV n_jobs",
        "estimator n_jobs",
        "repeat",
        "wall s",
        "cpu s",
        "running threads mean / p90 / max",
        "threads alive max",
        "load 1m before",
    ]
    body = [
        [
            r["gridsearch_n_jobs"],
            r["estimator_n_jobs"],
            r["repeat"],
            r["wall_s"],
            r["cpu_s"],
            (
                f"{r['running_threads_mean']} / {r['running_threads_p90']} / "
                f"{r['running_threads_max']}"
            ),
            r["threads_alive_max"],
            r["loadavg_before"][0],
        ]
        for r in rows
    ]
    return (
        "\n".join(["# GridSearchCV(MulticlassSVC()) on digits", ""] + _report.md_table(head, body))
        + "\n"
    )


if __name__ == "__main__":
    main()
