"""Holding brakes of the simulated plant (drivers/sim/plant.py) and who works them.

The brake is modelled as Coulomb friction with the brake's holding torque, so it is checked
against an independent integration (scipy's solve_ivp) of the one free joint's equation of
motion; the emulated drives release it on enable and apply it on disable; gravity-loaded robots
start on the wall clock in process and in the hardware rehearsal across processes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from drivers.sim.build import plant_from_section
from drivers.sim.plant import SimulatedPlant
from dynamics import load_model
from dynamics.config import Section
from dynamics.errors import ConfigError

from serve_process import CpuWatch, interfered, rehearsal_pair, served, wall_clock_verdict
from test_bringup import write_clean_calibration

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ROOT / "hil_configs" / "robots"
Q_ARM = np.array([0.0, -1.2, 1.0, -0.5, 0.5, 0.0])


@pytest.fixture(scope="module")
def arm():
    return load_model(ROBOTS / "arm6_demo.toml")


def _plant(model, q0, **kw):
    kw.setdefault("brake_torque_nm", np.inf)
    return SimulatedPlant(model, q0=q0, viscous=0.0, coulomb=0.0, dt_max_s=1e-3, substeps=2, **kw)


def _one_joint_reference(model, q0, j, t_end, coulomb=0.0):
    """Joint j free, all others held: M_jj(q) qdd_j = -g_j(q) - coulomb sign(qd_j) (from rest)."""
    def f(t, y):
        q = q0.copy()
        q[j] = y[0]
        M = np.asarray(model.mass_matrix(q))
        g = float(np.asarray(model.gravity(q))[j])
        fr = coulomb * np.sign(y[1]) if y[1] != 0 else coulomb * np.sign(-g)
        return [y[1], (-g - fr) / M[j, j]]
    sol = solve_ivp(f, (0.0, t_end), [q0[j], 0.0], rtol=1e-10, atol=1e-12)
    return sol.y[0, -1], sol.y[1, -1]


def test_engaged_brakes_hold_a_gravity_loaded_arm_exactly(arm):
    p = _plant(arm, Q_ARM, brakes_engaged=True)
    assert np.abs(arm.gravity(Q_ARM)).max() > 10.0     # really gravity-loaded
    p.advance_to(2.0)
    assert np.array_equal(p.state.q, Q_ARM) and not p.state.qd.any()
    assert p.brakes_engaged.all()
    p.set_brake(False)
    p.advance_to(2.1)
    assert abs(p.state.q[1] - Q_ARM[1]) > 0.02          # released: it falls


def test_one_released_joint_moves_as_the_constrained_one_joint_equation(arm):
    p = _plant(arm, Q_ARM, brakes_engaged=True)
    p.set_brake(False, joints=[1])
    p.advance_to(0.15)
    q_ref, qd_ref = _one_joint_reference(arm, Q_ARM, 1, 0.15)
    q, qd = p.state.q, p.state.qd
    held = [0, 2, 3, 4, 5]
    assert np.array_equal(q[held], Q_ARM[held]) and not qd[held].any()
    assert q[1] - Q_ARM[1] > 0.05                         # it really moved
    assert q[1] == pytest.approx(q_ref, abs=2e-3 * abs(q_ref - Q_ARM[1]))
    assert qd[1] == pytest.approx(qd_ref, rel=5e-3)


def test_a_release_takes_effect_after_the_brake_release_time(arm):
    p = _plant(arm, Q_ARM, brakes_engaged=True, brake_release_s=0.05)
    p.advance_to(0.2)
    p.set_brake(False, joints=[1])
    assert p.brakes_engaged[1]                            # still closed: the spring lets go later
    p.advance_to(0.2499)
    assert np.array_equal(p.state.q, Q_ARM) and p.brakes_engaged[1]
    p.advance_to(0.35)                                    # released at 0.25 inside this interval
    assert not p.brakes_engaged[1]
    q_ref, _ = _one_joint_reference(arm, Q_ARM, 1, 0.1)
    assert p.state.q[1] == pytest.approx(q_ref, abs=2e-3 * abs(q_ref - Q_ARM[1]))
    # engaging again is immediate and cancels a pending release
    p.set_brake(True)
    p.set_brake(False, joints=[2])
    p.set_brake(True, joints=[2])
    p.advance_to(1.0)
    assert p.brakes_engaged.all()


def test_an_overloaded_brake_slips_against_its_holding_torque(arm):
    g1 = abs(float(arm.gravity(Q_ARM)[1]))
    hold = np.full(6, np.inf)
    hold[1] = 0.5 * g1                                    # half the gravity torque: slips
    p = _plant(arm, Q_ARM, brakes_engaged=True, brake_torque_nm=hold)
    p.advance_to(0.15)
    q_ref, qd_ref = _one_joint_reference(arm, Q_ARM, 1, 0.15, coulomb=0.5 * g1)
    assert p.state.q[1] - Q_ARM[1] > 0.01
    assert p.state.q[1] == pytest.approx(q_ref, abs=5e-3 * abs(q_ref - Q_ARM[1]))
    # a brake stronger than the load holds exactly
    hold[1] = 1.2 * g1
    p = _plant(arm, Q_ARM, brakes_engaged=True, brake_torque_nm=hold)
    p.advance_to(0.5)
    assert np.array_equal(p.state.q, Q_ARM)


def test_plant_table_brakes_default_on_and_options(arm):
    now = lambda: 0.0  # noqa: E731
    p = plant_from_section(Section({"q0": Q_ARM.tolist()}, "x.toml", "driver.plant"), arm, now=now)
    assert p.brakes_engaged.all() and np.isinf(p.brake_torque_nm).all()
    p = plant_from_section(Section({"q0": Q_ARM.tolist(), "brakes": False}, "x.toml", "driver.plant"),
                           arm, now=now)
    assert not p.brakes_engaged.any()
    p = plant_from_section(Section({"brake_torque_nm": [50, 50, 50, 5, 5, 5]}, "x.toml", "driver.plant"),
                           arm, now=now)
    assert p.brake_torque_nm.tolist() == [50, 50, 50, 5, 5, 5]
    with pytest.raises(ConfigError) as ei:
        plant_from_section(Section({"brakes": False, "brake_torque_nm": 5.0}, "x.toml", "driver.plant"),
                           arm, now=now)
    assert ei.value.file == "x.toml" and ei.value.field == "driver.plant.brake_torque_nm"


@pytest.mark.parametrize("kind", ["sim_direct", "sim_mit_can", "sim_odrive_can"])
def test_drives_release_on_enable_and_apply_on_disable(arm, kind):
    from drivers.registry import build_driver

    t = [0.0]
    joints = [{"can_id": i + 1, "model": "AK10-9", "gear_ratio": 3.0} if kind == "sim_mit_can"
              else {"node_id": i, "gear_ratio": 10.0} for i in range(6)]
    data = {"type": kind, "plant": {"q0": Q_ARM.tolist()}}
    if kind != "sim_direct":
        data |= {"joints": joints, "reply_timeout_s": 0.25}
        if kind == "sim_odrive_can":
            data |= {"feedback": "rtr", "torque_feedback": "none"}
        data["emulator"] = {"serve": "inline"}
    drv = build_driver(Section(data, "x.toml", "driver"), now=lambda: t[0], model=arm,
                       rng=np.random.default_rng(0))
    try:
        plant = drv.plant
        t[0] = 0.5
        plant.advance_to(t[0])
        assert plant.brakes_engaged.all() and np.array_equal(plant.state.q, Q_ARM)
        drv.enable()
        assert not plant.brakes_engaged.any()
        drv.disable()
        assert plant.brakes_engaged.all()
    finally:
        drv.close()


def _tl(*args, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "controller.app.cli", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.exclusive
def test_stewart_starts_and_runs_on_the_wall_clock_in_process(tmp_path):
    """The issue's case: the emulated Stewart on the wall clock (it used to sink 7-8 cm first).

    100 Hz: six ODrive axes on three buses, RTR feedback and 1 kHz encoder broadcasts served by
    emulator threads with the Stewart plant in Python cost 3-5 ms a cycle on the wall clock
    here, more than a 250 Hz period (measured 2026-11-25 on an idle 2-core machine)."""
    out = tmp_path / "out"
    watch = CpuWatch(probe=True)
    r = _tl("run", ROOT / "hil_configs" / "runs" / "stewart_motion.toml", "--set", 'loop.clock="wall"',
            "--set", "loop.rate_hz=100.0", "--duration", "1.0", "-o", out, "--no-plots", "--no-progress")
    # what this test is about: the platform is still at its start pose when the run enables it
    assert "differs from the trajectory start" not in r.stderr + r.stdout, r.stderr
    wall_clock_verdict(r.returncode, out, watch, "wall-clock run", r.stderr.strip()[-300:])
    assert "COMPLETED" in r.stdout


def _rehearse(tmp_path, stem, robot, port, duration_s, *extra, driver: dict | None = None):
    """Rehearse the shipped pair ``stem`` with ``extra`` CLI arguments and the ``driver`` keys
    changed in the run config (the calibration is made for the changed config, as a user's
    bring-up would be)."""
    srv, run = rehearsal_pair(tmp_path, stem, robot, f"{stem}-{port}")
    out = tmp_path / "out"
    for key, value in (driver or {}).items():
        text, n = re.subn(rf"(?m)^{key} = \S+", f"{key} = {value!r}", run.read_text(), count=1)
        assert n == 1, f"{key} not in {stem}_run.toml"
        run.write_text(text)
    write_clean_calibration(run)        # a hardware run needs one (bring-up: tests/test_bringup.py)
    with served(srv, "--duration-s", "120") as server:
        r = _tl("run", run, "--yes-hardware", "--duration", duration_s, "-o", out, "--no-plots",
                "--no-progress", *extra)
    # What this test is about: the gravity-loaded robot is still at its start pose when the run
    # enables it (the start-up check compares the measured pose with the trajectory start).
    assert "differs from the trajectory start" not in r.stderr, r.stderr
    # the run completed and held its deadlines, unless the machine measurably stopped it
    log = np.load(out / "log.npy") if (out / "log.npy").exists() else None
    fresh = (np.all([log[k] for k in log.dtype.names if k.startswith("fresh[")], axis=0)
             if log is not None else np.zeros(1, bool))
    wall_clock_verdict(r.returncode, out, server.watch, "wall-clock rehearsal", _outcome(r, out),
                       late="no fresh feedback" in r.stderr or fresh.mean() <= 0.9,
                       stale_cycles=int((~fresh).sum()))
    assert "COMPLETED" in r.stdout and "(hardware)" in r.stdout
    return np.load(out / "log.npy"), json.loads((out / "meta.json").read_text())


def _outcome(r, out) -> str:
    """Why a run failed, in the few lines pytest shows of an assertion message: the status line,
    the faults and the timing of its result (meta.json), the machine's load and stderr."""
    meta_path = out / "meta.json"
    res = json.loads(meta_path.read_text()).get("result", {}) if meta_path.exists() else {}
    status = next((ln for ln in r.stdout.splitlines() if ln.startswith("run '")), "no status line")
    faults = [(f.get("t_s"), f.get("cause"), f.get("message")) for f in res.get("faults", [])][:3]
    t = res.get("timing") or {}
    timing = {"missed": t.get("missed_deadlines"), "late_max_s": (t.get("lateness") or {}).get("max"),
              "compute_max_s": (t.get("compute") or {}).get("max")}
    return (f"rc {r.returncode}: {status}; faults {faults}; timing {timing}; "
            f"load {os.getloadavg()}; stderr {r.stderr.strip()[-300:]!r}")


