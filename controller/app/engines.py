"""Where the offline rollouts of a sweep run: this process, a process pool, Dask or Ray.

``torqueloop tune`` (gain search) and ``torqueloop robustness`` (Monte-Carlo over the
plant's uncertainty) both reduce to a list of rollouts ``(key, draw, overrides)`` of one
config: each is a pure function of (config, overrides), the plant's random seed
(``driver.plant.seed``) among the overrides, so a rollout gives the same result on
whichever worker runs it, and the engine changes nothing but where and how fast.

Engines (:data:`EXECUTORS`)
---------------------------
``batch``
    Threads in this process, one rollout at a time each: the clean cycles run in the
    compiled offline loop, which releases the GIL.  Nothing is pickled.
``local``
    A process pool (``spawn``) on this machine.
``dask``
    A ``dask.distributed`` cluster: ``address`` (``"tcp://host:8786"``), or a
    ``LocalCluster`` of ``workers`` single-threaded processes started for the sweep.
    The config is scattered to every worker once; a task carries only its rollouts'
    overrides.  A worker that dies has its task run again on another one (the
    scheduler's ``distributed.scheduler.allowed-failures``, 3 by default); a task
    that still cannot complete comes back, rollout by rollout, with the status
    ``"lost"`` and the error (never a hole in the results).
``ray``
    A Ray cluster (``address``, or a local one): the config put in the object store
    once; tasks retried on a dead worker (``max_retries``), else ``"lost"`` likewise.

Tasks
-----
A task of the pool, Dask and Ray engines holds several rollouts, run one after the
other by :func:`evaluate_chunk` in the worker: enough for ``task_min_s`` of work
(0.1 s by default), sized from one probe rollout run here first (its result is
kept), so that the per-task overhead of the engine (scheduling, transfer) stays a
small part of the task.  A worker process loads the compiled kernels, maps the
trajectory and loads the robot model on its first rollout (the "cold" one) and keeps
them for the next (:data:`_PROCESS`, and the caches of :mod:`controller.app.tune`);
:class:`EngineReport` records, per rollout, the process, whether it was cold, and
its time, and the bytes a task carried.
"""

from __future__ import annotations

import math
import os
import pickle
import socket
import time
from dataclasses import dataclass, field
from typing import Callable

from dynamics.errors import ConfigError

from .tune_config import ENGINES

__all__ = ["RolloutStat", "EngineReport", "EXECUTORS", "evaluate_chunk", "run_rollouts", "lost_metrics",
           "AUTO_BATCH_FRACTION", "TASK_MIN_S"]

#: ``engine = "auto"`` takes the batch engine when at least this fraction of the first run's
#: cycles went through the compiled offline loop (its rollouts then run in parallel threads)
AUTO_BATCH_FRACTION = 0.5
#: work per task of the pool, Dask and Ray engines [s] (default of ``task_min_s``)
TASK_MIN_S = 0.1

#: what this process has run: its first rollout is the cold one (imports, compiled kernels
#: loaded from numba's cache, trajectory mapped); the caches live as long as the process
_PROCESS = {"rollouts": 0}


@dataclass(frozen=True)
class RolloutStat:
    """Where and how long one rollout ran.

    Attributes
    ----------
    pid : int
        Worker process id.
    host : str
        Worker host name.
    cold : bool
        The first rollout this process ran (it loaded the compiled kernels).
    seconds : float
        Wall time of the rollout in the worker [s], parse to metrics.
    """

    pid: int
    host: str
    cold: bool
    seconds: float


@dataclass
class EngineReport:
    """How a sweep ran (:func:`run_rollouts`).

    Attributes
    ----------
    engine : str
        The engine that ran the rollouts (``auto`` resolved).
    tasks : int
        Tasks sent to workers (the probe rollout not counted).
    rollouts_per_task : int
        Rollouts per task (the batch engine: 1, one per thread).
    task_bytes : float
        Mean pickled size of a task as sent [B] (its rollouts' overrides; the pool's tasks
        also carry the config).
    shared_bytes : int
        Pickled size of the config, sent once per worker (Dask, Ray) [B].
    wall_s : float
        Wall time of the whole sweep, probe included [s].
    stats : list of RolloutStat
        One per rollout that came back (in completion order).
    lost : int
        Rollouts reported ``"lost"`` (their worker died and no retry completed them).
    probe_s : float or None
        The probe rollout's loop time here [s], from which the tasks were sized.
    """

    engine: str
    tasks: int = 0
    rollouts_per_task: int = 1
    task_bytes: float = 0.0
    shared_bytes: int = 0
    wall_s: float = 0.0
    stats: list = field(default_factory=list)
    lost: int = 0
    probe_s: float | None = None

    @property
    def workers(self) -> int:
        """Distinct worker processes that ran rollouts."""
        return len({(s.host, s.pid) for s in self.stats})


def lost_metrics(err: BaseException) -> dict:
    """The result of a rollout whose task was lost (a dead worker, not retried to completion)."""
    return {"status": "lost", "error": f"worker lost: {type(err).__name__}: {err}"}


