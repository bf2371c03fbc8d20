"""Run configs: parse a complete run file, build every part, run it.

A run config joins a robot file, a plant (simulated runs), a driver, a
trajectory, a controller, the loop and the safety settings::

    name = "3rrr_circle"
    [robot]
    file = "../robots/3rrr_horizontal.toml"   # the controller's model (paths relative to this file)

    [driver]                                   # see drivers.registry and drivers.sim.build
    type = "sim_mit_can"                       # sim_*: the simulated plant behind the real driver
    #                                          # code; mit_can / odrive_can: REAL hardware
    [driver.plant]                             # the simulated plant (sim_* only), e.g.
    mass_factor = 1.1                          # plant = model.scaled(1.1): model mismatch
    coulomb = 0.05
    encoder_counts_per_rev = 16384
    seed = 1
    # q0 defaults to the trajectory's start (joint space)

    [trajectory]                               # see trajectories.load_trajectory
    [controller]
    kind = "task_computed_torque"              # computed_torque | pd_gravity | task_pd_gravity | pid
    wn_rad_s = 40.0                            # gains from natural frequency and damping ...
    zeta = 1.0
    # kp = [...], kd = [...], ki = [...]       # ... or explicit (controller-space units)
    saturate = true                            # clip to the model's torque limits (anti-windup)
    friction_compensation = "none"             # or "measured"/"desired": + the model's friction
    #                                          # at the measured / reference joint velocity

    [loop]
    rate_hz = 1000.0
    clock = "lockstep"                         # or "wall" (real time; hardware runs use wall)
    duration_s = 10.0                          # default: the trajectory's
    spin_s = 0.0002                            # wall clock: busy-wait before each deadline [s]
    #                                          # (at most a quarter of the period)
    [loop.realtime]                            # wall clock only; applied where permitted
    sched_fifo_priority = 80
    cpu = 1
    freeze_gc = true

    [safety]                                   # see controller.safety.SafetyConfig
    [telemetry]
    buffer_rows = 200
    mcap = false                               # also write log.mcap (needs the `mcap` extra; `run --mcap`)
    mcap_buffer_rows = 65536                   # its ring buffer: rows beyond it are dropped, counted
    live = false                               # stream to Foxglove / PlotJuggler live (`run --live`)
    live_rate_hz = 50.0                        # rows streamed per second of cycle time
    live_port = 0                              # on 127.0.0.1; 0: the OS chooses (printed)

Everything is validated before anything moves: errors name the file and the field.
"""

from __future__ import annotations

import hashlib
import json

import math
import os
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from drivers.base import Driver
from dynamics import load_model
from dynamics.base import Model, ParallelModel
from dynamics.config import KeyLog, RecordingSection, Section, read_toml
from dynamics.errors import ConfigError, SafetyError, TorqueloopError

from ..clock import LockstepClock, WallClock
from ..laws import (PID, ComputedTorque, Controller, PDGravity, Saturation, TaskComputedTorque,
                   TaskPDGravity, gravity_feedforward)
from ..loop import ControlLoop, RunResult
from .report import controller_quantities, effective_torque_limit, timing_health
from ..safety import SAFETY_RANGES, SafetyConfig, SafetySupervisor
from ..telemetry import TelemetryWriter, usable_labels

__all__ = ["RunSpec", "parse_run", "load_run", "Run", "build_run", "run_offline_metrics",
           "check_run_config", "validate_run", "Validation", "make_safety", "check_output_dir", "bus_budget",
           "CONTROLLER_KINDS"]

CONTROLLER_KINDS = ("computed_torque", "pd_gravity", "pid", "task_computed_torque", "task_pd_gravity")
_TASK_KINDS = ("task_computed_torque", "task_pd_gravity")
#: plausible ranges of the loop and the gain design (outside: refused, naming the field)
RATE_MIN_HZ, RATE_MAX_HZ = 1.0, 40_000.0
DURATION_MAX_S = 86_400.0
WN_MAX_RAD_S = 1e4
ZETA_MAX = 100.0
GAIN_MAX = 1e9
#: reply timeout of emulated drivers in lock-step runs unless the config sets one [s]
LOCKSTEP_REPLY_TIMEOUT_S = 0.25


# ---------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------
@dataclass
class ControllerSpec:
    kind: str
    kp: Any
    kd: Any
    ki: Any
    integral_limit: Any
    saturate: bool
    friction_compensation: str
    wn_rad_s: float | None
    zeta: float | None
    design: str = "wn_zeta"
    poles: Any = None
    lqr: Any = None


@dataclass
class RunSpec:
    """A parsed, validated run config (see module docstring)."""

    name: str
    file: str | None
    data: dict
    model: Model
    plant: dict | None
    driver_section: Section
    driver_type: str
    hardware: bool
    trajectory: Any
    controller: ControllerSpec
    rate_hz: float
    clock: str
    duration_s: float
    realtime: dict | None
    safety: SafetyConfig
    telemetry_buffer_rows: int
    description: str = ""
    #: record ``log.mcap`` beside ``log.npy`` (``[telemetry] mcap``), through a ring of
    #: ``telemetry_mcap_rows`` rows (``mcap_buffer_rows``)
    telemetry_mcap: bool = False
    telemetry_mcap_rows: int = 65536
    #: the live view (Foxglove WebSocket from the telemetry writer process): None, or
    #: ``{"rate_hz": float, "port": int}``
    telemetry_live: dict | None = None
    #: the wall clock's busy-wait window before each deadline [s] (``loop.spin_s``)
    spin_s: float = 2e-4
    #: ``(trajectory, model, space, reference at t = 0, q0, X0)`` of the last :func:`_joint_start`
    #: (reused while the trajectory, the model and the space are the ones it was computed for)
    _start: tuple | None = field(default=None, repr=False, compare=False)

    #: ``(driver table data, capabilities)`` of the last :meth:`drive_capabilities`
    _drive: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def period_s(self) -> float:
        return 1.0 / self.rate_hz

    def drive_capabilities(self) -> list | None:
        """Each joint's :class:`drivers.base.JointCapability` from the ``[driver]`` table
        (:func:`drivers.registry.joint_capabilities`), or None for a driver without drives
        (``sim_direct``) or a table whose joints do not match the model (its build says so).

        Raises
        ------
        ConfigError
            A bad value in a joint table (naming the file and field).
        """
        from drivers.registry import joint_capabilities

        data = self.driver_section.data
        if self._drive is None or self._drive[0] is not data:
            caps = joint_capabilities(self.driver_section)
            if caps is not None and len(caps) != self.model.dof:
                caps = None
            self._drive = (data, caps)
        return self._drive[1]

    @property
    def space(self) -> str:
        return "task" if self.controller.kind in _TASK_KINDS else "joint"


def _resolve(base_dir: Path | None, p: str) -> Path:
    path = Path(p)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path


def _per_joint(sec: Section, key: str, n: int, default) -> np.ndarray:
    v = sec.raw(key, None)
    if v is None:
        return np.asarray(default, dtype=float) * np.ones(n)
    if isinstance(v, list):
        return sec.vector(key, n, minimum=0.0)
    return np.full(n, sec.float(key, minimum=0.0))


def _model_file(sec: Section, key: str, base_dir: Path | None, cache: dict | None = None) -> Model:
    """The model of the robot file named by ``sec[key]`` (relative to ``base_dir``).

    With ``cache`` (a dict the caller owns), a file already loaded with the same path and the
    same bytes gives the model loaded then: models are constant parameters (nothing in a
    run changes them), so the runs of a sweep can share one (see :func:`parse_run`).
    """
    rel = sec.str(key, doc="robot file (TOML: DH or URDF-based, see hil_configs/robots), relative to "
                           "this config")
    path = _resolve(base_dir, rel)
    if not path.exists():
        raise sec.error(key, f"robot file not found: {path}")
    if cache is None:
        return load_model(path)
    try:
        key_ = (str(path), path.read_bytes())
    except OSError:
        return load_model(path)         # unreadable: load_model names the file and the error
    model = cache.get(key_)
    if model is None:
        model = load_model(path)
        _cache_put(cache, key_, model)
    return model


