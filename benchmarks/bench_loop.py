"""Per-cycle cost of the control loop (offline, lock-step clock, in-process simulated plant).

``run(quick) -> list[dict]`` rows with ``case``, ``median_us``, ``p99_us``, ``note`` (protocol of
``benchmarks/run.py``).  Cases:

* full loop cycles (plant integration + control + safety + telemetry) for a 2-link arm with
  joint-space computed torque and for the 3RRR (``hil_configs/robots/3rrr_horizontal.toml``)
  with task-space computed torque; the note gives the offline real-time factor
  ``period / mean cycle`` (how much faster than real time an offline run goes);
* the control part alone (``compute`` column of the loop timing: velocity handling,
  controller, safety);
* one telemetry row: ``.npy`` block writer vs formatting the same row as CSV text;
* ``SafetySupervisor.check`` alone on a clean 3RRR cycle (the rules of
  ``controller/_safety_rules.py``, the periodic singularity check included), beside
  ``controller.compute`` of the same cycle as the reference;
* the offline closed-loop real-time factor of the shipped run configs, built exactly as
  ``torqueloop run`` builds them (``controller.app.run.load_run`` / ``build_run``, telemetry
  on): ``hil_configs/runs/3rrr_circle_direct.toml`` (plant in process) and
  ``hil_configs/runs/3rrr_circle.toml`` (the real MIT CAN driver, emulated actuators
  served inline on a lock-step run: ``drivers.sim.emulators.InlineBus``), each first run
  in the process, then warm (median of runs; the MIT row beside the direct Python loop);
  the Python loop against the compiled offline loop for ``3rrr_circle_direct.toml``,
  ``seed000_slow.toml`` and ``stewart_motion_direct.toml`` (the Stewart platform, 6-DOF
  task-space computed torque);
* a wall-clock run: ``3rrr_circle_direct.toml`` with ``loop.clock = "wall"`` at 1 kHz for
  60 s (10 s with ``quick``) with ``[loop.realtime]`` ``sched_fifo_priority = 80``,
  ``cpu = 1``, ``freeze_gc = true`` applied where permitted (what was not applied is in the
  note).  Rows: lateness (p50/p99/p99.9/max, missed deadlines = cycles starting later than
  half a period, count and fraction), compute and whole-cycle time.  Targets: p99.9
  lateness <= 50 us and <= 0.1 % missed deadlines.  The same run at 4 kHz for 10 s (5 s with
  ``quick``): it must complete (a clock that busy-waits through the whole cycle is throttled by
  the kernel under SCHED_FIFO and the overrun rule stops the run).

The driver cycle cost for 3 and 6 motors on the virtual CAN bus (MIT and ODrive, with the
emulators) is in ``bench_sim.py`` (rows ``mit_can cycle`` / ``odrive_can cycle``), the
3-motor MIT control cycle without the emulator in ``bench_cycle.py``, not here.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
import tempfile

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PERIOD_S = 1e-3


def _loop_rows(name, model, ctrl, traj, q0, qd0, duration_s, tmp):
    from controller.clock import LockstepClock
    from controller.loop import ControlLoop
    from controller.safety import SafetyConfig, SafetySupervisor
    from controller.telemetry import TelemetryWriter
    from drivers.sim.direct import DirectPlantDriver
    from drivers.sim.plant import SimulatedPlant

    clock = LockstepClock()
    drv = DirectPlantDriver(SimulatedPlant(model, q0=q0, qd0=qd0), now=clock.now)
    # a run needs a finite torque limit on every actuator: the toy arm's file has none
    finite = bool(np.all(np.isfinite(model.limits.torque_max)))
    safety = SafetySupervisor(SafetyConfig(torque_max=None if finite else 100.0), model.limits, model=model)
    tel = TelemetryWriter(tmp / name.replace(" ", "_"), model.dof, ctrl.dim)
    res = ControlLoop(drv, ctrl, traj, safety, clock, period_s=PERIOD_S, telemetry=tel,
                      duration_s=duration_s, handle_signals=False).run()
    if res.status != "completed":
        raise RuntimeError(f"benchmark run {name!r} ended with {res.status}: {res.faults[:1]}")
    cyc, comp = res.timing.cycle, res.timing.compute
    rtf = PERIOD_S * res.n_cycles / res.wall_time_s
    return [
        {"case": f"loop cycle, {name}", "median_us": cyc["p50"] * 1e6, "p99_us": cyc["p99"] * 1e6,
         "note": f"{res.n_cycles} cycles at 1 kHz, offline real-time factor {rtf:.2f}x; "
                 f"max {cyc['max'] * 1e6:.0f} us"},
        {"case": f"control+safety only, {name}", "median_us": comp["p50"] * 1e6, "p99_us": comp["p99"] * 1e6,
         "note": "velocity handling + controller.compute + safety.check"},
    ]


def _telemetry_rows(repeat):
    from controller.telemetry import TelemetryWriter

    n, dim = 6, 6
    z = np.zeros(n)
    args = (0.0, z + 0.1, z + 0.2, z + 0.3, z, z, z + 1e-4, z + 1.0, z + 1.0, z + 0.9, 0, np.zeros(n, bool),
            1e-6, 5e-5, np.ones(n, bool), np.zeros(n, int), np.ones(n, bool))
    out = []
    with tempfile.TemporaryDirectory() as d:
        w = TelemetryWriter(d, n, dim, buffer_rows=200)
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(200):
                w.record(*args)
            samples.append((time.perf_counter() - t0) / 200 * 1e6)
        w.close()
    out.append({"case": "telemetry row, .npy block writer (6 joints)", "median_us": float(np.median(samples)),
                "p99_us": float(np.percentile(samples, 99)), "note": "record() incl. amortised flush every 200 rows"})
    fields = np.concatenate([np.atleast_1d(np.asarray(a, float)).ravel() for a in args])
    buf = io.StringIO()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(200):
            buf.write(",".join(repr(float(x)) for x in fields))
            buf.write("\n")
        samples.append((time.perf_counter() - t0) / 200 * 1e6)
        buf.seek(0)
        buf.truncate()
    out.append({"case": "telemetry row, CSV text (same row, to memory)", "median_us": float(np.median(samples)),
                "p99_us": float(np.percentile(samples, 99)), "note": f"{fields.size} numbers, repr (17 digits)"})
    return out


RUNS = ROOT / "hil_configs" / "runs"
#: the wall-clock run's real-time settings (as documented in controller/app/run.py)
REALTIME = {"loop.realtime.sched_fifo_priority": 80, "loop.realtime.cpu": 1,
            "loop.realtime.freeze_gc": True}


def _run_config(path: Path, tmp: Path, *, duration_s: float, overrides: dict | None = None,
                compiled: bool = True, tag: str = "", must_complete: bool = True):
    """Build and execute a run config as the CLI does (telemetry on); return (spec, result).

    ``compiled=False`` runs every cycle through the Python loop (``ControlLoop(compiled=False)``),
    the reference of the compiled offline loop.  ``must_complete=False`` returns a run that
    stopped on a fault too (a wall-clock run on a shared machine: the row reports it)."""
    import warnings

    from controller.clock import RealtimeWarning
    from controller.app.run import build_run, load_run

    spec = load_run(path, overrides=overrides, duration_s=duration_s)
    run = build_run(spec, out_dir=tmp / f"{spec.name}-{spec.clock}{tag}")
    run.loop.compiled = compiled
    with warnings.catch_warnings():
        # settings that cannot be applied are reported in result.messages (and the row's note)
        warnings.simplefilter("ignore", RealtimeWarning)
        res = run.execute()
    if must_complete and res.status != "completed":
        raise RuntimeError(f"benchmark run {spec.name!r} ended with {res.status}: {[str(f) for f in res.faults[:2]]}")
    return spec, res


def _offline_rows(tmp: Path, quick: bool) -> list[dict]:
    """Offline real-time factors of the shipped runs.  The in-process run twice more: every
    cycle through the Python loop (the reference) and the compiled offline loop, each after
    a warm-up run in this process (numba's cache loaded), median of ``repeat`` runs."""
    rows = []
    dur = 2.0 if quick else None
    for fname, what in (("3rrr_circle_direct.toml", "plant in process"),
                        ("3rrr_circle.toml", "MIT CAN driver, emulated AK80-9 served inline")):
        spec, res = _run_config(RUNS / fname, tmp, duration_s=dur)
        cyc = res.timing.cycle
        sim_s = res.n_cycles * spec.period_s
        rtf = sim_s / res.wall_time_s
        rows.append({"case": f"offline run {fname} (cycle)", "median_us": cyc["p50"] * 1e6,
                     "p99_us": cyc["p99"] * 1e6, "rtf": rtf,
                     "note": f"{what}; {res.n_cycles} cycles = {sim_s:.3f} s simulated in "
                             f"{res.wall_time_s:.3f} s wall (first run in this process): "
                             f"real-time factor {rtf:.2f}x"})
    repeat = 3 if quick else 5
    # the 3RRR (task-space law), a serial arm (joint-space law) and the Stewart platform (6-DOF
    # task-space law): Python loop vs compiled loop
    for fname, target in (("3rrr_circle_direct.toml", " (target >= 100x)"), ("seed000_slow.toml", ""),
                          ("stewart_motion_direct.toml", " (target >= 80x)")):
        per = {}
        for compiled in (False, True):
            walls = []
            for r in range(repeat):
                spec, res = _run_config(RUNS / fname, tmp, duration_s=dur, compiled=compiled,
                                        tag=f"-c{int(compiled)}-{r}")
                walls.append(res.wall_time_s / res.n_cycles)
            per[compiled] = (float(np.median(walls)), res, spec)
        ref_us = per[False][0] * 1e6
        if fname == "3rrr_circle_direct.toml":
            rows.append(_mit_warm_row(tmp, dur, repeat, ref_us))
        for compiled, label in ((False, "Python loop, every cycle"), (True, "compiled offline loop")):
            w, res, spec = per[compiled]
            rtf = spec.period_s / w
            msg = next((m for m in res.messages if m.startswith("compiled offline loop")), "no cycle compiled")
            rows.append({"case": f"{fname}, {label}", "median_us": w * 1e6,
                         "ref": "Python loop", "ref_median_us": ref_us, "ratio": w * 1e6 / ref_us, "rtf": rtf,
                         "note": f"wall time per cycle of the whole run (median of {repeat} runs, warm); "
                                 f"real-time factor {rtf:.1f}x{target}; {msg}"})
    return rows


def _mit_warm_row(tmp: Path, dur, repeat: int, ref_us: float) -> dict:
    """The shipped MIT run (emulated drives served inline, lock-step), warm: median of ``repeat`` runs."""
    walls, cycles = [], []
    for r in range(repeat):
        spec, res = _run_config(RUNS / "3rrr_circle.toml", tmp, duration_s=dur, tag=f"-mit-{r}")
        walls.append(res.wall_time_s / res.n_cycles)
        cycles.append(res.timing.cycle["p50"])
    w = float(np.median(walls))
    rtf = spec.period_s / w
    return {"case": "3rrr_circle.toml, emulated MIT (inline), warm", "median_us": w * 1e6,
            "ref": "3rrr_circle_direct, Python loop", "ref_median_us": ref_us, "ratio": w * 1e6 / ref_us,
            "rtf": rtf,
            "note": f"wall time per cycle of the whole run (median of {repeat} runs, warm); median cycle "
                    f"{np.median(cycles) * 1e6:.1f} us; real-time factor {rtf:.1f}x (target >= 15x)"}


def _wall_rows(tmp: Path, quick: bool) -> list[dict]:
    import os

    duration = 10.0 if quick else 60.0
    load0 = os.getloadavg()
    spec, res = _run_config(RUNS / "3rrr_circle_direct.toml", tmp, duration_s=duration,
                            overrides={"loop.clock": "wall", **REALTIME}, must_complete=False)
    load1 = os.getloadavg()
    t = res.timing
    lat, comp, cyc = t.lateness, t.compute, t.cycle
    frac = t.missed_deadlines / max(t.n_cycles, 1)
    applied = "; ".join(res.messages) if res.messages else "all applied"
    env = (f"load avg (1 min) {load0[0]:.2f} before, {load1[0]:.2f} after; {os.cpu_count()} CPUs; "
           f"realtime {dict((k.split('.')[-1], v) for k, v in REALTIME.items())}: {applied}")
    ok = lat["p99_9"] <= 50e-6 and frac <= 1e-3
    return [
        {"case": f"wall clock 1 kHz {duration:g} s, lateness", "median_us": lat["p50"] * 1e6,
         "p99_us": lat["p99"] * 1e6, "p99_9_us": lat["p99_9"] * 1e6, "max_us": lat["max"] * 1e6,
         "missed": t.missed_deadlines, "missed_frac": frac,
         "note": f"run {res.status} after {t.n_cycles} cycles"
                 f"{'' if res.status == 'completed' else ' (' + str(res.faults[0]) + ')' if res.faults else ''}; "
                 f"missed = start later than {t.miss_threshold_fraction_of_period:g} period; "
                 f"targets p99.9 <= 50 us and <= 0.1 % missed: {'met' if ok else 'NOT met'}; {env}"},
        {"case": f"wall clock 1 kHz {duration:g} s, compute", "median_us": comp["p50"] * 1e6,
         "p99_us": comp["p99"] * 1e6, "p99_9_us": comp["p99_9"] * 1e6, "max_us": comp["max"] * 1e6,
         "note": "estimate + controller + safety"},
        {"case": f"wall clock 1 kHz {duration:g} s, cycle", "median_us": cyc["p50"] * 1e6,
         "p99_us": cyc["p99"] * 1e6, "p99_9_us": cyc["p99_9"] * 1e6, "max_us": cyc["max"] * 1e6,
         "note": "whole cycle: compute + plant step (sim_direct driver) + telemetry"},
        {"case": f"wall clock 1 kHz {duration:g} s, period error", "median_us": t.period_error["p50"] * 1e6,
         "p99_us": t.period_error["p99"] * 1e6, "p99_9_us": t.period_error["p99_9"] * 1e6,
         "max_us": t.period_error["max"] * 1e6, "note": "|interval between cycle starts - 1 ms|"},
        _wall_4k_row(tmp, quick),
    ]


def _wall_4k_row(tmp: Path, quick: bool) -> dict:
    """The same run at 4 kHz under SCHED_FIFO: the clock must sleep in every cycle (it busy-waits
    at most a quarter period), else the kernel's real-time throttling stops the loop for 50 ms a
    second and the overrun rule ends the run (what a 200-us busy-wait at 4 kHz did)."""
    import warnings

    from controller.app.run import build_run, load_run
    from controller.clock import RealtimeWarning

    duration = 5.0 if quick else 10.0
    spec = load_run(RUNS / "3rrr_circle_direct.toml", duration_s=duration,
                    overrides={"loop.clock": "wall", "loop.rate_hz": 4000.0, **REALTIME})
    run = build_run(spec, out_dir=tmp / "3rrr-wall-4k")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RealtimeWarning)
        res = run.execute()
    t = res.timing
    lat = t.lateness
    return {"case": f"wall clock 4 kHz {duration:g} s, lateness", "median_us": lat["p50"] * 1e6,
            "p99_us": lat["p99"] * 1e6, "p99_9_us": lat["p99_9"] * 1e6, "max_us": lat["max"] * 1e6,
            "missed": t.missed_deadlines, "missed_frac": t.missed_deadlines / max(t.n_cycles, 1),
            "note": f"run {res.status} after {t.n_cycles} cycles; SCHED_FIFO as the 1 kHz row; the busy-wait "
                    f"is at most a quarter period (62.5 us), so no real-time throttling (a stall of 50 ms)"}


