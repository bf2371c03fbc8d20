"""Sphinx configuration of the torqueloop documentation (``python -m sphinx -W docs docs/_build``).

The pages are Markdown (MyST).  The user guide is the README, included section by section, so
there is one text to keep up to date; the config reference is generated at build time from the
same key descriptions that ``torqueloop check --explain TOPIC`` prints (``_ext/explain_directive``);
the API reference is autodoc on the numpydoc docstrings (``sphinx.ext.napoleon``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))          # the package, also when not installed
sys.path.insert(0, str(HERE / "_ext"))

project = "torqueloop"
author = "the torqueloop developers"
copyright = "2026, the torqueloop developers"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "explain_directive",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
# the README's links point into the repository (configs, sources), not to documentation pages
suppress_warnings = ["myst.xref_missing",
                     # a name re-exported by a package (dynamics.Model) is one object: either target is right
                     "ref.python"]

napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
# "Attributes" sections as fields: a dataclass field is also documented by autodoc itself
napoleon_use_ivar = True
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}

html_theme = "alabaster"
html_title = "torqueloop"


# Docstrings write absolute values and norms as |x| (plain-text mathematics); reStructuredText
# would read them as substitutions.  Escaped here, so the docstrings stay readable in help().
_ABS = re.compile(r"(?<![\\`])\|(?=\S)([^|`\n]*?\S)\|")


def _escape_bars(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        lines[i] = _ABS.sub(r"\\|\1\\|", line)


def setup(app):
    app.connect("autodoc-process-docstring", _escape_bars)
