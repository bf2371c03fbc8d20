"""Run-config parsing and building (controller/app/run.py): validation, gain design, overrides."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from controller.app.run import build_run, design_gains, gain_report, load_run
from dynamics.errors import ConfigError

RUNS = Path(__file__).resolve().parents[1] / "hil_configs" / "runs"


def test_every_shipped_run_config_parses():
    for p in sorted(RUNS.glob("*.toml")):
        spec = load_run(p)
        assert spec.duration_s > 0 and spec.rate_hz > 0, p
        assert spec.trajectory.dim == (spec.model.task_dof if spec.space == "task" else spec.model.dof)


SHIPPED_RUNS = sorted([*RUNS.glob("*.toml"), *(RUNS.parent / "hardware").glob("*.toml"),
                       *(RUNS.parent / "rehearsal").glob("*_run.toml")])


@pytest.mark.parametrize("path", SHIPPED_RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_run_config_passes_the_start_up_validation(path):
    """What `check` and `run` refuse before enabling (feasibility, torque limits, bus budget,
    protections) must not refuse a shipped config: the ODrive ASCII template's move needed
    119 N m against its 60 N m limit, so it could never start."""
    from controller.app.run import validate_run

    spec = load_run(path)
    if not spec.hardware:
        validate_run(spec)
        return
    # a hardware config passes every check but the last: its calibration (torqueloop bringup)
    with pytest.raises(ConfigError) as ei:
        validate_run(spec)
    assert ei.value.field == "calibration" and "torqueloop bringup" in str(ei.value)


def test_lqr_and_place_designs_give_the_gains_python_control_reports():
    spec = load_run(RUNS / "3rrr_circle_direct.toml", overrides={
        "controller": {"kind": "task_computed_torque", "design": "lqr", "lqr": {"q_pos": 1.0e6, "q_vel": 0.0, "r": 1.0}}})
    d = design_gains(spec)
    # LQR on a double integrator with Q = diag(q, 0), R = 1: kp = sqrt(q), kd = sqrt(2 kp)
    np.testing.assert_allclose(d.kp, 1000.0, rtol=1e-9)
    np.testing.assert_allclose(d.kd, np.sqrt(2000.0), rtol=1e-9)
    law = build_run(spec).loop.controller
    np.testing.assert_allclose(np.diag(law.kp), 1000.0, rtol=1e-9)
    spec2 = load_run(RUNS / "3rrr_circle_direct.toml", overrides={
        "controller": {"kind": "task_computed_torque", "design": "place", "poles": [-30.0, -50.0]}})
    d2 = design_gains(spec2)
    np.testing.assert_allclose(d2.kp, 1500.0, rtol=1e-9)
    np.testing.assert_allclose(d2.kd, 80.0, rtol=1e-9)
    assert "poles" in gain_report(spec2)


@pytest.mark.parametrize("controller, field", [
    ({"kind": "pd_gravity", "design": "lqr", "lqr": {"q_pos": 1.0}}, "controller.design"),
    ({"kind": "task_computed_torque", "design": "place", "poles": [30.0, -50.0]}, "controller.poles"),
    ({"kind": "task_computed_torque", "kp": 100.0}, "controller.kd"),
    ({"kind": "task_computed_torque", "design": "wn_zeta", "wn_rad_s": 10.0, "kp": 1.0, "kd": 1.0}, "controller.kp"),
    ({"kind": "computed_torque", "wn_rad_s": -3.0}, "controller.wn_rad_s"),
    ({"kind": "task_pd_gravity", "wn_rad_s": 10.0, "friction_compensation": "desired"},
     "controller.friction_compensation"),
    ({"kind": "task_pd_gravity", "wn_rad_s": 10.0, "ki": 100.0}, "controller.ki"),
    ({"kind": "task_computed_torque", "wn_rad_s": 10.0, "ki": -1.0}, "controller.ki"),
])
def test_bad_controller_tables(controller, field):
    with pytest.raises(ConfigError) as ei:
        spec = load_run(RUNS / "3rrr_circle_direct.toml", overrides={"controller": controller})
        build_run(spec)
    assert field in str(ei.value) and "3rrr_circle_direct.toml" in str(ei.value)


def test_task_controller_needs_a_parallel_robot():
    with pytest.raises(ConfigError, match="controller.kind"):
        load_run(RUNS / "seed003_2r.toml", overrides={"controller.kind": "task_computed_torque"})


def test_pd_gravity_gain_analysis_reports_margins():
    text = gain_report(load_run(RUNS / "seed003_2r.toml"))
    assert "PM=" in text and "GM=" in text


def test_plant_starts_on_the_reference_and_offset_is_applied():
    spec = load_run(RUNS / "seed003_2r.toml", overrides={"driver.plant.initial_offset": [0.01, -0.02]})
    run = build_run(spec)
    try:
        q = run.plant.state.q
        np.testing.assert_allclose(q, np.asarray(spec.trajectory.sample(0.0).pos) + [0.01, -0.02], atol=1e-12)
    finally:
        run.close()


def test_integral_gain_reaches_the_task_law_and_the_gain_report():
    """ki with a wn/zeta design is used (not dropped) and reported with the third-order poles."""
    spec = load_run(RUNS / "3rrr_circle_direct.toml", overrides={
        "controller": {"kind": "task_computed_torque", "wn_rad_s": 30.0, "zeta": 1.0, "ki": 9000.0,
                       "integral_limit": 0.02}})
    law = build_run(spec).loop.controller
    np.testing.assert_allclose(np.diag(law.ki), 9000.0)
    d = design_gains(spec)
    # s^3 + 60 s^2 + 900 s + 9000: the poles python-control reports are its roots
    np.testing.assert_allclose(np.sort_complex(d.axes[0].poles),
                               np.sort_complex(np.roots([1.0, 60.0, 900.0, 9000.0])), rtol=1e-9)
    assert "ki=9000" in gain_report(spec)
    # unstable by Routh (ki > kp kd = 54000): visible in the report, no step simulated
    bad_spec = load_run(RUNS / "3rrr_circle_direct.toml", overrides={
        "controller": {"kind": "task_computed_torque", "wn_rad_s": 30.0, "ki": 60000.0}})
    bad = design_gains(bad_spec)
    assert np.any(bad.axes[0].poles.real > 0) and bad.axes[0].step["settling_time_s"] == np.inf
    assert "UNSTABLE" in gain_report(bad_spec) and "UNSTABLE" not in gain_report(spec)


def test_a_tune_table_is_validated_by_run_and_check():
    spec = load_run(RUNS / "3rrr_circle_tune.toml")          # runs like any config
    assert spec.controller.kind == "task_computed_torque"
    with pytest.raises(ConfigError) as ei:
        load_run(RUNS / "3rrr_circle_tune.toml", overrides={"tune.candidates": -3})
    assert "tune.candidates" in str(ei.value) and "3rrr_circle_tune.toml" in str(ei.value)


def test_loop_spin_s_reaches_the_wall_clock_and_bad_values_name_the_field():
    from controller.clock import WallClock

    path = RUNS / "3rrr_circle_direct.toml"
    spec = load_run(path, overrides={"loop.clock": "wall", "loop.spin_s": 5e-5})
    run = build_run(spec)
    try:
        assert isinstance(run.loop.clock, WallClock) and run.loop.clock.spin_s == 5e-5
    finally:
        run.close()
    assert load_run(path).spin_s == 2e-4                       # the default
    for bad in (-1e-6, float("nan"), "x", 2.0):
        with pytest.raises(ConfigError) as ei:
            load_run(path, overrides={"loop.spin_s": bad})
        assert ei.value.file == str(path) and ei.value.field == "loop.spin_s", bad


@pytest.mark.parametrize("cfg", sorted((Path(__file__).resolve().parents[1] / "hil_configs" / "hardware").glob("*.toml")),
                         ids=lambda p: p.stem)
def test_check_lists_what_a_hardware_template_needs_before_a_first_run(cfg):
    """``check`` on a hardware template lists the adapter, each joint's id, direction, zero,
    ratios and the first run's safety limits, with the values the file gives them (read here
    with tomllib), instead of a bare OK; a simulated config has no such list."""
    import tomllib

    from controller.app.commands import check
    from controller.app.run import FIRST_RUN_KEYS

    text = check(str(cfg))
    assert "before a first run on this robot" in text
    part = text.split("before a first run on this robot", 1)[1]
    data = tomllib.loads(cfg.read_text())["driver"]
    buses = [data["bus"]] if "bus" in data else list(data.get("buses", {}).values())
    for b in buses:
        assert f"interface = {b['interface']!r}, channel = {b['channel']!r}" in part
    if "port" in data:
        assert f"port = {data['port']!r}" in part
    ids = [k for _, keys, _ in FIRST_RUN_KEYS for k in keys if k in ("can_id", "node_id", "id", "axis")]
    for j in data["joints"]:
        key = next(k for k in ids if k in j)
        assert re.search(rf"joint {re.escape(j['name'])}: {key} = {j[key]!r}\n", part), (j["name"], key)
        assert f"joint {j['name']}: sign " in part
    assert "torqueloop bringup" in part and "[safety] limits of a first run" in part
    sim = check(str(cfg.parents[1] / "runs" / "3rrr_circle.toml"))
    assert "before a first run" not in sim and "\nplant: \n" not in sim


def test_the_first_run_keys_are_keys_of_the_hardware_drivers():
    """Every key the first-run list names is one a hardware driver type reads (a renamed key
    would silently drop out of the list)."""
    from controller.app.explain import driver_keys
    from controller.app.run import FIRST_RUN_KEYS
    from drivers.registry import DRIVER_TYPES

    read = set()
    for kind in DRIVER_TYPES:
        if not kind.startswith("sim_"):
            for keys in driver_keys(kind).values():
                read |= set(keys)
    named = {k for _, keys, _ in FIRST_RUN_KEYS for k in keys}
    assert named <= read, sorted(named - read)


# -- a rehearsal is its hardware template but for the README's list ------------------------------
_PAIRS = {"3rrr_mit_udp_run": "3rrr_mit_can_socketcan", "stewart_odrive_udp_run": "stewart_odrive_can_socketcan"}
#: tables that differ as a whole (their keys are one row of the README's table)
_WHOLE = ("driver.bus", "driver.buses", "driver.follow", "loop.realtime")


def _leaves(d, prefix=""):
    out = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_leaves(v, path + "."))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                out.update({f"{path}.{key}#{i}": val for key, val in _leaves(x).items()})
        else:
            out[path] = v
    return out


def _differing_keys(hardware: Path, rehearsal: Path) -> set[str]:
    from dynamics.config import read_toml

    a, b = _leaves(read_toml(hardware)), _leaves(read_toml(rehearsal))
    keys = set()
    for k in set(a) | set(b):
        if k in ("name", "description") or a.get(k, ...) == b.get(k, ...):
            continue
        k = k.split("#")[0]
        keys.add(next((w for w in _WHOLE if k == w or k.startswith(w + ".")), k))
    return keys


def _readme_rows() -> dict[str, set[str]]:
    text = (RUNS.parents[1] / "README.md").read_text()
    table = text.split("**What a rehearsal changes from its hardware template**", 1)[1].split("\n\n", 2)[1]
    rows: dict[str, set[str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows.setdefault(cells[0].strip("`"), set()).update(re.findall(r"`([\w.]+)`", cells[1]))
    return rows


@pytest.mark.parametrize("rehearsal", sorted(_PAIRS))
def test_a_rehearsal_differs_from_its_hardware_template_only_where_the_readme_says(rehearsal):
    hil = RUNS.parent
    got = _differing_keys(hil / "hardware" / f"{_PAIRS[rehearsal]}.toml", hil / "rehearsal" / f"{rehearsal}.toml")
    assert got == _readme_rows()[rehearsal]


@pytest.mark.parametrize("kind", ["sim_mit_can", "sim_odrive_can", "sim_cia402_can"])
def test_a_realtime_wall_clock_loop_serves_its_emulated_can_drives_in_its_thread(kind):
    """Under a SCHED_FIFO loop an emulator thread of ordinary priority would answer late: the
    devices are served inline, unless the config chooses (``serve``) or models a reply latency;
    a wall-clock loop without real-time settings keeps the emulator thread."""
    from controller.app.run import sim_driver_section

    def serve(table, realtime):
        sec = sim_driver_section({"type": kind, **table}, q0=[0.0], clock="wall", period_s=0.001,
                                 realtime=realtime)
        return sec.data.get("emulator", {}).get("serve")

    fifo = {"sched_fifo_priority": 80, "cpu": 1}
    assert serve({}, fifo) == "inline"
    assert serve({}, None) is None and serve({}, {"cpu": 1, "freeze_gc": True}) is None
    assert serve({"emulator": {"serve": "thread"}}, fifo) == "thread"
    assert serve({"emulator": {"reply_latency_s": 0.0002}}, fifo) is None


def test_emulated_odrive_axes_step_the_plant_once_per_firmware_tick_on_the_wall_clock():
    """On the wall clock every frame would otherwise bring the plant to the clock (a plant step
    each: the Stewart platform on six axes stopped on its overrun rule at 1 kHz); the ODrive
    firmware's control loop runs at 8 kHz and the emulated axes step the plant at most once a
    tick.  The lock-step clock, another protocol and a value of the config's own are unchanged."""
    from controller.app.run import sim_driver_section
    from drivers.sim.odrive_emulator import CONTROL_PERIOD_S

    def step_min(kind, clock, table=None):
        sec = sim_driver_section({"type": kind, **(table or {})}, q0=[0.0], clock=clock, period_s=0.001)
        return sec.data.get("emulator", {}).get("plant_step_min_s")

    assert CONTROL_PERIOD_S == 1.25e-4
    assert step_min("sim_odrive_can", "wall") == CONTROL_PERIOD_S
    assert step_min("sim_odrive_can", "lockstep") is None
    assert step_min("sim_mit_can", "wall") is None and step_min("sim_cia402_can", "wall") is None
    assert step_min("sim_odrive_can", "wall", {"emulator": {"plant_step_min_s": 0.0}}) == 0.0


