"""Universal and spherical joints of mechanism files (``type = "universal" | "spherical"``,
dynamics/mechanism.py), checked against what does not use them:

* the same mechanism written with the equivalent chain of revolute joints and massless
  intermediate bodies (:func:`as_revolute_chain`, written here from the file format's
  definition of the two joints): a spatial crank with a spherical and a universal joint in its
  tree and a spatial revolute closure (:func:`rsur`, 6 coordinates, cheap to derive), and the
  delta robot with universal elbows (hil_configs/robots/delta_universal.toml) against the
  shipped delta_pick.toml (slow: two 12-coordinate derivations); ID, FD, IK, Jacobians,
  multipliers and energies to 1e-10 on random states;
* energy/power balance along an RK4 trajectory, and finite differences of the task,
  geometric and closure Jacobians (the crank);
* the MuJoCo plant runs delta_universal.toml in tests/test_mujoco_plant.py (its hinges) and
  the crank's spatial revolute closure in tests/test_mjcf_spatial_closure.py; the ball joint of
  the MJCF writer against the model's forward kinematics here;
* bad input: ConfigError naming the file and the field (a table of mutations and a
  hypothesis property over non-orthogonal axes).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamics import load_model
from dynamics.config import read_toml
from dynamics.errors import ConfigError

try:
    from tests.test_mechanism import assert_passivity, rk4_energy_balance
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from test_mechanism import assert_passivity, rk4_energy_balance

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ROOT / "hil_configs" / "robots"
TOL = 1e-10
ZYX = [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]     # the file format's default


def _rod(m, v, extra=1e-7):
    """[Ixx, Iyy, Izz, Ixy, Iyz, Izx] of a thin rod of mass m along v (plus a small isotropic part)."""
    v = np.asarray(v, dtype=float)
    L = np.linalg.norm(v)
    n = v / L
    I = m * L * L / 12 * (np.eye(3) - np.outer(n, n)) + extra * np.eye(3)
    return [I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[1, 2], I[2, 0]]


AB = [0.02, 0.06, 0.08]          # the coupler, crank pin to rocker pin, at zero angles [m]


def rsur():
    """A spatial crank-rocker: ground -R (driven, about z)- crank -S- coupler -U- rocker, the rocker
    closed to the ground by a spatial revolute closure (about x, 5 equations); 6 coordinates,
    mobility 1.  All angles zero close the loop; the task is the rocker pin's height."""
    return {"name": "rsur", "type": "mechanism", "planar": False, "gravity": [0.0, 0.0, -9.81],
            "bodies": [
                {"name": "crank", "mass": 0.05, "com": [0.02, 0.0, 0.0], "inertia": _rod(0.05, [0.04, 0, 0])},
                {"name": "coupler", "mass": 0.03, "com": [0.01, 0.03, 0.04], "inertia": _rod(0.03, AB)},
                {"name": "rocker", "mass": 0.04, "com": [0.0, -0.03, 0.0], "inertia": _rod(0.04, [0, 0.06, 0])}],
            "joints": [
                {"name": "crank", "type": "revolute", "parent": "ground", "child": "crank",
                 "origin": [0.0, 0.0, 0.0], "axis": [0.0, 0.0, 1.0], "home": 0.0, "actuated": True,
                 "rotor_inertia": 1e-5, "viscous": 0.001},
                {"name": "ball", "type": "spherical", "parent": "crank", "child": "coupler",
                 "origin": [0.04, 0.0, 0.0], "home": [0.0, 0.0, 0.0]},
                {"name": "cross", "type": "universal", "parent": "coupler", "child": "rocker", "origin": AB,
                 "axes": [[1.0, 0.0, 0.0], [0.0, 0.8, -0.6]], "home": [0.0, 0.0]}],
            "loops": [{"name": "pivot", "type": "revolute", "body_a": "rocker", "point_a": [0.0, -0.06, 0.0],
                       "body_b": "ground", "point_b": [0.06, 0.0, 0.08],
                       "axis_a": [1.0, 0.0, 0.0], "axis_b": [1.0, 0.0, 0.0]}],
            "task": {"body": "rocker", "point": [0.0, 0.0, 0.0], "coordinates": ["z"]}}


#: the limits and drive fields of an actuated joint
DRIVE_KEYS = ("position_min", "position_max", "velocity_max", "torque_max", "rotor_inertia", "gear_ratio",
              "viscous", "coulomb")


