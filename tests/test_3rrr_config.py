"""Robot files of the planar 3RRR: loading and ConfigError naming file and field."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.errors import ConfigError
from dynamics.planar3rrr import Planar3RRR

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"


def _data(name="3rrr_horizontal.toml"):
    with open(ROBOTS / name, "rb") as fh:
        return tomllib.load(fh)


@pytest.mark.parametrize("name", ["3rrr_horizontal.toml", "3rrr_vertical.toml"])
def test_robot_files_load(name):
    m = load_model(ROBOTS / name)
    assert isinstance(m, Planar3RRR)
    assert m.source == str(ROBOTS / name)
    assert m.dof == 3 and m.task_dof == 3
    assert m.joint_names == ("theta1", "theta2", "theta3")
    rep = m.singularity(m.home_q, m.home_pose)
    assert rep.kind == "regular" and rep.margin > 0.5
    np.testing.assert_allclose(m.drive.armature, 3.0e-5 * 81)
    np.testing.assert_allclose(m.limits.torque_max, 15.0)
    if "vertical" in name:
        np.testing.assert_allclose(m.gravity_vector, [0.0, -9.81, 0.0])
    else:
        np.testing.assert_allclose(m.gravity_vector, 0.0)
    assert "home pose" in m.summary()


def test_per_leg_lists_and_explicit_points():
    d = _data()
    d["proximal"]["mass"] = [0.4, 0.5, 0.6]
    ang = np.radians([90.0, 210.0, 330.0])
    d.pop("base_radius")
    d.pop("base_angles_deg")
    d["base_joints"] = (0.5 * np.stack([np.cos(ang), np.sin(ang)], 1)).tolist()
    m = load_model(d, file="mem.toml")
    np.testing.assert_allclose(m.proximal.mass, [0.4, 0.5, 0.6])
    ref = load_model(ROBOTS / "3rrr_horizontal.toml")
    np.testing.assert_allclose(m.base_joints, ref.base_joints, atol=1e-15)


def _expect(d, field, match=None):
    with pytest.raises(ConfigError) as ei:
        load_model(d, file="robot.toml")
    assert ei.value.file == "robot.toml"
    assert ei.value.field == field, str(ei.value)
    if match:
        assert match in str(ei.value), str(ei.value)
    return ei.value


def test_config_errors_name_the_field():
    base = _data()
    cases = []
    d = copy.deepcopy(base); d["proximal"]["length"] = -0.3; cases.append((d, "proximal.length", ">"))
    d = copy.deepcopy(base); d["distal"]["mass"] = [0.3, 0.3]; cases.append((d, "distal.mass", "shape"))
    d = copy.deepcopy(base); d["distal"]["colour"] = "red"; cases.append((d, "distal.colour", "unknown"))
    d = copy.deepcopy(base); del d["platform"]["inertia"]; cases.append((d, "platform.inertia", "missing"))
    d = copy.deepcopy(base); d["elbow_branch"] = [1, 0, 1]; cases.append((d, "elbow_branch", "+1 or -1"))
    d = copy.deepcopy(base); d["gravity"] = [0.0, 0.0, -9.81]; cases.append((d, "gravity", "shape"))
    d = copy.deepcopy(base); d["base_joints"] = [[0, 0], [1, 0], [0, 1]]
    cases.append((d, "base_radius", "either"))
    d = copy.deepcopy(base); d["platform_angles_deg"] = [0.0, 0.0, 120.0]
    cases.append((d, "platform_angles_deg", "coincide"))
    d = copy.deepcopy(base); d["actuators"]["torque_max"] = 0.0; cases.append((d, "actuators.torque_max", ">"))
    d = copy.deepcopy(base); d["actuators"]["position_max"] = -4.0
    cases.append((d, "actuators.position_max", "exceed"))
    d = copy.deepcopy(base); d["drive"]["gear_ratio"] = "nine"; cases.append((d, "drive.gear_ratio", "number"))
    d = copy.deepcopy(base); d["wheels"] = 4; cases.append((d, "wheels", "unknown"))
    d = copy.deepcopy(base); d["home_pose"] = [0.0, 0.0]; cases.append((d, "home_pose", "shape"))
    d = copy.deepcopy(base); d["actuators"]["position_min"] = 0.0; d["actuators"]["position_max"] = 0.5
    cases.append((d, "actuators.position_min", "outside"))
    for d, field, match in cases:
        _expect(d, field, match)


def test_unreachable_home_names_the_leg():
    d = _data()
    d["home_pose"] = [0.0, 0.45, 0.0]
    err = _expect(d, "home_pose", "unreachable")
    assert "leg 2" in str(err) or "leg 3" in str(err)


def test_singular_home_is_rejected():
    d = _data()
    # |A_i - C_i| = 0.4 at home: with a = b = 0.2 every leg is fully stretched (type 1)
    d["proximal"]["length"] = 0.2
    d["distal"]["length"] = 0.2
    d["proximal"]["com"] = 0.1
    d["distal"]["com"] = 0.1
    _expect(d, "home_pose", "singular")


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_model(tmp_path / "nope.toml")
    p = tmp_path / "bad.toml"
    p.write_text("type = 'planar_3rrr'\nname = \n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_model(p)
