"""The tune sweep on a cluster gives what it gives on one machine: Dask and Ray against the local
and batch engines, to the bit; a worker killed mid-sweep is retried or reported run by run.

The shipped sweep (``hil_configs/runs/3rrr_circle_tune.toml``: its parameters, plant
uncertainty, metric and penalties) is cut to 8 candidates x 2 plant draws of 2 s so the file
stays short.  The Dask cluster is started two ways: a ``LocalCluster`` (what ``--engine dask``
does without an address) and a scheduler plus two workers as separate processes on loopback,
reached by address, as on a real cluster.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from controller.app.commands import _absolutise
from controller.app.engines import TASK_MIN_S
from controller.app.tune import TuneSpec, make_candidates, make_draws, make_tasks, random_streams, run_tune
from dynamics.config import Section, read_toml

ROOT = Path(__file__).resolve().parents[1]
TUNE = ROOT / "hil_configs" / "runs" / "3rrr_circle_tune.toml"

#: wall-clock figures: not results
TIMING = {"wall_time_s", "real_time_factor", "timing", "timing_health"}


def _sweep(**kw) -> tuple[TuneSpec, dict]:
    data = read_toml(TUNE)
    spec = TuneSpec.from_section(Section(data["tune"], str(TUNE), "tune"))
    spec.candidates, spec.monte_carlo, spec.duration_s = 8, 2, 2.0
    for k, v in kw.items():
        setattr(spec, k, v)
    base = _absolutise({k: v for k, v in data.items() if k != "tune"}, TUNE.parent)
    return spec, base


def _same_metrics(a: dict, b: dict, where: str) -> None:
    """Every result of two runs equal, bit for bit (wall-clock figures aside)."""
    assert a.keys() == b.keys(), where
    for k in a:
        if k not in TIMING:
            assert np.array_equal(np.asarray(a[k], dtype=object), np.asarray(b[k], dtype=object)), (where, k)


def _same_ranking(ref, other, name: str) -> None:
    assert [c.index for c in ref.ranked] == [c.index for c in other.ranked], name
    for a, b in zip(ref.candidates, other.candidates):
        assert a.values == b.values
        assert a.scores == b.scores, (name, a.index, a.scores, b.scores)       # bit for bit
        assert len(b.metrics) == ref.spec.monte_carlo
        for j, (ma, mb) in enumerate(zip(a.metrics, b.metrics)):
            _same_metrics(ma, mb, f"{name}: candidate {a.index} draw {j}")


@pytest.fixture(scope="module")
def reference():
    """The sweep on the local engine in this process (one rollout after the other)."""
    spec, base = _sweep()
    res = run_tune(spec, base, str(TUNE), workers=1, engine="local")
    assert all(math.isfinite(s) for c in res.candidates for s in c.scores)
    return res


def test_seeds_travel_with_the_tasks():
    """Each task carries its plant's seed: a rollout is the same wherever it runs."""
    spec, base = _sweep()
    cand_rng, plant_rng = random_streams(spec.seed)
    tasks = make_tasks(spec, base, str(TUNE), make_candidates(spec, cand_rng), make_draws(spec, plant_rng))
    assert [ov["driver.plant.seed"] for _, j, _, _, ov in tasks] == [spec.seed * 1000 + j for _, j, _, _, _ in tasks]
    assert all(ov["loop.duration_s"] == 2.0 and "driver.plant.mass_factor" in ov for *_, ov in tasks)


def test_batch_engine_equals_local(reference):
    spec, base = _sweep()
    _same_ranking(reference, run_tune(spec, base, str(TUNE), workers=2, engine="batch"), "batch")


def test_dask_local_cluster_equals_local(reference):
    pytest.importorskip("dask.distributed", reason="dask[distributed] is in the test extra")
    spec, base = _sweep()
    res = run_tune(spec, base, str(TUNE), workers=2, engine="dask")
    _same_ranking(reference, res, "dask LocalCluster")
    rep = res.report
    assert rep.engine == "dask" and rep.lost == 0
    _check_tasks(rep, n_rollouts=16, workers=2)


def _check_tasks(rep, *, n_rollouts: int, workers: int) -> None:
    """Tasks of at least TASK_MIN_S of work at the probe's time per rollout (fewer only where
    that would leave a worker idle); compiled kernels loaded once per worker process, not per task."""
    assert rep.probe_s and rep.probe_s > 0
    cap = math.ceil((n_rollouts - 1) / workers)
    assert rep.rollouts_per_task == min(max(1, math.ceil(TASK_MIN_S / rep.probe_s)), cap)
    assert rep.rollouts_per_task == cap or rep.rollouts_per_task * rep.probe_s >= TASK_MIN_S
    assert rep.tasks == math.ceil((n_rollouts - 1) / rep.rollouts_per_task)
    # one cold rollout per process (the probe's process, this one, included): the kernels, the
    # trajectory and the model are loaded once per worker, then reused by every later task
    procs = {(s.host, s.pid) for s in rep.stats}
    assert sum(s.cold for s in rep.stats) <= len(procs)
    for proc in procs:
        mine = [s for s in rep.stats if (s.host, s.pid) == proc]
        assert sum(s.cold for s in mine) <= 1 and (mine[0].cold or proc[1] == os.getpid())
    # bytes a task carries: its rollouts' overrides, not the config (scattered once)
    assert rep.task_bytes < 0.5 * rep.shared_bytes + 400 * rep.rollouts_per_task


