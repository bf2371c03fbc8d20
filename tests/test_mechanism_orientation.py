"""Orientation task coordinates of a mechanism file (``coordinates = ["alpha", "beta", "gamma"]``:
the Euler angles of the task frame, R = Rz(gamma) Ry(beta) Rx(alpha)), on the 3-UPS/S
orientation platform (hil_configs/robots/ups_orientation.toml: 12 joint coordinates, 9
closure equations, three actuated legs), checked against what was not derived with them:

* the angles against :func:`dynamics.stewart.rotation_matrix` of the platform's frame composed
  in numpy (:meth:`MechanismModel.body_frames`) and against the platform's spherical joint
  (ZYX axes: its coordinates are (gamma, beta, alpha));
* the task Jacobian against finite differences of the forward kinematics, and its angle rows
  against the platform's angular velocity through the Euler-rate matrix
  (:func:`dynamics.stewart.euler_rate_matrix`, omega = E(X) Xd);
* IK/FK round trips, and a target 2 pi away (one pose: the residual wrapped);
* task-space inverse dynamics (IK, task_gamma) against joint-space inverse dynamics on the
  same motion (q(t) by IK, its rates by central differences);
* a wrench conjugate to the task coordinates against the moment it stands for (E^T m);
* energy/power balance along an RK4 trajectory of the forward dynamics;
* the Euler angles' singularity (beta -> pi/2) with an orientation offset, and bad files.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.config import read_toml
from dynamics.errors import ConfigError, UnreachableError
from dynamics.stewart import euler_rate_matrix, rotation_matrix

try:
    from tests.test_mechanism import assert_passivity, rk4_energy_balance, run_shipped_task_run
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from test_mechanism import assert_passivity, rk4_energy_balance, run_shipped_task_run

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ROOT / "hil_configs" / "robots"
FILE = ROBOTS / "ups_orientation.toml"


@pytest.fixture(scope="module")
def ups():
    return load_model(FILE)


def _poses(rng, k, amp=(0.2, 0.2, 0.25)):
    return [rng.uniform(-np.asarray(amp), amp) for _ in range(k)]


def test_task_angles_are_the_euler_angles_of_the_platform_frame(ups):
    assert ups.task_layout == "orientation" and ups.task_dof == 3
    rng = np.random.default_rng(4201)
    for _ in range(10):
        q = ups.home_q + rng.uniform(-0.03, 0.03, 3)
        X = ups.forward_kinematics_task(q)
        z = ups.configuration(q)
        R = ups.body_frames(z)["platform"][:3, :3]
        np.testing.assert_allclose(rotation_matrix(X), R, rtol=0, atol=1e-12)
        np.testing.assert_allclose(ups.forward_kinematics(q)[:3, :3], R, rtol=0, atol=1e-12)
        np.testing.assert_allclose(z[:3], X[::-1], rtol=0, atol=1e-12)   # the ZYX spherical joint
        assert np.max(np.abs(X)) > 0.02                                    # it turned


def test_task_jacobian_against_finite_differences_and_the_angular_velocity(ups):
    rng = np.random.default_rng(4202)
    h = 1e-6
    for X in _poses(rng, 6):
        q = ups.inverse_kinematics(X)
        Jfd = np.stack([(ups.forward_kinematics_task(q + h * e) - ups.forward_kinematics_task(q - h * e))
                        / (2 * h) for e in np.eye(3)], axis=1)
        J = ups.task_jacobian(q, X)
        np.testing.assert_allclose(J, Jfd, rtol=0, atol=1e-7)
        # omega = E(X) Xd: the platform's angular velocity (the twist Jacobian's rows)
        np.testing.assert_allclose(ups.jacobian(q)[3:], euler_rate_matrix(X) @ J, rtol=0, atol=1e-10)


def test_ik_fk_round_trip_and_a_target_two_pi_away(ups):
    rng = np.random.default_rng(4203)
    for X in _poses(rng, 15):
        q = ups.inverse_kinematics(X)
        np.testing.assert_allclose(ups.forward_kinematics_task(q), X, rtol=0, atol=1e-11)
        lo, hi = ups.limits.position_min, ups.limits.position_max
        assert np.all((q > lo) & (q < hi))
    X = np.array([0.1, -0.05, 0.15])
    q = ups.inverse_kinematics(X)
    for k in (1, -1):           # the same pose: wrapped residual, continuation the short way
        np.testing.assert_allclose(ups.inverse_kinematics(X + [0.0, 0.0, 2 * np.pi * k]), q, atol=1e-12)
        np.testing.assert_allclose(ups.inverse_kinematics(X + [2 * np.pi * k, 0.0, 0.0]), q, atol=1e-12)


def test_task_inverse_dynamics_matches_joint_space_on_the_same_motion(ups):
    """X(t) = X0 + a sin(w t): task-space ID (IK, zd and zdd from the task equations with
    task_gamma) against joint-space ID at q(t) = IK(X(t)) with its rates by central differences."""
    a, w, X0 = np.array([0.15, -0.1, 0.2]), np.array([3.0, 4.0, 5.0]), np.array([0.02, 0.0, -0.05])

    def X_at(t):
        return X0 + a * np.sin(w * t)

    h = 1e-4
    for t in (0.1, 0.37, 0.8):
        X, Xd, Xdd = X_at(t), a * w * np.cos(w * t), -a * w * w * np.sin(w * t)
        out = ups.task_inverse_dynamics(X, Xd, Xdd, full=True)
        qs = [ups.inverse_kinematics(X_at(t + k * h)) for k in (-2, -1, 0, 1, 2)]
        qd = (qs[0] - 8 * qs[1] + 8 * qs[3] - qs[4]) / (12 * h)
        qdd = (-qs[0] + 16 * qs[1] - 30 * qs[2] + 16 * qs[3] - qs[4]) / (12 * h * h)
        np.testing.assert_allclose(out["q"], qs[2], atol=1e-12)
        np.testing.assert_allclose(out["qd"], qd, atol=1e-8)
        np.testing.assert_allclose(out["qdd"], qdd, atol=1e-5)
        tau = ups.inverse_dynamics(qs[2], qd, qdd)
        np.testing.assert_allclose(out["tau"], tau, rtol=1e-6, atol=1e-5)
        assert np.max(np.abs(tau - ups.gravity(qs[2]))) > 0.2       # the motion matters (0.25-0.43 N)
        np.testing.assert_allclose(ups.task_inverse_dynamics(X, Xd, Xdd), out["tau"], atol=1e-9)


def test_task_laws_take_the_orientation_error_by_the_models_convention(ups):
    """The task-space laws on the orientation platform: its Euler convention (the Stewart
    platform's), and a tracking error that is the rotation between the orientations, so a
    reference 2 pi away in alpha is no error and a large one is the geodesic angle."""
    from controller.laws import Ref, State, TaskComputedTorque

    ctrl = TaskComputedTorque(ups, [100.0] * 3, [20.0] * 3)
    assert ctrl.rotation is rotation_matrix and ctrl.rate_matrix is euler_rate_matrix
    X = np.asarray(ups.home_pose, float) + [0.1, -0.05, 0.15]
    q = ups.inverse_kinematics(X)

    st = State(0.0, q, np.zeros(3))
    z = np.zeros(3)
    e = ctrl.tracking_error(Ref(X + [2 * np.pi, 0.0, 0.0], z, z), st)
    assert np.allclose(e, 0.0, atol=1e-9)
    Xd = X + [0.3, 0.0, 0.4]
    e = ctrl.tracking_error(Ref(Xd, z, z), st)
    R_err = rotation_matrix(Xd) @ rotation_matrix(X).T
    angle = np.arccos((np.trace(R_err) - 1) / 2)
    assert np.linalg.norm(euler_rate_matrix(X) @ e) == pytest.approx(angle, rel=1e-9)


def test_wrench_conjugate_to_the_task_coordinates(ups):
    """A task-coordinate wrench w (3,) is the moment m with w = E(X)^T m (omega = E Xd)."""
    rng = np.random.default_rng(4204)
    for X in _poses(rng, 4):
        q = ups.inverse_kinematics(X)
        m = rng.uniform(-2, 2, 3)
        w = euler_rate_matrix(X).T @ m
        zero = np.zeros(3)
        t3 = ups.inverse_dynamics(q, zero, zero, wrench=w)
        t6 = ups.inverse_dynamics(q, zero, zero, wrench=np.concatenate([np.zeros(3), m]))
        np.testing.assert_allclose(t3, t6, rtol=0, atol=1e-9)
        assert np.max(np.abs(t3 - ups.gravity(q))) > 1.0


def test_energy_balance_along_a_simulated_trajectory(ups):
    dE, work, q, qd = rk4_energy_balance(ups, lambda t, g0: g0 + np.array(
        [1.5 * np.sin(9 * t), -1.2 * np.sin(7 * t + 0.5), 1.0 * np.sin(5 * t + 1.0)]))
    assert np.max(np.abs(qd)) > 0.01          # it moved [m/s]
    assert abs(work) > 1e-3
    assert abs(dE - work) < 1e-7 * abs(work) + 1e-12, (dE, work)
    assert_passivity(ups, q, qd)


# ------------------------------------------------------------------ orientation offset
@pytest.fixture(scope="module")
def tilted(tmp_path_factory):
    """The platform with its task frame turned by Ry(pi/2 - 0.4) Rz... (``orientation =
    [0, pi/2 - 0.4, 3.0]``): beta 0.4 rad from the Euler singularity, gamma near pi.  Derived
    in a temporary cache and run without compiling (numba's JIT off: a few calls)."""
    import numba

    mp = pytest.MonkeyPatch()
    mp.setenv("TORQUELOOP_MECHANISM_CACHE", str(tmp_path_factory.mktemp("cache")))
    mp.setattr(numba.config, "DISABLE_JIT", True)
    try:             # (the model keeps its plain-Python kernels; the settings end here)
        d = copy.deepcopy(read_toml(FILE))
        d["task"]["orientation"] = [0.0, np.pi / 2 - 0.4, 3.0]
        return load_model(d, file="tilted.toml")
    finally:
        mp.undo()


def test_orientation_offset_and_the_euler_singularity(ups, tilted):
    off = rotation_matrix([0.0, np.pi / 2 - 0.4, 3.0])
    np.testing.assert_allclose(rotation_matrix(tilted.home_pose), off, atol=1e-8)   # (the file's 9 digits)
    q = ups.home_q + np.array([0.02, -0.01, 0.015])
    R = ups.forward_kinematics(q)[:3, :3]
    X = tilted.forward_kinematics_task(q)
    np.testing.assert_allclose(rotation_matrix(X), R @ off, rtol=0, atol=1e-12)
    np.testing.assert_allclose(tilted.forward_kinematics(q)[:3, :3], R @ off, rtol=0, atol=1e-12)
    np.testing.assert_allclose(tilted.inverse_kinematics(X), q, atol=1e-11)
    # the Euler singularity: the measures fall with cos(beta); at beta = pi/2 singular, and said so
    reps = []
    for eps in (1e-1, 1e-2, 1e-3):
        Xs = np.array([0.0, np.pi / 2 - eps, 3.0])
        rep = tilted.singularity(tilted.inverse_kinematics(Xs))
        assert rep.extra["task_euler_measure"] == pytest.approx(np.sin(eps), rel=1e-6)
        reps.append(rep)
    m1 = [r.extra["type1_measure"] for r in reps]
    assert m1[1] < m1[0] and m1[2] < 0.2 * m1[1], m1          # (~ cos(beta) once it dominates)
    mg = [r.margin for r in reps]
    assert mg[1] < mg[0] and mg[2] < 0.2 * mg[1], mg
    qs = tilted.inverse_kinematics([0.0, np.pi / 2 - 1e-3, 3.0])
    qs2 = tilted.inverse_kinematics([0.0, np.pi / 2 - 2e-3, 3.0])
    q90 = qs + (qs - qs2)            # beta = pi/2 to first order: cos(beta) ~ 1e-6
    rep = tilted.singularity(q90)
    assert rep.kind in ("type1", "both") and "Euler angles" in rep.extra["note"], rep
    assert rep.extra["task_euler_measure"] < 1e-5


def test_the_type2_note_names_a_spherical_joint_near_its_euler_singularity(ups):
    """A type-2 error's note reads the passive spherical joints' middle Euler angles at the last
    forward kinematics solution (the warm start kept in the model array)."""
    L, n = ups._L, ups._n
    ups.configuration(ups.home_q + 0.05)
    z0 = ups._D[L.O_WARM:L.O_WARM + n].copy()
    name, i = next((jn, i) for jn, i in ups.spec.euler if i not in ups.spec.actuated)
    assert ups._euler_note() == ""
    z = z0.copy()
    z[i] = np.pi / 2 - 0.01                    # |cos| = 0.01 < 0.05
    try:
        ups._rewind_continuation(z)
        assert repr(name) in ups._euler_note()
    finally:
        ups._rewind_continuation(z0)


def test_euler_singularity_at_home_is_refused(tmp_path, monkeypatch):
    import numba

    monkeypatch.setenv("TORQUELOOP_MECHANISM_CACHE", str(tmp_path))
    monkeypatch.setattr(numba.config, "DISABLE_JIT", True)
    d = copy.deepcopy(read_toml(FILE))
    d["task"]["orientation"] = [0.0, 1.4, 0.0]
    with pytest.raises(ConfigError) as ei:
        load_model(d, file="ups.toml")
    assert ei.value.file == "ups.toml" and ei.value.field == "task.coordinates"
    assert "Euler angles" in str(ei.value)


# ------------------------------------------------------------------ bad files
def _bad(name, mutate):
    data = copy.deepcopy(read_toml(ROBOTS / name))
    mutate(data)
    with pytest.raises(ConfigError) as ei:
        load_model(data, file="robot.toml")
    assert ei.value.file == "robot.toml"
    return ei.value


@pytest.mark.parametrize("name, task, field, words", [
    ("fivebar_leg.toml", {"coordinates": ["x", "alpha"]}, "task.coordinates", "spatial mechanism"),
    ("fivebar_leg.toml", {"orientation": [0.0, 0.0, 0.1]}, "task.orientation", "planar"),
    ("ups_orientation.toml", {"coordinates": ["alpha", "alpha", "gamma"]}, "task.coordinates", "distinct"),
    ("ups_orientation.toml", {"coordinates": ["gamma", "beta", "alpha"]}, "task.coordinates", "order"),
    ("ups_orientation.toml", {"coordinates": ["alpha", "beta", "phi"]}, "task.coordinates", "planar mechanism"),
    ("ups_orientation.toml", {"orientation": [0.0, 0.1]}, "task.orientation", "3"),
])
def test_bad_task_coordinates_name_the_file_and_field(name, task, field, words):
    err = _bad(name, lambda d: d["task"].update(task))
    assert err.field == field and words in str(err), str(err)



    """hil_configs/runs/ups_orientation.toml (emulated ODrive CAN, +10 % plant, more friction)
    completes; its task axes are the three angles, reported as orientation error."""
    metrics, rms = run_shipped_task_run("ups_orientation.toml", [(a, "angular") for a in ("alpha", "beta", "gamma")])
    assert np.all(rms < 4e-3), rms                          # measured 1.24, 0.89, 0.75 mrad
    assert metrics["rms_orientation_error_rad"] == pytest.approx(np.sqrt(np.sum(rms ** 2)), rel=1e-9)
    assert metrics["max_orientation_error_rad"] < 6e-3   # measured 2.4 mrad
    assert "rms_position_error_m" not in metrics         # no position axes
