"""Sphinx configuration of cvflow's documentation site.

Built with warnings as errors by the one command README gives::

    sphinx-build -W --keep-going -b html docs docs/_build/html

Pages are MyST markdown (``guide/*.md``: every page there is in the user guide), the API
reference is autodoc + autosummary over numpydoc docstrings, the estimator reference is
generated from ``cvflow.estimators.REGISTRY`` (``_ext/cvflow_registry.py``) and the gallery
(``../examples/plot_*.py``) is executed by sphinx-gallery at every build.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
# the cvflow being documented: the checkout this conf.py belongs to, not another install
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("MPLBACKEND", "Agg")

import cvflow  # noqa: E402

project = "cvflow"
author = "the cvflow developers"
copyright = "the cvflow developers"
release = version = cvflow.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "cvflow_registry",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "auto_examples/*.ipynb",
                    "auto_examples/*.py", "auto_examples/*.zip", "auto_examples/*.md5",
                    "auto_examples/*.json"]
# DESIGN CHOICE: README's sections moved here kept their prose; a page that jumps a heading
# level is a style matter, not an error worth failing the build (-W) for.
suppress_warnings = ["myst.header"]

# --- MyST --------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3          # [text](page.md#a-heading) links reach ##/### headings

# --- API reference -----------------------------------------------------------------------
autosummary_generate = True
autodoc_default_options = {"members": False}
autodoc_typehints = "none"         # numpydoc's Parameters section says the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

intersphinx_mapping = {}           # no network in CI: links to other projects are plain text

# --- gallery -----------------------------------------------------------------------------
# DESIGN CHOICE: every example runs at every build (sphinx-gallery's default) on the threads
# route and small data, so a broken example fails the build and the figures are current.
sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "within_subsection_order": "FileNameSortKey",
    "image_scrapers": ("matplotlib",),
    "download_all_examples": False,
    "remove_config_comments": True,
    "show_memory": False,
    "plot_gallery": "True",
}

# --- HTML --------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = "cvflow"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path: list[str] = []
