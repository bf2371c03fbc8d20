"""The ``[tune]`` and ``[robustness]`` tables of a run config (what :mod:`controller.app.tune`
searches, what :mod:`controller.app.robustness` draws; each documented in its module).

Kept apart from the sweeps themselves so that the run-config builder
(:mod:`controller.app.run`) can validate both tables without importing the
sweeps, which import the builder (one-way dependency: tune -> run -> tune_config).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dynamics.config import Section

__all__ = ["ENGINES", "ParamRange", "NormalSpread", "TuneSpec", "RobustnessSpec", "parse_ranges", "AT_LEAST", "REPORTED"]

#: where the evaluations run (:data:`controller.app.tune.EXECUTORS` implements each; "auto"
#: picks "batch" or "local", see :func:`controller.app.tune.run_tune`)
ENGINES = ("auto", "local", "batch", "dask", "ray")


@dataclass(frozen=True)
class ParamRange:
    low: float
    high: float
    log: bool = False

    def draw(self, rng: np.random.Generator) -> float:
        if self.log:
            return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return float(rng.uniform(self.low, self.high))

    def grid(self, n: int) -> np.ndarray:
        if n == 1:
            return np.array([math.sqrt(self.low * self.high) if self.log else 0.5 * (self.low + self.high)])
        if self.log:
            return np.geomspace(self.low, self.high, n)
        return np.linspace(self.low, self.high, n)


@dataclass(frozen=True)
class NormalSpread:
    """A normal distribution ``N(mean, std**2)`` of a config value, cut at ``low`` (e.g. 0 for a
    friction coefficient); ``mean`` and ``std`` may be per-joint tuples (a list is drawn)."""

    mean: float | tuple
    std: float | tuple
    low: float = -math.inf

    def draw(self, rng: np.random.Generator) -> float | list:
        x = np.maximum(rng.normal(np.asarray(self.mean, float), np.asarray(self.std, float)), self.low)
        return x.tolist() if np.ndim(x) else float(x)


def parse_ranges(sub: Section | None, *, normal: bool = False) -> dict:
    """A table of dotted config keys -> ``[low, high]`` (uniform), ``[low, high, "log"]``
    (log-uniform) or, with ``normal``, ``[mean, std, "normal"]``; errors name the key.

    Returns
    -------
    dict of str -> ParamRange or NormalSpread
    """
    out: dict = {}
    if sub is None:
        return out
    for key in list(sub.data):
        v = sub.raw(key)
        tag = v[2] if isinstance(v, list) and len(v) == 3 else None
        if tag not in (None, "log") and not (normal and tag == "normal"):
            allowed = "'log' or 'normal'" if normal else "'log'"
            raise sub.error(key, f"the third entry may be {allowed}, got {tag!r}")
        arr = sub.as_array(key, v[:2] if tag else v, (2,))
        if tag == "normal":
            if not arr[1] >= 0:
                raise sub.error(key, f"needs [mean, std, \"normal\"] with std >= 0, got {v!r}")
            out[key] = NormalSpread(float(arr[0]), float(arr[1]))
            continue
        if not arr[0] < arr[1]:
            raise sub.error(key, f"needs [low, high] with low < high, got {v!r}")
        if tag == "log" and arr[0] <= 0:
            raise sub.error(key, "a log range needs low > 0")
        out[key] = ParamRange(float(arr[0]), float(arr[1]), tag == "log")
    return out


@dataclass
class TuneSpec:
    params: dict[str, ParamRange]
    uncertainty: dict[str, ParamRange]
    method: str = "random"
    candidates: int = 16
    monte_carlo: int = 3
    metric: str = "rms_position_error_m"
    torque_penalty: float = 0.0
    saturation_penalty: float = 1.0
    duration_s: float | None = None
    engine: str = "auto"
    address: str = ""
    task_min_s: float = 0.1
    seed: int = 1

    @staticmethod
    def from_section(sec: Section) -> "TuneSpec":
        spec = TuneSpec(
            params=parse_ranges(sec.section("params")),
            uncertainty=parse_ranges(sec.section("uncertainty", {})),
            method=sec.str("method", "random", choices=["random", "grid"]),
            candidates=sec.int("candidates", 16, minimum=1,
                               doc="random: number of candidates; grid: points per axis (the grid has "
                                   "candidates ** (number of params) points, each run monte_carlo times)"),
            monte_carlo=sec.int("monte_carlo", 3, minimum=1),
            metric=sec.str("metric", "rms_position_error_m"),
            torque_penalty=sec.float("torque_penalty", 0.0, minimum=0.0),
            saturation_penalty=sec.float("saturation_penalty", 1.0, minimum=0.0),
            duration_s=sec.float("duration_s", None, minimum=0.0, strict_min=True),
            engine=sec.str("engine", "auto", choices=sorted(ENGINES)),
            address=sec.str("address", ""),
            task_min_s=sec.float("task_min_s", 0.1, minimum=0.0),
            seed=sec.int("seed", 1),
        )
        if not spec.params:
            raise sec.error("params", "at least one parameter to search is needed")
        sec.finish()
        return spec

    def n_candidates(self) -> int:
        """Candidates the search evaluates: ``candidates`` (random), ``candidates ** len(params)`` (grid)."""
        return self.candidates ** len(self.params) if self.method == "grid" else self.candidates

    def plan(self) -> str:
        """What the search will run, said before it starts: candidates x plant draws = runs."""
        n = self.n_candidates()
        how = (f"grid of {self.candidates} points per axis on {len(self.params)} axes = {n} candidates"
               if self.method == "grid" else f"{n} random candidates")
        return f"{how} x {self.monte_carlo} plant draws = {n * self.monte_carlo} runs"


#: robustness tolerances that are lower bounds (the others are upper bounds)
AT_LEAST = frozenset({"singularity_margin_min"})
#: metrics the robustness report always gives the distribution of
REPORTED = ("rms_position_error_m", "max_position_error_m", "rms_error_norm",
            "torque_peak_ratio_max", "saturation_fraction", "singularity_margin_min")


@dataclass
class RobustnessSpec:
    """The ``[robustness]`` table (module docstring).

    Attributes
    ----------
    uncertainty : dict of str -> ParamRange or NormalSpread
        Dotted config key -> its distribution.
    tolerance : dict of str -> float
        Metric -> bound (upper; lower for :data:`AT_LEAST`).
    samples, seed, worst_cases : int
        Runs, seed, worst runs written as configs.
    duration_s : float or None
        Run duration [s] (None: the config's).
    engine, address : str
        Where the runs go (:mod:`controller.app.engines`).
    task_min_s : float
        Work per task of the local, dask and ray engines [s].
    worst_by : str
        The metric that orders the worst runs (larger is worse).
    identification : str
        Path of an ``identification.json`` ("" none).
    """

    uncertainty: dict
    tolerance: dict
    samples: int = 100
    seed: int = 1
    duration_s: float | None = None
    engine: str = "auto"
    address: str = ""
    task_min_s: float = 0.1
    worst_cases: int = 3
    worst_by: str = "max_position_error_m"
    identification: str = ""

    @staticmethod
    def from_section(sec: Section) -> "RobustnessSpec":
        """Read and validate a ``[robustness]`` table; errors name the file and the field."""
        tol_sec = sec.section("tolerance", {})
        # a margin's lower bound is within the safety guard's plausible range (SAFETY_RANGES):
        # below it the robustness check could never fail
        from ..safety import SAFETY_RANGES
        lo, hi = SAFETY_RANGES["singularity_margin_min"][:2]
        tolerance = {k: (tol_sec.float(k, minimum=lo, maximum=hi) if k in AT_LEAST else tol_sec.float(k))
                     for k in list(tol_sec.data)}
        tol_sec.finish()
        spec = RobustnessSpec(
            uncertainty=parse_ranges(sec.section("uncertainty", {}), normal=True),
            tolerance=tolerance,
            samples=sec.int("samples", 100, minimum=1),
            seed=sec.int("seed", 1, minimum=0),
            duration_s=sec.float("duration_s", None, minimum=0.0, strict_min=True),
            engine=sec.str("engine", "auto", choices=sorted(ENGINES)),
            address=sec.str("address", ""),
            task_min_s=sec.float("task_min_s", 0.1, minimum=0.0),
            worst_cases=sec.int("worst_cases", 3, minimum=0),
            worst_by=sec.str("worst_by", "max_position_error_m"),
            identification=sec.str("identification", ""),
        )
        sec.finish()
        return spec
