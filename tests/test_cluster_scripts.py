"""The cluster/ recipes, run for real on 127.0.0.1: certificates from cluster/tls/make-certs.sh, a
TLS scheduler and two TLS workers started by cluster/start-scheduler.sh and start-workers.sh,
training through them with the client certificate (Python and ``dmcsvm train --scheduler``),
strangers refused, and cluster/stop.sh leaving no process behind.  Plus offline checks of the
docker compose file, the Dockerfile's install step, the Helm values and the jobqueue examples."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"
VENV_BIN = os.path.dirname(sys.executable)
DASK_CLI = shutil.which("dask", path=VENV_BIN) or shutil.which("dask")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = dict(os.environ)
    env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "")
    env["DMCSVM_DASK"] = DASK_CLI or "dask"
    env.pop("DASK_CONFIG", None)
    env.update(extra)
    return env


def _run(args, timeout=90, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(**env),
        cwd=str(ROOT),
    )


def _problem(seed=5, n=80, d=5, m=3):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=2.0, size=(m, d))
    y = rng.integers(0, m, n).astype(np.int64)
    return centers[y] + rng.normal(size=(n, d)), y


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie still "exists" for kill(0); only running members count
    for st in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = st.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


# ------------------------------------------------------------------ certificates
needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None,
    reason="openssl is not installed: cluster/tls/make-certs.sh "
    "needs it to make the CA and certificates",
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip(
            "openssl is not installed: cluster/tls/make-certs.sh needs it to make the "
            "CA and certificates"
        )
    out = tmp_path_factory.mktemp("certs")
    r = _run([CLUSTER / "tls" / "make-certs.sh", out, "--hosts", "node1.example.org,10.1.2.3"])
    assert r.returncode == 0, r.stderr
    return out


@needs_openssl
def test_make_certs_writes_a_ca_signed_set_with_sans(certs):
    for name in ["ca", "scheduler", "worker", "client"]:
        assert (certs / f"{name}.pem").is_file() and (certs / f"{name}-key.pem").is_file()
        assert (certs / f"{name}-key.pem").stat().st_mode & 0o077 == 0, (
            f"{name}-key.pem readable by others"
        )
    for role in ["scheduler", "worker", "client"]:
        r = _run(["openssl", "verify", "-CAfile", certs / "ca.pem", certs / f"{role}.pem"])
        assert r.returncode == 0 and "OK" in r.stdout, r.stderr
        text = _run(["openssl", "x509", "-in", certs / f"{role}.pem", "-noout", "-text"]).stdout
        for san in [
            "DNS:localhost",
            "IP Address:127.0.0.1",
            "DNS:node1.example.org",
            "IP Address:10.1.2.3",
        ]:
            assert san in text, (role, san)
        assert ("TLS Web Server Authentication" in text) == (role != "client")
    # the rendered Dask config points at these files
    import yaml

    tls = yaml.safe_load((certs / "dask-tls.yaml").read_text())["distributed"]["comm"]
    assert tls["require-encryption"] is True
    assert tls["tls"]["ca-file"] == str(certs / "ca.pem")
    for role in ["scheduler", "worker", "client"]:
        assert tls["tls"][role] == {
            "cert": str(certs / f"{role}.pem"),
            "key": str(certs / f"{role}-key.pem"),
        }


@needs_openssl
def test_make_certs_refuses_bad_arguments(tmp_path):
    r = _run([CLUSTER / "tls" / "make-certs.sh", tmp_path, "--days", "soon"])
    assert r.returncode == 2
    assert "--days must be a positive integer, got 'soon'" in r.stderr
    r = _run([CLUSTER / "tls" / "make-certs.sh"])
    assert r.returncode == 2 and "OUT_DIR" in r.stderr


# ------------------------------------------------------------------ a TLS cluster
@pytest.fixture(scope="module")
def tls_cluster(certs, tmp_path_factory):
    """Scheduler + 2 workers through the cluster/ scripts; everything killed at the end."""
    if DASK_CLI is None:
        pytest.fail("the `dask` command line (distributed) is not installed")
    run_dir = tmp_path_factory.mktemp("dask-run")
    port = _free_port()
    info = {"run_dir": run_dir, "certs": certs, "pgids": []}

    def record_pids():
        for f in run_dir.glob("*.pid"):
            pid = int(f.read_text().split()[0])
            if pid not in info["pgids"]:
                info["pgids"].append(pid)

    # a run killed by SIGTERM (CI timeouts) still tears the cluster down: SIGTERM becomes
    # KeyboardInterrupt, after which pytest runs the finalizers; and a cluster that leaks
    # anyway ends itself (the scheduler after 10 idle minutes, the workers 60 s after it)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        r = _run(
            [
                CLUSTER / "start-scheduler.sh",
                "--tls-dir",
                certs,
                "--port",
                port,
                "--no-dashboard",
                "--run-dir",
                run_dir,
                "--wait",
                "60",
                "--idle-timeout",
                "600",
            ]
        )
        record_pids()
        assert r.returncode == 0, r.stderr + (run_dir / "scheduler.log").read_text()
        info["address"] = r.stdout.strip().splitlines()[-1]
        assert info["address"] == f"tls://127.0.0.1:{port}"
        r = _run(
            [
                CLUSTER / "start-workers.sh",
                info["address"],
                "-n",
                "2",
                "--nthreads",
                "1",
                "--memory-limit",
                "1GiB",
                "--tls-dir",
                certs,
                "--name",
                "w",
                "--run-dir",
                run_dir,
                "--wait",
                "90",
                "--death-timeout",
                "60",
            ],
            timeout=120,
        )
        record_pids()
        assert r.returncode == 0, r.stderr
        assert r.stdout.count("registered") == 2, r.stdout
        yield info
    finally:
        record_pids()
        try:
            _run([CLUSTER / "stop.sh", "--run-dir", run_dir, "--timeout", "10"], timeout=60)
        finally:
            for pgid in info["pgids"]:  # whatever stop.sh could not end
                if _group_alive(pgid):
                    try:
                        os.killpg(pgid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            signal.signal(signal.SIGTERM, previous)


_ATTEMPT = """
import json, sys
from distributed import Client
from distributed.security import Security
address, kw = sys.argv[1], json.loads(sys.argv[2])
try:
    Client(address, security=Security(**kw) if kw is not None else None, timeout=5).close()
    print(json.dumps({"connected": True}))
