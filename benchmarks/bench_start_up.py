"""First contact: how long `import dmcsvm`, `dmcsvm --help`, a command-line prediction of 2,000
rows and a process's first fit take, each in fresh subprocesses with a warm numba cache.

Measured, ``--repeat`` times each (min and median reported):

- ``import``: ``python -c "import dmcsvm"`` (and ``python -c pass`` beside it, the interpreter's
  own start);
- ``help``: ``dmcsvm --help``;
- ``predict``: ``dmcsvm predict MODEL satimage-test.zarr -o OUT`` (2,000 rows, a MulticlassSVC
  RBF model of satimage's 4,435 training rows, C = 10); the same rows as a LIBSVM text file;
  and the store with a ``train --scale`` model (a Pipeline of a MinMaxScaler to [-1, 1] and
  that MulticlassSVC);
- ``fits``: one subprocess fitting satimage three times in a row (``MulticlassSVC(C=10)``,
  float32), the first fit against the second; and one more subprocess profiling its first fit
  with cProfile, to say where the first fit's extra time goes (numba's cache loads and the
  one-time set-up of its typing and target registries, imports, the rest).  cProfile sees the
  calling thread only, and the partitions' threads make numba's first calls: every numba
  dispatcher's first call (``Dispatcher._compile_for_args``, in any thread) is timed as well,
  the longest of them being the wait the fit cannot avoid.

The numba cache is warmed first (a fit and a prediction in a subprocess), and one untimed
prediction writes the bytecode of the modules the fit did not import: the subprocesses run
without ``PYTHONDONTWRITEBYTECODE``, as an installed package has its bytecode.  JSON to
``benchmarks/results/start_up.json`` and a short ``start_up.md`` beside it, with the machine and
its load (the other work on the machine shows in the load line).

    python benchmarks/bench_start_up.py [--repeat 7] [--data-dir ../shared/data] [--code DIR]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _report

HERE = Path(__file__).resolve().parent
PY = sys.executable
BIN = Path(PY).parent


def _env(code=None, block=None):
    path = str(HERE) if code is None else f"{Path(code).resolve()}{os.pathsep}{HERE}"
    if block:
        path = f"{block}{os.pathsep}{path}"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": path}
    env.pop("DMCSVM_DEBUG", None)
    # an installed package has its bytecode (pip compiles it): a PYTHONDONTWRITEBYTECODE=1 in
    # the environment would compile dmcsvm's ~40 modules from source in every run (0.1 s)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _wall(cmd, env) -> float:
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({p.returncode}): {p.stderr[-2000:]}")
    return dt


def _stats(xs) -> dict:
    return {"min": min(xs), "median": statistics.median(xs), "runs": xs}


_FITS = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from _data import load_satimage
Xtr, ytr, _, _ = load_satimage(sys.argv[1])
Xtr = Xtr.astype(np.float32)
t1 = time.perf_counter()
from dmcsvm import MulticlassSVC
t2 = time.perf_counter()
fits = []
for _ in range(3):
    t = time.perf_counter()
    MulticlassSVC(C=10).fit(Xtr, ytr)
    fits.append(time.perf_counter() - t)
print(json.dumps({"data_s": t1 - t0, "import_estimators_s": t2 - t1, "fits_s": fits}))
"""

_PROFILE = r"""
import cProfile, json, pstats, sys, threading, time
import numpy as np
from _data import load_satimage
Xtr, ytr, _, _ = load_satimage(sys.argv[1])
Xtr = Xtr.astype(np.float32)
from numba.core import dispatcher
from dmcsvm import MulticlassSVC
loads = []
_first_call = dispatcher.Dispatcher._compile_for_args


def timed(self, *args, **kws):
    t = time.perf_counter()
    try:
        return _first_call(self, *args, **kws)
    finally:
        loads.append((threading.current_thread() is threading.main_thread(),
                      self.py_func.__qualname__, time.perf_counter() - t))


dispatcher.Dispatcher._compile_for_args = timed
out = {}
for which in ("first", "second"):
    del loads[:]
    pr = cProfile.Profile()
    pr.enable()
    MulticlassSVC(C=10).fit(Xtr, ytr)
    pr.disable()
    st = pstats.Stats(pr).stats
    def cum(pred):
        return sum(v[3] for k, v in st.items() if pred(k))
    total = max(v[3] for v in st.values())
    out[which] = {
        "total_s": total,
        # numba: loading cached machine code in the calling thread (its first use also sets up
        # numba's typing and target registries, once per process)
        "numba_cache_load_s": cum(lambda k: k[2] == "_compile_for_args"),
        "numba_registry_setup_s": cum(lambda k: k[0].endswith("numba/core/base.py")
                                      and k[2] == "refresh"),
        "imports_s": cum(lambda k: k[2] == "_find_and_load" and k[0].startswith("<frozen")),
        # every thread: each dispatcher's first call (a cache load, or a wait for another
        # thread's), the longest of them, and how many dispatchers were loaded
        "numba_first_calls": [[name, round(dt, 4), main] for main, name, dt in loads],
        "numba_longest_first_call_s": max((dt for _, _, dt in loads), default=0.0),
        "numba_dispatchers_loaded": len({name for _, name, _ in loads}),
    }
print(json.dumps(out))
"""


