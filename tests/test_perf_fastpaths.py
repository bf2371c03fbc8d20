"""The per-cycle fast paths of the offline loop give the results of the reference paths.

Each fast path is compared with the code path it short-cuts (forced by
disabling the fast path on the same objects), to 1e-12 or exactly:

* ``SimulatedPlant`` compiled 3RRR step (``drivers/sim/_plant_kernels.py``)
  vs the Python ``_step`` (lag, viscous + Coulomb incl. sticking, drive PD,
  saturation), and the same error when the model fails;
* ``Planar3RRR.task_jacobian`` / ``singularity`` kernels vs the numpy paths;
* ``trajectories.GridCache`` vs ``Trajectory.sample`` (on and off the grid,
  a failing trajectory raises at the same time);
* ``SafetySupervisor`` clean-cycle path vs the full checks, on random cycles
  that hit every check;
* inline-served emulated CAN devices vs the emulator thread: identical runs.

These are parity tests (fast path against the path it short-cuts), except
``test_closed_form_singular_values_match_lapack``. The independent checks of the same
quantities: the plant step in ``test_sim_plant.py::test_trajectory_matches_independent_ode_solution``,
``test_sim_plant.py::test_real_parallel_model_energy_and_pose`` and
``test_sim_plant.py::test_coulomb_sliding_stops_at_the_right_place``; the 3RRR Jacobian and
singularity in ``test_3rrr_kinematics.py::test_jacobians_and_hessians_by_finite_differences``
and ``test_3rrr_kinematics.py::test_type2_singularity``; the trajectory samples in
``test_traj_profiles.py``; the safety checks in ``test_ctrl_safety.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.app.run import build_run, load_run
from controller import _safety_rules as _rules
from controller.safety import OK, SafetySupervisor
from dynamics import load_model
from dynamics.errors import TorqueloopError, TrajectoryError
from drivers.base import TIMEOUT_MAX_S
from drivers.sim.plant import SimulatedPlant
from trajectories import GridCache, Hold, Sequence, Trajectory
from trajectories.base import Sample

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"
ROBOT = ROOT / "hil_configs" / "robots" / "3rrr_horizontal.toml"


@pytest.fixture(scope="module")
def rrr():
    return load_model(ROBOT)


def _plant(model, **kw):
    q0 = np.asarray(model.inverse_kinematics(model.home_pose), dtype=float)
    return SimulatedPlant(model.scaled(1.1), q0=q0, **kw)


def _compiled_and_python(model, commands, **kw):
    """The same commands through a plant with its compiled step and one with the Python step:
    (trajectory compiled, trajectory Python, the compiled plant)."""
    fast = _plant(model, **kw)
    slow = _plant(model, **kw)
    assert fast._kernel is not None
    slow._kernel = None
    return _drive(fast, commands), _drive(slow, commands), fast


def _drive(plant, commands, dt=1e-3):
    """Hold each command for one period; return the trajectory of (q, qd, X, tau_applied)."""
    out = []
    t = plant.t_s
    for c in commands:
        plant.set_command(*c)
        t += dt
        plant.advance_to(t)
        st = plant.state
        out.append(np.concatenate([st.q, st.qd, plant.pose, plant.applied_torque_nm]))
    return np.array(out)


@pytest.mark.parametrize("kw", [
    dict(current_lag_s=4e-4, viscous=0.03, coulomb=0.08),
    dict(current_lag_s=0.0, viscous=0.0, coulomb=0.0),
    dict(current_lag_s=1e-3, viscous=0.05, coulomb=0.2, torque_limit_nm=0.3),   # sticking + saturation
    dict(substeps=3, coulomb=0.02),
])
def test_compiled_plant_step_equals_python_step(rrr, kw):
    rng = np.random.default_rng(5)
    cmds = []
    for k in range(120):
        tau = 0.4 * np.sin(0.05 * k + np.arange(3)) + 0.05 * rng.normal(size=3)
        if 40 <= k < 70:   # drive-side PD for a while
            cmds.append((tau, np.full(3, 2.0), np.full(3, 0.05), np.full(3, 0.1), np.zeros(3)))
        else:
            cmds.append((tau,))
    a, b, _ = _compiled_and_python(rrr, cmds, **kw)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    assert np.ptp(a[:, :3], axis=0).max() > 1e-3          # it did move


@pytest.mark.parametrize("kw", [
    dict(current_lag_s=4e-4, viscous=30.0, coulomb=20.0),
    dict(),
    dict(coulomb=50.0, torque_limit_nm=2000.0, current_lag_s=1e-3),   # sticking + saturation
])
def test_compiled_stewart_plant_step_equals_python_step(kw):
    """The Stewart platform's compiled plant step (drivers/sim/_stewart_plant_kernel.py) against
    the Python step, with drive-side PD for a while: the same numbers to the last bit (both
    call the model's one-state kernels), and the pose after each step too."""
    m = load_model(ROBOT.parent / "stewart.toml")
    q0 = np.asarray(m.inverse_kinematics(m.home_pose), dtype=float)
    g = np.asarray(m.gravity(q0, pose=m.home_pose), dtype=float)
    rng = np.random.default_rng(3)
    cmds = []
    for k in range(150):
        tau = g + 20.0 * np.sin(0.05 * k + np.arange(6)) + rng.normal(size=6)
        if 60 <= k < 90:
            cmds.append((tau, np.full(6, 2000.0), np.full(6, 50.0), q0 + 0.001, np.zeros(6)))
        else:
            cmds.append((tau,))
    a, b, fast = _compiled_and_python(m, cmds, **kw)
    np.testing.assert_array_equal(a, b)
    assert np.ptp(a[:, :6], axis=0).max() > 1e-8           # it did move
    args, why = fast.compiled_step_args()                  # the compiled offline loop steps it
    assert why == "" and args["kind"] == "stewart" and args["X"].shape == (6,)


def test_compiled_plant_step_not_used_with_a_wrench_or_euler(rrr):
    p = _plant(rrr, integrator="semi_implicit_euler")
    assert p._kernel is None
    fast = _plant(rrr)
    slow = _plant(rrr)
    slow._kernel = None
    for p in (fast, slow):
        p.set_external_wrench([1.0, -0.5, 0.02])
    np.testing.assert_array_equal(_drive(fast, [(np.full(3, 0.1),)] * 5),
                                  _drive(slow, [(np.full(3, 0.1),)] * 5))


def test_compiled_plant_step_fails_like_the_python_step(rrr):
    errs = []
    for use_kernel in (True, False):
        p = _plant(rrr, viscous=0.0, coulomb=0.0)
        if not use_kernel:
            p._kernel = None
        p.set_torque(np.array([40.0, -40.0, 40.0]))    # flings the robot out of its workspace
        t = 0.0
        with pytest.raises(TorqueloopError) as ei:
            for _ in range(2000):
                t += 1e-3
                p.advance_to(t)
        errs.append((type(ei.value), str(ei.value).split(" at ")[0], p.t_s, p.state.q))
    assert errs[0][0] is errs[1][0] and errs[0][1] == errs[1][1]
    assert errs[0][2] == errs[1][2]
    np.testing.assert_allclose(errs[0][3], errs[1][3], rtol=0, atol=1e-9)


def test_task_jacobian_and_singularity_kernels_match_numpy(rrr, monkeypatch):
    import dynamics.planar3rrr as mod

    rng = np.random.default_rng(3)
    X0 = np.asarray(rrr.home_pose, dtype=float)
    cases = []
    for _ in range(200):
        X = X0 + rng.normal(size=3) * [0.04, 0.04, 0.4]
        try:
            q = rrr.inverse_kinematics(X)
        except TorqueloopError:
            continue
        cases.append((np.asarray(q, dtype=float), X))
    assert len(cases) > 50
    fast = [(rrr.task_jacobian(q, X), rrr.singularity(q, X)) for q, X in cases]
    monkeypatch.setattr(mod.K, "jx_entry", lambda *a: 1)
    monkeypatch.setattr(mod.K, "sing_entry", lambda *a: 1)
    kinds = set()
    for (q, X), (J, rep) in zip(cases, fast):
        J_ref, rep_ref = rrr.task_jacobian(q, X), rrr.singularity(q, X)
        np.testing.assert_allclose(J, J_ref, rtol=0, atol=1e-12 * max(1.0, np.abs(J_ref).max()))
        assert rep.kind == rep_ref.kind
        kinds.add(rep.kind)
        for f in ("det_a", "det_b", "cond_a", "cond_b", "margin"):
            x, y = getattr(rep, f), getattr(rep_ref, f)
            assert x == pytest.approx(y, rel=1e-11, abs=1e-14), f
        assert rep.extra["worst_leg"] == rep_ref.extra["worst_leg"]
        for k in ("type1_measure", "type2_measure"):
            assert rep.extra[k] == pytest.approx(rep_ref.extra[k], rel=1e-12, abs=1e-15)
    assert "regular" in kinds


def _reachable(rrr, rng, n, scale):
    """``(X, q)`` of the poses among ``n`` random ones about the home pose (standard deviations
    ``scale`` (3,)) that the inverse kinematics reaches."""
    X0 = np.asarray(rrr.home_pose, dtype=float)
    for _ in range(n):
        X = X0 + rng.normal(size=3) * scale
        try:
            q = np.asarray(rrr.inverse_kinematics(X), dtype=float)
        except TorqueloopError:
            continue
        yield X, q


def test_singularity_check_measures_equal_sing_entry(rrr):
    """``sing_margin_ws`` (the compiled loop's singularity check, from the geometry the FK
    leaves in its workspace) gives ``sing_entry``'s type-1 and type-2 measures and margin to
    the bit: on regular poses, on poses below the tolerance (margin -1; a large tolerance makes
    many) and, for a non-finite input, the same status."""
    from dynamics import _planar3rrr_kernels as K

    rng = np.random.default_rng(11)
    X0 = np.asarray(rrr.home_pose, dtype=float)
    margins = []
    for tol in (float(rrr._P[3, 5]), 0.3):
        P = rrr._P.copy()
        P[3, 5] = tol
        n = 0
        for X, q in _reachable(rrr, rng, 300, [0.05, 0.05, 0.5]):
            ws = np.full(K.WS_SIZE, np.nan)           # nothing but the FK's geometry is read
            Xf = np.empty(3)
            st, _ = K.fk_newton_ws(P, q, X + rng.normal(size=3) * 1e-4, 1e-12, 50, Xf, ws)
            if st != 0:
                continue
            ref = np.full(8, 7.0)
            out = np.full(8, 7.0)
            assert K.sing_entry(P, q, Xf, ref) == K.sing_margin_ws(P, q, Xf, ws, out) == 0
            assert out[[0, 1, 4]].tobytes() == ref[[0, 1, 4]].tobytes()
            margins.append(out[4])
            n += 1
        assert n > 50
    assert min(margins) == -1.0 and max(margins) > 0.0
    bad = np.array([np.nan, 0.0, 0.0])
    assert K.sing_margin_ws(rrr._P, bad, X0, np.empty(K.WS_SIZE), np.empty(8)) == \
        K.sing_entry(rrr._P, bad, X0, np.empty(8)) != 0


@pytest.mark.parametrize("has_ki", [False, True])
def test_task_computed_torque_in_a_dirty_workspace(rrr, has_ki):
    """``rrr_task_computed_torque_ws`` (the compiled loop's law, in a workspace kept for the
    segment) gives ``rrr_task_computed_torque``'s outputs and status to the bit whatever the
    workspace holds (NaN, or the previous cycle's values), with and without the integrator
    and with saturated actuators."""
    from controller import _law_kernels as LK

    rng = np.random.default_rng(5)
    kp, kd = np.diag([1600.0, 1600.0, 1600.0]), np.diag([80.0, 80.0, 80.0])
    ki = np.diag([2e4, 2e4, 2e4])
    z_limit = np.full(3, np.inf)
    fric = np.array([[0.03, 0.03, 0.03], [0.08, 0.08, 0.08]])
    sat_lim = np.full(3, 2.0)
    ws = np.full(LK.RRR_TCT_WS, np.nan)
    n_sat = 0
    for i, (X, q) in enumerate(_reachable(rrr, rng, 200, [0.03, 0.03, 0.3])):
        qd = rng.normal(size=3)
        hint = X + rng.normal(size=3) * 1e-3
        ref = [X + rng.normal(size=3) * 1e-2, rng.normal(size=3) * 0.1, rng.normal(size=3) * 5.0]
        z = rng.normal(size=3) * 1e-4
        args = (rrr._P, rrr._branch_k, q, qd, hint, *ref, kp, kd, ki, has_ki, z, 1e-3, z_limit, fric,
                LK.FRICTION_MEASURED, True, sat_lim)
        outs = [(np.empty(3), np.empty(3), np.empty(3), np.empty(3, dtype=np.bool_), np.empty(3)) for _ in range(2)]
        st_ref = LK.rrr_task_computed_torque(*args, *outs[0])
        if i % 2:
            ws[:] = np.nan
        st = LK.rrr_task_computed_torque_ws(*args, *outs[1], ws)
        assert st == st_ref == 0
        for a, b in zip(*outs):
            assert a.tobytes() == b.tobytes()
        n_sat += bool(outs[0][3].any())
    assert n_sat > 5


def test_closed_form_singular_values_match_lapack():
    """sv_extremes3 (the singularity check's condition numbers and margin, one-sided Jacobi)
    against LAPACK's SVD: the largest to ~eps, the smallest to ~eps * cond (LAPACK's own
    accuracy), on random matrices with condition numbers 1 .. 1e8, and exact cases."""
    from dynamics._planar3rrr_kernels import sv_extremes3

    rng = np.random.default_rng(5)
    for _ in range(3000):
        U, _r = np.linalg.qr(rng.normal(size=(3, 3)))
        V, _r = np.linalg.qr(rng.normal(size=(3, 3)))
        kappa = 10.0 ** rng.uniform(0.0, 8.0)
        sv = np.array([kappa, 10.0 ** rng.uniform(0.0, np.log10(kappa)), 1.0]) * 10.0 ** rng.uniform(-3, 3)
        A = U @ np.diag(sv) @ V.T
        ref = np.linalg.svd(A, compute_uv=False)
        smax, smin = sv_extremes3(np.ascontiguousarray(A.ravel()))
        assert smax == pytest.approx(ref[0], rel=1e-14)
        assert smin == pytest.approx(ref[2], rel=1e-14 * ref[0] / ref[2])
    assert sv_extremes3(np.zeros(9)) == (0.0, 0.0)
    assert sv_extremes3(np.diag([3.0, -2.0, 0.5]).ravel()) == (3.0, 0.5)
    assert sv_extremes3(np.array([1.0, 2, 3, 2, 4, 6, 1, 1, 1]))[1] < 1e-15     # rank 2


def test_grid_cache_equals_scalar_sampling():
    spec = load_run(RUNS / "3rrr_circle_direct.toml")
    for traj in (spec.trajectory, load_run(RUNS / "seed003_2r.toml").trajectory):
        P = spec.period_s
        g = GridCache(traj, P, block=97)
        n = int(traj.duration_s / P) + 40          # past the end too (clamped)
        for k in list(range(n)) + [5, 3, 700, 2]:   # also backwards
            a, b = g.sample(k * P), traj.sample(k * P)
            for x, y in zip(a, b):
                np.testing.assert_allclose(x, y, rtol=0, atol=1e-12)
        for t in (0.0005, 1.23456, np.float64(0.5), -1.0):   # off the grid, other types
            for x, y in zip(g.sample(t), traj.sample(t)):
                np.testing.assert_array_equal(x, y)
        ts = np.linspace(0, traj.duration_s, 11)
        for x, y in zip(g.sample(ts), traj.sample(ts)):
            np.testing.assert_array_equal(x, y)
        s = g.sample(3 * P)
        s.pos[:] = 1e9                              # callers get copies, the cache is intact
        assert np.all(g.sample(3 * P).pos < 1e9)


def test_grid_rows_table_is_shared_and_exact():
    """GridCache.rows serves the whole grid from one evaluation per trajectory and period,
    shared by every GridCache of that trajectory (a sweep's runs), with the numbers of a
    per-range evaluation; callers get copies; a range past the grid is evaluated as before."""
    traj = load_run(RUNS / "3rrr_circle_direct.toml").trajectory
    P = 1e-3
    calls = []
    orig = type(traj).sample

    def counting(self, t):
        calls.append(np.size(t))
        return orig(self, t)

    type(traj).sample = counting
    try:
        rows = GridCache(traj, P).rows(10, 500)
        assert len(calls) == 1 and calls[0] == int(traj.duration_s / P) + 1
        again = GridCache(traj, P).rows(3000, 1000)           # another run: no new evaluation
        assert len(calls) == 1
        rows[0][:] = 1e9                                       # a copy: the table is intact
        for r, ref in zip(GridCache(traj, P).rows(10, 500), _per_range(orig, traj, 10, 500, P)):
            np.testing.assert_array_equal(r, ref)
        for r, ref in zip(again, _per_range(orig, traj, 3000, 1000, P)):
            np.testing.assert_array_equal(r, ref)
        n = len(calls)
        tail = GridCache(traj, P).rows(7990, 100)               # past the end of the grid
        assert len(calls) == n + 1
        for r, ref in zip(tail, _per_range(orig, traj, 7990, 100, P)):
            np.testing.assert_array_equal(r, ref)
    finally:
        type(traj).sample = orig
    assert GridCache(_FailsAfter(0.5), P).rows(0, 100) is not None   # only the range is needed
    assert GridCache(_FailsAfter(0.5), P).rows(450, 100) is None


def test_grid_table_stops_at_the_run_horizon():
    """A run shorter than its trajectory tabulates its own grid only (the 2 s Stewart run of a
    9.5 s trajectory evaluated all of it: 28 of its 40 ms of start), with the rows of the whole
    table bit for bit; a later run with a longer horizon extends the kept table, a shorter one
    reuses it; a bad horizon is refused; the loop passes its duration."""
    from controller.loop import _grid_sampler

    traj = load_run(RUNS / "stewart_motion_direct.toml").trajectory
    P = 1e-3
    n_all = int(traj.duration_s / P) + 1
    whole = GridCache(traj, P)._table().copy()          # kept with the trajectory
    del traj.__dict__["_grid_tables"]
    short = _grid_sampler(traj, P, 2.0)
    assert isinstance(short, GridCache)
    calls = []
    orig = type(traj).sample
    type(traj).sample = lambda self, t: (calls.append(np.size(t)), orig(self, t))[1]
    try:
        rows = short.rows(0, 2001)
        assert calls == [2001]
        for k, r in enumerate(rows):
            np.testing.assert_array_equal(r, whole[:2001, k])
        for k in (0, 1234, 2000, 2001, 5000):            # past the horizon: blocks, same numbers
            for x, y in zip(short.sample(k * P), whole[k]):
                np.testing.assert_array_equal(x, y)
        GridCache(traj, P, horizon_s=1.0).rows(0, 1001)   # shorter: the kept table serves it
        assert calls.count(2001) == 1 and 1001 not in calls
        longer = GridCache(traj, P, horizon_s=5.0).rows(0, 5001)
        assert calls.count(5001) == 1
        np.testing.assert_array_equal(longer[0], whole[:5001, 0])
        GridCache(traj, P).rows(0, 10)                     # no horizon: the whole trajectory
        assert calls.count(n_all) == 1
        # a horizon whose cycle count floor(h / P) rounds one short (0.7 / 1e-3 = 699.99...):
        # the table has the loop's 701 rows (ControlLoop.n_planned), not 700
        del traj.__dict__["_grid_tables"]
        calls.clear()
        GridCache(traj, P, horizon_s=0.7).rows(0, 701)
        assert calls == [701], calls
    finally:
        type(traj).sample = orig
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(TrajectoryError):
            GridCache(traj, P, horizon_s=bad)


def test_grid_samples_from_the_table_equal_the_blocks():
    """GridCache.sample serves the whole run from the one table evaluation, with the numbers
    of the block evaluation (the path of a trajectory longer than the table), bit for bit;
    grid times past the end come from blocks as before."""
    for name in ("3rrr_circle_direct.toml", "seed003_2r.toml", "stewart_motion_direct.toml"):
        traj = load_run(RUNS / name).trajectory
        P = 1e-3
        n = int(traj.duration_s / P) + 1
        calls = []
        orig = type(traj).sample
        type(traj).sample = lambda self, t: (calls.append(np.size(t)), orig(self, t))[1]
        try:
            table = GridCache(traj, P)
            blocks = GridCache(traj, P, block=97)
            blocks._table = lambda: None             # as a trajectory too long for the table
            for k in range(n + 30):
                a, b = table.sample(k * P), blocks.sample(k * P)
                for x, y in zip(a, b):
                    np.testing.assert_array_equal(x, y)
        finally:
            type(traj).sample = orig
        assert calls.count(n) == 1                   # the table, once
        assert all(c in (n, 97, 256) for c in calls), set(calls)   # else blocks (97: the block
        assert calls.count(256) == 1                 # GridCache; 256: past the end of the table)


def _per_range(sample, traj, k, count, P):
    s = sample(traj, np.arange(k, k + count) * P)
    return s.pos, s.vel, s.acc


class _FailsAfter(Trajectory):
    """A trajectory whose evaluation raises beyond ``t_fail``."""

    def __init__(self, t_fail):
        self.t_fail = t_fail

    duration_s = 1.0
    dim = 2

    def _eval(self, t):
        if np.any(t > self.t_fail):
            raise TrajectoryError(f"cannot evaluate beyond {self.t_fail}")
        z = np.zeros((t.size, 2))
        return np.stack([t, -t], axis=1), z + 1.0, z, z


def test_grid_cache_raises_where_the_trajectory_raises():
    P = 1e-3
    base = _FailsAfter(0.1005)
    g = GridCache(base, P, block=64)
    for k in range(101):
        np.testing.assert_array_equal(g.sample(k * P).pos, [k * P, -k * P])
    with pytest.raises(TrajectoryError, match="beyond"):
        g.sample(101 * P)
    with pytest.raises(TrajectoryError):
        GridCache("x", P)
    seq = Sequence([Hold([1.0, 2.0], 0.5), Hold([1.0, 2.0], 0.25)])
    g2 = GridCache(seq, 0.01)
    assert g2.dim == 2 and g2.duration_s == 0.75
    assert isinstance(g2.sample(0.3), Sample)


def _safety_cases(sup, rng, n_cases):
    from types import SimpleNamespace as NS

    n = sup.n
    for i in range(n_cases):
        span = sup.q_max - sup.q_min
        q = sup.q_min + span * rng.uniform(-0.02, 1.02, n)
        qd = rng.normal(size=n) * sup.v_max * rng.choice([0.1, 0.6])
        tau = rng.normal(size=n) * sup.tau_max * rng.choice([0.2, 0.8])
        pos = rng.normal(size=3) * 1e-3
        err = rng.normal(size=3) * np.broadcast_to(sup.err_max, 3) * rng.choice([0.1, 0.5])
        fb = NS(fault=np.zeros(n, dtype=int), enabled=np.ones(n, dtype=bool), fresh=np.ones(n, dtype=bool))
        r = rng.uniform()
        if r < 0.03:
            q[rng.integers(n)] = np.nan
        elif r < 0.06:
            tau[rng.integers(n)] = np.inf
        elif r < 0.09:
            pos[0] = np.nan
        elif r < 0.12:
            fb.fresh[rng.integers(n)] = False
        elif r < 0.14:
            fb.fault[rng.integers(n)] = 7
        elif r < 0.16:
            fb.enabled[rng.integers(n)] = False
        elif r < 0.19:
            err[1] = np.nan
        ref = NS(pos=pos, vel=np.zeros(3), acc=np.zeros(3))
        yield i * 1e-3, NS(q=q, qd=qd), fb, ref, tau, err


def _run_safety(sup, cases, *, fast):
    import controller.safety as safety_mod

    sup._clean_path = fast
    full = [0]                          # cycles that went through the full path
    set_in = safety_mod._set_in

    def counted(bits, any_bits, bit):
        full[0] += bit == _rules.J_Q_NONFINITE        # its first call of a cycle
        return set_in(bits, any_bits, bit)
    safety_mod._set_in = counted
    out = []
    try:
        for t, state, fb, ref, tau, err in cases:
            sup.reset()
            sup._k = 1                      # not a singularity-check cycle
            cmd, ss = sup.check(t, state, fb, ref, tau, error=err)
            out.append((cmd.copy(), ss.code, ss.action, ss.saturated.copy(),
                        [(f.cause, f.joint) for f in ss.new_faults], sup._stale.copy(), sup.latched))
    finally:
        safety_mod._set_in = set_in
    clean = sum(o[1] == OK and not o[6] for o in out)   # OK and not latched (some by the full path)
    shortcut = len(cases) - full[0]
    if fast:
        assert len(cases) // 10 < shortcut <= clean       # the shortcut took a good share of them
    else:
        assert shortcut == 0
    return out


@pytest.mark.parametrize("err_max", [None, 0.01])
def test_safety_clean_path_equals_full_checks(err_max):
    import dataclasses

    spec = load_run(RUNS / "3rrr_circle_direct.toml")
    cfg = spec.safety if err_max is None else dataclasses.replace(spec.safety, tracking_error_max=err_max)
    X0 = np.asarray(spec.model.home_pose, dtype=float)
    cases = list(_safety_cases(SafetySupervisor(cfg, spec.model.limits, model=spec.model, pose0=X0),
                               np.random.default_rng(11), 600))
    a = _run_safety(SafetySupervisor(cfg, spec.model.limits, model=spec.model, pose0=X0), cases, fast=True)
    b = _run_safety(SafetySupervisor(cfg, spec.model.limits, model=spec.model, pose0=X0), cases, fast=False)
    codes = set()
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x[0], y[0])
        assert x[1:3] == y[1:3] and x[4] == y[4] and x[6] == y[6]
        np.testing.assert_array_equal(x[3], y[3])
        np.testing.assert_array_equal(x[5], y[5])
        codes.add(x[1])
    assert len(codes) >= 3           # clean, clipped/soft-limited and faulted cycles all occurred