def as_revolute_chain(data):
    """The mechanism with each universal / spherical joint replaced by its definition: revolute
    joints about its axes (the first in the parent frame, each next one in the frame the
    previous turned, as every body frame equals its parent's at zero angles), joined by
    massless bodies, the coordinates named ``joint.1``, ``joint.2``(, ``joint.3``); an actuated
    joint's revolutes actuated, each with its coordinate's limits and drive data."""
    d = copy.deepcopy(data)
    joints = []
    for jt in d["joints"]:
        if jt["type"] not in ("universal", "spherical"):
            joints.append(jt)
            continue
        axes = jt.get("axes", ZYX)
        home = list(jt["home"])
        parent = jt["parent"]
        for k, a in enumerate(axes):
            last = k == len(axes) - 1
            child = jt["child"] if last else f"{jt['name']}_link{k + 1}"
            if not last:
                d["bodies"].append({"name": child, "mass": 0.0, "com": [0.0, 0.0, 0.0], "inertia": [0.0] * 6})
            rev = {"name": f"{jt['name']}.{k + 1}", "type": "revolute", "parent": parent,
                   "child": child, "origin": jt["origin"] if k == 0 else [0.0, 0.0, 0.0],
                   "axis": list(a), "home": home[k]}
            # an actuated joint: each revolute actuated, with its coordinate's limits and drive
            # (a number applies to every coordinate, a list gives one each)
            for key in ("actuated",) + DRIVE_KEYS:
                if key in jt:
                    rev[key] = jt[key][k] if isinstance(jt[key], list) else jt[key]
            joints.append(rev)
            parent = child
    d["joints"] = joints
    d["name"] = d["name"] + "_chain"
    return d


def assert_same_model(a, b, rng, span, k=10):
    """a and b agree to TOL on random actuated states within ``span`` of home."""
    assert a.all_joint_names == b.all_joint_names or len(a.all_joint_names) == len(b.all_joint_names)
    np.testing.assert_allclose(a.home_configuration, b.home_configuration, rtol=0, atol=TOL)
    na = a.dof
    for _ in range(k):
        q = a.home_q + rng.uniform(-span, span, na)
        qd, qdd, tau = rng.normal(size=na), 5 * rng.normal(size=na), 0.5 * rng.normal(size=na)
        za, zb = a.configuration(q), b.configuration(q)
        np.testing.assert_allclose(za, zb, rtol=0, atol=TOL)
        X = a.forward_kinematics_task(q)
        np.testing.assert_allclose(b.forward_kinematics_task(q), X, rtol=0, atol=TOL)
        np.testing.assert_allclose(a.forward_kinematics(q), b.forward_kinematics(q), rtol=0, atol=TOL)
        np.testing.assert_allclose(a.inverse_configuration(X), b.inverse_configuration(X), rtol=0, atol=TOL)
        np.testing.assert_allclose(a.inverse_kinematics(X), q, rtol=0, atol=TOL)
        np.testing.assert_allclose(a.task_jacobian(q), b.task_jacobian(q), rtol=0, atol=TOL)
        np.testing.assert_allclose(a.jacobian(q), b.jacobian(q), rtol=0, atol=TOL)
        np.testing.assert_allclose(a.constraint_jacobian(za), b.constraint_jacobian(zb), rtol=0, atol=TOL)
        np.testing.assert_allclose(a.mass_matrix(q), b.mass_matrix(q), rtol=0, atol=TOL)
        np.testing.assert_allclose(a.coriolis_matrix(q, qd), b.coriolis_matrix(q, qd), rtol=0, atol=TOL)
        ta, la = a.inverse_dynamics_multipliers(q, qd, qdd)
        tb, lb = b.inverse_dynamics_multipliers(q, qd, qdd)
        np.testing.assert_allclose(ta, tb, rtol=0, atol=TOL)
        np.testing.assert_allclose(la, lb, rtol=0, atol=TOL)
        np.testing.assert_allclose(a.forward_dynamics(q, qd, tau), b.forward_dynamics(q, qd, tau),
                                   rtol=0, atol=TOL * max(1.0, np.max(np.abs(a.forward_dynamics(q, qd, tau)))))
        assert abs(a.kinetic_energy(q, qd) - b.kinetic_energy(q, qd)) < TOL
        assert abs(a.potential_energy(q) - b.potential_energy(q)) < TOL
        Xd, Xdd = a.task_jacobian(q) @ qd, rng.normal(size=a.task_dof)
        np.testing.assert_allclose(a.task_inverse_dynamics(X, Xd, Xdd), b.task_inverse_dynamics(X, Xd, Xdd),
                                   rtol=0, atol=TOL)
        sa, sb = a.singularity(q), b.singularity(q)
        assert sa.kind == sb.kind and abs(sa.margin - sb.margin) < 1e-9