def _safety_rows(repeat):
    """One clean cycle of the 3RRR demo's supervisor, interleaved with its controller's compute."""
    from types import SimpleNamespace as NS

    from benchmarks._timing import time_calls
    from controller.app.run import build_run, load_run

    spec = load_run(ROOT / "hil_configs" / "runs" / "3rrr_circle_direct.toml")
    run = build_run(spec)
    try:
        sup, law = run.loop.safety, run.loop.controller
        m = spec.model
        X0 = np.asarray(m.home_pose, dtype=float)
        q0 = np.asarray(m.inverse_kinematics(X0), dtype=float)
        fb = NS(fault=np.zeros(3, dtype=np.int64), enabled=np.ones(3, dtype=bool), fresh=np.ones(3, dtype=bool))
        ref = spec.trajectory.sample(0.0)
        state = NS(q=q0, qd=np.full(3, 0.01), X=X0, Xd=np.zeros(3))
        tau = np.array([0.1, -0.2, 0.3])
        err = np.zeros(3)
        law.reset()
        t = time_calls({"compute": (law.compute, (0.0, ref, state)),
                        "check": (lambda: sup.check(0.0, state, fb, ref, tau, error=err), ())},
                       repeat=repeat, number=2000)
        (c_med, _), (s_med, s_p99) = t["compute"], t["check"]
        assert not sup.latched, sup.faults
    finally:
        run.close()
    return [{"case": "safety.check, clean 3RRR cycle", "median_us": s_med, "p99_us": s_p99,
             "ref": "controller.compute (same cycle)", "ref_median_us": c_med, "ratio": s_med / c_med,
             "note": "rules once in controller/_safety_rules.py; singularity check every N cycles included"}]


