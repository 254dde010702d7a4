"""Where a command runs: the ``--scheduler`` / ``--local-workers`` options, the TLS check of a
``tls://`` scheduler, and the Dask client they give."""

from __future__ import annotations

import contextlib

from ._usage import UsageError


def add_cluster_options(p):
    g = p.add_argument_group("where it runs (default: threads in this process)")
    g.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on the Dask cluster of this scheduler (e.g. tcp://10.0.0.1:8786)",
    )
    g.add_argument(
        "--local-workers",
        type=int,
        metavar="N",
        help="start a LocalCluster of N worker processes for this run",
    )
    g.add_argument(
        "--threads-per-worker",
        type=int,
        metavar="T",
        help="threads of each LocalCluster worker (with --local-workers)",
    )
    g.add_argument(
        "--memory-limit",
        metavar="LIMIT",
        help="memory limit of each LocalCluster worker, e.g. 4GB (with --local-workers)",
    )
    return g


def check_cluster_options(a):
    if a.scheduler and a.local_workers:
        raise UsageError("give either --scheduler or --local-workers, not both")
    if a.local_workers is not None and a.local_workers < 1:
        raise UsageError(f"--local-workers must be >= 1, got {a.local_workers}")
    if (a.threads_per_worker or a.memory_limit) and not a.local_workers:
        raise UsageError(
            "--threads-per-worker and --memory-limit size a LocalCluster: they need --local-workers"
        )
    if a.threads_per_worker is not None and a.threads_per_worker < 1:
        raise UsageError(f"--threads-per-worker must be >= 1, got {a.threads_per_worker}")
    if a.scheduler:
        check_tls_config(a.scheduler)


def _tls_hint(address) -> str:
    return (
        f"{address} is a TLS scheduler, but no client certificate is configured: point "
        "DASK_CONFIG at a Dask config that sets distributed.comm.tls.ca-file, "
        "distributed.comm.tls.client.cert and distributed.comm.tls.client.key, such as the "
        "dask-tls.yaml that cluster/tls/make-certs.sh writes (in Python: a Client with "
        "security=distributed.Security(...)); see section 3, TLS, of cluster/README.md"
    )


def check_tls_config(address) -> None:
    """A ``tls://`` scheduler needs the client's certificates from the Dask config (what
    ``distributed.Security()`` reads); without them ``Client`` fails with a bare TypeError."""
    if not str(address).lower().startswith("tls://"):
        return
    from distributed.security import Security

    if Security().get_connection_args("client").get("ssl_context") is None:
        raise UsageError(_tls_hint(address))


@contextlib.contextmanager
def cluster_client(a):
    """A distributed Client for ``--scheduler`` / ``--local-workers`` (closed afterwards), or
    None when the command runs in this process."""
    check_cluster_options(a)
    if not a.scheduler and not a.local_workers:
        yield None
        return
    from distributed import Client, LocalCluster

    if a.scheduler:
        try:
            client = Client(a.scheduler, timeout="20s")
        except TypeError as e:
            if "ssl_context" not in str(e):
                raise
            raise UsageError(_tls_hint(a.scheduler)) from None
        except OSError as e:
            raise UsageError(f"cannot reach the Dask scheduler at {a.scheduler}: {e}") from None
        with client:
            yield client
        return
    kw = {
        "n_workers": a.local_workers,
        "processes": True,
        "dashboard_address": None,
        "threads_per_worker": a.threads_per_worker or 1,
    }
    if a.memory_limit:
        kw["memory_limit"] = a.memory_limit
    with LocalCluster(**kw) as cluster, Client(cluster) as client:
        yield client