def _file_digest(path) -> str | None:
    """SHA-256 of the file's bytes (None when it cannot be read, or for a model without a file)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except (OSError, TypeError):
        return None


#: entries a parse cache (:func:`parse_run`'s ``trajectory_cache`` and ``model_cache``) keeps
_CACHE_ENTRIES = 8


def _cache_put(cache: dict, key, value) -> None:
    """Store ``value`` under ``key``, dropping the oldest entry when the cache is full."""
    if len(cache) >= _CACHE_ENTRIES:
        cache.pop(next(iter(cache), None), None)
    cache[key] = value


def parse_run(data: Mapping[str, Any], *, file: str | None = None, base_dir: Path | None = None,
              duration_s: float | None = None, trajectory_cache: dict | None = None,
              model_cache: dict | None = None, key_log: KeyLog | None = None) -> RunSpec:
    """Validate a run-config dict and load its models and trajectory.

    ``key_log`` (a :class:`dynamics.config.KeyLog`): record every key read, with its type,
    bounds, default and meaning, into it (``torqueloop check --explain``).

    ``trajectory_cache`` (a dict the caller owns) keeps the trajectories built so far, keyed
    by the ``[trajectory]`` and ``[robot]`` tables and the folder: runs that differ only in
    other tables (a tuning sweep's gains and plant draws) build theirs once (mapping a task
    path to joint space costs about half a second for the 3RRR circle).  ``model_cache``
    likewise keeps the robot models loaded so far, keyed by the robot file's path and
    bytes (an edited file is loaded again): the runs of a sweep share one model.

    Raises
    ------
    ConfigError
        Naming the file and the field of the first bad entry.
    """
    from trajectories import load_trajectory  # trajectories may use dynamics only

    root = Section(data, file) if key_log is None else RecordingSection(data, file, "", key_log)
    name = root.str("name", doc="name of the run (the output folder runs/<name>-<time>)")
    description = root.str("description", "", doc="one line shown in reports")
    rob = root.section("robot", doc="the controller's model")
    model = _model_file(rob, "file", base_dir, model_cache)
    rob.finish()

    from drivers.registry import DRIVER_TYPES

    drv = root.section("driver", doc="the actuators: --explain driver")
    driver_type = drv.str("type", choices=sorted(DRIVER_TYPES))
    hardware = not driver_type.startswith("sim_")
    plant_data = drv.data.get("plant", {}) if not hardware else None
    if plant_data is not None and not isinstance(plant_data, Mapping):
        raise drv.error("plant", "expected a table")

    csec = root.section("controller", doc="the control law and its gains: --explain controller")
    kind = csec.str("kind", choices=CONTROLLER_KINDS,
                    doc="control law: computed torque, PD + gravity or PID in joint space; task_*: in "
                        "task space (parallel robots)")
    if kind in _TASK_KINDS and not isinstance(model, ParallelModel):
        raise csec.error("kind", f"{kind} needs a parallel robot (the model is {type(model).__name__})")
    has_explicit = csec.has("kp")
    design = csec.str("design", "explicit" if has_explicit else "wn_zeta",
                      choices=["explicit", "wn_zeta", "place", "lqr"],
                      doc="how the gains are given: kp/kd (explicit, the default with kp), natural "
                          "frequency and damping (wn_zeta, else the default), poles (place) or weights (lqr)")
    if design in ("place", "lqr") and kind not in ("computed_torque", "task_computed_torque"):
        raise csec.error("design", f"'{design}' designs the error dynamics of computed torque; "
                                   f"{kind} takes wn_rad_s/zeta or explicit kp/kd")
    if design == "explicit" and not has_explicit:
        raise csec.error("kp", "required with design = 'explicit'")
    if design != "explicit" and has_explicit:
        raise csec.error("kp", f"explicit gains conflict with design = '{design}'")
    poles = lqr = None
    if design == "place":
        poles = csec.as_array("poles", csec.raw("poles", doc="design = 'place': the two negative real "
                                                        "poles [p1, p2] of the error dynamics, or one "
                                                        "pair per axis [1/s]"), None)
        if poles.ndim not in (1, 2) or poles.shape[-1] != 2 or np.any(poles >= 0):
            raise csec.error("poles", "expected two negative real poles [p1, p2] (or one pair per axis) [1/s]")
    if design == "lqr":
        lsec_ = csec.section("lqr", doc="design = 'lqr': the weights of the error dynamics' LQR")
        lqr = {"q_pos": lsec_.float("q_pos", minimum=0.0, strict_min=True,
                                    doc="weight of the position error [1/rad^2 or 1/m^2]"),
               "q_vel": lsec_.float("q_vel", 1.0, minimum=0.0, doc="weight of the velocity error"),
               "r": lsec_.float("r", 1.0, minimum=0.0, strict_min=True,
                                doc="weight of the commanded acceleration")}
        lsec_.finish()
    ctrl = ControllerSpec(
        kind=kind,
        kp=csec.raw("kp", None, doc="proportional gain: a number, one per axis or a matrix (computed torque: "
                                    "[1/s^2]; PD/PID: [N m/rad] or [N/m])"),
        kd=csec.raw("kd", None, doc="derivative gain, as kp (computed torque: [1/s]; PD/PID: "
                                    "[N m s/rad]); required with kp"),
        ki=csec.raw("ki", None, doc="integral gain, as kp (computed torque: [1/s^3]; PID: [N m/(rad s)])"),
        integral_limit=csec.raw("integral_limit", None,
                                doc="bound of the integral state per axis (anti-windup) [rad s or m s]"),
        saturate=csec.bool("saturate", True, doc="clip the law's torques to the robot file's limits"),
        friction_compensation=csec.str("friction_compensation", "none",
                                       choices=["none", "measured", "desired"],
                                       doc="add the model's friction at the measured or the desired "
                                           "velocity as feed-forward"),
        wn_rad_s=(csec.float("wn_rad_s", minimum=0.0, strict_min=True, maximum=WN_MAX_RAD_S,
                             doc="design = 'wn_zeta': natural frequency of the error dynamics [rad/s] "
                                 "(kp = wn^2, kd = 2 zeta wn)")
                  if design == "wn_zeta" else None),
        zeta=csec.float("zeta", 1.0, minimum=0.0, strict_min=True, maximum=ZETA_MAX,
                        doc="design = 'wn_zeta': damping ratio of the error dynamics (1: critically damped)")
        if design == "wn_zeta" else None,
        design=design, poles=poles, lqr=lqr,
    )
    for key in ("kp", "kd", "ki", "integral_limit"):
        v = getattr(ctrl, key)
        if v is not None:
            arr = csec.as_array(key, v, None)
            if np.any(arr < 0):
                raise csec.error(key, f"gains must be >= 0, got {v!r}")
            if np.any(arr > GAIN_MAX):
                raise csec.error(key, f"must be <= {GAIN_MAX:g} (not a plausible gain), got {v!r}")
            dim = model.task_dof if kind in _TASK_KINDS else model.dof
            if not (arr.ndim == 0 or arr.shape == (dim,) or (arr.shape == (dim, dim) and key != "integral_limit")):
                raise csec.error(key, f"expected a number, {dim} values (one per {'task' if kind in _TASK_KINDS else 'joint'}"
                                      f"-space axis) or a {dim}x{dim} matrix, got shape {arr.shape}")
            setattr(ctrl, key, arr)
    if has_explicit and ctrl.kd is None:
        raise csec.error("kd", "required with kp")
    if kind in ("pd_gravity", "task_pd_gravity"):
        for key in ("ki", "integral_limit"):
            if getattr(ctrl, key) is not None:
                raise csec.error(key, f"{kind} has no integral action (use computed_torque, "
                                      f"task_computed_torque or pid)")
    csec.finish()

    tsec = root.section("trajectory", doc="the reference: --explain trajectory")
    key = None
    if trajectory_cache is not None:
        # the robot file's bytes too: a trajectory mapped through an edited robot is built again
        key = json.dumps([data.get("trajectory"), data.get("robot"), str(base_dir), _file_digest(model.source)],
                         sort_keys=True, default=repr)
    try:
        traj = trajectory_cache.get(key) if key is not None else None
        if traj is None:
            traj = load_trajectory(tsec, model)
            if key is not None:
                _cache_put(trajectory_cache, key, traj)
    except ConfigError:
        raise
    except (TorqueloopError, ValueError, TypeError, ArithmeticError) as err:
        # a value the trajectory code could not use (e.g. a huge number of turns, a string where
        # a number belongs, inside an options table): name the table
        raise ConfigError(f"{type(err).__name__}: {err}", file, tsec.path or "trajectory") from err
    with np.errstate(all="ignore"):
        ends = [traj.sample(t) for t in (0.0, 0.5 * traj.duration_s, traj.duration_s)]
    if not all(np.all(np.isfinite(np.asarray(x, dtype=float))) for r in ends for x in (r.pos, r.vel, r.acc)):
        # e.g. a path in a duration of 1e-300 s: infinite velocities
        raise ConfigError(f"the reference is not finite (its velocity or acceleration overflows: is "
                          f"duration_s = {traj.duration_s!r} s too short for the path?)", file,
                          f"{tsec.path or 'trajectory'}.duration_s" if "duration_s" in (tsec.data or {}) else
                          (tsec.path or "trajectory"))
    traj = _trajectory_for_space(traj, model, "task" if kind in _TASK_KINDS else "joint", tsec)

    lsec = root.section("loop", {}, doc="rate, clock and duration of the control loop: --explain loop")
    rate = lsec.float("rate_hz", 1000.0, minimum=RATE_MIN_HZ, maximum=RATE_MAX_HZ,
                      doc="control rate [Hz]")
    clock = lsec.str("clock", "wall" if hardware else "lockstep", choices=["lockstep", "wall"],
                     doc="lockstep: simulated time waits for the computation (offline, the default "
                         "of simulated drivers); wall: real time (required on hardware)")
    if hardware and clock != "wall":
        raise lsec.error("clock", "hardware runs need the wall clock")
    dur = lsec.float("duration_s", None, minimum=0.0, maximum=DURATION_MAX_S,
                     doc="how long the loop runs [s] (default: the trajectory's duration; --duration)")
    if duration_s is not None:
        dur = float(duration_s)
        if not (0.0 <= dur <= DURATION_MAX_S):
            raise ConfigError(f"must be >= 0 and <= {DURATION_MAX_S:g} s, got {duration_s!r}", file, "--duration")
    if dur is None:
        dur = float(traj.duration_s)
    spin_s = lsec.float("spin_s", 2e-4, minimum=0.0, maximum=1.0,
                        doc="wall clock: the last part of each period waited by spinning, not "
                            "sleeping (less jitter, one core busy) [s]")
    rt = None
    if lsec.has("realtime", doc="real-time settings of the loop's thread (wall clock)"):
        rsec = lsec.section("realtime")
        rt = {}
        if rsec.has("sched_fifo_priority"):
            rt["sched_fifo_priority"] = rsec.int("sched_fifo_priority", minimum=1, maximum=99,
                                                 doc="SCHED_FIFO priority (needs CAP_SYS_NICE)")
        if rsec.has("cpu"):
            rt["cpu"] = rsec.int("cpu", minimum=0, doc="the CPU the loop is pinned to")
        rt["freeze_gc"] = rsec.bool("freeze_gc", True,
                                    doc="freeze the garbage collector's objects before the loop "
                                        "(no full collections during it)")
        rsec.finish()
    lsec.finish()

    safety = SafetyConfig.from_section(root.section("safety", {}, doc="limits and stop reactions: "
                                                                      "--explain safety"))
    tel = root.section("telemetry", {}, doc="the log: --explain telemetry")
    buffer_rows = tel.int("buffer_rows", 200, minimum=1,
                          doc="rows buffered before they are written to log.npy (a crash loses at "
                              "most these)")
    mcap_on = tel.bool("mcap", False, doc="also record log.mcap (ROS 2 messages for Foxglove, "
                                          "PlotJuggler, rosbags), written by a process of its own")
    mcap_rows = tel.int("mcap_buffer_rows", 65536, minimum=1, maximum=1 << 24,
                        doc="rows the MCAP writer's ring holds; a full ring drops rows (counted), "
                            "it never delays the loop")
    live_on = tel.bool("live", False, doc="stream the log's channels to Foxglove or PlotJuggler while the "
                                           "run goes (a Foxglove WebSocket server on 127.0.0.1, in the "
                                           "telemetry writer process; `run --live`)")
    live_rate = tel.float("live_rate_hz", 50.0, minimum=0.0, strict_min=True, maximum=100_000.0,
                          doc="rows streamed live per second of cycle time (at most one a cycle) [Hz]")
    live_port = tel.int("live_port", 0, minimum=0, maximum=65535,
                        doc="TCP port of the live view on 127.0.0.1 (0: one the OS chooses; the CLI "
                            "prints the address)")
    from ..telemetry_live import live_available
    from ..telemetry_mcap import mcap_available
    for on, available, key in ((mcap_on, mcap_available, "telemetry.mcap"), (live_on, live_available, "telemetry.live")):
        why = available() if on else None       # the package it needs is installed
        if why is not None:
            raise ConfigError(why, file, key)
    tel.finish()

    # A [tune] table (gain search, see controller.app.tune) is validated here so that `check` and
    # `run` report its errors too; `run` itself does not use it.
    if root.has("tune", doc="gain search (torqueloop tune): --explain tune"):
        from .tune_config import TuneSpec
        TuneSpec.from_section(root.section("tune"))
    # likewise the Monte-Carlo report's (controller.app.robustness)
    if root.has("robustness", doc="Monte-Carlo report (torqueloop robustness): --explain robustness"):
        from .tune_config import RobustnessSpec
        RobustnessSpec.from_section(root.section("robustness"))

    # The [bringup] table (controller.app.bringup) is read against the parsed spec by
    # validate_run and by the bring-up itself; mark it read here.
    root.section("bringup", {}, doc="hardware bring-up checks (torqueloop bringup)")
    # The driver table is validated when the driver is built (it may open buses);
    # mark it read here.
    root.finish()
    return RunSpec(name=name, file=file, data=dict(data), model=model, plant=plant_data, driver_section=drv,
                   driver_type=driver_type, hardware=hardware, trajectory=traj, controller=ctrl,
                   rate_hz=rate, clock=clock, duration_s=dur, realtime=rt, spin_s=spin_s, safety=safety,
                   telemetry_buffer_rows=buffer_rows, description=description, telemetry_mcap=mcap_on,
                   telemetry_mcap_rows=mcap_rows,
                   telemetry_live={"rate_hz": live_rate, "port": live_port} if live_on else None)


def _trajectory_for_space(traj, model: Model, space: str, tsec: Section):
    """The reference in the controller's space.

    ``trajectories.load_trajectory`` returns actuator-space trajectories; those
    mapped from a task path keep it in ``.task``, which task-space controllers use.
    """
    if space == "joint":
        return traj
    task = getattr(traj, "task", None)
    if task is None or task.dim != getattr(model, "task_dof", -1):
        raise tsec.error(None, "a task-space controller needs a task-space trajectory "
                               "(a pose path mapped through the robot's inverse kinematics)")
    return task


def load_run(path: str | Path, *, overrides: Mapping[str, Any] | None = None,
             duration_s: float | None = None) -> RunSpec:
    """Read and parse a run config file (with optional dotted-key overrides)."""
    from dynamics.config import apply_overrides

    p = Path(path)
    data = read_toml(p)
    if overrides:
        data = apply_overrides(data, dict(overrides), file=str(p))
    return parse_run(data, file=str(p), base_dir=p.parent, duration_s=duration_s)


# ---------------------------------------------------------------------------
# building
# ---------------------------------------------------------------------------
def _task_inertia(model: ParallelModel, X: np.ndarray) -> np.ndarray:
    """Task-space inertia Lambda = J^-T M J^-1 at pose X (for PD gain scaling)."""
    q = model.inverse_kinematics(X)
    J = np.asarray(model.task_jacobian(q, X), dtype=float)  # Xd = J qd
    M = np.asarray(model.mass_matrix(q, pose=X) if "mass_matrix" in getattr(model, "pose_hint_methods", ())
                   else model.mass_matrix(q))
    Jinv = np.linalg.inv(J)
    return Jinv.T @ M @ Jinv


def make_controller(spec: RunSpec, *, pose0=None) -> Controller:
    """Build the control law of a run spec (gains from wn/zeta where not explicit),
    with the model's friction as feed-forward when ``friction_compensation`` is set."""
    return _make_law(spec, pose0=pose0)


