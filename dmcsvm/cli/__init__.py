"""The ``dmcsvm`` command line (its text below is the help that ``dmcsvm`` prints)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings

from ._usage import UsageError

__all__ = ["main", "UsageError"]


#: what ``dmcsvm`` and ``dmcsvm --help`` print above the commands (plain text)
DESCRIPTION = """\
Multiclass kernel SVMs (Crammer-Singer and relatives), in this process or on a Dask cluster.

  dmcsvm demo                                   train and evaluate on bundled digits
  dmcsvm scale train.svm -o train.scaled.svm -s range.txt
  dmcsvm train train.svm -o model.npz -c 10 -g 0.5 -t rbf [--scale]
  dmcsvm predict model.npz test.svm -o predictions.txt
  dmcsvm evaluate model.npz test.svm

Run dmcsvm COMMAND --help for the options of a command."""

EPILOG = """\
exit status: 0 on success, 2 for a usage or input error (one line on stderr), 1 for anything
else (DMCSVM_DEBUG=1 shows the traceback)."""


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error message (and exit status 2) instead of the usage text,
    and no abbreviated long options (``--c`` is not a prefix of ``--cache-size``)."""

    def __init__(self, *args, **kw):
        kw["allow_abbrev"] = False
        super().__init__(*args, **kw)

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
    from . import data, demo, plot, predict, scale, train

    p = _Parser(
        prog="dmcsvm",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"dmcsvm {__version__}",
        help="print the version of dmcsvm and exit",
    )
    sub = p.add_subparsers(dest="cmd", parser_class=_Parser, title="commands", metavar="COMMAND")
    full = _needs_estimators(argv)
    demo.add_parser(sub, full)
    data.add_parsers(sub)
    scale.add_parser(sub)
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
    log = logging.getLogger("dmcsvm")
    handler = _status_handler()
    saved_level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        code = _run(argv)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        return _pipe_closed()
    finally:
        warnings.formatwarning = saved
        log.removeHandler(handler)
        log.setLevel(saved_level)


def _status_handler() -> logging.Handler:
    """Where the commands' status messages go (logger ``dmcsvm``, level INFO and up): one
    ``dmcsvm: ...`` line each on stderr, apart from the results on stdout, so that a pipe of
    the results carries only them."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("dmcsvm: %(message)s"))
    return handler


def _pipe_closed() -> int:
    """The reader of stdout went away (``dmcsvm evaluate ... | head -1``): stop quietly with
    status 0, as Unix tools do.  stdout is pointed at /dev/null so that the interpreter's final
    flush of what is still buffered raises nothing either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # stdout is no real file (a test's StringIO): nothing to flush
    return 0


def _run(argv) -> int:
    try:
        p = build_parser(argv)
        if not argv:  # `dmcsvm` alone: what it does and its commands
            p.print_help()
            return 0
        a = p.parse_args(argv)
        if getattr(a, "func", None) is None:
            p.print_help()
            return 0
        return int(a.func(a) or 0)
    except BrokenPipeError:
        raise
    except (
        UsageError,
        ValueError,
        FileNotFoundError,
        IsADirectoryError,
        NotADirectoryError,
        PermissionError,
    ) as e:
        print(f"dmcsvm: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dmcsvm: interrupted", file=sys.stderr)
        return 1
    except SystemExit as e:  # --help / --version from argparse
        return int(e.code or 0) if isinstance(e.code, int) else 0
    except Exception as e:  # noqa: BLE001 - the command line reports every failure in one line
        if os.environ.get("DMCSVM_DEBUG"):
            raise
        print(f"dmcsvm: error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