def test_safety_clean_path_keeps_stale_counters_and_singularity_cadence():
    """A sequence of cycles (not reset in between): stale counting and the periodic singularity check."""
    from types import SimpleNamespace as NS

    spec = load_run(RUNS / "3rrr_circle_direct.toml")
    X0 = np.asarray(spec.model.home_pose, dtype=float)
    q0 = np.asarray(spec.model.inverse_kinematics(X0), dtype=float)
    res = []
    for fast in (True, False):
        sup = SafetySupervisor(spec.safety, spec.model.limits, model=spec.model, pose0=X0)
        sup._clean_path = fast
        log = []
        for k in range(40):
            fresh = np.ones(3, dtype=bool)
            if k in (5, 6, 12):
                fresh[1] = False
            fb = NS(fault=np.zeros(3, dtype=int), enabled=np.ones(3, dtype=bool), fresh=fresh)
            ref = NS(pos=X0, vel=np.zeros(3), acc=np.zeros(3))
            cmd, ss = sup.check(k * 1e-3, NS(q=q0 + 1e-4 * k, qd=np.full(3, 0.01)), fb, ref,
                                np.array([0.1, -0.2, 0.3]), error=np.zeros(3))
            log.append((cmd.tolist(), ss.code, sup._stale.tolist(), sup.last_margin, sup.latched))
        res.append(log)
    assert res[0] == res[1]
    assert not res[0][-1][-1] and np.isfinite(res[0][-1][3])


