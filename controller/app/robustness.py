"""Monte-Carlo robustness report (``torqueloop robustness CONFIG``).

Across the plausible spread of the real robot's parameters, how often does this controller
stay within the tolerances and the limits?  A ``[robustness]`` table in a run config says
how the plant is drawn and what counts as "within"::

    [robustness]
    samples = 200                # Monte-Carlo runs (--samples)
    seed = 1                     # the draws and each run's plant seed come from it (--seed)
    duration_s = 4.0             # shorter runs (default: the config's)
    engine = "auto"              # where the runs go, as for tune (controller.app.engines):
    address = ""                 #   auto | batch | local | dask | ray, and the cluster address
    task_min_s = 0.1             # work per task of the local, dask and ray engines [s]
    worst_cases = 3              # the worst runs written as run configs (worst_1.toml ...)
    worst_by = "max_position_error_m"   # the summary metric that orders them (larger = worse;
                                 # runs that did not complete come first)
    identification = ""          # identification.json of `torqueloop identify`: mass/inertia and
                                 # friction spreads from its standard deviations (below)
    [robustness.uncertainty]     # dotted config keys -> [low, high] (uniform), [low, high, "log"]
                                 # or [mean, std, "normal"] (cut at 0 for friction, noise, lag)
    "driver.plant.mass_factor" = [1.0, 0.05, "normal"]
    "driver.plant.coulomb" = [0.03, 0.12]
    "driver.plant.current_lag_s" = [0.0002, 0.0008]
    "driver.plant.payload_kg" = [0.0, 0.3]
    [robustness.tolerance]       # metric -> bound: a run is within tolerance when it completed
    max_position_error_m = 0.001 #   and every bound holds (--tolerance METRIC=VALUE)
    torque_peak_ratio_max = 0.8

Tolerances are upper bounds on a run's summary metrics (``rms_position_error_m``,
``max_position_error_m``, ``rms_error_norm``, ``saturation_fraction``, ...) and on the
ones this module adds, except ``singularity_margin_min``, a lower bound:

* ``torque_peak_ratio_max``: the largest peak ``|tau_j|`` / limit_j over the actuators [1];
* ``singularity_margin_min``: the smallest singularity margin along the measured path
  (:meth:`dynamics.base.ParallelModel.singularity` every ``SINGULARITY_EVERY`` cycles of
  the log, parallel models; NaN for serial arms) [1];
* ``max_error_norm``: the largest norm of the tracking error (task space: its position
  part, m, or the angles of an orientation-only task, rad; joint space: rad).

``identification``: the base parameters of an identification carry standard deviations.
A friction base parameter (``theta1.Fv``, ``theta1.Fc``) gives that joint's plant
``viscous``/``coulomb`` as ``N(estimate, std)``; the inertial ones give the relative spread
``s`` (median of std / |estimate|) of ``mass_factor`` and ``inertia_factor``, ``N(1, s)``.
Keys in ``[robustness.uncertainty]`` take precedence.

Every run is a pure function of (config, its draw, its seed), so the report is the same on
every engine and for the same seed (``tests/test_robustness.py``).  The command writes
``samples.csv`` (one row per run: draw, metrics, within), ``report.txt``,
``robustness.json``, ``robustness_hist.png`` (each toleranced metric's histogram with its
bound), ``robustness_envelope.png`` (the tracking error over time: median, 5-95 % band,
maximum, the worst runs) and ``worst_K.toml``: complete run configs that
``torqueloop run`` replays, giving the same metrics.
"""

from __future__ import annotations

import csv
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from dynamics.config import apply_overrides, write_toml
from dynamics.errors import ConfigError, TorqueloopError

from .engines import EngineReport, run_rollouts
from .tune_config import AT_LEAST, REPORTED, NormalSpread, ParamRange, RobustnessSpec

__all__ = ["RobustnessSpec", "RobustnessResult", "run_robustness", "evaluate_sample", "draw_samples",
           "identified_spreads", "write_report", "AT_LEAST", "SINGULARITY_EVERY", "ENVELOPE_POINTS"]

