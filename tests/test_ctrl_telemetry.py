"""Telemetry: .npy log readable by np.load at every flush, crash safety, meta.json, metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from controller.metrics import MetricsAccumulator, metrics_from_log
from controller.telemetry import TelemetryWriter, file_dtype, group_fields, log_dtype, read_log, read_meta, to_csv
from dynamics.errors import TorqueloopError

ROOT = Path(__file__).resolve().parents[1]


def row(i, n=2, dim=3):
    return dict(t=i * 1e-3, q=np.full(n, i), qd=np.full(n, -i), ref_pos=np.arange(dim) + i, ref_vel=np.zeros(dim),
                ref_acc=np.ones(dim), err=np.full(dim, 0.5 * i), tau_ctrl=np.full(n, 2.0 * i),
                tau_cmd=np.full(n, 1.5), tau_meas=np.full(n, 1.4), safety=i % 3, sat=np.array([i % 2 == 0] * n),
                lateness_s=1e-6 * i, compute_s=2e-6, fresh=np.ones(n, bool), fault=np.zeros(n, int),
                enabled=np.ones(n, bool))


def test_roundtrip_and_header_rewritten_at_each_flush(tmp_path):
    w = TelemetryWriter(tmp_path, 2, 3, buffer_rows=10, meta={"seed": 42, "config": {"period_s": 1e-3}})
    assert np.load(tmp_path / "log.npy").shape == (0,)
    for i in range(25):
        w.record(**row(i))
        assert np.load(tmp_path / "log.npy").shape == ((i + 1) // 10 * 10,)
    w.close({"status": "completed"})
    w.close()  # idempotent
    log = read_log(tmp_path)
    assert log.dtype == log_dtype(2, 3) and log.shape == (25,)
    # on disk: only scalar columns (what pandas.DataFrame(np.load(path)) needs), same bytes
    raw = np.load(tmp_path / "log.npy")
    assert raw.dtype == file_dtype(2, 3) and all(raw.dtype[k].shape == () for k in raw.dtype.names)
    assert raw.dtype.names[:4] == ("t", "q[0]", "q[1]", "qd[0]")
    assert np.array_equal(raw["err[2]"], log["err"][:, 2]) and np.array_equal(raw["sat[1]"], log["sat"][:, 1])
    assert np.array_equal(read_log(tmp_path, flat=True), raw)
    assert np.allclose(log["t"], np.arange(25) * 1e-3)
    assert np.allclose(log["err"][:, 1], 0.5 * np.arange(25))
    assert log["sat"][4].tolist() == [True, True] and log["safety"][5] == 2
    meta = read_meta(tmp_path)
    assert meta["seed"] == 42 and meta["rows"] == 25 and meta["result"]["status"] == "completed"
    assert "git_commit" in meta and "numpy" in meta["versions"] and "q" in meta["fields"]
    with pytest.raises(TorqueloopError):
        w.record(**row(0))
    # pandas-style consumers only need np.load; CSV export has one column per scalar
    to_csv(log, tmp_path / "log.csv")
    header = (tmp_path / "log.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["t", "q[0]", "q[1]"]
    data = np.loadtxt(tmp_path / "log.csv", delimiter=",", skiprows=1)
    assert data.shape == (25, len(header)) and np.allclose(data[:, 0], log["t"])


def test_read_errors(tmp_path):
    with pytest.raises(TorqueloopError):
        read_log(tmp_path / "missing.npy")
    np.save(tmp_path / "other.npy", np.zeros(3, dtype=[("a", "<f8")]))
    with pytest.raises(TorqueloopError, match="not a torqueloop telemetry log"):
        read_log(tmp_path / "other.npy")
    with pytest.raises(TorqueloopError):
        read_meta(tmp_path)


_WRITER_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    sys.path.insert(0, {root!r})
    from controller.telemetry import TelemetryWriter
    w = TelemetryWriter({d!r}, 2, 2, buffer_rows=100)
    n = 2
    for i in range(1050):
        w.record(i * 1e-3, np.full(n, i), np.zeros(n), np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2),
                 np.zeros(n), np.zeros(n), np.zeros(n), 0, np.zeros(n, bool), 0.0, 0.0, np.ones(n, bool),
                 np.zeros(n, int), np.ones(n, bool))
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_sigkill_loses_at_most_one_buffer(tmp_path):
    d = tmp_path / "run"
    r = subprocess.run([sys.executable, "-c", _WRITER_SCRIPT.format(root=str(ROOT), d=str(d))], timeout=120)
    assert r.returncode == -signal.SIGKILL
    log = np.load(d / "log.npy")
    assert log.shape == (1000,)
    assert np.array_equal(log["q[0]"], np.arange(1000))
    assert np.array_equal(group_fields(log)["q"][:, 1], np.arange(1000))


_LOOP_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, {root!r})
    sys.path.insert(0, {tests!r})
    from controller.clock import LockstepClock
    from controller.laws import ComputedTorque
    from controller.loop import ControlLoop
    from controller.safety import SafetyConfig, SafetySupervisor
    from controller.telemetry import TelemetryWriter
    from drivers.sim.direct import DirectPlantDriver
    from drivers.sim.plant import SimulatedPlant
    from test_ctrl_models import Arm2, SineTraj
    m = Arm2()
    traj = SineTraj([0.3, 0.8], [0.2, -0.2], 2.0, 600.0)
    clock = LockstepClock()
    s0 = traj.sample(0.0)
    drv = DirectPlantDriver(SimulatedPlant(m, q0=s0.pos, qd0=s0.vel), now=clock.now)
    tel = TelemetryWriter({d!r}, 2, 2, buffer_rows=100)
    print("started", flush=True)
    ControlLoop(drv, ComputedTorque(m, 400.0, 40.0), traj, SafetySupervisor(SafetyConfig(), m.limits), clock,
                period_s=1e-3, telemetry=tel).run()
""")