def _short_run(path, overrides, out, duration_s=0.4):
    r = build_run(load_run(path, overrides=overrides, duration_s=duration_s), out_dir=out)
    drv = r.driver
    res = r.execute()
    return res, np.load(Path(out) / "log.npy"), drv


#: the emulator thread's variant: the longest reply wait accepted (on the lock-step clock the
#: 0.25 s default only bounds how long a starved emulator thread may take to answer, in wall time;
#: a worker beside another can stall longer, and a reply counted lost would differ from inline)
THREAD = {"driver.emulator.serve": "thread", "driver.reply_timeout_s": TIMEOUT_MAX_S["reply_timeout_s"]}


def test_inline_emulator_serving_equals_the_emulator_thread(tmp_path):
    res_i, log_i, drv_i = _short_run(RUNS / "3rrr_circle.toml", {}, tmp_path / "inline")
    res_t, log_t, drv_t = _short_run(RUNS / "3rrr_circle.toml", THREAD, tmp_path / "thread")
    assert drv_i.hosts[0].inline and not drv_t.hosts[0].inline
    assert res_i.status == res_t.status == "completed"
    assert res_i.n_cycles == res_t.n_cycles == 402  # 401 control cycles + the final disable
    for name in log_i.dtype.names:
        if name in ("compute_s", "lateness_s"):
            continue
        np.testing.assert_array_equal(log_i[name], log_t[name], err_msg=name)
    assert drv_i.hosts[0].frames_in == drv_t.hosts[0].frames_in


