"""Every dmcsvm name the README, CONTRIBUTING.md and the user guide (docs/*.md) use exists:
dotted names (``dmcsvm.model_io.save_model``), ``from dmcsvm... import ...`` lines, estimator
class names, ``dmcsvm COMMAND --option`` command lines (checked against ``COMMAND --help``) and
the extras of ``pip install ".[extra]"``.  A renamed function or option fails here, not in a
reader's terminal."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import tomllib
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
#: names ending in SVC that are scikit-learn's, not dmcsvm's
SKLEARN_SVC = {"SVC", "LinearSVC", "NuSVC"}


def resolve(dotted: str) -> bool:
    """Whether ``dmcsvm.a.b.c`` names something: the longest importable module prefix, then
    attributes of it."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        try:
            for name in parts[k:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def dotted_names(text: str) -> set[str]:
    names = set(re.findall(r"(?<![\w/.\[-])dmcsvm(?:\.[A-Za-z_]\w*)+", text))
    for mod, what in re.findall(r"from (dmcsvm(?:\.\w+)*) import ([\w, ]+)", text):
        names |= {f"{mod}.{n.strip()}" for n in what.split(",") if n.strip()}
    names |= {f"dmcsvm.{n}" for n in re.findall(r"\b(\w+SVC)\b", text) if n not in SKLEARN_SVC}
    return {n for n in names if not n.endswith((".py", ".md", ".zarr", ".npz"))}


def command_lines(text: str) -> list[str]:
    """``dmcsvm COMMAND ...`` invocations: lines of code blocks and inline code spans."""
    spans = re.findall(r"`([^`\n]+)`", text)
    blocks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, flags=re.S)
    lines = [ln for b in blocks for ln in b.replace("\\\n", " ").splitlines()] + spans
    out = []
    for ln in lines:
        m = re.match(r"\s*(?:\S*/)?dmcsvm\s+([a-z][\w-]*)(.*)", ln.split("#")[0])
        if m:
            out.append(f"{m.group(1)}{m.group(2)}")
    return out


@cache
def help_text(*argv: str) -> str:
    """``dmcsvm ARGV --help`` run in this process, unwrapped."""
    from dmcsvm.cli import main

    buf = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(buf):
        mp.setenv("COLUMNS", "1000")
        try:
            main([*argv, "--help"])
        except SystemExit:
            pass
    return buf.getvalue()


def commands() -> set[str]:
    m = re.search(r"\{([\w,-]+)\}", help_text())
    listed = set(m.group(1).split(",")) if m else set()
    return listed | set(re.findall(r"^    (\w+)\s{2,}", help_text(), flags=re.M))


def options(cmd: str) -> set[str]:
    texts = [help_text(cmd)]
    if cmd in ("train", "demo"):  # options made from each estimator's parameters
        from dmcsvm.model_io import estimator_registry

        texts += [help_text(cmd, "--estimator", e) for e in estimator_registry() if cmd == "train"]
    return {o for t in texts for o in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", t)}


def missing_in(text: str) -> list[str]:
    bad = [n for n in sorted(dotted_names(text)) if not resolve(n)]
    known = commands()
    for line in command_lines(text):
        cmd, *rest = line.split()
        if cmd not in known:
            bad.append(f"dmcsvm {cmd} (no such command)")
            continue
        opts = options(cmd)
        bad += [
            f"dmcsvm {cmd} {tok}"
            for tok in (t.split("=")[0] for t in rest)
            if re.fullmatch(r"--?[A-Za-z][\w-]*", tok) and tok not in opts
        ]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for group in re.findall(r"(?:dmcsvm|\.)\[([\w,]+)\]", text):
        bad += [f"extra [{e}]" for e in group.split(",") if e not in extras]
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_dmcsvm_name_on_the_page_exists(page):
    assert missing_in(page.read_text()) == []


def test_the_check_catches_wrong_names():
    text = """
    `dmcsvm.model_io.save` and `dmcsvm.model_io.save_model`
    from dmcsvm.store import from_svmlight, from_libsvm
    `MulticlassSVC`, `MultiClassSVC`, scikit-learn's `SVC`
    ```bash
    dmcsvm train data.zarr -o m.npz --gamma 1 --no-such-flag
    dmcsvm fit data.zarr
    ```
    `dmcsvm predict model.npz test.zarr --decision-values`; pip install ".[plot,plots]"
    """
    assert missing_in(text) == [
        "dmcsvm.MultiClassSVC",
        "dmcsvm.model_io.save",
        "dmcsvm.store.from_libsvm",
        "dmcsvm train --no-such-flag",
        "dmcsvm fit (no such command)",
        "extra [plots]",
    ]


def test_readme_keeps_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)[:2]
    assert blocks == [
        "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/dmcsvm demo",
        'python3 -m venv .venv && .venv/bin/pip install -q ".[test]" && '
        ".venv/bin/python -m pytest -q -n 3",
    ]
    assert blocks[1] in (ROOT / ".ci" / "run").read_text().splitlines()
