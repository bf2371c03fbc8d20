"""The compiled PD + gravity, task-space PD + gravity and PID laws (controller._law_kernels)
against the same laws written with numpy: equal to rounding on random states for every
option, the numpy path still reachable, and the model's own errors still raised.

Parity tests: "the same laws written with numpy" are the product's own numpy path of
controller.laws (forced on the same objects), not a test-side derivation. The independent
checks of the laws: ``test_ctrl_laws.py::test_pd_gravity_converges_to_setpoint``,
``test_ctrl_laws.py::test_pid_anti_windup_bounded``,
``test_ctrl_laws.py::test_pid_gravity_feedforward_and_shapes`` and
``test_ctrl_laws.py::test_joint_ct_and_pd_gravity_on_real_3rrr_vertical`` (closed-loop
behaviour on simulated plants), with the models' gravity checked against Pinocchio
(``test_serial_pinocchio.py::test_rnea_crba_aba_gravity``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.laws import PID, PDGravity, Ref, Saturation, State, TaskPDGravity, gravity_feedforward
from dynamics import load_model
from dynamics.errors import TorqueloopError

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"


def _pair(cls, *args, **kw):
    """The same law twice: compiled, and with its compiled form disabled (the numpy law)."""
    a, b = cls(*args, **kw), cls(*args, **kw)
    b._compiled_args = lambda: None
    assert a.compiled_args is not None and b.compiled_args is None
    return a, b


def _rrr_state(model, rng):
    """Joint angles of a random pose near home (consistent with the model's FK)."""
    X = np.asarray(model.home_pose, float) + rng.normal(0, [0.01, 0.01, 0.05])
    return X, model.inverse_kinematics(X)


def _assert_agree(a, b, ta, tb):
    np.testing.assert_allclose(ta, tb, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a.last_error, b.last_error, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(a.last_saturated, b.last_saturated)


@pytest.mark.parametrize("robot", ["seed000_arm", "arm6_demo", "seed003_2r", "3rrr_vertical"])
def test_compiled_pd_gravity_matches_numpy_law(robot):
    """Joint-space PD + gravity on a serial chain (gravity by the model's kernels) and on the
    3RRR (bias at zero rate with the FK pose hint), friction none / measured / desired, with
    and without saturation."""
    model = load_model(ROBOTS / f"{robot}.toml")
    n = model.dof
    rrr = robot.startswith("3rrr")
    rng = np.random.default_rng(11)
    for friction in ("none", "measured", "desired"):
        for sat in (None, Saturation(np.full(n, 2.0))):
            a, b = _pair(PDGravity, model, kp=400.0, kd=40.0, saturation=sat, friction=friction)
            for i in range(20):
                q = _rrr_state(model, rng)[1] if rrr else rng.normal(size=n)
                state = State(0.001 * i, q, rng.normal(size=n))
                ref = Ref(q + rng.normal(0, 0.01, n), rng.normal(size=n), rng.normal(size=n))
                _assert_agree(a, b, a.compute(state.t_s, ref, state), b.compute(state.t_s, ref, state))
                if rrr:
                    np.testing.assert_array_equal(a.pose, b.pose)
            if sat is not None:
                assert np.any(a.last_saturated) or friction != "none"


@pytest.mark.parametrize("robot", ["3rrr_horizontal", "3rrr_vertical"])
def test_compiled_task_pd_gravity_matches_numpy_law(robot):
    model = load_model(ROBOTS / f"{robot}.toml")
    rng = np.random.default_rng(5)
    for friction in ("none", "measured"):
        for sat in (None, Saturation(model.limits.torque_max * 0.2)):
            a, b = _pair(TaskPDGravity, model, kp=[3000.0, 3000.0, 60.0], kd=[150.0, 150.0, 3.0],
                         saturation=sat, friction=friction)
            for i in range(30):
                X, q = _rrr_state(model, rng)
                state = State(0.001 * i, q, rng.normal(0, 0.5, 3))
                ref = Ref(X + rng.normal(0, 0.002, 3), rng.normal(0, 0.1, 3), rng.normal(0, 1.0, 3))
                _assert_agree(a, b, a.compute(state.t_s, ref, state), b.compute(state.t_s, ref, state))
                np.testing.assert_array_equal(a.pose, b.pose)


@pytest.mark.parametrize("robot", ["seed000_arm", "seed003_2r"])
def test_compiled_pid_equals_numpy_law(robot):
    """PID without a feed-forward and with the gravity of a serial chain, both anti-windup
    modes, with and without saturation and integral bound: the same numbers to the last bit."""
    model = load_model(ROBOTS / f"{robot}.toml")
    n = model.dof
    rng = np.random.default_rng(2)
    for ff in (None, gravity_feedforward(model)):
        for aw in ("clamp", "back_calculation"):
            for sat in (None, Saturation(np.full(n, 2.0))):
                for lim in (None, 0.5):
                    a, b = _pair(PID, kp=40.0, ki=np.linspace(5.0, 20.0, n), kd=4.0, n=n, feedforward=ff,
                                 saturation=sat, anti_windup=aw, integral_limit_nm=lim)
                    for i in range(30):
                        state = State(0.01 * i, rng.normal(size=n), rng.normal(size=n))
                        ref = Ref(rng.normal(0, 0.3, n), rng.normal(size=n), rng.normal(size=n))
                        ta, tb = a.compute(state.t_s, ref, state), b.compute(state.t_s, ref, state)
                        np.testing.assert_array_equal(ta, tb)
                        np.testing.assert_array_equal(a.last_error, b.last_error)
                        np.testing.assert_array_equal(a.last_saturated, b.last_saturated)
                        np.testing.assert_array_equal(a.integral_nm, b.integral_nm)
                        np.testing.assert_array_equal(a._aw, b._aw)


def test_pid_with_another_feedforward_stays_numpy():
    """A Python feed-forward, or the gravity of a parallel model (FK by continuation), has no
    compiled form; the compiled form is rebuilt when the feed-forward is replaced."""
    rrr = load_model(ROBOTS / "3rrr_vertical.toml")
    arm = load_model(ROBOTS / "seed000_arm.toml")
    assert PID(1.0, 1.0, 1.0, n=3, feedforward=gravity_feedforward(rrr)).compiled_args is None
    pid = PID(1.0, 1.0, 1.0, n=3, feedforward=lambda ref, state: np.ones(3))
    assert pid.compiled_args is None
    pid.feedforward = gravity_feedforward(arm)
    assert pid.compiled_args is not None and pid.compiled_args["has_grav"]


def test_replaced_gains_rebuild_the_compiled_law():
    model = load_model(ROBOTS / "seed003_2r.toml")
    a, b = _pair(PDGravity, model, kp=100.0, kd=10.0)
    c0 = a.compiled_args
    a.kp = b.kp = np.diag([300.0, 50.0])
    assert a.compiled_args is not c0
    state = State(0.0, np.array([0.3, -0.2]), np.array([0.1, 0.0]))
    ref = Ref(np.zeros(2), np.zeros(2), np.zeros(2))
    _assert_agree(a, b, a.compute(0.0, ref, state), b.compute(0.0, ref, state))


def _outcome(law, state, ref):
    try:
        return "value", np.isnan(law.compute(state.t_s, ref, state)).tolist()
    except TorqueloopError as err:
        return "error", type(err).__name__, str(err)


def _stretched(model, leg=0):
    """A pose with leg ``leg`` stretched (type-1 singular), by bisection along a ray from home."""
    A = model.base_joints[leg]
    d = -A / np.linalg.norm(A)
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        X = np.asarray(model.home_pose, float) + np.array([*(mid * d), 0.0])
        reach = np.linalg.norm(model.platform_joint_positions(X)[leg] - A)
        if reach < model.proximal.length[leg] + model.distal.length[leg]:
            lo = mid
        else:
            hi = mid
    return np.asarray(model.home_pose, float) + np.array([*(lo * d), 0.0])


def test_declined_steps_take_the_numpy_path_and_raise_the_models_errors():
    """NaN inputs and singular poses: the compiled law declines and the numpy law reports
    exactly what it reports without a compiled form (the model's error, or NaN torques)."""
    arm = load_model(ROBOTS / "seed000_arm.toml")
    rrr = load_model(ROBOTS / "3rrr_vertical.toml")
    Xs = _stretched(rrr)
    qs = rrr.inverse_kinematics(Xs)
    zero3 = np.zeros(3)
    nan_q = np.array([0.1, np.nan, 0.2])
    cases = [
        (PDGravity, (arm, 100.0, 10.0), {}, State(0.0, nan_q, zero3), Ref(zero3, zero3, zero3)),
        (PDGravity, (arm, 100.0, 10.0), {}, State(0.0, zero3, nan_q), Ref(zero3, zero3, zero3)),
        (PID, (10.0, 1.0, 1.0), {"n": 3, "feedforward": gravity_feedforward(arm)}, State(0.0, nan_q, zero3),
         Ref(zero3, zero3, zero3)),
        (PDGravity, (rrr, 100.0, 10.0), {"pose0": Xs}, State(0.0, qs, zero3), Ref(qs, zero3, zero3)),
        (PDGravity, (rrr, 100.0, 10.0), {}, State(0.0, nan_q, zero3), Ref(zero3, zero3, zero3)),
        (TaskPDGravity, (rrr, 100.0, 10.0), {"pose0": Xs}, State(0.0, qs, zero3), Ref(Xs, zero3, zero3)),
        (TaskPDGravity, (rrr, 100.0, 10.0), {}, State(0.0, rrr.home_q, nan_q), Ref(rrr.home_pose, zero3, zero3)),
    ]
    for cls, args, kw, state, ref in cases:
        a, b = _pair(cls, *args, **kw)
        oa, ob = _outcome(a, state, ref), _outcome(b, state, ref)
        assert oa == ob, (cls.__name__, oa, ob)
    # the singular 3RRR cases raise the model's singularity error
    assert _outcome(TaskPDGravity(rrr, 100.0, 10.0, pose0=Xs), State(0.0, qs, zero3),
                    Ref(Xs, zero3, zero3))[1] == "SingularityError"
