"""Sphinx configuration of dmcsvm's documentation: Markdown pages (MyST), the API reference from
the numpydoc docstrings, and the examples/ gallery.  Build with warnings as errors:

    sphinx-build -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")

project = "dmcsvm"
author = "dmcsvm developers"
copyright = "2026, dmcsvm developers"
release = re.search(
    r'^__version__ = "(.+)"', (ROOT / "dmcsvm" / "__init__.py").read_text(), flags=re.M
).group(1)
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = [
    "_build",
    "**.ipynb_checkpoints",
    "auto_examples/*.ipynb",
    "auto_examples/*.py",
    "auto_examples/*.zip",
    "auto_examples/*.json",
]
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]

autosummary_generate = True
autodoc_default_options = {"members": False, "inherited-members": False}
# numpydoc writes the members' table itself; autosummary's toctree of every method would add
# hundreds of pages of scikit-learn's inherited API
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# examples/: the short ones run (each well under 20 s on 2 cores); the others need the data
# sets of ../shared/data, a cluster, or minutes, and are shown without running
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": (
        r"(quickstart_digits|one_vs_rest|scatter_checkerboard"
        r"|plot_convergence)\.py$"
    ),
    "ignore_pattern": r"__init__\.py",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "within_subsection_order": "FileNameSortKey",
    # the per-example timings page references every example, run or not
    "write_computation_times": False,
    "plot_gallery": "True",
}

html_theme = "alabaster"
html_static_path: list[str] = []
html_title = f"dmcsvm {release}"
