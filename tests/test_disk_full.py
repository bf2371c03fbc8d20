"""A full disk mid-run (issue 12, item 8): the loop stops safely, the last rows stay in memory,
meta.json gets the result if anything can be written, no 0-byte meta.json.tmp is left, and the
CLI prints the stop reason without a traceback."""

from __future__ import annotations

import errno
import io
import json
from pathlib import Path

import numpy as np
import pytest

import controller.telemetry as telemetry
from controller.app.cli import main
from controller.telemetry import read_log

RUNS = Path(__file__).resolve().parents[1] / "hil_configs" / "runs"


class _Disk:
    """A disk with ``free`` bytes left for files opened through telemetry's ``_open``."""

    def __init__(self, free: int):
        self.free = free
        self.real_open = open

    def open(self, path, mode="r", *a, **k):
        fh = self.real_open(path, mode, *a, **k)
        if "w" not in mode and "a" not in mode and "+" not in mode:
            return fh
        disk = self

        class Limited(io.IOBase):
            def write(self, b):
                n = len(b)
                if n > disk.free:
                    raise OSError(errno.ENOSPC, "No space left on device")
                disk.free -= n
                return fh.write(b)

            def __getattr__(self, name):
                return getattr(fh, name)

            def seek(self, *a):
                return fh.seek(*a)

            def truncate(self, *a):
                return fh.truncate(*a)

            def flush(self):
                return fh.flush()

            def close(self):
                return fh.close()

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                fh.close()
                return False

        return Limited()


@pytest.mark.parametrize("free_after_start", [0, 30_000, 100_000])
def test_disk_full_mid_run_cli(tmp_path, monkeypatch, capsys, free_after_start):
    out = tmp_path / "out"
    disk = _Disk(10**9)
    monkeypatch.setattr(telemetry, "_open", disk.open)
    orig_init = telemetry.TelemetryWriter.__init__

    def init(self, *a, **k):
        orig_init(self, *a, **k)
        disk.free = free_after_start          # the disk fills up once the run has started

    monkeypatch.setattr(telemetry.TelemetryWriter, "__init__", init)
    code = main(["run", str(RUNS / "seed003_2r.toml"), "-o", str(out), "--no-plots", "--no-progress",
                 "--duration", "1.0"])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err + cap.out
    assert code == 1
    assert "FAULT" in cap.out and "telemetry" in cap.out          # the stop reason is printed
    assert "log incomplete" in cap.out
    assert not (out / "meta.json.tmp").exists()
    log = read_log(out)                                            # whatever reached the disk is a valid log
    if (out / "meta.json").stat().st_size:
        meta = json.loads((out / "meta.json").read_text())
        assert meta["result"]["status"] == "fault"
        assert meta["rows"] == log.shape[0]
        assert meta["log_incomplete"]["rows_not_written"] > 0


def test_writer_keeps_unwritten_rows_and_the_loop_stops(tmp_path, monkeypatch):
    """In process: the rows of the fault and of the stop are in RunResult.log_unwritten."""
    from controller.app.run import build_run, load_run

    disk = _Disk(10**9)
    monkeypatch.setattr(telemetry, "_open", disk.open)
    spec = load_run(RUNS / "seed003_2r.toml", duration_s=1.0)
    run = build_run(spec, out_dir=tmp_path / "o")
    disk.free = 50_000
    res = run.execute()
    assert res.status == "fault" and res.faults[0].cause == "telemetry"
    on_disk = read_log(tmp_path / "o")
    held = res.log_unwritten
    assert held is not None and held.shape[0] >= 1
    rows = np.concatenate([on_disk["t"], held["t"]])
    assert rows.shape[0] == res.n_cycles                            # nothing lost: disk + memory
    np.testing.assert_allclose(rows, np.arange(res.n_cycles) * spec.period_s, atol=1e-12)
    assert held["safety"][-1] & 32 and np.all(held["tau_cmd"][-1] == 0.0)   # the stop row is kept