@pytest.fixture(scope="module")
def crank():
    return load_model(rsur(), file="rsur.toml")


@pytest.fixture(scope="module")
def crank_chain():
    return load_model(as_revolute_chain(rsur()), file="rsur_chain.toml")


# ------------------------------------------------------------------------- the spatial crank
def test_spherical_and_universal_joints_equal_their_revolute_chains(crank, crank_chain):
    assert crank.all_joint_names == ("crank", "ball.1", "ball.2", "ball.3", "cross.1", "cross.2")
    assert crank.all_joint_names == crank_chain.all_joint_names
    assert_same_model(crank, crank_chain, np.random.default_rng(4141), 0.6)
    # the states moved every passive coordinate (each joint's axes were exercised)
    z = crank.configuration(crank.home_q + 0.6)
    assert np.min(np.abs(z[1:])) > 1e-3, z


def test_crank_energy_balance_and_jacobians_against_finite_differences(crank):
    """RK4 on the crank angle (closures re-solved at every stage): the change of T + V equals
    the drive's work; the Jacobians equal central differences of FK and of the closures."""
    dE, work, q, qd = rk4_energy_balance(crank, lambda t, g0: g0 + np.array([0.003 * np.sin(9 * t)]))
    assert np.max(np.abs(qd)) > 0.3 and abs(work) > 1e-5
    assert abs(dE - work) < 1e-7 * abs(work) + 1e-12, (dE, work)
    assert_passivity(crank, q, qd)
    h = 1e-6
    rng = np.random.default_rng(4142)
    for _ in range(5):
        q = crank.home_q + rng.uniform(-0.6, 0.6, 1)
        e = np.ones(1)
        Jfd = (crank.forward_kinematics_task(q + h * e) - crank.forward_kinematics_task(q - h * e)) / (2 * h)
        np.testing.assert_allclose(crank.task_jacobian(q)[:, 0], Jfd, rtol=0, atol=1e-8)
        Tp, Tm, T = crank.forward_kinematics(q + h * e), crank.forward_kinematics(q - h * e), crank.forward_kinematics(q)
        J6 = crank.jacobian(q)
        np.testing.assert_allclose(J6[:3, 0], (Tp[:3, 3] - Tm[:3, 3]) / (2 * h), atol=1e-8)
        W = (Tp[:3, :3] - Tm[:3, :3]) / (2 * h) @ T[:3, :3].T
        np.testing.assert_allclose(J6[3:, 0], [W[2, 1], W[0, 2], W[1, 0]], atol=1e-8)
        z = crank.configuration(q)
        Pfd = np.stack([(crank.constraints(z + h * e) - crank.constraints(z - h * e)) / (2 * h)
                        for e in np.eye(z.size)], axis=1)
        np.testing.assert_allclose(crank.constraint_jacobian(z), Pfd, rtol=0, atol=1e-8)


def test_spherical_euler_measure_is_reported(crank):
    rep = crank.singularity(crank.home_q + 0.4)
    z = crank.configuration(crank.home_q + 0.4)
    assert rep.extra["euler_joint"] == "ball"
    assert rep.extra["euler_measure"] == pytest.approx(abs(np.cos(z[2])))


