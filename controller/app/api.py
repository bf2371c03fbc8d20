"""The Python API: run a config (:func:`run_config`), or the same run from Python objects (:func:`simulate`).

A shipped or own run config, with values overridden by dotted keys, run as ``torqueloop run``
runs it, and a result to inspect and plot (:class:`RunOutput`)::

    from controller.app import run_config, shipped_configs

    shipped_configs()                                   # ['3rrr_circle', ...]
    out = run_config("3rrr_circle", overrides={"controller.wn_rad_s": 60.0,
                                               "driver.plant.mass_factor": 1.2},
                     duration_s=2.0, out_dir="runs/wn60")
    out.status, out.metrics["rms_error"], out.run_dir
    print(out.summary())                                # the table `torqueloop run` prints
    df = out.dataframe()                                # pandas: t, q[theta1], err[x], ...
    out.plot()                                          # the PNG files, paths returned

Runs without a config:

A run config names a robot file, a trajectory, a controller, a driver and the loop
settings; :func:`simulate` takes the objects themselves (a :class:`dynamics.Model`, a
:class:`trajectories.Trajectory`, a :class:`controller.laws.Controller`) plus the driver
and safety tables as dicts, runs the loop and returns the result and the log as arrays::

    from dynamics import load_model
    from trajectories import point_to_point
    from controller.laws import ComputedTorque
    from controller.app.api import simulate

    arm = load_model("hil_configs/robots/seed003_2r.toml")
    ref = point_to_point([0.0, 0.0], [0.8, -0.5], "quintic", duration_s=2.0)
    out = simulate(arm, ref, ComputedTorque(arm, kp=400.0, kd=40.0),
                   plant={"mass_factor": 1.1})
    out.status, out.log["t"], out.log["q"], out.metrics["rms_error"]
    out.dataframe()     # pandas, one column per value: t, q[joint1], ...

The pieces are built exactly as :func:`controller.app.run.build_run` builds them for a
config (same driver registry, same plant defaults, same safety supervisor, same loop),
so a TOML run and the equivalent :func:`simulate` call give the same log.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from dynamics.base import Model, ParallelModel
from dynamics.config import Section
from dynamics.errors import ConfigError

from ..clock import LockstepClock, WallClock
from ..laws import Controller, State
from ..loop import ControlLoop, RunResult
from ..safety import SafetyConfig, SafetySupervisor
from ..telemetry import TelemetryWriter, log_dataframe, read_log

__all__ = ["simulate", "SimulationOutput", "run_config", "RunOutput", "shipped_configs"]


@dataclass
class SimulationOutput:
    """What :func:`simulate` returns.

    Attributes
    ----------
    result : controller.loop.RunResult
        Status, faults, cycle count, timing statistics and metrics.
    log : numpy.ndarray
        Structured array, one row per control cycle, vector fields grouped
        (``log["t"]`` shape (N,), ``log["q"]`` shape (N, n), ``log["err"]`` shape
        (N, dim), ...; the fields are described in ``controller.telemetry.FIELD_DOC``).
    out_dir : pathlib.Path or None
        Where ``log.npy`` and ``meta.json`` were written (``None``: not kept).
    joint_names, axis_names : list of str or None
        Labels of the log's per-joint and per-axis columns in :meth:`dataframe`.
    """

    result: RunResult
    log: np.ndarray
    out_dir: Path | None = None
    joint_names: list | None = None
    axis_names: list | None = None

    def dataframe(self):
        """The log as a :class:`pandas.DataFrame`, one column per value (``t``, ``q[theta1]``,
        ``err[x]``...; :func:`controller.telemetry.log_dataframe`).  ``pandas.DataFrame(out.log)``
        itself cannot take the grouped vector fields."""
        return log_dataframe(self.log, joint_names=self.joint_names, axis_names=self.axis_names)

    @property
    def status(self) -> str:
        """``"completed"``, ``"stopped"`` or ``"fault"``."""
        return self.result.status

    @property
    def metrics(self) -> dict:
        """Tracking and torque metrics (see :mod:`controller.metrics`)."""
        return self.result.metrics


def _joint_start(model: Model, trajectory, controller: Controller) -> tuple[np.ndarray, np.ndarray | None]:
    """Joint-space start of the reference, and the task pose for a task-space controller."""
    p0 = np.asarray(trajectory.sample(0.0).pos, dtype=float)
    if controller.dim != model.dof:
        if not isinstance(model, ParallelModel) or controller.dim != model.task_dof:
            raise ConfigError(f"the controller works in {controller.dim} coordinates; the model has "
                              f"{model.dof} joints" + (f" and {model.task_dof} task coordinates"
                                                       if isinstance(model, ParallelModel) else ""))
        return np.asarray(model.inverse_kinematics(p0), dtype=float), p0
    return p0, None


def simulate(model: Model, trajectory, controller: Controller, *, driver: str = "sim_direct",
             driver_options: Mapping[str, Any] | None = None, plant: Mapping[str, Any] | None = None,
             safety: SafetyConfig | Mapping[str, Any] | None = None, rate_hz: float = 1000.0,
             clock: str = "lockstep", duration_s: float | None = None,
             out_dir: str | Path | None = None, seed: int = 0) -> SimulationOutput:
    """Run ``controller`` on a simulated robot along ``trajectory`` and return result and log.

    Parameters
    ----------
    model : dynamics.Model
        The controller's model; the simulated plant is built from it (``plant`` table).
    trajectory : trajectories.Trajectory
        The reference in the controller's space: joint space (dim ``model.dof``), or task
        space (dim ``model.task_dof``) for a task-space controller of a parallel robot.
    controller : controller.laws.Controller
        E.g. ``ComputedTorque(model, kp, kd)``; it is reset before the run.
    driver : str
        A simulated driver type: ``"sim_direct"`` (default; no protocol),
        ``"sim_mit_can"`` or ``"sim_odrive_can"`` (the real driver code against emulated
        devices).
    driver_options : mapping, optional
        The other keys of the ``[driver]`` table (``joints``, ``feedback``, ``emulator``,
        ``faults``...; see :mod:`drivers.sim.build` and ``torqueloop check --explain driver``).
    plant : mapping, optional
        The ``[driver.plant]`` table: ``mass_factor``, ``viscous``, ``coulomb``,
        ``current_lag_s``, ``encoder_counts_per_rev``, ``seed``, ``brakes``...;
        ``q0`` defaults to the reference's start.
    safety : SafetyConfig or mapping, optional
        The ``[safety]`` table (default: all defaults, see ``torqueloop check --explain safety``).
    rate_hz : float
        Control rate [Hz].
    clock : {"lockstep", "wall"}
        Simulated time as fast as the CPU allows, or real time.
    duration_s : float, optional
        Run length [s] (default: the trajectory's duration).
    out_dir : path, optional
        Keep ``log.npy`` and ``meta.json`` there (default: a temporary folder, removed).
    seed : int
        Seed of the random stream handed to the driver builder (measurement noise and
        fault injection without their own ``seed``).

    Returns
    -------
    SimulationOutput

    Raises
    ------
    ConfigError
        A bad table entry (the message names the field), or parts that do not fit
        together (dimensions).
    SafetyError
        The start-up check refused to start.
    """
    import dataclasses

    from drivers.registry import DRIVER_TYPES, build_driver, joint_capabilities

    from .report import least_torque_limit
    from .run import sim_driver_section

    if not isinstance(model, Model):
        raise ConfigError(f"model must be a dynamics.Model, got {type(model).__name__}", field="model")
    if not driver.startswith("sim_") or driver not in DRIVER_TYPES:
        sims = sorted(k for k in DRIVER_TYPES if k.startswith("sim_"))
        raise ConfigError(f"simulate() runs simulated drivers only: one of {sims}, got {driver!r}",
                          field="driver")
    if clock not in ("lockstep", "wall"):
        raise ConfigError(f"must be 'lockstep' or 'wall', got {clock!r}", field="clock")
    rate = float(rate_hz)
    if not np.isfinite(rate) or rate <= 0:
        raise ConfigError(f"must be finite and > 0, got {rate_hz!r}", field="rate_hz")
    period = 1.0 / rate
    q0, X0 = _joint_start(model, trajectory, controller)
    if isinstance(safety, SafetyConfig):
        cfg = safety
    else:
        cfg = SafetyConfig.from_section(Section(dict(safety or {}), None, "safety"))
    table = {"type": driver, **dict(driver_options or {}), "plant": dict(plant or {})}
    section = sim_driver_section(table, q0=q0, clock=clock, period_s=period)
    clk = LockstepClock() if clock == "lockstep" else WallClock()
    caps = joint_capabilities(section)
    if caps is not None and len(caps) == model.dof:     # clip to what the drives deliver, as run does
        cfg = dataclasses.replace(cfg, torque_max=least_torque_limit(model, cfg.torque_max, caps)[0])
    drv = build_driver(section, now=clk.now, model=model, rng=np.random.default_rng(seed))
    tmp = None
    try:
        supervisor = SafetySupervisor(cfg, model.limits, model=model, pose0=X0)
        if out_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix="torqueloop-")
            directory = Path(tmp.name)
        else:
            directory = Path(out_dir)
        meta = {"run": "api", "period_s": period, "space": "task" if X0 is not None else "joint",
                "controller_kind": type(controller).__name__, "joint_names": list(model.joint_names),
                "hardware": False, "plant": table["plant"]}
        if X0 is not None:
            meta["task_dof"] = model.task_dof
        telemetry = TelemetryWriter(directory, model.dof, controller.dim, meta=meta)
        # compile the models' kernels before the drives are enabled (as build_run does)
        controller.compute(0.0, trajectory.sample(0.0), State(0.0, q0, np.zeros_like(q0)))
        controller.reset()
        loop = ControlLoop(drv, controller, trajectory, supervisor, clk, period_s=period,
                           telemetry=telemetry, duration_s=duration_s)
        result = loop.run()
        drv.close()
        log = read_log(directory)
        joints = list(model.joint_names)
        axes = joints if X0 is None else list(getattr(trajectory, "names", None) or []) or None
        return SimulationOutput(result, log, None if out_dir is None else directory, joints, axes)
    finally:
        drv.close()
        if tmp is not None:
            tmp.cleanup()


# -- the config-first API ---------------------------------------------------------------------

#: Folder of the shipped run configs (``hil_configs/runs``).
SHIPPED_RUNS = Path(__file__).resolve().parents[2] / "hil_configs" / "runs"


def shipped_configs() -> list[str]:
    """Names of the shipped run configs (``hil_configs/runs/*.toml``), for :func:`run_config`.

    Returns
    -------
    list of str
        Sorted names without the ``.toml`` suffix.
    """
    return sorted(p.stem for p in SHIPPED_RUNS.glob("*.toml"))


def _config_path(config) -> Path:
    p = Path(config)
    if not p.exists() and str(config) in shipped_configs():
        return SHIPPED_RUNS / f"{config}.toml"
    if not p.is_file():
        raise ConfigError(f"no such run config (a path, or one of the shipped names {shipped_configs()})",
                          str(config))
    return p


class RunOutput:
    """The outcome of :func:`run_config`: what ``torqueloop run`` prints and writes, as objects.

    Everything is read from the run folder the run wrote (``log.npy``, ``meta.json``,
    ``summary.json``), so a ``RunOutput`` can also be made for a folder written earlier
    (:meth:`from_run_dir`), without its spec.

    Attributes
    ----------
    run_dir : pathlib.Path
        The run folder.
    spec : controller.app.run.RunSpec or None
        The parsed config (robot model, trajectory, controller, driver, loop settings);
        ``None`` for a folder read with :meth:`from_run_dir`.
    result : controller.loop.RunResult or None
        Status, faults, cycle count, timing statistics; ``None`` as for ``spec``.
    metrics : dict
        The summary metrics (``summary.json``): ``status``, ``rms_error`` and ``max_abs_error``
        per axis [m, rad], ``peak_torque`` and ``torque_limit`` per joint [N m],
        ``saturation_fraction_per_joint``, ``timing`` [us], ``real_time_factor``...
    warnings : list of str
        What the start-up validation warned about (``torqueloop run`` prints them).
    """

    def __init__(self, run_dir, spec=None, result=None, metrics: dict | None = None):
        from ..telemetry import read_meta

        self.run_dir = Path(run_dir)
        self.spec, self.result = spec, result
        if metrics is None:
            import json

            try:
                metrics = json.loads((self.run_dir / "summary.json").read_text())
            except (OSError, ValueError) as err:
                raise ConfigError(f"not a run folder with a summary.json: {err}", str(self.run_dir)) from err
        self.metrics = metrics
        self.warnings: list = []
        self._meta = read_meta(self.run_dir)
        self._log = None

    @classmethod
    def from_run_dir(cls, run_dir) -> "RunOutput":
        """A result for a run folder written earlier (by ``torqueloop run`` or :func:`run_config`)."""
        return cls(run_dir)

    @property
    def status(self) -> str:
        """``"completed"``, ``"stopped"`` or ``"fault"``."""
        return str(self.metrics["status"])

    @property
    def meta(self) -> dict:
        """``meta.json``: the full config, versions, joint and axis names, the run result."""
        return self._meta

    @property
    def log(self) -> np.ndarray:
        """The log, one row per control cycle, vector fields grouped: ``log["t"]`` (N,) [s],
        ``log["q"]`` (N, n) [rad or m], ``log["err"]`` (N, dim), ``log["tau_cmd"]`` (N, n) [N m]...
        (``controller.telemetry.FIELD_DOC`` describes each field).  Read once, on first use."""
        if self._log is None:
            self._log = read_log(self.run_dir)
        return self._log

    @property
    def time(self) -> np.ndarray:
        """Time of each cycle [s], shape (N,)."""
        return self.log["t"]

    @property
    def files(self) -> dict:
        """The run folder's files by name (``log.npy``, ``meta.json``, ``summary.json``, the plots)."""
        return {p.name: p for p in sorted(self.run_dir.iterdir()) if p.is_file()}

    def dataframe(self):
        """The log as a :class:`pandas.DataFrame`, one column per value, named after the joints
        and axes (``t``, ``q[theta1]``, ``err[x]``...; :func:`controller.telemetry.log_dataframe`)."""
        return log_dataframe(self.run_dir)

    def summary(self) -> str:
        """The summary table ``torqueloop run`` prints (errors per axis, torques against their
        limits, timing).  Needs the spec: not available from :meth:`from_run_dir`."""
        if self.spec is None or self.result is None:
            raise ConfigError("the summary table needs the run's spec and result: this output was read "
                              "from a folder; see .metrics", str(self.run_dir))
        from .report import format_summary

        return format_summary(self.spec, self.result, self.metrics)

    def plot(self, out_dir=None) -> list:
        """Draw the run's plots (tracking, error, torque, timing, path) as PNG files.

        Parameters
        ----------
        out_dir : path, optional
            Where to write them (default: the run folder).

        Returns
        -------
        list of pathlib.Path
            The written files.
        """
        from .plots import plot_run

        return plot_run(self.run_dir, out_dir)

    def __repr__(self) -> str:
        return f"<RunOutput {self.status} {self.run_dir}>"


def run_config(config, *, overrides: Mapping[str, Any] | None = None, duration_s: float | None = None,
               out_dir: str | Path | None = None, plots: bool = False) -> RunOutput:
    """Run a run config as ``torqueloop run`` does and return the result.

    The same steps as the command: the config read with its overrides
    (:func:`controller.app.run.load_run`), the same start-up validation
    (:func:`~controller.app.run.validate_run`), the run
    (:func:`~controller.app.run.build_run` then ``execute``), the summary metrics
    written to ``summary.json``.  Simulated runs only: a hardware config is refused
    (run it with ``torqueloop run``, which asks for confirmation).

    Parameters
    ----------
    config : str or pathlib.Path
        A run config file, or the name of a shipped one (:func:`shipped_configs`,
        e.g. ``"3rrr_circle"``).
    overrides : mapping of str to value, optional
        Values set by dotted key, as ``torqueloop run --set``:
        ``{"controller.wn_rad_s": 60.0, "driver.plant.mass_factor": 1.2}``.
        Unknown or misspelt keys are refused (:class:`ConfigError` naming the field).
    duration_s : float, optional
        Run length [s] (default: the config's, else the trajectory's).
    out_dir : path, optional
        The run folder (default: a new ``runs/<name>-<time>`` under the working
        directory, as the command).
    plots : bool, default False
        Draw the PNG plots into the run folder too (see :meth:`RunOutput.plot`).

    Returns
    -------
    RunOutput

    Raises
    ------
    ConfigError
        A bad config or override (the message names the file and the field), a
        hardware config, or an output folder that cannot be written.
    SafetyError
        The start-up check refused to start.
    """
    from ..telemetry import write_json
    from .commands import _json_default, new_out_dir
    from .run import build_run, load_run, summary_metrics, validate_run

    path = _config_path(config)
    overrides = dict(overrides or {})
    spec = load_run(path, overrides=overrides, duration_s=duration_s)
    if spec.hardware:
        raise ConfigError(f"run_config runs simulated drivers only; driver '{spec.driver_type}' drives "
                          f"hardware: run it with `torqueloop run`, which asks for confirmation",
                          str(path), "driver.type")
    out = Path(out_dir) if out_dir is not None else new_out_dir(spec.name)
    try:
        validation = validate_run(spec, out_dir=out)
        run = build_run(spec, out_dir=out, meta={"api_overrides": overrides})
    except BaseException:
        if out_dir is None:         # refused before it ran: no empty folder of ours left behind
            try:
                out.rmdir()
            except OSError:
                pass
        raise
    result = run.execute()
    import json

    metrics = summary_metrics(spec, result)
    write_json(out / "summary.json", json.loads(json.dumps(metrics, default=_json_default)))
    output = RunOutput(out, spec, result, json.loads(json.dumps(metrics, default=_json_default)))
    output.warnings = list(validation.warnings)
    if plots and result.log_unwritten is None:
        output.plot()
    return output
