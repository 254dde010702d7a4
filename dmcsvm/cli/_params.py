"""Estimator parameters as command-line options: one ``--NAME`` per constructor parameter, its
help from the numpydoc docstring, values parsed from text (``dmcsvm train`` for any estimator,
``dmcsvm demo`` for MulticlassSVC)."""

from __future__ import annotations

import argparse
import inspect
import json
import re
import textwrap

from ..param_history import MOVED
from ..runtime_params import CLI_OPTIONS
from ..solver_options import DEFAULTS, OPTIONS


def parse_value(text: str):
    """A parameter value from the command line: int, float, true/false/none, JSON, else text."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    if t[:1] in '[{"':
        try:
            return json.loads(t)
        except ValueError:
            pass
    return t


def param_defaults(cls) -> dict:
    """``{parameter: default}`` of an estimator's constructor (its signature)."""
    sig = inspect.signature(cls.__init__)
    return {
        k: p.default
        for k, p in sig.parameters.items()
        if k != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


# meanings of parameters whose docstring entry gives only the type
_MEANINGS = {
    "kernel": "Kernel function: rbf exp(-gamma |x - z|^2), poly (gamma <x, z> + coef0)^degree, "
    "linear <x, z>, sigmoid tanh(gamma <x, z> + coef0), precomputed (the data are "
    "kernel values); -t also takes LIBSVM's numbers 0 linear, 1 poly, 2 rbf, "
    "3 sigmoid, 4 precomputed.",
    "gamma": "Kernel coefficient of rbf, poly and sigmoid, resolved like scikit-learn's SVC "
    "('scale' = 1 / (n_features X.var()), 'auto' = 1 / n_features).",
    "degree": "Degree of the polynomial kernel.",
    "coef0": "Independent term of the poly and sigmoid kernels.",
    "verbose": f"Show the progress of the fit (set by {CLI_OPTIONS['verbose']}).",
    "solver_options": "The solver's options as a JSON object, e.g. '{\"batch_size\": 1000}' "
    "(each is also an option of its own, which wins).",
}


#: LIBSVM's short options of svm-train: -c cost, -g gamma, -t kernel type
SHORT_FLAGS = {"C": "-c", "gamma": "-g", "kernel": "-t"}


#: svm-train's kernel type numbers (``-t 2`` is rbf)
LIBSVM_KERNELS = {"0": "linear", "1": "poly", "2": "rbf", "3": "sigmoid", "4": "precomputed"}


def parse_kernel(text: str):
    """``--kernel`` / ``-t``: a kernel name, or LIBSVM's number for it (0 to 4)."""
    t = text.strip()
    return LIBSVM_KERNELS.get(t, t)


def _plain_text(text: str) -> str:
    """Docstring text without reST markup: ``x`` and :func:`x` become x."""
    text = text.replace("``", "")
    return re.sub(r":(?:class|mod|func|meth|attr|data):`~?([^`]+)`", r"\1", text)


def param_docs(cls) -> dict:
    """``{parameter: (allowed values, meaning)}`` from the numpydoc ``Parameters`` section of
    an estimator's docstring, read by numpydoc's own parser (``docscrape``, the copy that
    scikit-learn ships), reST markup dropped."""
    from sklearn.externals._numpydoc.docscrape import NumpyDocString

    doc = NumpyDocString(inspect.getdoc(cls) or "")
    plain = {}
    for entry in doc["Parameters"]:
        spec = re.sub(r",?\s*default\s*=.*$", "", entry.type).strip().rstrip(",")
        text = " ".join(line.strip() for line in entry.desc if line.strip())
        for name in (n.strip() for n in entry.name.split(",")):
            if name:
                plain[name] = (_plain_text(spec), _plain_text(text))
    return plain


#: paper references of the estimators' docstrings: kept there, not in a command's help
_CITATION = re.compile(r"\s*\([^()]*\b(?:AS|CS|Eq\.|Fig\.|§)[^()]*\)")


def first_sentence(text: str) -> str:
    """The first sentence (or clause before a top-level ``;``) of a parameter's meaning,
    without paper references: the help shows that, the Python docstring the rest (a
    command's help stays about one screen)."""
    text = _CITATION.sub("", text.strip())
    ends = ".;:" if len(text) > _LONG else ".;"  # a long sentence stops at its colon too
    depth = 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if (
            depth == 0
            and ch in ends
            and (i + 1 == len(text) or text[i + 1] == " ")
            and not text[max(0, i - 3) : i + 1].endswith(("e.g.", "i.e."))
        ):
            if ch == ":" and i < 40:
                continue  # "Kernel function: ..." -- the colon introduces it
            return text[:i].rstrip() + "."
    return text


#: a first sentence longer than this is cut at its first colon as well
_LONG = 150


#: solver options left out of ``train --help`` / ``demo --help`` (listed in one line there;
#: still accepted): the solver's inner workings and the out-of-core tuning, documented in Python
ADVANCED = (
    "optimizer",
    "pattern_selection",
    "pair_selection",
    "threshold",
    "threshold_fraction",
    "batch_sweeps",
    "n_partitions",
    "data_in_memory",
    "disk_cache_size",
    "cache_dir",
    "inner_steps",
    "linear_solver",
    "solver_options",
)


def solver_option_names(cls) -> dict:
    """``{solver option: default}`` of an estimator class (empty for one without options)."""
    for c in cls.__mro__:
        if c.__name__ in DEFAULTS:
            return dict(DEFAULTS[c.__name__])
    return {}


def former_names(cls) -> dict:
    """``{former parameter name: solver option}`` of an estimator class (param_history): the
    command line still takes ``--selection`` and the other names of dmcsvm 0.2."""
    for c in cls.__mro__:
        if c.__name__ in MOVED:
            return dict(MOVED[c.__name__])
    return {}


def option_docs(cls) -> dict:
    """``{solver option: (allowed values, meaning)}`` from :data:`dmcsvm.solver_options.OPTIONS`,
    the one table of them."""
    names = solver_option_names(cls)
    return {o.name: (o.values, o.meaning) for o in OPTIONS if o.name in names}


def param_help(name, default, docs, fallback, note=None) -> str:
    """The help of ``--NAME``: what it means (its first sentence), the values it takes, its
    default (and ``note`` on it, where a command's default differs from the estimator's).  A
    parameter documented only by its type, or "as in" another estimator, takes its meaning
    from :data:`_MEANINGS` or the default estimator's docstring."""
    spec, text = docs.get(name, ("", ""))
    if not text or re.search(r"\bas in\b", text):
        fspec, ftext = fallback.get(name, ("", ""))
        text = ftext or text
        spec = spec or fspec
    text = _MEANINGS.get(name) or first_sentence(text)
    spec = re.sub(r"(,\s*)?\boptional\b", "", spec).strip(" ,")
    flag = name.replace("_", "-")
    if isinstance(default, bool):
        allowed, dflt = f"--{flag} or --no-{flag}", f"--{flag}" if default else f"--no-{flag}"
    else:
        allowed = spec or "a number, true/false, none, JSON or text"
        dflt = "none" if default is None else repr(default)
    text = text.strip()
    if text and not text.endswith("."):
        text = text.rstrip(";:,") + "."
    if note:
        dflt = f"{dflt} ({note})"
    return f"{text} Allowed: {allowed}. Default: {dflt}.".replace("%", "%%")


def add_param_options(group, cls, fallback_cls, skip=(), defaults=None, notes=None):
    """One option per constructor parameter of ``cls`` but ``skip`` (``--dashed-name``, also
    ``--underscored_name`` as an alias left out of the help; LIBSVM's ``-c``, ``-g``, ``-t``
    for C, gamma and kernel; booleans as ``--NAME/--no-NAME``; values by :func:`parse_value`)
    into ``group``, stored as ``est__NAME`` (read back by :func:`estimator_params`).

    Without an entry in ``defaults`` an option is only stored when given (the estimator's own
    default applies); with one, that value is the command's default, shown in the help with
    ``notes[NAME]``.  Parameters that ``cls`` documents only by type take their meaning from
    ``fallback_cls``'s docstring."""
    defaults, notes = defaults or {}, notes or {}
    docs, fallback = param_docs(cls), param_docs(fallback_cls)
    options = solver_option_names(cls)
    hidden = [
        f"--{p.replace('_', '-')}"
        for p in [*param_defaults(cls), *options]
        if p in ADVANCED and p not in skip
    ]
    if hidden:
        group.description = textwrap.fill(
            "also accepted, documented in the Python docstring: " + ", ".join(hidden),
            90,
            break_on_hyphens=False,
        )
    for p, default in param_defaults(cls).items():
        if p not in skip:
            _add_option(group, p, f"est__{p}", default, defaults, notes, docs, fallback)
    # the solver options (solver_options=...), each an option of its own stored as ``opt__NAME``,
    # and their names of dmcsvm 0.2 (--selection) as aliases left out of the help
    opt_docs = option_docs(cls)
    for p, default in options.items():
        if p not in skip:
            _add_option(group, p, f"opt__{p}", default, defaults, notes, opt_docs, {})
    taken = {f"--{p}" for p in options} | {f"--{p.replace('_', '-')}" for p in options}
    for old, new in former_names(cls).items():
        for flag in dict.fromkeys((f"--{old.replace('_', '-')}", f"--{old}")):
            if flag not in taken and new in options:
                taken.add(flag)
                kind = (
                    dict(action=argparse.BooleanOptionalAction)
                    if isinstance(options[new], bool)
                    else dict(type=parse_value, metavar="V")
                )
                group.add_argument(
                    flag,
                    dest=f"opt__{new}",
                    default=argparse.SUPPRESS,
                    help=argparse.SUPPRESS,
                    **kind,
                )


def _add_option(group, p, dest, default, defaults, notes, docs, fallback):
    """``--dashed-name`` (and ``--underscored_name``, left out of the help) for parameter or
    solver option ``p`` into ``group``, stored at ``dest``."""
    dashed = p.replace("_", "-")
    flags = ([SHORT_FLAGS[p]] if p in SHORT_FLAGS else []) + [f"--{dashed}"]
    shown = defaults.get(p, default)
    text = param_help(p, shown, docs, fallback, notes.get(p))
    if p in ADVANCED:
        text = argparse.SUPPRESS
    value = defaults.get(p, argparse.SUPPRESS)
    kind = parse_kernel if p == "kernel" else parse_value
    aliases = [f"--{p}"] if dashed != p else []
    if isinstance(default, bool):
        group.add_argument(
            *flags, dest=dest, action=argparse.BooleanOptionalAction, default=value, help=text
        )
        if aliases:
            group.add_argument(
                *aliases,
                dest=dest,
                action=argparse.BooleanOptionalAction,
                default=value,
                help=argparse.SUPPRESS,
            )
    else:
        group.add_argument(*flags, dest=dest, type=kind, default=value, metavar="V", help=text)
        if aliases:
            group.add_argument(
                *aliases, dest=dest, type=kind, default=value, metavar="V", help=argparse.SUPPRESS
            )


def estimator_params(a) -> dict:
    """The estimator parameters that the options of :func:`add_param_options` hold; the solver
    options given one by one go into ``solver_options`` (over those of ``--solver-options``)."""
    params = {k[len("est__") :]: v for k, v in vars(a).items() if k.startswith("est__")}
    options = {k[len("opt__") :]: v for k, v in vars(a).items() if k.startswith("opt__")}
    if options:
        given = params.get("solver_options")
        params["solver_options"] = {**(given if isinstance(given, dict) else {}), **options}
    return params
