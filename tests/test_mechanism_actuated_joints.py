"""Actuated universal and spherical joints of mechanism files (``actuated = true`` on a
``type = "universal" | "spherical"`` joint, dynamics/mechanism.py): each coordinate is an
actuated coordinate of q, a revolute drive with its own limits and drive data.  Checked against
what does not use them:

* the same mechanism written with actuated revolute joints and massless bodies between them
  (:func:`tests.test_mechanism_joints.as_revolute_chain`, from the file format's definition of
  the joints): a tip-tilt platform on an actuated universal joint (a 2-DOF gimbal) and a 3-DOF
  platform on an actuated spherical joint, each held by a passive telescopic strut to the ground
  (universal, prismatic, ball closure: multipliers); ID, FD, IK, Jacobians, multipliers and
  energies to 1e-10 on random states, the limits and drive data per coordinate;
* energy/power balance along an RK4 trajectory (the universal), and MuJoCo on the MJCF written
  with three hinges and their motors for the actuated spherical joint against the numba plant;
* bad input: lists of the wrong length, a home near the Euler singularity, a property over
  per-coordinate values: ConfigError naming the file and the field; ``torqueloop check`` exits 2.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamics import load_model
from dynamics.errors import ConfigError

try:
    from tests.test_mechanism import rk4_energy_balance
    from tests.test_mechanism_joints import _rod, as_revolute_chain, assert_same_model
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from test_mechanism import rk4_energy_balance
    from test_mechanism_joints import _rod, as_revolute_chain, assert_same_model

A = [0.08, 0.0, 0.04]            # the strut's top joint on the platform [m]
STRUT = 0.15                     # the strut's length at home [m] (cylinder 0.1 + extension 0.05)


def gimbal(kind: str):
    """A platform on an actuated ``kind`` joint at the base origin (universal: axes x, y, two
    coordinates; spherical: ZYX, three), held by a passive strut hanging from its point ``A``
    (universal joint, cylinder, prismatic, piston) whose end is joined to the ground by a ball
    closure.  All coordinates zero close the loop.  The task: the platform's pointer tip (x, y)
    for the universal, a point of the strut's cylinder off its axis (x, y, z) for the spherical
    (the platform's own points sweep a sphere: two coordinates only)."""
    k = 2 if kind == "universal" else 3
    drive = {"actuated": True,
             "position_min": [-0.7, -0.6, -0.8][:k], "position_max": [0.7, 0.6, 0.8][:k],
             "velocity_max": 12.0, "torque_max": [3.0, 2.5, 2.0][:k],
             "rotor_inertia": [2e-5, 3e-5, 1e-5][:k], "gear_ratio": [6.0, 9.0, 4.0][:k],
             "viscous": [0.002, 0.003, 0.001][:k], "coulomb": 0.01}
    joint = {"name": "gimbal", "type": kind, "parent": "ground", "child": "platform", "origin": [0.0, 0.0, 0.0],
             "home": [0.0] * k, **drive}
    if kind == "universal":
        joint["axes"] = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    task = ({"body": "platform", "point": [0.0, 0.0, 0.12], "coordinates": ["x", "y"]} if kind == "universal"
            else {"body": "cylinder", "point": [0.03, 0.02, -0.05], "coordinates": ["x", "y", "z"]})
    return {"name": f"{kind}_gimbal", "type": "mechanism", "planar": False, "gravity": [0.0, 0.0, -9.81],
            "bodies": [
                {"name": "platform", "mass": 0.4, "com": [0.01, -0.01, 0.02],
                 "inertia": [6e-4, 7e-4, 1.1e-3, 1e-5, -2e-5, 3e-5]},
                {"name": "cylinder", "mass": 0.05, "com": [0.0, 0.0, -0.05], "inertia": _rod(0.05, [0, 0, 0.1])},
                {"name": "piston", "mass": 0.03, "com": [0.0, 0.0, 0.03], "inertia": _rod(0.03, [0, 0, 0.06])}],
            "joints": [
                joint,
                {"name": "strut_top", "type": "universal", "parent": "platform", "child": "cylinder",
                 "origin": A, "axes": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], "home": [0.0, 0.0]},
                {"name": "strut", "type": "prismatic", "parent": "cylinder", "child": "piston",
                 "origin": [0.0, 0.0, -0.1], "axis": [0.0, 0.0, -1.0], "home": STRUT - 0.1}],
            "loops": [{"name": "foot", "type": "spherical", "body_a": "piston", "point_a": [0.0, 0.0, 0.0],
                       "body_b": "ground", "point_b": [A[0], A[1], A[2] - STRUT]}],
            "task": task}


