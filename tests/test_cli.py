"""End-to-end tests of the ``torqueloop`` command line, each in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

try:
    from tests.test_bringup import write_clean_calibration
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from test_bringup import write_clean_calibration
try:
    from tests.serve_process import loosest_timing_sets, rehearsal_pair, served, wall_clock_verdict
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from serve_process import loosest_timing_sets, rehearsal_pair, served, wall_clock_verdict
RUNS = ROOT / "hil_configs" / "runs"
ROBOTS = ROOT / "hil_configs" / "robots"


def tl(*args, timeout=300, **kw):
    """Run ``python -m controller.app.cli ARGS`` from the repo root."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "controller.app.cli", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, **kw)


def test_version():
    r = tl("--version")
    assert r.returncode == 0
    assert r.stdout.startswith("torqueloop ")


def test_check_robot_file_prints_summary():
    r = tl("check", ROBOTS / "3rrr_horizontal.toml")
    assert r.returncode == 0, r.stderr
    assert "dof: 3" in r.stdout and "theta1" in r.stdout


@pytest.mark.parametrize("edit, field", [
    (lambda s: s.replace("[proximal]\n", "[proximal]\nlenght = 0.3\n"), "proximal.lenght"),
    (lambda s: s.replace("mass = 0.4", "mass = -0.4"), "proximal.mass"),
    (lambda s: s.replace("home_pose = [0.0, 0.0, 0.0]", "home_pose = [0.0, 0.0]"), "home_pose"),
])
def test_check_bad_robot_file_names_file_and_field(tmp_path, edit, field):
    bad = tmp_path / "bad_robot.toml"
    bad.write_text(edit((ROBOTS / "3rrr_horizontal.toml").read_text()))
    r = tl("check", bad)
    assert r.returncode == 2
    assert str(bad) in r.stderr and field in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def _copy_run(tmp_path, name, edit=lambda s: s):
    """A run config copied next to a copy of the robot files (relative paths keep working)."""
    (tmp_path / "runs").mkdir(exist_ok=True)
    if not (tmp_path / "robots").exists():
        shutil.copytree(ROBOTS, tmp_path / "robots")
    p = tmp_path / "runs" / f"{name}.toml"
    p.write_text(edit((RUNS / f"{name}.toml").read_text()))
    return p


def test_check_run_config_prints_budget_and_feasibility():
    r = tl("check", RUNS / "3rrr_circle.toml")
    assert r.returncode == 0, r.stderr
    assert "bus-load budget" in r.stdout and "feasible" in r.stdout
    # --set is checked as run would apply it: an unstable integral gain shows in the gain report,
    # a bad value names the field
    r = tl("check", RUNS / "3rrr_circle.toml", "--set", "controller.ki=200000.0")  # > kp kd = 128000
    assert r.returncode == 0 and "UNSTABLE" in r.stdout, (r.stdout, r.stderr)
    r = tl("check", RUNS / "3rrr_circle.toml", "--set", "loop.rate_hz=-1.0")
    assert r.returncode == 2 and "loop.rate_hz" in r.stderr, r.stderr


@pytest.mark.parametrize("edit, field", [
    (lambda s: s.replace('kind = "task_computed_torque"', 'kind = "magic"'), "controller.kind"),
    (lambda s: s.replace("rate_hz = 1000.0", "rate_hz = -5.0"), "loop.rate_hz"),
    (lambda s: s.replace('stop_reaction = "brake_disable"', 'stop_reaction = "pray"'), "safety.stop_reaction"),
    (lambda s: s.replace("can_id = 2", "can_id = 1"), "driver.joints[1].can_id"),
    (lambda s: s.replace('name = "rrr_circle"', 'name = "rrr_cirle"'), "trajectory.name"),
])
def test_bad_run_configs_name_file_and_field(tmp_path, edit, field):
    p = _copy_run(tmp_path, "3rrr_circle", edit)
    r = tl("run", p, "--duration", "0.05", "-o", tmp_path / "out", "--no-plots")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert str(p) in r.stderr and field in r.stderr, r.stderr


