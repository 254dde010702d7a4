"""Where the tests find the real data sets: ``DMCSVM_DATA``, else ``../shared/data`` beside the
checkout (one definition for test_cli, test_cli_usability, test_examples and test_probability)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DMCSVM_DATA", ROOT.parent / "shared" / "data"))
