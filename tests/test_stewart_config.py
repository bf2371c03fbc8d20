"""Stewart robot file: loading, documented defaults, and ConfigError naming file and field."""

import copy
import tomllib
from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.errors import ConfigError
from dynamics.stewart import StewartPlatform

ROBOT = Path(__file__).resolve().parents[1] / "hil_configs" / "robots" / "stewart.toml"


@pytest.fixture(scope="module")
def data():
    with open(ROBOT, "rb") as fh:
        return tomllib.load(fh)


def test_load_file(data):
    m = load_model(ROBOT)
    assert isinstance(m, StewartPlatform)
    assert m.source == str(ROBOT) and m.name == "hexapod-demo"
    assert m.dof == 6 and m.task_dof == 6 and m.joint_names[0] == "leg1"
    np.testing.assert_array_equal(m.home_pose, data["home_pose"])
    np.testing.assert_allclose(m.drive.armature, 1.5e-5 * (2 * np.pi / 0.01) ** 2)
    np.testing.assert_allclose(m.limits.position_max, 1.5)
    np.testing.assert_allclose(m.limits.torque_max, 2000.0)
    # radius/angle form
    np.testing.assert_allclose(m.base_joints[0], [np.cos(np.deg2rad(15)), np.sin(np.deg2rad(15)), 0.0])
    # default universal-joint axes: horizontal and perpendicular to the leg at home
    u = m.leg_kinematics(m.home_pose).units
    np.testing.assert_allclose(np.einsum("ij,ij->i", m.ujoint_axes, u), 0.0, atol=1e-12)
    np.testing.assert_allclose(m.ujoint_axes[:, 2], 0.0, atol=1e-12)
    assert "hexapod-demo" in m.summary()
    # explicit joint form gives the same model
    d = copy.deepcopy(data)
    g = d["geometry"]
    d["geometry"] = {"base_joints": m.base_joints.tolist(), "platform_joints": m.platform_joints.tolist(),
                     "ujoint_axes": m.ujoint_axes.tolist()}
    m2 = load_model(d, file="inline.toml")
    X = m.home_pose + 0.01
    np.testing.assert_allclose(m2.task_inverse_dynamics(X, X * 0, X * 0), m.task_inverse_dynamics(X, X * 0, X * 0),
                               rtol=1e-12)
    assert g  # untouched original


def _mutate(data, path, value):
    d = copy.deepcopy(data)
    keys = path.split(".")
    t = d
    for k in keys[:-1]:
        t = t[k]
    if value is _DELETE:
        del t[keys[-1]]
    else:
        t[keys[-1]] = value
    return d


_DELETE = object()

BAD = [
    ("platform.mass", -1.0, "platform.mass"),
    ("platform.mass", _DELETE, "platform.mass"),
    ("platform.inertia", [[1, 0.5, 0], [0, 1, 0], [0, 0, 1]], "platform.inertia"),
    ("platform.inertia", [1.0, 1.0, 3.0], "platform.inertia"),
    ("platform.com", [0.0, 0.0], "platform.com"),
    ("platform.colour", "red", "platform.colour"),
    ("leg.length_max", 0.7, "leg.length_max"),
    ("leg.lower.mass", "heavy", "leg.lower.mass"),
    ("leg.upper.inertia", [-1.0, 1.0, 1.0], "leg.upper.inertia"),
    ("leg.upper.com_distance", 9.0, "leg.upper.com_distance"),
    ("leg.force_max", float("inf"), "leg.force_max"),
    ("geometry.base_angles_deg", [0.0, 1.0], "geometry.base_angles_deg"),
    ("geometry.base_joints", [[0.0, 0.0, 0.0]] * 6, "geometry.base_joints"),  # clashes with base_radius
    ("geometry.ujoint_axes", [[0.0, 0.0, 0.0]] * 6, "geometry.ujoint_axes"),
    ("drive.armature", 1.0, "drive.armature"),      # together with rotor_inertia: ambiguous
    ("drive.screw_lead", 0.0, "drive.screw_lead"),
    ("drive.screw_lead", 1e-300, "drive.screw_lead"),   # armature overflows a float
    ("home_pose", [0.0, 0.0, 0.9], "home_pose"),
    ("home_pose", [0.0, 0.0, 2.0, 0.0, 0.0, 0.0], "home_pose"),        # legs too long: names the leg
    ("home_pose", [0.0, 0.0, 0.9, 0.0, 1.5707963267948966, 0.0], "home_pose"),
    ("gravity", [0.0, 0.0, float("nan")], "gravity"),
    ("extra_key", 1, "extra_key"),
]