except BaseException as e:
    print(json.dumps({"connected": False, "types": [t.__name__ for t in type(e).__mro__],
                      "message": str(e)}))
"""


def _client_attempt(address, security=None) -> dict:
    """Try ``distributed.Client(address, security=Security(**security), timeout=5)`` in a fresh
    interpreter and report what happened.  (A Client whose start failed is left to the garbage
    collector, and distributed's finalizer of one can deadlock the *next* Client started in the
    same process, so the refused attempts each get their own process.)"""
    import json

    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-c", _ATTEMPT, address, json.dumps(security)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        cwd=str(ROOT),
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["seconds"] = time.monotonic() - t0
    return out


def _security_kw(certs, ca_dir=None) -> dict:
    ca_dir = ca_dir or certs
    return {
        "tls_ca_file": str(ca_dir / "ca.pem"),
        "tls_client_cert": str(certs / "client.pem"),
        "tls_client_key": str(certs / "client-key.pem"),
        "require_encryption": True,
    }


def _security(certs, role_cert="client", ca_dir=None):
    from distributed.security import Security

    ca_dir = ca_dir or certs
    return Security(
        tls_ca_file=str(ca_dir / "ca.pem"),
        tls_client_cert=str(certs / f"{role_cert}.pem"),
        tls_client_key=str(certs / f"{role_cert}-key.pem"),
        require_encryption=True,
    )


@pytest.mark.cluster
def test_workers_have_the_requested_memory_limit_and_listen_on_tls(tls_cluster):
    from distributed import Client

    with Client(
        tls_cluster["address"], security=_security(tls_cluster["certs"]), timeout=20
    ) as client:
        workers = client.scheduler_info(n_workers=-1)["workers"]
    assert len(workers) == 2
    assert all(addr.startswith("tls://127.0.0.1:") for addr in workers)
    assert sorted(w["name"] for w in workers.values()) == ["w-0", "w-1"]
    assert all(w["memory_limit"] == 2**30 for w in workers.values())
    assert all(w["nthreads"] == 1 for w in workers.values())


@pytest.mark.slow
@pytest.mark.cluster
def test_training_with_the_client_certificate_matches_in_process(tls_cluster):
    from distributed import Client

    from dmcsvm import MulticlassSVC

    X, y = _problem()
    opts = {"n_partitions": 2, "batch_size": 30}  # the partitions' rounds, on the workers
    ref = MulticlassSVC(C=2.0, gamma=0.3, n_jobs=1, solver_options=opts).fit(X, y)
    with Client(
        tls_cluster["address"], security=_security(tls_cluster["certs"]), timeout=20
    ) as client:
        est = MulticlassSVC(C=2.0, gamma=0.3, client=client, solver_options=opts).fit(X, y)
    assert est.engine_stats_[0]["executor"] == "dask"
    np.testing.assert_array_equal(est.support_, ref.support_)
    np.testing.assert_allclose(est.dual_coef_, ref.dual_coef_, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(est.predict(X), ref.predict(X))


@pytest.mark.slow
@pytest.mark.cluster
def test_dmcsvm_train_with_the_rendered_tls_config(tls_cluster, tmp_path):
    """The README's recipe: DASK_CONFIG=<certs>/dask-tls.yaml, dmcsvm train --scheduler tls://..."""
    from dmcsvm.model_io import load_model

    X, y = _problem(seed=9, n=60)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    common = [
        Path(VENV_BIN) / "dmcsvm",
        "train",
        tmp_path / "X.npy",
        "--labels",
        tmp_path / "y.npy",
        "--C",
        "2.0",
        "--gamma",
        "0.3",
        "--n_partitions",
        "2",
        "--no-progress",
    ]
    r = _run(
        common + ["-o", tmp_path / "tls.npz", "--scheduler", tls_cluster["address"]],
        timeout=120,
        DASK_CONFIG=str(tls_cluster["certs"] / "dask-tls.yaml"),
    )
    assert r.returncode == 0, r.stderr
    r = _run(common + ["-o", tmp_path / "local.npz", "--n_jobs", "1"], timeout=120)
    assert r.returncode == 0, r.stderr
    model, ref = load_model(tmp_path / "tls.npz"), load_model(tmp_path / "local.npz")
    np.testing.assert_array_equal(model.support_, ref.support_)
    np.testing.assert_allclose(model.dual_coef_, ref.dual_coef_, rtol=0, atol=1e-9)
    # without the TLS config the same command cannot reach the cluster
    r = _run(
        common + ["-o", tmp_path / "no.npz", "--scheduler", tls_cluster["address"]], timeout=120
    )
    assert r.returncode == 2
    assert "is a TLS scheduler, but no client certificate is configured" in r.stderr
    assert not (tmp_path / "no.npz").exists()