@contextlib.contextmanager
def dask_processes(tmp_path: Path, n_workers: int = 2, env_extra: dict | None = None):
    """A ``dask scheduler`` and ``n_workers`` ``dask worker`` processes on 127.0.0.1; yields the
    scheduler's address and the worker processes."""
    pytest.importorskip("dask.distributed", reason="dask[distributed] is in the test extra")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               **(env_extra or {}))
    sched_file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--no-dashboard", "--scheduler-file", str(sched_file)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        t_end = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < t_end:
            time.sleep(0.1)
        assert sched_file.exists(), "the scheduler did not start"
        workers = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                     str(sched_file), "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                     "--host", "127.0.0.1"],
                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for _ in range(n_workers)]
        procs += workers
        from dask.distributed import Client

        import json
        address = json.loads(sched_file.read_text())["address"]
        with Client(address, timeout="60s") as c:
            c.wait_for_workers(n_workers, timeout=120)
        yield address, workers
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def test_dask_scheduler_and_two_worker_processes_equal_local(reference, tmp_path):
    spec, base = _sweep()
    with dask_processes(tmp_path) as (address, _):
        spec.address = address
        res = run_tune(spec, base, str(TUNE), engine="dask")
    _same_ranking(reference, res, "dask scheduler + 2 workers")
    _check_tasks(res.report, n_rollouts=16, workers=2)
    assert res.report.workers == 3          # the two workers and the probe (this process)


def _kill_second_worker(workers):
    """A progress callback that SIGKILLs the second worker once the first cluster task came back
    (the first call is the probe run here): it dies with a task in hand."""
    state = {"killed": False}

    def progress(done, total):
        if done > 1 and not state["killed"]:
            state["killed"] = True
            os.kill(workers[1].pid, signal.SIGKILL)
    return progress, state


def test_a_killed_dask_worker_is_retried(reference, tmp_path):
    """The scheduler runs the dead worker's task again on the other one: no run is missing."""
    spec, base = _sweep(task_min_s=0.03)
    with dask_processes(tmp_path) as (address, workers):
        spec.address = address
        progress, state = _kill_second_worker(workers)
        res = run_tune(spec, base, str(TUNE), engine="dask", progress=progress)
        assert state["killed"] and workers[1].wait(timeout=10) == -signal.SIGKILL
    assert res.lost == 0
    _same_ranking(reference, res, "dask, a worker killed")


def test_a_killed_dask_worker_not_retried_is_reported_run_by_run(reference, tmp_path):
    """With no retry allowed (``allowed-failures = 0``) the dead worker's runs come back as
    ``lost``, each under its candidate (scored inf, in the table): never a hole in the ranking."""
    spec, base = _sweep(task_min_s=0.03)
    with dask_processes(tmp_path, env_extra={"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}) as (
            address, workers):
        spec.address = address
        progress, state = _kill_second_worker(workers)
        res = run_tune(spec, base, str(TUNE), engine="dask", progress=progress)
    assert state["killed"]
    assert res.lost >= 1 and res.report.lost == res.lost
    for ref, c in zip(reference.candidates, res.candidates):
        assert len(c.metrics) == spec.monte_carlo                   # every run accounted for
        for j, (mr, m) in enumerate(zip(ref.metrics, c.metrics)):
            if m["status"] == "lost":
                assert "worker lost" in m["error"] and "KilledWorker" in m["error"]
                assert c.scores[j] == math.inf and c.score == math.inf
            else:
                _same_metrics(mr, m, f"candidate {c.index} draw {j}")
                assert c.scores[j] == ref.scores[j]
    table = tmp_path / "ranking.csv"
    res.write_table(table)
    assert "worker lost" in table.read_text()


def test_ray_equals_local(reference):
    """Ray is optional (``pip install 'torqueloop[ray]'``): the same equalities when installed."""
    pytest.importorskip("ray")
    spec, base = _sweep()
    res = run_tune(spec, base, str(TUNE), workers=2, engine="ray")
    _same_ranking(reference, res, "ray")
    assert res.report.engine == "ray" and res.report.lost == 0
