"""The Gough-Stewart platform's compiled task-space laws (controller._stewart_law_kernels) and
its compiled offline loop (controller._fast_loop_stewart).

* the compiled laws against the same laws written with numpy (the Python path other models
  take): equal to rounding on random states, the pose and the task error to the last bit;
  declined steps take the numpy path and raise the model's own errors;
* the compiled loop against the Python loop: bit-identical logs, metrics, faults and results
  (whole run; a fault, a singularity or a clip handing the run back to Python part-way;
  the controller's saturation with conditional integration inside compiled segments);
* the runs of other robots do not load the Stewart kernels.

Parity tests: the numpy laws and the Python loop are the product's other paths. The
independent checks: ``test_ctrl_laws.py::test_task_ct_on_real_stewart_tracks_and_fixes_large_orientation_error``
(tracking, second-order decay of a large orientation error) and the Stewart model against
its independent references in ``test_stewart_fastpath.py::test_fast_matches_independent_references``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.laws import Ref, Saturation, State, TaskComputedTorque, TaskPDGravity
from dynamics import load_model
from dynamics.errors import TorqueloopError
from test_fast_loop import _assert_same, _compiled_cycles   # the comparison of two runs
from test_fast_loop_serial import _run                        # a shipped run with overrides

ROOT = Path(__file__).resolve().parents[1]
ROBOT = ROOT / "hil_configs" / "robots" / "stewart.toml"
RUN = "stewart_motion_direct.toml"          # task computed torque with integral action
TASK_PD = {"controller": {"kind": "task_pd_gravity", "wn_rad_s": 30.0, "zeta": 1.0}}


@pytest.fixture(scope="module")
def model():
    return load_model(ROBOT)


def _pair(cls, *args, **kw):
    """The same law twice: compiled, and with its compiled form disabled (the numpy law)."""
    a, b = cls(*args, **kw), cls(*args, **kw)
    b._compiled_args = lambda: None
    assert a.compiled_args["kind"] == "stewart" and b.compiled_args is None
    return a, b


def _random_state(model, rng):
    """A pose near home, its leg lengths, leg rates and a task reference near the pose."""
    X = np.asarray(model.home_pose, float) + rng.normal(0, [0.02, 0.02, 0.02, 0.05, 0.05, 0.05])
    q = model.inverse_kinematics(X)
    ref = Ref(X + rng.normal(0, 0.003, 6), rng.normal(0, 0.1, 6), rng.normal(0, 1.0, 6))
    return X, State(0.0, q, rng.normal(0, 0.1, 6)), ref


@pytest.mark.parametrize("cls", [TaskComputedTorque, TaskPDGravity])
def test_compiled_stewart_laws_match_numpy_laws(model, cls):
    """Friction none / measured, with and without a saturation that clips part of the steps,
    with and without integral action (conditional integration while saturated)."""
    rng = np.random.default_rng(7)
    kis = (None, 4000.0) if cls is TaskComputedTorque else (None,)
    saturated = 0
    for friction in ("none", "measured"):
        for sat in (None, Saturation(np.full(6, 100.0))):
            for ki in kis:
                extra = {} if ki is None else {"ki": ki, "integral_limit": 0.002}
                a, b = _pair(cls, model, kp=900.0, kd=60.0, saturation=sat, friction=friction, **extra)
                for i in range(25):
                    X, state, ref = _random_state(model, rng)
                    t = 0.001 * i
                    state = State(t, state.q, state.qd)
                    ta, tb = a.compute(t, ref, state), b.compute(t, ref, state)
                    np.testing.assert_allclose(ta, tb, rtol=1e-13, atol=1e-11)
                    np.testing.assert_array_equal(a.last_error, b.last_error)
                    np.testing.assert_array_equal(a.pose, b.pose)
                    np.testing.assert_allclose(a.pose, X, atol=1e-10)
                    np.testing.assert_array_equal(a.last_saturated, b.last_saturated)
                    saturated += int(a.last_saturated.any())
                    if ki is not None:
                        np.testing.assert_allclose(a.integral, b.integral, rtol=1e-13, atol=1e-16)
                        assert a._int.t_last == b._int.t_last
    assert saturated > 10                     # the saturated branch ran


def test_other_conventions_stay_numpy(model):
    """A rotation other than the model's own has no compiled form; neither has a replaced one."""
    assert TaskComputedTorque(model, kp=900.0, kd=60.0, rotation="xyz").compiled_args is None
    law = TaskPDGravity(model, kp=900.0, kd=60.0)
    assert law.compiled_args is not None
    law.rotation = lambda angles: np.eye(3)
    assert law.compiled_args is None


