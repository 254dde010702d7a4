"""Running the ``dmcsvm`` command in tests: in-process through the console script's entry point
(``main`` returns the status the script exits with; a subprocess costs 2-3 s of imports), or as
a real process where the test is about the process."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import warnings


def run_cli(*args, process=False, timeout=600) -> subprocess.CompletedProcess:
    """``dmcsvm ARGS``: its exit status, stdout and stderr.  In-process through ``main`` with
    warnings ignored, or with ``process=True`` as ``python -m dmcsvm.cli`` with
    ``PYTHONWARNINGS=ignore`` (``timeout`` applies to the process only)."""
    args = [str(a) for a in args]
    if process:
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        return subprocess.run(
            [sys.executable, "-m", "dmcsvm.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    from dmcsvm.cli import main

    out, err = io.StringIO(), io.StringIO()
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        warnings.simplefilter("ignore")
        code = main(args)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())