def _make_law(spec: RunSpec, *, pose0=None) -> Controller:
    c, model = spec.controller, spec.model
    n = model.dof
    lim = effective_torque_limit(spec)
    sat = Saturation(lim) if c.saturate and np.all(np.isfinite(lim)) else None
    if c.kp is not None:
        kp, kd, ki = c.kp, c.kd, c.ki
    elif c.design in ("place", "lqr"):
        d = design_gains(spec)
        kp, kd, ki = np.diag(d.kp), np.diag(d.kd), c.ki
    else:
        wn, z = c.wn_rad_s, c.zeta
        kp, kd, ki = wn * wn, 2.0 * z * wn, c.ki
        if c.kind in ("pd_gravity", "pid", "task_pd_gravity"):
            # PD gains in torque units: scale the unit-inertia design by the model's
            # inertia at the start so that wn/zeta mean the same as for computed torque.
            start = np.asarray(_start_reference(spec).pos, dtype=float)
            if c.kind == "task_pd_gravity":
                Lam = _task_inertia(model, start)
            else:
                qs = start
                Lam = np.asarray(model.mass_matrix(qs), dtype=float)
            Lam = 0.5 * (Lam + Lam.T)
            kp, kd = Lam * (wn * wn), Lam * (2.0 * z * wn)
            if c.kind == "pid":
                kp, kd = np.diag(kp), np.diag(kd)
                ki = np.zeros(n) if c.ki is None else c.ki
    fr = c.friction_compensation
    if fr == "desired" and c.kind in _TASK_KINDS + ("pid",):
        raise ConfigError(f"friction_compensation = 'desired' is for joint-space computed torque / PD "
                          f"(use 'measured' with {c.kind})", spec.file, "controller.friction_compensation")
    if fr != "none" and c.kind == "pid":
        raise ConfigError("the PID law has no friction model; use computed_torque or pd_gravity",
                          spec.file, "controller.friction_compensation")
    if c.kind == "computed_torque":
        return ComputedTorque(model, kp, kd, ki=ki, integral_limit=c.integral_limit, saturation=sat,
                              friction=fr)
    if c.kind == "pd_gravity":
        return PDGravity(model, kp, kd, saturation=sat, friction=fr)
    if c.kind == "pid":
        return PID(kp, ki if ki is not None else np.zeros(n), kd, n=n,
                   feedforward=gravity_feedforward(model), saturation=sat)
    if c.kind == "task_computed_torque":
        return TaskComputedTorque(model, kp, kd, ki=ki, integral_limit=c.integral_limit, saturation=sat,
                                  pose0=pose0, friction=fr)
    if c.kind == "task_pd_gravity":
        return TaskPDGravity(model, kp, kd, saturation=sat, pose0=pose0, friction=fr)
    raise ConfigError(f"unknown controller kind {c.kind!r}", spec.file, "controller.kind")  # pragma: no cover


def design_gains(spec: RunSpec):
    """The computed-torque gain design of a spec (python-control), or None for other laws.

    Returns a :class:`controller.gains.GainDesign` with closed-loop poles and the nominal step
    response per axis of the error dynamics ``e'' + Kd e' + Kp e (+ Ki int e) = 0``.
    """
    c = spec.controller
    if c.kind not in ("computed_torque", "task_computed_torque"):
        return None
    d = _design_pd(spec)
    if c.ki is None:
        return d
    from ..gains import with_integral

    ki = np.diag(np.atleast_2d(c.ki)) if np.ndim(c.ki) == 2 else c.ki
    return with_integral(d, ki)


def _design_pd(spec: RunSpec):
    """Proportional and derivative part of :func:`design_gains`."""
    from ..gains import ct_gains, ct_gains_lqr, ct_gains_place

    c = spec.controller
    dim = spec.model.task_dof if spec.space == "task" else spec.model.dof
    if c.design == "place":
        return ct_gains_place(c.poles, dim)
    if c.design == "lqr":
        return ct_gains_lqr(c.lqr["q_pos"], c.lqr["q_vel"], c.lqr["r"], dim)
    if c.design == "wn_zeta":
        return ct_gains(c.wn_rad_s, c.zeta, dim)
    kp = np.diag(np.atleast_2d(c.kp)) if np.ndim(c.kp) == 2 else c.kp * np.ones(dim)
    kd = np.diag(np.atleast_2d(c.kd)) if np.ndim(c.kd) == 2 else c.kd * np.ones(dim)
    from ..gains import GainDesign, _ct_axis
    return GainDesign(np.asarray(kp, float), np.asarray(kd, float), None,
                      [_ct_axis(float(a), float(b)) for a, b in zip(kp, kd)])


def gain_report(spec: RunSpec) -> str:
    """Closed-loop poles, margins and nominal step response of the configured gains, and the
    torque limits the law saturates at."""
    from .report import torque_limit_sources

    lim, src = torque_limit_sources(spec)
    sat = ("torque limits the law saturates at [N m | N] (the least of robot file, [safety] and drive): "
           + ", ".join(f"{name} {v:.4g} ({s})" for name, v, s in zip(spec.model.joint_names, lim, src)))
    return _gain_text(spec) + "\n" + sat


def _gain_text(spec: RunSpec) -> str:
    from ..gains import pd_analysis, pd_analysis_model

    c = spec.controller
    d = design_gains(spec)
    if d is not None:
        return ("gain design (computed torque, error dynamics per axis; nominal = matched model, "
                "no delay):\n" + d.summary())
    law = make_controller(spec)
    kp = np.diag(np.atleast_2d(law.kp)) if np.ndim(getattr(law, "kp", 0)) == 2 else np.asarray(law.kp)
    kd = np.diag(np.atleast_2d(law.kd)) if np.ndim(getattr(law, "kd", 0)) == 2 else np.asarray(law.kd)
    if spec.space == "task":
        X0 = np.asarray(spec.trajectory.sample(0.0).pos, dtype=float)
        inertia = np.diag(_task_inertia(spec.model, X0))
        d = pd_analysis(kp, kd, inertia, delay_s=spec.period_s)
    else:
        q0 = np.asarray(spec.trajectory.sample(0.0).pos, dtype=float)
        d = pd_analysis_model(spec.model, q0, kp, kd, delay_s=spec.period_s)
    return (f"gain analysis ({c.kind}, each axis linearised at the start with its inertia, one-period "
            "delay):\n" + d.summary())


def _joint_start(spec: RunSpec) -> tuple[np.ndarray, np.ndarray | None]:
    """Joint-space start of the trajectory (and the task pose for parallel task trajectories).

    Returns
    -------
    q0 : ndarray, shape (n,)
        Joint-space start [rad | m].
    X0 : ndarray, shape (task_dof,) or None
        Task pose at the start (task-space controllers), else None.

    Computed once per spec (the build of a run asks three times, see :func:`_start`);
    every call returns new arrays, so a caller may keep or modify them.
    """
    _, q0, X0 = _start(spec)
    return q0.copy(), None if X0 is None else X0.copy()


def _start_reference(spec: RunSpec):
    """The reference at t = 0, ``spec.trajectory.sample(0.0)``, as a new
    :class:`~trajectories.base.Sample` (arrays of shape (dim,))."""
    ref0 = _start(spec)[0]
    return type(ref0)(*(np.array(a) for a in ref0))


def _start(spec: RunSpec) -> tuple:
    """``(reference at t = 0, q0, X0)`` of :func:`_joint_start`, kept in the spec while its
    trajectory, model and space are those it was computed for (not to be modified)."""
    memo = spec._start
    space = spec.space
    if memo is None or memo[0] is not spec.trajectory or memo[1] is not spec.model or memo[2] != space:
        ref0 = spec.trajectory.sample(0.0)
        if space == "task":
            X0 = np.asarray(ref0.pos, dtype=float)
            q0 = np.asarray(spec.model.inverse_kinematics(X0), dtype=float)
        else:
            q0, X0 = np.asarray(ref0.pos, dtype=float), None
        kept = type(ref0)(*(np.array(a) for a in ref0))
        memo = spec._start = (spec.trajectory, spec.model, space, kept, q0.copy(),
                              None if X0 is None else X0.copy())
    return memo[3:]


