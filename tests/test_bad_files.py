"""Bad files give a clear error naming the file (and the field), exit code 2, never a traceback."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.telemetry import read_log
from dynamics import load_model
from dynamics.config import read_toml
from dynamics.errors import ConfigError, TorqueloopError

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ROOT / "hil_configs" / "robots"


def _tl(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "controller.app.cli", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("content", [bytes(range(256)) * 2, 'name = "caf\xe9"\n'.encode("latin-1"),
                                     b"\x89PNG\r\n\x1a\n" + bytes(100)])
def test_binary_or_non_utf8_toml_is_a_config_error_naming_the_file(tmp_path, content):
    p = tmp_path / "robot.toml"
    p.write_bytes(content)
    with pytest.raises(ConfigError) as ei:
        read_toml(p)
    assert ei.value.file == str(p) and "UTF-8" in str(ei.value)
    r = _tl("check", p)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert str(p) in r.stderr and "UTF-8" in r.stderr and "Traceback" not in r.stderr


def test_binary_robot_file_named_by_a_run_config(tmp_path):
    bad = tmp_path / "arm.toml"
    bad.write_bytes(bytes(range(128, 256)))
    run = tmp_path / "run.toml"
    run.write_text((ROOT / "hil_configs" / "runs" / "seed000_fast.toml").read_text()
                   .replace('file = "../robots/seed000_arm.toml"', f'file = "{bad.as_posix()}"'))
    r = _tl("run", run, "--no-plots", "-o", tmp_path / "out")
    assert r.returncode == 2 and str(bad) in r.stderr and "Traceback" not in r.stderr


def _arm_dict():
    return read_toml(ROBOTS / "arm6_demo.toml")


@pytest.mark.parametrize("key", ["a", "d", "alpha"])
def test_a_missing_dh_parameter_is_an_error_not_zero(key):
    data = _arm_dict()
    j = data["joints"][2]
    j.pop(key, None)
    j.pop(key + "_deg", None)
    with pytest.raises(ConfigError) as ei:
        load_model(data, file="arm.toml")
    assert ei.value.file == "arm.toml" and ei.value.field == f"joints[2].{key}"
    assert "missing" in str(ei.value)


def test_unknown_joint_key_lists_every_valid_key():
    data = _arm_dict()
    data["joints"][1]["torque_limit"] = 10.0          # a plausible typo of torque_max
    with pytest.raises(ConfigError) as ei:
        load_model(data, file="arm.toml")
    msg = str(ei.value)
    assert ei.value.field == "joints[1].torque_limit"
    for key in ("a", "alpha", "alpha_deg", "d", "offset", "offset_deg", "mass", "com", "inertia",
                "point_masses", "torque_max", "velocity_max", "position_min", "position_max",
                "position_min_deg", "position_max_deg", "rotor_inertia", "gear_ratio", "viscous",
                "coulomb", "name", "type"):
        assert f"'{key}'" in msg, key


def test_a_file_that_is_not_a_log_gives_a_clear_error(tmp_path):
    cases = {
        "text.npy": b"time,q\n0,1\n",
        "pickled.npy": None,
        "plain.npy": None,
        "truncated.npy": None,
    }
    np.save(tmp_path / "plain.npy", np.arange(10.0))
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    good = np.zeros(3, dtype=[("t", float), ("q[0]", float)])
    np.save(tmp_path / "truncated.npy", good)
    raw = (tmp_path / "truncated.npy").read_bytes()
    (tmp_path / "truncated.npy").write_bytes(raw[:-10])
    (tmp_path / "text.npy").write_bytes(cases["text.npy"])
    (tmp_path / "notes.txt").write_bytes(pickle.dumps({"x": 1}))
    for name in ("text.npy", "pickled.npy", "plain.npy", "truncated.npy", "notes.txt"):
        p = tmp_path / name
        with pytest.raises(TorqueloopError) as ei:
            read_log(p)
        assert str(p) in str(ei.value) and "not a torqueloop telemetry log" in str(ei.value)
        assert "allow_pickle" not in str(ei.value)
    r = _tl("plot", tmp_path / "pickled.npy", "-o", tmp_path / "plots")
    assert r.returncode == 2 and "not a torqueloop telemetry log" in r.stderr and "allow_pickle" not in r.stderr
