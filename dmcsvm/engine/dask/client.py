"""The Dask client an executor talks through, and what the scheduler tells it about the workers.

:func:`resolve_client` follows Dask's conventions (a ``Client`` as is, a scheduler address, or
``'local'`` for the ``LocalCluster`` this process keeps for its fits, :mod:`.local`);
:class:`Watch` records the scheduler's pushed events (a worker removed, a worker restarted by its
nanny for memory), so that noticing a lost worker costs no request per round."""

from __future__ import annotations


class SchedulerLostError(RuntimeError):
    """The client lost its Dask scheduler: the partitions' actors are gone with it."""


class Watch:
    """What the scheduler pushes about the workers (``Client.subscribe_topic``): every removal of
    a worker (by address: a worker restarted by its nanny on the same address counts as removed,
    its actors are gone) and every restart of a worker by its nanny for memory."""

    def __init__(self):
        self.removed: dict = {}  # address -> removals seen
        self.memory: list = []  # (address, resident bytes) per restart for memory
        self.added = 0

    def on_all(self, event):
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else event
        if isinstance(msg, dict):
            if msg.get("action") == "remove-worker" and msg.get("worker"):
                self.removed[msg["worker"]] = self.removed.get(msg["worker"], 0) + 1
            elif msg.get("action") == "add-worker":
                self.added += 1

    def on_memory(self, event):
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else event
        if isinstance(msg, dict):
            self.memory.append((msg.get("worker"), int(msg.get("rss") or 0)))


#: one handler per client and topic (a client keeps one): it fans out to every executor's watch
_WATCHES: dict = {}


def subscribe(client, watch: Watch) -> None:
    """Have ``watch`` receive the scheduler's worker events through ``client``."""
    key = id(client)
    if key not in _WATCHES:
        _WATCHES[key] = []
        watches = _WATCHES[key]
        client.subscribe_topic("all", lambda e: [w.on_all(e) for w in list(watches)])
        client.subscribe_topic(
            "worker-restart-memory", lambda e: [w.on_memory(e) for w in list(watches)]
        )
    _WATCHES[key].append(watch)


def unsubscribe(client, watch: Watch) -> None:
    """Stop ``watch``; the last watch of a client unsubscribes its topics."""
    watches = _WATCHES.get(id(client))
    if watches is None or watch not in watches:
        return
    watches.remove(watch)
    if not watches:
        del _WATCHES[id(client)]
        for topic in ("all", "worker-restart-memory"):
            try:
                client.unsubscribe_topic(topic)
            except Exception:  # noqa: BLE001 - a closed client has nothing to unsubscribe
                pass


def resolve_client(client, n_workers=None, threads_per_worker=None, memory_limit=None):
    """Dask's conventions: a ``distributed.Client`` is used as is, a string is a scheduler
    address, ``'local'`` is this process's kept ``LocalCluster`` of that size (:mod:`.local`).
    Returns ``(client, owned_objects)``; the owned objects (a client we connected to an address)
    are closed by :func:`release_client`."""
    from distributed import Client

    if isinstance(client, Client):
        return client, []
    if isinstance(client, str) and client == "local":
        from .local import local_client

        return local_client(n_workers, threads_per_worker, memory_limit), []
    if isinstance(client, str):
        c = Client(client)
        return c, [c]
    raise ValueError(
        f"client must be None, 'local', a scheduler address or a distributed.Client, got {client!r}"
    )


def release_client(owned):
    """Close what :func:`resolve_client` started (best effort: shutting down must not fail)."""
    for obj in owned:
        try:
            obj.close()
        except Exception:  # noqa: BLE001 - closing is best effort at shutdown
            pass


def nanny_memory_limit(client, address) -> int:
    """The workers' memory limit from the cluster object behind ``client`` (a ``LocalCluster``'s
    worker spec; 0 when unknown): a worker restarted over and over may be missing from the
    scheduler's list."""
    try:
        from dask.utils import parse_bytes

        for spec in (getattr(getattr(client, "cluster", None), "worker_spec", None) or {}).values():
            limit = (spec.get("options") or {}).get("memory_limit")
            if isinstance(limit, str):
                limit = parse_bytes(limit)
            if limit:
                return int(limit)
    except Exception:  # noqa: BLE001 - only for the message
        pass
    return 0


def takes_n_workers(client) -> bool:
    """Whether ``client.scheduler_info`` takes ``n_workers`` (newer distributed: -1 lists all)."""
    import inspect

    try:
        return "n_workers" in inspect.signature(client.scheduler_info).parameters
    except (TypeError, ValueError):
        return False