def run(quick: bool = False) -> list[dict]:
    from controller.gains import ct_gains
    from controller.laws import ComputedTorque, TaskComputedTorque
    from dynamics.toy_models import PlanarTwoLink
    from dynamics import load_model
    from trajectories.base import Hold

    duration = 0.5 if quick else 2.0
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        arm = PlanarTwoLink()
        q0 = np.array([0.3, 0.8])
        g = ct_gains(20.0, 1.0, n=2)
        rows += _loop_rows("2-link arm, joint CT", arm, ComputedTorque(arm, g.kp, g.kd), Hold(q0, duration),
                           q0, None, duration, tmp)
        m = load_model(ROOT / "hil_configs" / "robots" / "3rrr_horizontal.toml")
        X0 = np.asarray(m.home_pose, float)
        g3 = ct_gains(30.0, 1.0, n=3)
        rows += _loop_rows("3RRR, task-space CT", m, TaskComputedTorque(m, g3.kp, g3.kd, friction="measured"),
                           Hold(X0, duration), m.inverse_kinematics(X0), None, duration, tmp)
    rows += _telemetry_rows(20 if quick else 100)
    rows += _safety_rows(5 if quick else 25)
    with tempfile.TemporaryDirectory() as d:
        rows += _offline_rows(Path(d), quick)
        rows += _wall_rows(Path(d), quick)
    return rows


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_loop [--quick] [--json FILE]
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_loop", *sys.argv[1:]]))
