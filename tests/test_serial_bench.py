"""benchmarks/run.py plumbing and the shared timing helpers (fast smoke checks)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import run as bench_run  # noqa: E402
from benchmarks._timing import stats, time_call, time_calls  # noqa: E402


def test_timing_helpers():
    calls = []
    med, p99 = time_call(calls.append, 1, repeat=5, number=10, warmup=1)
    assert len(calls) == 60
    assert 0 < med <= p99
    res = time_calls({"a": (abs, (-1,)), "b": (max, (1, 2))}, repeat=4, number=5)
    assert set(res) == {"a", "b"} and all(m > 0 for m, _ in res.values())
    assert stats([1.0, 2.0, 3.0])[0] == 2.0


def test_format_table_orders_columns():
    rows = [{"case": "x", "median_us": 1.23456, "note": "n", "extra": 5.0, "ratio": 0.5},
            {"case": "longer case", "median_us": 1234567.0, "ref": "r", "ref_median_us": 2.0}]
    text = bench_run.format_table(rows)
    header = text.splitlines()[0].split()
    assert header == ["case", "median_us", "ref", "ref_median_us", "ratio", "extra", "note"]
    assert "1.235" in text and "1.235e+06" in text


def test_discover_finds_serial():
    assert "bench_serial" in bench_run.discover()


def test_run_serial_quick_writes_json(tmp_path, capsys):
    pytest.importorskip("pinocchio")
    out = tmp_path / "b.json"
    rc = bench_run.main(["--quick", "--only", "serial", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    rows = data["modules"]["bench_serial"]
    cases = [r["case"] for r in rows]
    assert any("arm6 6-DOF inverse_dynamics" in c for c in cases)
    assert any("batch" in c for c in cases)
    for r in rows:
        assert r["median_us"] > 0 and r["ref_median_us"] > 0 and r["ratio"] > 0
    assert "bench_serial" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench_run.main(["--only", "nonexistent_module"])


@pytest.mark.slow
def test_every_benchmark_module_runs(tmp_path):
    """`python benchmarks/run.py --quick` runs every module to the end (bench_loop had stopped
    running when robot files without torque limits became refused, and nothing noticed)."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "run.py"), "--quick", "--json", str(out)],
                       cwd=root, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=str(root)))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FAILED" not in r.stdout
    data = json.loads(out.read_text())
    text = json.dumps(data)
    for module in ("bench_serial", "bench_loop", "bench_sim", "bench_drivers", "bench_stewart"):
        assert module in text, module


#: benchmark modules whose ``python -m`` is a tool of its own, not run.py's table
OWN_COMMAND = {"bench_mit_emulator_fuzz": "[n] [seed]: one long fuzz run (1,000,000 frames by default)"}


@pytest.mark.parametrize("name", [n for n in bench_run.discover() if n not in OWN_COMMAND])
def test_every_benchmark_module_runs_alone_through_run_py(name):
    """``python -m benchmarks.bench_X [--quick] [--json FILE]`` is ``benchmarks/run.py --only
    bench_X``: the same table, options and exit status (bench_serial alone printed nothing)."""
    import subprocess

    r = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--only" in r.stdout and "--json" in r.stdout, (r.stdout, r.stderr)