@pytest.fixture(scope="module")
def universal():
    return load_model(gimbal("universal"), file="universal_gimbal.toml")


@pytest.fixture(scope="module")
def spherical():
    return load_model(gimbal("spherical"), file="spherical_gimbal.toml")


def _same_drives(a, b):
    """Names, types, limits and drive data per actuated coordinate equal."""
    assert a.joint_names == b.joint_names
    assert a.joint_types == b.joint_types == ("revolute",) * a.dof
    for f in ("position_min", "position_max", "velocity_max", "torque_max"):
        np.testing.assert_array_equal(getattr(a.limits, f), getattr(b.limits, f))
    for f in ("armature", "viscous", "coulomb"):
        np.testing.assert_array_equal(getattr(a.drive, f), getattr(b.drive, f))


def test_actuated_universal_joint_equals_two_actuated_revolutes(universal):
    chain = load_model(as_revolute_chain(gimbal("universal")), file="universal_chain.toml")
    assert universal.joint_names == ("gimbal.1", "gimbal.2")
    _same_drives(universal, chain)
    # the file's per-coordinate values, in coordinate order (armature = rotor inertia * gear^2)
    np.testing.assert_allclose(universal.drive.armature, [2e-5 * 36, 3e-5 * 81], rtol=1e-15)
    np.testing.assert_array_equal(universal.limits.torque_max, [3.0, 2.5])
    np.testing.assert_array_equal(universal.drive.coulomb, [0.01, 0.01])
    assert_same_model(universal, chain, np.random.default_rng(4151), 0.4)
    # the strut carries load: the multipliers are not trivially zero
    _, lam = universal.inverse_dynamics_multipliers(universal.home_q, np.zeros(2), np.zeros(2))
    assert np.linalg.norm(lam) > 0.1, lam


def test_actuated_spherical_joint_equals_three_actuated_revolutes(spherical):
    chain = load_model(as_revolute_chain(gimbal("spherical")), file="spherical_chain.toml")
    assert spherical.joint_names == ("gimbal.1", "gimbal.2", "gimbal.3")
    _same_drives(spherical, chain)
    assert_same_model(spherical, chain, np.random.default_rng(4152), 0.3)
    # the Euler measure is reported for the actuated joint too
    q = spherical.home_q + np.array([0.1, 0.3, -0.2])
    rep = spherical.singularity(q)
    assert rep.extra["euler_joint"] == "gimbal"
    assert rep.extra["euler_measure"] == pytest.approx(np.cos(0.3))


def test_actuated_universal_energy_balance(universal):
    """RK4 on the two gimbal angles (the strut's closure re-solved at every stage): the change
    of T + V (armature included) equals the two drives' work."""
    dE, work, q, qd = rk4_energy_balance(
        universal, lambda t, g0: g0 + np.array([0.05 * np.sin(8 * t), -0.04 * np.sin(11 * t)]))
    assert np.min(np.abs(qd)) > 0.05 and abs(work) > 1e-4, (qd, work)
    assert abs(dE - work) < 1e-7 * abs(work) + 1e-12, (dE, work)