def evaluate_chunk(fn: Callable, data: dict, file: str | None, items: list) -> list:
    """Run a task's rollouts one after the other in this worker.

    Parameters
    ----------
    fn : callable
        ``fn((key, draw, data, file, overrides)) -> (key, draw, metrics)``, importable by name
        (:func:`controller.app.tune.evaluate_task`, :func:`controller.app.robustness.evaluate_sample`).
    data : dict
        The run config (relative paths made absolute).
    file : str or None
        The config's path (error messages, relative paths).
    items : list of (key, draw, overrides)
        The rollouts; ``overrides`` (dotted keys) carry the plant's seed.

    Returns
    -------
    list of (key, draw, metrics, RolloutStat)
    """
    out = []
    host = socket.gethostname()
    for key, draw, overrides in items:
        cold = _PROCESS["rollouts"] == 0
        t0 = time.perf_counter()
        k, d, metrics = fn((key, draw, data, file, overrides))
        dt = time.perf_counter() - t0
        _PROCESS["rollouts"] += 1
        out.append((k, d, metrics, RolloutStat(os.getpid(), host, cold, dt)))
    return out


def _chunks(items: list, per_task: int) -> list[list]:
    return [items[i:i + per_task] for i in range(0, len(items), per_task)]


def _per_task(n: int, workers: int, probe_s: float | None, task_min_s: float) -> int:
    """Rollouts per task: enough for ``task_min_s`` of work at the probe's time per rollout,
    but no fewer tasks than workers."""
    if n == 0:
        return 1
    want = 1 if not probe_s or probe_s <= 0 else math.ceil(task_min_s / probe_s)
    return max(1, min(want, math.ceil(n / max(workers, 1))))


def _tick(progress, done, total):
    if progress:
        progress(done, total)


# -- executors: (fn, data, file, items, workers, address, progress, probe_s, task_min_s, report) -> rows
def _run_batch(fn, data, file, items, workers, address, progress, probe_s, task_min_s, report) -> list:
    """Advance ``workers`` rollouts together in this process (threads).

    The clean cycles of a rollout run in the compiled offline loop
    (:mod:`controller.compiled`), which releases the GIL, so the rollouts of a batch
    advance in parallel on as many cores, sharing this process's compiled code and
    trajectories (no worker start-up, nothing pickled).  A run the compiled loop does
    not cover is correct here too, but its cycles hold the GIL: use ``local`` for those.
    """
    from concurrent.futures import ThreadPoolExecutor

    workers = workers or os.cpu_count() or 1
    report.tasks, report.rollouts_per_task = len(items), 1
    out = []
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tune-batch") as ex:
        for rows in ex.map(lambda it: evaluate_chunk(fn, data, file, [it]), items):
            out += rows
            _tick(progress, len(out), len(items))
    return out


