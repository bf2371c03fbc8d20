"""Sweep engines: throughput with 1 and 2 workers, per-task overhead, bytes per task.

``run(quick)`` returns rows of the ``benchmarks/run.py`` protocol:

* ``engines_<engine>_<w>w``: the shipped 3RRR tune sweep (``3rrr_circle_tune.toml``, cut to
  ``candidates x monte_carlo`` runs) on ``batch``, ``local``, ``dask`` (a ``LocalCluster``
  started for the sweep, its start-up included as a user meets it) and ``ray`` (when
  installed) with 1 and 2 workers: ``sim_s_per_s`` (simulated seconds per wall second),
  ``rollout_ms`` (median warm rollout in a worker), ``cold_ms`` (a worker's first rollout:
  compiled kernels loaded, trajectory mapped), ``task_kb`` (pickled task as sent),
  ``rollouts_per_task``.
* ``engines_overhead_<engine>``: the round trip of an empty task on a running engine
  (thread pool, process pool, Dask client, Ray), median over ``n`` tasks sent one after the
  other, in microseconds: what each task costs on top of its work.

Run alone: ``.venv/bin/python -m benchmarks.bench_engines [--quick]`` (or ``benchmarks/run.py
--only engines``); ``--quick``: 6 x 2 runs, 2 workers, no Ray.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "hil_configs" / "runs" / "3rrr_circle_tune.toml"


def _noop(x):
    return x


def _overheads(n: int, ray_too: bool = True) -> list[dict]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    def trip(submit) -> float:
        submit(0)                                   # start-up, imports
        ts = []
        for i in range(n):
            t0 = time.perf_counter()
            submit(i)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e6

    rows = []
    with ThreadPoolExecutor(1) as ex:
        rows.append(("batch", trip(lambda i: ex.submit(_noop, i).result())))
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        rows.append(("local", trip(lambda i: ex.submit(_noop, i).result())))
    try:
        from dask.distributed import Client, LocalCluster
        with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cl, Client(cl) as c:
            rows.append(("dask", trip(lambda i: c.submit(_noop, i, pure=False).result())))
    except ImportError:
        pass
    try:
        if not ray_too:
            raise ImportError
        import ray
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        try:
            f = ray.remote(_noop)
            rows.append(("ray", trip(lambda i: ray.get(f.remote(i)))))
        finally:
            ray.shutdown()
    except ImportError:
        pass
    return [{"case": f"engines_overhead_{e}", "median_us": us, "note": f"empty task round trip, median of {n}"}
            for e, us in rows]


def run(quick: bool = False) -> list[dict]:
    from controller.app.commands import _absolutise
    from controller.app.tune import TuneSpec, run_tune
    from dynamics.config import Section, read_toml

    data = read_toml(CONFIG)
    base = _absolutise({k: v for k, v in data.items() if k != "tune"}, CONFIG.parent)
    spec = TuneSpec.from_section(Section(data["tune"], str(CONFIG), "tune"))
    spec.candidates, spec.monte_carlo = (6, 2) if quick else (16, 3)
    sim_s = spec.candidates * spec.monte_carlo * float(spec.duration_s)
    engines = ["batch", "local", "dask"]
    try:
        import ray  # noqa: F401
        if not quick:                   # its start-up alone is most of a quick run
            engines.append("ray")
    except ImportError:
        pass
    run_tune(TuneSpec(params=spec.params, uncertainty={}, candidates=1, monte_carlo=1, duration_s=0.2),
             base, str(CONFIG), workers=1, engine="local")                   # warm this process
    rows = []
    for engine in engines:
        for w in ((2,) if quick else (1, 2)):
            t0 = time.perf_counter()
            res = run_tune(spec, base, str(CONFIG), workers=w, engine=engine)
            wall = time.perf_counter() - t0
            rep = res.report
            warm = [s.seconds for s in rep.stats if not s.cold]
            cold = [s.seconds for s in rep.stats if s.cold]
            rows.append({"case": f"engines_{engine}_{w}w", "wall_s": wall, "sim_s_per_s": sim_s / wall,
                         "median_us": wall / (sim_s * float(data["loop"]["rate_hz"])) * 1e6,
                         "rollout_ms": 1e3 * statistics.median(warm) if warm else float("nan"),
                         "cold_ms": 1e3 * statistics.median(cold) if cold else float("nan"),
                         "tasks": rep.tasks, "rollouts_per_task": rep.rollouts_per_task,
                         "task_kb": rep.task_bytes / 1024, "config_kb": rep.shared_bytes / 1024,
                         "note": f"{spec.candidates} x {spec.monte_carlo} runs of {spec.duration_s:g} s, "
                                 f"{w} worker(s), start-up included"})
    rows += _overheads(20 if quick else 200, ray_too="ray" in engines)
    return rows


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_engines [--quick] [--json FILE]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_engines", *sys.argv[1:]]))
