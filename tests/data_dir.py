"""Where the tests find the real data sets: ``DMCSVM_DATA``, else ``../shared/data`` beside the
checkout (one definition for test_cli, test_cli_usability, test_examples and test_probability)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DMCSVM_DATA", ROOT.parent / "shared" / "data"))


def need(*parts) -> Path:
    """``DATA / parts``, or skip the calling test naming what is missing: a checkout without
    ``../shared/data`` beside it (and no ``DMCSVM_DATA``) runs every other test."""
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data not available: {path} (set DMCSVM_DATA or clone beside shared/)")
    return path