def test_actuated_spherical_on_mujoco_matches_the_numba_plant(spherical):
    """The MJCF of the actuated spherical joint (written at non-zero angles): three hinges in the
    Euler order, one motor each, the drives' armature, damping and stops on them; MuJoCo's
    kinematics at the model's coordinates equal its forward kinematics; MuJoCo (its own
    dynamics, the strut closed by a soft ``connect``) and the numba plant driven open loop with
    the same torques agree within the closure's softness (measured 1.1e-7 rad, closure
    7.7e-8 m)."""
    mujoco = pytest.importorskip("mujoco")
    try:
        from tests.test_mujoco_plant import cross_check_model
    except ImportError:  # pragma: no cover - rootdir not on sys.path
        from test_mujoco_plant import cross_check_model

    q0 = spherical.home_q + np.array([0.2, 0.3, -0.25])      # written away from zero angles
    mj = spherical.to_mjcf(q0)
    m = mujoco.MjModel.from_xml_string(mj.xml)
    assert mj.joints == spherical.joint_names
    for k, name in enumerate(spherical.joint_names):
        j = m.joint(name)
        assert j.type == mujoco.mjtJoint.mjJNT_HINGE
        assert m.actuator(f"drive_{name}").trnid[0] == j.id
        assert m.dof_armature[j.dofadr[0]] == pytest.approx(spherical.drive.armature[k], rel=1e-12)
        assert m.dof_damping[j.dofadr[0]] == pytest.approx(spherical.drive.viscous[k], rel=1e-12)
        np.testing.assert_allclose(j.range, [spherical.limits.position_min[k], spherical.limits.position_max[k]])
    # MuJoCo's kinematics with the hinges (and the strut's joints) at the model's coordinates:
    # the cylinder's pose and the task point equal the model's forward kinematics
    dat = mujoco.MjData(m)
    rng = np.random.default_rng(4153)
    for _ in range(4):
        q = q0 + rng.uniform(-0.2, 0.2, 3)
        z = spherical.configuration(q)
        for k, name in enumerate(spherical.all_joint_names):
            dat.qpos[m.joint(name).qposadr[0]] = z[k]
        mujoco.mj_kinematics(m, dat)
        T = spherical.forward_kinematics(q)
        np.testing.assert_allclose(dat.xmat[m.body("cylinder").id].reshape(3, 3), T[:3, :3], rtol=0, atol=1e-12)
        np.testing.assert_allclose(dat.site_xpos[m.site("tool").id], T[:3, 3], rtol=0, atol=1e-12)
    # open loop from q0: gravity compensation plus sines of 5e-4 of the torque limits (the
    # platform moves about 0.05 rad in 0.5 s, far from the stops)
    per_s, closure, moved = cross_check_model(spherical, q0, 5e-4, seconds=0.5)
    assert moved > 0.005, moved
    assert closure < 1e-6, closure
    assert per_s.max() < max(10 * closure, 1e-8), (per_s, closure)


# ---------------------------------------------------------------------------- bad input
def _bad(kind, mutate):
    d = gimbal(kind)
    mutate(d["joints"][0])
    with pytest.raises(ConfigError) as ei:
        load_model(d, file="gimbal.toml")
    assert ei.value.file == "gimbal.toml"
    return ei.value


@pytest.mark.parametrize("kind, key, value, words", [
    ("universal", "torque_max", [3.0, 2.5, 2.0], "shape 2"),
    ("universal", "position_min", [-0.7], "shape 2"),
    ("spherical", "gear_ratio", [6.0, 9.0], "shape 3"),
    ("spherical", "viscous", [0.1, -0.1, 0.1], ">= 0.0"),
    ("universal", "velocity_max", "fast", "a list of 2 numbers"),
    ("universal", "position_max", [0.7, -0.7], "coordinate 2: must exceed position_min"),
    ("spherical", "home", [0.0, 0.0, 0.9], "coordinate 3: 0.9 outside"),
    ("universal", "home", [0.0], "shape 2"),
])
def test_bad_per_coordinate_data_names_the_field(kind, key, value, words):
    err = _bad(kind, lambda j: j.update({key: value}))
    assert err.field == f"joints[0].{key}" and words in str(err), str(err)


def test_actuated_spherical_home_near_the_euler_singularity_is_refused():
    """The middle angle at home 1.3 rad (within 0.35 rad of pi/2; limits widened to hold it):
    refused naming the joint's home, before any derivation (the first and third drives' axes
    nearly aligned)."""
    err = _bad("spherical", lambda j: j.update(home=[0.0, 1.3, 0.0], position_max=1.5))
    assert err.field == "joints[0].home" and "Euler" in str(err) and "drives' axes" in str(err), str(err)