def _outcome(law, state, ref):
    try:
        return "value", np.isnan(law.compute(state.t_s, ref, state)).tolist()
    except TorqueloopError as err:
        return "error", type(err).__name__, str(err)


def test_declined_steps_take_the_numpy_path_and_raise_the_models_errors(model):
    """NaN inputs, leg lengths no pose has, the Euler-angle singularity (cos beta = 0): the
    compiled law declines and the numpy law reports what it reports without a compiled form."""
    home = np.asarray(model.home_pose, float)
    q0 = model.inverse_kinematics(home)
    zero = np.zeros(6)
    nan6 = np.array([0.0, np.nan, 0.0, 0.0, 0.0, 0.0])
    gimbal = home + np.array([0.0, 0.0, 0.0, 0.0, np.pi / 2, 0.0])
    cases = [
        (State(0.0, q0 + nan6, zero), Ref(home, zero, zero), {}),
        (State(0.0, q0, nan6), Ref(home, zero, zero), {}),
        (State(0.0, q0, zero), Ref(home + nan6, zero, zero), {}),
        (State(0.0, np.full(6, 0.05), zero), Ref(home, zero, zero), {}),          # no pose
        (State(0.0, model.leg_lengths(gimbal), zero), Ref(home, zero, zero), {"pose0": gimbal}),
    ]
    for cls in (TaskComputedTorque, TaskPDGravity):
        for state, ref, kw in cases:
            a, b = _pair(cls, model, 900.0, 60.0, **kw)
            oa, ob = _outcome(a, state, ref), _outcome(b, state, ref)
            assert oa == ob, (cls.__name__, oa, ob)
    assert _outcome(TaskComputedTorque(model, 900.0, 60.0), cases[3][0], cases[3][1])[1] == "ConvergenceError"


def _both(tmp_path, overrides, name="run", config=RUN):
    """The run through the Python loop and through the compiled loop; asserts they agree."""
    py = _run(tmp_path, config, False, overrides, name)
    fast = _run(tmp_path, config, True, overrides, name)
    _assert_same(py, fast)
    assert _compiled_cycles(py[0]) == 0
    return py, fast


@pytest.mark.parametrize("overrides", [{}, {**TASK_PD, "loop.duration_s": 3.0}])
def test_runs_are_bit_identical(tmp_path, overrides):
    """The shipped run, whole (singularity check every 20 cycles), and task PD + gravity."""
    py, fast = _both(tmp_path, overrides)
    assert py[0].status == "completed"
    assert _compiled_cycles(fast[0]) > 0.95 * fast[0].n_cycles


@pytest.mark.parametrize("overrides, cause", [
    ({"safety.tracking_error_max": [5e-4, 5e-4, 5e-4, 0.05, 0.05, 0.05]}, "tracking_error"),   # ~0.2 s
    ({"safety.singularity_margin_min": 0.33}, "singularity"),        # the margin goes 0.355 -> 0.31
    ({**TASK_PD, "safety.velocity_max": 0.2}, "velocity_limit"),
])
def test_fault_hands_back_to_python_identically(tmp_path, overrides, cause):
    py, fast = _both(tmp_path, {"loop.duration_s": 6.0, **overrides}, cause)
    assert py[0].status == "fault" and py[0].faults[0].cause == cause
    assert _compiled_cycles(fast[0]) > 50


def test_clipping_cycles_identical(tmp_path):
    """A safety force limit below the peaks: since the law saturates at the effective limit
    (drive capability), the limit acts in the law: commands at it in some cycles, both loops
    the same to the bit."""
    py, fast = _both(tmp_path, {"loop.duration_s": 3.0, "safety.torque_max": 105.0}, "clip")
    assert np.any(np.abs(py[1]["tau_cmd"]) >= 105.0 * (1 - 1e-12)), "the limit never acted"
    assert _compiled_cycles(fast[0]) > 100


