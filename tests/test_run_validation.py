"""One validation for `check` and `run` (issue 12 items 3, 5, 6, 8; issue 13 item 4).

`run` refuses, with exit 2 and before anything is enabled, whatever `check` refuses:
an infeasible or singular trajectory, missing torque limits, a hardware run with a
protection off, an over-budget bus on hardware, an output folder that cannot take the log.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from controller.app.cli import main
from controller.app.run import check_output_dir, load_run, validate_run
from dynamics import load_model
from dynamics.errors import ConfigError

try:
    from tests.test_bringup import write_clean_calibration
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from test_bringup import write_clean_calibration

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"
ROBOTS = ROOT / "hil_configs" / "robots"


def _singular_3rrr_config(tmp_path: Path) -> Path:
    """The demo with a joint-space move from home across a type-2 (direct-kinematics) singularity."""
    m = load_model(ROBOTS / "3rrr_horizontal.toml")
    q0 = m.inverse_kinematics(np.asarray(m.home_pose, float))
    d = np.array([-0.076, -0.992, -0.103])
    target = q0 + 1.34 * d                         # margin ~6e-5 at s = 1.24 on the way
    text = (RUNS / "3rrr_circle.toml").read_text()
    head, rest = text.split("[trajectory]", 1)
    rest = rest[rest.index("[controller]"):]
    cfg = (head.replace('file = "../robots/3rrr_horizontal.toml"', f'file = "{(ROBOTS / "3rrr_horizontal.toml").as_posix()}"')
           + "[trajectory]\ntype = \"point_to_point\"\n"
           + f"start = {[float(v) for v in q0]}\ntarget = {[float(v) for v in target]}\n"
           + "profile = \"quintic\"\nduration_s = 2.0\n\n" + rest)
    cfg = cfg.replace('kind = "task_computed_torque"', 'kind = "computed_torque"')
    p = tmp_path / "singular.toml"
    p.write_text(cfg)
    return p


def test_singular_path_refused_by_check_and_run_before_enable(tmp_path, capsys):
    cfg = _singular_3rrr_config(tmp_path)
    assert main(["check", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "singular" in err and "trajectory" in err and str(cfg) in err
    out = tmp_path / "out"
    assert main(["run", str(cfg), "-o", str(out), "--no-plots", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "singular" in err and "nothing was enabled" in err
    assert not (out / "log.npy").exists()            # refused before the drives were built


def test_infeasible_torque_refused_by_run(tmp_path, capsys):
    # the demo's circle needs more than 0.5 N m: check and run agree
    args = ["--set", "safety.torque_max=0.02"]   # the circle needs more: check and run agree
    assert main(["check", str(RUNS / "3rrr_circle.toml"), *args]) == 2
    assert "torque" in capsys.readouterr().err
    assert main(["run", str(RUNS / "3rrr_circle.toml"), "-o", str(tmp_path / "o"), "--no-plots",
                 "--no-progress", *args]) == 2
    assert "torque" in capsys.readouterr().err and not (tmp_path / "o" / "log.npy").exists()


def test_robot_without_torque_limits_refused(tmp_path, capsys):
    robot = (ROBOTS / "seed003_2r.toml").read_text()
    robot = "\n".join(ln for ln in robot.splitlines() if not ln.startswith("torque_max"))
    (tmp_path / "robot.toml").write_text(robot)
    run = (RUNS / "seed003_2r.toml").read_text().replace('"../robots/seed003_2r.toml"', '"robot.toml"')
    (tmp_path / "run.toml").write_text(run)
    assert main(["check", str(tmp_path / "run.toml")]) == 2
    err = capsys.readouterr().err
    assert "no finite torque limit" in err and "safety.torque_max" in err and "run.toml" in err
    # a limit in [safety] is enough
    assert main(["check", str(tmp_path / "run.toml"), "--set", "safety.torque_max=[600.0, 60.0]"]) == 0


@pytest.mark.parametrize("field,off", [
    ("tracking_error_max", "__delete__"),
    ("position_margin_rad", 0.0),           # the soft zone before the position limits
])
def test_hardware_run_refuses_protection_off_unless_listed(tmp_path, field, off):
    hw = ROOT / "hil_configs" / "hardware" / "3rrr_mit_can_socketcan.toml"
    import tomllib
    from controller.app.run import parse_run
    data = tomllib.loads(hw.read_text())
    data["bringup"] = {"calibration_file": str(tmp_path / "cal.toml")}    # (a hardware run needs one)
    spec = parse_run(data, file=str(hw), base_dir=hw.parent)
    write_clean_calibration(spec)
    validate_run(spec)                                 # the template has every protection on
    if off == "__delete__":
        del data["safety"][field]
    else:
        data["safety"][field] = off
    spec = parse_run(data, file=str(hw), base_dir=hw.parent)
    with pytest.raises(ConfigError, match=field) as ei:
        validate_run(spec)
    assert ei.value.file == str(hw) and ei.value.field == f"safety.{field}"
    data["safety"]["disabled_protections"] = [field]
    spec = parse_run(data, file=str(hw), base_dir=hw.parent)
    assert f"protections off: {field}" in validate_run(spec).text()


def test_over_budget_bus_is_an_error_on_hardware_and_a_warning_in_simulation(tmp_path, capsys):
    hw = ROOT / "hil_configs" / "hardware" / "3rrr_mit_can_socketcan.toml"
    with pytest.raises(ConfigError, match="over 100 %") as ei:
        validate_run(load_run(hw, overrides={"loop.rate_hz": 8000.0}))
    assert ei.value.field == "loop.rate_hz"
    # the same load in simulation: a warning that check prints and run repeats
    v = validate_run(load_run(RUNS / "3rrr_circle.toml", overrides={"loop.rate_hz": 8000.0}))
    assert any("over 100 %" in w for w in v.warnings)
    assert main(["check", str(RUNS / "3rrr_circle.toml"), "--set", "loop.rate_hz=8000.0"]) == 0
    assert "WARNING" in capsys.readouterr().out


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True,
                    reason="root can write to a read-only folder")
def test_read_only_output_folder_refused_before_enable(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert main(["run", str(RUNS / "seed003_2r.toml"), "-o", str(ro / "out"), "--no-plots",
                     "--no-progress"]) == 2
        assert "not writable" in capsys.readouterr().err
    finally:
        ro.chmod(0o700)


def test_output_folder_without_room_refused(tmp_path):
    spec = load_run(RUNS / "seed003_2r.toml")
    check_output_dir(tmp_path / "out", spec)         # room enough here
    with pytest.raises(ConfigError, match="MB free") as ei:
        check_output_dir(tmp_path / "out", spec, min_free_bytes=1 << 62)
    assert ei.value.field == "--out"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        check_output_dir(tmp_path / "file" / "out", spec)
