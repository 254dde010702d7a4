"""``class_weight`` and ``sample_weight``: per-pattern upper bounds of the duals.

As in LIBSVM and scikit-learn's ``SVC``, a weight rescales ``C`` for one pattern: pattern ``i``
gets the box

    C_i = C * class_weight[y_i] * sample_weight_i

in place of ``C`` (Crammer–Singer 2001 Eq. 5 / Aiolli–Sperduti 2005 Eq. 11:
``alpha_i^{y_i} = sum_{r in N_i} alpha_i^r <= C_i``; Platt's binary box ``0 <= a_i <= C_i``).
In the primal this is the slack term ``sum_i C_i xi_i``: a pattern of integer weight ``w`` is
``w`` copies of it (the optimum's decision function is the same).

A pattern of weight 0 has ``C_i = 0``: its coefficients are fixed at 0, it is never selected and
adds nothing to the primal, so the optimum is that of the data without it (it may still be
read and have its scores computed; it is never a support pattern).

:func:`pattern_bounds` validates both weights and returns ``C_i``, or ``None`` when every weight
is 1, so an unweighted fit runs exactly the code and arithmetic it runs without weights.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..errors import NonFiniteError, check_sample_weight
from ..store.class_index import class_counts

__all__ = ["check_sample_weight", "class_weights", "fit_bounds", "pattern_bounds"]

#: numpydoc descriptions shared by the estimators' docstrings (:func:`weights_doc`)
CLASS_WEIGHT_DOC = (
    "Weight of each class, scikit-learn's meaning: pattern ``i``'s dual box becomes ``{bound} * "
    "class_weight[y_i]`` (times its ``sample_weight``), i.e. {meaning}.  A dict maps labels of "
    "the training data to weights >= 0 (labels not in it weigh 1); ``'balanced'`` is "
    "``n_samples / (n_classes * bincount(y))``.  On the command line: ``--class-weight balanced`` "
    "or a JSON object such as ``--class-weight '{{\"1\": 5}}'``."
)

SAMPLE_WEIGHT_DOC = (
    "Per-row weights >= 0 (finite): row ``i``'s dual box is ``{bound} * class_weight[y_i] * "
    "sample_weight[i]`` ({where}); {meaning}.  A weight 0 removes the row (its coefficient stays "
    "0).  ``gamma='scale'`` takes the variance of X with rows counted by their weights (unlike "
    "scikit-learn's SVC), so that integer weights and repeated rows give the same kernel.  With "
    "a zarr store and no ``sample_weight``, the store's optional ``sample_weight`` array is "
    "used (``write_arrays(..., sample_weight=...)``)."
)

_MEANINGS = {
    "C": (
        "its slack counts that many times in the primal ``1/2 ||M||^2 + sum_i C_i xi_i``",
        "an integer weight ``w`` acts as ``w`` copies of the row",
    ),
    "mu": (
        (
            "the most that one pattern may carry of its class mean ``m_c = sum_i a_i phi(x_i)`` "
            "(``sum_{i in c} a_i = 1``); class sizes in the range of ``mu`` are summed weights"
        ),
        (
            "an integer weight ``w`` acts as ``w`` copies of the row (copies of one point carry "
            "their class mean together: only the sum of their ``a_i`` matters)"
        ),
    ),
}


def _para(head, text, indent):
    import textwrap

    body = textwrap.fill(
        text, width=96, initial_indent=" " * (indent + 4), subsequent_indent=" " * (indent + 4)
    )
    return " " * indent + head + "\n" + body + "\n"


def weights_doc(where: str, bound: str = "C", class_doc: bool = True):
    """Class decorator: document ``class_weight`` (before ``Attributes`` in the class
    docstring) and ``fit``'s ``sample_weight`` with what the weight means for the dual box
    ``bound`` (``'C'`` or ``'mu'``) of the equation ``where`` (``class_doc=False``: ``fit``
    only)."""
    cw_meaning, sw_meaning = _MEANINGS[bound]

    def deco(cls):
        doc = cls.__doc__ or ""
        para = _para(
            "class_weight : dict, 'balanced' or None, default=None",
            CLASS_WEIGHT_DOC.format(bound=bound, meaning=cw_meaning),
            4,
        )
        mark = "\n    Attributes\n"
        if class_doc and "class_weight :" not in doc:
            cls.__doc__ = doc.replace(mark, "\n" + para + mark, 1) if mark in doc else doc + para
        fit = cls.__dict__.get("fit")
        if fit is not None and fit.__doc__ and "sample_weight :" not in fit.__doc__:
            sw = _para(
                "sample_weight : array-like of shape (n_samples,), optional",
                SAMPLE_WEIGHT_DOC.format(bound=bound, where=where, meaning=sw_meaning),
                8,
            )
            body = fit.__doc__.rstrip()
            if "Parameters\n" not in body:
                body += "\n\n        Parameters\n        ----------"
            fit.__doc__ = body + "\n" + sw + "        "
        return cls

    return deco


def class_weights(class_weight, classes, y_idx) -> np.ndarray:
    """Weight of every class index (float64, shape ``(len(classes),)``) for ``class_weight``
    None, ``'balanced'`` or a dict ``{label: weight}`` (labels must be in ``classes``)."""
    m = len(classes)
    classes = [_plain(c) for c in classes]
    if class_weight is None:
        return np.ones(m)
    if isinstance(class_weight, str):
        if class_weight != "balanced":
            raise ValueError(
                f"class_weight must be a dict, 'balanced' or None, got {class_weight!r}"
            )
        counts = class_counts(y_idx, m).astype(np.float64)
        with np.errstate(divide="ignore"):
            return np.where(counts > 0, float(len(y_idx)) / (m * counts), 1.0)
    if not isinstance(class_weight, dict):
        raise ValueError(
            f"class_weight must be a dict, 'balanced' or None, got "
            f"{type(class_weight).__name__} {class_weight!r}"
        )
    cw = np.ones(m)
    exact = {_plain(c): j for j, c in enumerate(classes)}
    as_text = {str(_plain(c)): j for j, c in enumerate(classes)}
    for label, w in class_weight.items():
        j = exact.get(_plain(label))
        if j is None and isinstance(label, str):
            j = as_text.get(label)  # a JSON dict (CLI) has string keys
            if j is None:
                j = _numeric_key(label, exact)
        if j is None:
            raise ValueError(
                f"class_weight has the label {label!r}, which is not a class of the "
                f"training data (classes: {list(classes)})"
            )
        if isinstance(w, bool) or not isinstance(w, numbers.Real):
            raise ValueError(f"class_weight[{label!r}] must be a number, got {w!r}")
        if not np.isfinite(w):
            raise NonFiniteError(f"class_weight[{label!r}] is {float(w)!r}; weights must be finite")
        if w < 0:
            raise ValueError(f"class_weight[{label!r}] is {w!r}; weights must be >= 0")
        cw[j] = float(w)
    return cw


def _numeric_key(text, exact):
    """Class index of a numeric class equal to the number ``text`` spells ('1' for 1.0)."""
    try:
        v = float(text)
    except ValueError:
        return None
    return exact.get(int(v) if v.is_integer() else v)


def _plain(label):
    """A label as a Python value (``np.int64(1)`` -> ``1``), so numpy and Python labels agree."""
    return label.item() if isinstance(label, np.generic) else label


def pattern_bounds(C, y_idx, n_classes, classes, class_weight, sample_weight):
    """Per-pattern dual upper bounds ``C_i = C * class_weight[y_i] * sample_weight_i``.

    Parameters
    ----------
    C : float
        The estimator's ``C`` (for ScatterSVC its ``mu``).
    y_idx : ndarray of int, shape (n,)
        Class index of every row (into ``classes``).
    n_classes : int
    classes : sequence
        The labels (``classes[y_idx[i]]`` is row ``i``'s label); dict keys must be among them.
    class_weight : dict, 'balanced' or None
    sample_weight : array-like of shape (n,) or None

    Returns
    -------
    ndarray of float64, shape (n,), or None
        ``C_i``; None when every weight is 1 (the unweighted problem, bit for bit).

    Raises
    ------
    ValueError
        Unknown label in a dict, a weight < 0, a wrong shape or length, every weight 0, or a
        class whose rows all weigh 0 (the dual of that class would be empty).
    NonFiniteError
        A NaN or infinite weight.
    """
    classes = [_plain(c) for c in classes]
    if len(classes) != n_classes:
        raise ValueError(f"{len(classes)} class labels for {n_classes} classes")
    if class_weight is None and sample_weight is None:
        return None  # unweighted: the class index is not read (it may live in a store)
    y_idx = np.asarray(y_idx, dtype=np.int64)
    n = y_idx.shape[0]
    cw = class_weights(class_weight, classes, y_idx)
    sw = check_sample_weight(sample_weight, n)
    if np.all(cw == 1.0) and (sw is None or np.all(sw == 1.0)):
        return None
    w = cw[y_idx] if sw is None else cw[y_idx] * sw
    if not np.any(w > 0):
        raise ValueError(
            "every row has weight zero (class_weight and sample_weight); at least "
            "one row of each class needs a positive weight"
        )
    per_class = np.bincount(y_idx, weights=w, minlength=n_classes)
    present = np.bincount(y_idx, minlength=n_classes) > 0
    empty = np.flatnonzero(present & ~(per_class > 0))
    if empty.size:
        label = classes[int(empty[0])]
        raise ValueError(
            f"class {label!r} has weight zero on every one of its rows (class_weight "
            f"and sample_weight); give it a positive weight or leave its rows out"
        )
    return float(C) * w


def fit_bounds(est, td, C, y_idx, classes, sample_weight):
    """``pattern_bounds`` for ``est.fit``: ``est.class_weight`` and the explicit
    ``sample_weight``, else the training store's ``sample_weight`` array (``td.sample_weight``).
    Sets ``est.class_weight_`` (the weight of every class, scikit-learn's attribute) and
    ``td.sample_weight`` to the weights used (``gamma='scale'`` counts rows that many times).
    Call it before ``td.gamma``."""
    if sample_weight is None:
        sample_weight = getattr(td, "sample_weight", None)
    class_weight = getattr(est, "class_weight", None)
    bounds = pattern_bounds(C, y_idx, len(classes), classes, class_weight, sample_weight)
    td.sample_weight = check_sample_weight(sample_weight, len(y_idx))
    est.class_weight_ = class_weights(class_weight, classes, y_idx)
    return bounds