@dataclass
class Run:
    """Everything a run needs, built and owned (close() releases buses/threads)."""

    spec: RunSpec
    loop: ControlLoop
    driver: Driver
    clock: Any
    plant: Any = None
    out_dir: Path | None = None
    _stack: ExitStack = field(default_factory=ExitStack)
    #: what :meth:`recover` did (also in meta.json's ``events``)
    events: list = field(default_factory=list)

    def execute(self, recover=None) -> RunResult:
        """Run the loop to its end, then release the driver (bus/port) and the plant.

        The loop has already stopped the motors and flushed the log when it
        returns; an error while closing the driver afterwards (for example a bus
        that went down with the fault being reported) must not hide that result,
        so it is added to ``RunResult.messages`` instead of being raised.

        Parameters
        ----------
        recover : callable (str) -> bool, optional
            The recovery path after a fault (:meth:`recover`, before the driver is closed):
            asked with the faults; its answer decides.  Its ``hold_s`` attribute, when it has
            one, is the hold's length.  The hold's result is ``result.recovery``; a recovery
            that failed or was refused is in ``result.messages``.
        """
        try:
            result = self.loop.run()
            if recover is not None and result.status == "fault" and result.n_cycles > 0:
                # the recovery path (Run.recover), asked for by the caller: the operator decides
                try:
                    result.recovery = self.recover(result, recover, hold_s=getattr(recover, "hold_s", 2.0))
                except TorqueloopError as err:
                    result.messages.append(f"recovery: {type(err).__name__}: {err}")
        except BaseException as run_err:
            try:
                self.close()
            except TorqueloopError as err:
                run_err.add_note(f"closing the driver afterwards also failed: {type(err).__name__}: {err}")
            raise
        at_stop = list(getattr(self.driver, "exit_unconfirmed", None) or [])
        if self.plant is not None:
            _closure_report(self.plant, result)
        try:
            self.close()
        except TorqueloopError as err:
            result.messages.append(f"closing the driver failed: {type(err).__name__}: {err}")
        _report_exit_unconfirmed(self.driver, at_stop, result)
        return result

    def close(self) -> None:
        self._stack.close()

    def recover(self, result: RunResult, confirm, *, hold_s: float = 2.0, wait_s: float = 1.5) -> RunResult:
        """The recovery path after a run that stopped on a fault (a comms fault such as a CAN
        bus-off, a drive that rebooted, an e-stop), in this process.

        Asks the operator ``confirm(message) -> bool`` (nothing is done without a yes), clears
        the drives' faults (:meth:`drivers.base.Driver.clear_faults`), re-enables them and holds
        the robot where it stands for ``hold_s`` under the run's controller and safety
        supervisor (a new loop on the same driver and clock: every start-up check and
        protection applies again).  Each step is appended to ``meta.json``'s ``events``
        (``recovery_asked``, ``recovery_refused`` / ``recovery_confirmed``, ``faults_cleared``,
        ``re_enabled``, ``hold_done``, with the error where one failed).  Call it before
        :meth:`close` (``execute(recover=...)`` does), as often as needed.

        Parameters
        ----------
        result : RunResult
            The run's result (its faults are shown to the operator).
        confirm : callable (str) -> bool
        hold_s : float
            Length of the hold [s].
        wait_s : float
            On the lock-step clock, the simulated time that passes while the operator decides
            [s] (the drives finish their fault reactions, the robot comes to rest); on the
            wall clock that time passes by itself.

        Returns
        -------
        RunResult
            The hold's result (``"completed"`` when the robot was held without a fault).

        Raises
        ------
        SafetyError
            Nothing to recover (a completed run), a task-space run, or not confirmed.
        CommsError, DriverError
            The faults could not be cleared (the bus is still down, a drive keeps its fault).
        """
        from trajectories.base import Hold

        if result.status == "completed":
            raise SafetyError("nothing to recover: the run completed")
        if self.spec.space != "joint":
            raise SafetyError("recovery holds the joints: a task-space run is restarted from its start pose instead")
        faults = "; ".join(f"{f.cause} at {f.t_s:.3f} s: {f.message}" for f in result.faults) or result.status
        msg = (f"run '{self.spec.name}' stopped ({faults}). Clear the drives' faults, re-enable them and hold "
               f"the robot where it stands for {hold_s:g} s?")
        self._event("recovery_asked", faults=faults)
        if not confirm(msg):
            self._event("recovery_refused")
            raise SafetyError("recovery not confirmed: the drives stay disabled")
        self._event("recovery_confirmed")
        if isinstance(self.clock, LockstepClock):
            self.clock.advance(wait_s)
        try:
            self.driver.clear_faults()
            self._event("faults_cleared")
            fb = self.driver.enable()
            q = np.asarray(fb.position_rad, dtype=float).copy()
            self.driver.disable()
            self._event("re_enabled", position_rad=q.tolist())
        except TorqueloopError as err:
            self._event("recovery_failed", error=f"{type(err).__name__}: {err}")
            raise
        old = self.loop
        loop = ControlLoop(self.driver, old.controller, Hold(q, hold_s), old.safety, self.clock,
                           period_s=old.period_s, duration_s=hold_s, compiled=False)
        try:
            res = loop.run()
        except TorqueloopError as err:          # the start-up check refused (the robot moved meanwhile)
            self._event("hold_refused", error=f"{type(err).__name__}: {err}")
            raise
        self._event("hold_done", status=res.status, n_cycles=res.n_cycles,
                    faults=[f"{f.cause}@{f.t_s:.4f}s: {f.message}" for f in res.faults])
        return res

    def _event(self, kind: str, **info) -> None:
        """Append one event (UTC time, kind, details) to ``meta.json``'s ``events`` (kept in memory
        too, :attr:`events`, when the run writes no folder)."""
        import datetime as _dt

        from ..telemetry import read_meta, write_json

        ev = {"event": kind, "utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
              "clock_s": float(self.clock.now()), **info}
        self.events.append(ev)
        if self.out_dir is not None:
            try:
                meta = read_meta(self.out_dir)
                meta.setdefault("events", []).append(ev)
                write_json(Path(self.out_dir) / "meta.json", meta)
            except (OSError, ValueError, TorqueloopError):
                pass        # the events stay in memory; the run's own log is unaffected


def _closure_report(plant, result: RunResult) -> None:
    """A closed chain simulated with soft loop closures (MuJoCo): the closure error [m] as the
    log column ``closure_m`` (interpolated at each row's time), the metrics
    ``closure_error_rms_m``/``closure_error_max_m`` and a summary line."""
    t, err = plant.closure_log()
    if not t.size:
        return
    rms, mx = float(np.sqrt(np.mean(err ** 2))), float(np.max(err))
    result.metrics["closure_error_rms_m"] = rms
    result.metrics["closure_error_max_m"] = mx
    result.messages.append(f"loop closure error (the plant's soft equality constraints): RMS {rms * 1e6:.3g} um, "
                           f"max {mx * 1e6:.3g} um (log column closure_m)")
    if result.log_dir is None:
        return
    from numpy.lib import recfunctions

    from ..telemetry import read_meta, write_json
    path = Path(result.log_dir) / "log.npy"
    try:
        log = np.load(path)
        column = np.interp(log["t"], t, err) if log.size else np.zeros(0)
        out = recfunctions.append_fields(log, "closure_m", column, usemask=False)
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, out)
        os.replace(tmp, path)
        meta = read_meta(result.log_dir)
        meta.setdefault("fields", {})["closure_m"] = "loop-closure error of the plant's closed chain [m]"
        write_json(Path(result.log_dir) / "meta.json", meta)
    except (OSError, ValueError, TorqueloopError) as err:
        result.messages.append(f"the closure_m column was not written: {type(err).__name__}: {err}")


def _report_exit_unconfirmed(driver, at_stop: list, result: RunResult) -> None:
    """Warn when a drive did not confirm leaving its powered mode (MIT EXIT_MOTOR_MODE unanswered).

    ``at_stop``: joints unconfirmed after the loop's own disable; the driver's
    ``exit_unconfirmed`` after ``close()`` (which sends the exit again) are the ones
    that may still be powered.
    """
    after_close = list(getattr(driver, "exit_unconfirmed", None) or [])
    if after_close:
        result.messages.append(
            f"WARNING: drive(s) of joint(s) {after_close} never confirmed the exit from motor mode "
            f"(no reply to EXIT_MOTOR_MODE, sent 4 times): they may still be powered; check them "
            f"before touching the robot")
    elif at_stop:
        result.messages.append(
            f"exit from motor mode of joint(s) {at_stop} was not confirmed at the stop, confirmed "
            f"when the driver was closed")


def build_run(spec: RunSpec, *, out_dir: str | Path | None = None, meta: dict | None = None,
              clock=None) -> Run:
    """Build plant (simulated), driver, controller, safety, telemetry and the loop."""
    from drivers.registry import build_driver

    stack = ExitStack()
    telemetry = None
    try:
        if clock is None:
            clock = (LockstepClock() if spec.clock == "lockstep"
                     else WallClock(spin_s=spec.spin_s, realtime=spec.realtime))
        plant = None
        from .calibration import CalibratedDriver, check_calibration
        calibration = check_calibration(spec)      # hardware: refused when missing or stale
        if spec.hardware:
            driver = build_driver(spec.driver_section, now=clock.now)
        else:
            driver = build_driver(_sim_section(spec), now=clock.now, model=spec.model,
                                  rng=np.random.default_rng(0))
            plant = getattr(driver, "plant", None)
        stack.callback(driver.close)
        if calibration is not None:
            lim = spec.model.limits
            driver = CalibratedDriver(driver, calibration.offset_correction_rad, lim.position_min,
                                      lim.position_max, str(calibration.path))
        _, X0 = _joint_start(spec)
        controller = make_controller(spec, pose0=X0)
        safety = make_safety(spec, pose0=X0)
        telemetry = None
        if out_dir is not None:
            m = {"run": spec.name, "config_file": spec.file, "config": spec.data,
                 "period_s": spec.period_s, "space": spec.space, "controller_kind": spec.controller.kind,
                 "joint_names": list(spec.model.joint_names), "hardware": spec.hardware,
                 "plant": spec.plant}
            if isinstance(spec.model, ParallelModel) and spec.space == "task":
                m["task_dof"] = spec.model.task_dof
                m["task_layout"] = spec.model.task_layout
            axes = controller_quantities(spec.model, spec.space)
            if calibration is not None:
                m["calibration"] = {"file": str(calibration.path), "created_utc": calibration.created_utc,
                                    "offset_correction_rad": calibration.offset_correction_rad.tolist()}
            m.update({"joint_types": list(spec.model.joint_types), "axis_names": [a.name for a in axes],
                      "torque_limit": effective_torque_limit(spec).tolist(), "clock": spec.clock,
                      "robot_file": spec.model.source})
            m.update(meta or {})
            telemetry = TelemetryWriter(out_dir, spec.model.dof, len(axes),
                                        buffer_rows=spec.telemetry_buffer_rows, meta=m,
                                        joint_names=usable_labels(spec.model.joint_names, spec.model.dof),
                                        axis_names=usable_labels(m["axis_names"], len(axes)),
                                        mcap_ring_rows=spec.telemetry_mcap_rows if spec.telemetry_mcap else None,
                                        live=None if spec.telemetry_live is None
                                        else {**spec.telemetry_live, "ring_rows": spec.telemetry_mcap_rows},
                                        torque_limit_nm=m["torque_limit"],
                                        writer_avoid_cpus=_loop_cpus(spec))
        _warm_up(spec, controller, plant)
        loop = ControlLoop(driver, controller, spec.trajectory, safety, clock, period_s=spec.period_s,
                           telemetry=telemetry, duration_s=spec.duration_s)
        return Run(spec, loop, driver, clock, plant, None if out_dir is None else Path(out_dir), stack)
    except BaseException:
        stack.close()
        if telemetry is not None and telemetry.recorder is not None:
            telemetry.recorder.close()      # its writer process and shared memory
        raise


