"""The run report: summary units and timing health, the plots (labels read back from the figures),
the named log columns and the robot animation."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402  (Pillow comes with matplotlib)

from controller.app.animate import animate_run, robot_polylines  # noqa: E402
from controller.app.commands import format_summary  # noqa: E402
from controller.loop import TimingStats  # noqa: E402
from controller.app.plots import run_figures  # noqa: E402
from controller.app.report import timing_health  # noqa: E402
from controller.app.run import build_run, load_run, summary_metrics  # noqa: E402
from controller.telemetry import read_log  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"


def _run(out: Path, config: str, duration: float, **overrides):
    spec = load_run(RUNS / config, overrides=overrides, duration_s=duration)
    run = build_run(spec, out_dir=out)
    result = run.execute()
    metrics = summary_metrics(spec, result)
    return spec, result, metrics, out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    return {
        "stewart": _run(d / "stewart", "stewart_motion_direct.toml", 0.3, **{"safety.torque_max": 150.0}),
        "rrr": _run(d / "rrr", "3rrr_circle_direct.toml", 1.5),
        "rrr_wall": _run(d / "rrr_wall", "3rrr_circle_direct.toml", 0.3, **{"loop.clock": "wall"}),
        "arm2": _run(d / "arm2", "seed003_2r.toml", 0.3),
        "seed004": _run(d / "seed004", "seed004_square.toml", 16.0),
    }


# -- summary ---------------------------------------------------------------------
def test_summary_gives_the_tool_error_of_a_serial_arm_on_a_task_path(runs):
    """seed004: a 5-link arm on a square in xy, tracked in joint space: the summary says what the
    tool did, checked against the analytic task path itself (not the log's joint reference)."""
    spec, result, metrics, out = runs["seed004"]
    log = read_log(out)
    p = np.asarray(spec.model.forward_kinematics(log["q"]))[:, :2, 3]
    d = np.linalg.norm(spec.trajectory.task.sample(log["t"]).pos - p, axis=1)
    assert metrics["tool_rms_position_error_m"] == pytest.approx(np.sqrt(np.mean(d ** 2)), abs=1e-7)
    assert metrics["tool_max_position_error_m"] == pytest.approx(np.max(d), abs=1e-7)
    assert metrics["tool_max_position_error_m"] > 1e-5       # a real error, not a copy of the reference
    text = format_summary(spec, result, metrics)
    assert f"tool position error : RMS {metrics['tool_rms_position_error_m'] * 1e3:.4g} mm" in text
    assert "tool_rms_position_error_m" not in runs["arm2"][2]      # a joint path: no tool figure


@pytest.mark.parametrize("saturate", [True, False])
def test_summary_says_which_limit_acted_when_the_torque_is_at_its_limit(tmp_path, saturate):
    """A plant twice as heavy as the model: shoulder torque at its 600 N m limit. With the law's own
    saturation the safety layer clips nothing ("clipped 0.0 %" beside "peak/limit 100 %" was all the
    summary said): the "at limit" column and a note say which limit acted, checked against the log."""
    spec, result, metrics, out = _run(tmp_path, "seed003_2r.toml", 3.5, **{
        "driver.plant.mass_factor": 2.0, "safety.tracking_error_max": 1.0, "controller.saturate": saturate})
    log = read_log(out)
    lim = np.asarray(metrics["torque_limit"])
    at = np.mean(np.abs(log["tau_cmd"]) >= lim * (1 - 1e-9), axis=0)
    assert at[0] > 0.05                                    # the case: the shoulder saturates
    np.testing.assert_allclose(metrics["at_limit_fraction"], at, atol=1 / len(log))
    text = format_summary(spec, result, metrics)
    row = next(ln for ln in text.splitlines() if ln.strip().startswith("q1 ") and "N m" in ln)
    assert f"{100 * at[0]:.1f} %" in row and "100.0 %" in row
    clipped = np.asarray(metrics["saturation_fraction_per_joint"])
    if saturate:
        assert clipped[0] == 0.0
        assert "the controller saturated its own output at the limit (robot file" in text
    else:
        assert clipped[0] > 0.05
        assert "the safety layer clipped the controller's command at the limit (robot file)" in text


def _table(text: str, header: str) -> list[str]:
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.strip().startswith(header))
    out = [lines[i]]
    for ln in lines[i + 1:]:
        if not ln.startswith("  ") or ln.startswith("   ") or ln.strip().split()[0] in ("joint", "timing"):
            break
        out.append(ln)
    return out