def test_run_demo_writes_log_summary_and_plots(tmp_path):
    out = tmp_path / "out"
    r = tl("run", RUNS / "3rrr_circle.toml", "--duration", "0.4", "-o", out)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "COMPLETED" in r.stdout and "task position error" in r.stdout
    log = np.load(out / "log.npy")
    assert log.shape[0] == 402   # 401 control cycles + the final zero-torque/disable row
    meta = json.loads((out / "meta.json").read_text())
    assert meta["result"]["status"] == "completed" and meta["result"]["n_cycles"] == 402
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rms_position_error_m"] < 2e-3
    for png in ("tracking.png", "error.png", "torque.png", "timing.png"):
        assert (out / png).stat().st_size > 1000
    r2 = tl("plot", out, "-o", tmp_path / "plots")
    assert r2.returncode == 0 and (tmp_path / "plots" / "tracking.png").exists()


def test_hardware_config_needs_confirmation(tmp_path):
    cfg = tmp_path / "hw.toml"
    robot = (ROOT / "hil_configs" / "robots" / "3rrr_horizontal.toml").as_posix()
    cfg.write_text((ROOT / "hil_configs" / "hardware" / "3rrr_mit_can_socketcan.toml").read_text()
                   .replace('file = "../robots/3rrr_horizontal.toml"', f'file = "{robot}"'))
    # no calibration: refused before anything is asked, naming the file bringup writes
    r = tl("run", cfg, "-o", tmp_path / "o", stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "hw.calibration.toml" in r.stderr and "torqueloop bringup" in r.stderr
    write_clean_calibration(cfg)
    r = tl("run", cfg, "-o", tmp_path / "o", stdin=subprocess.DEVNULL)
    assert r.returncode == 2
    assert "--yes-hardware" in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.exclusive
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigint_stops_safely_with_complete_log(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "controller.app.cli", "run", str(RUNS / "seed003_2r.toml"), "-o", str(out),
           "--no-plots", "--set", 'loop.clock="wall"', "--duration", "60",
           # about SIGINT: a loaded test machine must not end the run by overruns first (a stall
           # of 0.45 s made 450 of the default window's 500 cycles late: over 0.9)
           *loosest_timing_sets()]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        log = out / "log.npy"
        # wait until the loop runs (rows flushed to disk), then interrupt it
        while time.monotonic() < deadline:
            if log.exists() and log.stat().st_size > 200 * 100:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the run did not start")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (stdout, stderr)
    assert "STOPPED" in stdout and "signal" in stdout
    meta = json.loads((out / "meta.json").read_text())
    res = meta["result"]
    assert res["status"] == "stopped"
    data = np.load(log)
    assert data.shape[0] == res["n_cycles"]          # every cycle is on disk
    last = data[-1]
    assert np.all(np.asarray([last[f"tau_cmd[{j}]"] for j in ("q1", "q2")]) == 0.0)   # columns by joint name
    assert int(last["safety"]) & 32            # DISABLED: the loop disabled the drives
    # the stop came within 2 cycles of the request: the rows before it tracked normally
    assert data.shape[0] < 60000


def test_tune_small_search(tmp_path):
    def edit(s):
        return s + """
[tune]
method = "grid"
candidates = 2
monte_carlo = 1
metric = "rms_error_norm"
duration_s = 0.3
seed = 2
[tune.params]
"controller.wn_rad_s" = [10.0, 40.0]
[tune.uncertainty]
"driver.plant.mass_factor" = [0.95, 1.15]
"""
    p = _copy_run(tmp_path, "seed003_2r", edit)
    out = tmp_path / "tune"
    r = tl("tune", p, "-o", out, "--workers", "1")
    assert r.returncode == 0, (r.stdout, r.stderr)
    rows = (out / "ranking.csv").read_text().splitlines()
    assert len(rows) == 3
    # the total is said before the search starts (a grid's candidates are per axis)
    plan = "grid of 2 points per axis on 1 axes = 2 candidates x 1 plant draws = 2 runs"
    assert r.stdout.index(plan) < r.stdout.index("candidates x 1 plant draws in"), r.stdout
    best = (out / "best.toml").read_text()
    assert "wn_rad_s = 40.0" in best   # stiffer gains track better on this arm
    assert (out / "tune.png").exists()


@pytest.mark.exclusive
def test_hardware_rehearsal_against_emulated_robot_in_another_process(tmp_path):
    """hil_configs/rehearsal: the MIT hardware template, with only the bus moved to udp_multicast,
    runs (real mit_can driver, wall clock) against the 3RRR served by `python -m drivers.sim.serve`
    in a separate process."""
    srv, run = rehearsal_pair(tmp_path, "3rrr_mit_udp", "3rrr_horizontal.toml", f"3rrr_mit-cli-{os.getpid()}")
    # 250 Hz (below): the reply timeout a user sets for it (the template's 0.8 ms fits its 1 kHz)
    run.write_text(run.read_text().replace("reply_timeout_s = 0.0008", "reply_timeout_s = 0.002", 1))
    write_clean_calibration(run)        # a hardware run needs one (bring-up: tests/test_bringup.py)
    with served(srv, "--duration-s", "120") as server:
        out = tmp_path / "out"
        # the overrun limits are tested on their own (test_ctrl_safety); a shared test machine must
        # not end this protocol rehearsal by its own lateness
        # 250 Hz: two plain-Python processes over the loopback bus do not hold the template's
        # 1 kHz on a 2-core machine (a suite run, no other process measured: 968 of 1502 cycles
        # late, 2026-11-28); the deadlines are checked at the rate they hold (issue 38's work)
        r = tl("run", run, "--yes-hardware", "--duration", "1.5", "-o", out, "--no-plots", "--no-progress",
               "--set", "loop.rate_hz=250.0",
               "--set", "safety.overrun_fraction_max=0.9", "--set", "safety.lateness_max_s=10.0")
    log = np.load(out / "log.npy") if (out / "log.npy").exists() else None
    # the real driver talked to the devices: fresh feedback nearly every cycle
    fresh = (np.all([log[f"fresh[{j}]"] for j in ("theta1", "theta2", "theta3")], axis=0)
             if log is not None else np.zeros(1, bool))
    wall_clock_verdict(r.returncode, out, server.watch, "wall-clock rehearsal",
                       f"(fresh feedback in {fresh.mean():.0%} of the cycles; {r.stderr.strip()[-300:]})",
                       late=fresh.mean() <= 0.9, stale_cycles=int((~fresh).sum()))
    assert "COMPLETED" in r.stdout and "driver mit_can (hardware)" in r.stdout
    meta = json.loads((out / "meta.json").read_text())
    assert len(log) == 377 == meta["result"]["n_cycles"] and meta["hardware"] is True
    assert max(abs(log[f"err[{i}]"]).max() for i in ("x", "y")) < 0.01


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_reader_that_goes_away_does_not_break_the_command(tmp_path, command):
    """``torqueloop run ... | head -1``: the pipe closes before the summary is printed. The run
    still writes summary.json and returns its real code; no BrokenPipeError on stderr."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = [sys.executable, "-m", "controller.app.cli", command, str(RUNS / "seed003_2r.toml")]
    if command == "run":
        args += ["--duration", "0.3", "--no-plots", "--out", str(tmp_path / "out")]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        r = subprocess.run(args, cwd=ROOT, env=env, stdout=write_end, stderr=subprocess.PIPE,
                           text=True, timeout=300)
    finally:
        os.close(write_end)
    assert "BrokenPipe" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr
    if command == "run":
        assert json.loads((tmp_path / "out" / "summary.json").read_text())


def test_a_librarys_warnings_are_printed_named_by_their_source(tmp_path):
    """canopen warns through logging when a CiA 402 drive's SDO response is lost: the command
    prints it on stderr as "torqueloop: canopen...: WARNING: ...", not bare through logging's
    last resort ("No SDO response received", from nobody)."""
    try:
        from tests.test_bringup import _data
    except ImportError:  # pragma: no cover - rootdir not on sys.path
        from test_bringup import _data
    from dynamics.config import write_toml

    data = _data("cia402", "clean", tmp_path)
    data["driver"]["faults"] = {"seed": 3, "drop_prob": 0.3}     # SDO responses lost
    write_toml(tmp_path / "run.toml", data)
    r = tl("bringup", tmp_path / "run.toml")
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert any(ln.startswith("torqueloop: canopen.") and ": WARNING: No SDO response received" in ln
               for ln in lines), r.stderr
    assert not any(ln.startswith("No SDO response") for ln in lines), r.stderr