#: the singularity margin is evaluated on every this many cycles of a run's log
SINGULARITY_EVERY = 10
#: points of a run's error envelope (the largest error in each of as many time bins)
ENVELOPE_POINTS = 200
#: keys whose drawn values are cut at 0 (a normal spread may go below)
_NON_NEGATIVE = ("coulomb", "viscous", "current_lag_s", "payload_kg", "noise_std", "mass_factor",
                 "inertia_factor")


def identified_spreads(path: str | Path, joint_names: list[str]) -> dict:
    """Plant spreads from an ``identification.json`` (module docstring).

    Parameters
    ----------
    path : path
        The file ``torqueloop identify`` wrote.
    joint_names : list of str, length n
        The model's joints, in order (the base parameters are named after them).

    Returns
    -------
    dict of str -> NormalSpread
        ``driver.plant.mass_factor``/``inertia_factor`` (``N(1, s)``) and, where the
        friction is a base parameter of every joint, ``driver.plant.viscous``/``coulomb``
        (per joint).

    Raises
    ------
    ConfigError
        The file is missing or is not an identification result.
    """
    p = Path(path)
    try:
        d = json.loads(p.read_text())
        names, est, std = d["base_names"], np.asarray(d["base_ls"], float), np.asarray(d["base_std"], float)
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"not an identification result ({type(err).__name__}: {err})", str(p),
                          "robustness.identification") from err
    out: dict = {}
    drive = {"Fv": "viscous", "Fc": "coulomb"}
    for short, key in drive.items():
        idx = [names.index(f"{j}.{short}") if f"{j}.{short}" in names else None for j in joint_names]
        if all(i is not None for i in idx):
            out[f"driver.plant.{key}"] = NormalSpread(tuple(float(est[i]) for i in idx),
                                                      tuple(float(std[i]) for i in idx), 0.0)
    inertial = [k for k, nm in enumerate(names)
                if nm.rsplit(".", 1)[-1] not in ("Fv", "Fc", "Ia", "offset") and abs(est[k]) > 0]
    if inertial:
        s = float(np.median(std[inertial] / np.abs(est[inertial])))
        out["driver.plant.mass_factor"] = NormalSpread(1.0, s, 0.0)
        out["driver.plant.inertia_factor"] = NormalSpread(1.0, s, 0.0)
    return out


def _cut(key: str, value):
    if any(key.endswith(k) for k in _NON_NEGATIVE):
        return np.maximum(value, 0.0).tolist() if isinstance(value, list) else max(float(value), 0.0)
    return value


def draw_samples(spec: RobustnessSpec, uncertainty: dict) -> list[dict]:
    """The runs' overrides: each draw (in key order, from ``seed``), the run's plant seed
    (``seed * 1000003 + i``: noise, quantisation) and the duration.  Reproducible: the same
    seed gives the same list, whatever engine runs it."""
    rng = np.random.default_rng(np.random.SeedSequence(spec.seed))
    out = []
    for i in range(spec.samples):
        ov = {k: _cut(k, r.draw(rng)) for k, r in uncertainty.items()}
        ov["driver.plant.seed"] = spec.seed * 1000003 + i
        if spec.duration_s is not None:
            ov["loop.duration_s"] = spec.duration_s
        out.append(ov)
    return out


#: trajectories and robot models built by this process's runs (as tune's)
_TRAJECTORIES: dict = {}
_MODELS: dict = {}