@pytest.mark.parametrize("path,value,field", BAD, ids=[b[0] + str(i) for i, b in enumerate(BAD)])
def test_bad_values_name_file_and_field(data, path, value, field):
    d = _mutate(data, path, value)
    with pytest.raises(ConfigError) as info:
        load_model(d, file="bad.toml")
    err = info.value
    assert err.file == "bad.toml"
    assert err.field == field, str(err)
    assert "bad.toml" in str(err) and field in str(err)


def test_degenerate_geometry_rejected(data):
    d = copy.deepcopy(data)
    d["geometry"] = {"base_joints": [[0.0, 0.0, 0.0]] * 6, "platform_joints": [[0.0, 0.0, 0.0]] * 6,
                     "ujoint_axes": [[1.0, 0.0, 0.0]] * 6}
    with pytest.raises(ConfigError, match="singular") as info:
        load_model(d, file="bad.toml")
    assert info.value.field == "home_pose"


def test_unreachable_home_names_leg(data):
    with pytest.raises(ConfigError, match="leg1"):
        load_model(_mutate(data, "home_pose", [0.0, 0.0, 2.0, 0.0, 0.0, 0.0]), file="bad.toml")


def test_singular_home_rejected(data):
    d = _mutate(data, "home_pose", [0.0, 0.0, 0.9, 0.0, 0.0, np.pi / 2])
    d["leg"]["length_max"] = 2.0
    with pytest.raises(ConfigError, match="singular") as info:
        load_model(d, file="bad.toml")
    assert info.value.field == "home_pose"


def test_ujoint_parallel_to_leg_rejected(data):
    m = load_model(ROBOT)
    u = m.leg_kinematics(m.home_pose).units
    d = copy.deepcopy(data)
    d["geometry"]["ujoint_axes"] = u.tolist()
    with pytest.raises(ConfigError, match="universal joint") as info:
        load_model(d, file="bad.toml")
    assert info.value.field == "geometry.ujoint_axes"


def test_drive_forms(data):
    d = copy.deepcopy(data)
    d["drive"] = {"armature": 3.5, "viscous": 1.0}
    m = load_model(d)
    np.testing.assert_allclose(m.drive.armature, 3.5)
    np.testing.assert_allclose(m.drive.coulomb, 0.0)
    np.testing.assert_allclose(m.friction_torque(np.array([1.0, -1, 0, 0, 0, 2])), [1.0, -1, 0, 0, 0, 2])
    del d["drive"]
    np.testing.assert_allclose(load_model(d).drive.armature, 0.0)


def test_documented_default_singular_condition_is_accepted_when_written_out():
    """issue 36: the file's documented default (1e9, a dimensionless condition number) was refused
    by the robot files' SI magnitude bound (1e7); the field has its own range instead."""
    with open(ROBOT, "rb") as fh:
        data = tomllib.load(fh)
    assert "singular_condition" not in data
    written = {**copy.deepcopy(data), "singular_condition": 1e9}
    assert load_model(written, file="w.toml").singular_condition == load_model(ROBOT).singular_condition == 1e9
    for bad in (1e16, 0.5, float("inf")):
        with pytest.raises(ConfigError) as ei:
            load_model({**copy.deepcopy(data), "singular_condition": bad}, file="w.toml")
        assert ei.value.field == "singular_condition"
    # the SI bound still holds everywhere else
    huge = copy.deepcopy(data)
    huge["gravity"] = [0.0, 0.0, -1e9]
    with pytest.raises(ConfigError) as ei:
        load_model(huge, file="w.toml")
    assert ei.value.field == "gravity" and "1e+07" in str(ei.value)