def _wait_and_kill(p, d):
    try:
        assert p.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if np.load(d / "log.npy").shape[0] >= 300:
                    break
            except (OSError, ValueError):  # not created yet
                pass
            time.sleep(0.05)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)


def test_kill_running_loop_log_loads(tmp_path):
    d = tmp_path / "run"
    with subprocess.Popen([sys.executable, "-c", _LOOP_SCRIPT.format(root=str(ROOT), tests=str(ROOT / "tests"),
                                                                     d=str(d))],
                          stdout=subprocess.PIPE, text=True) as p:
        _wait_and_kill(p, d)
    log = group_fields(np.load(d / "log.npy"))
    assert log.shape[0] >= 300 and log.shape[0] % 100 == 0
    assert np.allclose(log["t"], np.arange(log.shape[0]) * 1e-3)
    assert np.all(np.isfinite(log["q"])) and np.all(log["enabled"])
    meta = json.loads((d / "meta.json").read_text())
    assert "result" not in meta  # the run never finished


def test_metrics_stream_equals_log_and_definitions(tmp_path):
    rng = np.random.default_rng(5)
    N, n, dim, P = 2500, 3, 3, 1e-3
    err = rng.normal(size=(N, dim)) * [1e-3, 2e-3, 1e-2]
    tau = rng.normal(size=(N, n))
    qd = rng.normal(size=(N, n))
    sat = rng.random((N, n)) < 0.1
    late = rng.random(N) * 1e-3
    acc = MetricsAccumulator(n, dim, P, task_layout="planar", block=256)
    for k in range(N):
        acc.add(err[k], tau[k], qd[k], sat[k], late[k])
    r = acc.result()
    assert r["n_cycles"] == N
    assert np.allclose(r["rms_error"], np.sqrt(np.mean(err ** 2, axis=0)))
    assert np.allclose(r["max_abs_error"], np.max(np.abs(err), axis=0))
    assert np.allclose(r["peak_torque"], np.max(np.abs(tau), axis=0))
    assert np.allclose(r["energy_j"], np.sum(tau * qd, axis=0) * P)
    assert r["positive_work_j"] == pytest.approx(np.sum(np.maximum(tau * qd, 0)) * P)
    assert r["deadline_misses"] == int(np.sum(late > 0.5 * P))
    assert np.allclose(r["saturation_fraction"], sat.mean(axis=0))
    assert r["saturation_fraction_any"] == pytest.approx(np.any(sat, axis=1).mean())
    assert r["rms_position_error_m"] == pytest.approx(np.sqrt(np.mean(np.sum(err[:, :2] ** 2, axis=1))))
    assert r["rms_orientation_error_rad"] == pytest.approx(np.sqrt(np.mean(err[:, 2] ** 2)))
    # the same figures from a log on disk
    w = TelemetryWriter(tmp_path, n, dim, buffer_rows=128)
    z = np.zeros(n)
    for k in range(N):
        w.record(k * P, z, qd[k], np.zeros(dim), np.zeros(dim), np.zeros(dim), err[k], tau[k], tau[k], z, 0,
                 sat[k], late[k], 0.0, np.ones(n, bool), np.zeros(n, int), np.ones(n, bool))
    w.close()
    r2 = metrics_from_log(read_log(tmp_path), P, task_layout="planar")
    r3 = metrics_from_log(np.load(tmp_path / "log.npy"), P, task_layout="planar")
    for key in r:
        assert np.allclose(r[key], r2[key]) and np.allclose(r[key], r3[key]), key


