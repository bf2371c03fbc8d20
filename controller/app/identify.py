"""``torqueloop identify CONFIG``: excite, estimate, validate and write an identified robot file.

An identify config is a run config (``[robot]``, ``[controller]``,
``[driver]``, ``[loop]``, ``[safety]``: the same tables ``torqueloop run``
reads, simulated plant or hardware) without a ``[trajectory]`` and with an
``[identify]`` table::

    [identify]
    offset = false                  # per-joint torque offset parameters
    [identify.excitation]           # trajectories.excitation.design_excitation
    start = [0.0, 0.3, -0.6]        # rest pose: joints, or the 3RRR platform pose (default
                                    # zeros / the home pose; mechanism files: the home joints)
    amplitude = [1.2, 0.6, 0.6]     # max |x - start| (3RRR: [m, m, rad] in task space)
    velocity_max = 2.0              # [rad/s] (default: limit_fraction x robot limits)
    acceleration_max = 8.0          # [rad/s^2] (default: unchecked)
    limit_fraction = 0.8            # fraction of the robot's velocity/torque limits used
    singularity_margin = 0.05       # parallel robots: min SingularityReport.margin along the path
    harmonics = 5
    period_s = 8.0
    periods = 2
    iterations = 40                 # L-BFGS-B iterations of the condition-number design
    starts = 4                      # random starts; the best design is kept (the criterion is not convex)
    criterion = "cond"              # or "logdet"
    seed = 1
    [identify.validation]           # the held-out run: another excitation, same limits
    seed = 2                        # (and any key of [identify.excitation] to change)
    [identify.estimation]           # dynamics.identification.estimation.prepare
    cutoff_hz = 4.0
    decimate = 10
    trim_s = 0.3
    velocity_min = 0.05             # drop samples with a joint slower than this (stiction)
    [identify.compare]              # optional: tracking with nominal vs identified (vs exact)
    runs = ["../runs/seed000_fast.toml"]

Steps: design the excitation and the validation trajectory; write each as
a complete run config (``excitation.toml``, ``validation.toml``: a
``[trajectory] type = "fourier"`` table, so ``torqueloop run`` replays them)
and run it through the ordinary run machinery (loop, driver, safety; the
CLI asks for the hardware confirmation first); estimate from the excitation
log; predict the validation torques; write ``identified_robot.toml`` (the
nominal robot file with the identified parameters: ``run`` takes it as is),
``identification.json``, ``report.txt`` and plots.  On the simulated plant
the plant's own parameters are known: the report gives the base-parameter
errors, and ``exact_robot.toml`` holds them for the tracking comparison.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from dynamics import load_model
from dynamics.base import Model, ParallelModel
from dynamics.config import Section, read_toml, write_toml
from dynamics.errors import ConfigError, TorqueloopError
from dynamics.identification import parameter_set, standard_parameters
from dynamics.identification.base import BaseParameters, base_parameters
from dynamics.identification.estimation import (Estimate, Samples, data_regressor, estimate_delay,
                                                identify as estimate, prepare, torque_prediction_errors)
from dynamics.identification.robotfile import write_robot_file

__all__ = ["IdentifySpec", "load_identify", "run_identification", "IdentifyResult", "plant_truth",
           "tracking_comparison"]

_EXC_KEYS = ("start", "amplitude", "velocity_max", "acceleration_max", "limit_fraction", "singularity_margin",
             "harmonics", "period_s", "periods", "iterations", "criterion", "seed", "starts")


@dataclass
class IdentifySpec:
    """A parsed identify config (module docstring)."""

    name: str
    file: str
    base_dir: Path
    run_data: dict
    model: Model
    robot_file: Path
    offset: bool
    excitation: dict
    validation: dict
    estimation: dict
    compare: list = field(default_factory=list)


def _excitation_opts(sec: Section, model: Model, defaults: dict | None = None) -> dict:
    d = dict(defaults or {})
    task = hasattr(model, "platform_joints")
    dim = 3 if task else model.dof
    for key in _EXC_KEYS:
        if not sec.has(key):
            continue
        if key in ("start", "amplitude", "velocity_max", "acceleration_max"):
            v = sec.raw(key)
            arr = sec.as_array(key, [v] * (model.dof if key.endswith("max") else dim)
                               if isinstance(v, (int, float)) else v,
                               (model.dof if key.endswith("max") else dim,))
            if key != "start" and np.any(arr <= 0):
                raise sec.error(key, "must be > 0")
            d[key] = arr
        elif key in ("harmonics", "periods", "iterations", "seed", "starts"):
            d[key] = sec.int(key, minimum={"harmonics": 2, "periods": 1, "starts": 1}.get(key, 0),
                             maximum=64 if key == "starts" else None)
        elif key == "criterion":
            d[key] = sec.str(key, choices=["cond", "logdet"])
        elif key == "limit_fraction":
            d[key] = sec.float(key, minimum=0.0, strict_min=True, maximum=1.0)
        else:
            d[key] = sec.float(key, minimum=0.0, strict_min=key == "period_s")
    sec.finish()
    if "amplitude" not in d:
        raise sec.error("amplitude", "required field is missing (max |x - start| of the excitation)")
    return d


def load_identify(path, *, overrides: dict | None = None) -> IdentifySpec:
    """Read and validate an identify config (errors name the file and the field)."""
    from dynamics.config import apply_overrides

    p = Path(path)
    data = read_toml(p)
    if overrides:
        data = apply_overrides(data, dict(overrides), file=str(p))
    if "identify" not in data:
        raise ConfigError("no [identify] table (see `torqueloop identify --help`)", str(p), "identify")
    if "trajectory" in data:
        raise ConfigError("an identify config has no [trajectory]: the excitation is designed from "
                          "[identify.excitation]", str(p), "trajectory")
    root = Section(data, str(p))
    isec = root.section("identify")
    rob = root.section("robot")
    robot_file = (p.parent / rob.str("file")).resolve()
    if not robot_file.exists():
        raise rob.error("file", f"robot file not found: {robot_file}")
    if robot_file.suffix.lower() != ".toml":
        raise rob.error("file", "identify writes the identified parameters into a TOML robot file (DH "
                                "serial, 3RRR or mechanism); a URDF's regressor is available from "
                                "dynamics.identification, but not its output file")
    model = load_model(robot_file)
    try:
        parameter_set(model)
    except TorqueloopError as err:
        raise rob.error("file", str(err)) from err
    offset = isec.bool("offset", False)
    exc = _excitation_opts(isec.section("excitation"), model)
    val = _excitation_opts(isec.section("validation", {}), model, exc | {"seed": exc.get("seed", 0) + 1})
    esec = isec.section("estimation", {})
    est = {"cutoff_hz": esec.float("cutoff_hz", 4.0, minimum=0.0, strict_min=True),
           "order": esec.int("order", 4, minimum=1, maximum=10),
           "decimate": esec.int("decimate", None, minimum=1),
           "trim_s": esec.float("trim_s", 0.3, minimum=0.0),
           "velocity_min": esec.float("velocity_min", 0.05, minimum=0.0)}
    delay = esec.raw("torque_delay_s", "auto")
    if delay != "auto":
        delay = esec.float("torque_delay_s", minimum=0.0)
    est["torque_delay_s"] = delay
    esec.finish()
    csec = isec.section("compare", {})
    compare = []
    for i, r in enumerate(csec.raw("runs", [])):
        if not isinstance(r, str):
            raise ConfigError(f"expected a path, got {r!r}", str(p), f"identify.compare.runs[{i}]")
        rp = (p.parent / r).resolve()
        if not rp.exists():
            raise ConfigError(f"run config not found: {rp}", str(p), f"identify.compare.runs[{i}]")
        compare.append(rp)
    csec.finish()
    isec.finish()
    run_data = {k: v for k, v in data.items() if k != "identify"}
    run_data = _absolute_paths(run_data, p.parent)
    name = data.get("name", p.stem)
    return IdentifySpec(str(name), str(p), p.parent, run_data, model, robot_file, offset, exc, val, est, compare)


def _absolute_paths(data: dict, base_dir: Path) -> dict:
    d = copy.deepcopy(data)
    if isinstance(d.get("robot"), dict) and isinstance(d["robot"].get("file"), str):
        d["robot"]["file"] = str((base_dir / d["robot"]["file"]).resolve())
    plant = d.get("driver", {}).get("plant") if isinstance(d.get("driver"), dict) else None
    if isinstance(plant, dict) and isinstance(plant.get("robot"), str):
        plant["robot"] = str((base_dir / plant["robot"]).resolve())
    return d


# ---------------------------------------------------------------------------
# excitation design and runs
# ---------------------------------------------------------------------------
def design(model: Model, opts: dict, base: BaseParameters):
    """(trajectory, info, task) for excitation options (see :func:`design_excitation`)."""
    from trajectories.excitation import ExcitationLimits, design_excitation

    task = hasattr(model, "platform_joints")
    frac = opts.get("limit_fraction", 0.8)
    lim = model.limits

    def _fin(v):
        v = np.asarray(v, dtype=float)
        return v if np.all(np.isfinite(v)) else (np.where(np.isfinite(v), v, 1e300) if np.any(np.isfinite(v)) else None)

    vel = opts.get("velocity_max")
    if vel is None:
        vel = _fin(frac * lim.velocity_max)
    tq = _fin(frac * lim.torque_max)
    limits = ExcitationLimits(amplitude=opts["amplitude"], velocity=vel, acceleration=opts.get("acceleration_max"),
                              torque=tq, position_min=_fin(lim.position_min), position_max=_fin(lim.position_max),
                              singularity_margin=opts.get("singularity_margin",
                                                          0.05 if isinstance(model, ParallelModel) else 0.0))
    traj, info = design_excitation(model, limits, start=opts.get("start"), harmonics=opts.get("harmonics", 5),
                                   period_s=opts.get("period_s", 10.0), periods=opts.get("periods", 1),
                                   iterations=opts.get("iterations", 40), seed=opts.get("seed", 0),
                                   criterion=opts.get("criterion", "cond"), base=base,
                                   starts=opts.get("starts", 4))
    return traj, info, task


def excitation_config(spec: IdentifySpec, traj, task: bool, name: str) -> dict:
    """A complete run config (dict) that executes the excitation ``traj``."""
    series = traj.task if task else traj
    d = copy.deepcopy(spec.run_data)
    d["name"] = f"{spec.name}-{name}"
    d["description"] = f"{name} trajectory of identify config {spec.file}"
    tr = {"type": "fourier", **series.as_dict()}
    if task:
        tr["space"] = "task"
    d["trajectory"] = tr
    d.setdefault("loop", {})
    d["loop"] = dict(d["loop"])
    d["loop"]["duration_s"] = float(series.duration_s)
    return d


def execute_config(data: dict, file: str, out_dir: Path, confirm: Callable | None = None,
                   run_progress: Callable | None = None):
    """Parse, (confirm,) build and run a run-config dict; returns (spec, result).

    ``run_progress(clock, total_s)``: a clock wrapper with ``done()`` that shows the run's
    progress (:func:`controller.app.commands.run_progress`; offline runs only)."""
    from .run import build_run, parse_run

    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = out_dir.parent / f"{out_dir.name}.toml"
    write_toml(cfg, data)
    spec = parse_run(data, file=str(cfg), base_dir=cfg.parent)
    if confirm is not None:
        confirm(spec)
    run = build_run(spec, out_dir=out_dir, meta={"identify": file})
    bar = None
    if run_progress is not None and not spec.hardware:
        bar = run.loop.clock = run_progress(run.loop.clock, spec.duration_s)
    try:
        result = run.execute()
    finally:
        if bar is not None:
            bar.done()
    if result.status != "completed":
        raise TorqueloopError(f"run '{spec.name}' did not complete ({result.status}): "
                              + "; ".join(str(f) for f in result.faults))
    return spec, result


def log_samples(log_dir: Path, est_opts: dict, model: Model | None = None, base: BaseParameters | None = None,
                offset: bool = False) -> tuple[Samples, float]:
    """Processed samples of a run log (measured q and tau_meas) and the torque delay used [s].

    ``est_opts["torque_delay_s"] == "auto"`` estimates the delay from this log
    (:func:`estimate_delay`, needs ``model`` and ``base``).
    """
    from ..telemetry import read_log

    log = read_log(log_dir)
    opts = dict(est_opts)
    delay = opts.pop("torque_delay_s", 0.0)
    if delay == "auto":
        delay = estimate_delay(model, log["t"], log["q"], log["tau_meas"], base, offset=offset, **opts)
    return prepare(log["t"], log["q"], log["tau_meas"], delay_s=delay, **opts), float(delay)


# ---------------------------------------------------------------------------
# ground truth of a simulated plant
# ---------------------------------------------------------------------------
def plant_truth(run_data: dict, model: Model, offset: bool = False):
    """(plant model, standard parameters incl. the plant's friction) of a simulated run, or None for hardware."""
    drv = run_data.get("driver", {})
    if not str(drv.get("type", "")).startswith("sim_"):
        return None
    plant = dict(drv.get("plant", {}))
    base = load_model(plant["robot"]) if "robot" in plant else model
    mf = float(plant.get("mass_factor", 1.0))
    pm = base.scaled(mf, float(plant.get("inertia_factor", mf)))
    pi = standard_parameters(pm, offset=offset)
    ps = parameter_set(pm, offset=offset)
    for key, what in (("viscous", "Fv"), ("coulomb", "Fc")):
        if key in plant:
            v = np.broadcast_to(np.asarray(plant[key], dtype=float), (pm.dof,))
            for j in range(pm.dof):
                pi[ps.drive_index(j, what)] = v[j]
    return pm, pi


# ---------------------------------------------------------------------------
# the whole workflow
# ---------------------------------------------------------------------------
@dataclass
class IdentifyResult:
    """What :func:`run_identification` produced (also written to ``identification.json``)."""

    out_dir: Path
    estimate: Estimate
    nrmse: np.ndarray
    rms: np.ndarray
    robot_file: Path
    true_base: np.ndarray | None
    exact_file: Path | None
    report: str
    tracking: list = field(default_factory=list)


def run_identification(spec: IdentifySpec, out_dir, *, confirm: Callable | None = None,
                       progress: Callable[[str], None] | None = None,
                       run_progress: Callable | None = None) -> IdentifyResult:
    """Design, run, estimate, validate and write (module docstring).

    Parameters
    ----------
    spec : IdentifySpec
    out_dir : path
        Output folder (created).
    confirm : callable(RunSpec), optional
        Called before each run is built; raises to refuse (the CLI's hardware confirmation).
    progress : callable(str), optional
        Receives one line per step.
    run_progress : callable, optional
        Shows each run's progress (see :func:`execute_config`).
    """
    say = progress or (lambda s: None)
    drv_type = str(spec.run_data.get("driver", {}).get("type", ""))
    if confirm is not None and not drv_type.startswith("sim_"):
        # before the (slow) design: nothing is built or moved until the user confirms
        from types import SimpleNamespace
        confirm(SimpleNamespace(hardware=True, name=spec.name, driver_type=drv_type))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = spec.model
    base = base_parameters(model, offset=spec.offset)
    say(f"{base.rank} base parameters out of {base.pset.size}")
    trajs = {}
    for name, opts in (("excitation", spec.excitation), ("validation", spec.validation)):
        traj, info, task = design(model, opts, base)
        trajs[name] = (traj, info, task)
        say(f"{name}: designed ({info.get('iterations', 0)} iterations, criterion {info['criterion']:.4g}, "
            f"amplitude scale {info['scale']:.3f})")
    logs = {}
    for name, (traj, info, task) in trajs.items():
        data = excitation_config(spec, traj, task, name)
        say(f"{name}: running {traj.duration_s:.1f} s")
        execute_config(data, spec.file, out / name, confirm, run_progress)
        logs[name] = out / name
    train, delay = log_samples(logs["excitation"], spec.estimation, model, base, spec.offset)
    say(f"torque delay behind the positions: {1e3 * delay:.3f} ms")
    thin = thin_data_warning(train, base.rank, spec.estimation)
    if thin is not None:
        say(f"WARNING: {thin}")
    est = estimate(model, train, base, offset=spec.offset)
    est.info["torque_delay_s"] = delay
    valid, _ = log_samples(logs["validation"], spec.estimation | {"torque_delay_s": delay})
    Yv = data_regressor(model, valid, offset=spec.offset)
    tau_pred = Yv @ est.pi
    rms, nrmse = torque_prediction_errors(valid.tau, tau_pred)
    tau_nom = Yv @ standard_parameters(model, offset=spec.offset)
    rms_nom, nrmse_nom = torque_prediction_errors(valid.tau, tau_nom)
    # robot files
    nominal = read_toml(spec.robot_file)
    header = (f"Identified by `torqueloop identify {spec.file}` from {logs['excitation']}\n"
              f"(nominal robot file: {spec.robot_file}).  Held-out torque NRMSE per joint: "
              + ", ".join(f"{v:.4f}" for v in nrmse))
    robot_file = out / "identified_robot.toml"
    write_robot_file(robot_file, model, base.pset, est.pi, nominal, header=header,
                     comment=f"{nominal.get('name', model.name)} identified ({spec.name})")
    truth = plant_truth(spec.run_data, model, spec.offset)
    true_base = exact_file = None
    if truth is not None:
        true_base = base.base(truth[1])
        exact_file = out / "exact_robot.toml"
        write_robot_file(exact_file, model, base.pset, truth[1], nominal,
                         header="The simulated plant's own parameters (for comparison runs).",
                         comment=f"{nominal.get('name', model.name)}: exact simulated plant")
    report = format_report(spec, est, rms, nrmse, rms_nom, nrmse_nom, true_base, model)
    if thin is not None:
        report = f"WARNING: {thin}\n\n{report}"
    res = IdentifyResult(out, est, nrmse, rms, robot_file, true_base, exact_file, report)
    if spec.compare:
        for rp in spec.compare:
            say(f"tracking comparison: {rp.name}")
            res.tracking.append(tracking_comparison(rp, robot_file, exact_file, out / "compare",
                                                    confirm=confirm))
        res.report += "\n\n" + format_tracking(res.tracking)
    (out / "report.txt").write_text(res.report + "\n")
    (out / "identification.json").write_text(json.dumps(_result_json(spec, res, rms_nom, nrmse_nom), indent=2))
    # the plot shows the held-out run at the full rate (the fit and NRMSE use the decimated samples)
    full, _ = log_samples(logs["validation"], spec.estimation | {"torque_delay_s": delay, "decimate": 1,
                                                                 "velocity_min": 0.0})
    _plots(out, model, base, est, full, data_regressor(model, full, offset=spec.offset) @ est.pi, true_base,
           res.tracking)
    return res


#: Fewer processed samples than this many per base parameter: the estimates are poorly
#: determined (38 samples for 19 parameters gave friction estimates 350-500 % off), said in the report.
MIN_SAMPLES_PER_PARAMETER = 10


def thin_data_warning(samples, n_params: int, est_opts: dict) -> str | None:
    """A warning when the samples left after decimation and the velocity threshold are too few
    for the parameters (:data:`MIN_SAMPLES_PER_PARAMETER` per parameter), naming what removed
    them and the ``[identify.estimation]`` / ``[identify.excitation]`` keys to change; else None.

    Parameters
    ----------
    samples : dynamics.identification.estimation.Samples
        The processed samples (with ``counts`` from ``prepare``).
    n_params : int
        Parameters estimated (the base parameters).
    est_opts : dict
        The ``[identify.estimation]`` options used.
    """
    n = len(samples.t)
    need = MIN_SAMPLES_PER_PARAMETER * n_params
    if n >= need:
        return None
    c = samples.counts or {}
    steps = []
    if c:
        steps.append(f"{c['window']} log rows after trimming, {c['decimated']} after keeping every "
                     f"{c['decimate']}-th (decimate)")
        if c["moving"] < c["decimated"]:
            steps.append(f"{c['moving']} with every joint faster than velocity_min = "
                         f"{est_opts.get('velocity_min', 0.0):g} rad/s")
    fixes = []
    if c and c["moving"] < 0.5 * c["decimated"]:
        fixes.append("lower [identify.estimation] velocity_min (a sample is kept only when every joint "
                     "moves that fast at once)")
    if c and c["decimate"] > 1:
        fixes.append(f"lower [identify.estimation] decimate (now {c['decimate']}; the stated standard "
                     f"deviations then get optimistic, the estimates not worse)")
    fixes.append("lengthen the excitation ([identify.excitation] periods or period_s)")
    return (f"only {n} samples for {n_params} parameters ({n / n_params:.1f} per parameter, "
            f"fewer than {MIN_SAMPLES_PER_PARAMETER}): the estimates, friction first, are poorly "
            f"determined" + (f" ({'; '.join(steps)})" if steps else "") + ". To get at least "
            f"{need}: " + "; or ".join(fixes))


def _result_json(spec, res: IdentifyResult, rms_nom, nrmse_nom) -> dict:
    est = res.estimate
    b = est.base
    d = {"name": spec.name, "config": spec.file, "base_names": list(b.names), "base_expressions": list(b.expressions),
         "base_ls": est.base_ls.tolist(), "base_std": est.base_std.tolist(), "base_pc": est.base_pc.tolist(),
         "sigma_nm": est.sigma.tolist(), "standard_names": list(b.pset.names), "standard_pc": est.pi.tolist(),
         "n_samples": est.n_samples, "regressor_cond": est.cond,
         "torque_delay_s": est.info.get("torque_delay_s", 0.0),
         "validation_rms_nm": res.rms.tolist(), "validation_nrmse": res.nrmse.tolist(),
         "validation_rms_nominal_nm": rms_nom.tolist(), "validation_nrmse_nominal": nrmse_nom.tolist(),
         "robot_file": str(res.robot_file), "tracking": res.tracking}
    if res.true_base is not None:
        d["base_true"] = res.true_base.tolist()
        d["exact_robot_file"] = str(res.exact_file)
    return d


def base_errors(est: Estimate, true_base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(relative error of the LS base estimate, error in units of its standard deviation), each (r,)."""
    err = est.base_ls - true_base
    rel = np.abs(err) / np.where(np.abs(true_base) > 0, np.abs(true_base), np.inf)
    z = np.abs(err) / np.where(est.base_std > 0, est.base_std, np.inf)
    return rel, z


def format_report(spec, est: Estimate, rms, nrmse, rms_nom, nrmse_nom, true_base, model) -> str:
    b = est.base
    lines = [f"identification '{spec.name}': {est.n_samples} samples, base regressor condition number "
             f"{est.cond:.4g}, torque delay {1e3 * est.info.get('torque_delay_s', 0.0):.3f} ms",
             b.report(), "",
             "base parameters: weighted LS +- 1 sigma | physically consistent"
             + (" | true (simulated plant) | rel. error | |error|/sigma" if true_base is not None else "")]
    rel = z = None
    if true_base is not None:
        rel, z = base_errors(est, true_base)
    for k in range(b.rank):
        s = f"  b{k + 1:<3d} {b.names[k]:<22} {est.base_ls[k]:12.6g} +- {est.base_std[k]:9.3g} | {est.base_pc[k]:12.6g}"
        if true_base is not None:
            r = f"{100 * rel[k]:7.3f} %" if true_base[k] != 0 else f"{'(zero)':>9}"
            s += f" | {true_base[k]:12.6g} | {r} | {z[k]:5.2f}"
        lines.append(s)
    lines.append("")
    lines.append("held-out torque prediction (identified | nominal model):")
    lines.append("  joint      sigma [N m]   RMS [N m]      NRMSE   | RMS nominal   NRMSE nominal")
    for j, nm in enumerate(model.joint_names):
        lines.append(f"  {nm:<10} {est.sigma[j]:11.4g} {rms[j]:11.4g} {100 * nrmse[j]:9.3f} % | "
                     f"{rms_nom[j]:11.4g} {100 * nrmse_nom[j]:9.3f} %")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# tracking with nominal / identified / exact models
# ---------------------------------------------------------------------------
def tracking_comparison(run_config, identified_file, exact_file=None, out_dir=None, *,
                        confirm: Callable | None = None) -> dict:
    """Run one run config with the controller's robot file swapped; the plant stays the same.

    "nominal" is the run config's own robot file.  The plant of a simulated run
    is pinned to that file (its ``mass_factor`` etc. apply to it), so only the
    controller's model changes between the runs.

    Returns
    -------
    dict
        ``{"run": name, "models": {label: {"rms_error": [...], "rms_error_norm": float, ...}}}``.
    """
    from .run import build_run, parse_run, summary_metrics

    rp = Path(run_config)
    data = _absolute_paths(read_toml(rp), rp.parent)
    drv = data.get("driver", {})
    own = data["robot"]["file"]
    if str(drv.get("type", "")).startswith("sim_"):
        drv.setdefault("plant", {})
        drv["plant"].setdefault("robot", own)
    models = {"nominal": own, "identified": identified_file}
    if exact_file is not None:
        models["exact"] = exact_file
    out = {"run": data.get("name", rp.stem), "config": str(rp), "models": {}}
    for label, f in models.items():
        d = copy.deepcopy(data)
        d["robot"]["file"] = str(Path(f).resolve())
        spec = parse_run(d, file=str(rp), base_dir=rp.parent)
        if confirm is not None:
            confirm(spec)
        od = None if out_dir is None else Path(out_dir) / f"{out['run']}-{label}"
        run = build_run(spec, out_dir=od)
        result = run.execute()
        m = summary_metrics(spec, result)
        entry = {"status": m["status"], "rms_error": list(np.asarray(m.get("rms_error", []), float)),
                 "rms_error_norm": m["rms_error_norm"]}
        for key in ("rms_position_error_m", "rms_orientation_error_rad"):
            if key in m:
                entry[key] = float(m[key])
        out["models"][label] = entry
    return out


def format_tracking(items: list) -> str:
    lines = ["tracking RMS error with the controller's model: nominal | identified | exact plant"]
    for it in items:
        ms = it["models"]
        labels = [k for k in ("nominal", "identified", "exact") if k in ms]
        lines.append(f"  {it['run']}:")
        if "rms_position_error_m" in ms["nominal"]:
            for key, unit, sc in (("rms_position_error_m", "mm", 1e3), ("rms_orientation_error_rad", "mrad", 1e3)):
                lines.append(f"    {key:<28}" + " | ".join(f"{sc * ms[k][key]:10.4f} {unit}" for k in labels))
        lines.append(f"    {'rms_error_norm':<28}" + " | ".join(f"{ms[k]['rms_error_norm']:10.4g}" for k in labels))
        for a in range(len(ms["nominal"]["rms_error"])):
            lines.append(f"    {'axis ' + str(a):<28}" + " | ".join(f"{ms[k]['rms_error'][a]:10.4g}" for k in labels))
        st = {k: ms[k]["status"] for k in labels}
        if any(v != "completed" for v in st.values()):
            lines.append(f"    status: {st}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------
def base_parameter_labels(base: BaseParameters, width: int = 70) -> list[str]:
    """One label per base parameter: ``b3 = link2.XX - 0.25 link2.YY [kg m^2]``, its combination of
    standard parameters with its unit (that of its leading standard parameter), shortened to
    ``width`` characters with the number of terms left out."""
    units = base.pset.units
    out = []
    for r, expr in enumerate(base.expressions):
        unit = units[base.independent[r]] if units else ""
        terms = re.split(r" (?=[+-] )", expr)
        text = f"b{r + 1} = {terms[0]}"
        for k, term in enumerate(terms[1:], 1):
            if len(text) + len(term) + 1 > width:
                text += f" ... ({len(terms) - k} more terms)"
                break
            text += " " + term
        out.append(f"{text} [{unit}]" if unit else text)
    return out


def _plots(out: Path, model, base, est, valid: Samples, tau_pred, true_base, tracking) -> list:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    n = model.dof
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.2 * n), sharex=True, squeeze=False)
    for j in range(n):
        ax = axes[j, 0]
        ax.plot(valid.t, valid.tau[:, j], lw=1.0, label="measured (filtered)")
        ax.plot(valid.t, tau_pred[:, j], lw=1.0, ls="--", label="predicted (identified)")
        ax.set_ylabel(f"{model.joint_names[j]} [N m]")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("t [s]")
    axes[0, 0].set_title("held-out torque: measured vs predicted")
    fig.tight_layout()
    p = out / "torque_prediction.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    written.append(p)
    r = base.rank
    ref = np.abs(true_base) if true_base is not None else np.abs(est.base_ls)
    ref = np.where(ref > 0, ref, 1.0)
    labels = base_parameter_labels(base)
    fig, ax = plt.subplots(figsize=(11, max(3.5, 0.3 * r + 1.5)))
    y = np.arange(r)[::-1]
    ax.errorbar(est.base_ls / ref, y + 0.15, xerr=3 * est.base_std / ref, fmt="o", ms=3, capsize=2,
                label="weighted LS +- 3 sigma")
    ax.plot(est.base_pc / ref, y - 0.15, "s", ms=3, label="physically consistent")
    if true_base is not None:
        ax.plot(true_base / ref, y, "k|", ms=10, label="true (simulated plant)")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=6)
    ax.set_xlabel("value / |" + ("true value" if true_base is not None else "LS estimate") + "|")
    ax.set_title("base parameters (each a combination of standard parameters, in its unit)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    p = out / "parameters.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    written.append(p)
    if tracking:
        fig, axs = plt.subplots(1, len(tracking), figsize=(4.5 * len(tracking), 3.6), squeeze=False)
        for ax, it in zip(axs[0], tracking):
            ms = it["models"]
            labels = [k for k in ("nominal", "identified", "exact") if k in ms]
            key = "rms_position_error_m" if "rms_position_error_m" in ms["nominal"] else "rms_error_norm"
            ax.bar(labels, [ms[k][key] for k in labels], color=["tab:red", "tab:blue", "tab:green"][:len(labels)])
            ax.set_title(it["run"])
            ax.set_ylabel({"rms_position_error_m": "RMS platform position error [m]"}.get(
                key, "norm of the per-joint RMS errors [rad]"))
            ax.grid(alpha=0.3, axis="y")
        fig.tight_layout()
        p = out / "tracking.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)
    return written
