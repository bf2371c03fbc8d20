"""Simulated side: plant real-time factor, DirectPlantDriver cycle, driver <-> emulator cycles.

``run(quick) -> list[dict]`` rows with ``case``, ``median_us``, ``p99_us``, ``note`` (protocol of
``benchmarks/run.py``).  Every cycle advances a lock-step clock by 1 ms (a 1 kHz loop), so each
cycle includes integrating 1 ms of plant motion (RK4, default 2 sub-steps).

Cases:

* ``plant 1 ms``: ``SimulatedPlant.advance_to`` over one 1 ms period for the seed-000 arm
  (3-DOF) and ``arm6_demo`` (6-DOF); the note gives the real-time factor (simulated seconds
  per wall second) = 1 ms / mean;
* ``direct cycle``: one :class:`DirectPlantDriver.cycle` (plant + measurement) per period;
* ``mit_can`` / ``odrive_can`` with 3 and 6 motors: one cycle of the *real* driver against the
  emulated devices on an in-process python-can ``virtual`` bus (encode, send, emulator thread
  decodes, advances the plant, replies, driver decodes); the note gives the part that is not
  plant integration (median cycle minus median plant row).  Each is timed with the emulators
  served by their own thread (``serve = "thread"``, as a separate device would be) and inline
  in the driver's thread (``serve = "inline"``, what offline runs use: no thread hand-off).
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import numpy as np

ROBOTS = Path(__file__).resolve().parents[1] / "hil_configs" / "robots"
PERIOD_S = 1e-3


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _stats(samples_s):
    s = np.asarray(samples_s) * 1e6
    return float(np.median(s)), float(np.percentile(s, 99)), float(np.mean(s))


def _time_cycles(step, n: int, warmup: int = 50):
    """Per-call wall times [s] of ``step(k)`` for k = 1..n (after ``warmup`` untimed calls)."""
    for k in range(1, warmup + 1):
        step(k)
    out = np.empty(n)
    was = gc.isenabled()
    gc.disable()
    try:
        for i in range(n):
            k = warmup + 1 + i
            t0 = time.perf_counter()
            step(k)
            out[i] = time.perf_counter() - t0
    finally:
        if was:
            gc.enable()
    return out


def _models():
    from dynamics import load_model
    return {3: load_model(ROBOTS / "seed000_arm.toml"), 6: load_model(ROBOTS / "arm6_demo.toml")}


def _q0(model):
    return np.full(model.dof, 0.1)


def _hold(model, q0):
    """Gravity torques at q0 (keeps the arm near q0 so runs stay comparable)."""
    return np.asarray(model.gravity(q0), dtype=float)


def run(quick: bool = False) -> list[dict]:
    from drivers.base import Command
    from drivers.sim.direct import DirectPlantDriver
    from drivers.sim.plant import SimulatedPlant

    n = 300 if quick else 2000
    rows: list[dict] = []
    models = _models()
    plant_median = {}
    for dof, model in models.items():
        q0 = _q0(model)
        tau = _hold(model, q0)
        plant = SimulatedPlant(model, q0=q0)
        plant.set_torque(tau)
        med, p99, mean = _stats(_time_cycles(lambda k: plant.advance_to(k * PERIOD_S), n))
        plant_median[dof] = med
        rows.append({"case": f"plant 1 ms, {model.name} {dof}-DOF", "median_us": med, "p99_us": p99,
                     "note": f"RK4, 2 sub-steps; real-time factor {PERIOD_S * 1e6 / mean:.1f}x"})

        clock = _Clock()
        drv = DirectPlantDriver(SimulatedPlant(model, q0=q0), now=clock)
        drv.enable()
        cmd = Command(tau)

        def direct_step(k):
            clock.t = k * PERIOD_S
            drv.cycle(cmd)

        med, p99, _ = _stats(_time_cycles(direct_step, n))
        rows.append({"case": f"direct cycle, {dof} joints", "median_us": med, "p99_us": p99,
                     "note": f"driver overhead over the plant row: {med - plant_median[dof]:.1f} us"})
        drv.close()

    for kind in ("mit_can", "odrive_can"):
        for serve in ("thread", "inline"):
            for dof, model in models.items():
                rows.append(_emulated_row(kind, serve, dof, model, n, plant_median[dof]))
    return rows


def _emulated_row(kind: str, serve: str, dof: int, model, n: int, plant_median_us: float) -> dict:
    """One real driver <-> emulated devices cycle (virtual bus) per period, timed."""
    from dynamics.config import Section
    from drivers.base import Command
    from drivers.registry import build_driver

    q0 = _q0(model)
    tau = _hold(model, q0)
    if kind == "mit_can":
        joints = [{"can_id": i + 1, "model": "AK10-9", "gear_ratio": 1.0} for i in range(dof)]
        extra = {"emulator": {"serve": serve}}
    else:
        joints = [{"node_id": i + 1} for i in range(dof)]
        extra = {"feedback": "broadcast",
                 "emulator": {"encoder_period_s": PERIOD_S, "serve": serve}}
    cfg = {"type": f"sim_{kind}", "reply_timeout_s": 0.05, "joints": joints,
           "plant": {"q0": q0.tolist()}, **extra}
    clock = _Clock()
    drv = build_driver(Section(cfg, "bench_sim"), now=clock, model=model)
    try:
        drv.enable()
        cmd = Command(tau)
        missing = [0]

        def emu_step(k):
            clock.t = k * PERIOD_S
            fb = drv.cycle(cmd)
            missing[0] += int((~fb.fresh).sum())

        med, p99, _ = _stats(_time_cycles(emu_step, n))
    finally:
        drv.close()
    where = "emulator thread" if serve == "thread" else "emulators served inline (driver's thread)"
    return {"case": f"{kind} cycle, {dof} motors, virtual bus, {serve}", "median_us": med,
            "p99_us": p99,
            "note": f"bus + protocol + {where}: {med - plant_median_us:.0f} us over "
                    f"the plant row; stale replies {missing[0]} / {n * dof}"}


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_sim [--quick] [--json FILE]
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_sim", *sys.argv[1:]]))