def test_the_log_as_a_dataframe_in_one_call(tmp_path):
    """``log_dataframe``: a grouped log (``pandas.DataFrame`` refuses its vector fields), a run
    folder or its log.npy give the frame pandas makes of the file itself, named columns kept."""
    pd = pytest.importorskip("pandas")
    from controller.telemetry import log_dataframe

    w = TelemetryWriter(tmp_path, 2, 3, buffer_rows=10, joint_names=["hip", "knee"], axis_names=["x", "y", "phi"])
    for i in range(13):
        w.record(**row(i))
    w.close({"status": "completed"})
    expected = pd.DataFrame(np.load(tmp_path / "log.npy"))
    grouped = read_log(tmp_path)
    with pytest.raises(ValueError):
        pd.DataFrame(grouped)                   # what the helper is for
    for df in (log_dataframe(tmp_path), log_dataframe(tmp_path / "log.npy"),
               log_dataframe(grouped, joint_names=["hip", "knee"], axis_names=["x", "y", "phi"])):
        pd.testing.assert_frame_equal(df, expected)
    assert "q[knee]" in expected.columns and "err[phi]" in expected.columns
    numbered = log_dataframe(grouped)           # no names: numbered columns, same values
    assert list(numbered.columns[:3]) == ["t", "q[0]", "q[1]"]
    np.testing.assert_array_equal(numbered.to_numpy(), expected.to_numpy())
    with pytest.raises(TorqueloopError):
        log_dataframe(np.zeros(3, dtype=[("a", float)]))


def test_pandas_opens_the_log_directly(tmp_path):
    """The README's promise: ``pandas.DataFrame(numpy.load(path))`` gives one column per scalar."""
    pd = pytest.importorskip("pandas")
    w = TelemetryWriter(tmp_path, 2, 3, buffer_rows=10)
    for i in range(13):
        w.record(**row(i))
    w.close({"status": "completed"})
    df = pd.DataFrame(np.load(tmp_path / "log.npy"))
    assert len(df) == 13 and list(df.columns[:3]) == ["t", "q[0]", "q[1]"]
    assert np.allclose(df["err[1]"].to_numpy(), 0.5 * np.arange(13))
    assert df["sat[0]"].dtype == bool and df["safety"].iloc[5] == 2
