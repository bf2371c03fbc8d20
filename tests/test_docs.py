"""The documentation site builds warning-free, and its config reference covers every table.

``python -m sphinx -W docs OUT`` (``docs/conf.py``): the user guide is the README included
section by section (between its ``<!-- docs:NAME -->`` markers), the config reference is
generated from the parser's own key descriptions (what ``torqueloop check --explain`` prints),
the API reference is autodoc on the docstrings.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

pytest.importorskip("sphinx", reason="the docs build needs sphinx (the test extra installs it)")
pytest.importorskip("myst_parser", reason="the docs build needs myst-parser (the test extra installs it)")


def _topics() -> set[str]:
    from controller.app.explain import TOPICS
    from drivers.registry import DRIVER_TYPES

    return {t for t in TOPICS if t != "driver"} | {f"driver.{k}" for k in DRIVER_TYPES}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs_html")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-E", "-q", "-W", "--keep-going", "-b", "html",
                           str(DOCS), str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, f"sphinx warnings or errors:\n{proc.stderr[-6000:]}"
    return out


def test_the_site_builds_without_a_warning(built):
    for page in ("index", "getting_started", "configs", "api", "hardware", "tuning"):
        assert (built / f"{page}.html").is_file()


def test_the_config_reference_has_every_topic_as_explain_prints_it(built):
    from controller.app.explain import explain

    listed = set(re.findall(r"```\{torqueloop-explain\}\s+(\S+)", (DOCS / "configs.md").read_text()))
    assert listed == _topics()
    page = html.unescape(re.sub(r"<[^>]+>", "", (built / "configs.html").read_text()))
    for topic in listed:
        for line in explain(topic).splitlines():
            if line.strip():
                assert line.strip() in page, (topic, line)


def test_the_readme_is_included_whole_and_once():
    """Every section of the README between its first and last marker is on exactly one page."""
    readme = (ROOT / "README.md").read_text()
    markers = re.findall(r"<!-- docs:(\w+) -->", readme)
    assert markers[0] == "start" and markers[-1] == "end" and len(set(markers)) == len(markers)
    pages = "\n".join(p.read_text() for p in DOCS.glob("*.md"))
    spans = re.findall(r':start-after: "<!-- docs:(\w+) -->"\n:end-before: "<!-- docs:(\w+) -->"', pages)
    starts = sorted(a for a, _ in spans)
    ends = sorted(b for _, b in spans)
    assert starts == sorted(markers[:-1])
    assert ends == sorted(markers[1:])
    order = {m: i for i, m in enumerate(markers)}
    assert all(order[b] == order[a] + 1 for a, b in spans), "each page includes one README span"