def test_saturation_and_integrator_identical(tmp_path):
    """The controller's own saturation below the peaks with integral action: the integrator
    freezes (conditional integration) on saturated cycles inside compiled segments."""
    from controller.app.run import build_run, load_run
    from controller.telemetry import read_log

    out = []
    for compiled in (False, True):
        spec = load_run(ROOT / "hil_configs" / "runs" / RUN,
                        overrides={"loop.duration_s": 3.0, "safety.tracking_error_max": 0.05})
        run = build_run(spec, out_dir=tmp_path / f"sat-{compiled}")
        run.loop.compiled = compiled
        run.loop.controller.saturation = Saturation(np.full(6, 104.0))
        res = run.execute()
        out.append((res, read_log(tmp_path / f"sat-{compiled}")))
    _assert_same(*out)
    (py, log), (fast, _) = out
    assert py.status == "completed"
    assert np.mean(np.any(np.abs(log["tau_ctrl"]) == 104.0, axis=1)) > 0.05     # saturated cycles
    assert _compiled_cycles(fast) > 0.95 * fast.n_cycles


def test_other_robots_do_not_load_the_stewart_kernels():
    """A 3RRR run through the compiled loop (model, simulated plant, laws, segments) imports
    none of the Stewart modules (the Stewart kernels take ~0.3 s to load)."""
    code = ("import sys; from controller.app.run import build_run, load_run; "
            "r = build_run(load_run(sys.argv[1], overrides={'loop.duration_s': 0.2}), out_dir=sys.argv[2]); "
            "res = r.execute(); assert res.compiled_cycles > 0, res.messages; "
            "print(sorted(m for m in sys.modules if 'stewart' in m))")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([sys.executable, "-c", code, str(ROOT / "hil_configs" / "runs" / "3rrr_circle_direct.toml"),
                              str(Path(d) / "o")], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("robot_run", [RUN, "3rrr_circle_direct.toml"])
def test_runs_without_a_singularity_check_are_compiled(tmp_path, robot_run):
    """Safety without ``singularity_margin_min`` (the default: no singularity check) on a
    parallel robot: the segment is still typed with the check's argument placeholders of that
    robot (a user's Stewart run with default safety failed to compile), and equals the Python loop."""
    import tomli_w

    from dynamics.config import read_toml

    runs = ROOT / "hil_configs" / "runs"
    data = read_toml(runs / robot_run)
    data["robot"]["file"] = str((runs / data["robot"]["file"]).resolve())
    for key in ("singularity_margin_min", "singularity_every", "singularity_horizon_s"):
        data["safety"].pop(key, None)
    data["loop"]["duration_s"] = 1.5
    cfg = tmp_path / f"nosing-{robot_run}"
    cfg.write_bytes(tomli_w.dumps(data).encode())
    py, fast = _both(tmp_path, None, "nosing", config=cfg)
    assert py[0].status == "completed"
    assert _compiled_cycles(fast[0]) > 0.95 * fast[0].n_cycles


def test_a_segment_numba_cannot_compile_leaves_the_run_to_python(tmp_path, monkeypatch):
    """A segment numba cannot type (as the Stewart run without a singularity check could not):
    the run goes on in the Python loop with the same results, and its messages say why."""
    from controller import compiled

    orig = compiled.CompiledCycles.for_loop.__func__

    def broken(cls, loop, traj, estimator):
        fast, why = orig(cls, loop, traj, estimator)
        fast._Ps = np.zeros((0, 0, 0))          # no segment takes a 3-D parameter array
        return fast, why

    overrides = {"loop.duration_s": 1.0}
    py = _run(tmp_path, RUN, False, overrides, "py")
    monkeypatch.setattr(compiled.CompiledCycles, "for_loop", classmethod(broken))
    fast = _run(tmp_path, RUN, True, overrides, "broken")
    _assert_same(py, fast)
    assert fast[0].status == "completed" and _compiled_cycles(fast[0]) == 0
    assert any("compiled offline loop unavailable" in m and "TypingError" in m for m in fast[0].messages)
