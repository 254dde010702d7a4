"""The mode a new output file gets: what ``open()`` / ``mkdir()`` would give (0666 / 0777 less the
umask), applied to files written through a private temporary (``mkstemp``: 0600, ``mkdtemp``:
0700) and renamed into place, so that others may read a model or checkpoint on a shared cluster
whenever the umask allows it; and :func:`atomic_file`, the one way a file is written whole or not
at all."""

from __future__ import annotations

import contextlib
import os
import tempfile

__all__ = ["atomic_file", "current_umask", "default_mode", "give_default_mode"]


def current_umask() -> int:
    """The process umask, read without changing it where the system allows (Linux
    ``/proc/self/status``); else set and restored at once."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_mode(directory=False) -> int:
    """The mode ``open()`` / ``mkdir()`` would give a new file / directory: 0666 (0777) less
    the umask."""
    return (0o777 if directory else 0o666) & ~current_umask()


def give_default_mode(path) -> None:
    """Give an output written through a private temporary (``mkstemp``: mode 0600,
    ``mkdtemp``: 0700) the mode a plainly created file or directory would have, so others may
    read a model on a shared cluster whenever the umask allows it."""
    os.chmod(path, default_mode(directory=os.path.isdir(path)))


@contextlib.contextmanager
def atomic_file(path, mode="w"):
    """Write to a temporary file beside ``path`` and rename it into place on success (after an
    ``fsync``); on any error the temporary file is removed and ``path`` is left as it was.  The
    file gets the mode of a newly created file (0666 less the umask), not ``mkstemp``'s 0600."""
    path = os.path.abspath(os.fspath(path))
    fd, tmp = tempfile.mkstemp(
        dir=os.path.dirname(path), prefix=f".{os.path.basename(path)}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, mode) as fh:
            os.fchmod(fh.fileno(), default_mode())
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