def _assert_refused(ctx, raw, alert):
    """The TLS server ends the connection with ``alert`` (TLS 1.3 delivers it at the first read,
    or the reset of the connection arrives first); nothing is ever read from it."""
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)) as err:
        with ctx.wrap_socket(raw) as s:
            s.sendall(b"\0" * 8)
            s.recv(16)
    if isinstance(err.value, ssl.SSLError) and not isinstance(err.value, ssl.SSLEOFError):
        assert alert in str(err.value), err.value


@pytest.mark.cluster
def test_client_without_certificates_is_refused(tls_cluster):
    # Dask's client has no TLS context without a certificate and does not even try
    r = _client_attempt(tls_cluster["address"], {})
    assert not r["connected"] and r["seconds"] < 30
    assert r["types"][0] == "TypeError"
    assert r["message"].startswith("TLS expects a `ssl_context` argument of type ssl.SSLContext"), r
    # a TLS client that trusts the cluster's CA but shows no certificate: the scheduler
    # ends the handshake (TLS 1.3 reports it at the first read)
    ctx = ssl.create_default_context(cafile=str(tls_cluster["certs"] / "ca.pem"))
    ctx.check_hostname = False
    host, port = tls_cluster["address"][len("tls://") :].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        _assert_refused(ctx, raw, "TLSV13_ALERT_CERTIFICATE_REQUIRED")