_value = st.one_of(st.floats(-10, 10, allow_nan=False), st.lists(st.floats(-10, 10, allow_nan=False),
                                                                  min_size=0, max_size=5))


@settings(max_examples=25, deadline=None)
@given(key=st.sampled_from(["position_min", "position_max", "velocity_max", "torque_max", "rotor_inertia",
                            "gear_ratio", "viscous", "coulomb"]), value=_value)
def test_per_coordinate_values_property(universal, key, value):
    """Any number or list for a per-coordinate field of the actuated universal joint: the file
    loads with that value on every coordinate (a number) or on each (a list of 2), or a
    ConfigError names the file and that field (or the home it no longer contains); never
    another error."""
    d = gimbal("universal")
    d["joints"][0][key] = value
    try:
        m = load_model(d, file="gimbal.toml")
    except ConfigError as err:
        assert err.file == "gimbal.toml" and err.field in (f"joints[0].{key}", "joints[0].position_max",
                                                           "joints[0].home"), str(err)
        assert not (isinstance(value, list) and len(value) != 2) or err.field == f"joints[0].{key}"
        return
    assert not isinstance(value, list) or len(value) == 2
    per = np.broadcast_to(np.asarray(value, dtype=float), (2,))
    got = {"position_min": m.limits.position_min, "position_max": m.limits.position_max,
           "velocity_max": m.limits.velocity_max, "torque_max": m.limits.torque_max,
           "viscous": m.drive.viscous, "coulomb": m.drive.coulomb}.get(key)
    if got is not None:
        np.testing.assert_array_equal(got, per)


def test_wrong_length_exits_2_from_check(tmp_path):
    """``torqueloop check`` on the file: exit 2, the file and the field named, no traceback."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import tomli_w

    root = Path(__file__).resolve().parents[1]
    d = gimbal("spherical")
    d["joints"][0]["torque_max"] = [1.0, 2.0]
    p = tmp_path / "gimbal.toml"
    p.write_text(tomli_w.dumps(d))
    r = subprocess.run([sys.executable, "-m", "controller.app.cli", "check", str(p)], cwd=root,
                       env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert str(p) in r.stderr and "joints[0].torque_max" in r.stderr and "Traceback" not in r.stderr


def test_gimbal_runs_on_emulated_mit_drives(tmp_path):
    """End to end: the universal gimbal's robot file and a run config, a quintic joint move under
    joint-space computed torque through the MIT CAN driver to emulated drives named by the
    joint's coordinates (``gimbal.1``, ``gimbal.2``) on a plant 10 % heavier (measured 3.8 and
    4.9 mrad RMS, 6.3 mrad max, 2 s lockstep)."""
    import uuid

    import tomli_w

    from controller.app.run import build_run, load_run

    (tmp_path / "gimbal.toml").write_text(tomli_w.dumps(gimbal("universal")))
    joints = [{"name": f"gimbal.{k}", "bus": "can0", "can_id": k, "model": "AK60-6"} for k in (1, 2)]
    run_cfg = {"name": "gimbal_move", "robot": {"file": "gimbal.toml"},
               "trajectory": {"type": "point_to_point", "start": [0.0, 0.0], "target": [0.3, -0.25],
                              "profile": "quintic", "duration_s": 1.5},
               "controller": {"kind": "computed_torque", "wn_rad_s": 30.0, "zeta": 1.0},
               "driver": {"type": "sim_mit_can", "joints": joints,
                          "buses": {"can0": {"interface": "virtual", "channel": f"gimbal-{uuid.uuid4().hex}"}},
                          "plant": {"mass_factor": 1.1, "seed": 3}},
               "loop": {"rate_hz": 1000.0, "clock": "lockstep", "duration_s": 2.0},
               "safety": {"stop_reaction": "brake_disable", "tracking_error_max": 0.05}}
    (tmp_path / "run.toml").write_text(tomli_w.dumps(run_cfg))
    spec = load_run(tmp_path / "run.toml")
    assert spec.model.joint_names == ("gimbal.1", "gimbal.2")
    res = build_run(spec).execute()
    assert res.status == "completed", res.faults
    rms = np.asarray(res.metrics["rms_error"])
    assert rms.shape == (2,) and np.all(rms < 0.015), rms