def test_ball_joint_of_the_mjcf_matches_the_forward_kinematics(crank):
    """MuJoCo's own kinematics (its ball joint's quaternion and hinges) on the MJCF written at one
    crank angle, moved to others by the model's configuration: the rocker's pose equals the
    model's forward kinematics (the loop closure's connects do not enter MuJoCo's kinematics;
    the MuJoCo plant runs the closed loop in tests/test_mjcf_spatial_closure.py)."""
    mujoco = pytest.importorskip("mujoco")

    q0 = crank.home_q + 0.3
    m = mujoco.MjModel.from_xml_string(crank.to_mjcf(q0).xml)
    dat = mujoco.MjData(m)
    z0 = crank.configuration(q0)
    assert m.joint("ball").type == mujoco.mjtJoint.mjJNT_BALL
    rng = np.random.default_rng(4143)
    for _ in range(5):
        q = crank.home_q + rng.uniform(-0.6, 0.6, 1)
        z = crank.configuration(q)
        # the hinges' positions are the model's angles (their ref); the ball's quaternion is the
        # rotation from its written pose (at q0) to z
        for k in (0, 4, 5):
            dat.qpos[m.joint(crank.all_joint_names[k]).qposadr[0]] = z[k]
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, (_zyx(z0[1:4]).T @ _zyx(z[1:4])).ravel())
        a = m.joint("ball").qposadr[0]
        dat.qpos[a:a + 4] = quat
        mujoco.mj_kinematics(m, dat)
        T = crank.forward_kinematics(q)
        np.testing.assert_allclose(dat.xmat[m.body("rocker").id].reshape(3, 3), T[:3, :3], rtol=0, atol=1e-12)
        np.testing.assert_allclose(dat.site_xpos[m.site("tool").id], T[:3, 3], rtol=0, atol=1e-12)


def _zyx(a):
    """Rz(a0) Ry(a1) Rx(a2) (the spherical joint's default axes, intrinsic)."""
    c, s = np.cos(a), np.sin(a)
    Rz = np.array([[c[0], -s[0], 0], [s[0], c[0], 0], [0, 0, 1]])
    Ry = np.array([[c[1], 0, s[1]], [0, 1, 0], [-s[1], 0, c[1]]])
    Rx = np.array([[1, 0, 0], [0, c[2], -s[2]], [0, s[2], c[2]]])
    return Rz @ Ry @ Rx


# ----------------------------------------------------------------------------- the delta
@pytest.mark.slow
def test_delta_with_universal_elbows_equals_the_shipped_delta():
    """hil_configs/robots/delta_universal.toml (one universal joint per elbow) against
    delta_pick.toml (two revolute joints and a massless cross per elbow)."""
    a = load_model(ROBOTS / "delta_universal.toml")
    b = load_model(ROBOTS / "delta_pick.toml")
    assert a.joint_names == b.joint_names
    assert_same_model(a, b, np.random.default_rng(4144), 0.3, k=6)


# ---------------------------------------------------------------------------- bad input
def _bad(data_or_mutate):
    d = rsur()
    data_or_mutate(d)
    with pytest.raises(ConfigError) as ei:
        load_model(d, file="crank.toml")
    assert ei.value.file == "crank.toml"
    return ei.value


def _set(j, key, value):
    def m(d):
        if value is None:
            del d["joints"][j][key]
        else:
            d["joints"][j][key] = value
    return m


