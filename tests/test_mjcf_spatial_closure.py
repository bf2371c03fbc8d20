"""A spatial revolute loop closure written as MJCF (:func:`dynamics.mjcf.mechanism_mjcf`: two
``connect`` constraints on the common axis) and run in the MuJoCo plant, against the mechanism
model's own dynamics (the numba plant integrating its forward dynamics, closures re-solved
exactly at every call).

The mechanism is the spatial crank-rocker of tests/test_mechanism_joints.py (:func:`rsur`: its
rocker closed to the ground by the revolute closure "pivot", 6 coordinates, mobility 1).  MuJoCo
shares nothing with our sympy derivation but the robot file: agreement of the crank, the passive
universal joint's angles, the task point and the energy along a swing is the check.  Written with
the point's ``connect`` alone, the rocker turns freely about the pivot point and every figure
below is off by orders of magnitude (see the test's docstring).
"""

from __future__ import annotations

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")

from dynamics import load_model  # noqa: E402

try:
    from tests.test_mechanism_joints import rsur
    from tests.test_mujoco_plant import cross_check_model
except ImportError:  # pragma: no cover - rootdir not on sys.path
    from test_mechanism_joints import rsur
    from test_mujoco_plant import cross_check_model


@pytest.fixture(scope="module")
def crank():
    return load_model(rsur(), file="rsur.toml")


def test_the_closure_is_two_connects_on_the_axis(crank):
    """closure1 at point_a, closure1_axis length_scale further along axis_a; MuJoCo compiles it
    assembled (both connects closed at the written pose, at another crank angle than home)."""
    robot = crank.to_mjcf(crank.home_q + 0.7)
    assert robot.closures == ("closure1", "closure1_axis")
    m = mujoco.MjModel.from_xml_string(robot.xml)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    assert list(m.eq_type) == [mujoco.mjtEq.mjEQ_CONNECT] * 2
    lp = crank.spec.symbolic["loops"][0]
    np.testing.assert_allclose(m.eq_data[1, :3] - m.eq_data[0, :3],
                               crank.spec.length_scale * np.asarray(lp["axis_a"]), rtol=0, atol=1e-15)
    assert np.max(np.abs(d.efc_pos[:6])) < 1e-12, d.efc_pos[:6]


def test_a_swing_of_the_crank_rocker_agrees_with_the_model(crank):
    """1 s of the crank-rocker falling under gravity from 0.3 rad off home, with a 1 mN m sine
    on the crank, both engines from the same torques (no gravity compensation: home is an
    unstable equilibrium, where the compensated cross-check's crank error grows from 5e-7 rad
    after 0.1 s to 1.3e-3 rad after 1 s).  Measured: the crank within 1.0e-5 rad over a 3.4 rad
    swing, the universal joint's two angles within 4.1e-5 rad, the task point (rocker pin)
    within 4.1e-6 m, the energy changes (gravity, viscous loss, the drive's work; from the first
    step on) within 1e-7 J of 0.023 J, the closure gap 1.35e-7 m, the rocker's axis within
    2.7e-6 rad of the ground's.  With only the point's connect (the axis alignment missing; the
    gap of that connect stays 1.4e-7 m) MuJoCo's rocker turns about the pivot: the crank 0.037
    rad off after 0.1 s, 0.58 rad after 1 s, the universal angles 2.3 rad, the task point 54 mm,
    the energy 4 mJ, the rocker's axis at right angles."""
    mm = {}
    lp = crank.spec.symbolic["loops"][0]
    axis_a = np.asarray(lp["axis_a"])
    axis_b = np.asarray(rsur()["loops"][0]["axis_b"])       # in the ground frame
    worst = np.zeros(4)    # universal angles [rad], task point [m], energy change [J], axis [rad]
    e0 = []

    def probe(a, b):
        m, d = b.mj_model, b.mj_data
        if not mm:
            mm["cross"] = [m.joint(j).qposadr[0] for j in ("cross.1", "cross.2")]
            mm["tool"], mm["rocker"] = m.site("tool").id, m.body("rocker").id
            e0.extend([a.energy(), b.energy()])
        z = crank.configuration(a.state.q)
        T = crank.forward_kinematics(a.state.q)
        ax = d.xmat[mm["rocker"]].reshape(3, 3) @ axis_a
        err = [np.max(np.abs(z[4:6] - d.qpos[mm["cross"]])),
               np.max(np.abs(T[:3, 3] - d.site_xpos[mm["tool"]])),
               abs((a.energy() - e0[0]) - (b.energy() - e0[1])),
               float(np.linalg.norm(np.cross(ax, axis_b)))]
        worst[:] = np.maximum(worst, err)

    q0 = crank.home_q + 0.3
    per_s, closure, moved = cross_check_model(crank, q0, 1e-4, compensate=False, probe=probe)
    assert moved > 1.0, moved                       # a large swing: the loop's geometry moved
    assert per_s.max() < 1e-4, per_s                # crank [rad]
    assert worst[0] < 4e-4, worst                   # passive universal angles [rad]
    assert worst[1] < 4e-5, worst                   # task point [m]
    assert worst[2] < 1e-6, worst                   # energy change [J] (of 0.023 J)
    assert closure < 1e-6, closure                  # both connects' gaps [m]
    assert worst[3] < 3e-5, worst                   # the axis alignment [rad]
