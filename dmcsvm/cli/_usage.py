"""What every command shares: the usage error (one line, exit status 2) and progress on
stderr."""

from __future__ import annotations

import sys


class UsageError(Exception):
    """Bad usage or input: reported as one line, exit status 2."""


def plural(n, word) -> str:
    """``word`` for one, ``word + 's'`` otherwise ("1 chunk", "2 chunks")."""
    return word if n == 1 else word + "s"


def stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress_bar(enabled, **kw):
    """A tqdm bar on stderr, or None when progress is off."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(file=sys.stderr, leave=False, **kw)