def _run_local(fn, data, file, items, workers, address, progress, probe_s, task_min_s, report) -> list:
    """A process pool (``spawn``); one worker: this process, one rollout after the other."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    workers = workers or os.cpu_count() or 1
    if workers == 1:
        report.tasks, report.rollouts_per_task = len(items), 1
        out = []
        for it in items:
            out += evaluate_chunk(fn, data, file, [it])
            _tick(progress, len(out), len(items))
        return out
    per = _per_task(len(items), workers, probe_s, task_min_s)
    chunks = _chunks(items, per)
    report.tasks, report.rollouts_per_task = len(chunks), per
    report.task_bytes = sum(len(pickle.dumps((fn, data, file, c))) for c in chunks) / max(len(chunks), 1)
    out = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as ex:
        futs = [ex.submit(evaluate_chunk, fn, data, file, c) for c in chunks]
        for f in futs:
            out += f.result()
            _tick(progress, len(out), len(items))
    return out


def _gathered(chunk: list, rows_or_error, report: EngineReport) -> list:
    """A task's rows, or each of its rollouts reported lost with the task's error."""
    if isinstance(rows_or_error, BaseException):
        report.lost += len(chunk)
        return [(k, d, lost_metrics(rows_or_error), None) for k, d, _ in chunk]
    return rows_or_error


def _run_dask(fn, data, file, items, workers, address, progress, probe_s, task_min_s, report) -> list:
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError as err:
        raise ConfigError("engine 'dask' needs dask[distributed] installed "
                          "(pip install 'dask[distributed]')", None, "engine") from err
    cluster = None
    if address:
        client = Client(address, timeout="30s")
    else:
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                               processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        n_workers = max(sum(client.nthreads().values()), 1)
        per = _per_task(len(items), n_workers, probe_s, task_min_s)
        chunks = _chunks(items, per)
        report.tasks, report.rollouts_per_task = len(chunks), per
        report.shared_bytes = len(pickle.dumps(data))
        report.task_bytes = sum(len(pickle.dumps((fn, file, c))) for c in chunks) / max(len(chunks), 1)
        (shared,) = client.scatter([data], broadcast=True, hash=False)
        futs = [client.submit(evaluate_chunk, fn, shared, file, c, pure=False) for c in chunks]
        index = {f.key: i for i, f in enumerate(futs)}
        out = []
        for fut in as_completed(futs):
            try:
                got = fut.result()
            except Exception as err:  # noqa: BLE001 - a lost worker (KilledWorker) or a task error
                got = err
            out += _gathered(chunks[index[fut.key]], got, report)
            _tick(progress, len(out), len(items))
        return out
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _run_ray(fn, data, file, items, workers, address, progress, probe_s, task_min_s, report) -> list:
    try:
        import ray
    except ImportError as err:
        raise ConfigError("engine 'ray' needs ray installed (pip install ray)", None, "engine") from err
    # "local": a new instance of our own, never one another process started on this machine
    ray.init(address=address or "local", num_cpus=None if address else (workers or os.cpu_count()),
             ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    try:
        n_workers = max(int(ray.cluster_resources().get("CPU", 1)), 1)
        per = _per_task(len(items), n_workers, probe_s, task_min_s)
        chunks = _chunks(items, per)
        report.tasks, report.rollouts_per_task = len(chunks), per
        report.shared_bytes = len(pickle.dumps(data))
        report.task_bytes = sum(len(pickle.dumps((fn, file, c))) for c in chunks) / max(len(chunks), 1)
        shared = ray.put(data)
        remote = ray.remote(max_retries=3)(evaluate_chunk)
        refs = [remote.remote(fn, shared, file, c) for c in chunks]
        index = {r: i for i, r in enumerate(refs)}
        out, pending = [], list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            try:
                got = ray.get(ready[0])
            except Exception as err:  # noqa: BLE001 - a dead worker after its retries, or a task error
                got = err
            out += _gathered(chunks[index[ready[0]]], got, report)
            _tick(progress, len(out), len(items))
        return out
    finally:
        ray.shutdown()


EXECUTORS: dict[str, Callable] = {"local": _run_local, "batch": _run_batch, "dask": _run_dask, "ray": _run_ray}
assert set(EXECUTORS) | {"auto"} == set(ENGINES)


def run_rollouts(fn: Callable, data: dict, file: str | None, items: list, *, engine: str = "auto",
                 workers: int | None = None, address: str = "", progress: Callable | None = None,
                 task_min_s: float = TASK_MIN_S) -> tuple[list, EngineReport]:
    """Run every rollout of a sweep on ``engine``.

    Parameters
    ----------
    fn : callable
        One rollout, see :func:`evaluate_chunk`.
    data, file : dict, str or None
        The run config and its path.
    items : list of (key, draw, overrides)
        The rollouts, each with everything that makes it (its plant seed included).
    engine : {"auto", "batch", "local", "dask", "ray"}
        ``auto``: the first rollout here, then ``batch`` if it ran through the compiled
        offline loop, else ``local``.  ``local``, ``dask`` and ``ray`` run the first
        rollout here too (the probe that sizes their tasks, see ``task_min_s``).
    workers : int or None
        Threads (batch), processes (local, a local Dask or Ray cluster); default: cores.
    address : str
        Dask scheduler or Ray cluster address (``""``: start a local one).
    progress : callable or None
        ``progress(done, total)`` after each task.
    task_min_s : float
        Work per task of the pool, Dask and Ray engines [s].

    Returns
    -------
    rows : list of (key, draw, metrics)
        One per rollout, sorted by (key, draw); a rollout whose task was lost has
        ``metrics["status"] == "lost"``.
    report : EngineReport
    """
    if engine != "auto" and engine not in EXECUTORS:
        raise ConfigError(f"unknown engine {engine!r} (choose from {['auto', *sorted(EXECUTORS)]})",
                          file, "engine")
    t0 = time.perf_counter()
    rows: list = []
    rest = list(items)
    probe_s = None
    if rest and (engine == "auto" or (engine != "batch" and (workers or 0) != 1)):
        rows = evaluate_chunk(fn, data, file, rest[:1])
        rest = rest[1:]
        probe_s = rows[0][2].get("wall_time_s") or rows[0][3].seconds
        if engine == "auto":
            engine = ("batch" if rows[0][2].get("compiled_fraction", 0.0) >= AUTO_BATCH_FRACTION
                      else "local")
        _tick(progress, 1, len(items))
    elif engine == "auto":
        engine = "batch"
    report = EngineReport(engine, probe_s=probe_s)
    if rest:
        done0 = len(rows)
        step = None if progress is None else (lambda d, t: progress(d + done0, t + done0))
        rows += EXECUTORS[engine](fn, data, file, rest, workers, address, step, probe_s, task_min_s, report)
    report.wall_s = time.perf_counter() - t0
    report.stats = [r[3] for r in rows if r[3] is not None]
    return sorted(((k, d, m) for k, d, m, _ in rows), key=lambda r: (r[0], r[1])), report