def test_summary_stewart_legs_are_forces_in_newton_against_the_safety_limit(runs):
    spec, result, metrics, _ = runs["stewart"]
    text = format_summary(spec, result, metrics)
    rows = _table(text, "joint")
    assert "peak |force|" in rows[0] and "[safety] torque_max" in rows[0]
    assert len(rows) == 7
    for ln in rows[1:]:
        assert ln.strip().startswith("leg") and "N m" not in ln
        assert re.search(r"\d N\s+150 N\s+\d+\.\d %\s+\d+\.\d %\s+\d+\.\d %$", ln), ln
    # the limit column is what the safety layer clipped to, and summary.json says so too
    assert metrics["torque_limit"] == [150.0] * 6
    # columns aligned: every row of a table has the same length and the units sit under each other
    assert len({len(ln) for ln in rows}) == 1
    axes = _table(text, "axis")
    assert [ln.split()[0] for ln in axes[1:]] == ["x", "y", "z", "alpha", "beta", "gamma"]
    assert all(ln.split()[2] == ("mm" if ln.split()[0] in "xyz" else "mrad") for ln in axes[1:])
    assert len({len(ln) for ln in axes}) == 1


def test_summary_revolute_joints_in_newton_metre_and_robot_file_limit(runs):
    spec, result, metrics, _ = runs["rrr"]
    text = format_summary(spec, result, metrics)
    rows = _table(text, "joint")
    assert "peak |torque|" in rows[0] and "robot file" in rows[0]
    lim = spec.model.limits.torque_max
    for j, ln in enumerate(rows[1:]):
        assert ln.split()[0] == spec.model.joint_names[j] and f"{lim[j]:.4g} N m" in ln


def test_summary_p99_9_printed_and_lockstep_says_no_deadlines(runs):
    spec, result, metrics, _ = runs["rrr"]
    text = format_summary(spec, result, metrics)
    timing = next(ln for ln in text.splitlines() if ln.strip().startswith("timing"))
    assert "lockstep clock" in timing and "no deadline can be missed" in timing
    assert "lateness" not in text and "missed deadlines" not in text
    p999 = re.search(r"compute p50 \d+ p99 \d+ p99\.9 (\S+);", text)
    assert p999 and p999.group(1) != "-"
    assert float(p999.group(1)) == pytest.approx(result.timing.compute["p99_9"] * 1e6, abs=0.51)


def _timing(n, missed, period=1e-3):
    late = np.zeros(n)
    late[:missed] = 0.011          # 11 ms late, far beyond half a period
    return TimingStats.from_arrays(period, late, np.arange(n) * period, np.full(n, 1e-4), np.full(n, 2e-4), 0.5)


@pytest.mark.parametrize("missed, loud", [(140, True), (5, False), (0, False)])
def test_wall_clock_deadline_misses_are_reported_loudly_above_one_percent(runs, missed, loud):
    spec, result, _, _ = runs["rrr"]
    wall = dataclasses.replace(spec, clock="wall")
    res = dataclasses.replace(result, n_cycles=1000, timing=_timing(1000, missed))
    metrics = {"timing": res.timing.as_dict(), "rms_error": [], "peak_torque": []}
    text = format_summary(wall, res, metrics)
    first = text.splitlines()[0]
    assert first.startswith(f"run '{spec.name}': COMPLETED")
    assert ("TIMING NOT HELD (14.0 % of the cycles missed their deadline)" in first) is loud
    assert ("WARNING: TIMING NOT HELD" in text) is loud
    assert f"missed deadlines {missed} of 1000 cycles" in text
    assert "p99.9 11000" in text if missed >= 2 else "p99.9 0" in text
    if missed and not loud:
        assert "note: 5 deadline(s) missed" in text
    h = timing_health(res.timing.as_dict(), "wall")
    assert h["ok"] is (not loud) and h["missed_fraction"] == pytest.approx(missed / 1000)
    # the same statistics on the lock-step clock are not deadline misses
    assert timing_health(res.timing.as_dict(), "lockstep")["ok"]