def test_inline_emulator_serving_equals_the_emulator_thread_odrive(tmp_path):
    path = RUNS / "stewart_motion.toml"
    res_i, log_i, drv_i = _short_run(path, {}, tmp_path / "inline", 0.05)
    res_t, log_t, drv_t = _short_run(path, THREAD, tmp_path / "thread", 0.05)
    assert drv_i.hosts[0].inline and not drv_t.hosts[0].inline
    assert res_i.status == res_t.status and res_i.n_cycles == res_t.n_cycles > 40
    for name in log_i.dtype.names:
        if name not in ("compute_s", "lateness_s"):
            np.testing.assert_array_equal(log_i[name], log_t[name], err_msg=name)


def test_inline_serving_needs_zero_latency_and_reports_host_errors():
    from dynamics.config import Section
    from dynamics.errors import ConfigError
    from drivers.registry import build_driver

    model = load_model(ROBOT)
    q0 = np.asarray(model.inverse_kinematics(model.home_pose), dtype=float)
    joints = [{"can_id": i + 1, "model": "AK80-9"} for i in range(3)]
    cfg = {"type": "sim_mit_can", "joints": joints, "plant": {"q0": q0.tolist()},
           "emulator": {"serve": "inline", "reply_latency_s": 0.001}}
    with pytest.raises(ConfigError, match="serve"):
        build_driver(Section(cfg, "t.toml"), now=lambda: 0.0, model=model)
    cfg["emulator"] = {"serve": "inline"}
    clock = [0.0]
    drv = build_driver(Section(cfg, "t.toml"), now=lambda: clock[0], model=model)
    try:
        host = drv.hosts[0]
        assert host.inline and host.running
        fb = drv.enable()
        assert fb.fresh.all()
        drv.sync()
        # a failing plant stops the serving like a dead thread; the error surfaces in check()
        host._error = None
        drv.plant._q[:] = np.nan
        clock[0] = 0.001
        host.pump()
        with pytest.raises(TorqueloopError):
            host.check()
        assert not host.running
    finally:
        drv.plant._q[:] = q0
        drv.close()


