"""The package's layers: every module of ``dmcsvm`` imports only the layers below its own.

``LAYERS`` is the one table of what each package (or top-level module) holds and what it may
import; CONTRIBUTING.md's "Layers" section shows the same table and
:func:`test_readme_shows_the_table` keeps the two equal.  The walk reads every module's source
with :mod:`ast` (nothing is imported), so it sees ``import a.b`` and ``from a import b``, absolute
and relative, at module level and inside functions alike.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dmcsvm"

#: modules every layer may import: no imports of their own from dmcsvm
FOUNDATION = (
    "errors",
    "file_modes",
    "runtime_params",
    "param_history",
    "solver_options",
    "kernels",
)

#: top-down: package or top-level module -> (what it holds, the layers it may import besides
#: itself and FOUNDATION)
LAYERS = {
    "cli": (
        "the `dmcsvm` command (train, predict, data, demo, plot)",
        ("model_io", "estimators", "store"),
    ),
    "model_io": (
        "save_model / load_model: npz or zarr plus JSON, an estimator registry",
        ("estimators",),
    ),
    "estimators": (
        "scikit-learn estimators, their inputs, weights, calibration, checkpoint parameters",
        ("coordinators", "engine", "numerics", "checkpoint", "store"),
    ),
    "coordinators": (
        "the loops above the engine: Crammer-Singer rounds, SMO decomposition, "
        "MProtSVM annealing, the sequential dual method, resuming a solve",
        ("engine", "numerics", "checkpoint", "store"),
    ),
    "engine": (
        "partitions and executors (in-process, Dask), row sources, column caches, BLAS threads",
        ("numerics", "store"),
    ),
    "numerics": (
        "numba functions on arrays: per-pattern optimizers, selection, the "
        "coordinator's working-set solve, binary and grouped SMO, linear prototypes, "
        "sequential dual passes",
        (),
    ),
    "checkpoint": (
        "the checkpoint file format: arrays, checksums, data fingerprint, metadata",
        ("store",),
    ),
    "store": ("the zarr row store: layout, readers, converters (CSV, svmlight, arrays)", ()),
    "errors": ("foundation: error types and finiteness checks", ()),
    "file_modes": ("foundation: permissions of the files written", ()),
    "runtime_params": ("foundation: parameters that do not change a fit", ()),
    "param_history": ("foundation: parameters renamed between versions", ()),
    "solver_options": ("foundation: the estimators' solver options and their defaults", ()),
    "kernels": ("foundation: kernel functions and blocks", ()),
}

#: names the package root (``dmcsvm/__init__.py``, the public API above every layer) defines and
#: any layer may import from it
ROOT_NAMES = {"__version__"}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    rel = pathlib.Path(*name.split("."))
    return (ROOT / rel).with_suffix(".py").is_file() or (ROOT / rel / "__init__.py").is_file()


def _layer(name: str) -> str | None:
    """``dmcsvm.engine.rows`` -> ``engine``; None for the package root and its
    ``__main__`` (``python -m dmcsvm``, the command line's entry point above every layer)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] != "__main__" else None


def imports_of(path: pathlib.Path):
    """``(lineno, target module, names)`` of every import of a dmcsvm module in ``path``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "dmcsvm" or a.name.startswith("dmcsvm."):
                    yield node.lineno, a.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not (mod == "dmcsvm" or mod.startswith("dmcsvm.")):
                continue
            for a in node.names:  # ``from pkg import module`` imports that module
                sub = f"{mod}.{a.name}"
                if _is_module(sub):
                    yield node.lineno, sub, ()
                else:
                    yield node.lineno, mod, (a.name,)


def violations():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        own = _layer(name)
        if own is None:
            continue  # the package root: the public API, above every layer
        allowed = {own, *FOUNDATION, *LAYERS[own][1]}
        for lineno, target, names in imports_of(path):
            layer = _layer(target)
            if layer is None:
                if not set(names) <= ROOT_NAMES:
                    bad.append(
                        f"{path.relative_to(ROOT)}:{lineno}: {own} imports "
                        f"{', '.join(names)} from the package root"
                    )
            elif layer not in allowed:
                bad.append(
                    f"{path.relative_to(ROOT)}:{lineno}: {own} imports {target} "
                    f"(layer {layer}; {own} may import "
                    f"{', '.join(sorted(allowed - {own})) or 'only itself'})"
                )
    return bad


def test_every_module_is_in_a_layer():
    layers = {_layer(_module_name(p)) for p in PACKAGE.rglob("*.py")} - {None}
    assert layers <= set(LAYERS), (
        f"add to LAYERS (and CONTRIBUTING.md): {sorted(layers - set(LAYERS))}"
    )
    assert set(FOUNDATION) <= set(LAYERS)
    for layer, (_, below) in LAYERS.items():
        assert set(below) <= set(LAYERS), layer


def test_layers_are_acyclic():
    """The table itself is a top-down order: no layer may import one that may import it."""
    order, seen = [], set()

    def visit(layer, stack):
        assert layer not in stack, f"cycle: {' -> '.join((*stack, layer))}"
        if layer in seen:
            return
        for below in LAYERS[layer][1]:
            visit(below, (*stack, layer))
        seen.add(layer)
        order.append(layer)

    for layer in LAYERS:
        visit(layer, ())
    for layer in FOUNDATION:
        assert LAYERS[layer][1] == (), f"foundation module {layer} imports a layer"


def test_no_module_imports_a_layer_above_its_own():
    bad = violations()
    assert not bad, "imports against the layering (tests/test_layers.py LAYERS):\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "src, expect",
    [
        ("from ..engine import threads\n", "numerics imports dmcsvm.engine.threads"),
        (
            "def f():\n    import dmcsvm.coordinators.crammer_singer\n",
            "numerics imports dmcsvm.coordinators.crammer_singer",
        ),
        ("from dmcsvm.estimators import MulticlassSVC\n", "numerics imports dmcsvm.estimators"),
        ("from .. import save\n", "numerics imports save from the package root"),
    ],
)
def test_the_walk_sees_every_form(tmp_path, monkeypatch, src, expect):
    """A module of numerics importing upward, in each form, is reported."""
    pkg = tmp_path / "dmcsvm"
    for sub in ("numerics", "engine", "coordinators", "estimators"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "engine" / "threads.py").write_text("")
    (pkg / "coordinators" / "crammer_singer.py").write_text("")
    (pkg / "numerics" / "bad.py").write_text(src)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "PACKAGE", pkg)
    bad = violations()
    assert len(bad) == 1 and expect in bad[0], bad


def test_readme_shows_the_table():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = re.search(r"^## Layers\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "CONTRIBUTING.md has no '## Layers' section"
    shown = {}
    for line in section.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        may = tuple(re.findall(r"`([a-z_]+)`", cells[2]))
        for layer in re.findall(r"`([a-z_]+)`", cells[0]):
            shown[layer] = may
    assert shown == {layer: below for layer, (_, below) in LAYERS.items()}


#: inside a package split by job: module -> the sibling modules it may import.  The Dask
#: executor's mixins (placement, routing, recovery, bank) each stand on the shared services
#: (limits, client, liveness) and never on one another; only the thin executor in front combines
#: them.  The command line's helpers stand on the usage error alone and never on a command.
SIBLINGS = {
    "dmcsvm.engine.dask": {
        "limits": (),
        "local": (),
        "client": ("local",),
        "liveness": ("limits", "client"),
        "placement": ("limits", "liveness"),
        "routing": ("limits",),
        "recovery": ("limits", "client", "liveness"),
        "bank": (),
        "executor": ("limits", "client", "liveness", "placement", "routing", "recovery", "bank"),
        "__init__": ("client", "executor", "local"),
    },
    "dmcsvm.cli": {
        "_usage": (),
        "_inputs": ("_usage",),
        "_outputs": ("_usage",),
        "_cluster": ("_usage",),
        "_params": (),
        "_warmup": (),
    },
}

#: the only modules outside the Dask package that import it (inside a function: the in-process
#: path never loads distributed)
DASK_IMPORTERS = {"dmcsvm.estimators._engine"}


def sibling_violations():
    bad = []
    for package, table in SIBLINGS.items():
        folder = ROOT / pathlib.Path(*package.split("."))
        modules = {p.stem for p in folder.glob("*.py")}
        for stem in sorted(modules & set(table) if package == "dmcsvm.cli" else modules):
            if stem not in table:
                bad.append(f"{package}.{stem}: not in SIBLINGS (tests/test_layers.py)")
                continue
            for lineno, target, _ in imports_of(folder / f"{stem}.py"):
                if target.rpartition(".")[0] == package and target != package:
                    sib = target.rpartition(".")[2]
                    if sib not in table[stem] and sib in table:
                        bad.append(
                            f"{package}.{stem}:{lineno} imports {sib}; it may import "
                            f"{', '.join(table[stem]) or 'no sibling'}"
                        )
                    elif sib not in table:
                        bad.append(f"{package}.{stem}:{lineno} imports {sib}, not a helper")
    return bad


def test_split_packages_keep_one_job_per_module():
    bad = sibling_violations()
    assert not bad, "\n".join(bad)


def test_only_the_estimators_executor_switch_imports_the_dask_engine():
    outside = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        if name.startswith("dmcsvm.engine.dask"):
            continue
        if any(t.startswith("dmcsvm.engine.dask") for _, t, _ in imports_of(path)):
            outside.add(name)
    assert outside == DASK_IMPORTERS


def _index_loops(fn: ast.FunctionDef) -> bool:
    """Whether ``fn`` has a ``for ... in range(...)`` loop nested in another: element by element
    work over arrays, which belongs in a numba function."""

    def ranges(node):
        return [
            f
            for f in ast.walk(node)
            if isinstance(f, ast.For)
            and isinstance(f.iter, ast.Call)
            and ast.unparse(f.iter.func) in ("range", "prange", "numba.prange")
        ]

    return any(len(ranges(f)) > 1 for f in ranges(fn))


#: functions with nested range loops that are not element loops: each step is a BLAS block
BLOCK_LOOPS = {("engine/partition.py", "_unshrink")}


def test_nested_index_loops_are_compiled():
    """Every function that loops element by element in nested ``range`` loops is a numba
    function (``@numba.njit``).  The Gram cache's in-place eviction (then compact_block) once lost
    its decorator to a helper added above it and ran in the interpreter: 5.3 of letter's 8.9 s."""
    plain = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef) or (rel, fn.name) in BLOCK_LOOPS:
                continue
            if any("njit" in ast.unparse(d) for d in fn.decorator_list):
                continue
            if _index_loops(fn):
                plain.append(f"{rel}:{fn.lineno} {fn.name}")
    assert plain == []


def test_the_gram_eviction_is_a_nogil_numba_function():
    """The eviction runs while the partitions' threads wait (nogil, compiled)."""
    from dmcsvm.engine.cache import compact_columns, compact_slots

    for f in (compact_columns, compact_slots):
        assert hasattr(f, "py_func") and f.targetoptions.get("nogil") is True, f
