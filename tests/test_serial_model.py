"""SerialModel: closed forms, energy balance, skew symmetry, batches, inputs, robot-file errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import tomli_w

from dynamics import load_model
from dynamics.config import read_toml
from dynamics.errors import ConfigError, ModelError, TorqueloopError
from dynamics._serial_core import STACK_JOINTS
from dynamics.serial import SerialModel, dh_transform

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"
G = 9.81


def _link(a, m, com, I, **kw):
    d = {"a": a, "alpha": 0.0, "d": 0.0, "offset": 0.0, "mass": m, "com": com, "inertia": I}
    d.update(kw)
    return d


def planar(links, gravity=(0.0, -G, 0.0), convention="standard"):
    return {"name": "planar", "type": "serial", "convention": convention,
            "gravity": list(gravity), "joints": links}


@pytest.fixture(scope="module")
def arm6():
    return load_model(ROBOTS / "arm6_demo.toml")


# ---------------------------------------------------------------------------
# closed forms
# ---------------------------------------------------------------------------

def test_one_link_pendulum_closed_form():
    m, l, r, Izz = 2.0, 0.8, 0.3, 0.05
    model = load_model(planar([_link(l, m, [r - l, 0, 0], [0.01, Izz, Izz, 0, 0, 0],
                                     rotor_inertia=1e-4, gear_ratio=10.0)]))
    rng = np.random.default_rng(0)
    for q, qd, qdd in rng.uniform(-3, 3, (20, 3)):
        # COM at distance r from the joint, link along x at q = 0, gravity -y
        tau = (Izz + m * r**2 + 1e-2) * qdd + m * G * r * math.cos(q)
        assert model.inverse_dynamics([q], [qd], [qdd])[0] == pytest.approx(tau, rel=1e-12)
        assert model.forward_dynamics([q], [qd], [tau])[0] == pytest.approx(qdd, rel=1e-10, abs=1e-12)


def test_two_link_planar_closed_form():
    m1, m2, l1, l2, r1, r2, I1, I2 = 3.0, 2.0, 1.0, 0.7, 0.4, 0.3, 0.2, 0.1
    model = load_model(planar([_link(l1, m1, [r1 - l1, 0, 0], [0.01, I1, I1, 0, 0, 0]),
                               _link(l2, m2, [r2 - l2, 0, 0], [0.01, I2, I2, 0, 0, 0])]))
    rng = np.random.default_rng(1)
    for _ in range(30):
        (q1, q2), (d1, d2), qdd = rng.uniform(-3, 3, (3, 2))
        c2, s2 = math.cos(q2), math.sin(q2)
        M = np.array([[I1 + I2 + m1 * r1**2 + m2 * (l1**2 + r2**2 + 2 * l1 * r2 * c2),
                       I2 + m2 * (r2**2 + l1 * r2 * c2)],
                      [I2 + m2 * (r2**2 + l1 * r2 * c2), I2 + m2 * r2**2]])
        hc = m2 * l1 * r2 * s2
        c = np.array([-hc * (2 * d1 * d2 + d2**2), hc * d1**2])
        g = np.array([(m1 * r1 + m2 * l1) * G * math.cos(q1) + m2 * r2 * G * math.cos(q1 + q2),
                      m2 * r2 * G * math.cos(q1 + q2)])
        q, qd = np.array([q1, q2]), np.array([d1, d2])
        np.testing.assert_allclose(model.mass_matrix(q), M, atol=1e-12)
        np.testing.assert_allclose(model.bias(q, qd), c + g, atol=1e-11)
        np.testing.assert_allclose(model.gravity(q), g, atol=1e-11)
        np.testing.assert_allclose(model.coriolis_torque(q, qd), c, atol=1e-11)
        np.testing.assert_allclose(model.inverse_dynamics(q, qd, qdd), M @ qdd + c + g, atol=1e-10)
        np.testing.assert_allclose(model.forward_dynamics(q, qd, M @ qdd + c + g), qdd, atol=1e-10)
        ke = 0.5 * qd @ M @ qd
        pe = (m1 * r1 * math.sin(q1) + m2 * (l1 * math.sin(q1) + r2 * math.sin(q1 + q2))) * G
        assert model.kinetic_energy(q, qd) == pytest.approx(ke, rel=1e-12)
        assert model.potential_energy(q) == pytest.approx(pe, rel=1e-12, abs=1e-12)
        tip = [l1 * math.cos(q1) + l2 * math.cos(q1 + q2), l1 * math.sin(q1) + l2 * math.sin(q1 + q2)]
        np.testing.assert_allclose(model.forward_kinematics(q)[:2, 3], tip, atol=1e-12)


def test_prismatic_lift_closed_form():
    # one vertical prismatic joint (z up) carrying 4 kg, with armature 0.5 kg
    data = {"name": "lift", "type": "serial", "convention": "modified", "gravity": [0, 0, -G],
            "joints": [{"type": "prismatic", "a": 0.0, "alpha": 0.0, "d": 0.0, "theta_deg": 30.0,
                        "offset": 0.2, "mass": 4.0,
                        "com": [0.1, 0, 0], "inertia": [0.01, 0.01, 0.01, 0, 0, 0],
                        "rotor_inertia": 0.005, "gear_ratio": 10.0}]}
    model = load_model(data)
    assert model.joint_types == ("prismatic",)
    for q, qd, qdd in np.random.default_rng(2).uniform(-1, 1, (10, 3)):
        assert model.inverse_dynamics([q], [qd], [qdd])[0] == pytest.approx(4.5 * qdd + 4.0 * G)
        assert model.forward_kinematics([q])[2, 3] == pytest.approx(q + 0.2)
        assert model.potential_energy([q]) == pytest.approx(4.0 * G * (q + 0.2))


def test_link_poses_are_the_dh_frames(arm6):
    data = read_toml(ROBOTS / "arm6_demo.toml")
    rng = np.random.default_rng(3)
    base = np.eye(4)
    base[:3, 3] = data["base"]["xyz"]
    yaw = math.radians(data["base"]["rpy_deg"][2])
    base[:2, :2] = [[math.cos(yaw), -math.sin(yaw)], [math.sin(yaw), math.cos(yaw)]]
    tool = np.eye(4)
    tool[:3, 3] = data["tool"]["xyz"]
    for q in rng.uniform(-3, 3, (10, 6)):
        L = arm6.link_poses(q)
        T = base.copy()
        np.testing.assert_allclose(L[0], T, atol=1e-12)
        for i, j in enumerate(data["joints"]):
            alpha = math.radians(j["alpha_deg"]) if "alpha_deg" in j else j["alpha"]
            T = T @ dh_transform(j["a"], alpha, j["d"], q[i] + j["offset"])
            np.testing.assert_allclose(L[i + 1], T, atol=1e-12)
        np.testing.assert_allclose(arm6.forward_kinematics(q), T @ tool, atol=1e-12)


# ---------------------------------------------------------------------------
# structural properties
# ---------------------------------------------------------------------------

def _rk4_energy_run(model, q0, qd0, T, dt, torque, wrench=None):
    """Integrate [q, qd, W] with RK4, W = work of torque (and wrench) on the arm."""
    n = model.dof

    def f(t, x):
        q, qd = x[:n], x[n:2 * n]
        tau = torque(t)
        qdd = model.forward_dynamics(q, qd, tau, wrench=wrench)
        p = tau @ qd
        if wrench is not None:
            p += wrench @ (model.jacobian(q) @ qd)
        return np.concatenate([qd, qdd, [p]])

    x = np.concatenate([q0, qd0, [0.0]])
    t = 0.0
    for _ in range(int(round(T / dt))):
        k1 = f(t, x)
        k2 = f(t + dt / 2, x + dt / 2 * k1)
        k3 = f(t + dt / 2, x + dt / 2 * k2)
        k4 = f(t + dt, x + dt * k3)
        x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t += dt
    return x[:n], x[n:2 * n], x[-1]


@pytest.mark.parametrize("with_wrench", [False, True])
def test_work_energy_balance(arm6, with_wrench):
    rng = np.random.default_rng(4)
    q0, qd0 = rng.uniform(-1, 1, 6), rng.uniform(-1, 1, 6)
    amp = np.array([20.0, 30, 10, 3, 2, 1])
    torque = lambda t: amp * np.sin(3.0 * t + np.arange(6))  # noqa: E731
    w = np.array([5.0, -3, 8, 0.5, -0.2, 0.3]) if with_wrench else None
    E0 = arm6.kinetic_energy(q0, qd0) + arm6.potential_energy(q0)
    q1, qd1, W = _rk4_energy_run(arm6, q0, qd0, 0.5, 1e-3, torque, w)
    E1 = arm6.kinetic_energy(q1, qd1) + arm6.potential_energy(q1)
    scale = abs(E0) + abs(W) + 1.0
    assert abs(E1 - E0 - W) < 1e-8 * scale, (E1 - E0, W)
    assert abs(W) > 1.0          # the torque did do work: the check is not vacuous


def test_dM_dt_minus_2C_is_skew(arm6):
    rng = np.random.default_rng(5)
    h = 1e-6
    for _ in range(10):
        q, qd = rng.uniform(-3, 3, 6), rng.uniform(-2, 2, 6)
        Mdot = (arm6.mass_matrix(q + h * qd) - arm6.mass_matrix(q - h * qd)) / (2 * h)
        N = Mdot - 2 * arm6.coriolis_matrix(q, qd)
        assert np.abs(N + N.T).max() < 1e-7 * max(1.0, np.abs(N).max())
        np.testing.assert_allclose(arm6.coriolis_matrix(q, qd) @ qd,
                                   arm6.bias(q, qd) - arm6.gravity(q), atol=1e-11)


def test_mass_matrix_symmetric_positive_definite(arm6):
    M = arm6.mass_matrix(np.random.default_rng(6).uniform(-3, 3, (50, 6)))
    np.testing.assert_array_equal(M, np.swapaxes(M, 1, 2))
    assert np.all(np.linalg.eigvalsh(M) > 0)
    # armature sits on the diagonal
    arm = arm6.drive.armature
    np.testing.assert_allclose(arm, [3.3e-5 * 101**2] * 2 + [1.9e-5 * 101**2] + [6e-6 * 101**2] * 3)
    data = read_toml(ROBOTS / "arm6_demo.toml")
    for j in data["joints"]:
        del j["rotor_inertia"], j["gear_ratio"]
    bare = load_model(data)
    Q = np.random.default_rng(6).uniform(-3, 3, (50, 6))
    np.testing.assert_allclose(arm6.mass_matrix(Q) - bare.mass_matrix(Q),
                               np.broadcast_to(np.diag(arm), (50, 6, 6)), atol=1e-12)
    np.testing.assert_allclose(arm6.inverse_dynamics(Q, Q, Q) - bare.inverse_dynamics(Q, Q, Q),
                               Q * arm, atol=1e-10)


def test_batch_equals_loop(arm6):
    rng = np.random.default_rng(7)
    N, n = 12, 6
    Q, QD, QDD = rng.uniform(-2, 2, (3, N, n))
    W = rng.normal(size=(N, 6))
    single = {
        "inverse_dynamics": lambda i: arm6.inverse_dynamics(Q[i], QD[i], QDD[i]),
        "inverse_dynamics_w": lambda i: arm6.inverse_dynamics(Q[i], QD[i], QDD[i], wrench=W[i]),
        "forward_dynamics": lambda i: arm6.forward_dynamics(Q[i], QD[i], QDD[i]),
        "forward_dynamics_w": lambda i: arm6.forward_dynamics(Q[i], QD[i], QDD[i], wrench=W[i]),
        "mass_matrix": lambda i: arm6.mass_matrix(Q[i]),
        "bias": lambda i: arm6.bias(Q[i], QD[i]),
        "gravity": lambda i: arm6.gravity(Q[i]),
        "coriolis_matrix": lambda i: arm6.coriolis_matrix(Q[i], QD[i]),
        "kinetic_energy": lambda i: arm6.kinetic_energy(Q[i], QD[i]),
        "potential_energy": lambda i: arm6.potential_energy(Q[i]),
        "forward_kinematics": lambda i: arm6.forward_kinematics(Q[i]),
        "jacobian": lambda i: arm6.jacobian(Q[i]),
        "link_poses": lambda i: arm6.link_poses(Q[i]),
        "friction_torque": lambda i: arm6.friction_torque(QD[i]),
    }
    batch = {
        "inverse_dynamics": arm6.inverse_dynamics(Q, QD, QDD),
        "inverse_dynamics_w": arm6.inverse_dynamics(Q, QD, QDD, wrench=W),
        "forward_dynamics": arm6.forward_dynamics(Q, QD, QDD),
        "forward_dynamics_w": arm6.forward_dynamics(Q, QD, QDD, wrench=W),
        "mass_matrix": arm6.mass_matrix(Q),
        "bias": arm6.bias(Q, QD),
        "gravity": arm6.gravity(Q),
        "coriolis_matrix": arm6.coriolis_matrix(Q, QD),
        "kinetic_energy": arm6.kinetic_energy(Q, QD),
        "potential_energy": arm6.potential_energy(Q),
        "forward_kinematics": arm6.forward_kinematics(Q),
        "jacobian": arm6.jacobian(Q),
        "link_poses": arm6.link_poses(Q),
        "friction_torque": arm6.friction_torque(QD),
    }
    for key, fn in single.items():
        ref = np.array([fn(i) for i in range(N)])
        assert batch[key].shape == ref.shape, key
        np.testing.assert_allclose(batch[key], ref, rtol=1e-13, atol=1e-13, err_msg=key)
    # a single wrench broadcasts over a batch
    np.testing.assert_allclose(arm6.inverse_dynamics(Q, QD, QDD, wrench=W[0]),
                               arm6.inverse_dynamics(Q, QD, QDD, wrench=np.tile(W[0], (N, 1))))


def test_inputs_are_converted_or_rejected(arm6):
    q = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    ref = arm6.inverse_dynamics(np.array(q), np.zeros(6), np.zeros(6))
    np.testing.assert_allclose(arm6.inverse_dynamics(q, [0] * 6, (0,) * 6), ref)      # lists
    np.testing.assert_allclose(arm6.inverse_dynamics(np.array(q, np.float32), np.zeros(6, int),
                                                     np.zeros(6)), ref, rtol=1e-6)
    strided = np.zeros((6, 2))
    strided[:, 0] = q
    np.testing.assert_allclose(arm6.inverse_dynamics(strided[:, 0], np.zeros(6), np.zeros(6)), ref)
    ro = np.array(q)
    ro.setflags(write=False)
    np.testing.assert_allclose(arm6.mass_matrix(ro), arm6.mass_matrix(np.array(q)))
    with pytest.raises(ModelError, match=r"shape \(6,\) or \(N, 6\)"):
        arm6.inverse_dynamics(np.zeros(5), np.zeros(5), np.zeros(5))
    with pytest.raises(ModelError, match="rows"):
        arm6.inverse_dynamics(np.zeros((3, 6)), np.zeros((4, 6)), np.zeros((3, 6)))
    with pytest.raises(ModelError, match="finite"):
        arm6.inverse_dynamics(np.full(6, np.nan), np.zeros(6), np.zeros(6))
    with pytest.raises(ModelError, match="finite"):
        arm6.forward_dynamics(np.zeros((2, 6)), np.array([[0, 0, 0, 0, 0, np.inf]] * 2), np.zeros((2, 6)))
    with pytest.raises(ModelError, match="finite"):
        arm6.mass_matrix(np.array([0, 0, 0, 0, 0, np.nan]))
    with pytest.raises(ModelError, match="wrench"):
        arm6.inverse_dynamics(np.zeros(6), np.zeros(6), np.zeros(6), wrench=np.zeros(3))
    with pytest.raises(ModelError, match="finite"):
        arm6.inverse_dynamics(np.zeros(6), np.zeros(6), np.zeros(6), wrench=[np.nan] * 6)
    with pytest.raises(ModelError, match="numbers"):
        arm6.mass_matrix(["a"] * 6)
    with pytest.raises(TorqueloopError):
        arm6.jacobian(np.zeros(7))


def test_immutable_and_scaled(arm6):
    X = arm6.placements
    X[0, 0, 0] = 2.0                       # a copy: the model is unchanged
    assert arm6.placements[0, 0, 0] != 2.0
    g = arm6.gravity_vector
    g[2] = 0.0
    assert arm6.gravity_vector[2] == -G
    rng = np.random.default_rng(8)
    q, qd, qdd = rng.uniform(-2, 2, (3, 6))
    heavy = arm6.scaled(1.1)
    arm = np.diag(arm6.drive.armature)
    np.testing.assert_allclose(heavy.mass_matrix(q) - arm, 1.1 * (arm6.mass_matrix(q) - arm), rtol=1e-12)
    np.testing.assert_allclose(heavy.gravity(q), 1.1 * arm6.gravity(q), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(heavy.forward_kinematics(q), arm6.forward_kinematics(q))
    only_mass = arm6.scaled(2.0, inertia_factor=1.0)
    assert not np.allclose(only_mass.mass_matrix(q) - arm, 2.0 * (arm6.mass_matrix(q) - arm))
    with pytest.raises(ModelError):
        arm6.scaled(-1.0)


def test_friction_is_separate(arm6):
    qd = np.array([1.0, -1.0, 0.0, 2.0, -0.5, 0.1])
    d = arm6.drive
    np.testing.assert_allclose(arm6.friction_torque(qd), d.viscous * qd + d.coulomb * np.sign(qd))
    # friction is not in the inverse dynamics
    q = np.zeros(6)
    tau_a = arm6.inverse_dynamics(q, qd, np.zeros(6))
    tau_b = arm6.bias(q, qd)
    np.testing.assert_allclose(tau_a, tau_b)


def test_constructor_general_placements():
    # a hand-built 1-joint model: joint axis along world x through (0, 0, 1)
    X = np.eye(4)
    X[:3, :3] = [[0, 0, 1], [0, 1, 0], [-1, 0, 0]]   # local z -> world x
    X[:3, 3] = [0, 0, 1]
    model = SerialModel(joint_types=["revolute"], placements=[X], mass=[1.0], com=[[0, 0.5, 0]],
                        inertia=[np.eye(3) * 0.01], name="hand")
    # COM at local y = 0.5 -> world y = 0.5; rotating about world x lifts it: tau = m g 0.5 cos q
    for q in (0.0, 0.3, 1.2):
        assert model.gravity([q])[0] == pytest.approx(G * 0.5 * math.cos(q))
    with pytest.raises(ModelError, match="semi-definite"):
        SerialModel(joint_types=["revolute"], placements=[X], mass=[1.0], com=[[0, 0, 0]],
                    inertia=[-np.eye(3)])
    with pytest.raises(ModelError, match="revolute"):
        SerialModel(joint_types=["ball"], placements=[X], mass=[1.0], com=[[0, 0, 0]],
                    inertia=[np.eye(3)])
    with pytest.raises(ModelError, match="rigid transform"):
        SerialModel(joint_types=["revolute"], placements=[2 * X], mass=[1.0], com=[[0, 0, 0]],
                    inertia=[np.eye(3)])


# ---------------------------------------------------------------------------
# robot-file errors
# ---------------------------------------------------------------------------

def _arm6_data():
    return read_toml(ROBOTS / "arm6_demo.toml")


def _set(path, value):
    def edit(d):
        keys = path.split(".")
        cur = d
        for k in keys[:-1]:
            cur = cur[int(k)] if isinstance(cur, list) else cur[k]
        if value is _DEL:
            del cur[keys[-1]]
        else:
            cur[keys[-1]] = value
        return d
    return edit


_DEL = object()


@pytest.mark.parametrize("edit, field, words", [
    (_set("joints.1.masss", 1.0), "joints[1].masss", "unknown field"),
    (_set("joints.2.com", [0.1, 0.2]), "joints[2].com", "shape 3"),
    (_set("joints.0.mass", -1.0), "joints[0].mass", ">= 0"),
    (_set("joints.3.inertia", [0.01, 0.01, -0.01, 0, 0, 0]), "joints[3].inertia", "semi-definite"),
    (_set("joints.3.inertia", [0.01, 0.01, 0.03, 0, 0, 0]), "joints[3].inertia", "triangle"),
    (_set("joints.3.inertia", [0.01, 0.01, 0.01, 0, 0]), "joints[3].inertia", "shape 6"),
    (_set("joints.1.a", float("nan")), "joints[1].a", "finite"),
    (_set("joints.4.inertia", [0.01, float("nan"), 0.01, 0, 0, 0]), "joints[4].inertia", "finite"),
    (_set("joints.0.mass", _DEL), "joints[0].mass", "missing"),
    (_set("convention", "craig"), "convention", "one of"),
    (_set("gravity", [0, 0, -9.81, 0]), "gravity", "shape 3"),
    (_set("base.rpy", [0, 0, 0]), "base.rpy_deg", "not both"),
    (_set("tool.quat", [1, 0, 0, 0]), "tool.quat", "unknown field"),
    (_set("joints.0.alpha", 1.0), "joints[0].alpha_deg", "not both"),
    (_set("joints.0.type", "spherical"), "joints[0].type", "one of"),
    (_set("joints.2.position_min_deg", 200.0), "joints[2].position_max", "greater than"),
    (_set("joints.2.torque_max", 0.0), "joints[2].torque_max", "> 0"),
    (_set("joints.5.point_masses", [{"mass": 1.0, "pos": [0, 0, 0]}]), "joints[5].point_masses[0]",
     "missing"),
    (_set("colour", "red"), "colour", "unknown field"),
    (_set("joints", []), "joints", "at least one"),
])
def test_bad_robot_files_name_file_and_field(tmp_path, edit, field, words):
    data = edit(_arm6_data())
    path = tmp_path / "bad_arm.toml"
    path.write_bytes(tomli_w.dumps(data).encode())
    with pytest.raises(ConfigError) as ei:
        load_model(path)
    msg = str(ei.value)
    assert str(path) in msg, msg
    assert f"'{field}" in msg, msg
    assert words in msg, msg


def test_massless_chain_is_rejected(tmp_path):
    data = planar([_link(1.0, 1.0, [-0.5, 0, 0], [0, 0.1, 0.1, 0, 0, 0]),
                   _link(1.0, 0.0, [0, 0, 0], [0, 0, 0, 0, 0, 0])])
    with pytest.raises(ConfigError, match="singular"):
        load_model(data, file="massless.toml")


def test_point_masses_are_lumped():
    with_pm = planar([_link(1.0, 2.0, [-0.5, 0, 0], [0.01, 0.1, 0.1, 0, 0, 0],
                            point_masses=[{"mass": 1.5, "position": [0.0, 0.1, 0.0]}])])
    m = load_model(with_pm)
    # equivalent single body: mass 3.5, COM and inertia by the parallel-axis theorem
    c = (2.0 * np.array([-0.5, 0, 0]) + 1.5 * np.array([0, 0.1, 0])) / 3.5
    I = np.diag([0.01, 0.1, 0.1])
    for mm, p in ((2.0, np.array([-0.5, 0, 0])), (1.5, np.array([0, 0.1, 0]))):
        r = p - c
        I = I + mm * (r @ r * np.eye(3) - np.outer(r, r))
    ref = planar([_link(1.0, 3.5, list(c), [I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[0, 2], I[1, 2]])])
    r = load_model(ref)
    for q in (0.0, 0.7, -2.0):
        np.testing.assert_allclose(m.mass_matrix([q]), r.mass_matrix([q]), rtol=1e-12)
        np.testing.assert_allclose(m.gravity([q]), r.gravity([q]), rtol=1e-12)


def test_urdf_without_pinocchio_is_a_config_error(monkeypatch, tmp_path):
    import sys

    from dynamics.urdf import load_urdf
    monkeypatch.setitem(sys.modules, "pinocchio", None)    # import pinocchio -> ImportError
    p = tmp_path / "arm.urdf"
    p.write_text("<robot name='x'/>")
    with pytest.raises(ConfigError, match="needs Pinocchio") as ei:
        load_model(p)
    assert str(p) in str(ei.value)
    with pytest.raises(ConfigError, match="needs Pinocchio"):
        load_urdf(p)


def test_singular_mass_matrix_is_a_model_error():
    X = np.eye(4)
    # nothing moves with the joint: M = 0
    model = SerialModel(joint_types=["revolute"], placements=[X], mass=[0.0], com=[[0, 0, 0]],
                        inertia=[np.zeros((3, 3))], name="ghost")
    with pytest.raises(ModelError, match="not positive definite"):
        model.forward_dynamics(np.zeros(1), np.zeros(1), np.ones(1))
    with pytest.raises(ModelError, match="not positive definite"):
        model.forward_dynamics(np.zeros((3, 1)), np.zeros((3, 1)), np.ones((3, 1)))


@pytest.mark.parametrize("n", [1, 7, STACK_JOINTS, STACK_JOINTS + 1, STACK_JOINTS + 6])
def test_one_state_calls_on_either_side_of_the_stack_bound(n):
    """The one-state entry points keep their scratch on the stack up to ``STACK_JOINTS`` joints
    and decline a longer chain, which the model then computes on the allocating path: the same
    values either way (against the batch kernels, which allocate), for a random n-joint chain."""
    from dynamics import _serial_kernels as K

    rng = np.random.default_rng(n)
    X = np.tile(np.eye(4), (n, 1, 1))
    for i in range(n):
        X[i, :3, 3] = rng.uniform(-0.2, 0.2, 3)
        a, b = rng.uniform(-np.pi, np.pi, 2)
        X[i, :3, :3] = (np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
                        @ np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]]))
    model = SerialModel(joint_types=["revolute", "prismatic"] * (n // 2) + ["revolute"] * (n % 2), placements=X,
                        mass=rng.uniform(0.5, 2.0, n), com=rng.uniform(-0.05, 0.05, (n, 3)),
                        inertia=[np.eye(3) * 0.01] * n, name=f"chain{n}")
    q, qd, qdd = rng.uniform(-1, 1, (3, n))
    tau = model.inverse_dynamics(q, qd, qdd)
    M = model.mass_matrix(q)
    acc = model.forward_dynamics(q, qd, tau)
    assert np.array_equal(tau, model.inverse_dynamics(q[None], qd[None], qdd[None])[0])
    assert np.array_equal(M, model.mass_matrix(q[None])[0])
    assert np.allclose(acc, qdd, rtol=1e-8, atol=1e-8)
    out = np.empty(n)
    if n <= K.STACK_JOINTS:
        K.rnea_into(model._P, q, qd, qdd, out)
        assert np.array_equal(out, tau)
    else:
        with pytest.raises(ValueError, match="more joints"):
            K.rnea_into(model._P, q, qd, qdd, out)
