"""A ``dask scheduler`` started from the command line for the tests that need real processes.

The scheduler picks its own port (``--port 0``) and writes its address to a scheduler file:
choosing a free port in the test and passing it on raced with every other process of a parallel
run (a fresh-clone run lost a scheduler to ``[Errno 98] Address already in use`` and the fixture
then waited 90 s for it)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest


def dask_cli() -> str:
    """The ``dask`` command line beside this interpreter (or on PATH); fails the test without it."""
    cli = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
    if cli is None:
        pytest.fail("the `dask` command line (distributed) is not installed")
    return cli


def scheduler_args(scheduler_file) -> list[str]:
    """``dask scheduler`` arguments: 127.0.0.1, a port of its choosing, no dashboard, its address
    written to ``scheduler_file``."""
    return [
        "scheduler",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--no-dashboard",
        "--scheduler-file",
        str(scheduler_file),
    ]


def scheduler_address(scheduler_file, proc, timeout: float = 90.0) -> str:
    """The address the scheduler ``proc`` wrote to ``scheduler_file``, once it is there; raises
    if the process exits first or ``timeout`` seconds pass."""
    path = Path(scheduler_file)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists():
            try:
                return json.loads(path.read_text())["address"]
            except (ValueError, KeyError):
                pass  # being written
        if proc.poll() is not None:
            raise RuntimeError(
                f"dask scheduler exited with code {proc.returncode} before writing {path}"
            )
        time.sleep(0.1)
    raise TimeoutError(f"dask scheduler wrote no {path} within {timeout:.0f} s")


@contextlib.contextmanager
def notes_on_failure(procs_and_logs):
    """On an exception inside, add to it (``add_note``: pytest prints notes) every process's exit
    code (None: still running) and the last lines of the log its stderr went to: a worker lost
    on a loaded CI machine then says why it went."""
    try:
        yield
    except BaseException as e:
        for proc, log in procs_and_logs:
            log = Path(log)
            tail = log.read_text(errors="replace").splitlines()[-25:] if log.exists() else []
            e.add_note(f"--- {' '.join(map(str, proc.args[1:3]))}: exit code {proc.poll()}, {log}:")
            e.add_note("\n".join(tail))
        raise
