"""Drive capability (issue 36): what each drive delivers bounds what `check` and `run` accept.

A newcomer's UR20-class arm on ODrive drives with default settings (10 A x 1 N m/A x gear 1 =
10 N m a joint) must be refused before enable, naming the joint, the torque needed and the
torque available with the settings that change it; with gear 100 and the bus-budget's 400 Hz
it runs on both clocks.  The other protocols' capabilities come from their own tables (MIT
model table, CiA 402 0x6072 x 0x6076, Dynamixel current limit x torque constant), and a
position the protocol's field cannot carry (the Stewart legs geared 628 rad/m on MIT drives)
is refused the same way.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest

from controller.app.cli import main
from controller.app.run import build_run, load_run, make_safety, parse_run, validate_run
from drivers.codecs import dynamixel as dx
from drivers.codecs import mit as mitc
from drivers.codecs import odrive as odc
from drivers.registry import joint_capabilities
from dynamics.config import Section, read_toml
from dynamics.errors import ConfigError

try:
    from tests.serve_process import CpuWatch, wall_clock_verdict
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from serve_process import CpuWatch, wall_clock_verdict
from dynamics.toy_models import PlanarTwoLink

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"
UR20 = ROOT / "tests" / "data" / "ur20"


def _caps(driver: dict, file: str = "run.toml"):
    return joint_capabilities(Section(driver, file, "driver"))


# ---------------------------------------------------------------------------
# each protocol's figure, from the formula (not from the code under test)
# ---------------------------------------------------------------------------
def test_odrive_capability_is_current_limit_times_kt_gear_and_efficiency():
    caps = _caps({"type": "odrive_can", "joints": [
        {"node_id": 1},                                                   # firmware defaults
        {"node_id": 2, "current_limit_a": 7.0, "torque_constant_nm_per_a": 0.5, "gear_ratio": 9.0,
         "efficiency": 0.9},
        {"node_id": 3, "current_limit_a": 40.0, "torque_limit_nm": 2.0, "gear_ratio": 5.0},   # clamp wins
    ]})
    assert [c.torque_max_nm for c in caps] == pytest.approx([10.0 * 1.0 * 1.0, 7.0 * 0.5 * 9.0 * 0.9, 2.0 * 5.0])
    assert "driver.joints[1].current_limit_a" in caps[1].settings
    assert "driver.joints[2].torque_limit_nm" in caps[2].settings


def test_mit_capability_is_the_model_table_through_the_gear():
    caps = _caps({"type": "sim_mit_can", "joints": [
        {"can_id": 1, "model": "AK80-9", "gear_ratio": 2.0, "offset_rad": 0.5}]})
    row = mitc.MIT_MODELS["AK80-9"]
    c = caps[0]
    assert c.torque_max_nm == pytest.approx(row.t_max_nm * 2.0)
    assert c.position_range == pytest.approx((0.5 - row.p_max_rad / 2.0, 0.5 + row.p_max_rad / 2.0))
    assert c.velocity_max == pytest.approx(row.v_max_rad_s / 2.0)


def test_cia402_capability_is_max_torque_times_rated_torque():
    data = read_toml(RUNS / "3rrr_circle_cia402.toml")
    caps = _caps(data["driver"], str(RUNS / "3rrr_circle_cia402.toml"))
    for js, c in zip(data["driver"]["joints"], caps):
        permille = js.get("torque_limit_nm", js["rated_torque_nm"]) / js["rated_torque_nm"] * 1000   # 0x6072
        assert c.torque_max_nm == pytest.approx(permille / 1000 * js["rated_torque_nm"] * js["gear_ratio"])
        assert "0x6072" in c.torque_from and "0x6076" in c.torque_from


def test_dynamixel_capability_is_current_limit_times_torque_constant():
    m = dx.DXL_MODELS["XM430-W350"]
    caps = _caps({"type": "sim_dynamixel", "joints": [
        {"id": 1, "model": "XM430-W350"}, {"id": 2, "model": "XM430-W350", "current_limit_a": 1.0}]})
    kt = m.stall_torque_nm / m.stall_current_a          # the datasheet's torque per A
    assert caps[0].torque_max_nm == pytest.approx(m.current_limit_lsb * m.current_a_per_lsb * kt)
    assert caps[1].torque_max_nm == pytest.approx(1.0 * kt)


# ---------------------------------------------------------------------------
# Set_Limits at enable; the emulated ODrive clamps to what it was sent
# ---------------------------------------------------------------------------
def _odrive_driver(joint_extra: dict, clock, qd0=(0.0, 0.0)):
    from drivers.registry import build_driver
    cfg = {"type": "sim_odrive_can", "reply_timeout_s": 0.25, "enable_timeout_s": 0.3, "torque_feedback": "iq",
           "plant": {"q0": [0.1, 0.2], "qd0": list(qd0), "brakes": False},
           "emulator": {"heartbeat_period_s": 0.01, "encoder_period_s": 0.001},
           "joints": [{"node_id": 1, **joint_extra}, {"node_id": 2}]}
    return build_driver(Section(cfg, "run.toml", "driver"), now=clock, model=PlanarTwoLink())


def test_set_limits_at_enable_sets_the_emulated_current_limit_and_clamps_torque():
    from benchmarks.odrive_fuzz import Clock
    from drivers.base import Command

    clock = Clock()
    drv = _odrive_driver({"current_limit_a": 3.0, "torque_constant_nm_per_a": 0.5, "gear_ratio": 4.0}, clock)
    try:
        emu = drv.emulators[0]
        assert emu.torque_limit_nm(1) == pytest.approx(10.0 * 0.5)     # the firmware default before enable
        drv.enable()
        assert emu.torque_limit_nm(1) == pytest.approx(3.0 * 0.5)      # Set_Limits: 3 A x 0.5 N m/A
        assert emu.torque_limit_nm(2) == pytest.approx(10.0 * 1.0)
        for _ in range(5):
            clock.t += 0.001
            fb = drv.cycle(Command(np.array([100.0, -100.0])))
        # Iq reports the clamped current: 3 A x 0.5 N m/A x gear 4 at the joint
        assert fb.torque_nm[0] == pytest.approx(3.0 * 0.5 * 4.0, rel=1e-6)
        assert fb.torque_nm[1] == pytest.approx(-10.0, rel=1e-6)
        assert abs(drv.plant.applied_torque_nm[0]) <= 6.0 + 1e-9
    finally:
        drv.close()


def test_emulated_velocity_limit_clamps_torque_like_limitvel():
    from benchmarks.odrive_fuzz import Clock
    from drivers.base import Command

    clock = Clock()
    # the plant moving at 3 turn/s (gear 1), the drive's velocity limit 1 turn/s: the firmware
    # allows at most (1 - 3) turn/s x 1/6 N m per turn/s
    drv = _odrive_driver({"velocity_limit_rad_s": 2.0 * math.pi}, clock, qd0=(3.0 * 2 * math.pi, 0.0))
    try:
        drv.enable()
        emu = drv.emulators[0]
        drv.cycle(Command(np.array([5.0, 0.0])))
        limit = (1.0 - 3.0) * (1.0 / 6.0)
        assert emu._axis(1).setpoint_nm == pytest.approx(limit, rel=1e-3, abs=1e-3)
    finally:
        drv.close()


# ---------------------------------------------------------------------------
# the effective limit: least of robot file, safety and drive, everywhere
# ---------------------------------------------------------------------------
def test_effective_limit_is_used_by_safety_controller_and_summary():
    spec = load_run(RUNS / "3rrr_circle.toml", overrides={})
    data = copy.deepcopy(spec.data)
    for js in data["driver"]["joints"]:
        js["limits"] = {"t_max_nm": 0.6}        # a drive flashed with a small torque range
    spec = parse_run(data, file=str(RUNS / "3rrr_circle.toml"), base_dir=RUNS)
    from controller.app.report import torque_limit_sources
    lim, src = torque_limit_sources(spec)
    assert lim.tolist() == pytest.approx([0.6] * 3) and src == ["drive"] * 3
    assert make_safety(spec).tau_max.tolist() == pytest.approx([0.6] * 3)
    from controller.app.run import make_controller
    assert np.asarray(make_controller(spec).saturation.limit_nm).tolist() == pytest.approx([0.6] * 3)
    text = "\n".join(validate_run(spec).lines)
    assert "effective 0.6 N m (drive)" in text


# ---------------------------------------------------------------------------
# refusals before enable
# ---------------------------------------------------------------------------
def test_newcomer_ur20_on_default_odrives_is_refused_by_check_and_run(tmp_path, capsys):
    cfg = UR20 / "ur20_odrive_newcomer.toml"
    assert main(["check", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "joint 'shoulder' needs" in err and "its drive delivers 10 N m" in err
    assert "current_limit_a 10 A x torque_constant_nm_per_a 1 N m/A x gear_ratio 1" in err
    assert "driver.joints[1].gear_ratio" in err and "driver.joints[1].current_limit_a" in err
    out = tmp_path / "run"
    assert main(["run", str(cfg), "-o", str(out), "--no-plots", "--no-progress"]) == 2
    assert "joint 'shoulder' needs" in capsys.readouterr().err
    assert not (out / "log.npy").exists()


def test_shoulder_requirement_is_the_gravity_torque_the_model_gives(capsys):
    """The figure in the message is the arm's own need (inverse dynamics), not a constant."""
    import re
    spec = load_run(UR20 / "ur20_odrive_newcomer.toml")
    with pytest.raises(ConfigError) as ei:
        validate_run(spec)
    need = float(re.search(r"joint 'shoulder' needs ([0-9.]+) N m", str(ei.value)).group(1))
    t = np.linspace(0.0, spec.trajectory.duration_s, 401)
    peak = 0.0
    for tk in t:
        s = spec.trajectory.sample(tk)
        peak = max(peak, abs(spec.model.inverse_dynamics(s.pos, s.vel, s.acc)[1]))
    assert need == pytest.approx(peak, rel=0.02)


