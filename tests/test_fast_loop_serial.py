"""The compiled offline loop for serial arms (joint-space computed torque,
controller._fast_loop.serial_computed_torque_seg) against the Python loop: bit-identical logs,
metrics and faults, also when a fault, a clip or the integrator hands the run back to Python
part-way; and the compiled law against the law written with numpy.

Parity tests: the Python loop and the numpy law are the product's other paths. The
independent checks: the computed-torque law in ``test_ctrl_laws.py`` (poles, decay rate,
exact tracking of a matched plant), the serial models' terms against Pinocchio in
``test_serial_pinocchio.py::test_rnea_crba_aba_gravity``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.telemetry import read_log
from test_fast_loop import _assert_same, _compiled_cycles  # the 3RRR tests' comparison of two runs

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"


def _run(tmp_path, config, compiled, overrides=None, name="run"):
    from controller.app.run import build_run, load_run

    spec = load_run(RUNS / config, overrides=overrides)
    out = tmp_path / f"{name}-{compiled}"
    run = build_run(spec, out_dir=out)
    run.loop.compiled = compiled
    res = run.execute()
    return res, read_log(out)


@pytest.mark.parametrize("config, overrides", [
    ("seed000_slow.toml", {"loop.duration_s": 3.0}),
    # 6-DOF Denavit-Hartenberg chain, friction compensation at the desired velocity, integral action
    ("seed004_square.toml", {"loop.duration_s": 2.0, "controller.friction_compensation": "desired",
                             "controller.ki": 200.0}),
])
def test_shipped_serial_runs_are_bit_identical(tmp_path, config, overrides):
    py = _run(tmp_path, config, False, overrides)
    fast = _run(tmp_path, config, True, overrides)
    _assert_same(py, fast)
    assert py[0].status == "completed"
    assert _compiled_cycles(py[0]) == 0
    assert _compiled_cycles(fast[0]) > 0.95 * fast[0].n_cycles


@pytest.mark.parametrize("overrides, cause", [
    ({"safety.tracking_error_max": 2e-3}, "tracking_error"),      # at 0.33 s
    ({"safety.velocity_max": 0.3}, "velocity_limit"),           # at 1.2 s
])
def test_fault_hands_back_to_python_identically(tmp_path, overrides, cause):
    over = {"loop.duration_s": 3.0, **overrides}
    py = _run(tmp_path, "seed000_slow.toml", False, over, cause)
    fast = _run(tmp_path, "seed000_slow.toml", True, over, cause)
    _assert_same(py, fast)
    assert py[0].status == "fault" and py[0].faults[0].cause == cause
    assert _compiled_cycles(fast[0]) > 50


def test_clipping_and_integrator_cycles_identical(tmp_path):
    """Controller saturation with conditional integration at the effective limit (the [safety]
    torque_max below the robot file's: the law saturates there since drive capability)."""
    over = {"loop.duration_s": 2.0, "controller.wn_rad_s": 60.0, "controller.ki": 500.0,
            "controller.friction_compensation": "measured", "safety.torque_max": [9.5, 200.0, 200.0]}
    py = _run(tmp_path, "seed000_slow.toml", False, over, "clip")
    fast = _run(tmp_path, "seed000_slow.toml", True, over, "clip")
    _assert_same(py, fast)
    at = np.abs(py[1]["tau_cmd"][:, 0]) >= 9.5 * (1 - 1e-12)
    assert np.any(at) and not np.all(at), "the limit never acted, or always"
    assert _compiled_cycles(fast[0]) > 100


@pytest.mark.parametrize("robot", ["seed000_arm", "arm6_demo", "seed003_2r"])
def test_compiled_serial_law_matches_numpy_law(robot):
    """The compiled law against the same law with numpy's matrix products (another summation
    order), with every option: friction at the measured / desired velocity, integral action
    with a bound, saturation with conditional integration."""
    from controller.laws import ComputedTorque, Ref, Saturation, State
    from dynamics import load_model

    model = load_model(ROOT / "hil_configs" / "robots" / f"{robot}.toml")
    n = model.dof
    rng = np.random.default_rng(7)
    for friction in ("none", "measured", "desired"):
        for ki in (None, 50.0):
            for sat in (None, Saturation(np.full(n, 2.0))):
                kw = dict(kp=400.0, kd=40.0, ki=ki, integral_limit=0.1 if ki else None, saturation=sat,
                          friction=friction)
                a, b = ComputedTorque(model, **kw), ComputedTorque(model, **kw)
                b._compiled_args = lambda: None        # the numpy law
                assert a.compiled_args is not None and b.compiled_args is None
                for i in range(20):
                    t = 0.001 * i
                    state = State(t, rng.normal(size=n), rng.normal(size=n))
                    ref = Ref(rng.normal(size=n), rng.normal(size=n), rng.normal(size=n))
                    ta, tb = a.compute(t, ref, state), b.compute(t, ref, state)
                    np.testing.assert_allclose(ta, tb, rtol=1e-12, atol=1e-11)
                    np.testing.assert_array_equal(a.last_error, b.last_error)
                    np.testing.assert_array_equal(a.last_saturated, b.last_saturated)
                    np.testing.assert_allclose(a.integral, b.integral, rtol=1e-12, atol=1e-15)


def test_nonfinite_state_takes_the_checked_path():
    """A NaN measurement: the compiled law declines and the Python law reports it as before."""
    from controller.laws import ComputedTorque, Ref, State
    from dynamics import load_model
    from dynamics.errors import TorqueloopError

    model = load_model(ROOT / "hil_configs" / "robots" / "seed000_arm.toml")
    a = ComputedTorque(model, kp=100.0, kd=20.0)
    b = ComputedTorque(model, kp=100.0, kd=20.0)
    b._compiled_args = lambda: None
    state = State(0.0, np.array([0.1, np.nan, 0.2]), np.zeros(3))
    ref = Ref(np.zeros(3), np.zeros(3), np.zeros(3))
    outcomes = []
    for law in (a, b):
        try:
            outcomes.append(("value", np.isnan(law.compute(0.0, ref, state)).tolist()))
        except TorqueloopError as err:
            outcomes.append(("error", type(err).__name__))
    assert outcomes[0] == outcomes[1]


def test_loop_built_from_objects_runs_compiled_and_refuses_a_robot_mismatch(tmp_path):
    """A loop built from Python objects (not a config) runs compiled; a plant of another kind
    of robot than the controller's model (a 3RRR plant under an arm's law) stays in Python.
    The controller's model may differ in its parameters (model mismatch is the normal case)."""
    from controller.clock import LockstepClock
    from controller.compiled import CompiledCycles
    from controller.laws import ComputedTorque
    from controller.loop import ControlLoop
    from controller.safety import SafetyConfig, SafetySupervisor
    from drivers.sim.direct import DirectPlantDriver
    from drivers.sim.plant import SimulatedPlant
    from dynamics import load_model
    from trajectories import point_to_point
    from trajectories.base import GridCache

    arm = load_model(ROOT / "hil_configs" / "robots" / "seed000_arm.toml")
    rrr = load_model(ROOT / "hil_configs" / "robots" / "3rrr_horizontal.toml")
    traj = point_to_point(np.zeros(3), np.array([0.2, -0.1, 0.1]), "quintic", duration_s=0.5)

    def loop_for(plant_model, q0):
        clock = LockstepClock()
        drv = DirectPlantDriver(SimulatedPlant(plant_model, q0=q0), now=clock.now)
        return ControlLoop(drv, ComputedTorque(arm, kp=400.0, kd=40.0), traj,
                           SafetySupervisor(SafetyConfig(), arm.limits, model=arm), clock, period_s=1e-3,
                           handle_signals=False)

    loop = loop_for(arm.scaled(1.1), np.zeros(3))
    fast, why = CompiledCycles.for_loop(loop, GridCache(traj, 1e-3), None)
    assert fast is not None and why == "" and fast.kind == "serial"
    res = loop.run()
    assert res.status == "completed" and _compiled_cycles(res) > 400

    other = loop_for(rrr, rrr.inverse_kinematics(rrr.home_pose))
    fast, why = CompiledCycles.for_loop(other, GridCache(traj, 1e-3), None)
    assert fast is None and "different robots" in why
