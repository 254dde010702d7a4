"""A command's output files: checked before any work, written atomically, replaced only with
``--overwrite``."""

from __future__ import annotations

import contextlib
import os

from ..file_modes import atomic_file as write_atomically
from ._usage import UsageError


def check_output(path, what="output", overwrite=None):
    """Fail early (before any work) when an output cannot be written: its directory is missing,
    or (``overwrite=False``) it exists.  Every command has one rule for its outputs: an existing
    file is replaced only with ``--overwrite``."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"cannot write {what} {path}: directory {parent} does not exist")
    if overwrite is False and os.path.lexists(path):
        raise UsageError(f"{path} already exists; pass --overwrite to replace it")


def add_overwrite_option(p, what="the output"):
    """``--overwrite``: the one switch that lets a command replace an existing output."""
    p.add_argument(
        "--overwrite", action="store_true", help=f"replace {what} if it exists (default: refuse)"
    )


@contextlib.contextmanager
def atomic_file(path, mode="w"):
    """Write to a temporary file beside ``path`` and rename it into place on success; on any
    error the temporary file is removed and ``path`` is left as it was.  The file gets the
    mode of a newly created file (0666 less the umask), not ``mkstemp``'s 0600."""
    check_output(path)
    with write_atomically(path, mode) as fh:
        yield fh
