"""Gain search over Monte-Carlo offline runs (``torqueloop tune``).

A ``[tune]`` table in a run config says which config values to search, how the
plant is perturbed in each Monte-Carlo draw, the metric and the penalties::

    [tune]
    method = "random"            # or "grid"
    candidates = 24              # random: number of candidates; grid: points per axis
    monte_carlo = 4              # plant draws per candidate (same draws for every candidate,
                                 # from a random stream of their own: --samples does not change them)
    metric = "rms_position_error_m"  # any key of the run's summary metrics; the score has its unit
    torque_penalty = 0.1         # x (peak |tau| / torque limit), summed over axes, times metric scale
    saturation_penalty = 1.0     # x fraction of cycles with any torque clipped
    duration_s = 4.0             # shorter runs for the search (default: the config's)
    engine = "auto"              # "local" (process pool), "batch" (rollouts advanced together
                                 # in this process, compiled, GIL released), "dask", "ray", or
                                 # "auto": batch when the first run went through the compiled
                                 # offline loop, else local (controller.app.engines)
    address = ""                 # dask scheduler / ray cluster address ("" = start a local one)
    task_min_s = 0.1             # work per task of the local, dask and ray engines [s]
    seed = 1
    [tune.params]                # dotted config keys -> [low, high] (log-uniform if "log" is added)
    "controller.wn_rad_s" = [10.0, 80.0, "log"]
    "controller.zeta" = [0.6, 1.4]
    [tune.uncertainty]           # dotted config keys -> [low, high] drawn uniformly per draw
    "driver.plant.mass_factor" = [0.9, 1.2]
    "driver.plant.coulomb" = [0.02, 0.1]

Each evaluation is a pure function of (config dict, overrides, seed), so the
same task list runs unchanged on a process pool, a Dask cluster or Ray: only
the ``engine`` option changes (:mod:`controller.app.engines`; the rankings and
scores are the same on every engine, ``tests/test_tune_engines.py``).
"""

from __future__ import annotations

import csv
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from dynamics.config import apply_overrides
from dynamics.errors import ConfigError, TorqueloopError

from .engines import EngineReport, run_rollouts
from .tune_config import ParamRange, TuneSpec

__all__ = ["TuneSpec", "ParamRange", "Candidate", "TuneResult", "apply_overrides", "make_tasks", "run_tune", "random_streams",
           "metric_unit", "EDGE_FRACTION", "evaluate_task"]


@dataclass
class Candidate:
    index: int
    values: dict[str, float]
    scores: list[float] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)

    @property
    def score(self) -> float:
        return float(np.mean(self.scores)) if self.scores else math.inf


def make_candidates(spec: TuneSpec, rng: np.random.Generator) -> list[Candidate]:
    names = list(spec.params)
    if spec.method == "grid":
        axes = [spec.params[n].grid(spec.candidates) for n in names]
        combos = itertools.product(*axes)
        return [Candidate(i, {n: float(v) for n, v in zip(names, c)}) for i, c in enumerate(combos)]
    return [Candidate(i, {n: spec.params[n].draw(rng) for n in names}) for i in range(spec.candidates)]


def make_draws(spec: TuneSpec, rng: np.random.Generator) -> list[dict[str, float]]:
    return [{k: r.draw(rng) for k, r in spec.uncertainty.items()} for _ in range(spec.monte_carlo)]


def make_tasks(spec: TuneSpec, data: dict, file: str | None, candidates: list[Candidate],
               draws: list[dict[str, float]]) -> list[tuple]:
    """Every (candidate, draw) as a picklable task tuple for :func:`evaluate_task`."""
    tasks = []
    for c in candidates:
        for j, d in enumerate(draws):
            overrides = dict(d)
            overrides.update(c.values)
            if spec.duration_s is not None:
                overrides["loop.duration_s"] = spec.duration_s
            overrides["driver.plant.seed"] = spec.seed * 1000 + j
            tasks.append((c.index, j, data, file, overrides))
    return tasks


#: trajectories built by this process's tasks (a sweep's runs share theirs; see
#: ``controller.app.run.parse_run``): one worker maps the 3RRR circle once, not once per run
_TRAJECTORIES: dict = {}
#: robot models loaded by this process's tasks, by file path and bytes (likewise shared)
_MODELS: dict = {}


def evaluate_task(task: tuple) -> tuple[int, int, dict]:
    """Run one offline simulation; returns (candidate index, draw index, metrics)."""
    from .run import run_offline_metrics

    ci, j, data, file, overrides = task
    try:
        metrics = run_offline_metrics(apply_overrides(data, overrides, file=file), file=file,
                                      trajectory_cache=_TRAJECTORIES, model_cache=_MODELS)
    except TorqueloopError as err:
        metrics = {"status": "error", "error": str(err)}
    return ci, j, metrics


def score(spec: TuneSpec, metrics: dict) -> float:
    """``metric x (1 + torque_penalty x peak ratio sum + saturation_penalty x clipped fraction)``,
    in the metric's unit (:func:`metric_unit`); inf for a run that did not complete."""
    if metrics.get("status") != "completed":
        return math.inf
    if spec.metric not in metrics:
        raise ConfigError(f"unknown metric '{spec.metric}' (have: {sorted(k for k in metrics if not k.startswith('_'))})",
                          None, "tune.metric")
    m = float(metrics[spec.metric])
    pen = spec.torque_penalty * float(metrics.get("torque_peak_ratio_sum", 0.0))
    pen += spec.saturation_penalty * float(metrics.get("saturation_fraction", 0.0))
    return m * (1.0 + pen)


