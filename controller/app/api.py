"""Build and run a control loop from Python objects: the same run as a TOML config, without one.

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

__all__ = ["simulate", "SimulationOutput"]


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
