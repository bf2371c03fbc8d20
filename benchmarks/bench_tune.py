"""Tuning throughput: the 3RRR circle gain search, simulated seconds per wall-clock second.

``run(quick)`` returns rows of the ``benchmarks/run.py`` protocol.  The sweep is the
shipped ``hil_configs/runs/3rrr_circle_tune.toml`` (task computed torque on the
in-process plant with friction, current-loop lag and encoder quantisation; every
candidate on the same Monte-Carlo plant draws) through :func:`controller.app.tune.run_tune`,
as ``torqueloop tune`` runs it, on three engines in the same process:

* ``serial``: one rollout after the other in this process (the reference row);
* ``local``: the process pool (``workers`` spawned processes, tasks pickled);
* ``batch``: ``workers`` rollouts advanced together in this process (threads; the
  compiled offline loop releases the GIL).

``median_us`` is wall time per simulated control cycle over the sweep (median of the
repeats), ``sim_s_per_s`` the throughput (simulated seconds per wall second), ``ratio``
the row's wall time over the serial row's.  Warm: one small sweep runs first in this
process (compiled kernels loaded, trajectory built); the pool's workers start cold as
they do for a user (their start-up is part of the figure).

Run alone: ``.venv/bin/python -m benchmarks.bench_tune [--quick]``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "hil_configs" / "runs" / "3rrr_circle_tune.toml"


def _sweep(spec, base, engine: str, workers: int) -> float:
    from controller.app.tune import run_tune

    t0 = time.perf_counter()
    res = run_tune(spec, base, str(CONFIG), workers=workers, engine=engine)
    wall = time.perf_counter() - t0
    bad = [m for c in res.candidates for m in c.metrics if m.get("status") == "error"]
    if bad:
        raise RuntimeError(f"{engine}: a rollout failed: {bad[0].get('error')}")
    return wall


def run(quick: bool = False) -> list[dict]:
    from controller.app.commands import _absolutise
    from controller.app.tune import TuneSpec
    from dynamics.config import Section, read_toml

    data = read_toml(CONFIG)
    base = _absolutise(data, CONFIG.parent)
    spec = TuneSpec.from_section(Section(data["tune"], str(CONFIG), "tune"))
    if quick:
        spec.candidates, spec.monte_carlo, spec.duration_s = 4, 2, 2.0
    repeats = 1 if quick else 3
    workers = min(2, os.cpu_count() or 1)
    rate_hz = float(data["loop"]["rate_hz"])
    runs = spec.candidates * spec.monte_carlo
    sim_s = runs * float(spec.duration_s)
    cycles = sim_s * rate_hz
    # warm this process: compiled kernels, the trajectory
    warm = TuneSpec.from_section(Section(data["tune"], str(CONFIG), "tune"))
    warm.candidates, warm.monte_carlo, warm.duration_s = 1, 1, 0.2
    _sweep(warm, base, "local", 1)

    cases = [("serial", "local", 1), ("local", "local", workers), ("batch", "batch", workers)]
    walls: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for _ in range(repeats):
        for name, engine, w in cases:          # interleaved: load hits every engine alike
            walls[name].append(_sweep(spec, base, engine, w))
    ref = statistics.median(walls["serial"])
    rows = []
    for name, engine, w in cases:
        wall = statistics.median(walls[name])
        rows.append({"case": f"tune_3rrr_circle_{name}", "median_us": wall / cycles * 1e6,
                     "ref": "tune_3rrr_circle_serial", "ref_median_us": ref / cycles * 1e6,
                     "ratio": wall / ref, "sim_s_per_s": sim_s / wall, "wall_s": wall,
                     "note": f"{spec.candidates} x {spec.monte_carlo} runs of {spec.duration_s:g} s at "
                             f"{rate_hz:g} Hz, engine {engine}, {w} worker(s), median of {repeats}"})
    return rows


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_tune [--quick] [--json FILE]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_tune", *sys.argv[1:]]))
