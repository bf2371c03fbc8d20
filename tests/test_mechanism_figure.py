"""The stick figure of mechanism-file models (``MechanismModel.stick_figure``, drawn by
``torqueloop animate``) against link end points computed here from the robot files' dimensions:

* the five-bar leg (planar): hips from the file's joint origins, knees at the upper-link length
  along the hip angles, the foot where the two lower links (the loop's point) meet, by the
  intersection of two circles (the assembly mode with the foot below the hips);
* the delta (spatial): base pivots from the file, elbows at the upper-arm length in each arm's
  vertical plane, ball joints at the platform radius from the task point, rods as long as the
  file's forearm;
* a short five-bar run animated to HTML and GIF through the application, its (x, y) task error
  reported as a position error (``task_layout`` "planar_point": what ``torqueloop tune`` ranks).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dynamics import load_model
from dynamics.config import read_toml

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ROOT / "hil_configs" / "robots"


@pytest.fixture(scope="module")
def fivebar():
    return load_model(ROBOTS / "fivebar_leg.toml")


def _segments(lines):
    """Every drawn segment as an unordered pair of points (rounded for comparison)."""
    out = set()
    for ln in lines:
        for a, b in zip(ln[:-1], ln[1:]):
            out.add(frozenset((tuple(np.round(a, 9)), tuple(np.round(b, 9)))))
    return out


def _fivebar_points(q):
    """Hips, knees and foot (3,) [m] of the five-bar at hip angles ``q`` from the file's lengths."""
    d = read_toml(ROBOTS / "fivebar_leg.toml")
    j = {jt["name"]: jt for jt in d["joints"]}
    loop = d["loops"][0]
    hl, hr = np.array(j["hip_left"]["origin"][:2]), np.array(j["hip_right"]["origin"][:2])
    l1l, l1r = j["knee_left"]["origin"][0], j["knee_right"]["origin"][0]
    l2l, l2r = loop["point_a"][0], loop["point_b"][0]
    kl = hl + l1l * np.array([np.cos(q[0]), np.sin(q[0])])
    kr = hr + l1r * np.array([np.cos(q[1]), np.sin(q[1])])
    # the foot: |F - kl| = l2l, |F - kr| = l2r, below the line of the knees
    dvec = kr - kl
    dist = np.linalg.norm(dvec)
    a = (l2l ** 2 - l2r ** 2 + dist ** 2) / (2 * dist)
    h = np.sqrt(l2l ** 2 - a ** 2)
    mid = kl + a * dvec / dist
    perp = np.array([dvec[1], -dvec[0]]) / dist
    feet = [mid + h * perp, mid - h * perp]
    foot = min(feet, key=lambda f: f[1])
    z3 = lambda p: np.array([p[0], p[1], 0.0])      # noqa: E731
    return z3(hl), z3(hr), z3(kl), z3(kr), z3(foot)


@pytest.mark.parametrize("dq", [(0.0, 0.0), (0.25, -0.15), (-0.3, 0.2)])
def test_fivebar_figure_is_the_files_linkage(fivebar, dq):
    q = fivebar.home_q + np.array(dq)
    lines, tool, X = fivebar.stick_figure(q)
    hl, hr, kl, kr, foot = _fivebar_points(q)
    want = _segments([np.array([hl, hr]), np.array([hl, kl]), np.array([kl, foot]),
                      np.array([hr, kr]), np.array([kr, foot])])
    assert _segments(lines) == want
    np.testing.assert_allclose(tool, foot, atol=1e-10)
    np.testing.assert_allclose(X, foot[:2], atol=1e-10)


def test_fivebar_animation_of_a_short_run(tmp_path):
    from PIL import Image

    from controller.app.animate import animate_run
    from controller.app.run import build_run, load_run

    spec = load_run(ROOT / "hil_configs" / "runs" / "fivebar_square.toml", overrides={"loop.duration_s": 0.05})
    res = build_run(spec, out_dir=tmp_path / "run").execute()
    assert res.status == "completed", (res.status, res.faults)
    # the foot's (x, y) error is a position error: the metric `torqueloop tune` ranks by default
    e = np.asarray(res.metrics["max_abs_error"])
    assert e.shape == (2,) and 0 < res.metrics["max_position_error_m"] <= np.hypot(*e) + 1e-15
    assert res.metrics["rms_position_error_m"] == pytest.approx(np.hypot(*res.metrics["rms_error"]), rel=1e-9)
    path, frames = animate_run(tmp_path / "run", tmp_path / "a.html", fps=40, max_frames=3)
    assert frames == 3 and path.read_text().count("data:image/png;base64") == 3
    path, frames = animate_run(tmp_path / "run", tmp_path / "a.gif", fps=40, max_frames=3)
    with Image.open(path) as im:
        assert im.format == "GIF" and im.n_frames == 3


@pytest.mark.slow
def test_delta_figure_is_the_files_linkage():
    delta = load_model(ROBOTS / "delta_pick.toml")
    d = read_toml(ROBOTS / "delta_pick.toml")
    joints = {j["name"]: j for j in d["joints"]}
    loops = {lp["name"]: lp for lp in d["loops"]}
    X = delta.home_pose + np.array([0.02, -0.015, 0.01])
    q = delta.inverse_kinematics(X)
    lines, tool, Xf = delta.stick_figure(q)
    np.testing.assert_allclose(tool, X, atol=1e-10)
    np.testing.assert_allclose(Xf, X, atol=1e-10)
    segs = _segments(lines)
    want = set()
    base = []
    for i in range(1, 4):
        B = np.array(joints[f"theta{i}"]["origin"])
        base.append(B)
        u = B / np.linalg.norm(B)                               # outward azimuth of the arm
        a = np.linalg.norm(joints[f"elbow{i}_a"]["origin"])     # upper arm
        L = np.linalg.norm(loops[f"ball{i}"]["point_a"])        # forearm
        P = X + np.array(loops[f"ball{i}"]["point_b"])          # ball joint (the platform stays level)
        # the elbow: in the arm's vertical plane, at the upper-arm length, the forearm away from P
        E = B + a * (np.cos(q[i - 1]) * u - np.sin(q[i - 1]) * np.array([0.0, 0.0, 1.0]))
        assert np.linalg.norm(P - E) == pytest.approx(L, abs=1e-10)
        want |= _segments([np.array([B, E]), np.array([E, P]), np.array([X, P])])
    want |= _segments([np.array(base + [base[0]])])
    assert segs == want


def test_mujoco_plant_pose_is_the_task_point_of_the_planar_point_layout(fivebar):
    """The MuJoCo plant's pose of a mechanism is its task point (the tool site, not the origin of
    the task body) in the model's layout: (x, y) for the five-bar."""
    pytest.importorskip("mujoco")
    from drivers.sim.mujoco_plant import MujocoPlant

    assert fivebar.task_layout == "planar_point"
    q0 = fivebar.home_q + np.array([0.1, -0.05])
    plant = MujocoPlant(fivebar, q0=q0)
    np.testing.assert_allclose(plant.pose, _fivebar_points(q0)[4][:2], atol=1e-9)