def test_local_bus_pair_delivers_across_threads():
    import threading

    import can

    from drivers.sim.emulators import LocalBus

    a, b = LocalBus.pair("t")
    assert b.recv(0.0) is None and b.recv(0.01) is None
    a.send(can.Message(arbitration_id=5, data=b"\x01\x02", is_extended_id=False))
    m = b.recv(0.0)
    assert m.arbitration_id == 5 and bytes(m.data) == b"\x01\x02" and m.is_rx and m.channel == "t"
    timer = threading.Timer(0.02, lambda: a.send(can.Message(arbitration_id=6, data=b"", is_extended_id=False)))
    timer.start()
    m = b.recv(2.0)                       # blocks until the other thread sends
    timer.join()
    assert m is not None and m.arbitration_id == 6
    b.shutdown()
    a.send(can.Message(arbitration_id=7, data=b""))   # peer closed: dropped
    with pytest.raises(can.CanOperationError):
        b.recv(0.0)
    a.shutdown()


@pytest.mark.parametrize("robot", ["seed000_arm.toml", "arm6_demo.toml"])
@pytest.mark.parametrize("kw", [
    dict(current_lag_s=4e-4, viscous=0.3, coulomb=0.5),
    dict(current_lag_s=0.0, viscous=0.0, coulomb=0.0),
    dict(current_lag_s=1e-3, viscous=0.5, coulomb=2.0, torque_limit_nm=5.0),  # sticking + saturation
    dict(substeps=3, coulomb=0.2),
])
def test_compiled_serial_plant_step_equals_python_step(robot, kw):
    """Serial chains: the compiled RK4 step (drivers/sim/_plant_kernels.serial_advance) gives the
    Python step's result (lag, viscous + Coulomb incl. sticking, drive PD, saturation)."""
    model = load_model(ROOT / "hil_configs" / "robots" / robot)
    n = model.dof
    q0 = np.linspace(0.1, 0.5, n)
    rng = np.random.default_rng(11)
    g = np.asarray(model.gravity(q0), dtype=float)
    cmds = []
    for k in range(150):
        tau = g + 2.0 * np.sin(0.05 * k + np.arange(n)) + 0.2 * rng.normal(size=n)
        if 50 <= k < 90:   # drive-side PD for a while
            cmds.append((tau, np.full(n, 20.0), np.full(n, 0.5), q0 + 0.1, np.zeros(n)))
        else:
            cmds.append((tau,))

    def drive(p):
        out, t = [], p.t_s
        for c in cmds:
            p.set_command(*c)
            t += 1e-3
            p.advance_to(t)
            st = p.state
            out.append(np.concatenate([st.q, st.qd, p.applied_torque_nm]))
        return np.array(out)

    fast = SimulatedPlant(model.scaled(1.1), q0=q0, **kw)
    slow = SimulatedPlant(model.scaled(1.1), q0=q0, **kw)
    assert fast._kernel is not None
    slow._kernel = None
    a, b = drive(fast), drive(slow)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    assert np.ptp(a[:, :n], axis=0).max() > 5e-3          # it did move


