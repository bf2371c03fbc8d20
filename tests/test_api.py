"""The Python API (controller.app.api.simulate) and trajectories read from files (trajectories.files)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.app.api import simulate
from controller.laws import ComputedTorque, Saturation
from controller.app.run import build_run, load_run
from controller.telemetry import read_log
from dynamics import load_model
from dynamics.config import Section
from dynamics.errors import ConfigError
from trajectories import FileTrajectory, load_trajectory, preset, read_samples

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ROOT / "hil_configs" / "robots"


def test_simulate_gives_the_same_log_as_the_toml_run(tmp_path):
    """seed000_fast.toml, and the same parts as objects: the two logs are identical."""
    spec = load_run(ROOT / "hil_configs" / "runs" / "seed000_fast.toml", duration_s=0.5)
    res = build_run(spec, out_dir=tmp_path / "toml").execute()
    ref = read_log(tmp_path / "toml")
    arm = load_model(ROBOTS / "seed000_arm.toml")
    out = simulate(arm, preset("seed000_fast", arm),
                   ComputedTorque(arm, 30.0 ** 2, 2 * 30.0, saturation=Saturation(arm.limits.torque_max)),
                   driver_options={"joint_names": ["gamma1", "alpha2", "alpha3"]},
                   plant={"mass_factor": 1.1, "viscous": 0.2, "coulomb": 0.5, "current_lag_s": 0.0005,
                          "encoder_counts_per_rev": 65536, "seed": 3},
                   safety={"stop_reaction": "brake_disable", "brake_kd_nm_s_per_rad": 20.0,
                           "tracking_error_max": 0.05},
                   duration_s=0.5)
    assert out.status == res.status == "completed" and len(out.log) == len(ref) == 502
    for key in ("t", "q", "qd", "ref_pos", "err", "tau_cmd", "tau_meas"):
        np.testing.assert_array_equal(out.log[key], ref[key], err_msg=key)
    assert out.log["q"].shape == (502, 3)
    np.testing.assert_allclose(out.metrics["rms_error"], res.metrics["rms_error"], rtol=0, atol=0)


def test_simulate_through_the_mit_protocol_and_keeps_the_log(tmp_path):
    arm = load_model(ROBOTS / "seed003_2r.toml")
    ref = FileTrajectory(_write_csv(tmp_path / "plan.csv", _min_jerk_samples(2)), kind="quintic")
    joints = [{"can_id": 1, "model": "AK10-9", "gear_ratio": 4.0},   # 260 N m: the 2R arm needs ~180
              {"can_id": 2, "model": "AK10-9", "gear_ratio": 4.0}]
    out = simulate(arm, ref, ComputedTorque(arm, 400.0, 40.0), driver="sim_mit_can",
                   driver_options={"joints": joints}, plant={"mass_factor": 1.05},
                   out_dir=tmp_path / "run")
    assert out.status == "completed" and (tmp_path / "run" / "log.npy").exists()
    assert np.abs(out.log["err"]).max() < 0.02
    with pytest.raises(ConfigError, match="simulated drivers only"):
        simulate(arm, ref, ComputedTorque(arm, 400.0, 40.0), driver="mit_can")


def _readme_python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Python API", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_readme_api_example_runs(tmp_path, monkeypatch):
    blocks = _readme_python_blocks()
    assert blocks, "README has a ## Python API section with a python example"
    monkeypatch.chdir(ROOT)
    ns: dict = {}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), ns)    # noqa: S102 - the documented example
    out = ns["out"]
    assert out.status == "completed" and out.log["q"].shape[1] == 2
    df, names = ns["df"], list(out.joint_names)     # the log as a DataFrame, one column per value
    assert len(df) == len(out.log) and list(df.columns[:3]) == ["t", f"q[{names[0]}]", f"q[{names[1]}]"]
    np.testing.assert_array_equal(df[f"err[{names[1]}]"].to_numpy(), out.log["err"][:, 1])


# ---------------------------------------------------------------------------
# trajectories from files
# ---------------------------------------------------------------------------
def _min_jerk(t, T, q0, q1):
    s = np.clip(t / T, 0, 1)[:, None]
    d = (np.asarray(q1) - np.asarray(q0))[None, :]
    pos = q0 + d * (10 * s**3 - 15 * s**4 + 6 * s**5)
    vel = d * (30 * s**2 - 60 * s**3 + 30 * s**4) / T
    acc = d * (60 * s - 180 * s**2 + 120 * s**3) / T**2
    return pos, vel, acc


def _min_jerk_samples(n, T=1.5, k=61, t0=0.0):
    t = np.linspace(0, T, k)
    pos, _, _ = _min_jerk(t, T, np.zeros(n), np.linspace(0.4, -0.3, n))
    return t + t0, pos


def _write_csv(path, samples, header=True, delim=","):
    t, pos = samples
    lines = ["# planner output"]
    if header:
        lines.append(delim.join(["t"] + [f"q{i + 1}" for i in range(pos.shape[1])]))
    lines += [delim.join(repr(float(v)) for v in (ti, *row)) for ti, row in zip(t, pos)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_file_trajectory_derivatives_match_the_sampled_function(tmp_path):
    t, pos = _min_jerk_samples(3, T=1.5, k=151, t0=10.0)     # times shifted: start at 0
    traj = FileTrajectory(_write_csv(tmp_path / "p.csv", (t, pos)))
    assert traj.duration_s == pytest.approx(1.5) and traj.dim == 3 and traj.names == ("q1", "q2", "q3")
    tt = np.linspace(0, 1.5, 401)
    s = traj.sample(tt)
    p_ref, v_ref, a_ref = _min_jerk(tt, 1.5, np.zeros(3), np.linspace(0.4, -0.3, 3))
    np.testing.assert_allclose(s.pos, p_ref, atol=1e-9)
    np.testing.assert_allclose(s.vel, v_ref, atol=1e-7)
    np.testing.assert_allclose(s.acc, a_ref, atol=2e-5)
    # the cubic spline is C2 with the same samples; natural ends have zero acceleration
    cub = FileTrajectory(tmp_path / "p.csv", kind="cubic", bc="natural")
    np.testing.assert_allclose(cub.sample(tt).vel, v_ref, atol=1e-4)
    np.testing.assert_allclose(cub.sample(0.0).acc, 0.0, atol=1e-12)


def test_csv_and_npy_layouts_give_the_same_trajectory(tmp_path):
    t, pos = _min_jerk_samples(2)
    a = FileTrajectory(_write_csv(tmp_path / "a.csv", (t, pos)))
    b = FileTrajectory(_write_csv(tmp_path / "b.txt", (t, pos), header=False, delim="\t"))
    np.save(tmp_path / "c.npy", np.column_stack([t, pos]))
    st = np.zeros(t.size, dtype=[("time", float), ("shoulder", float), ("elbow", float)])
    st["time"], st["shoulder"], st["elbow"] = t, pos[:, 0], pos[:, 1]
    np.save(tmp_path / "d.npy", st)
    tt = np.linspace(0, 1.5, 50)
    for other in (b, FileTrajectory(tmp_path / "c.npy"), FileTrajectory(tmp_path / "d.npy")):
        np.testing.assert_array_equal(other.sample(tt).pos, a.sample(tt).pos)
    assert FileTrajectory(tmp_path / "d.npy").names == ("shoulder", "elbow")


@pytest.mark.parametrize("content, expected", [
    ("t,q1\n0,0\n0.5,1\n0.5,2\n", "strictly increasing: sample 2"),
    ("t,q1\n0,0\n0.5,nan\n1,2\n", "sample 1 (t = 0.5) has a non-finite value"),
    ("t,q1\n0,0\n", "at least 2 samples"),
    ("t,q1\n0,0\n0.5,1,3\n", "line 3: 3 columns"),
    ("t,q1\n0,0\n0.5,abc\n", "line 3: not a number"),
    ("t\n0\n1\n", "no position columns"),
    ("", "empty file"),
])
def test_bad_trajectory_files_name_the_file_and_the_place(tmp_path, content, expected):
    p = tmp_path / "plan.csv"
    p.write_text(content)
    with pytest.raises(ConfigError) as ei:
        read_samples(p)
    assert ei.value.file == str(p) and expected in str(ei.value)


def test_bad_binary_files(tmp_path):
    p = tmp_path / "plan.csv"
    p.write_bytes(bytes(range(128, 256)))
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_samples(p)
    q = tmp_path / "plan.npy"
    q.write_bytes(b"garbage")
    with pytest.raises(ConfigError, match="not a .npy file"):
        read_samples(q)
    np.save(q, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ConfigError) as ei:
        read_samples(q)
    assert "allow_pickle" not in str(ei.value)
    (tmp_path / "plan.toml").write_text("x = 1")
    with pytest.raises(ConfigError, match="unknown trajectory file type"):
        read_samples(tmp_path / "plan.toml")
    with pytest.raises(ConfigError, match="not found"):
        read_samples(tmp_path / "missing.csv")


def test_trajectory_table_type_file(tmp_path):
    arm = load_model(ROBOTS / "seed003_2r.toml")
    _write_csv(tmp_path / "plans.csv", _min_jerk_samples(2))
    cfg = str(tmp_path / "run.toml")
    traj = load_trajectory(Section({"type": "file", "path": "plans.csv"}, cfg, "trajectory"), arm)
    assert traj.dim == 2 and traj.duration_s == pytest.approx(1.5)
    _write_csv(tmp_path / "three.csv", _min_jerk_samples(3))
    with pytest.raises(ConfigError) as ei:
        load_trajectory(Section({"type": "file", "path": "three.csv"}, cfg, "trajectory"), arm)
    assert ei.value.file == cfg and ei.value.field == "trajectory.path" and "expected 2" in str(ei.value)
    with pytest.raises(ConfigError) as ei:
        load_trajectory(Section({"type": "file", "path": "nope.csv"}, cfg, "trajectory"), arm)
    assert ei.value.field == "trajectory.path" and "nope.csv" in str(ei.value)


def test_run_config_with_a_file_trajectory(tmp_path):
    _write_csv(tmp_path / "plan.csv", _min_jerk_samples(2))
    robot = (ROBOTS / "seed003_2r.toml").as_posix()
    (tmp_path / "run.toml").write_text(f'''
name = "from_planner"
[robot]
file = "{robot}"
[trajectory]
type = "file"
path = "plan.csv"
[controller]
kind = "computed_torque"
wn_rad_s = 20.0
[driver]
type = "sim_direct"
''')
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "controller.app.cli", "run", str(tmp_path / "run.toml"), "-o",
                        str(tmp_path / "out"), "--no-plots"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr)
    log = read_log(tmp_path / "out")
    expect = FileTrajectory(tmp_path / "plan.csv").sample(log["t"]).pos
    np.testing.assert_allclose(log["ref_pos"], expect, rtol=0, atol=1e-12)


# -- the config-first API: run_config / RunOutput ----------------------------------------------

def test_run_config_overrides_a_shipped_config_like_the_command(tmp_path, capsys):
    """A shipped config by name with a dotted override gives the same log as `torqueloop run --set`,
    and its result reads back: metrics recomputed from the log, the folder's files, a DataFrame."""
    from controller.app import RunOutput, run_config, shipped_configs
    from controller.app.cli import main

    assert "seed003_2r" in shipped_configs()
    out = run_config("seed003_2r", overrides={"controller.wn_rad_s": 40.0}, duration_s=0.3,
                     out_dir=tmp_path / "api")
    assert out.status == "completed" and out.run_dir == tmp_path / "api"
    assert out.meta["config"]["controller"]["wn_rad_s"] == 40.0
    assert main(["run", str(ROOT / "hil_configs" / "runs" / "seed003_2r.toml"), "--duration", "0.3",
                 "--set", "controller.wn_rad_s=40.0", "-o", str(tmp_path / "cli"), "--no-plots"]) == 0
    cli = read_log(tmp_path / "cli")
    np.testing.assert_array_equal(out.log["q"], cli["q"])
    np.testing.assert_array_equal(out.log["tau_cmd"], cli["tau_cmd"])
    base = run_config("seed003_2r", duration_s=0.3, out_dir=tmp_path / "base")
    assert not np.array_equal(base.log["tau_cmd"], out.log["tau_cmd"])      # the override acted
    # the metrics are those of the log: RMS and max of the tracking error per axis
    err = out.log["err"]
    np.testing.assert_allclose(out.metrics["rms_error"], np.sqrt(np.mean(err ** 2, axis=0)), rtol=1e-9)
    np.testing.assert_allclose(out.metrics["max_abs_error"], np.max(np.abs(err), axis=0), rtol=1e-9)
    assert {"log.npy", "meta.json", "summary.json"} <= set(out.files)
    text = out.summary()
    assert "COMPLETED" in text and "peak |torque|" in text
    df = out.dataframe()
    assert len(df) == len(out.time) and "q[q1]" in df.columns
    np.testing.assert_array_equal(df["q[q2]"].to_numpy(), out.log["q"][:, 1])
    again = RunOutput.from_run_dir(out.run_dir)
    assert again.metrics["rms_error"] == out.metrics["rms_error"]
    with pytest.raises(ConfigError, match="summary table needs"):
        again.summary()


def test_run_config_refuses_misspelt_overrides_hardware_and_unknown_names(tmp_path):
    from controller.app import run_config

    with pytest.raises(ConfigError, match="wn_rad_s"):
        run_config("seed003_2r", overrides={"controller.wn_rads": 40.0}, out_dir=tmp_path / "a")
    with pytest.raises(ConfigError, match="simulated drivers only"):
        run_config(ROOT / "hil_configs" / "hardware" / "seed003_2r_odrive_ascii_serial.toml",
                   out_dir=tmp_path / "b")
    with pytest.raises(ConfigError, match="shipped names"):
        run_config("no_such_config", out_dir=tmp_path / "c")
    assert not (tmp_path / "b").exists()
