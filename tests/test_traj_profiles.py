"""Point-to-point profiles, timing laws, splines and combinators (trajectories.profiles/base/splines)."""

import math

import numpy as np
import pytest

from dynamics.errors import InfeasibleTrajectoryError, TrajectoryError
from trajectories import base as tb
from trajectories.mapping import Tabulated
from trajectories.profiles import (SHAPE_PEAKS, SHAPES, PointToPoint, constant_speed_law, double_s_law,
                                   double_s_phases, point_to_point, shape_law, trapezoidal_law)
from trajectories.splines import ViaPointSpline


def fd_errors(traj, t, h=1e-5):
    """Max abs difference between analytic derivatives and central differences of the next lower one."""
    s, sp, sm = traj.sample(t), traj.sample(t + h), traj.sample(t - h)
    return (np.max(np.abs((sp.pos - sm.pos) / (2 * h) - s.vel)),
            np.max(np.abs((sp.vel - sm.vel) / (2 * h) - s.acc)),
            np.max(np.abs((sp.acc - sm.acc) / (2 * h) - s.jerk)))


def interior_times(traj, n=150, avoid=(), gap=1e-3, seed=0):
    """Random times inside (0, T), away from the given breakpoints."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(gap, traj.duration_s - gap, 4 * n))
    for b in avoid:
        t = t[np.abs(t - b) > gap]
    return t[:n]


Q0 = np.array([0.2, -1.0, 0.5])
Q1 = np.array([1.2, 0.5, 0.5])


@pytest.mark.parametrize("kind", SHAPES)
def test_shape_derivatives_boundaries_and_peaks(kind):
    tr = point_to_point(Q0, Q1, kind, duration_s=1.7)
    ev, ea, ej = fd_errors(tr, interior_times(tr))
    assert ev < 1e-8 and ea < 1e-7 and ej < 1e-6
    s0, s1 = tr.sample(0.0), tr.sample(tr.duration_s)
    np.testing.assert_allclose(s0.pos, Q0, atol=1e-15)
    np.testing.assert_allclose(s1.pos, Q1, atol=1e-12)
    np.testing.assert_allclose(s0.vel, 0, atol=1e-12)
    np.testing.assert_allclose(s1.vel, 0, atol=1e-12)
    if kind != "cubic":       # cubic has acceleration steps at the ends
        np.testing.assert_allclose(s0.acc, 0, atol=1e-12)
        np.testing.assert_allclose(s1.acc, 0, atol=1e-10)
    # normalised peaks, derived by hand (PEAKS_BY_HAND), not read from the module's table; the
    # table (which the time scaling uses) must hold the same numbers
    law = shape_law(kind, 1.0)
    d = law.derivatives(np.linspace(0, 1, 200001))
    for k in range(3):
        assert np.max(np.abs(d[k + 1])) == pytest.approx(PEAKS_BY_HAND[kind][k], rel=1e-6)
    assert SHAPE_PEAKS[kind] == pytest.approx(PEAKS_BY_HAND[kind], rel=1e-12)


# Peak |v|, |a|, |j| (first, second, third derivative) of the normalised shapes on [0, 1],
# with u = t (1 - t), so that (1 - 2t)^2 = 1 - 4u:
# cubic 3t^2 - 2t^3: v = 6u, max 6/4 at u = 1/4; a = 6 (1 - 2t), max 6; j = -12.
# quintic 10t^3 - 15t^4 + 6t^5: v = 30u^2, max 30/16; a = 60u (1 - 2t), stationary where
#   (1 - 2t)^2 = 2u, i.e. u = 1/6, |1 - 2t| = 1/sqrt(3): 10/sqrt(3); j = 60 (1 - 6u), max 60 at
#   the ends (u = 0; -30 at u = 1/4). Minimum jerk is the same polynomial.
# cycloidal t - sin(2 pi t)/(2 pi): v = 1 - cos(2 pi t), max 2; a = 2 pi sin, j = 4 pi^2 cos.
# septic 35t^4 - 84t^5 + 70t^6 - 20t^7: v = 140u^3, max 140/64 = 35/16; a = 420u^2 (1 - 2t),
#   stationary where (1 - 2t)^2 = u, i.e. u = 1/5, |1 - 2t| = 1/sqrt(5): 420/(25 sqrt(5));
#   j = 840u (1 - 5u): 42 at u = 1/10, -52.5 at u = 1/4, so 52.5.
PEAKS_BY_HAND = {
    "cubic": (1.5, 6.0, 12.0),
    "quintic": (1.875, 10.0 / np.sqrt(3.0), 60.0),
    "minimum_jerk": (1.875, 10.0 / np.sqrt(3.0), 60.0),
    "cycloidal": (2.0, 2.0 * np.pi, 4.0 * np.pi ** 2),
    "septic": (35.0 / 16.0, 420.0 / (25.0 * np.sqrt(5.0)), 52.5),
}


def test_cycloidal_is_sinusoidal_acceleration_with_inflection_ends():
    T = 2.0
    tr = point_to_point([0.0], [1.0], "cycloidal", duration_s=T)
    t = np.linspace(0, T, 101)
    s = tr.sample(t)
    np.testing.assert_allclose(s.acc[:, 0], 2 * np.pi / T**2 * np.sin(2 * np.pi * t / T), atol=1e-12)


def test_synchronised_axes_start_and_end_together_slowest_sets_duration():
    vmax = np.array([1.0, 0.5, 2.0])
    tr = point_to_point([0, 0, 0], [1.0, 1.0, -1.0], "quintic", vmax=vmax)
    # axis 1 is the slowest: T = 15/8 * 1 / 0.5
    assert tr.duration_s == pytest.approx(15 / 8 / 0.5)
    t = np.linspace(0, tr.duration_s, 500)
    s = tr.sample(t)
    assert np.max(np.abs(s.vel) / vmax) == pytest.approx(1.0, rel=1e-4)
    assert np.all(np.abs(s.vel) <= vmax * (1 + 1e-12))
    # same shape on every axis: positions proportional to the displacement
    frac = (s.pos - 0) / np.array([1.0, 1.0, -1.0])
    np.testing.assert_allclose(frac[:, 0], frac[:, 1], atol=1e-14)
    np.testing.assert_allclose(frac[:, 0], frac[:, 2], atol=1e-14)


def test_synchronised_double_s_respects_every_axis():
    q0, q1 = np.array([0.0, 0.0]), np.array([2.0, -0.3])
    v, a, j = np.array([1.0, 0.1]), np.array([2.0, 5.0]), np.array([10.0, 0.5])
    tr = point_to_point(q0, q1, "double_s", vmax=v, amax=a, jmax=j)
    s = tr.sample(np.linspace(0, tr.duration_s, 4001))
    assert np.all(np.abs(s.vel) <= v * (1 + 1e-9))
    assert np.all(np.abs(s.acc) <= a * (1 + 1e-9))
    assert np.all(np.abs(s.jerk) <= j * (1 + 1e-9))
    # at least one axis is at one of its limits (time-optimal in the normalised coordinate)
    usage = max(np.max(np.abs(s.vel) / v), np.max(np.abs(s.acc) / a), np.max(np.abs(s.jerk) / j))
    assert usage == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("h,v,a,j,expected", [
    # vmax and amax reached: T = h/v + v/a + a/j
    (10.0, 2.0, 1.0, 2.0, 10 / 2 + 2 / 1 + 1 / 2),
    # amax reached, vmax not: Tj = a/j, Ta = Tj/2 + sqrt(Tj^2/4 + h/a), T = 2 Ta
    (1.0, 10.0, 1.0, 4.0, 2 * (0.125 + math.sqrt(0.125**2 + 1.0))),
    # neither reached: T = 4 (h / (2 j))^(1/3)
    (0.01, 10.0, 10.0, 1.0, 4 * (0.01 / 2) ** (1 / 3)),
    # vmax reached, amax not (v j < a^2): Ta = 2 sqrt(v/j), T = h/v + Ta
    (5.0, 1.0, 10.0, 4.0, 5.0 + 2 * math.sqrt(1 / 4)),
])
def test_double_s_time_optimal_closed_form(h, v, a, j, expected):
    tr = point_to_point([0.0], [h], "double_s", vmax=v, amax=a, jmax=j)
    assert tr.duration_s == pytest.approx(expected, rel=1e-12)
    t = np.linspace(0, tr.duration_s, 20001)
    s = tr.sample(t)
    assert np.all(np.abs(s.vel) <= v * (1 + 1e-9))
    assert np.all(np.abs(s.acc) <= a * (1 + 1e-9))
    assert np.all(np.abs(s.jerk) <= j * (1 + 1e-9))
    assert s.pos[-1, 0] == pytest.approx(h, rel=1e-12)
    assert abs(s.vel[-1, 0]) < 1e-10 * v and abs(s.acc[-1, 0]) < 1e-9 * a
    Tj, Ta, Tv = double_s_phases(h, v, a, j)
    bps = np.cumsum([0, Tj, Ta - 2 * Tj, Tj, Tv, Tj, Ta - 2 * Tj, Tj])
    ev, ea, ej = fd_errors(tr, interior_times(tr, avoid=bps, gap=1e-4), h=1e-6)
    scale = max(v, a, j)
    assert ev < 1e-6 * scale and ea < 1e-6 * scale


def test_double_s_with_longer_duration_stretches_and_shorter_is_infeasible():
    fast = point_to_point([0.0], [1.0], "double_s", vmax=1, amax=1, jmax=1)
    slow = point_to_point([0.0], [1.0], "double_s", vmax=1, amax=1, jmax=1, duration_s=2 * fast.duration_s)
    assert slow.duration_s == pytest.approx(2 * fast.duration_s)
    t = np.linspace(0, fast.duration_s, 50)
    np.testing.assert_allclose(slow.sample(2 * t).vel, fast.sample(t).vel / 2, atol=1e-12)
    with pytest.raises(InfeasibleTrajectoryError):
        point_to_point([0.0], [1.0], "double_s", vmax=1, amax=1, jmax=1, duration_s=0.9 * fast.duration_s)


def test_trapezoidal_closed_form_and_triangle():
    tr = point_to_point([0.0], [4.0], "trapezoidal", vmax=2.0, amax=1.0)
    assert tr.duration_s == pytest.approx(4 / 2 + 2 / 1)
    tri = point_to_point([0.0], [0.5], "trapezoidal", vmax=2.0, amax=2.0)
    assert tri.duration_s == pytest.approx(2 * math.sqrt(0.5 / 2.0))
    assert np.max(np.abs(tri.sample(np.linspace(0, tri.duration_s, 1001)).vel)) < 2.0
    byT = point_to_point([1.0], [3.0], "trapezoidal", duration_s=3.0, accel_fraction=0.25)
    law = byT.law
    s = byT.sample(np.linspace(0, 3, 3001))
    # cruise speed: h / (T - Ta)
    assert np.max(s.vel) == pytest.approx(2.0 / (3.0 - 0.75), rel=1e-9)
    ev, ea, _ = fd_errors(byT, interior_times(byT, avoid=[0.75, 2.25], gap=1e-4), h=1e-6)
    assert ev < 1e-8 and ea < 1e-6
    assert law.phases["Ta"] == pytest.approx(0.75)


def test_constant_speed_law():
    law = constant_speed_law(4.0, ramp_s=1.0)
    t = np.linspace(1.0, 3.0, 11)
    s, sd, sdd, _ = law.derivatives(t)
    np.testing.assert_allclose(sd, 1 / 3.0)
    np.testing.assert_allclose(sdd, 0.0, atol=1e-15)
    assert law.sample(0.0).pos[0] == 0.0 and law.sample(4.0).pos[0] == pytest.approx(1.0)
    ends = law.sample(np.array([0.0, 4.0]))
    np.testing.assert_allclose(np.c_[ends.vel, ends.acc, ends.jerk], 0, atol=1e-12)
    tr = PointToPoint([0.0, 1.0], [2.0, -1.0], law)
    ev, ea, ej = fd_errors(tr, interior_times(tr))
    assert ev < 1e-8 and ea < 1e-7 and ej < 1e-6


@pytest.mark.parametrize("kind", ["quintic", "cubic"])
def test_via_point_spline(kind):
    times = [0.0, 1.0, 2.5, 3.0]
    pts = np.array([[0.0, 1.0], [1.0, 2.0], [0.5, 1.0], [0.0, 0.0]])
    sp = ViaPointSpline(times, pts, kind=kind)
    np.testing.assert_allclose(sp.sample(np.array(times)).pos, pts, atol=1e-12)
    ends = sp.sample(np.array([0.0, 3.0]))
    np.testing.assert_allclose(ends.vel, 0, atol=1e-12)
    if kind == "quintic":
        np.testing.assert_allclose(ends.acc, 0, atol=1e-10)
    ev, ea, ej = fd_errors(sp, interior_times(sp, avoid=times, gap=1e-4), h=1e-6)
    assert ev < 1e-7 and ea < 1e-6
    # acceleration continuous across the knots
    for tk in times[1:-1]:
        a_l, a_r = sp.sample(tk - 1e-9).acc, sp.sample(tk + 1e-9).acc
        np.testing.assert_allclose(a_l, a_r, atol=1e-6)


def test_clamped_outside_interval_and_shapes():
    tr = point_to_point([0.0, 0.0], [1.0, 2.0], "quintic", duration_s=1.0)
    s = tr.sample(np.array([-1.0, 0.5, 2.0]))
    assert s.pos.shape == (3, 2)
    np.testing.assert_allclose(s.pos[0], [0, 0])
    np.testing.assert_allclose(s.pos[2], [1, 2])
    np.testing.assert_allclose(s.vel[[0, 2]], 0)
    one = tr.sample(0.5)
    assert one.pos.shape == (2,)
    np.testing.assert_allclose(one.pos, s.pos[1])


def test_sequence_hold_stack_timescaled():
    a = point_to_point([0.0], [1.0], "quintic", duration_s=1.0)
    b = point_to_point([1.0], [0.0], "cycloidal", duration_s=2.0)
    seq = tb.Sequence([a, tb.Hold([1.0], 0.5), b])
    assert seq.duration_s == pytest.approx(3.5)
    assert seq.sample(1.2).pos[0] == pytest.approx(1.0)
    np.testing.assert_allclose(seq.sample(2.5).pos, b.sample(1.0).pos)
    ev, ea, ej = fd_errors(seq, interior_times(seq, avoid=[1.0, 1.5]))
    assert ev < 1e-8 and ea < 1e-7
    with pytest.raises(TrajectoryError, match="starts"):
        tb.Sequence([a, a])
    st = tb.Stack([a, point_to_point([0.0], [3.0], "cubic", duration_s=1.0)])
    assert st.dim == 2
    ts = tb.TimeScaled(a, 2.0)
    assert ts.duration_s == 2.0
    np.testing.assert_allclose(ts.sample(1.0).vel, a.sample(0.5).vel / 2)
    np.testing.assert_allclose(ts.sample(1.0).acc, a.sample(0.5).acc / 4)
    np.testing.assert_allclose(ts.sample(1.0).jerk, a.sample(0.5).jerk / 8)


def test_tabulated_is_c2_and_matches_nodes():
    base = point_to_point([0.0, 1.0], [1.0, -1.0], "cycloidal", duration_s=2.0)
    tab = Tabulated(base, 0.05)
    nodes = tab.nodes_s
    np.testing.assert_allclose(tab.sample(nodes).pos, base.sample(nodes).pos, atol=1e-14)
    np.testing.assert_allclose(tab.sample(nodes).acc, base.sample(nodes).acc, atol=1e-11)
    t = interior_times(base, avoid=nodes, gap=1e-4)
    assert np.max(np.abs(tab.sample(t).pos - base.sample(t).pos)) < 1e-7
    assert np.max(np.abs(tab.sample(t).acc - base.sample(t).acc)) < 1e-3
    ev, ea, _ = fd_errors(tab, t, h=1e-6)
    assert ev < 1e-7 and ea < 1e-5


@pytest.mark.parametrize("call", [
    lambda: point_to_point([0.0], [1.0], "quintic", duration_s=-1.0),
    lambda: point_to_point([0.0], [1.0], "quintic", duration_s=0.0),
    lambda: point_to_point([0.0], [1.0], "quintic"),
    lambda: point_to_point([0.0], [1.0], "bogus", duration_s=1.0),
    lambda: point_to_point([0.0, 1.0], [1.0], "quintic", duration_s=1.0),
    lambda: point_to_point([0.0], [1.0], "double_s", vmax=1.0, amax=1.0),
    lambda: point_to_point([0.0], [1.0], "double_s", vmax=1.0, amax=-1.0, jmax=1.0),
    lambda: point_to_point([0.0], [np.nan], "quintic", duration_s=1.0),
    lambda: point_to_point([0.0], [0.0], "quintic"),
    lambda: trapezoidal_law(duration_s=1.0, accel_fraction=0.7),
    lambda: double_s_law(0.0, 1.0, 1.0),
    lambda: constant_speed_law(1.0, ramp_s=0.8),
    lambda: ViaPointSpline([0.0, 1.0, 1.0], [[0.0], [1.0], [2.0]]),
    lambda: ViaPointSpline([0.0, 1.0], [[0.0], [1.0]], kind="quintic", bc="natural"),
    lambda: tb.Hold([0.0], -1.0),
    lambda: tb.TimeScaled(tb.Hold([0.0], 1.0), 0.0),
])
def test_bad_input_raises_trajectory_error(call):
    with pytest.raises(TrajectoryError):
        call()


def test_infeasible_duration_for_fixed_shape():
    with pytest.raises(InfeasibleTrajectoryError, match="shorter"):
        point_to_point([0.0], [1.0], "quintic", duration_s=0.1, vmax=1.0)


def test_generic_law_scaling():
    from trajectories.profiles import TimingLaw, _ScaledLaw
    law = shape_law("septic", 1.0)
    slow = TimingLaw.scaled_to(law, 3.0)
    assert isinstance(slow, _ScaledLaw) and slow.duration_s == 3.0
    np.testing.assert_allclose(slow.sample(1.5).vel, law.sample(0.5).vel / 3)
    np.testing.assert_allclose(slow.sample(1.5).jerk, law.sample(0.5).jerk / 27)
    assert law.scaled_to(3.0).sample(1.5).acc[0] == pytest.approx(slow.sample(1.5).acc[0])


def test_double_s_equals_ruckig_time_optimal_profile():
    """Independent reference: ruckig (time-optimal jerk-limited OTG) gives the same duration and
    the same position/velocity/acceleration along rest-to-rest moves, over random limits covering
    every case (vmax reached or not, amax reached or not)."""
    ruckig = pytest.importorskip("ruckig")
    rng = np.random.default_rng(5)
    for _ in range(60):
        h = float(rng.uniform(0.01, 5.0)) * (1 if rng.random() < 0.5 else -1)
        v, a, j = (float(x) for x in 10 ** rng.uniform(-0.5, 1.0, size=3))
        ours = point_to_point([0.3], [0.3 + h], "double_s", vmax=v, amax=a, jmax=j)
        inp = ruckig.InputParameter(1)
        inp.current_position, inp.target_position = [0.3], [0.3 + h]
        inp.max_velocity, inp.max_acceleration, inp.max_jerk = [v], [a], [j]
        ref = ruckig.Trajectory(1)
        assert ruckig.Ruckig(1).calculate(inp, ref) == ruckig.Result.Working
        assert ours.duration_s == pytest.approx(ref.duration, rel=1e-9, abs=1e-12)
        for t in np.linspace(0.0, ref.duration, 37):
            p, vel, acc = ref.at_time(float(t))
            s = ours.sample(float(t))
            np.testing.assert_allclose([s.pos[0], s.vel[0], s.acc[0]], [p[0], vel[0], acc[0]],
                                       rtol=0, atol=1e-8 * max(1.0, abs(h), v, a))