def test_odrive_fields_channel_equals_the_message_path(tmp_path):
    """The inline ODrive run hands its frames to the emulator as fields (no python-can message
    per request and reply); the same run with a fault injector that injects nothing wraps the
    buses, so it takes the message path: the logs are equal, and so are the frames counted."""
    path = RUNS / "stewart_motion.toml"
    res_f, log_f, drv_f = _short_run(path, {}, tmp_path / "fields", 0.05)
    res_m, log_m, drv_m = _short_run(path, {"driver.faults": {"seed": 1}}, tmp_path / "messages", 0.05)
    assert all(t._fields_bus is not None for t in drv_f.inner.transports)
    assert drv_f.hosts[0]._fields_buses
    assert all(t._fields_bus is None for t in drv_m.inner.transports)     # a wrapped bus: messages
    assert res_f.status == res_m.status == "completed" and res_f.n_cycles == res_m.n_cycles > 40
    for name in log_f.dtype.names:
        if name not in ("compute_s", "lateness_s"):
            np.testing.assert_array_equal(log_f[name], log_m[name], err_msg=name)
    assert drv_f.hosts[0].frames_in == drv_m.hosts[0].frames_in
    assert drv_f.hosts[0].frames_out == drv_m.hosts[0].frames_out


def test_mit_inline_run_keeps_the_message_path(tmp_path):
    """A device that does not answer fields (the MIT emulator) is served from messages on the
    same InlineBus: the transport hands the bus fields, the bus makes the messages."""
    res, _, drv = _short_run(RUNS / "3rrr_circle.toml", {}, tmp_path / "mit", 0.05)
    assert res.status == "completed"
    assert all(t._fields_bus is not None for t in drv.inner.transports)
    assert not drv.hosts[0]._fields_buses


