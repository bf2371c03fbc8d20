"""URDF loading (through Pinocchio) into SerialModel, checked against Pinocchio's own model."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.errors import ConfigError
from dynamics.serial import SerialModel

pin = pytest.importorskip("pinocchio")
from dynamics.urdf import load_urdf  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
URDF = DATA / "serial_4dof.urdf"


def _pin_q(pm, q):
    """Angles/displacements -> Pinocchio configuration (cos, sin for continuous joints)."""
    out = []
    for k in range(1, pm.njoints):
        if pm.joints[k].nq == 2:
            out += [math.cos(q[k - 1]), math.sin(q[k - 1])]
        else:
            out.append(q[k - 1])
    return np.array(out)


@pytest.fixture(scope="module")
def models():
    model = load_model(URDF)
    pm = pin.buildModelFromUrdf(str(URDF))
    return model, pm, pm.createData()


def test_structure_and_limits(models):
    model, pm, _ = models
    assert isinstance(model, SerialModel)
    assert model.dof == 4
    assert model.joint_names == ("j1", "j2", "j3", "j4")
    assert model.joint_types == ("revolute", "revolute", "revolute", "prismatic")
    lim = model.limits
    np.testing.assert_allclose(lim.position_min, [-2.5, -1.5, -np.inf, -0.05])
    np.testing.assert_allclose(lim.position_max, [2.5, 1.8, np.inf, 0.15])
    np.testing.assert_allclose(lim.velocity_max, [3, 4, 5, 0.5])
    np.testing.assert_allclose(lim.torque_max, [40, 30, 20, 100])
    np.testing.assert_allclose(model.drive.viscous, [0.3, 0, 0, 0])
    np.testing.assert_allclose(model.drive.coulomb, [0.1, 0, 0, 0])
    # the fixed tool0 link (0.2 kg) is merged into the last body
    np.testing.assert_allclose(model.link_masses, [2.0, 1.5, 1.0, 0.7])


def test_dynamics_match_pinocchio(models):
    model, pm, pd = models
    rng = np.random.default_rng(11)
    fid = pm.getFrameId("tool0")
    for _ in range(20):
        q = rng.uniform(-2, 2, 4)
        v, a, tau = rng.uniform(-2, 2, (3, 4))
        qp = _pin_q(pm, q)
        s = lambda x: max(1.0, float(np.abs(x).max()))  # noqa: E731
        ref = pin.rnea(pm, pd, qp, v, a)
        np.testing.assert_allclose(model.inverse_dynamics(q, v, a), ref, atol=1e-9 * s(ref))
        M = pin.crba(pm, pd, qp)
        M = np.triu(M) + np.triu(M, 1).T
        np.testing.assert_allclose(model.mass_matrix(q), M, atol=1e-9 * s(M))
        ref = pin.aba(pm, pd, qp, v, tau)
        np.testing.assert_allclose(model.forward_dynamics(q, v, tau), ref, atol=1e-9 * s(ref))
        pin.forwardKinematics(pm, pd, qp)
        pin.updateFramePlacements(pm, pd)
        np.testing.assert_allclose(model.forward_kinematics(q), pd.oMf[fid].homogeneous, atol=1e-12)
        J = pin.computeFrameJacobian(pm, pd, qp, fid, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)
        np.testing.assert_allclose(model.jacobian(q), J, atol=1e-12)
        # link_poses gives the URDF joint frames
        L = model.link_poses(q)
        for k in range(4):
            np.testing.assert_allclose(L[k + 1], pd.oMi[k + 1].homogeneous, atol=1e-12)
        ke = pin.computeKineticEnergy(pm, pd, qp, v)
        assert model.kinetic_energy(q, v) == pytest.approx(ke, rel=1e-10)
        pe = pin.computePotentialEnergy(pm, pd, qp)
        assert model.potential_energy(q) == pytest.approx(pe, rel=1e-10, abs=1e-12)


def test_tool_frame_choice(models):
    model, pm, pd = models
    m2 = load_urdf(URDF, tool_frame="link4")
    q = np.array([0.1, -0.2, 0.3, 0.05])
    pin.forwardKinematics(pm, pd, _pin_q(pm, q))
    pin.updateFramePlacements(pm, pd)
    np.testing.assert_allclose(m2.forward_kinematics(q), pd.oMf[pm.getFrameId("link4")].homogeneous,
                               atol=1e-12)
    with pytest.raises(ConfigError, match="no frame named 'nope'"):
        load_urdf(URDF, tool_frame="nope")
    with pytest.raises(ConfigError, match="not attached to the last joint"):
        load_urdf(URDF, tool_frame="link2")


def _write(tmp_path, text, name="r.urdf"):
    p = tmp_path / name
    p.write_text(text)
    return p


_LINK = ('<link name="{n}"><inertial><mass value="1"/>'
         '<inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>')
_JOINT = ('<joint name="{n}" type="{t}"><parent link="{p}"/><child link="{c}"/>'
          '<axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>')


def test_branching_tree_is_rejected(tmp_path):
    text = ("<robot name='tree'>" + "<link name='base'/>" + _LINK.format(n="a") + _LINK.format(n="b")
            + _JOINT.format(n="ja", t="revolute", p="base", c="a")
            + _JOINT.format(n="jb", t="revolute", p="base", c="b") + "</robot>")
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError, match="not a serial chain") as ei:
        load_model(p)
    assert str(p) in str(ei.value)


def test_unsupported_joint_is_rejected(tmp_path):
    text = ("<robot name='fl'>" + "<link name='base'/>" + _LINK.format(n="a")
            + '<joint name="jf" type="floating"><parent link="base"/><child link="a"/></joint>'
            + "</robot>")
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError, match="only revolute, continuous and prismatic") as ei:
        load_urdf(p)
    assert str(p) in str(ei.value)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_urdf(tmp_path / "missing.urdf")
    p = _write(tmp_path, "<robot name='x'><link name='a'>")
    with pytest.raises(ConfigError, match="cannot parse") as ei:
        load_urdf(p)
    assert str(p) in str(ei.value)
    p = _write(tmp_path, "<robot name='x'><link name='a'/></robot>", "nojoint.urdf")
    with pytest.raises(ConfigError, match="no movable joint"):
        load_urdf(p)