@pytest.mark.cluster
def test_certificate_of_another_ca_is_refused(tls_cluster, tmp_path):
    """A stranger who made his own CA and certificates (with our script) does not get in."""
    stranger = tmp_path / "stranger"
    assert _run([CLUSTER / "tls" / "make-certs.sh", stranger]).returncode == 0
    # the stranger trusts our scheduler (our CA) but presents his own client certificate
    r = _client_attempt(tls_cluster["address"], _security_kw(stranger, ca_dir=tls_cluster["certs"]))
    assert not r["connected"] and r["seconds"] < 30
    assert "CommClosedError" in r["types"], r
    # observed: FatalCommClosedError(... SSLError: [SSL: TLSV1_ALERT_UNKNOWN_CA] ...), or, when
    # the scheduler's close overtakes its alert, CommClosedError(... SSLEOFError: EOF occurred
    # in violation of protocol) or a connection reset: the handshake never completes
    assert re.search(
        r"TLSV1_ALERT_UNKNOWN_CA|SSLEOFError: EOF occurred|Connection reset", r["message"]
    ), r
    # the same at the TLS level: the scheduler rejects the certificate with an 'unknown ca' alert
    ctx = ssl.create_default_context(cafile=str(tls_cluster["certs"] / "ca.pem"))
    ctx.check_hostname = False
    ctx.load_cert_chain(str(stranger / "client.pem"), str(stranger / "client-key.pem"))
    host, port = tls_cluster["address"][len("tls://") :].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        _assert_refused(ctx, raw, "TLSV1_ALERT_UNKNOWN_CA")


@pytest.mark.cluster
def test_plain_tcp_to_the_tls_port_does_not_get_in(tls_cluster):
    port = tls_cluster["address"].rsplit(":", 1)[1]
    r = _client_attempt(f"tcp://127.0.0.1:{port}")
    assert not r["connected"] and r["seconds"] < 30
    # observed: CommClosedError(... ConnectionResetError: [Errno 104] Connection reset by peer):
    # the scheduler drops the connection when the TLS handshake does not start
    assert "CommClosedError" in r["types"], r
    assert re.search("Connection reset by peer|Stream is closed", r["message"]), r
    # and a process configured with require-encryption cannot even try tcp://
    r = _client_attempt(f"tcp://127.0.0.1:{port}", _security_kw(tls_cluster["certs"]))
    assert not r["connected"] and r["types"][0] == "RuntimeError", r
    assert "encryption required" in r["message"], r


@pytest.mark.cluster
def test_starting_a_second_scheduler_in_the_same_run_dir_is_refused(tls_cluster):
    r = _run(
        [
            CLUSTER / "start-scheduler.sh",
            "--tls-dir",
            tls_cluster["certs"],
            "--port",
            _free_port(),
            "--no-dashboard",
            "--run-dir",
            tls_cluster["run_dir"],
        ]
    )
    assert r.returncode == 2
    assert "scheduler is already running" in r.stderr


