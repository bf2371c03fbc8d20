"""The compiled offline loop (controller.compiled / controller._fast_loop) against the Python loop.

The compiled loop runs the clean cycles of a lock-step run with the in-process plant; every
result must equal the Python loop's to the last bit (log, metrics, faults, status), also when
a fault, a clip or a stop reaction hands the run back to Python part-way.  The compiled law is
also checked against the law written with numpy (the Python path other models take).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from controller.telemetry import read_log

ROOT = Path(__file__).resolve().parents[1]
DIRECT = ROOT / "hil_configs" / "runs" / "3rrr_circle_direct.toml"


def _run(tmp_path, compiled, overrides=None, name="run"):
    from controller.app.run import build_run, load_run

    spec = load_run(DIRECT, overrides=overrides)
    out = tmp_path / f"{name}-{compiled}"
    run = build_run(spec, out_dir=out)
    run.loop.compiled = compiled
    res = run.execute()
    return res, read_log(out)


def _assert_same(a, b):
    (ra, la), (rb, lb) = a, b
    assert ra.status == rb.status
    assert ra.n_cycles == rb.n_cycles
    assert [(f.t_s, f.cause, f.joint, f.message) for f in ra.faults] == \
        [(f.t_s, f.cause, f.joint, f.message) for f in rb.faults]
    assert ra.metrics == rb.metrics
    assert la.dtype == lb.dtype and la.shape == lb.shape
    for name in la.dtype.names:
        if name == "compute_s":      # wall time: a compiled cycle logs its segment's mean
            continue
        assert np.array_equal(la[name], lb[name], equal_nan=la[name].dtype.kind == "f"), name


def _compiled_cycles(res) -> int:
    for m in res.messages:
        if m.startswith("compiled offline loop:"):
            return int(m.split(":")[1].split()[0])
    return 0


def test_shipped_direct_run_is_bit_identical(tmp_path):
    over = {"loop.duration_s": 2.5}
    py = _run(tmp_path, False, over)
    fast = _run(tmp_path, True, over)
    _assert_same(py, fast)
    assert py[0].status == "completed"
    assert _compiled_cycles(py[0]) == 0
    # everything but the brake-release cycles at the start ran compiled
    assert _compiled_cycles(fast[0]) > 0.95 * fast[0].n_cycles


@pytest.mark.parametrize("overrides, cause", [
    ({"safety.tracking_error_max": [1.2e-4, 1.2e-4, 0.1]}, "tracking_error"),   # at 78 ms
    ({"safety.singularity_margin_min": 0.74}, "singularity"),                   # predicted, at 1.93 s
    ({"safety.velocity_max": 0.3}, "velocity_limit"),                           # at 1.53 s
])
def test_fault_hands_back_to_python_identically(tmp_path, overrides, cause):
    """A fault found part-way through a compiled segment: the Python loop runs that cycle
    (records the fault, brakes, disables) with exactly the state it would have had."""
    over = {"loop.duration_s": 3.0, **overrides}
    py = _run(tmp_path, False, over, cause)
    fast = _run(tmp_path, True, over, cause)
    _assert_same(py, fast)
    assert py[0].status == "fault" and py[0].faults[0].cause == cause
    assert _compiled_cycles(fast[0]) > 50


def test_clipping_and_integrator_cycles_identical(tmp_path):
    """Controller saturation with conditional integration and safety clipping (a torque limit
    below the controller's): cycles that clip go through Python, the others compiled."""
    over = {"loop.duration_s": 2.0, "controller.wn_rad_s": 60.0, "safety.torque_max": [0.15, 0.15, 0.15]}
    py = _run(tmp_path, False, over, "clip")
    fast = _run(tmp_path, True, over, "clip")
    _assert_same(py, fast)
    assert np.any(py[1]["sat"])


def test_integral_action_identical(tmp_path):
    from controller.clock import LockstepClock
    from controller.laws import Saturation, TaskComputedTorque
    from controller.loop import ControlLoop
    from controller.safety import SafetyConfig, SafetySupervisor
    from controller.telemetry import TelemetryWriter
    from drivers.sim.direct import DirectPlantDriver
    from drivers.sim.plant import SimulatedPlant
    from dynamics import load_model as load_robot
    from trajectories.presets import preset

    model = load_robot(ROOT / "hil_configs" / "robots" / "3rrr_horizontal.toml")
    traj = preset("rrr_circle", model, radius_m=0.04, turns=1.0, duration_s=2.0, phi_amplitude=0.1,
                  approach_s=0.5).task
    logs = []
    for compiled in (False, True):
        clock = LockstepClock()
        plant = SimulatedPlant(model.scaled(1.2), q0=model.inverse_kinematics(traj.sample(0.0).pos),
                               coulomb=0.05, viscous=0.02, current_lag_s=3e-4, encoder_counts_per_rev=8192)
        drv = DirectPlantDriver(plant, now=clock.now)
        ctrl = TaskComputedTorque(model, kp=1600.0, kd=80.0, ki=4000.0, integral_limit=[0.01, 0.01, 0.05],
                                  saturation=Saturation(model.limits.torque_max * 0.6), friction="measured")
        safety = SafetySupervisor(SafetyConfig(), model.limits, model=model)
        tel = TelemetryWriter(tmp_path / f"ki-{compiled}", 3, 3)
        res = ControlLoop(drv, ctrl, traj, safety, clock, period_s=1e-3, telemetry=tel, handle_signals=False,
                          compiled=compiled).run()
        logs.append((res, read_log(tmp_path / f"ki-{compiled}")))
        assert res.status == "completed"
    _assert_same(*logs)
    assert _compiled_cycles(logs[1][0]) > 1000
    assert np.any(np.abs(ctrl.integral) > 0)


def test_compiled_law_matches_numpy_law():
    """Parity test: the compiled 3RRR law against the product's numpy path of the same law
    (controller.laws with the compiled call switched off: its own summation order and angle
    wrapping, not a test-side derivation), equal to rounding on random states. The
    independent checks of the law are ``test_ctrl_laws.py::test_task_ct_on_real_3rrr_tracks_exactly_without_delay``
    and ``test_ctrl_laws.py::test_task_ct_integral_removes_the_offset_of_a_heavier_plant``."""
    from controller.laws import Ref, Saturation, State, TaskComputedTorque
    from dynamics import load_model as load_robot

    model = load_robot(ROOT / "hil_configs" / "robots" / "3rrr_horizontal.toml")
    rng = np.random.default_rng(3)
    for ki in (None, 300.0):
        a = TaskComputedTorque(model, kp=900.0, kd=60.0, ki=ki, saturation=Saturation(model.limits.torque_max),
                               friction="measured")
        b = TaskComputedTorque(model, kp=900.0, kd=60.0, ki=ki, saturation=Saturation(model.limits.torque_max),
                               friction="measured")
        b._compiled_args = lambda: None           # the numpy law
        assert a.compiled_args is not None and b.compiled_args is None
        X0 = np.asarray(model.home_pose, float)
        for i in range(50):
            X = X0 + rng.normal(0, [0.01, 0.01, 0.05])
            q = model.inverse_kinematics(X)
            qd = rng.normal(0, 0.5, 3)
            ref = Ref(X + rng.normal(0, 0.002, 3), rng.normal(0, 0.1, 3), rng.normal(0, 1.0, 3))
            ta = a.compute(0.001 * i, ref, State(0.001 * i, q, qd))
            tb = b.compute(0.001 * i, ref, State(0.001 * i, q, qd))
            np.testing.assert_allclose(ta, tb, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(a.last_error, b.last_error, rtol=0, atol=1e-15)
            np.testing.assert_array_equal(a.last_saturated, b.last_saturated)
            np.testing.assert_allclose(a.integral, b.integral, rtol=1e-12, atol=1e-15)


def test_not_used_where_python_must_run(tmp_path):
    """Measurement noise is drawn per cycle in Python: the run goes through the Python loop."""
    over = {"loop.duration_s": 0.3, "driver.plant.position_noise_std_rad": 1e-5}
    res, _ = _run(tmp_path, True, over, "noise")
    assert res.status == "completed"
    assert _compiled_cycles(res) == 0


def test_stop_request_between_segments(tmp_path):
    """A stop request (what a signal handler does) is served at the next cycle boundary: the
    stop reaction runs in Python and the run ends 'stopped' with the log complete."""
    from controller.app.run import build_run, load_run

    spec = load_run(DIRECT, overrides={"loop.duration_s": 2.0})
    run = build_run(spec, out_dir=tmp_path / "stop")
    plant = run.loop.driver.plant
    orig = plant.set_compiled_state
    calls = []

    def hook(*a, **kw):
        orig(*a, **kw)
        calls.append(1)
        if len(calls) == 1:
            run.loop.safety.request_stop("SIGTERM")

    plant.set_compiled_state = hook
    res = run.execute()
    log = read_log(tmp_path / "stop")
    assert res.status == "stopped"
    assert res.faults[0].cause == "signal"
    assert log.shape[0] == res.n_cycles
    assert not log["enabled"][-1].any() or log["tau_cmd"][-1].tolist() == [0.0, 0.0, 0.0]


def test_segment_sizes_change_nothing_but_the_calls(tmp_path, monkeypatch):
    """The first segment has ``first_segment`` cycles, each later one what ``segment_s`` of
    wall time holds at the mean cycle so far (within [min_segment, max_segment]); however the
    run is cut into segments, its results are the same to the last bit."""
    from controller import compiled

    calls = []
    after = []
    outside = []            # the test's own count of cycles run and of wall time around each call
    orig = compiled.CompiledCycles.run

    def counted(self, k, k_end, *a, **kw):
        limit = self.limit
        w0 = time.perf_counter()
        out = orig(self, k, k_end, *a, **kw)
        outer_s = time.perf_counter() - w0
        calls.append((k, out[0], limit))
        after.append((self.limit, self.wall_s, self.cycles))
        done, total_s = outside[-1] if outside else (0, 0.0)
        outside.append((done + out[0] - k, total_s + outer_s))
        return out

    monkeypatch.setattr(compiled.CompiledCycles, "run", counted)
    over = {"loop.duration_s": 1.5}
    # the defaults: 1000 cycles, then what 50 ms hold at the mean cycle so far
    default = _run(tmp_path, True, over, "default")
    spans = [(b - a, lim) for a, b, lim in calls if b > a]
    assert spans[0] == (1000, 1000)
    C = compiled.CompiledCycles
    for (limit, wall_s, cycles), (done, outer_s) in zip(after, outside):
        # the loop's own bookkeeping, against the test's: the cycles it ran, and kernel time
        # measured inside the calls the test timed from outside
        assert cycles == done and wall_s <= outer_s
        # the next segment holds segment_s of wall time at the mean cycle so far: the most whole
        # cycles that fit, unless that is outside [min_segment, max_segment]
        mean_cycle_s = wall_s / cycles
        assert wall_s > 0.0 and C.min_segment <= limit <= C.max_segment
        if C.min_segment < limit < C.max_segment:
            assert limit * mean_cycle_s <= C.segment_s * (1 + 1e-12) < (limit + 1) * mean_cycle_s
        elif limit == C.min_segment:
            assert C.segment_s < (limit + 1) * mean_cycle_s
        else:
            assert limit * mean_cycle_s <= C.segment_s * (1 + 1e-12)
    assert [lim for _, _, lim in calls[1:]] == [lim for lim, _, _ in after[:-1]]
    # tiny segments: many calls, each within the bounds
    calls.clear()
    monkeypatch.setattr(compiled.CompiledCycles, "first_segment", 37)
    monkeypatch.setattr(compiled.CompiledCycles, "min_segment", 11)
    monkeypatch.setattr(compiled.CompiledCycles, "segment_s", 1e-9)
    small = _run(tmp_path, True, over, "small")
    spans = [(b - a, lim) for a, b, lim in calls if b > a]
    assert spans[0] == (37, 37)
    assert len(spans) > 100 and all(lim == 11 and n <= 11 for n, lim in spans[1:])
    _assert_same(default, small)
    assert _compiled_cycles(default[0]) == _compiled_cycles(small[0]) > 0.95 * default[0].n_cycles
    # and the upper bound
    calls.clear()
    monkeypatch.setattr(compiled.CompiledCycles, "segment_s", 1e9)
    monkeypatch.setattr(compiled.CompiledCycles, "max_segment", 200)
    large = _run(tmp_path, True, over, "large")
    limits = [lim for a, b, lim in calls if b > a]
    assert len(limits) > 5 and limits[1:] == [200] * (len(limits) - 1)
    _assert_same(default, large)


def test_tune_rollouts_share_the_trajectory_and_equal_fresh_runs():
    """A sweep's runs reuse the trajectory their process built (parse_run's trajectory_cache):
    the metrics equal those of a run parsed from scratch, for two different candidates."""
    from controller.app.run import read_toml, run_offline_metrics
    from dynamics.config import apply_overrides

    path = ROOT / "hil_configs" / "runs" / "3rrr_circle_tune.toml"
    data = {k: v for k, v in read_toml(path).items() if k != "tune"}
    cache = {}
    for over in ({"controller.wn_rad_s": 30.0, "loop.duration_s": 1.2},
                 {"controller.wn_rad_s": 55.0, "controller.ki": 800.0, "driver.plant.mass_factor": 1.2,
                  "loop.duration_s": 1.2}):
        d = apply_overrides(data, over, file=str(path))
        cached = run_offline_metrics(d, file=str(path), trajectory_cache=cache)
        fresh = run_offline_metrics(d, file=str(path))
        assert cached["status"] == "completed"
        for m in (cached, fresh):       # wall-clock figures differ from run to run
            m.pop("timing", None)
            m.pop("wall_time_s", None)
            m.pop("real_time_factor", None)
        assert cached == fresh
    assert len(cache) == 1


_LOADED_BEFORE_FIRST_SEGMENT = r'''
import sys, tempfile
from pathlib import Path
from controller.app.run import build_run, load_run
from controller import compiled

seen = []
run_segment = compiled.CompiledCycles.run

def first_run(self, *args, **kw):
    if not seen:
        seen.append(len(self._segment.overloads))
    return run_segment(self, *args, **kw)

compiled.CompiledCycles.run = first_run
with tempfile.TemporaryDirectory() as d:
    run = build_run(load_run(sys.argv[1], overrides={"loop.duration_s": 0.3}), out_dir=Path(d) / "r")
    res = run.execute()
    assert res.status == "completed", (res.status, res.faults)
print(seen[0])
'''


@pytest.mark.parametrize("config", ["3rrr_circle_direct", "seed000_fast", "stewart_motion_direct"])
def test_segment_is_loaded_before_the_first_segment(config):
    """A new process: the loop loads the segment's machine code (numba's cache, or a compile)
    before the first cycle, so the first segment's timing columns hold its cycles only, not the
    loading (about 30 ms from the cache: the first 200 cycles' ``compute_s`` showed 140 us, a
    compile seconds)."""
    import subprocess
    import sys

    path = str(ROOT / "hil_configs" / "runs" / f"{config}.toml")
    r = subprocess.run([sys.executable, "-c", _LOADED_BEFORE_FIRST_SEGMENT, path], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout.strip().splitlines()[-1]) >= 1


def test_loading_the_segment_changes_nothing(tmp_path):
    """``CompiledCycles.load`` (a call of zero cycles) leaves the plant, the law and the
    supervisor as they were (the plant step's ``work`` is scratch, uninitialised), and the run
    after it equals the Python loop's."""
    from controller.app.run import build_run, load_run
    from controller.compiled import CompiledCycles
    from trajectories.base import GridCache

    spec = load_run(DIRECT, overrides={"loop.duration_s": 0.5})
    run = build_run(spec, out_dir=tmp_path / "load")
    loop = run.loop
    loop.driver.enable()        # as the loop does before it (the plant's brakes released)
    fast, why = CompiledCycles.for_loop(loop, GridCache(loop.trajectory, loop.period_s), None)
    assert fast is not None, why

    def snapshot():
        pa, _ = loop.driver.plant.compiled_step_args()
        s = loop.safety
        return ([np.array(v, copy=True) for k, v in pa.items() if isinstance(v, np.ndarray) and k != "work"]
                + [loop.controller.compiled_state(), np.array([s._k]), np.array(s.pose),
                   np.array([np.count_nonzero(s._ebits)])])     # (sized on first use, as run() does)

    before = snapshot()
    fast.load()
    assert fast.unavailable is None and fast.cycles == 0 and fast.next_k == 0
    for a, b in zip(before, snapshot()):
        assert np.array_equal(a, b, equal_nan=True)
    run.close()
    py = _run(tmp_path, False, {"loop.duration_s": 0.5}, "py")
    fast_run = _run(tmp_path, True, {"loop.duration_s": 0.5}, "fast")
    _assert_same(py, fast_run)


_COLD_SEGMENT = r"""
import pickle, re, sys
import numpy as np
from controller import _fast_loop
args, after, k_ref = pickle.load(open(sys.argv[1], "rb"))
seg = _fast_loop.rrr_task_computed_torque_seg
k = seg(*args)                   # the first kernel this process compiles: nothing compiled before it
assert k == k_ref, (k, k_ref)
def flat(x):
    return [a for v in x for a in flat(v)] if isinstance(x, tuple) else [x]
def state(a):                         # all but the scratch: the segment's work, the plant step's
    return flat(a[:8]) + flat(a[8][:-1]) + flat(a[9:-1])
n = 0
for a, b in zip(state(args), state(after)):
    if isinstance(a, np.ndarray):
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        n += 1
assert n > 20, n
(cres,) = seg.overloads.values()
ir = cres.library.get_llvm_str()       # the segment and every function linked into it
calls = lambda name: len(re.findall(r"call [^\n]*@\"?" + name + r"\"?\(", ir))
assert cres.fndesc.llvm_func_name in ir and calls(r"[\w.$]+") > 10, "the IR's calls are not where expected"
print(calls("NRT_incref"), calls("NRT_decref"), calls("NRT_MemInfo_alloc[A-Za-z_]*"))
"""


def test_3rrr_segment_compiles_first_in_a_cold_cache_without_reference_counting(tmp_path):
    """The 3RRR computed-torque segment runs without numba's reference counting (``_nrt=False``:
    about a fifth of its cycle was atomic increments and decrements of array counts), so nothing
    it reaches may allocate.  A callee that does would still work when some earlier call had
    compiled it with reference counting (the Python loop's law, the plant's warm-up), and fail to
    compile when the segment comes first: a new process with an empty numba cache calls the
    segment before anything else, with the arguments of a real run's first segment, and gets the
    same cycles and results; its machine code (the segment and every function linked into it)
    has no reference-counting call and no allocation."""
    import os
    import pickle
    import subprocess
    import sys

    from controller.app.run import build_run, load_run
    import controller.compiled as cc

    seen = {}
    spec = load_run(DIRECT, overrides={"loop.duration_s": 0.3})
    run = build_run(spec)
    fast_run = cc.CompiledCycles.run

    def capture(self, *a, **kw):
        seg = self._segment

        def wrapped(*args):
            before = pickle.dumps(args)
            k = seg(*args)
            seen.setdefault("case", (pickle.loads(before), args, k))
            return k
        self._segment = wrapped
        try:
            return fast_run(self, *a, **kw)
        finally:
            self._segment = seg

    cc.CompiledCycles.run = capture
    try:
        res = run.execute()
    finally:
        cc.CompiledCycles.run = fast_run
    assert res.status == "completed" and seen, res.messages
    case = tmp_path / "case.pkl"
    case.write_bytes(pickle.dumps(seen["case"]))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", _COLD_SEGMENT, str(case)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["0", "0", "0"], r.stdout