@pytest.mark.parametrize("firmware", ["0.6", "0.5"])
def test_odrive_on_fields_answers_as_on_frame(firmware):
    """Every frame the emulator may see, given as fields (on_fields) and as a message (on_frame)
    to two identical emulators: the same answers (ids, payloads) and the same states."""
    import can

    from drivers.base import JointMapping
    from drivers.codecs import odrive as odc
    from drivers.sim.odrive_emulator import OdriveAxisConfig, OdriveEmulator
    from dynamics.toy_models import PlanarTwoLink

    def make():
        plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2], encoder_counts_per_rev=4096)
        emu = OdriveEmulator([OdriveAxisConfig(3, 0, JointMapping(gear_ratio=9.0, sign=-1)),
                              OdriveAxisConfig(4, 1, watchdog_timeout_s=0.05, iq_period_s=0.002)],
                             firmware=firmware)
        emu.bind(plant)
        return plant, emu

    (pa, a), (pb, b) = make(), make()
    C = odc.Cmd
    frames = [(odc.arbitration_id(3, C.SET_AXIS_STATE), odc.encode_set_axis_state(odc.AxisState.CLOSED_LOOP_CONTROL), None),
              (odc.arbitration_id(4, C.SET_AXIS_STATE), odc.encode_set_axis_state(odc.AxisState.CLOSED_LOOP_CONTROL), None),
              (odc.arbitration_id(3, C.SET_INPUT_TORQUE), odc.encode_set_input_torque(0.3), None),
              (odc.arbitration_id(4, C.SET_INPUT_TORQUE), odc.encode_set_input_torque(-1e30), None),
              (odc.arbitration_id(3, C.SET_INPUT_TORQUE), b"\x00\x00", None),              # cut short: ignored
              (odc.arbitration_id(3, C.SET_INPUT_TORQUE), b"", None),
              (odc.arbitration_id(3, C.GET_ENCODER_ESTIMATES), b"", 8),
              (odc.arbitration_id(4, C.GET_ENCODER_ESTIMATES), b"", 8),
              (odc.arbitration_id(4, C.GET_ENCODER_ESTIMATES), b"", None),                  # 0.5: a request
              (odc.arbitration_id(3, C.GET_IQ), b"", 8),
              (odc.arbitration_id(3, C.HEARTBEAT), b"", 8),
              (odc.arbitration_id(3, C.SET_LIMITS), odc.encode_set_limits(2.0, 5.0), None),
              (odc.arbitration_id(3, C.SET_INPUT_TORQUE), odc.encode_set_input_torque(0.7), None),
              (odc.arbitration_id(9, C.SET_INPUT_TORQUE), odc.encode_set_input_torque(0.7), None),  # no such node
              (odc.arbitration_id(4, 0x1F), b"\x01", None),
              (odc.arbitration_id(3, C.ESTOP), b"", None),
              (odc.arbitration_id(3, C.GET_ENCODER_ESTIMATES), b"", 8)]
    t = 0.0
    for k in range(3):
        for arb, data, dlc in frames:
            t += 0.0007
            pa.advance_to(t)
            pb.advance_to(t)
            if dlc is None:
                msg = can.Message(arbitration_id=arb, data=data, is_extended_id=False)
            else:
                msg = can.Message(arbitration_id=arb, is_extended_id=False, is_remote_frame=True, dlc=dlc)
            ra = a.on_frame(msg, t)
            rb = b.on_fields(arb, data, dlc, t)
            assert (ra is None) == (rb is None), (arb, data, dlc)
            if ra is not None:
                assert [(m.arbitration_id, bytes(m.data)) for m in ra] == rb, (arb, data, dlc)
                assert all(not m.is_extended_id and not m.is_remote_frame for m in ra)
            assert a.next_timer_s() == b.next_timer_s()
            te = a.next_timer_s()
            if te <= t:
                ta = a.on_timer(te)
                assert [(m.arbitration_id, bytes(m.data)) for m in ta] == b.on_timer_fields(te)
        assert [(n, a.axis_state(n), a.axis_error(n), a.commands_applied(n)) for n in a.node_ids] == \
               [(n, b.axis_state(n), b.axis_error(n), b.commands_applied(n)) for n in b.node_ids]
        np.testing.assert_array_equal(pa._cmd, pb._cmd)
        assert a.frames_ignored == b.frames_ignored > 0


def test_inline_bus_frames_queued_as_fields_read_as_messages():
    """A device's frame queued as fields (_InlineEnd.deliver) is, read by recv(), the message
    _InlineEnd.send would have queued; read by recv_fields, its fields."""
    import can

    from drivers.sim.emulators import InlineBus, _msg
    from drivers.transport import message_fields

    bus = InlineBus("t")
    end = bus.device_end
    end.send(_msg(0x123, b"\x01\x02"))
    end.deliver(0x123, b"\x01\x02")
    want = bus.recv(0.0)
    got = bus.recv(0.0)
    for slot in ("arbitration_id", "is_extended_id", "is_remote_frame", "is_error_frame", "channel", "dlc",
                 "is_fd", "is_rx", "bitrate_switch", "error_state_indicator"):
        assert getattr(got, slot) == getattr(want, slot), slot
    assert bytes(got.data) == bytes(want.data) and got.timestamp >= want.timestamp > 0
    end.deliver(0x7, b"\x09")
    f = bus.recv_fields(0.0)
    assert f[0] == 0x7 and f[1] == b"\x09" and f[3:] == (False, False, False, None)
    end.send(_msg(0x8, b""))
    f = bus.recv_fields(0.0)
    assert f == message_fields(can.Message(f[2], 0x8, False, False, False, "t", None, b"", False, True))
    assert bus.recv_fields(0.0) is None
    bus.shutdown()


def test_plant_step_min_changes_nothing_on_the_lockstep_clock(tmp_path):
    """``[driver.emulator] plant_step_min_s``: on a lock-step clock a cycle's frames come at one loop
    time and the cycles a period apart, so a step below the period gives the default's log."""
    path = RUNS / "stewart_motion.toml"
    res_a, log_a, _ = _short_run(path, {}, tmp_path / "a", 0.05)
    res_b, log_b, drv_b = _short_run(path, {"driver.emulator.plant_step_min_s": 2.5e-4}, tmp_path / "b", 0.05)
    assert drv_b.hosts[0]._plant_step_min == 2.5e-4
    assert res_a.status == res_b.status == "completed" and res_a.n_cycles == res_b.n_cycles
    for name in log_a.dtype.names:
        if name not in ("compute_s", "lateness_s"):
            np.testing.assert_array_equal(log_a[name], log_b[name], err_msg=name)