def _prepare(tmp, data_dir, env):
    """The satimage test rows as a store and as a LIBSVM file, a model of the training rows and
    a ``train --scale`` model (Pipeline of a MinMaxScaler and the same estimator)."""
    code = r"""
import sys
import numpy as np
from sklearn.datasets import dump_svmlight_file
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from _data import load_satimage
from dmcsvm import MulticlassSVC
from dmcsvm.model_io import save_model
from dmcsvm.store import write_arrays
Xtr, ytr, Xte, yte = load_satimage(sys.argv[1])
write_arrays(sys.argv[2], Xte.astype(np.float32), yte)
dump_svmlight_file(Xte.astype(np.float32), yte, sys.argv[5], zero_based=False)
m = MulticlassSVC(C=10).fit(Xtr.astype(np.float32), ytr)
save_model(m, sys.argv[3])
m.predict(Xte.astype(np.float32))
p = make_pipeline(MinMaxScaler(feature_range=(-1, 1)), MulticlassSVC(C=10))
save_model(p.fit(Xtr.astype(np.float32), ytr), sys.argv[4])
"""
    store, model, scaled, svm = (
        tmp / "test.zarr",
        tmp / "model.npz",
        tmp / "scaled.npz",
        tmp / "test.svm",
    )
    subprocess.run(
        [PY, "-c", code, data_dir, str(store), str(model), str(scaled), str(svm)],
        env=env,
        check=True,
        cwd=tmp,
    )
    return store, model, scaled, svm


