"""The ``dmcsvm`` command: ``convert``, ``info``, ``train``, ``predict``, ``evaluate``, ``plot``
and ``demo`` (train and evaluate on a bundled dataset; the default).

Exit status: 0 on success, 2 for a usage or input error (one line on stderr), 1 for anything
else.  Set ``DMCSVM_DEBUG=1`` to see the traceback of an unexpected error.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from ._common import UsageError

__all__ = ["main", "UsageError"]


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error message (and exit status 2) instead of the usage text."""

    def error(self, message):
        raise UsageError(message)


#: the sub-commands whose options are made from an estimator's signature
_ESTIMATOR_COMMANDS = ("demo", "train")


def _needs_estimators(argv) -> bool:
    """Whether parsing ``argv`` needs the options made from the estimators' signatures: not for
    another sub-command, nor for a bare ``--help`` / ``--version``.  Their parsers are then built
    without those options, so such a command does not import scikit-learn and the estimators
    (seconds per process)."""
    argv = list(argv or [])
    cmd = next((a for a in argv if not a.startswith("-")), None)
    if cmd is not None:
        return cmd in _ESTIMATOR_COMMANDS or argv.index(cmd) > 0
    return not set(argv) <= {"-h", "--help", "--version"}


def build_parser(argv=None) -> argparse.ArgumentParser:
    from .. import __version__
    from . import data, demo, plot, predict, train
    p = _Parser(prog="dmcsvm", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"dmcsvm {__version__}",
                   help="print the version of dmcsvm and exit")
    sub = p.add_subparsers(dest="cmd", parser_class=_Parser)
    full = _needs_estimators(argv)
    demo.add_parser(sub, full)
    data.add_parsers(sub)
    train.add_parser(sub, argv, full)
    predict.add_parsers(sub)
    plot.add_parser(sub)
    return p


def _one_line(text) -> str:
    return " ".join(str(text).split())


def _warning_line(message, category, filename, lineno, file=None, line=None):
    return f"dmcsvm: warning: {_one_line(message)}\n"


def main(argv=None) -> int:
    """Run the command line; returns the exit status (the console script exits with it).

    Warnings raised while it runs are printed as one ``dmcsvm: warning: ...`` line; Python's
    warning formatter is restored on return, so a program (or test) calling ``main`` keeps its
    own."""
    argv = list(sys.argv[1:] if argv is None else argv)
    saved = warnings.formatwarning
    warnings.formatwarning = _warning_line
    try:
        return _run(argv)
    finally:
        warnings.formatwarning = saved


def _run(argv) -> int:
    try:
        p = build_parser(argv)
        a = p.parse_args(argv)
        if a.cmd is None:
            a = p.parse_args(["demo"] + argv)
        return int(a.func(a) or 0)
    except (UsageError, ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError,
            PermissionError) as e:
        print(f"dmcsvm: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dmcsvm: interrupted", file=sys.stderr)
        return 1
    except SystemExit as e:          # --help / --version from argparse
        return int(e.code or 0) if isinstance(e.code, int) else 0
    except Exception as e:  # noqa: BLE001 - the command line reports every failure in one line
        if os.environ.get("DMCSVM_DEBUG"):
            raise
        print(f"dmcsvm: error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