@pytest.mark.cluster
def test_stop_sh_stops_everything(tls_cluster):
    """Last test of the cluster: stop.sh ends scheduler, nannies and workers (their process
    groups) and the port closes."""
    pgids = list(tls_cluster["pgids"])
    assert len(pgids) == 3
    assert all(_group_alive(g) for g in pgids)
    r = _run(
        [CLUSTER / "stop.sh", "--run-dir", tls_cluster["run_dir"], "--timeout", "20"], timeout=90
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("stopping") == 3, r.stdout
    assert not [g for g in pgids if _group_alive(g)]
    assert not list(tls_cluster["run_dir"].glob("*.pid"))
    port = int(tls_cluster["address"].rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


# ------------------------------------------------------------------ script arguments
@pytest.mark.parametrize(
    "args, message",
    [
        (["-n", "0", "tcp://127.0.0.1:1"], "-n must be a positive number of workers, got '0'"),
        (["--nthreads", "x", "tcp://127.0.0.1:1"], "--nthreads must be a positive number, got 'x'"),
        ([], "give the scheduler address (tcp://host:8786) or --scheduler-file FILE"),
        (
            ["--tls-dir", "/nonexistent", "tcp://127.0.0.1:1"],
            "with --tls-dir the scheduler address must start with tls://, got 'tcp://127.0.0.1:1'",
        ),
        (
            ["--tls-dir", "/nonexistent", "tls://127.0.0.1:1"],
            "TLS: /nonexistent/ca.pem is missing or unreadable",
        ),
    ],
)
def test_start_workers_refuses_bad_arguments(args, message, tmp_path):
    r = _run([CLUSTER / "start-workers.sh", *args, "--run-dir", tmp_path])
    assert r.returncode == 2
    assert message in r.stderr
    assert not list(tmp_path.glob("*.pid"))


def test_stop_sh_without_run_dir_is_a_no_op(tmp_path):
    r = _run([CLUSTER / "stop.sh", "--run-dir", tmp_path / "none"])
    assert r.returncode == 0 and "nothing to stop" in r.stdout


# ------------------------------------------------------------------ offline checks
def _yaml(path):
    yaml = pytest.importorskip("yaml", reason="PyYAML parses the compose/Helm/config files")
    return yaml.safe_load(Path(path).read_text())


def test_dask_config_is_what_the_comments_say():
    import dask
    import distributed  # noqa: F401 - loads distributed's defaults into dask.config

    cfg = _yaml(CLUSTER / "dask-config.yaml")["distributed"]
    mem = cfg["worker"]["memory"]
    assert mem["target"] is False and mem["spill"] is False and mem["pause"] is False
    assert 0.8 < mem["terminate"] < 1
    assert cfg["scheduler"]["allowed-failures"] == 1
    assert cfg["scheduler"]["work-stealing"] is False
    # workers keep the memory they free, as client='local' does (engine/dask/local.py)
    assert cfg["nanny"]["pre-spawn-environ"] == {
        "MALLOC_TRIM_THRESHOLD_": 2**31 - 1,
        "MALLOC_MMAP_MAX_": 0,
    }

    # every key exists in distributed's defaults (no silently ignored typo)
    def keys(d, prefix):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from keys(v, prefix + k + ".")
            else:
                yield prefix + k

    # (the workers' environment variables are free-form: not among distributed's defaults)
    env = "distributed.nanny.pre-spawn-environ."
    for key in [k for k in keys(cfg, "distributed.") if not k.startswith(env)] + [
        "distributed." + k
        for k in keys(_yaml(CLUSTER / "tls" / "dask-tls.yaml")["distributed"], "")
    ]:
        dask.config.get(key)  # raises KeyError for an unknown key


def _readme_install_step() -> str:
    """The install step of the top-level README: its first command without the demo."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)\n```", text, re.S).group(1).strip()
    steps = [s.strip() for s in block.split("&&")]
    install = [s for s in steps if "dmcsvm demo" not in s]
    assert any("pip install" in s for s in install), block
    return " && ".join(install)


def test_dockerfile_installs_with_the_readme_step():
    lines = (CLUSTER / "docker" / "Dockerfile").read_text().splitlines()
    runs = [ln[len("RUN ") :].strip() for ln in lines if ln.startswith("RUN ")]
    assert _readme_install_step() in runs
    code = [ln for ln in lines if ln.strip() and not ln.startswith("#")]
    assert code[0] == "FROM python:3.11-slim"
    assert "COPY . ." in lines
    # the venv of the README step is on the PATH of every container
    assert any(ln.startswith("ENV PATH=") and ".venv/bin" in ln for ln in lines)


def test_compose_file():
    """What `docker compose config` would check, offline: services, build, commands, limits."""
    from dask.utils import parse_bytes

    compose = _yaml(CLUSTER / "docker" / "compose.yaml")
    services = compose["services"]
    assert set(services) == {"scheduler", "worker", "data", "train"}
    for name, svc in services.items():
        assert svc["image"] == "dmcsvm:latest", name
        assert isinstance(svc["command"], list), name
    build = services["scheduler"]["build"]
    context = (CLUSTER / "docker" / build["context"]).resolve()
    assert context == ROOT
    assert (context / build["dockerfile"]).resolve() == CLUSTER / "docker" / "Dockerfile"
    assert services["scheduler"]["command"][0] == "cluster/start-scheduler.sh"
    assert "--foreground" in services["scheduler"]["command"]
    worker = services["worker"]
    assert worker["deploy"]["replicas"] == 2
    cmd = worker["command"]
    assert cmd[:2] == ["cluster/start-workers.sh", "tcp://scheduler:8786"]
    assert "--foreground" in cmd
    # Dask's limit sits below the container's, so the nanny acts before the kernel's OOM killer
    dask_limit = parse_bytes(cmd[cmd.index("--memory-limit") + 1])
    container_limit = parse_bytes(worker["deploy"]["resources"]["limits"]["memory"])
    assert 0.8 * container_limit <= dask_limit < container_limit
    train = services["train"]
    assert train["command"][0] == "dmcsvm"
    assert "tcp://scheduler:8786" in train["command"]
    assert set(train["depends_on"]) == {"scheduler", "worker", "data"}
    assert train["depends_on"]["data"]["condition"] == "service_completed_successfully"
    # the job trains on a store on the volume the workers mount (they read their rows from it)
    store = train["command"][2]
    assert store.endswith(".zarr")
    assert {"data:/data"} <= set(worker["volumes"]) & set(train["volumes"])
    assert services["data"]["command"][:2] == ["python", "cluster/docker/make_digits.py"]
    assert (ROOT / services["data"]["command"][1]).is_file()
    # every command refers to files that exist in the image (the repository)
    for svc in services.values():
        if svc["command"][0].startswith("cluster/"):
            assert (ROOT / svc["command"][0]).is_file()


def test_helm_values_match_the_chart_conventions():
    from dask.utils import parse_bytes

    values = _yaml(CLUSTER / "helm" / "values.yaml")
    worker = values["worker"]
    assert worker["replicas"] >= 1
    limits = worker["resources"]["limits"]
    # the chart passes resources.limits.memory as --memory-limit: Dask must parse it
    assert parse_bytes(str(limits["memory"])) >= 2**30
    assert worker["resources"]["requests"]["memory"] == limits["memory"]
    assert worker["image"]["repository"] == values["scheduler"]["image"]["repository"]
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert env["DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE"] == "False"
    assert env["DASK_DISTRIBUTED__WORKER__MEMORY__SPILL"] == "False"


JOBQUEUE = ["slurm_example.py", "pbs_example.py"]


@pytest.mark.parametrize("name", JOBQUEUE)
def test_jobqueue_example_compiles_and_guards_its_import(name, tmp_path):
    path = str(CLUSTER / "jobqueue" / name)
    r = subprocess.run(
        [sys.executable, "-m", "py_compile", path], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    # without dask-jobqueue (sys.modules entry None = not importable): a clear message, status 2
    hide = (
        "import runpy, sys; sys.modules['dask_jobqueue'] = None; "
        f"sys.argv = [{path!r}, '--print-job-script']; runpy.run_path({path!r}, "
        "run_name='__main__')"
    )
    r = subprocess.run(
        [sys.executable, "-c", hide], capture_output=True, text=True, timeout=60, cwd=str(tmp_path)
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (
        "dask-jobqueue is not installed: pip install dask-jobqueue "
        "(it is not a dependency of dmcsvm)"
    )


@pytest.mark.parametrize("name", JOBQUEUE)
def test_jobqueue_job_script_carries_the_memory_settings(name, tmp_path):
    pytest.importorskip(
        "dask_jobqueue",
        reason="dask-jobqueue is optional (pip install dask-jobqueue) and not installed",
    )
    r = subprocess.run(
        [
            sys.executable,
            str(CLUSTER / "jobqueue" / name),
            "--print-job-script",
            "--cores",
            "8",
            "--processes",
            "2",
            "--memory",
            "32GB",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # 32 GB per job split over 2 worker processes: 16e9 bytes = 14.90 GiB each, 4 threads each
    assert "--memory-limit 14.90GiB" in out, out
    assert "--nworkers 2" in out and "--nthreads 4" in out, out
    assert f"export DASK_CONFIG={(CLUSTER / 'dask-config.yaml').resolve()}" in out, out
    if name.startswith("slurm"):
        assert "#SBATCH --mem=30G" in out and "#SBATCH --cpus-per-task=8" in out, out
    else:
        assert "#PBS -l select=1:ncpus=8:mem=32GB" in out, out


@pytest.mark.parametrize("name", ["scheduler.yaml", "workers.yaml", "workers-tls.yaml"])
def test_dask_spec_files_name_real_classes_and_options(name):
    """`dask spec` builds cls(*args, **opts): every class imports and takes every option."""
    import inspect

    from dask.utils import parse_bytes
    from distributed import Worker
    from distributed.utils import import_term

    spec = _yaml(CLUSTER / "spec" / name)
    if "cls" in spec:  # one process, as `dask spec` reads it
        spec = {0: spec}
    for entry in spec.values():
        cls = import_term(entry["cls"])
        params = dict(inspect.signature(cls.__init__).parameters)
        if entry["cls"] == "distributed.Nanny":  # passes the rest on to its Worker
            params.update(inspect.signature(Worker.__init__).parameters)
        for opt in entry["opts"]:
            assert opt in params, (name, entry["cls"], opt)
        if "memory_limit" in entry["opts"]:
            assert parse_bytes(entry["opts"]["memory_limit"]) >= 2**30
    if name.startswith("workers"):
        names = [e["opts"]["name"] for e in spec.values()]
        assert len(set(names)) == len(names) == 2