def _analyse(spec, result, out_dir: Path | None) -> dict:
    """The robustness metrics of a finished run from its log (module docstring)."""
    from dynamics.base import ParallelModel

    from ..metrics import TASK_LAYOUTS
    from ..telemetry import read_log
    from .run import effective_torque_limit

    out: dict = {}
    tmax = effective_torque_limit(spec)
    peak = np.asarray((result.metrics or {}).get("peak_torque", np.zeros_like(tmax)), float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(np.isfinite(tmax) & (tmax > 0), peak / tmax, 0.0)
    out["torque_peak_ratio_max"] = float(np.max(ratio)) if ratio.size else 0.0
    log = read_log(out_dir) if out_dir is not None and result.n_cycles else None
    if log is None or len(log) == 0:
        out.update(max_error_norm=math.nan, singularity_margin_min=math.nan, _envelope=[], _envelope_t=[])
        return out
    err = np.asarray(log["err"], float)
    if spec.space == "task" and getattr(spec.model, "task_layout", None) in TASK_LAYOUTS:
        pos, ang = TASK_LAYOUTS[spec.model.task_layout]
        err = err[:, list(pos or ang)]        # an orientation-only task: its angles
    e = np.linalg.norm(err, axis=1)
    t = np.asarray(log["t"], float)
    out["max_error_norm"] = float(np.max(e))
    bins = np.array_split(np.arange(len(e)), min(ENVELOPE_POINTS, len(e)))
    out["_envelope"] = [float(np.max(e[b])) for b in bins]
    out["_envelope_t"] = [float(t[b[-1]]) for b in bins]
    margin = math.nan
    model = spec.model
    if isinstance(model, ParallelModel):
        q = np.asarray(log["q"], float)[::SINGULARITY_EVERY]
        X = None
        m = []
        for qi in q:
            try:
                X = np.asarray(model.forward_kinematics_task(qi, guess=X), float)
                m.append(float(model.singularity(qi, X).margin))
            except TorqueloopError:
                m.append(0.0)       # no pose: at or past a singularity
        margin = float(np.min(m)) if m else math.nan
    out["singularity_margin_min"] = margin
    return out


def evaluate_sample(task: tuple) -> tuple[int, int, dict]:
    """One Monte-Carlo run (``(index, 0, data, file, overrides)``) with its log analysed in a
    temporary folder of the worker; returns ``(index, 0, metrics)``."""
    from .run import run_offline_metrics

    i, j, data, file, overrides = task
    try:
        with tempfile.TemporaryDirectory(prefix="torqueloop-robustness-") as tmp:
            metrics = run_offline_metrics(apply_overrides(data, overrides, file=file), file=file,
                                          trajectory_cache=_TRAJECTORIES, model_cache=_MODELS,
                                          out_dir=tmp, analyse=_analyse)
    except TorqueloopError as err:
        metrics = {"status": "error", "error": str(err)}
    return i, j, metrics


@dataclass
class RobustnessResult:
    """The runs of a robustness sweep (:func:`run_robustness`).

    Attributes
    ----------
    spec : RobustnessSpec
    uncertainty : dict
        The distributions drawn (the table's, completed from the identification).
    overrides : list of dict
        Each run's overrides (its draw, seed, duration).
    metrics : list of dict
        Each run's metrics (:func:`evaluate_sample`), in run order.
    report : EngineReport
    """

    spec: RobustnessSpec
    uncertainty: dict
    overrides: list
    metrics: list
    report: EngineReport | None = None
    data: dict = field(default_factory=dict)
    file: str | None = None

    def failures(self, i: int) -> list[str]:
        """Why run ``i`` is out of tolerance (empty: within)."""
        m = self.metrics[i]
        if m.get("status") != "completed":
            return [f"{m.get('status')}: " + (m.get("error") or ";".join(m.get("faults", [])))]
        out = []
        for k, bound in self.spec.tolerance.items():
            v = m.get(k)
            if v is None or not isinstance(v, (int, float)):
                raise ConfigError(f"unknown tolerance metric '{k}' (have: "
                                  f"{sorted(x for x, y in m.items() if isinstance(y, float))})",
                                  self.file, f"robustness.tolerance.{k}")
            ok = (v >= bound) if k in AT_LEAST else (v <= bound)
            if not ok:
                out.append(f"{k} = {v:.4g} {'<' if k in AT_LEAST else '>'} {bound:.4g}")
        return out

    @property
    def within(self) -> np.ndarray:
        """(samples,) bool: the run completed and every tolerance holds."""
        return np.array([not self.failures(i) for i in range(len(self.metrics))])

    def values(self, key: str) -> np.ndarray:
        """(samples,) the metric of each run (NaN where it did not complete)."""
        return np.array([float(m[key]) if m.get("status") == "completed" and key in m else math.nan
                         for m in self.metrics])

    def worst(self) -> list[int]:
        """The worst runs, worst first: not completed, then by ``worst_by`` (larger is worse)."""
        v = self.values(self.spec.worst_by)
        if not np.isfinite(v).any() and all(m.get("status") == "completed" for m in self.metrics):
            raise ConfigError(f"unknown metric '{self.spec.worst_by}'", self.file, "robustness.worst_by")
        key = [(0 if self.metrics[i].get("status") != "completed" else 1,
                -v[i] if np.isfinite(v[i]) else 0.0, i) for i in range(len(v))]
        return [k[2] for k in sorted(key)[:self.spec.worst_cases]]

    def faults(self) -> dict[str, int]:
        """Runs per cause of not completing (fault cause, 'lost', 'error', 'refused')."""
        out: dict[str, int] = {}
        for m in self.metrics:
            if m.get("status") == "completed":
                continue
            causes = {f.split("@")[0] for f in m.get("faults", [])} or {m.get("status", "?")}
            for c in causes:
                out[c] = out.get(c, 0) + 1
        return out

    def worst_config(self, i: int) -> dict:
        """Run ``i`` as a complete run config (``torqueloop run`` replays it)."""
        cfg = apply_overrides(self.data, self.overrides[i], file=self.file)
        cfg["name"] = f"{cfg.get('name', 'run')}_robustness_{i}"
        cfg["description"] = (f"robustness run {i} of seed {self.spec.seed}: "
                              + ", ".join(f"{k} = {_fmt(v)}" for k, v in self.overrides[i].items()))
        return cfg


def _fmt(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(f"{x:.6g}" for x in v) + "]"
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def run_robustness(spec: RobustnessSpec, data: dict, file: str | None, *, workers: int | None = None,
                   engine: str | None = None, progress: Callable | None = None) -> RobustnessResult:
    """Draw the plants, run them on ``engine`` and collect their metrics.

    Parameters
    ----------
    spec : RobustnessSpec
    data : dict
        The run config without ``[robustness]`` (paths absolute).
    file : str or None
        Its path.
    workers, engine, progress
        As :func:`controller.app.engines.run_rollouts` (``engine`` overrides the table's).
    """
    from dynamics import load_model

    uncertainty = dict(spec.uncertainty)
    if spec.identification:
        path = Path(spec.identification)
        if not path.is_absolute() and file:
            path = Path(file).parent / path
        robot = (data.get("robot") or {}).get("file")
        if not robot:
            raise ConfigError("needs [robot] file to name the joints", file, "robot.file")
        names = list(load_model(robot).joint_names)
        uncertainty = {**identified_spreads(path, names), **uncertainty}
    overrides = draw_samples(spec, uncertainty)
    items = [(i, 0, ov) for i, ov in enumerate(overrides)]
    rows, report = run_rollouts(evaluate_sample, data, file, items, engine=engine or spec.engine,
                                workers=workers, address=spec.address, progress=progress,
                                task_min_s=spec.task_min_s)
    return RobustnessResult(spec, uncertainty, overrides, [m for _, _, m in rows], report, data, file)


def _quantiles(v: np.ndarray) -> dict:
    f = v[np.isfinite(v)]
    if not len(f):
        return {}
    return {"min": float(f.min()), "p5": float(np.percentile(f, 5)), "p50": float(np.median(f)),
            "p95": float(np.percentile(f, 95)), "max": float(f.max()), "mean": float(f.mean())}


def summary(result: RobustnessResult) -> dict:
    """The report as a dict (``robustness.json``): share within tolerance, per-tolerance shares,
    distributions, faults, the worst runs."""
    within = result.within
    n = len(within)
    keys = [k for k in dict.fromkeys((*REPORTED, *result.spec.tolerance))
            if np.isfinite(result.values(k)).any()]
    per_tol = {}
    for k, bound in result.spec.tolerance.items():
        v = result.values(k)
        ok = (v >= bound) if k in AT_LEAST else (v <= bound)
        per_tol[k] = {"bound": bound, "kind": "min" if k in AT_LEAST else "max", "share": float(np.mean(ok))}
    return {"samples": n, "seed": result.spec.seed, "within": int(within.sum()),
            "share_within": float(within.mean()) if n else math.nan,
            "completed": int(sum(m.get("status") == "completed" for m in result.metrics)),
            "tolerance": per_tol, "faults": result.faults(),
            "distributions": {k: _quantiles(result.values(k)) for k in keys},
            "uncertainty": {k: _describe(r) for k, r in result.uncertainty.items()},
            "worst": [{"sample": i, result.spec.worst_by: result.metrics[i].get(result.spec.worst_by),
                       "status": result.metrics[i].get("status"), "why": result.failures(i),
                       "overrides": result.overrides[i]} for i in result.worst()]}


def _describe(r) -> str:
    if isinstance(r, NormalSpread):
        return f"normal mean {_fmt(list(r.mean) if isinstance(r.mean, tuple) else r.mean)} " \
               f"std {_fmt(list(r.std) if isinstance(r.std, tuple) else r.std)}"
    if isinstance(r, ParamRange):
        return f"{'log-' if r.log else ''}uniform [{r.low:.6g}, {r.high:.6g}]"
    return str(r)


def format_report(result: RobustnessResult) -> str:
    """The report's text (``report.txt``, printed by the command)."""
    s = summary(result)
    lines = [f"robustness: {s['samples']} runs (seed {s['seed']}), {s['completed']} completed, "
             f"{s['within']} within tolerance: {100 * s['share_within']:.1f} %"]
    lines.append("  uncertainty drawn:")
    lines += [f"    {k:<36} {v}" for k, v in s["uncertainty"].items()]
    if s["tolerance"]:
        lines.append("  tolerance                          bound    share of runs within")
        for k, t in s["tolerance"].items():
            lines.append(f"    {k:<30} {'>=' if t['kind'] == 'min' else '<='} {t['bound']:<10.4g} "
                         f"{100 * t['share']:.1f} %")
    lines.append("  metric                                 min        p5       p50       p95       max")
    for k, q in s["distributions"].items():
        lines.append(f"    {k:<30} " + " ".join(f"{q[x]:9.4g}" for x in ("min", "p5", "p50", "p95", "max")))
    if s["faults"]:
        lines.append("  runs not completed: " + ", ".join(f"{k} {v}" for k, v in sorted(s["faults"].items())))
    for r, w in enumerate(s["worst"], 1):
        val = w[result.spec.worst_by]
        lines.append(f"  worst {r}: run {w['sample']}, {result.spec.worst_by} = "
                     f"{val if val is None else f'{val:.4g}'} ({w['status']}"
                     + (f"; {'; '.join(w['why'])}" if w["why"] else "") + ")")
    return "\n".join(lines)


def write_report(result: RobustnessResult, out: Path, *, plots: bool = True) -> list[Path]:
    """Write ``samples.csv``, ``report.txt``, ``robustness.json``, ``worst_K.toml`` and (``plots``)
    the figures into ``out``; returns the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    keys = list(result.uncertainty)
    mkeys = [k for k in dict.fromkeys((*REPORTED, *result.spec.tolerance))]
    with open(out / "samples.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["sample", "seed", *keys, "status", *mkeys, "within", "why"])
        for i, (ov, m) in enumerate(zip(result.overrides, result.metrics)):
            why = result.failures(i)
            w.writerow([i, ov["driver.plant.seed"], *[_fmt(ov[k]) for k in keys], m.get("status"),
                        *[_fmt(m.get(k, math.nan)) for k in mkeys], int(not why), "; ".join(why)])
    written.append(out / "samples.csv")
    (out / "report.txt").write_text(format_report(result) + "\n")
    written.append(out / "report.txt")
    (out / "robustness.json").write_text(json.dumps(summary(result), indent=2, default=float))
    written.append(out / "robustness.json")
    for r, i in enumerate(result.worst(), 1):
        write_toml(out / f"worst_{r}.toml", result.worst_config(i))
        written.append(out / f"worst_{r}.toml")
    if plots:
        from .plots import plot_robustness
        try:
            written += plot_robustness(result, out)
        except ConfigError:     # no matplotlib: the tables are written
            pass
    return written