def _stewart_on_mit(tmp_path: Path, offset_key: str = "offset_m", offset: float = 1.15) -> Path:
    text = (RUNS / "stewart_motion.toml").read_text()
    text = text.replace('file = "../robots/stewart.toml"', f'file = "{(ROOT / "hil_configs/robots/stewart.toml").as_posix()}"')
    text = text.replace('type = "sim_odrive_can"', 'type = "sim_mit_can"')
    text = text.replace('feedback = "rtr"', "").replace('torque_feedback = "none"', "")
    text = text.replace("encoder_period_s = 0.001\nheartbeat_period_s = 0.1\n", "")
    for k in range(6):
        text = text.replace(f"node_id = {k}\n", f"can_id = {k + 1}\nmodel = \"AK80-9\"\n{offset_key} = {offset}\n")
    p = tmp_path / "stewart_mit.toml"
    p.write_text(text)
    return p


def test_stewart_legs_on_mit_drives_refused_for_the_position_field(tmp_path, capsys):
    """628 rad/m on the +-12.5 rad field is +-19.9 mm of leg around the offset: refused before enable."""
    cfg = _stewart_on_mit(tmp_path)
    assert main(["check", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "position field" in err and "+-12.5 rad" in err
    lo, hi = 1.15 - 12.5 / 628.3185307179587, 1.15 + 12.5 / 628.3185307179587
    assert f"[{lo:.4g}, {hi:.4g}] m" in err


def test_offset_rad_on_a_prismatic_joint_is_refused_naming_offset_m(tmp_path, capsys):
    cfg = _stewart_on_mit(tmp_path, offset_key="offset_rad")
    assert main(["check", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "offset_rad" in err and "give it as offset_m" in err and "prismatic" in err


# ---------------------------------------------------------------------------
# acceptance: with gear 100 and 400 Hz it runs, on both clocks
# ---------------------------------------------------------------------------
#: the wall clock at 400 Hz with the loop's documented real-time settings (SCHED_FIFO 80, CPU 1,
#: frozen GC, as every shipped hardware config has): the emulated drives are then served in the
#: loop's thread (controller.app.run.sim_driver_section), and the run held every deadline at a
#: load of 3-4.6 on the 2-core VM (4 runs, 2026-11-29)
REALTIME = ["--set", "loop.realtime.sched_fifo_priority=80", "--set", "loop.realtime.cpu=1",
            "--set", "loop.realtime.freeze_gc=true"]
#: the CPU REALTIME pins the loop (and the emulated drives it serves) to: where the stall probe
#: looks (tests/serve_process.CpuWatch)
LOOP_CPU = (1,)
#: the same without the real-time settings: the emulators in their own thread, the loop an
#: ordinary process: it completes on an idle machine (0-6 % of the 2.5 ms deadlines missed),
#: but at a load of 3.5 it stopped on its overrun rule in 3 of 3 runs.  Non-strict: an XPASS
#: says it held
_WALL_NOT_REALTIME = pytest.mark.xfail(reason="the wall clock at 400 Hz without [loop.realtime]: an ordinary "
                                       "process on a shared 2-core machine misses deadlines", strict=False)


@pytest.mark.slow
@pytest.mark.parametrize("clock", ["lockstep", pytest.param("wall", marks=pytest.mark.exclusive),
                                   pytest.param("wall-not-realtime", marks=[pytest.mark.exclusive,
                                                                            _WALL_NOT_REALTIME])])
def test_geared_ur20_completes_on_both_clocks(tmp_path, clock, capsys):
    cfg = UR20 / "ur20_odrive_geared.toml"
    assert main(["check", str(cfg)]) == 0
    out = tmp_path / clock
    more = REALTIME if clock == "wall" else []
    watch = CpuWatch(probe=True, cpus=LOOP_CPU) if clock == "wall" else None
    rc = main(["run", str(cfg), "-o", str(out), "--no-plots", "--no-progress", "--set",
               f'loop.clock="{clock.split("-")[0]}"', *more])
    text = capsys.readouterr().out
    if clock == "wall" and "not applied" in text:
        watch.close()
        pytest.skip(f"environment: a real-time setting could not be applied here: {text[-400:]}")
    if watch is not None:
        # a failed run or more than 1 % of the deadlines missed fails the test, unless other
        # processes or the machine's own stalls are measured to explain it (tests/serve_process.py;
        # a SCHED_FIFO loop still waits for the interpreter lock held by a descheduled thread)
        wall_clock_verdict(rc, out, watch, "geared UR20 at 400 Hz, real-time loop", detail=text[-600:],
                           missed_fraction_max=0.01)
    assert rc == 0, text
    assert "COMPLETED" in text
    log = np.load(out / "log.npy")
    assert np.max(np.abs(log["err[shoulder]"])) < 0.01         # rad: it follows, it does not fall


#: shipped emulated runs on the wall clock with the real-time settings: (config, an error column,
#: its bound).  Issue 38: the Stewart platform on six emulated ODrive axes holds 1 kHz (its axes
#: step the plant once per firmware control tick there, 8 kHz: a plant step for every frame made
#: it stop on its overrun rule within a second, 114 of 977 deadlines missed, load 5; with the tick
#: 0, 1 and 4 of 9 502 missed at loads of 2.1-3.7); the Dynamixel arm at 500 Hz (its servos served
#: in the loop's thread: their own thread answered late behind the SCHED_FIFO loop, 113 of 219
#: missed; inline 2 and 4 of 1 252 at a load of 10.5); CiA 402 at 500 Hz (0 of 1 002).  Not here
#: yet: the ODrive ASCII arm at 200 Hz held 0 missed in 15 runs of 16, one ended at enable (cause
#: not captured; its enable does not feed the axes' 0.1 s watchdog)
_WALL_RUNS = [("stewart_motion", "err[z]", 0.005), ("dxl_3dof_arm", "err[shoulder]", 0.05),
              ("3rrr_circle_cia402", "err[x]", 0.005)]


@pytest.mark.slow
@pytest.mark.exclusive
@pytest.mark.parametrize("name, column, bound", _WALL_RUNS, ids=[r[0] for r in _WALL_RUNS])
def test_emulated_runs_hold_their_rate_on_the_wall_clock_with_the_real_time_settings(tmp_path, capsys, name,
                                                                                     column, bound):
    cfg = ROOT / "hil_configs" / "runs" / f"{name}.toml"
    out = tmp_path / "wall"
    watch = CpuWatch(probe=True, cpus=LOOP_CPU)
    rc = main(["run", str(cfg), "-o", str(out), "--no-plots", "--no-progress", "--duration", "2",
               "--set", 'loop.clock="wall"', *REALTIME])
    text = capsys.readouterr().out
    if "not applied" in text:
        watch.close()
        pytest.skip(f"environment: a real-time setting could not be applied here: {text[-400:]}")
    wall_clock_verdict(rc, out, watch, f"{name} on the wall clock, real-time loop", detail=text[-600:],
                       missed_fraction_max=0.01)
    assert rc == 0 and "COMPLETED" in text, text
    log = np.load(out / "log.npy")
    assert np.max(np.abs(log[column])) < bound      # it tracks