def test_the_rehearsal_server_steps_its_odrive_plant_once_per_firmware_tick():
    """The two-process rehearsal's server runs on the wall clock: the same firmware-tick default."""
    from drivers.sim.odrive_emulator import CONTROL_PERIOD_S
    from drivers.sim.serve import build_server

    host = build_server(RUNS.parent / "rehearsal" / "stewart_odrive_udp_server.toml", start=False).host
    try:
        assert host.plant_step_min_s == CONTROL_PERIOD_S
    finally:
        host.close()


@pytest.mark.parametrize("kind", ["sim_dynamixel", "sim_odrive_ascii"])
def test_a_realtime_wall_clock_loop_serves_its_emulated_serial_devices_inline_with_the_wire_time_slept(kind):
    """The servos' thread answered late behind a SCHED_FIFO loop (dxl_3dof_arm at 500 Hz stopped on
    its overrun rule): served in the loop's thread, the wire time waited on the wall clock, counted
    on the lock-step clock; an ordinary wall-clock loop keeps the pseudo-terminal and thread."""
    from controller.app.run import sim_driver_section

    def emu(clock, realtime=None, table=None):
        sec = sim_driver_section({"type": kind, **(table or {})}, q0=[0.0], clock=clock,
                                 period_s=0.002, realtime=realtime)
        return sec.data.get("emulator", {})

    fifo = {"sched_fifo_priority": 80, "cpu": 1}
    assert emu("wall", fifo) == {"serve": "inline", "wire_time": "wait"}
    assert emu("lockstep") == {"serve": "inline", "wire_time": "count"}
    assert emu("wall") == {} and emu("wall", {"cpu": 1}) == {}
    assert emu("wall", fifo, {"emulator": {"serve": "thread"}}) == {"serve": "thread"}
