"""Parameters renamed between dmcsvm versions, so that model files and checkpoints written before
a rename are read with today's names.

0.1.0 (model format 2) called ``MulticlassSVC`` / ``MultiPrototypeSVC``'s ``threshold_fraction``
``mu``, the name ``ScatterSVC`` keeps for its bound on the coefficients.
"""

from __future__ import annotations

RENAMED = {"MulticlassSVC": {"mu": "threshold_fraction"},
           "MultiPrototypeSVC": {"mu": "threshold_fraction"}}


def upgrade_params(estimator: str, params: dict) -> dict:
    """``params`` of ``estimator`` as written by an older dmcsvm, with today's names (a name that
    is already today's is kept)."""
    renamed = RENAMED.get(estimator, {})
    out = {}
    for k, v in params.items():
        new = renamed.get(k, k)
        if new != k and new in params:
            continue                    # both names present: today's wins
        out[new] = v
    return out