#: a best value within this fraction of a range's width from a bound is "at the edge"
EDGE_FRACTION = 0.05

#: units of the summary metrics a search can rank by (the score has the metric's unit)
_METRIC_UNITS = {"rms_error_norm": "rad|m", "max_error_norm": "rad|m", "torque_peak_ratio_max": "1",
                 "singularity_margin_min": "1",
                 "saturation_fraction": "1", "torque_peak_ratio_sum": "1", "real_time_factor": "1",
                 "positive_work_j": "J", "wall_time_s": "s"}
_SUFFIX_UNITS = (("_m", "m"), ("_rad", "rad"), ("_s", "s"), ("_j", "J"), ("_nm", "N m"), ("_n", "N"))


def metric_unit(metric: str) -> str:
    """Unit of a summary metric (and so of a score ranked by it), from its name's suffix."""
    if metric in _METRIC_UNITS:
        return _METRIC_UNITS[metric]
    for suffix, unit in _SUFFIX_UNITS:
        if metric.endswith(suffix):
            return unit
    return "metric units"


@dataclass
class TuneResult:
    spec: TuneSpec
    candidates: list[Candidate]
    draws: list[dict[str, float]]
    #: the engine that ran the rollouts (``auto`` resolved)
    engine: str = ""
    #: how the rollouts ran (tasks, bytes, per-rollout worker and time)
    report: EngineReport | None = None

    @property
    def lost(self) -> int:
        """Rollouts whose worker was lost (reported in the table, scored inf)."""
        return sum(1 for c in self.candidates for m in c.metrics if m.get("status") == "lost")

    @property
    def ranked(self) -> list[Candidate]:
        return sorted(self.candidates, key=lambda c: c.score)

    @property
    def best(self) -> Candidate:
        return self.ranked[0]

    @property
    def score_unit(self) -> str:
        """Unit of the score (the metric's; the penalties are dimensionless factors)."""
        return metric_unit(self.spec.metric)

    def edge_warnings(self, fraction: float = EDGE_FRACTION) -> list[str]:
        """Warnings for each parameter whose best value lies at the edge of its search range.

        "At the edge" is within ``fraction`` of the range's width from a bound
        (measured on the log scale for log ranges), or on the first/last point of a
        grid: the optimum may lie outside the range searched.
        """
        best = self.best
        if not math.isfinite(best.score):
            return []
        out = []
        for k, r in self.spec.params.items():
            v = best.values[k]
            lo, hi, x = ((math.log(r.low), math.log(r.high), math.log(v)) if r.log else (r.low, r.high, v))
            u = (x - lo) / (hi - lo)
            tol = 1e-9 if self.spec.method == "grid" else fraction
            side = "low" if u <= tol else ("high" if u >= 1.0 - tol else None)
            if side is not None:
                bound = r.low if side == "low" else r.high
                out.append(f"the best {k} = {v:.5g} is at the {side} edge of the search range "
                           f"[{r.low:.5g}, {r.high:.5g}]: the optimum may lie beyond {bound:.5g}; "
                           "widen the range in [tune.params] and search again")
        return out

    def write_table(self, path: Path) -> None:
        names = list(self.spec.params)
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            unit = self.score_unit
            w.writerow(["rank", "candidate", *names, f"score [{unit}]", f"mean_{self.spec.metric} [{unit}]",
                        "failed_runs", "first_failure"])
            for r, c in enumerate(self.ranked, 1):
                vals = [m.get(self.spec.metric, math.nan) for m in c.metrics if m.get("status") == "completed"]
                failed = sum(1 for m in c.metrics if m.get("status") != "completed")
                why = next((m.get("error") or ";".join(m.get("faults", [])) or m.get("status", "")
                            for m in c.metrics if m.get("status") != "completed"), "")
                w.writerow([r, c.index, *[f"{c.values[n]:.6g}" for n in names], f"{c.score:.6g}",
                            f"{np.mean(vals) if vals else math.nan:.6g}", failed, why])


def random_streams(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent generators for the candidates and for the plant draws, both from ``seed``.

    Spawned from one :class:`numpy.random.SeedSequence`, so the number of
    candidates drawn (``--samples``) does not change the plants, and the first
    candidates are the same whatever the count.
    """
    cand_ss, plant_ss = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(cand_ss), np.random.default_rng(plant_ss)


def run_tune(spec: TuneSpec, data: dict, file: str | None, *, workers: int | None = None,
             engine: str | None = None, progress: Callable | None = None) -> TuneResult:
    """Evaluate every candidate on the same Monte-Carlo draws and rank them."""
    cand_rng, plant_rng = random_streams(spec.seed)
    candidates = make_candidates(spec, cand_rng)
    draws = make_draws(spec, plant_rng)
    tasks = make_tasks(spec, data, file, candidates, draws)
    items = [(ci, j, ov) for ci, j, _, _, ov in tasks]
    rows, report = run_rollouts(evaluate_task, data, file, items, engine=engine or spec.engine,
                                workers=workers, address=spec.address, progress=progress,
                                task_min_s=spec.task_min_s)
    by_index = {c.index: c for c in candidates}
    for ci, j, metrics in rows:
        c = by_index[ci]
        c.metrics.append(metrics)
        c.scores.append(score(spec, metrics))
    return TuneResult(spec, candidates, draws, report.engine, report)
