"""The suite's own rules (tests/conftest.py): exclusive tests run alone under xdist, and the
interference skips are counted in the run's summary."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

#: twelve ordinary tests that each hold the machine for a while and one exclusive test; every
#: test writes its (start, end) to a file of its own
SPANS = '''
import json, os, time
from pathlib import Path

import pytest

OUT = Path(os.environ["SPANS_DIR"])


def _span(name, seconds):
    t0 = time.monotonic()
    time.sleep(seconds)
    (OUT / f"{name}.json").write_text(json.dumps([t0, time.monotonic()]))


@pytest.mark.parametrize("i", range(6))
def test_ordinary(i):
    _span(f"ordinary{i}", 0.4)


@pytest.mark.exclusive
def test_alone():
    _span("alone", 0.6)


@pytest.mark.parametrize("i", range(6, 12))
def test_ordinary_after(i):
    _span(f"ordinary{i}", 0.4)


@pytest.mark.exclusive
def test_interfered():
    pytest.skip("interference: a planted skip")
'''


def test_exclusive_tests_overlap_no_other_test_and_skips_are_counted(tmp_path):
    pytest.importorskip("xdist")
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(HERE / "conftest.py", suite / "conftest.py")
    (suite / "test_spans.py").write_text(SPANS)
    spans = tmp_path / "spans"
    spans.mkdir()
    env = dict(os.environ, SPANS_DIR=str(spans))
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_TESTRUNUID", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                        "--rootdir", str(suite), str(suite)], cwd=suite, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    got = {p.stem: json.loads(p.read_text()) for p in spans.glob("*.json")}
    assert sorted(got) == sorted(["alone"] + [f"ordinary{i}" for i in range(12)])
    a0, a1 = got.pop("alone")
    for name, (t0, t1) in got.items():
        assert t1 <= a0 or t0 >= a1, f"{name} ran during the exclusive test"
    # and the ordinary ones did run side by side (two workers): the lock is not a global one
    spans_sorted = sorted(got.values())
    assert any(b0 < a1_ for (a0_, a1_), (b0, _) in zip(spans_sorted, spans_sorted[1:])), spans_sorted
    assert "interference skips: 1 of 2 exclusive tests" in r.stdout, r.stdout