@pytest.mark.exclusive
def test_stewart_rehearsal_on_the_wall_clock_starts_and_runs(tmp_path):
    """The Stewart platform rehearsed through six ODrive axes served by another process.

    With the Stewart plant stepped in Python the server answered late on an idle 2-core
    machine (stale feedback in 101 of 500 cycles, at 250 Hz and at 100 Hz); with its
    compiled plant step (drivers/sim/_stewart_plant_kernel.py) it passed 6 of 6 runs here
    (2026-11-25)."""
    log, meta = _rehearse(tmp_path, "stewart_odrive_udp", "stewart.toml", 45000 + os.getpid() % 1000, "2.0")
    assert meta["result"]["n_cycles"] == len(log) == 502       # 500 cycles + the final disable row
    # the platform held its pose until enable: the start-up check passed and tracking held
    assert max(abs(log[k]).max() for k in log.dtype.names if k.startswith("err[") and k[4:-1] in ("x", "y", "z")) < 0.005


#: the arm's bring-up reference pose, upright (gravity needs nothing there): the run config's
#: [bringup] home_rad, where its server is started for the bring-up
ARM6_UPRIGHT = "driver.plant.q0=[0.0, -1.5707963, 0.0, -1.5707963, 0.0, 0.0]"


@pytest.mark.slow
@pytest.mark.exclusive
@pytest.mark.parametrize("stem,robot,bringup_server,error", [
    ("stewart_odrive_udp", "stewart.toml", (), ("x", "y", "z")),
    ("arm6_mit_udp", "arm6_demo.toml", ("--set", ARM6_UPRIGHT), None),
], ids=["stewart", "arm6"])
def test_the_rehearsal_is_brought_up_then_run_as_the_readme_says(tmp_path, stem, robot, bringup_server, error):
    """The README's path for a shipped gravity-loaded pair: the robot side served (the arm at its
    bring-up reference pose, upright), ``torqueloop bringup`` on the run config (no calibration
    written by the test), the robot side served afresh at the run's start pose, then the run with
    the calibration the bring-up wrote.

    The Stewart pair: with the drives' default 10 A its bring-up was refused (each leg holds
    56-61 N, over half of the largest cap, 104 N), and a leg's test pulse, predicted with the other
    legs on gravity only, left the platform's poses and stopped the planning (2026-11-30).  The
    arm pair: refused at its start pose (the shoulder holds 30 N m), and from upright its
    shoulder's pulse tipped it past travel_max_rad; with the caps its config now sets the bring-up
    holds it, and once it waits for the brakes to let go after enabling (its first doublet ran
    against the shoulder_pan's brake: 0.54 x the torque, a blocking finding) it passes with only
    the directions it cannot tell (the wrists' 2 and 3) to check by eye (2026-11-30)."""
    srv, run = rehearsal_pair(tmp_path, stem, robot, f"{stem}-bringup-{os.getpid()}")
    with served(srv, "--duration-s", "200", *bringup_server) as server:
        b = _tl("bringup", run, "--yes-hardware", timeout=300)
        if b.returncode != 0:
            interfered(server.watch, f"bring-up exit {b.returncode}")
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-1000:]
    assert "calibration:" in b.stdout and "open findings" not in b.stdout, b.stdout[-3000:]
    if stem == "stewart_odrive_udp":
        assert "findings: none" in b.stdout, b.stdout[-3000:]
    else:
        assert re.findall(r"^  (\w+): (\w[\w ]*):", b.stdout, re.M) == [("wrist_2", "direction"),
                                                                     ("wrist_3", "direction")], b.stdout[-3000:]
    assert (tmp_path / "run.calibration.toml").exists()
    out = tmp_path / "out"
    with served(srv, "--duration-s", "120") as server:
        r = _tl("run", run, "--yes-hardware", "--duration", "2.0", "-o", out, "--no-plots", "--no-progress")
    wall_clock_verdict(r.returncode, out, server.watch, "wall-clock rehearsal after its bring-up", _outcome(r, out))
    assert "COMPLETED" in r.stdout and "(hardware)" in r.stdout
    log = np.load(out / "log.npy")
    errs = [k for k in log.dtype.names if k.startswith("err[") and (error is None or k[4:-1] in error)]
    assert max(abs(log[k]).max() for k in errs) < (0.005 if error else 0.03)