def _loop_cpus(spec: RunSpec) -> list[int] | None:
    """The CPUs a wall-clock run pins its loop to (``[loop.realtime] cpu``), which the telemetry
    writer process stays off; None when the loop is not pinned (the lock-step clock applies no
    real-time setting)."""
    if spec.clock != "wall" or not spec.realtime or "cpu" not in spec.realtime:
        return None
    cpus = spec.realtime["cpu"]
    return [int(cpus)] if isinstance(cpus, int) else [int(c) for c in cpus]


def _warm_up(spec: RunSpec, controller: Controller, plant) -> None:
    """Evaluate the controller and the plant model once before the drives are enabled.

    The models' kernels are compiled just in time (numba) on first use; doing it
    here keeps the compile time out of the first control cycles, where it would
    look like a stalled loop (stale feedback, missed deadlines).
    """
    from ..laws import State

    q0, X0 = _joint_start(spec)
    z = np.zeros_like(q0)
    ref0 = _start_reference(spec)
    controller.compute(0.0, ref0, State(0.0, q0, z))
    controller.tracking_error(ref0, State(0.0, q0, z))     # the loop's start-up check (after enable)
    controller.reset()
    if plant is None:
        return
    model = plant.model
    kw = {"pose": X0} if X0 is not None and "forward_dynamics" in getattr(model, "pose_hint_methods", ()) else {}
    if isinstance(model, ParallelModel) and X0 is not None:
        model.forward_kinematics_task(q0, guess=X0)
    model.forward_dynamics(q0, z, z, **kw)
    model.mass_matrix(q0, **kw)
    model.kinetic_energy(q0, z, **kw)
    if spec.clock == "wall":
        # the plant's integration kernels (friction included): on the wall clock the emulated
        # devices step the plant in their own thread, which a compile there would stall for
        # seconds, in enable() (no Get_Version answer in time)
        plant.warm_up()


def _sim_section(spec: RunSpec) -> Section:
    """The [driver] table of a simulated run, with the plant starting at the trajectory start.

    ``driver.plant.q0`` defaults to the trajectory's joint-space start (plus an
    optional ``driver.plant.initial_offset``), so a run starts on its reference.
    """
    q0, _ = _joint_start(spec)
    return sim_driver_section(spec.driver_section.data, q0=q0, clock=spec.clock,
                              period_s=spec.period_s, file=spec.file, realtime=spec.realtime,
                              path=spec.driver_section.path)


def sim_driver_section(driver: Mapping[str, Any], *, q0, clock: str, period_s: float,
                       file: str | None = None, path: str = "driver",
                       realtime: Mapping[str, Any] | None = None) -> Section:
    """A simulated ``[driver]`` table completed with the run's defaults (used by run configs
    and by :func:`controller.app.api.simulate`).

    ``plant.q0`` defaults to ``q0`` (plus ``plant.initial_offset``), ``plant.dt_max_s`` to
    the control period; on the lock-step clock the emulated CAN drivers get a long
    ``reply_timeout_s`` and devices served in the driver's thread (same results, no
    thread hand-offs) unless a reply latency is modelled, and the emulated Dynamixel
    servos are served inline with their wire time counted, not waited.  On the wall clock
    with a real-time loop (``realtime`` with ``sched_fifo_priority``) the emulated CAN
    drivers' devices are served in the loop's thread too, unless a reply latency is modelled
    or ``serve`` is given: an emulator thread of ordinary priority waits behind a SCHED_FIFO
    loop and answers late (the UR20 at 400 Hz: 47 of 802 deadlines missed with the thread,
    0 inline, at a load of 3); so are the emulated Dynamixel servos, their wire time slept.
    On the wall clock the emulated ODrive axes step the plant at most once per firmware
    control tick (``emulator.plant_step_min_s`` defaults to 1/8000 s, the firmware's 8 kHz
    loop): the Stewart platform at 1 kHz then holds its deadlines (1 and 4 of 9 502 missed at
    a load of 3-3.7, against a stop on the overrun rule with a plant step for every frame).

    Parameters
    ----------
    driver : mapping
        The ``[driver]`` table (``type`` = ``sim_*``); not modified.
    q0 : array_like, shape (n,)
        Joint-space start of the reference [rad | m].
    clock : {"lockstep", "wall"}
    period_s : float
        Control period [s].
    file, path : str, optional
        Config file and table path named in errors.
    realtime : mapping, optional
        The loop's ``[loop.realtime]`` settings (wall clock).
    """
    import copy

    data = copy.deepcopy(dict(driver))
    driver_type = data.get("type", "")
    plant = dict(data.get("plant", {}))
    q0 = np.asarray(q0, dtype=float)
    if "q0" not in plant:
        off = plant.pop("initial_offset", None)
        if off is not None:
            sec = Section(plant | {"initial_offset": off}, file, f"{path}.plant")
            q0 = q0 + sec.vector("initial_offset", q0.size)
        plant["q0"] = [float(v) for v in q0]
    elif "initial_offset" in plant:
        raise ConfigError("give either q0 or initial_offset, not both", file, f"{path}.plant.initial_offset")
    if clock == "lockstep" and driver_type != "sim_direct" and "reply_timeout_s" not in data:
        # Simulated time does not advance while the driver waits, so a reply that
        # is late in wall-clock time (a slow machine, a JIT compile) is not late for
        # the plant: wait long enough that only a lost frame times out.
        data["reply_timeout_s"] = LOCKSTEP_REPLY_TIMEOUT_S
    realtime_loop = clock == "wall" and bool(realtime) and realtime.get("sched_fifo_priority") is not None
    if (clock == "lockstep" or realtime_loop) and driver_type in ("sim_mit_can", "sim_odrive_can", "sim_cia402_can"):
        # Simulated time is frozen while the driver waits: the emulated devices can
        # serve each frame in the driver's thread when it is sent (same results, no
        # thread hand-offs), unless a wall-clock reply latency is modelled.  On the wall
        # clock they keep their thread by default: `serve = "inline"` there is a choice
        # (drivers.sim.emulators.InlineBus), not yet the default (a driver draining its
        # bus can chase the broadcasts the devices make meanwhile on a slow machine), except
        # under a real-time loop, whose SCHED_FIFO thread an ordinary emulator thread waits behind.
        emu = dict(data.get("emulator", {}))
        if "serve" not in emu and not emu.get("reply_latency_s", 0.0):
            emu["serve"] = "inline"
            data["emulator"] = emu
    if (clock == "lockstep" or realtime_loop) and driver_type in ("sim_dynamixel", "sim_odrive_ascii"):
        # The same for the emulated Dynamixel servos and ODrive ASCII axes (serial devices): no
        # pseudo-terminal and no thread, the servos
        # answer each write in the driver's thread, and the wire time is counted against the
        # driver's read deadlines instead of slept (drivers.sim.dynamixel_emulator.InlineDynamixelPort);
        # under a real-time loop on the wall clock the wire time is slept (the servos' thread
        # answered late behind the SCHED_FIFO loop: dxl_3dof_arm at 500 Hz stopped on its overrun
        # rule, 113 of 219 deadlines missed; inline 2 and 4 of 1252 at a load of 10.5)
        emu = dict(data.get("emulator", {}))
        emu.setdefault("serve", "inline")
        if emu["serve"] == "inline":
            emu.setdefault("wire_time", "count" if clock == "lockstep" else "wait")
        data["emulator"] = emu
    if clock == "wall" and driver_type == "sim_odrive_can" and "plant_step_min_s" not in data.get("emulator", {}):
        # On the wall clock every frame and poll would bring the plant up to the clock: a plant
        # step each (one RK4 step of the Stewart platform ~40 us, a dozen frames a cycle for six
        # axes: 0.8 ms a 1 kHz cycle); the ODrive firmware applies a command and updates the
        # estimate it reports once per control tick (8 kHz), and so do its emulated axes
        from drivers.sim.odrive_emulator import CONTROL_PERIOD_S

        data["emulator"] = dict(data.get("emulator", {})) | {"plant_step_min_s": CONTROL_PERIOD_S}
    if driver_type == "sim_odrive_can" and "encoder_period_s" not in data.get("emulator", {}):
        # The emulated ODrives broadcast their estimates as a user sets encoder_msg_rate_ms for
        # the loop: every period, in whole milliseconds (at least 1 ms), not at 1 kHz whatever
        # the rate (six axes at 400 Hz then made 12 000 broadcasts a second for 2 400 cycles)
        emu = dict(data.get("emulator", {}))
        emu["encoder_period_s"] = max(1, int(period_s * 1e3 + 1e-9)) * 1e-3
        data["emulator"] = emu
    if "dt_max_s" not in plant:
        plant["dt_max_s"] = period_s
    for key in ("robot", "mjcf"):                  # files named relative to the config
        if isinstance(plant.get(key), str) and file:
            p = Path(plant[key])
            if not p.is_absolute():
                plant[key] = str((Path(file).parent / p).absolute())
    data["plant"] = plant
    return Section(data, file, path)