@pytest.mark.parametrize("mutate, field, words", [
    (_set(2, "axes", [[1.0, 0.0, 0.0]]), "joints[2].axes", "2x3"),
    (_set(2, "axes", [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), "joints[2].axes", "2x3"),
    (_set(2, "axes", [[1.0, 0.0, 0.0], [0.1, 0.8, -0.6]]), "joints[2].axes", "not orthogonal"),
    (_set(2, "axes", [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), "joints[2].axes", "non-zero"),
    (_set(2, "axes", None), "joints[2].axes", "missing"),
    (_set(1, "axes", [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]), "joints[1].axes", "3x3"),
    (_set(1, "axes", [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.0, 1.0, 1.0]]), "joints[1].axes", "not orthogonal"),
    (_set(1, "home", [0.0, 0.0]), "joints[1].home", "3"),
    (_set(2, "home", 0.0), "joints[2].home", ""),
    # an actuated universal or spherical joint adds its coordinates to the actuated ones: the
    # crank's one task coordinate is then short of them
    (_set(1, "actuated", True), "task.coordinates", "for 4 actuated coordinates"),
    (_set(2, "actuated", True), "task.coordinates", "for 3 actuated coordinates"),
    (_set(2, "torque_max", 1.0), "joints[2].torque_max", "unknown field"),
    (_set(1, "axis", [0.0, 0.0, 1.0]), "joints[1].axis", "unknown field"),
    (_set(2, "position_max", 1.0), "joints[2].position_max", "unknown field"),
    (_set(1, "home", [0.0, 0.5, 0.0]), "loops[0]", "does not close"),
    (lambda d: d.update(planar=True), "joints[1].type", "planar"),
])
def test_bad_universal_and_spherical_joints_name_the_field(mutate, field, words):
    err = _bad(mutate)
    assert err.field == field and words in str(err), str(err)


def _turn_body(body, R):
    """The body's centre of mass and inertia re-expressed in its frame turned by R."""
    body["com"] = (R.T @ body["com"]).tolist()
    I6 = body["inertia"]
    I = R.T @ np.array([[I6[0], I6[3], I6[5]], [I6[3], I6[1], I6[4]], [I6[5], I6[4], I6[2]]]) @ R
    body["inertia"] = [I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[1, 2], I[2, 0]]


def _rotated_coupler(R):
    """rsur() with the coupler's body frame turned by R (its geometry re-expressed in it), the
    ball's home angles the ZYX angles of R: the same mechanism at the same pose."""
    d = rsur()
    # the rocker is the cross's child: its frame is the coupler's at zero cross angles, so it
    # turns with it: re-express the rocker's data and the closure as well
    for b in d["bodies"]:
        if b["name"] in ("coupler", "rocker"):
            _turn_body(b, R)
    cross = d["joints"][2]
    cross["origin"] = (R.T @ AB).tolist()
    cross["axes"] = [(R.T @ a).tolist() for a in cross["axes"]]
    lp = d["loops"][0]
    lp["point_a"] = (R.T @ lp["point_a"]).tolist()
    lp["axis_a"] = (R.T @ lp["axis_a"]).tolist()
    d["task"]["point"] = (R.T @ d["task"]["point"]).tolist()
    return d


def test_a_home_near_the_euler_singularity_is_refused():
    """The ball's middle angle at home 1.45 rad (within 0.35 of pi/2): refused naming the
    joint's home, before any derivation."""
    ang = np.array([0.3, 1.45, -0.2])
    d = _rotated_coupler(_zyx(ang))
    d["joints"][1]["home"] = ang.tolist()
    err = _bad(lambda x: x.update(d))
    assert err.field == "joints[1].home" and "Euler" in str(err), str(err)


@pytest.mark.slow
def test_the_crank_with_a_turned_coupler_frame_is_the_same_mechanism(crank):
    """The ball's home angles (0.3, 0.9, -0.2) rad with the coupler's and rocker's geometry
    re-expressed in the frame they turn: the same mechanism, the same dynamics (the spherical
    joint away from zero angles; slow: another derivation and compilation)."""
    ang = np.array([0.3, 0.9, -0.2])
    d = _rotated_coupler(_zyx(ang))
    d["joints"][1]["home"] = ang.tolist()
    m = load_model(d, file="turned.toml")
    rng = np.random.default_rng(4145)
    for _ in range(4):
        q = crank.home_q + rng.uniform(-0.5, 0.5, 1)
        qd, qdd = rng.normal(size=1), rng.normal(size=1)
        np.testing.assert_allclose(m.inverse_dynamics(q, qd, qdd), crank.inverse_dynamics(q, qd, qdd),
                                   rtol=0, atol=TOL)
        np.testing.assert_allclose(m.forward_kinematics_task(q), crank.forward_kinematics_task(q),
                                   rtol=0, atol=TOL)


_unit3 = st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=3, max_size=3).filter(
    lambda v: np.linalg.norm(v) > 0.1)


@settings(max_examples=30, deadline=None)
@given(a=_unit3, b=_unit3)
def test_universal_axes_property_not_orthogonal_is_refused_by_name(a, b):
    """Any pair of axes: refused naming joints[2].axes unless orthogonal (then the loop may
    not close, refused naming the loop, or the file loads); never another error."""
    a, b = np.asarray(a), np.asarray(b)
    c = abs(a @ b) / np.linalg.norm(a) / np.linalg.norm(b)
    d = rsur()
    d["joints"][2]["axes"] = [a.tolist(), b.tolist()]
    if c > 1e-9:
        with pytest.raises(ConfigError) as ei:
            load_model(d, file="crank.toml")
        assert ei.value.file == "crank.toml" and ei.value.field == "joints[2].axes", str(ei.value)


def test_non_orthogonal_universal_axes_exit_2_from_check(tmp_path):
    """``torqueloop check`` on the file: exit 2, the file and the field named, no traceback
    (refused before any derivation)."""
    import os
    import subprocess
    import sys

    import tomli_w

    d = rsur()
    d["joints"][2]["axes"] = [[1.0, 0.0, 0.0], [0.3, 0.8, -0.6]]
    p = tmp_path / "crank.toml"
    p.write_text(tomli_w.dumps(d))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "controller.app.cli", "check", str(p)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert str(p) in r.stderr and "joints[2].axes" in r.stderr and "Traceback" not in r.stderr