#: a sitecustomize that makes the modules it names fail to import as if not installed (a finder
#: first on sys.meta_path; ``sys.modules[name] = None`` would also make scikit-learn's checks
#: for an imported pandas take None for the module and fail)
_BLOCK = """import sys


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {0!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""


def main():
    p = _report.parser(__doc__, "start_up.json", data_dir=True)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument(
        "--code",
        help="measure the dmcsvm package of this checkout instead "
        "(put first on PYTHONPATH; e.g. an older commit exported with "
        "git archive)",
    )
    p.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="MODULE",
        help="run as if MODULE were not installed (a sitecustomize on PYTHONPATH "
        "makes importing it fail), e.g. --without pandas: a base "
        "install has no pandas, and scikit-learn imports it when it is there",
    )
    args = p.parse_args()
    run = _report.Run(__file__, "start_up", _report.settings_of(args))
    block = None
    if args.without:
        block = tempfile.mkdtemp(prefix="dmcsvm-without-")
        with open(os.path.join(block, "sitecustomize.py"), "w") as fh:
            fh.write(_BLOCK.format(sorted(set(args.without))))
    env = _env(args.code, block)
    res = {}
    with tempfile.TemporaryDirectory(prefix="dmcsvm-start-up-") as tmp:
        tmp = Path(tmp)
        store, model, scaled, svm = _prepare(tmp, args.data_dir, env)  # warms numba's cache
        # `python -m dmcsvm.cli`: what the console script runs, for any checkout on PYTHONPATH
        dmcsvm = [PY, "-m", "dmcsvm.cli"]
        _wall(
            dmcsvm
            + ["predict", str(scaled), str(svm), "-o", str(tmp / "warm.txt"), "--no-progress"],
            env,
        )  # untimed: writes the cli's bytecode
        res["python_pass"] = _stats([_wall([PY, "-c", "pass"], env) for _ in range(args.repeat)])
        res["import"] = _stats(
            [_wall([PY, "-c", "import dmcsvm"], env) for _ in range(args.repeat)]
        )
        res["help"] = _stats([_wall(dmcsvm + ["--help"], env) for _ in range(args.repeat)])
        for key, m, data in (
            ("predict_2000", model, store),
            ("predict_2000_svm", model, svm),
            ("predict_2000_scaled", scaled, store),
        ):
            res[key] = _stats(
                [
                    _wall(
                        dmcsvm
                        + [
                            "predict",
                            str(m),
                            str(data),
                            "-o",
                            str(tmp / f"{key}-{k}.txt"),
                            "--no-progress",
                        ],
                        env,
                    )
                    for k in range(args.repeat)
                ]
            )
        fits = []
        for _ in range(args.repeat):
            r = subprocess.run(
                [PY, "-c", _FITS, args.data_dir],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                cwd=tmp,
            )
            fits.append(json.loads(r.stdout.strip().splitlines()[-1]))
        res["fits"] = fits
        first = [f["fits_s"][0] for f in fits]
        second = [f["fits_s"][1] for f in fits]
        res["first_fit"] = _stats(first)
        res["second_fit"] = _stats(second)
        res["first_minus_second"] = _stats([a - b for a, b in zip(first, second, strict=False)])
        r = subprocess.run(
            [PY, "-c", _PROFILE, args.data_dir],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp,
        )
        res["first_fit_profile"] = json.loads(r.stdout.strip().splitlines()[-1])
    out = run.envelope(res, code_measured=args.code or "this checkout")
    _report.write(out, args.out, markdown=_markdown(out))
    print(_markdown(out))


def _markdown(out) -> str:
    r = out["results"]

    def s(k):
        return f"{r[k]['min']:.2f} / {r[k]['median']:.2f}"

    prof = r["first_fit_profile"]
    rows = [
        ["python -c pass", s("python_pass"), "interpreter start alone"],
        ["import dmcsvm", s("import"), "target <= 0.5 s"],
        ["dmcsvm --help", s("help"), "target <= 0.5 s"],
        ["dmcsvm predict (2,000 rows, store)", s("predict_2000"), "target <= 1.5 s"],
        ["dmcsvm predict (the same rows, LIBSVM file)", s("predict_2000_svm"), ""],
        ["dmcsvm predict (store, train --scale model)", s("predict_2000_scaled"), ""],
        ["first fit in a process", s("first_fit"), "satimage, MulticlassSVC(C=10)"],
        ["second fit", s("second_fit"), ""],
        ["first - second", s("first_minus_second"), "target <= 0.3 s"],
    ]
    lines = [
        "# Start-up times",
        "",
        f"Code measured: {out.get('code_measured', 'this checkout')}"
        + (
            f"; run as if {', '.join(out['settings']['without'])} were not installed"
            if out["settings"].get("without")
            else ""
        )
        + ".",
        "",
        _report.machine_line(out),
        _report.load_line(out),
        "",
        "Fresh subprocesses, warm numba cache; seconds, min / median of "
        f"{out['settings']['repeat']} runs (`benchmarks/bench_start_up.py`).",
        "",
    ]
    lines += _report.md_table(["what", "s (min / median)", "note"], rows, align="lrl")
    f, sec = prof["first"], prof["second"]
    lines += [
        "",
        "Where the first fit's extra time goes (cProfile, one process; profiling slows both fits):",
        "",
    ]
    lines += _report.md_table(
        ["part", "first fit s", "second fit s"],
        [
            ["whole fit", f"{f['total_s']:.3f}", f"{sec['total_s']:.3f}"],
            [
                "numba: loading cached code",
                f"{f['numba_cache_load_s']:.3f}",
                f"{sec['numba_cache_load_s']:.3f}",
            ],
            [
                "  of it: numba's typing/target registries (once per process)",
                f"{f['numba_registry_setup_s']:.3f}",
                f"{sec['numba_registry_setup_s']:.3f}",
            ],
            ["imports during the fit", f"{f['imports_s']:.3f}", f"{sec['imports_s']:.3f}"],
            [
                "numba, any thread: longest first call of a dispatcher",
                f"{f['numba_longest_first_call_s']:.3f}",
                f"{sec['numba_longest_first_call_s']:.3f}",
            ],
            [
                "numba, any thread: dispatchers loaded",
                str(f["numba_dispatchers_loaded"]),
                str(sec["numba_dispatchers_loaded"]),
            ],
        ],
        align="lrr",
    )
    lines += [
        "",
        "numba dispatchers loaded by the first fit (thread, s): "
        + ", ".join(
            f"{n} ({'main' if main else 'worker'}, {dt:.3f})"
            for n, dt, main in f["numba_first_calls"]
        )
        + ".",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