# ---------------------------------------------------------------------------
# helpers for the CLI and the tuner
# ---------------------------------------------------------------------------
def summary_metrics(spec: RunSpec, result: RunResult) -> dict:
    """Flat metrics dict of a run (status, errors, torques, timing) for tables and tuning."""
    m = dict(result.metrics or {})
    out: dict[str, Any] = {"status": result.status, "n_cycles": result.n_cycles,
                           "faults": [f"{f.cause}@{f.t_s:.4f}s" for f in result.faults]}
    for k, v in m.items():
        out[k] = v
    tmax = effective_torque_limit(spec)
    peak = np.asarray(m.get("peak_torque", np.zeros_like(tmax)), dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(np.isfinite(tmax) & (tmax > 0), peak / tmax, 0.0)
    out["torque_peak_ratio_sum"] = float(np.sum(ratio))
    out["compiled_fraction"] = result.compiled_cycles / result.n_cycles if result.n_cycles else 0.0
    out["saturation_fraction_per_joint"] = list(m.get("saturation_fraction", []))
    out["saturation_fraction"] = float(m.get("saturation_fraction_any", 0.0))
    out["rms_error_norm"] = float(np.linalg.norm(m.get("rms_error", [0.0])))
    t = result.timing.as_dict() if result.timing is not None else {}
    out["timing"] = t
    out["timing_health"] = timing_health(t, spec.clock)
    out["torque_limit"] = tmax.tolist()
    out["wall_time_s"] = result.wall_time_s
    sim_s = result.n_cycles * spec.period_s
    out["real_time_factor"] = sim_s / result.wall_time_s if result.wall_time_s > 0 else math.inf
    if result.log_dir is not None and getattr(spec.trajectory, "task", None) is not None:
        from ..telemetry import read_log
        from .report import tool_path_error
        try:
            out.update(tool_path_error(spec, read_log(result.log_dir)))
        except (TorqueloopError, OSError):
            pass                # no log to read (a failed disk): the figure is left out
    return out


def run_offline_metrics(data: Mapping[str, Any], *, file: str | None = None,
                        trajectory_cache: dict | None = None, model_cache: dict | None = None,
                        out_dir: str | Path | None = None,
                        analyse: Callable[[RunSpec, RunResult, Path | None], dict] | None = None) -> dict:
    """Run a (simulated) config and return :func:`summary_metrics` (for tuning, robustness).

    ``trajectory_cache``, ``model_cache``: see :func:`parse_run`.  ``out_dir``: write the log
    there (default: no telemetry).  ``analyse(spec, result, out_dir)``: more metrics of the
    finished run (its log read from ``out_dir``), added to the summary's."""
    base_dir = Path(file).parent if file else None
    spec = parse_run(data, file=file, base_dir=base_dir, trajectory_cache=trajectory_cache,
                     model_cache=model_cache)
    if spec.hardware:
        raise ConfigError("offline sweeps run only on the simulated plant (driver type sim_*)", file,
                          "driver.type")
    run = build_run(spec, out_dir=out_dir)
    try:
        result = run.loop.run()
    except SafetyError as err:
        return {"status": "refused", "error": str(err)}
    finally:
        run.close()
    out = summary_metrics(spec, result)
    if analyse is not None:
        out.update(analyse(spec, result, None if out_dir is None else Path(out_dir)))
    return out


@dataclass
class Validation:
    """What :func:`validate_run` found: report lines and warnings (errors are raised)."""

    lines: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    def text(self) -> str:
        out = list(self.lines)
        if self.warnings:
            out += [""] + [f"WARNING: {w}" for w in self.warnings]
        return "\n".join(out)


#: the default tracking-error limit (:func:`default_tracking_error`): the share of the dynamics
#: the model may miss (a plant 10 % heavier than the model, as the shipped runs simulate) ...
TRACKING_MODEL_ERROR = 0.1
#: ... the margin over the error that share and the friction give a healthy loop ...
TRACKING_MARGIN = 2.0
#: ... the time within which a robot whose drives give up must be stopped [s], and the fraction of
#: its fall by then at which it is (a fall of half that distance is tripped at 0.71 of the time) ...
TRACKING_FALL_S = 0.05
TRACKING_FALL_FRACTION = 0.5
#: ... and the least limit [rad | m] (quantisation, delays and noise of a healthy loop)
TRACKING_FLOOR = 8e-3
#: samples of the trajectory the default is computed on
_TRACKING_SAMPLES = 200


def default_tracking_error(spec: RunSpec) -> np.ndarray:
    """The tracking-error limit a run gets when ``[safety] tracking_error_max`` is not set, per
    controller-space axis [rad | m], derived from the gains and the trajectory.

    Two bounds on the trajectory's samples (:data:`_TRACKING_SAMPLES`), per axis:

    * a healthy loop: the error dynamics are ``e'' + Kd e' + Kp e = d`` with ``d`` the acceleration
      the model does not account for, so ``|e| <= max|d| / Kp``; ``d`` is
      :data:`TRACKING_MODEL_ERROR` of the joint torques the trajectory needs (inverse dynamics:
      inertia, Coriolis, gravity) plus the model's friction (that share of it when the law
      compensates friction), over the mass matrix's diagonal (task
      space: that share of the reference acceleration and of gravity); times
      :data:`TRACKING_MARGIN`;
    * a fall: with no torque from its drive an axis accelerates at ``a`` = the whole of that
      torque over the inertia (task space: the reference acceleration and gravity) and leaves its
      reference by ``a T^2 / 2`` in ``T`` = :data:`TRACKING_FALL_S`;
      :data:`TRACKING_FALL_FRACTION` of that is tripped within ``T``.

    The limit is the larger of the two, at least :data:`TRACKING_FLOOR`: the healthy bound keeps
    a healthy run clear of it; where the fall bound is the larger, a falling axis trips within
    ``T`` (``tests/test_tracking_default.py``).  ``Kp`` is per unit inertia (a PD law's torque
    gain over the inertia at the start).

    Returns
    -------
    ndarray, shape (dim,)
        One limit per axis of the controller's space.
    """
    model = spec.model
    traj = spec.trajectory
    dim = model.task_dof if spec.space == "task" else model.dof
    kp = _kp_per_inertia(spec, dim)
    t = np.linspace(0.0, float(traj.duration_s), _TRACKING_SAMPLES)
    need = np.zeros(dim)            # |acceleration| the axis needs from its drive [rad/s^2 | m/s^2]
    miss = np.zeros(dim)            # ... of which a healthy loop may miss
    g = float(np.linalg.norm(getattr(model, "gravity_vector", np.zeros(3))))
    # friction the law compensates with the model's is missed by the model's share; else all of it
    f_miss = TRACKING_MODEL_ERROR if spec.controller.friction_compensation != "none" else 1.0
    for tk in t:
        r = traj.sample(float(tk))
        if spec.space == "task":
            a = np.abs(np.asarray(r.acc, dtype=float)) + g
            m_ = TRACKING_MODEL_ERROR * a
        else:
            q, qd, qdd = (np.asarray(x, dtype=float) for x in (r.pos, r.vel, r.acc))
            tau = np.abs(np.asarray(model.inverse_dynamics(q, qd, qdd), dtype=float))
            fr = np.abs(np.asarray(model.friction_torque(qd), dtype=float)) + np.asarray(model.drive.coulomb)
            m = np.diag(np.asarray(model.mass_matrix(q), dtype=float))
            a = tau / m
            m_ = (TRACKING_MODEL_ERROR * tau + f_miss * fr) / m
        need = np.maximum(need, a)
        miss = np.maximum(miss, m_)
    healthy = TRACKING_MARGIN * miss / kp
    fall = TRACKING_FALL_FRACTION * 0.5 * need * TRACKING_FALL_S ** 2
    return np.maximum(TRACKING_FLOOR, np.maximum(healthy, fall))


def _kp_per_inertia(spec: RunSpec, dim: int) -> np.ndarray:
    """The proportional gain per axis [1/s^2] (a PD law's torque gain over the inertia at the start)."""
    c = spec.controller
    if c.kind in ("computed_torque", "task_computed_torque"):
        return np.asarray(design_gains(spec).kp, dtype=float).reshape(-1)[:dim] * np.ones(dim)
    law = make_controller(spec)
    kp = np.asarray(law.kp, dtype=float)
    kp = np.diag(kp) if kp.ndim == 2 else kp * np.ones(dim)
    start = np.asarray(_start_reference(spec).pos, dtype=float)
    inertia = _task_inertia(spec.model, start) if spec.space == "task" else spec.model.mass_matrix(start)
    return kp / np.diag(np.asarray(inertia, dtype=float))


def _tracking_limit(spec: RunSpec) -> Any:
    """``[safety] tracking_error_max``, or in simulation (unless listed in
    ``disabled_protections``) :func:`default_tracking_error`; None: off (a hardware run is refused
    without one, see :func:`validate_run`)."""
    if spec.safety.tracking_error_max is not None:
        return spec.safety.tracking_error_max
    if spec.hardware or "tracking_error_max" in spec.safety.disabled_protections:
        return None
    return default_tracking_error(spec)


def make_safety(spec: RunSpec, *, pose0=None) -> SafetySupervisor:
    """The run's safety supervisor, clipping to the effective torque limit (the least of the
    robot file, ``[safety] torque_max`` and the drives, :func:`effective_torque_limit`); a
    ConfigError names the run file and the ``safety.`` field."""
    import dataclasses

    config = spec.safety
    caps = spec.drive_capabilities()
    if caps is not None:
        config = dataclasses.replace(config, torque_max=effective_torque_limit(spec))
    if config.tracking_error_max is None:
        te = _tracking_limit(spec)
        if te is not None:
            config = dataclasses.replace(config, tracking_error_max=np.minimum(te, SAFETY_RANGES[
                "tracking_error_max"][1]))
    try:
        return SafetySupervisor(config, spec.model.limits, model=spec.model, pose0=pose0)
    except ConfigError as err:
        if err.file is not None:
            raise
        raise ConfigError(err.message, spec.file, f"safety.{err.field}" if err.field else "safety") from err


def check_brake(spec: RunSpec) -> None:
    """Refuse a ``brake_disable`` brake too weak to stop this robot: on every joint the damping's
    time constant at the start pose, ``M_jj / brake_kd_nm_s_per_rad`` (``M`` the model's mass
    matrix [kg m^2 | kg]), may not exceed the longest brake accepted (``brake_time_s`` <= 10 s):
    a slower brake takes less than 63 % of a joint's speed out before the drives are disabled.
    A fixed floor on ``brake_kd`` cannot see this (the shipped robots' brakes span 0.5 to 2000).

    Raises
    ------
    ConfigError
        Naming the run file and ``safety.brake_kd_nm_s_per_rad``, with the least value accepted.
    """
    if spec.safety.stop_reaction != "brake_disable":
        return
    model = spec.model
    q0, X0 = _joint_start(spec)
    hint = X0 is not None and "mass_matrix" in getattr(model, "pose_hint_methods", ())
    M = np.asarray(model.mass_matrix(q0, pose=X0) if hint else model.mass_matrix(q0), dtype=float)
    m = np.diag(M)
    kd = np.broadcast_to(np.asarray(spec.safety.brake_kd_nm_s_per_rad, dtype=float), m.shape)
    t_max = SAFETY_RANGES["brake_time_s"][1]
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = m / kd
    bad = np.flatnonzero(~(tau <= t_max))
    if bad.size:
        j = int(bad[np.argmax(np.nan_to_num(tau[bad], nan=np.inf))])
        names = tuple(getattr(model, "joint_names", ())) or tuple(f"joint {i}" for i in range(m.size))
        least = np.where(bad_mask := ~(tau <= t_max), m / t_max, kd)     # per joint, the least accepted
        raise ConfigError(f"{kd[j]:g} is too weak a brake for joint {names[j]!r}: its inertia at the start "
                          f"pose, {m[j]:.4g}, gives a damping time constant of {tau[j]:.3g} s, longer than the "
                          f"longest brake ({t_max:g} s): the brake would not stop the robot before the drives are "
                          f"disabled; use at least {float(np.max(least[bad_mask])) * 1.0005:.4g}"
                          + (" on every joint" if np.ndim(spec.safety.brake_kd_nm_s_per_rad) == 0 else
                             f" on joint {names[j]!r}"), spec.file, "safety.brake_kd_nm_s_per_rad")


def validate_run(spec: RunSpec, *, out_dir: str | Path | None = None, min_free_bytes: int | None = None,
                 build_sim: bool = False, calibration: bool = True) -> Validation:
    """The one validation of a run before anything moves, used by ``check`` and ``run``.

    Checks, in order: the safety settings against the model (finite torque
    limits on every actuator, vector lengths); for hardware runs, that no
    protection of :data:`controller.safety.PROTECTIONS` is off unless listed in
    ``safety.disabled_protections``; the bus-load budget (over 100 %: an error
    for hardware, a warning in simulation, where the emulated bus has no
    bandwidth limit); the trajectory's feasibility (position, velocity and
    torque limits, reachability, singularity margin at least
    ``safety.singularity_margin_min``); optionally (``out_dir``) that the
    output folder is writable with room for the log; last, the calibration
    (:func:`controller.app.calibration.check_calibration`: a hardware run needs a fresh one;
    with ``calibration=False`` a missing or stale one is a warning instead, for ``check``).

    Raises
    ------
    ConfigError
        Naming the file and the field, for the first problem found.
    """
    from trajectories.feasibility import check_feasibility

    v = Validation()
    _, X0 = _joint_start(spec)
    safety = make_safety(spec, pose0=X0)
    check_brake(spec)
    n_ctrl = spec.model.task_dof if spec.space == "task" else spec.model.dof
    for key in ("tracking_error_max", "startup_tolerance"):
        val = getattr(spec.safety, key)
        if val is not None and np.ndim(val) == 1 and np.size(val) != n_ctrl:
            raise ConfigError(f"expected a scalar or {n_ctrl} values (one per {spec.space}-space axis of "
                              f"{spec.controller.kind}), got {np.size(val)}", spec.file, f"safety.{key}")
    from .calibration import BringupSpec, check_calibration
    if "bringup" in spec.data:              # the [bringup] table (its cap against the limits)
        BringupSpec.from_spec(spec, _joint_start(spec)[0])
    if build_sim and not spec.hardware:
        # build (and close) the simulated stack: validates the driver, plant and emulator tables
        build_run(spec).close()
    if spec.hardware:
        # the driver table as the run reads it, on private virtual buses: what check passes,
        # run accepts
        from drivers.registry import check_driver
        check_driver(spec.driver_section)
    off = []
    if spec.safety.tracking_error_max is None:
        if safety.err_max.size and np.all(np.isfinite(safety.err_max)):
            v.lines.append("tracking_error_max (derived from the gains and the trajectory, "
                           "controller.app.run.default_tracking_error): "
                           + ", ".join(f"{x:.4g}" for x in np.atleast_1d(safety.err_max)))
        else:
            off.append("tracking_error_max")
    if not np.all(np.isfinite(safety.v_max)):
        off.append("velocity_max")
    if isinstance(spec.model, ParallelModel) and spec.safety.singularity_margin_min is None:
        off.append("singularity_margin_min")
    if not np.any(safety.margin > 0):
        off.append("position_margin_rad")
    # a protection on by default and switched off by a value (the soft zone's 0) is refused in
    # simulation too unless listed; the others may be off in simulation
    unlisted = [p for p in off if p not in spec.safety.disabled_protections
                and (spec.hardware or p == "position_margin_rad")]
    if unlisted:
        what = {"tracking_error_max": "no tracking-error limit",
                "velocity_max": "no velocity limit (robot file or [safety] velocity_max)",
                "singularity_margin_min": "no singularity guard on a parallel robot",
                "position_margin_rad": "no soft zone before the position limits (position_margin_rad = 0)"}
        raise ConfigError(f"a {'hardware ' if spec.hardware else ''}run needs this protection: {what[unlisted[0]]}; set it, or list "
                          f"{unlisted[0]!r} in safety.disabled_protections to run without it deliberately",
                          spec.file, f"safety.{unlisted[0]}")
    if off:
        v.lines.append(f"protections off: {', '.join(off)}"
                       + (" (listed in safety.disabled_protections)" if spec.hardware else " (simulation)"))
    rep_bus = bus_budget(spec)
    if rep_bus is not None:
        v.lines += ["bus-load budget:", str(rep_bus)]
        if not rep_bus.fits:
            msg = (f"the bus load is over 100 % at {spec.rate_hz:g} Hz: the real bus cannot carry this "
                   f"cycle (see the bus-load budget for remedies)")
            if spec.hardware:
                raise ConfigError(msg, spec.file, "loop.rate_hz")
            v.warnings.append(msg + "; the simulated run goes on, a hardware run with this setup is refused")
    m_min = spec.safety.singularity_margin_min
    caps = _drive_lines(spec, v)
    lims = _drive_bounds(spec, safety, caps)
    rep = check_feasibility(spec.trajectory, spec.model, dt_s=max(spec.period_s, 0.002), space=spec.space,
                            velocity_max=lims["velocity"], torque_max=safety.tau_max,
                            position_min=lims["position"][0], position_max=lims["position"][1],
                            singularity_margin=max(1e-3, m_min or 0.0))
    v.lines += ["trajectory feasibility:", str(rep)]
    if not rep.ok:
        _refuse_drive_shortfall(spec, rep, caps, lims)
        raise ConfigError("trajectory is not feasible (nothing was enabled):\n" + str(rep), spec.file, "trajectory")
    if out_dir is not None:
        check_output_dir(out_dir, spec, min_free_bytes=min_free_bytes)
    # last: a hardware run refuses a missing, stale or unfinished calibration (`torqueloop
    # bringup` writes it); `check` (calibration=False) reports it as a warning
    try:
        cal = check_calibration(spec)
    except ConfigError as err:
        if calibration:
            raise
        v.warnings.append(f"{err} (a hardware run refuses to start without it)")
        cal = None
        # and what that bring-up would refuse before it enables anything
        from .calibration import reference_pose_refusal
        try:
            refused = reference_pose_refusal(spec, BringupSpec.from_spec(spec, _joint_start(spec)[0]))
        except TorqueloopError as err2:     # the model at the reference pose: reported, check goes on
            v.warnings.append(f"the bring-up's reference pose could not be checked: {type(err2).__name__}: {err2}")
            refused = None
        if refused is not None:
            v.warnings.append(f"`torqueloop bringup` refuses this config before it enables anything: {refused}")
    if cal is not None:
        v.lines.append(f"calibration: {cal.path} (written {cal.created_utc}), offset corrections "
                       f"{[round(float(c), 6) for c in cal.offset_correction_rad]}")
    return v


def _drive_lines(spec: RunSpec, v: Validation) -> list | None:
    """The drives' capabilities (:meth:`RunSpec.drive_capabilities`), listed in the validation's
    report with the effective torque limits; refuses an offset key of the wrong unit, and warns
    where a joint's position or velocity limit lies beyond what its drive's fields carry."""
    from .report import torque_limit_sources

    caps = spec.drive_capabilities()
    if caps is None:
        return None
    model = spec.model
    types = list(model.joint_types)
    names = list(model.joint_names)
    for j, c in enumerate(caps):
        want = "offset_m" if types[j] == "prismatic" else "offset_rad"
        if c.offset_key and c.offset_key != want:
            unit = "m (a prismatic joint)" if want == "offset_m" else "rad (a revolute joint)"
            raise ConfigError(f"joint {names[j]!r} is {types[j]}: its offset (joint position at motor zero) is in "
                              f"{unit}; give it as {want}", spec.file, f"{c.path}.{c.offset_key}")
    lim, src = torque_limit_sources(spec)
    unit = ["N" if t == "prismatic" else "N m" for t in types]
    v.lines.append("drive capability (joint side; the effective limit is the least of robot file, "
                   "[safety] and drive):")
    for j, c in enumerate(caps):
        v.lines.append(f"  {names[j]}: {c.torque_max_nm:.4g} {unit[j]} ({c.torque_from}); effective "
                       f"{lim[j]:.4g} {unit[j]} ({src[j]})")
    q_lo = np.asarray(model.limits.position_min, dtype=float)
    q_hi = np.asarray(model.limits.position_max, dtype=float)
    vmax = np.asarray(model.limits.velocity_max, dtype=float) if spec.safety.velocity_max is None else \
        np.broadcast_to(np.asarray(spec.safety.velocity_max, dtype=float), (model.dof,))
    for j, c in enumerate(caps):
        if c.position_range is not None and (q_lo[j] < c.position_range[0] or q_hi[j] > c.position_range[1]):
            v.warnings.append(f"joint {names[j]!r}: its position limits [{q_lo[j]:.4g}, {q_hi[j]:.4g}] reach beyond "
                              f"what the drive's position field carries, [{c.position_range[0]:.4g}, "
                              f"{c.position_range[1]:.4g}] ({c.position_from}): a position past it cannot be "
                              f"read, so the position limit cannot be watched there")
        if vmax[j] > c.velocity_max:
            v.warnings.append(f"joint {names[j]!r}: velocity limit {vmax[j]:.4g} above what the drive carries, "
                              f"{c.velocity_max:.4g} ({c.velocity_from})")
    return caps


def _drive_bounds(spec: RunSpec, safety: SafetySupervisor, caps: list | None) -> dict:
    """The position range and velocity limit feasibility checks: the model's / safety's, narrowed
    to what the drives' position and velocity fields carry."""
    n = spec.model.dof
    lo = np.asarray(spec.model.limits.position_min, dtype=float).copy()
    hi = np.asarray(spec.model.limits.position_max, dtype=float).copy()
    vel = np.asarray(safety.v_max, dtype=float).copy()
    drive = {"position": np.zeros(n, dtype=bool), "velocity": np.zeros(n, dtype=bool)}
    for j, c in enumerate(caps or ()):
        if c.position_range is not None:
            if c.position_range[0] > lo[j]:
                lo[j], drive["position"][j] = c.position_range[0], True
            if c.position_range[1] < hi[j]:
                hi[j], drive["position"][j] = c.position_range[1], True
        if c.velocity_max < vel[j]:
            vel[j], drive["velocity"][j] = c.velocity_max, True
    return {"position": (lo, hi), "velocity": vel, "drive": drive}


def _refuse_drive_shortfall(spec: RunSpec, rep, caps: list | None, lims: dict) -> None:
    """Raise a ConfigError naming the joint, what the trajectory needs, what its drive delivers and
    the settings that change it, when a violated limit is the drive's (else return)."""
    if caps is None:
        return
    from .report import torque_limit_sources

    tau_lim, tau_src = torque_limit_sources(spec)
    names = list(spec.model.joint_names)
    types = list(spec.model.joint_types)
    msgs = []
    field_ = None
    for viol in rep.violations:
        j = viol.axis
        if j is None:
            continue
        c = caps[j]
        pris = types[j] == "prismatic"
        msg = None
        if viol.quantity == "torque" and tau_src[j] == "drive":
            need = float(rep.peak_ratio["torque"][j] * tau_lim[j])
            u = "N" if pris else "N m"
            msg = (f"joint {names[j]!r} needs {need:.4g} {u} (first beyond the drive's limit at t = {viol.t_s:.3f} s), "
                   f"its drive delivers {c.torque_max_nm:.4g} {u} = {c.torque_from}; raise it with "
                   f"{', '.join(c.settings)}, or make the trajectory slower")
        elif viol.quantity == "position" and lims["drive"]["position"][j]:
            u = "m" if pris else "rad"
            msg = (f"joint {names[j]!r} reaches {viol.value:.4g} {u} at t = {viol.t_s:.3f} s, outside "
                   f"[{c.position_range[0]:.4g}, {c.position_range[1]:.4g}] {u} that its drive's position field "
                   f"carries ({c.position_from}); change the gear ratio, the offset or the drive's range ({c.path})")
        elif viol.quantity == "velocity" and lims["drive"]["velocity"][j]:
            msg = (f"joint {names[j]!r} moves at {abs(viol.value):.4g} {'m/s' if pris else 'rad/s'} at "
                   f"t = {viol.t_s:.3f} s, beyond {c.velocity_max:.4g} that its drive carries ({c.velocity_from}); "
                   f"make the trajectory slower or change {c.path}")
        if msg is not None:
            msgs.append(msg)
            field_ = field_ or c.path
    if msgs:
        raise ConfigError("the drives cannot carry this trajectory (nothing was enabled):\n  "
                          + "\n  ".join(msgs), spec.file, field_)


def log_bytes_estimate(spec: RunSpec) -> int:
    """Upper estimate of a run's log size [bytes] (rows x row size, plus stop-reaction rows)."""
    from ..telemetry import log_dtype

    n = spec.model.dof
    dim = spec.model.task_dof if spec.space == "task" else n
    rows = int(spec.duration_s * spec.rate_hz) + 2 + int(60.0 * spec.rate_hz)  # + a long hold
    return rows * log_dtype(n, dim).itemsize + 1_000_000


def check_output_dir(out_dir: str | Path, spec: RunSpec, *, min_free_bytes: int | None = None) -> None:
    """Refuse (ConfigError) an output folder that cannot be written or lacks room for the log."""
    import os
    import shutil

    out = Path(out_dir)
    probe_dir = out
    while not probe_dir.exists():
        if probe_dir.parent == probe_dir:
            break
        probe_dir = probe_dir.parent
    if probe_dir.exists() and not probe_dir.is_dir():
        raise ConfigError(f"output path {probe_dir} is a file, not a folder", str(out), "--out")
    if not os.access(probe_dir, os.W_OK | os.X_OK):
        raise ConfigError(f"output folder {probe_dir} is not writable (nothing was enabled)", str(out), "--out")
    need = log_bytes_estimate(spec) if min_free_bytes is None else int(min_free_bytes)
    free = shutil.disk_usage(probe_dir).free
    if free < need:
        raise ConfigError(f"only {free / 1e6:.1f} MB free in {probe_dir}; the log needs up to {need / 1e6:.1f} MB "
                          "(nothing was enabled)", str(out), "--out")


def check_run_config(path: str | Path, overrides: dict | None = None) -> str:
    """Validate a run config (with ``overrides`` as in :func:`load_run`) exactly as ``run`` does
    before it enables anything (:func:`validate_run`); return model summary, bus-load budget, gain
    report, feasibility report and warnings."""
    spec = load_run(path, overrides=overrides)
    lines = [f"run config {path}: '{spec.name}' OK", "", spec.model.summary(), ""]
    lines.append(f"controller: {spec.controller.kind} in {spec.space} space, "
                 f"loop {spec.rate_hz:g} Hz ({spec.clock} clock), duration {spec.duration_s:g} s")
    lines.append(f"driver: {spec.driver_type} ({'HARDWARE' if spec.hardware else 'simulated plant'})")
    if spec.plant:
        lines.append("plant: " + ", ".join(f"{k} = {v}" for k, v in spec.plant.items()))
    try:
        lines += ["", gain_report(spec)]
    except TorqueloopError as err:
        lines += ["", f"gain analysis not available: {err}"]
    v = validate_run(spec, build_sim=True, calibration=False)
    lines += ["", v.text()]
    if spec.hardware:
        lines += ["", first_run_checklist(spec)]
    return "\n".join(lines)


#: the keys of a hardware ``[driver]`` table that describe one particular robot, by what sets
#: them: ``(what, keys, how to get them right)``; the tables they are read in: ``[driver]``,
#: its bus tables and each ``[[driver.joints]]``
FIRST_RUN_KEYS = (
    ("CAN adapter", ("interface", "channel", "bitrate"),
     "your CAN interface as `ip -details link show` lists it; bring it up with `sudo ip link set "
     "can0 up type can bitrate 1000000` (a serial-line adapter first: `sudo slcand -o -s8 "
     "/dev/ttyACM0 can0`)"),
    ("serial port", ("port", "baudrate"),
     "your adapter as /dev/serial/by-id/ names it (stable across reboots), at the drives' baud rate"),
    ("ids", ("can_id", "node_id", "id", "axis"),
     "as set in each drive with its vendor's tool; `torqueloop bringup` checks that each one answers"),
    ("direction and zero", ("sign", "offset_rad", "offset_m"),
     "measured on the robot by `torqueloop bringup CONFIG`, which writes the calibration a hardware "
     "run needs"),
    ("ratios and units", ("model", "gear_ratio", "torque_constant_nm_per_a", "efficiency", "counts_per_rev",
                          "rated_torque_nm", "velocity_counts_per_rev_s"),
     "from the data sheets of your drives and gearboxes (bringup measures the torque constant)"),
    ("drive limits", ("torque_limit_nm", "current_limit_a", "velocity_limit_rad_s", "limits"),
     "what your drives are configured to deliver"),
)

#: the ``[safety]`` keys a first run should set low (default: the robot file's limits)
FIRST_RUN_SAFETY_KEYS = ("torque_max", "velocity_max", "position_min", "position_max", "tracking_error_max")


def first_run_checklist(spec: RunSpec) -> str:
    """What a hardware config holds that must be your robot's before a first run
    (:data:`FIRST_RUN_KEYS`): each key with the value the file gives it (or its default), and
    how to get it right; then the ``[safety]`` limits of a first run."""
    from drivers.registry import MAPPING_KEYS, OFFSET_KEYS

    data = spec.driver_section.data
    joints = data.get("joints") if isinstance(data.get("joints"), list) else []
    names = list(spec.model.joint_names)
    tables = [("[driver]", "driver", data)]
    if isinstance(data.get("bus"), Mapping):
        tables.append(("[driver.bus]", "driver.bus", data["bus"]))
    for bname, b in (data.get("buses") or {}).items() if isinstance(data.get("buses"), Mapping) else ():
        if isinstance(b, Mapping):
            tables.append((f"[driver.buses.{bname}]", "driver.bus", b))
    for j, js in enumerate(joints):
        if isinstance(js, Mapping):
            label = js.get("name") or (names[j] if j < len(names) else str(j))
            tables.append((f"joint {label}", "driver.joints", js))
    lines = ["before a first run on this robot, set or confirm (the values as this file gives them):"]
    for what, keys, how in FIRST_RUN_KEYS:
        found = []
        for title, path, table in tables:
            items = []
            for k in keys:
                if k in table:
                    v = table[k]
                    items.append(f"{k} = {v!r}" if not isinstance(v, Mapping) else f"[{k}] table")
                elif k in OFFSET_KEYS and any(o in table for o in OFFSET_KEYS):
                    continue            # the other offset key is given
                elif path == "driver.joints" and k in MAPPING_KEYS:     # every driver type's
                    items.append(f"{k} not set (the default)")
            if items:
                found.append(f"    {title}: " + ", ".join(items))
        if found:
            lines += [f"  {what}: {how}"] + found
    sec = spec.safety
    limits = [f"{k} = {_fmt_limit(getattr(sec, k))}" for k in FIRST_RUN_SAFETY_KEYS]
    lines += ["  [safety] limits of a first run: low torque, slow, a tight tracking error (none = the "
              "robot file's): " + ", ".join(limits)]
    return "\n".join(lines)


def _fmt_limit(v) -> str:
    if v is None:
        return "none"
    arr = np.atleast_1d(np.asarray(v, dtype=float))
    return f"{arr[0]:g}" if arr.size == 1 else "[" + ", ".join(f"{x:g}" for x in arr) + "]"


def bus_budget(spec: RunSpec):
    """Bus-load budget (:class:`drivers.busload.BudgetReport`) of the driver at the loop rate, or None
    for drivers without a budget model."""
    kind = spec.driver_type.removeprefix("sim_")
    if kind == "dynamixel":
        from drivers.busload import dynamixel_budget

        drv = spec.driver_section
        joints = drv.data.get("joints", [])
        return dynamixel_budget(len(joints) if isinstance(joints, list) else 0, spec.rate_hz,
                                baudrate=drv.int("baudrate", 4_000_000, minimum=9600, maximum=10_500_000),
                                return_delay_s=1e-6 * drv.float("return_delay_us", 0.0, minimum=0.0, maximum=508.0),
                                read_mode=drv.str("read_mode", "fast_sync", choices=["fast_sync", "sync"]))
    if kind not in ("mit_can", "odrive_can", "cia402_can"):
        return None
    from drivers.busload import BusSpec, budget, cia402_flows, mit_flows, odrive_flows

    drv = spec.driver_section
    data = drv.data
    if "buses" in data:
        bsec = drv.section("buses")
        buses = {name: bsec.section(name) for name in data["buses"]}
    else:
        buses = {"default": drv.section("bus", {})}
    counts = {name: 0 for name in buses}
    joints = data.get("joints", [])
    for j in joints if isinstance(joints, list) else []:
        name = j.get("bus", next(iter(buses))) if isinstance(j, Mapping) else next(iter(buses))
        counts[name] = counts.get(name, 0) + 1
    items = {}
    for name, b in buses.items():
        bs = BusSpec(bitrate_bit_s=b.float("bitrate", 1_000_000, minimum=10_000.0, maximum=8_000_000.0),
                     fd=b.bool("fd", False),
                     data_bitrate_bit_s=b.float("data_bitrate", None, minimum=10_000.0, maximum=8_000_000.0),
                     name=(f"{name} ({b.raw('channel')})"
                           if b.has("channel") and str(b.raw("channel")) != name else name))
        if kind == "mit_can":
            flows = mit_flows(counts.get(name, 0), spec.rate_hz)
        elif kind == "cia402_can":
            hb = drv.float("heartbeat_period_s", 0.05, minimum=0.001, maximum=60.0)
            mhb = drv.float("master_heartbeat_period_s", 0.05, minimum=0.001, maximum=60.0)
            flows = cia402_flows(counts.get(name, 0), spec.rate_hz, heartbeat_rate_hz=1.0 / hb,
                                 master_heartbeat_rate_hz=0.0 if data.get("master_node_id", 127) == 0
                                 else 1.0 / mhb)
        else:
            # the driver's own defaults (drivers.odrive.build): broadcast estimates, Get_Iq
            flows = odrive_flows(counts.get(name, 0), spec.rate_hz,
                                 feedback=drv.str("feedback", "broadcast", choices=("broadcast", "rtr")),
                                 torque_feedback=drv.str("torque_feedback", "iq",
                                                         choices=("iq", "torques", "none")))
        items[name] = (bs, flows)
    return budget(items, spec.rate_hz)


def bus_budget_text(spec: RunSpec) -> str:
    """Bus-load budget of the driver configuration at the loop rate ('' for drivers without one)."""
    rep = bus_budget(spec)
    return "" if rep is None else "bus-load budget:\n" + str(rep)
