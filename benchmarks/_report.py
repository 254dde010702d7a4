"""What every benchmark script's results share: one envelope, atomic files, markdown pieces.

A script starts a :class:`Run` before it measures (time, load, machine, dmcsvm's commit), builds
its JSON with :meth:`Run.envelope` (the same keys in every script: ``benchmark``, ``script``,
``commit``, ``library``, ``machine``, ``load_at_start``, ``load_at_end``, ``script_runtime_s``,
``settings``, ``results``, then the script's own extras) and writes it with :func:`write` (JSON
and its markdown side by side, each replaced atomically, so a run cut short never leaves half a
file).  :func:`machine_line`, :func:`load_line` and :func:`md_table` render what the reports
repeat; they also read the keys of result files written before the envelope existed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dmcsvm.file_modes import give_default_mode

RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: a 1-minute load average above this at the start marks a report as measured on a busy box
BUSY_LOAD = 0.7


# ------------------------------------------------------------------------------ what ran where


def machine_info() -> dict:
    """Platform, CPU model, core count, library versions and the BLAS seen by threadpoolctl."""
    import numpy
    import scipy
    import sklearn

    import dmcsvm

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        from threadpoolctl import threadpool_info

        blas = [
            {
                k: d.get(k)
                for k in (
                    "user_api",
                    "internal_api",
                    "version",
                    "num_threads",
                    "threading_layer",
                    "architecture",
                    "prefix",
                )
            }
            for d in threadpool_info()
        ]
    except Exception as exc:  # pragma: no cover - threadpoolctl is a dmcsvm dependency
        blas = [{"error": repr(exc)}]
    try:
        import numba

        numba_v = numba.__version__
    except ImportError:  # pragma: no cover
        numba_v = None
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        affinity = None
    mem = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal"):
                    mem = round(int(line.split()[1]) / 2**20, 1)
                    break
    except OSError:
        pass
    return {
        "dmcsvm_git": _git_state(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "mem_gib": mem,
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "sklearn": sklearn.__version__,
        "numba": numba_v,
        "dmcsvm": getattr(dmcsvm, "__version__", None),
        "blas": blas,
    }


def _git_state() -> dict | None:
    """Commit of the repository holding dmcsvm and whether its library code differs from it."""
    import subprocess

    import dmcsvm

    root = Path(dmcsvm.__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = (
            subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--", "dmcsvm"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            != ""
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"commit": head, "library_modified": dirty}


def library_source() -> dict:
    """Where ``dmcsvm`` was imported from and its commit (git, or a ``COMMIT`` file next to the
    package when the benchmark runs against an exported tree via ``PYTHONPATH``)."""
    import dmcsvm

    root = Path(dmcsvm.__file__).resolve().parent.parent
    commit_file = root / "COMMIT"
    git = _git_state()
    if commit_file.exists():
        git = {
            "commit": commit_file.read_text().strip(),
            "library_modified": False,
            "exported_tree": str(root),
        }
    return {"path": str(root), "git": git}


def other_load() -> dict:
    """Load averages (1/5/15 min) and whether a pytest process runs (timings share the cores)."""
    import subprocess

    try:
        busy = subprocess.run(["pgrep", "-f", "pytest"], capture_output=True).returncode == 0
    except OSError:
        busy = None
    avg = [round(x, 2) for x in os.getloadavg()]
    return {"loadavg_1m": avg[0], "loadavg": avg, "pytest_running": busy}


def commit_label(out) -> str:
    """The short commit of the dmcsvm a result was measured with, flagged when the library had
    uncommitted changes or came from an exported tree."""
    g = (out.get("library") or {}).get("git") or (out.get("machine") or {}).get("dmcsvm_git") or {}
    c = (g.get("commit") or "?")[:7]
    if g.get("library_modified"):
        c += " + uncommitted library changes"
    if g.get("exported_tree"):
        c += " (exported tree)"
    return c


# ------------------------------------------------------------------------------ the envelope


class Run:
    """One run of a benchmark script: made before measuring (start time, load, machine), turned
    into the result envelope by :meth:`envelope` (as often as the script writes partial results)."""

    def __init__(self, script, benchmark, settings=None):
        self.script = Path(script).name
        self.benchmark = benchmark
        self.settings = dict(settings or {})
        self.t0 = time.perf_counter()
        self.load_at_start = other_load()
        self.machine = machine_info()
        self.library = library_source()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def envelope(self, results, **extra) -> dict:
        """The JSON every script writes: the shared keys, then ``extra`` (the script's own)."""
        out = {
            "benchmark": self.benchmark,
            "script": self.script,
            "commit": commit_label({"library": self.library}),
            "library": self.library,
            "machine": self.machine,
            "load_at_start": self.load_at_start,
            "load_at_end": other_load(),
            "script_runtime_s": self.elapsed(),
            "settings": self.settings,
            "results": results,
        }
        out.update(extra)
        return out


def settings_of(args, leave_out=("data_dir", "out")) -> dict:
    """The settings of a run: its command-line arguments but where data and results live."""
    return {k: v for k, v in vars(args).items() if k not in leave_out}


def parser(doc, out_name=None, data_dir=False) -> argparse.ArgumentParser:
    """The argument parser every script starts from: its description (the docstring's first
    paragraph), ``--out`` (default ``results/<out_name>``) and, with ``data_dir``,
    ``--data-dir``."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if data_dir:
        from _data import DEFAULT_DATA_DIR

        p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    if out_name is not None:
        p.add_argument(
            "--out",
            default=str(RESULTS_DIR / out_name),
            help=f"result JSON; its markdown (and figures) beside it (default results/{out_name})",
        )
    return p


# ------------------------------------------------------------------------------ files


def _jsonable(v):
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def write_text(path, text) -> Path:
    """Replace ``path`` with ``text`` atomically (a temporary sibling renamed over it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        give_default_mode(tmp)  # mkstemp's 0600 -> what the umask gives a new file
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def write(out, path, markdown=None, compact=False) -> Path:
    """Write the envelope ``out`` as JSON to ``path`` (keys starting with ``_`` left out) and,
    given, ``markdown`` beside it (``.md``); both atomically.  ``compact``: no indentation."""
    path = Path(path)
    data = {k: v for k, v in out.items() if not str(k).startswith("_")}
    text = (
        json.dumps(data, separators=(",", ":"), default=_jsonable)
        if compact
        else json.dumps(data, indent=1, default=_jsonable)
    )
    write_text(path, text + "\n")
    if markdown is not None:
        write_text(
            path.with_suffix(".md"), markdown if markdown.endswith("\n") else markdown + "\n"
        )
    return path


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, dpi=100) -> Path:
    """Save ``fig`` to ``path`` atomically and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=dpi)
        give_default_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        pyplot().close(fig)
    return path


# ------------------------------------------------------------------------------ markdown


def md_table(header, rows, align=None) -> list[str]:
    """A markdown table as lines: ``header`` (cells), ``rows`` (lists of cells, formatted by the
    caller), ``align`` one of ``l``/``r`` a column (default: the first left, the others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    return ["| " + " | ".join(map(str, header)) + " |", rule] + [
        "| " + " | ".join(map(str, r)) + " |" for r in rows
    ]


def blas_kernels(machine) -> str:
    """The BLAS kernels of a :func:`machine_info` (``'Haswell'``, ``'SkylakeX'``...; '' if
    unknown).  They name the instruction set (OpenBLAS's Haswell: AVX2; SkylakeX: AVX-512): the
    same "AMD EPYC" VM has come with either, and GEMM speed differs."""
    arch = {b.get("architecture") for b in machine.get("blas") or [] if b.get("architecture")}
    return "/".join(sorted(arch))


def machine_line(out, versions=("numpy", "numba")) -> str:
    """``Machine: CPU, cores, platform; numpy ..., numba ...; dmcsvm commit `abc1234`.``"""
    m = out.get("machine") or {}
    vs = ", ".join(f"{v} {m.get(v)}" for v in versions if m.get(v))
    arch = blas_kernels(m)
    return (
        f"Machine: {m.get('cpu_model', '?')}, {m.get('cpu_count', '?')} cores, "
        f"{m.get('platform', '?')}"
        + (f", BLAS kernels {arch}" if arch else "")
        + (f"; {vs}" if vs else "")
        + f"; dmcsvm commit `{commit_label(out)}`."
    )


def _load_1m(out, when):
    """The 1-minute load average at ``when`` (``start``/``end``) of an envelope, or of the keys
    results used before it (``load_start``, ``load_before``, ``loadavg_at_start``...)."""
    old = {
        "start": ("load_at_start", "load_start", "load_before", "loadavg_at_start", "load"),
        "end": ("load_at_end", "load_end", "load_after", "loadavg_at_end"),
    }[when]
    for k in old:
        v = out.get(k)
        if isinstance(v, dict) and "loadavg_1m" in v:
            return v["loadavg_1m"]
        if isinstance(v, (list, tuple)) and v:
            return v[0]
        if isinstance(v, (int, float)):
            return v
    return None


def load_line(out) -> str:
    """``Load average (1 min) at start X, at end Y.``, flagged when the box was busy."""
    a, b = _load_1m(out, "start"), _load_1m(out, "end")
    shown = ["?" if v is None else f"{v:.2f}" for v in (a, b)]
    busy = a is not None and a > BUSY_LOAD
    return f"Load average (1 min) at start {shown[0]}, at end {shown[1]}." + (
        "  **Measured while other work shared the cores: re-run in a quiet window.**"
        if busy
        else ""
    )
