"""SerialModel against Pinocchio built through its own API from the robot-file parameters.

The reference model is assembled here with ``addJoint`` / ``appendBodyToJoint``
from the raw TOML values (its own DH transforms, point masses as separate
bodies, armature via ``model.armature``), independently of ``dynamics.serial``.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.config import read_toml

pin = pytest.importorskip("pinocchio")

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"
RTOL = 1e-9


# ---------------------------------------------------------------------------
# independent reference construction
# ---------------------------------------------------------------------------

def _ang(d: dict, key: str, default=0.0) -> float:
    if key + "_deg" in d:
        return math.radians(d[key + "_deg"])
    return float(d.get(key, default))


def _rot_x(t):
    c, s = math.cos(t), math.sin(t)
    return np.array([[1.0, 0, 0], [0, c, -s], [0, s, c]])


def _rot_z(t):
    c, s = math.cos(t), math.sin(t)
    return np.array([[c, -s, 0.0], [s, c, 0], [0, 0, 1]])


def _se3(R=np.eye(3), p=(0.0, 0.0, 0.0)):
    return pin.SE3(np.array(R, dtype=float), np.array(p, dtype=float))


def _xf(d: dict | None):
    if d is None:
        return pin.SE3.Identity()
    rpy = np.radians(d["rpy_deg"]) if "rpy_deg" in d else np.array(d.get("rpy", [0, 0, 0]), float)
    return _se3(pin.rpy.rpyToMatrix(*rpy), d.get("xyz", [0, 0, 0]))


def build_pinocchio(data: dict):
    """(model, tool_frame_id) for a serial robot-file dict."""
    model = pin.Model()
    model.gravity = pin.Motion(np.array(data.get("gravity", [0, 0, -9.81]), float), np.zeros(3))
    conv = data["convention"]
    parent = 0
    prev_post = _xf(data.get("base"))
    arm = []
    for i, j in enumerate(data["joints"]):
        prism = j.get("type", "revolute") == "prismatic"
        a, d, alpha = float(j.get("a", 0.0)), float(j.get("d", 0.0)), _ang(j, "alpha")
        if prism:
            theta, d = _ang(j, "theta"), d + float(j.get("offset", 0.0))
        else:
            theta = _ang(j, "offset")
        # fixed part of the DH transform (everything but the joint motion)
        if conv == "standard":   # Rz(theta) Tz(d) Tx(a) Rx(alpha) = Motion . fixed
            fixed = _se3(_rot_z(theta), [0, 0, d]) * _se3(np.eye(3), [a, 0, 0]) * _se3(_rot_x(alpha))
            joint_placement, body_frame = prev_post, fixed
        else:                    # Rx(alpha) Tx(a) Rz(theta) Tz(d) = fixed . Motion
            fixed = _se3(_rot_x(alpha)) * _se3(np.eye(3), [a, 0, 0]) * _se3(_rot_z(theta), [0, 0, d])
            joint_placement, body_frame = prev_post * fixed, pin.SE3.Identity()
        jm = pin.JointModelPZ() if prism else pin.JointModelRZ()
        jid = model.addJoint(parent, jm, joint_placement, j.get("name", f"j{i}"))
        ixx, iyy, izz, ixy, ixz, iyz = j["inertia"]
        I = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]], float)
        model.appendBodyToJoint(jid, pin.Inertia(float(j["mass"]), np.array(j.get("com", [0, 0, 0]), float), I),
                                body_frame)
        for pm in j.get("point_masses", []):
            model.appendBodyToJoint(jid, pin.Inertia(float(pm["mass"]), np.zeros(3), np.zeros((3, 3))),
                                    body_frame * _se3(np.eye(3), pm["position"]))
        arm.append(float(j.get("rotor_inertia", 0.0)) * float(j.get("gear_ratio", 1.0)) ** 2)
        parent = jid
        prev_post = body_frame
    model.armature = np.array(arm)
    tool = prev_post * _xf(data.get("tool"))
    fid = model.addFrame(pin.Frame("tool", parent, 0, tool, pin.FrameType.OP_FRAME))
    return model, fid


def _variant_modified(data: dict) -> dict:
    """Same kinematics as a standard-DH arm, written in the modified convention.

    Standard row i (theta_i, d_i, a_i, alpha_i) gives modified rows with
    (alpha_{i-1}, a_{i-1}) shifted by one; the link frames differ, so the
    inertial data are re-expressed: here we simply keep the numbers (a different
    but equally valid robot) - the point is the convention code path.
    """
    out = copy.deepcopy(data)
    out["convention"] = "modified"
    out["name"] = data["name"] + "_modified"
    return out


def _variant_prismatic(data: dict) -> dict:
    """Turn joint 3 into a prismatic joint (fixed theta, displacement along z)."""
    out = copy.deepcopy(data)
    j = out["joints"][2]
    j["type"] = "prismatic"
    j["theta_deg"] = 30.0
    j["offset"] = 0.05
    for k in ("offset_deg", "position_min_deg", "position_max_deg"):
        j.pop(k, None)
    out["name"] = data["name"] + "_prismatic"
    return out


def _robots():
    arm6 = read_toml(ROBOTS / "arm6_demo.toml")
    return {
        "seed000": read_toml(ROBOTS / "seed000_arm.toml"),
        "seed003": read_toml(ROBOTS / "seed003_2r.toml"),
        "seed004": read_toml(ROBOTS / "seed004_5link.toml"),
        "seed004_normal": read_toml(ROBOTS / "seed004_5link_gravity_normal.toml"),
        "arm6": arm6,
        "arm6_modified": _variant_modified(arm6),
        "arm6_prismatic": _variant_prismatic(arm6),
        "arm6_modified_prismatic": _variant_prismatic(_variant_modified(arm6)),
    }


ROBOT_DATA = _robots()


@pytest.fixture(scope="module", params=sorted(ROBOT_DATA))
def pair(request):
    data = ROBOT_DATA[request.param]
    model = load_model(data, file=request.param + ".toml")
    pm, fid = build_pinocchio(data)
    return model, pm, pm.createData(), fid


def _states(n, rng, N=25):
    return (rng.uniform(-math.pi, math.pi, (N, n)), rng.uniform(-2, 2, (N, n)),
            rng.uniform(-5, 5, (N, n)))


def close(a, b, scale=None):
    a, b = np.asarray(a, float), np.asarray(b, float)
    s = max(1.0, float(np.abs(b).max())) if scale is None else scale
    np.testing.assert_allclose(a, b, rtol=0, atol=RTOL * s)


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------

def test_rnea_crba_aba_gravity(pair):
    model, pm, pd, _ = pair
    rng = np.random.default_rng(1)
    Q, V, A = _states(model.dof, rng)
    for q, v, a in zip(Q, V, A):
        tau_ref = pin.rnea(pm, pd, q, v, a).copy()
        close(model.inverse_dynamics(q, v, a), tau_ref)
        M_ref = pin.crba(pm, pd, q).copy()
        M_ref = np.triu(M_ref) + np.triu(M_ref, 1).T
        close(model.mass_matrix(q), M_ref)
        g_ref = pin.computeGeneralizedGravity(pm, pd, q).copy()
        close(model.gravity(q), g_ref)
        close(model.bias(q, v), pin.nonLinearEffects(pm, pd, q, v))
        tau = rng.uniform(-10, 10, model.dof)
        close(model.forward_dynamics(q, v, tau), pin.aba(pm, pd, q, v, tau))


def test_kinematics(pair):
    model, pm, pd, fid = pair
    rng = np.random.default_rng(2)
    Q, _, _ = _states(model.dof, rng)
    for q in Q:
        pin.forwardKinematics(pm, pd, q)
        pin.updateFramePlacements(pm, pd)
        close(model.forward_kinematics(q), pd.oMf[fid].homogeneous)
        J_ref = pin.computeFrameJacobian(pm, pd, q, fid, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)
        close(model.jacobian(q), J_ref)
        # joint frames (where the joint axes are z) match pinocchio's joint placements
        Tj = model.joint_poses(q)
        for i in range(model.dof):
            close(Tj[i], pd.oMi[i + 1].homogeneous)


def test_energies(pair):
    model, pm, pd, _ = pair
    rng = np.random.default_rng(3)
    Q, V, _ = _states(model.dof, rng)
    for q, v in zip(Q, V):
        # pinocchio's kinetic energy includes model.armature, as ours does
        close(model.kinetic_energy(q, v), pin.computeKineticEnergy(pm, pd, q, v))
        close(model.potential_energy(q), pin.computePotentialEnergy(pm, pd, q))


def test_coriolis_matrix(pair):
    model, pm, pd, _ = pair
    rng = np.random.default_rng(4)
    Q, V, _ = _states(model.dof, rng, N=10)
    for q, v in zip(Q, V):
        C = model.coriolis_matrix(q, v)
        C_ref = pin.computeCoriolisMatrix(pm, pd, q, v)
        close(C, C_ref)
        close(C @ v, model.bias(q, v) - model.gravity(q))


def test_wrench(pair):
    model, pm, pd, fid = pair
    rng = np.random.default_rng(5)
    Q, V, A = _states(model.dof, rng, N=10)
    n = model.dof
    for q, v, a in zip(Q, V, A):
        w = rng.normal(size=6) * 5.0
        pin.forwardKinematics(pm, pd, q)
        pin.updateFramePlacements(pm, pd)
        oMj = pd.oMi[n]
        oMt = pd.oMf[fid]
        f_w, m_w = w[:3], w[3:]
        # wrench about the tool origin -> about the last joint origin, joint axes
        m_j = m_w + np.cross(oMt.translation - oMj.translation, f_w)
        fext = [pin.Force.Zero() for _ in range(pm.njoints)]
        fext[n] = pin.Force(oMj.rotation.T @ f_w, oMj.rotation.T @ m_j)
        tau_ref = pin.rnea(pm, pd, q, v, a, fext).copy()
        close(model.inverse_dynamics(q, v, a, wrench=w), tau_ref)
        # same through the Jacobian transpose
        J = model.jacobian(q)
        close(tau_ref, pin.rnea(pm, pd, q, v, a) - J.T @ w)
        tau = rng.uniform(-10, 10, n)
        close(model.forward_dynamics(q, v, tau, wrench=w), pin.aba(pm, pd, q, v, tau, fext))