def test_a_real_wall_clock_run_reports_its_timing_health(runs):
    spec, result, metrics, _ = runs["rrr_wall"]
    h = metrics["timing_health"]
    assert h["clock"] == "wall" and h["deadlines"] and h["cycles"] == result.timing.n_cycles
    assert h["missed"] == result.timing.missed_deadlines
    text = format_summary(spec, result, metrics)
    assert "timing [us] (wall clock, period 1000)" in text
    assert ("WARNING: TIMING NOT HELD" in text) is (h["missed_fraction"] > 0.01)


# -- log columns -----------------------------------------------------------------
def test_log_columns_carry_the_joint_and_axis_names(runs):
    import pandas as pd

    out = runs["stewart"][3]
    raw = np.load(out / "log.npy")
    names = raw.dtype.names
    assert "q[leg1]" in names and "tau_cmd[leg6]" in names and "err[x]" in names and "ref_pos[gamma]" in names
    assert "q[0]" not in names
    df = pd.DataFrame(raw)
    assert df["q[leg3]"].shape == (302,)   # 301 control cycles + the final disable row
    log = read_log(out)
    np.testing.assert_array_equal(log["q"][:, 2], raw["q[leg3]"])
    np.testing.assert_array_equal(log["err"][:, 5], raw["err[gamma]"])


# -- plots -----------------------------------------------------------------------
def _all_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def _unit(label: str) -> str | None:
    m = re.search(r"\[([^\]]+)\]\s*$", label)
    return m.group(1) if m else None


@pytest.fixture
def figs():
    made = []

    def make(out):
        f = run_figures(out)
        made.append(f)
        return f
    yield make
    for f in made:
        for fig in f.values():
            plt.close(fig)


@pytest.mark.parametrize("name", ["stewart", "rrr", "rrr_wall", "arm2", "seed004"])
def test_every_axis_has_a_unit(runs, figs, name):
    f = figs(runs[name][3])
    for key, fig in f.items():
        for ax in _all_axes(fig):
            assert _unit(ax.get_ylabel()), (key, ax.get_ylabel())
            if ax.get_xlabel():
                assert _unit(ax.get_xlabel()), (key, ax.get_xlabel())
        bottom = [ax for ax in _all_axes(fig) if ax.get_xlabel()]
        assert bottom, key