def test_plant_step_min_leaves_the_plant_behind_by_less_than_it():
    """A frame less than plant_step_min_s after the plant's time is served on the plant where it is;
    one at or past it brings the plant to the clock; timed events still at their due time; a bad
    value is refused."""
    from drivers.codecs import odrive as odc
    from drivers.sim.emulators import EmulatorHost, InlineBus
    from drivers.sim.odrive_emulator import OdriveAxisConfig, OdriveEmulator
    from dynamics.errors import ConfigError
    from dynamics.toy_models import PlanarTwoLink

    plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2])
    emu = OdriveEmulator([OdriveAxisConfig(3, 0, heartbeat_period_s=None, encoder_period_s=0.01)])
    clock = [0.0]
    bus = InlineBus("t")
    with pytest.raises(ConfigError, match="plant_step_min_s"):
        EmulatorHost(bus.device_end, [emu], plant, lambda: clock[0], serve="inline", plant_step_min_s=-1.0)
    host = EmulatorHost(bus.device_end, [emu], plant, lambda: clock[0], serve="inline", plant_step_min_s=2e-4)
    bus.host = host
    rtr = (odc.arbitration_id(3, odc.Cmd.GET_ENCODER_ESTIMATES), b"", 8)
    bus.send_fields([rtr])
    assert plant.t_s == 0.0 and bus.recv_fields(0.0) is not None          # the broadcast due at 0
    while bus.recv_fields(0.0) is not None:
        pass
    # the broadcast due at 0.01 is sent at its time, the plant there; 0.0101 is less than the
    # step after it
    for t, t_plant, frames in ((1.5e-4, 0.0, 1), (1.99e-4, 0.0, 1), (2.5e-4, 2.5e-4, 1), (3e-4, 2.5e-4, 1),
                               (0.0101, 0.01, 2), (0.0105, 0.0105, 1)):
        clock[0] = t
        bus.send_fields([rtr])
        assert plant.t_s == pytest.approx(t_plant, abs=1e-12), t
        got = []
        while (f := bus.recv_fields(0.0)) is not None:
            got.append(f)
        assert len(got) == frames, t
    host.close()
    bus.shutdown()


def test_inline_receive_ends_when_the_loop_clock_does_not_move(monkeypatch):
    """A receive with a time out on an inline bus: on a frozen (lock-step) loop clock nothing can
    come, so it returns None after one wait instead of sleeping the time out away; on a clock that
    moves, the broadcast falling due meanwhile is received; a host that does not serve: the whole
    time out is waited, as on a bus nobody answers."""
    import time as _time

    from drivers.codecs import odrive as odc
    from drivers.sim.emulators import EmulatorHost, InlineBus
    from drivers.sim.odrive_emulator import OdriveAxisConfig, OdriveEmulator
    from dynamics.toy_models import PlanarTwoLink

    plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2])
    emu = OdriveEmulator([OdriveAxisConfig(3, 0, heartbeat_period_s=None, encoder_period_s=0.002)])
    start = [None]          # None: a lock-step clock at 0; else the wall time it counts from

    def now():
        return 0.0 if start[0] is None else _time.monotonic() - start[0]
    bus = InlineBus("t")
    host = EmulatorHost(bus.device_end, [emu], plant, now, serve="inline")
    bus.host = host
    while bus.recv(0.0) is not None:          # the broadcast due at 0
        pass
    slept = []
    real_sleep = _time.sleep
    monkeypatch.setattr(_time, "sleep", lambda s: (slept.append(s), real_sleep(s))[1])
    assert bus.recv(0.5) is None
    # one wait (the next event's delay, 2 ms), not 0.5 s (the sleeps counted, not the time a
    # loaded machine took)
    assert len(slept) == 1 and slept[0] <= 0.002 + 1e-9, slept
    start[0] = _time.monotonic()              # a wall clock from now on
    m = bus.recv(0.5)
    assert m is not None and m.arbitration_id == odc.arbitration_id(3, odc.Cmd.GET_ENCODER_ESTIMATES)
    host.close()
    t0 = _time.monotonic()
    assert bus.recv(0.05) is None             # not served: the time out is waited
    assert _time.monotonic() - t0 >= 0.045
    bus.shutdown()


@pytest.mark.parametrize("clock_kind", ["lockstep", "wall"])
def test_an_inline_bus_on_the_lockstep_clock_does_not_sleep_a_wait_out(monkeypatch, clock_kind):
    """On a clock that stands still while the driver waits, devices served inline cannot answer
    during a wait (the MIT driver's 50 ms listen before its first frame was slept in vain, in
    every offline run): a receive with a time out returns at once, for one bus and for several
    (drivers.transport.recv_any_fields); on the wall clock the wait is still waited."""
    import time

    from controller.clock import LockstepClock, WallClock
    from drivers.sim.emulators import EmulatorHost, InlineBus
    from drivers.sim.odrive_emulator import OdriveAxisConfig, OdriveEmulator
    from drivers.transport import CanTransport, recv_any_fields
    from dynamics.toy_models import PlanarTwoLink

    clock = LockstepClock() if clock_kind == "lockstep" else WallClock()
    buses, hosts = [], []
    for k in range(2):
        plant = SimulatedPlant(PlanarTwoLink(g=0.0), q0=[0.1, -0.2])
        bus = InlineBus(f"t{k}")
        emu = OdriveEmulator([OdriveAxisConfig(3, 0, heartbeat_period_s=None, encoder_period_s=None)])
        hosts.append(EmulatorHost(bus.device_end, [emu], plant, clock.now, serve="inline"))
        bus.host = hosts[-1]
        buses.append(bus)
    trs = [CanTransport.from_bus(b, name=b.channel_name) for b in buses]
    frozen = clock_kind == "lockstep"
    assert all(h.frozen_clock is frozen for h in hosts)
    assert all(t.wait_is_futile is frozen for t in trs)
    slept = []
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: (slept.append(s), real_sleep(min(s, 0.001)))[1])
    assert trs[0].recv_fields(0.05) is None
    assert recv_any_fields(trs, 0.01) is None
    assert (slept == []) is frozen, slept
    for h in hosts:
        h.close()
    for b in buses:
        b.shutdown()
