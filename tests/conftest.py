"""Fixtures shared by the test modules.  The helpers themselves (QP oracles, KKT checks, the
direct solver driver) live in ``tests/oracles.py``; import it as ``import oracles``."""

from __future__ import annotations

import pytest

import oracles


@pytest.fixture(scope="session")
def cs():
    """The helpers of ``tests/oracles.py`` as a namespace (``cs.cs_dual_qp``, ``cs.run_solver``,
    ...)."""
    return oracles