def test_a_run_without_torque_feedback_plots_without_a_warning(runs, figs, tmp_path):
    """A drive that reports no torque (ODrive CAN's ``torque_feedback = "none"``, as the shipped
    Stewart run on ODrive axes) logs NaN throughout: its torque figure used to print numpy's
    "Mean of empty slice" RuntimeWarning into the user's terminal; it now says so in the legend."""
    import shutil
    import warnings

    out = tmp_path / "run"
    shutil.copytree(runs["rrr"][3], out)
    log = np.load(out / "log.npy")
    for name in log.dtype.names:
        if name.startswith("tau_meas["):
            log[name] = np.nan
    np.save(out / "log.npy", log)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = figs(out)
    labels = [t.get_text() for ax in f["torque"].axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("no torque feedback" in t for t in labels), labels


def test_stewart_torque_plot_is_in_newton_with_the_safety_limit(runs, figs):
    f = figs(runs["stewart"][3])
    fig = f["torque"]
    left = [ax for ax in fig.axes if ax.get_ylabel().startswith("leg") and "diff" not in ax.get_ylabel()]
    assert len(left) == 6
    for j, ax in enumerate(left):
        assert ax.get_ylabel() == f"leg{j + 1} [N]"
        limits = sorted(ln.get_ydata()[0] for ln in ax.get_lines() if ln.get_linestyle() == "--")
        assert limits == [-150.0, 150.0]
        labels = {ln.get_label() for ln in ax.get_lines()}
        assert {"commanded", "measured"} <= labels or j > 0
    assert "force" in fig._suptitle.get_text() and "N m" not in " ".join(ax.get_ylabel() for ax in fig.axes)
    # the differences are their own panels, in the same unit
    diffs = [ax for ax in fig.axes if "diff" in ax.get_ylabel()]
    assert len(diffs) == 6 and all(_unit(ax.get_ylabel()) == "N" for ax in diffs)
    log = read_log(runs["stewart"][3])
    d = diffs[0].get_lines()[0].get_ydata()
    np.testing.assert_allclose(d, log["tau_ctrl"][:, 0] - log["tau_cmd"][:, 0])



def test_torque_axes_are_scaled_to_the_data_and_name_a_limit_above_them(runs, figs):
    """The 3RRR demo uses about 2 % of its 15 N m limit: the axis shows the data (not a flat line
    at 2 % of a +-15 N m axis) and the title names the limit above the scale."""
    spec, result, metrics, out = runs["rrr"]
    fig = figs(out)["torque"]
    left = [ax for ax in fig.axes if ax.get_ylabel().startswith("theta") and "diff" not in ax.get_ylabel()]
    log = read_log(out)
    for j, ax in enumerate(left):
        peak = float(np.max(np.abs(np.r_[log["tau_cmd"][:, j], log["tau_meas"][:, j], log["tau_ctrl"][:, j]])))
        lo, hi = ax.get_ylim()
        assert hi == pytest.approx(-lo) and peak <= hi <= 1.3 * peak
        lim = float(spec.model.limits.torque_max[j])
        assert lim > hi and f"limit {lim:.4g} N m, above this scale" in ax.get_title(loc="right")
        assert not [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]

def test_error_plot_in_mm_and_mrad_with_the_rms_marked(runs, figs):
    spec, result, metrics, out = runs["rrr"]
    fig = figs(out)["error"]
    units = [_unit(ax.get_ylabel()) for ax in fig.axes]
    assert units == ["mm", "mm", "mrad"]
    for i, ax in enumerate(fig.axes):
        rms_lines = [ln for ln in ax.get_lines() if ln.get_label().startswith("RMS")]
        assert rms_lines
        # the marked RMS is the summary's (metres -> mm, rad -> mrad)
        assert rms_lines[0].get_ydata()[0] == pytest.approx(1e3 * metrics["rms_error"][i], rel=1e-9)


def test_lateness_histogram_only_on_the_wall_clock(runs, figs):
    lock = figs(runs["rrr"][3])["timing"]
    assert not any("lateness" in ax.get_xlabel() for ax in lock.axes)
    assert "no deadlines" in lock._suptitle.get_text()
    wall = figs(runs["rrr_wall"][3])["timing"]
    late = [ax for ax in wall.axes if "lateness" in ax.get_xlabel()]
    assert len(late) == 1 and _unit(late[0].get_xlabel()) == "us"
    thr = [ln for ln in late[0].get_lines() if ln.get_label().startswith("miss threshold")]
    assert thr and thr[0].get_xdata()[0] == pytest.approx(500.0)


def test_path_plot_task_space_circle(runs, figs):
    out = runs["rrr"][3]
    fig = figs(out)["path"]
    ax, ex = fig.axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("x [m]", "y [m]")
    assert ex.get_ylabel() == "position error [mm]"
    log = read_log(out)
    ref = next(ln for ln in ax.get_lines() if ln.get_label() == "reference")
    np.testing.assert_array_equal(ref.get_xdata(), log["ref_pos"][:, 0])
    meas = next(ln for ln in ax.get_lines() if ln.get_label() == "measured")
    np.testing.assert_array_equal(meas.get_ydata(), log["ref_pos"][:, 1] - log["err"][:, 1])


def test_path_plot_seed004_square_through_forward_kinematics(runs, figs):
    """Joint-space run: the tool path comes from the model's forward kinematics; the reference
    is the paper's square from (2, 2) m with 0.4 m sides (16 s: the first side and a bit)."""
    fig = figs(runs["seed004"][3])["path"]
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("x [m]", "y [m]")
    ref = next(ln for ln in ax.get_lines() if ln.get_label() == "reference")
    x, y = np.asarray(ref.get_xdata()), np.asarray(ref.get_ydata())
    assert (x[0], y[0]) == (pytest.approx(2.0, abs=1e-6), pytest.approx(2.0, abs=1e-6))
    assert min(x.min(), y.min()) > 1.6 - 1e-6 and max(x.max(), y.max()) < 2.0 + 1e-6
    assert max(np.ptp(x), np.ptp(y)) == pytest.approx(0.4, abs=1e-3)
    meas = next(ln for ln in ax.get_lines() if ln.get_label() == "measured")
    dev = np.hypot(np.asarray(meas.get_xdata()) - x, np.asarray(meas.get_ydata()) - y)
    assert 0 < dev.max() < 0.01


# -- animation -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["arm2", "rrr", "stewart"])
def test_animation_gif_has_the_frames(runs, name, tmp_path):
    path, frames = animate_run(runs[name][3], tmp_path / f"{name}.gif", fps=10, max_frames=4)
    assert frames == 4
    with Image.open(path) as im:
        assert im.format == "GIF" and im.n_frames == 4


def test_animation_html_player(runs, tmp_path):
    path, frames = animate_run(runs["rrr"][3], tmp_path / "rrr.html", fps=10, max_frames=3)
    text = path.read_text()
    assert frames == 3 and "<script" in text and text.count("data:image/png;base64") == 3


def test_stick_figures_are_the_robots_geometry(runs):
    """The drawn links have the robots' lengths: Stewart legs as long as the measured leg lengths,
    3RRR links as long as the robot file's, the serial chain ending at the tool."""
    spec = runs["stewart"][0]
    m = spec.model
    q = m.inverse_kinematics(m.home_pose + np.array([0.01, -0.02, 0.03, 0.02, -0.01, 0.05]))
    lines, tool, X = robot_polylines(m, q, pose=m.home_pose)
    np.testing.assert_allclose([np.linalg.norm(ln[1] - ln[0]) for ln in lines[:6]], q, atol=1e-9)
    np.testing.assert_allclose(tool, X[:3], atol=1e-12)
    rrr = runs["rrr"][0].model
    lines, _, _ = robot_polylines(rrr, rrr.home_q, pose=rrr.home_pose)
    for i, leg in enumerate(lines[:3]):
        assert np.linalg.norm(leg[1] - leg[0]) == pytest.approx(rrr.proximal.length[i], abs=1e-9)
        assert np.linalg.norm(leg[2] - leg[1]) == pytest.approx(rrr.distal.length[i], abs=1e-9)
    arm = runs["arm2"][0].model
    qa = np.array([0.3, -0.7])
    lines, tool, _ = robot_polylines(arm, qa)
    np.testing.assert_allclose(lines[0][-1], arm.forward_kinematics(qa)[:3, 3])


def test_cli_animate_and_plot_animate(runs, tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def tl(*args):
        return subprocess.run([sys.executable, "-m", "controller.app.cli", *map(str, args)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)

    out = runs["arm2"][3]
    r = tl("animate", out, "-o", tmp_path / "a.gif", "--max-frames", "3")
    assert r.returncode == 0 and "(3 frames)" in r.stdout, (r.stdout, r.stderr)
    with Image.open(tmp_path / "a.gif") as im:
        assert im.n_frames == 3
    r = tl("plot", out, "-o", tmp_path / "p", "--animate")
    assert r.returncode == 0, r.stderr
    assert {p.name for p in (tmp_path / "p").iterdir()} == {"tracking.png", "error.png", "torque.png", "timing.png",
                                                           "path.png", "animation.gif"}
    r = tl("animate", out, "-o", tmp_path / "a.mp4")
    assert r.returncode == 2 and ".gif or .html" in r.stderr and "Traceback" not in r.stderr


def test_named_columns_at_the_writer_and_their_checks(tmp_path):
    from controller.telemetry import TelemetryWriter, column_labels, to_csv, usable_labels
    from dynamics.errors import TorqueloopError

    w = TelemetryWriter(tmp_path, 2, 3, buffer_rows=4, joint_names=["hip", "knee"], axis_names=["x", "y", "phi"])
    for i in range(6):
        w.record(i * 1e-3, [i, -i], [0, 0], [1, 2, 3], [0, 0, 0], [0, 0, 0], [0.1 * i, 0, 0], [0, 0], [0, 0],
                 [0, 0], 0, [False, False], 0.0, 0.0, [True, True], [0, 0], [True, True])
    w.close()
    raw = read_log(tmp_path, flat=True)
    assert column_labels(raw, "q") == ["hip", "knee"] and column_labels(raw, "ref_pos") == ["x", "y", "phi"]
    np.testing.assert_array_equal(read_log(tmp_path)["q"][:, 1], -np.arange(6))
    to_csv(raw, tmp_path / "log.csv")
    head = (tmp_path / "log.csv").read_text().splitlines()[0].split(",")
    assert head[:3] == ["t", "q[hip]", "q[knee]"] and "err[phi]" in head
    assert usable_labels(["a", "a"], 2) is None and usable_labels(["a[1]", "b"], 2) is None
    with pytest.raises(TorqueloopError, match="joint_names"):
        TelemetryWriter(tmp_path / "bad", 2, 2, joint_names=["a"])


def test_logs_without_the_new_metadata_take_units_from_the_model(runs, figs, tmp_path):
    """A log written before meta.json carried joint types and limits: the types come from the robot
    file named in the config, the clock from the lateness column."""
    import json
    import shutil

    old = tmp_path / "old"
    shutil.copytree(runs["stewart"][3], old)
    meta = json.loads((old / "meta.json").read_text())
    for k in ("joint_types", "torque_limit", "clock", "robot_file", "axis_names"):
        meta.pop(k)
    (old / "meta.json").write_text(json.dumps(meta))
    f = figs(old)
    labels = [ax.get_ylabel() for ax in f["torque"].axes]
    assert labels[0] == "leg1 [N]" and not any("N m" in lb for lb in labels)
    assert not any("lateness" in ax.get_xlabel() for ax in f["timing"].axes)


def test_the_miss_threshold_is_named_as_a_fraction_of_the_period():
    """``meta.json``'s ``result.timing`` names the deadline-miss threshold for what it is (a
    fraction of the period, not a fraction of missed cycles); a run folder written before the
    rename (``miss_fraction``) is still read with its own threshold."""
    lateness = np.array([0.0, 0.0004, 0.0006, 0.0002])
    d = TimingStats.from_arrays(0.001, lateness, np.arange(4) * 0.001, np.zeros(4), np.zeros(4), 0.5).as_dict()
    assert "miss_fraction" not in d and d["miss_threshold_fraction_of_period"] == 0.5
    assert d["missed_deadlines"] == 1                     # only 0.6 ms is later than half of 1 ms
    assert timing_health(d, "wall")["miss_threshold_s"] == pytest.approx(0.0005)
    old = {k: v for k, v in d.items() if k != "miss_threshold_fraction_of_period"}
    assert timing_health(dict(old, miss_fraction=0.25), "wall")["miss_threshold_s"] == pytest.approx(0.00025)


@pytest.mark.parametrize("projection", [None, "3d"])
def test_fast_frames_look_like_full_redraws(projection):
    """The animation draws its static part once and only the moving artists per frame
    (:func:`controller.app.animate.render_frames`): each frame must look like the whole figure
    drawn for that frame (same size, nearly every pixel equal: a moving line may cross the legend,
    which a full drawing puts on top)."""
    from controller.app.animate import render_frames

    def figure():
        fig = plt.figure(figsize=(4, 4), dpi=60)
        ax = fig.add_subplot(projection=projection)
        s = np.linspace(0, 2 * np.pi, 50)
        xyz = np.c_[np.cos(s), np.sin(s), 0.3 * s]
        if projection:
            ax.plot(*xyz.T, "k--", label="reference")
            line = ax.plot([], [], [], "o-", label="robot")[0]
            ax.set_xlim(-1.5, 1.5), ax.set_ylim(-1.5, 1.5), ax.set_zlim(0, 2)
        else:
            ax.plot(xyz[:, 0], xyz[:, 1], "k--", label="reference")
            line = ax.plot([], [], "o-", label="robot")[0]
            ax.set_xlim(-1.5, 1.5), ax.set_ylim(-1.5, 1.5)
        ax.legend(loc="upper right")
        title = fig.suptitle("")

        def update(f):
            p = xyz[: 5 * f + 2]
            if projection:
                line.set_data_3d(p[:, 0], p[:, 1], p[:, 2])
            else:
                line.set_data(p[:, 0], p[:, 1])
            title.set_text(f"t = {f / 10:.2f} s")
        return fig, [line, title], update

    frames = {}
    for full in (False, True):
        fig, artists, update = figure()
        frames[full] = render_frames(fig, artists, update, 6, full=full)
        plt.close(fig)
    for fast, ref in zip(frames[False], frames[True]):
        assert fast.shape == ref.shape and fast.dtype == np.uint8
        assert np.mean(np.any(fast != ref, axis=-1)) < 0.01
    # and the frames differ from each other (the artists moved)
    assert np.mean(np.any(frames[False][0] != frames[False][-1], axis=-1)) > 0.005


def test_a_spatial_path_is_drawn_in_3d_to_scale_and_a_flat_one_in_its_plane(tmp_path):
    """A helix (every extent comparable) gets a 3-D panel whose box has the path's proportions;
    a path that is nearly flat stays in the plane of its two largest extents."""
    from types import SimpleNamespace

    from controller.app.plots import _path

    t = np.linspace(0.0, 2.0, 400)

    def data(ref):
        log = np.zeros(t.size, dtype=[("t", float), ("ref_pos", float, 3), ("err", float, 3)])
        log["t"], log["ref_pos"], log["err"] = t, ref, 1e-4 * np.sin(5 * t)[:, None]
        axes = [SimpleNamespace(kind="linear", name=c) for c in "xyz"]
        return SimpleNamespace(log=log, space="task", axes=axes, title="synthetic")

    helix = np.c_[0.1 * np.cos(3 * t), 0.1 * np.sin(3 * t), 0.05 * t]
    fig = _path(plt, data(helix))
    ax = fig.axes[0]
    assert ax.name == "3d" and ax.get_zlabel() == "z [m]"
    box = np.asarray(ax.get_box_aspect())
    assert box[1] / box[0] == pytest.approx(1.0, rel=0.02)      # x and y span 0.2 m
    assert box[2] / box[0] == pytest.approx(0.5, rel=0.02)      # z spans 0.1 m
    plt.close(fig)
    flat = np.c_[0.1 * np.cos(3 * t), 0.1 * np.sin(3 * t), 0.005 * t]
    fig = _path(plt, data(flat))
    ax = fig.axes[0]
    assert ax.name != "3d" and (ax.get_xlabel(), ax.get_ylabel()) == ("x [m]", "y [m]")
    plt.close(fig)