@pytest.mark.exclusive
def test_stewart_rehearsal_holds_500_hz_with_both_processes_real_time(tmp_path):
    """Issue 38: the two-process rehearsal over the loopback bus at 500 Hz.  With the shipped
    pair's real-time settings (the run's loop SCHED_FIFO 80 on CPU 1, the server SCHED_FIFO 70
    on CPU 0) it held 0 of 1502 deadlines missed with every cycle's feedback fresh at loads of
    4.5-10 (2026-11-29); an ordinary-priority server on the same machine answered 1-8 ms late
    and the run stopped on its overrun rule.  Skipped where the settings cannot be applied."""
    probe = subprocess.run([sys.executable, "-c", "import os; os.sched_setaffinity(0, {0}); "
                            "os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(70))"],
                           capture_output=True, text=True)
    if probe.returncode != 0 or (os.cpu_count() or 1) < 2:
        pytest.skip(f"environment: SCHED_FIFO or two CPUs not available here: {probe.stderr.strip()[-200:]}")
    port = 47000 + os.getpid() % 1000
    log, meta = _rehearse(tmp_path, "stewart_odrive_udp", "stewart.toml", port, "2.0", "--set", "loop.rate_hz=500.0")
    assert meta["result"]["n_cycles"] == len(log) == 1002
    assert meta["result"]["timing"]["missed_deadlines"] <= 10
    assert max(abs(log[k]).max() for k in log.dtype.names if k.startswith("err[") and k[4:-1] in ("x", "y", "z")) < 0.005


@pytest.mark.exclusive
def test_arm6_rehearsal_on_the_wall_clock_starts_and_runs(tmp_path):
    # 250 Hz, not the template's 400: two plain-Python processes missed 1.4 % of the 400 Hz
    # deadlines in a suite run with no other process measured (2026-11-28; issue 38's work)
    # the reply timeout as a user sets it for that rate: what the 4 ms period leaves
    log, meta = _rehearse(tmp_path, "arm6_mit_udp", "arm6_demo.toml", 46000 + os.getpid() % 1000, "2.0",
                          "--set", "loop.rate_hz=250.0", driver={"reply_timeout_s": 0.002})
    assert meta["result"]["n_cycles"] == len(log) == 502
    assert max(abs(log[k]).max() for k in log.dtype.names if k.startswith("err[")) < 0.03
