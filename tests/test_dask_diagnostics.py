"""Dask's diagnostics for dmcsvm fits: the ``dask`` extra brings bokeh (dashboard and
``distributed.performance_report``), the scheduler script prints the dashboard's URL, and the
cluster scripts' ``--help`` is their header comment only."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tomllib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"


def test_dask_extra_brings_bokeh():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = meta["optional-dependencies"]
    assert any(re.match(r"bokeh\b", d) for d in extras["dask"])
    assert any(re.match(r"bokeh\b", d) for d in extras["test"])  # the report test below


@pytest.mark.parametrize("script", ["start-scheduler.sh", "start-workers.sh", "stop.sh"])
def test_cluster_script_help_is_its_header_only(script):
    r = subprocess.run(
        ["bash", str(CLUSTER / script), "--help"], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = []
    for line in (CLUSTER / script).read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        header.append(re.sub(r"^# ?", "", line))
    assert lines == header
    assert not any(s in r.stdout for s in ("set -euo", "source ", "$(dirname"))


def test_user_guide_shows_a_performance_report():
    text = (ROOT / "docs" / "cluster.md").read_text()
    assert "performance_report(" in text and 'pip install "dmcsvm[dask]"' in text


@pytest.mark.cluster
def test_performance_report_of_a_fit(tmp_path):
    pytest.importorskip("bokeh")
    from distributed import Client, LocalCluster, performance_report
    from sklearn.datasets import load_iris

    from dmcsvm import MulticlassSVC

    X, y = load_iris(return_X_y=True)
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
        ) as cluster,
        Client(cluster) as client,
    ):
        with performance_report(filename=str(tmp_path / "fit.html")):
            # (working sets of 50 rows: the partitions' rounds, on the worker)
            est = MulticlassSVC(C=10, client=client, solver_options={"batch_size": 50}).fit(X, y)
    assert est.score(X, y) > 0.9 and est.engine_stats_[0]["executor"] == "dask"
    html = (tmp_path / "fit.html").read_text()
    assert "Dask Performance Report" in html and np.isfinite(len(html))


@pytest.mark.cluster
def test_start_scheduler_prints_the_dashboard_url(tmp_path):
    pytest.importorskip("bokeh")
    import socket

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    run = tmp_path / "run"
    env_path = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    r = subprocess.run(
        [
            "bash",
            str(CLUSTER / "start-scheduler.sh"),
            "--run-dir",
            str(run),
            "--port",
            str(ports[0]),
            "--dashboard",
            f"127.0.0.1:{ports[1]}",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env={"PATH": env_path, "HOME": str(tmp_path)},
    )
    try:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip().splitlines()[-1] == f"tcp://127.0.0.1:{ports[0]}"
        assert f"dashboard: http://127.0.0.1:{ports[1]}/status" in r.stderr.splitlines()
    finally:
        subprocess.run(
            ["bash", str(CLUSTER / "stop.sh"), "--run-dir", str(run)],
            capture_output=True,
            timeout=60,
            env={"PATH": env_path},
        )
