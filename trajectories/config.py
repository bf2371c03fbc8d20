"""Build a trajectory from a ``[trajectory]`` table of a run configuration.

Errors name the file and the dotted field (:class:`~dynamics.errors.ConfigError`).

Common keys
-----------
``type``            ``"preset"``, ``"point_to_point"``, ``"circle"``, ``"square"``,
                    ``"polygon"``, ``"via_points"`` or ``"hold"``
``space``           ``"joint"`` (default for point_to_point / via_points / hold) or
                    ``"task"`` (default for circle / square / polygon): task
                    trajectories are mapped to actuator space (parallel robots:
                    :class:`JointSpaceTrajectory`; serial arms:
                    :class:`SerialIKTrajectory` with ``task_components`` (default
                    ``"xy"`` for 2-D paths, ``"xyz"`` for 3-D), ``q_rest``, ``q_guess``)
``scale_to_limits`` bool (default false): stretch uniformly to the actuator
                    limits (:func:`time_scale_to_limits`, grid ``check_dt_s``,
                    optional ``acceleration_max``)
``check``           bool (default false): raise :class:`ConfigError` if
                    :func:`check_feasibility` fails (grid ``check_dt_s``)
``tabulate_dt_s``   step [s] of a :class:`Tabulated` (quintic Hermite, C2) copy
                    returned instead of the trajectory itself; default 0.001 for
                    trajectories mapped through inverse kinematics (sampling
                    those costs ~1-2 ms per call, too slow for a 1 kHz loop;
                    the table matches the analytic q, qd, qdd at every node and
                    keeps ``.task``), 0 (no table) otherwise; 0 disables

Per type
--------
preset          ``name`` (see :data:`trajectories.presets.PRESETS`), optional
                ``[trajectory.options]`` table of the preset's keyword arguments
point_to_point  ``target``; ``start`` (default: parallel robots in task space the
                home pose, else ``[0, ...]``); ``profile`` (default "quintic");
                ``duration_s`` and/or ``vmax``, ``amax``, ``jmax`` (number or list)
circle          ``center``, ``radius_m``, ``duration_s``; ``turns`` (1),
                ``start_angle`` [rad] (0), ``ramp_s``, ``normal`` (3-D);
                3RRR: pose circle with ``phi0`` (home phi), ``phi_amplitude`` (0),
                ``phi_cycles`` (turns); Stewart: position circle at ``orientation``
                (default home orientation)
square          ``start``, ``side_m``, ``duration_s``; ``first_direction`` ([1, 0]),
                ``ccw`` (true), ``corners`` ("stop" | "blend"), ``blend_radius_m``,
                ``profile``, ``ramp_s``; 3RRR: constant ``phi`` (home phi)
polygon         ``vertices`` (K x dim), ``duration_s``, ``closed`` (true) and the
                corner keys of square
via_points      ``times_s``, ``points`` (K x dim), ``kind`` ("quintic"), ``bc``
file            ``path`` (CSV or NPY of time and positions, relative to the config
                file; see :mod:`trajectories.files`), ``kind`` ("quintic"), ``bc``
hold            ``position``, ``duration_s``
fourier         ``start``, ``a``, ``b`` (dim x (K-1) coefficients of harmonics 2..K),
                ``period_s``, ``periods`` (1): the finite Fourier series of
                :class:`trajectories.excitation.FourierSeries`, at rest at ``start``
                at both ends (``torqueloop identify`` writes one)
"""

from __future__ import annotations

import inspect

import numpy as np

from dynamics.base import Model, ParallelModel
from dynamics.config import Section, unknown_field_message
from dynamics.errors import ConfigError, KinematicsError, TrajectoryError

from .base import Hold, Sequence, TimeScaled, Trajectory
from .feasibility import check_feasibility, time_scale_to_limits
from .mapping import JointSpaceTrajectory, SerialIKTrajectory, Tabulated, _Mapped
from .paths import LineCurve, PathTrajectory, StackedCurve, circle, planar_circle_pose, polygon, square
from .presets import PRESETS
from .profiles import point_to_point
from .splines import ViaPointSpline

__all__ = ["load_trajectory", "TRAJECTORY_TYPES"]

TRAJECTORY_TYPES = ("preset", "point_to_point", "circle", "square", "polygon", "via_points", "hold",
                    "file", "fourier")


#: meanings of the limit keys read by :func:`_limit`
_LIMIT_DOCS = {
    "vmax": "largest velocity of the profile [rad/s or m/s], a number or one per coordinate",
    "amax": "largest acceleration of the profile [rad/s^2 or m/s^2], a number or one per coordinate",
    "jmax": "largest jerk of the profile (double-S) [rad/s^3 or m/s^3], a number or one per coordinate",
    "acceleration_max": "actuator acceleration limit used by scale_to_limits and check [rad/s^2 or "
                        "m/s^2] (default: none)",
}


def _limit(sec: Section, key: str, n: int):
    """A positive number or a list of n positive numbers (None when absent)."""
    v = sec.raw(key, None, doc=_LIMIT_DOCS.get(key))
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return sec.float(key, None, minimum=0.0, strict_min=True)
    arr = sec.vector(key, n, None)
    if np.any(arr <= 0):
        raise sec.error(key, f"all values must be > 0, got {v!r}")
    return arr


_RAMP_DOC = "time to speed up from rest at the start and slow down at the end [s] (default: the path's own)"


def _corner_kw(sec: Section) -> dict:
    corners = sec.str("corners", "stop", choices=["stop", "blend"],
                      doc="stop at each corner, or blend it with an arc of blend_radius_m")
    kw = {"corners": corners}
    if corners == "blend":
        kw["blend_radius"] = sec.float("blend_radius_m", minimum=0.0, strict_min=True,
                                       doc="corners = 'blend': radius of the corner arcs [m]")
    prof = sec.str("profile", None, doc="time law along each side (point-to-point profile name; "
                                        "default: the path's own)")
    if prof is not None:
        kw["profile"] = prof
    ramp = sec.float("ramp_s", None, minimum=0.0, doc=_RAMP_DOC)
    if ramp is not None:
        kw["ramp_s"] = ramp
    return kw


def _with_phi(task: Trajectory, phi: float) -> Trajectory:
    """Append a constant angle coordinate to a 2-D path trajectory."""
    curve = StackedCurve([task.curve, LineCurve([phi], [phi])], length=task.curve.length)
    return PathTrajectory(curve, task.law, names=("x", "y", "phi"))


def _with_orientation(task: PathTrajectory, e) -> Trajectory:
    curve = StackedCurve([task.curve, LineCurve(e, e)], length=task.curve.length)
    return PathTrajectory(curve, task.law, names=("x", "y", "z", "alpha", "beta", "gamma"))


def _to_actuators(task: Trajectory, model: Model, sec: Section) -> Trajectory:
    if isinstance(model, ParallelModel):
        return JointSpaceTrajectory(task, model)
    comps = sec.str("task_components", "xy" if task.dim == 2 else "xyz",
                    doc="serial arms: the tool coordinates the path gives (xy, xyz, or with "
                        "orientation), the rest is free")
    q_rest = sec.vector("q_rest", model.dof, None,
                        doc="serial arms with more joints than task_components: the posture [rad or m] "
                            "the free directions are held at (elbow up, a wrist angle); default: the "
                            "start pose, or the posture half-way along the path when the path leaves "
                            "what the start pose can hold. Set it when the path's end is 'not reachable ... with the free "
                            "directions held at the rest posture' or to choose the arm's posture")
    q_guess = sec.vector("q_guess", model.dof, None,
                         doc="serial arms: joint positions [rad or m] the inverse kinematics of the "
                             "first sample starts from (the path then follows by continuation); "
                             "default: q_rest, else the joint-limit midpoints, or a well-conditioned "
                             "pose near them when those are singular (a SCARA stretched out)")
    return SerialIKTrajectory(task, model, comps, q_rest=q_rest, q_guess=q_guess)


_KIND_DOC = "spline through the samples: quintic (C4, at rest at both ends) or cubic (C2)"
_BC_DOC = "cubic: at rest at both ends (clamped) or zero acceleration there (natural)"


def _from_file(sec: Section, m: int | None) -> Trajectory:
    """``type = "file"``: a spline through the samples of a CSV/NPY file."""
    from pathlib import Path

    from .files import FileTrajectory

    rel = Path(sec.str("path", doc="CSV or NPY file of time [s] and positions, relative to this config"))
    path = rel if rel.is_absolute() or not sec.file else Path(sec.file).parent / rel
    try:
        traj = FileTrajectory(path, kind=sec.str("kind", "quintic", choices=["quintic", "cubic"], doc=_KIND_DOC),
                              bc=sec.str("bc", "clamped", choices=["clamped", "natural"], doc=_BC_DOC))
    except ConfigError as err:
        raise sec.error("path", f"{err}") from err
    if m is not None and traj.dim != m:
        raise sec.error("path", f"{path}: {traj.dim} position columns, expected {m}")
    return traj


_START_DOC = ("start position [rad or m] (default: the home pose for parallel robots in task space, "
              "else zeros)")
_PATH_DURATION_DOC = "duration of the whole path [s]"
_CENTER_DOC = "centre of the circle [m]: (x, y), or (x, y, z)"
_NORMAL_DOC = "3-D circles: normal of the circle's plane (default: z)"


def _build(sec: Section, model: Model, kind: str) -> Trajectory:
    n = model.dof
    if kind == "preset":
        name = sec.str("name", choices=sorted(PRESETS), doc="the preset (the source papers' cases)")
        fn = PRESETS[name]
        opts = sec.section("options", {}, doc="keyword arguments of the preset (its function in "
                                              "trajectories.presets); unknown ones are refused")
        params = inspect.signature(fn).parameters
        kwargs = {}
        for key in opts.data:
            if key == "model" or key not in params:
                raise opts.error(key, f"of preset {name!r}: " + unknown_field_message(
                    key, (k for k in params if k != "model")))
            v = opts.raw(key)
            kwargs[key] = np.asarray(v, dtype=float) if isinstance(v, list) else v
        opts.finish()
        try:
            return fn(model, **kwargs)
        except TypeError as err:
            raise opts.error(None, f"bad option for preset {name!r}: {err}") from err

    space_default = "task" if kind in ("circle", "square", "polygon") else "joint"
    space = sec.str("space", space_default, choices=["joint", "task"],
                    doc="coordinates of the positions: joint (actuators) or task (tool pose, mapped "
                        "through the inverse kinematics); default task for paths, else joint")
    parallel = isinstance(model, ParallelModel)
    if space == "task" and parallel:
        m = model.task_dof
    elif space == "task":
        m = None        # serial: given by the data
    else:
        m = n

    if kind == "point_to_point":
        target = sec.vector("target", m, doc="end position [rad or m; task: the pose]")
        dim = target.size
        if sec.has("start"):
            start = sec.vector("start", dim, doc=_START_DOC)
        else:
            sec.raw("start", None, doc=_START_DOC)
            start = np.asarray(model.home_pose, float) if (space == "task" and parallel) else np.zeros(dim)
        traj = point_to_point(start, target, sec.str("profile", "quintic",
                                                     doc="cycloidal, cubic, quintic, trapezoidal, "
                                                         "double_s, minimum_jerk or linear"),
                              duration_s=sec.float("duration_s", None, minimum=0.0, strict_min=True,
                                                   doc="duration of the move [s] (or from vmax/amax/jmax)"),
                              vmax=_limit(sec, "vmax", dim), amax=_limit(sec, "amax", dim),
                              jmax=_limit(sec, "jmax", dim))
    elif kind == "fourier":
        from .excitation import FourierSeries
        start = sec.vector("start", m, doc="position the series starts and ends at, at rest [rad or m]")
        a = sec.matrix("a", (start.size, None), doc="cosine coefficients of harmonics 2..K, dim x (K-1)")
        traj = FourierSeries(start, a, sec.matrix("b", a.shape, doc="sine coefficients, as a"),
                             sec.float("period_s", minimum=0.0, strict_min=True, doc="period of the series [s]"),
                             sec.int("periods", 1, minimum=1, doc="periods run"))
    elif kind == "hold":
        traj = Hold(sec.vector("position", m, doc="position held [rad or m]"),
                    sec.float("duration_s", minimum=0.0, strict_min=True, doc="how long it is held [s]"))
    elif kind == "via_points":
        times = sec.vector("times_s", doc="times of the via points, increasing [s]")
        pts = sec.matrix("points", (len(times), m), doc="via points, one row per time [rad or m]")
        traj = ViaPointSpline(times, pts, kind=sec.str("kind", "quintic", choices=["quintic", "cubic"], doc=_KIND_DOC),
                              bc=sec.str("bc", "clamped", choices=["clamped", "natural"], doc=_BC_DOC))
    elif kind == "file":
        traj = _from_file(sec, m)
    elif kind == "circle":
        if space != "task":
            raise sec.error("space", "a circle is a task-space path")
        T = sec.float("duration_s", minimum=0.0, strict_min=True, doc=_PATH_DURATION_DOC)
        r = sec.float("radius_m", minimum=0.0, strict_min=True, doc="radius of the circle [m]")
        turns = sec.float("turns", 1.0, doc="number of turns")
        start_angle = sec.float("start_angle", 0.0, doc="angle of the start point on the circle [rad]")
        ramp = sec.float("ramp_s", None, minimum=0.0, doc=_RAMP_DOC)
        if parallel and model.task_layout == "planar":
            center = sec.vector("center", 2, doc=_CENTER_DOC)
            home = np.asarray(model.home_pose, float)
            traj = planar_circle_pose(center, r, T, phi0=sec.float("phi0", float(home[2]),
                                                                   doc="3RRR: mean platform angle [rad] "
                                                                       "(default: the home pose's)"),
                                      phi_amplitude=sec.float("phi_amplitude", 0.0,
                                                              doc="3RRR: amplitude of the platform "
                                                                  "angle's oscillation [rad]"),
                                      phi_cycles=sec.float("phi_cycles", turns,
                                                           doc="3RRR: oscillations of the angle "
                                                               "(default: turns)"), turns=turns,
                                      start_angle=start_angle, ramp_s=ramp)
        elif parallel and model.task_layout == "spatial":
            center = sec.vector("center", 3, doc=_CENTER_DOC)
            normal = sec.vector("normal", 3, None, doc=_NORMAL_DOC)
            e = sec.vector("orientation", 3, np.asarray(model.home_pose, float)[3:],
                           doc="Stewart: constant platform orientation, Euler angles [rad] "
                               "(default: the home pose's)")
            traj = _with_orientation(circle(center, r, T, turns=turns, start_angle=start_angle, normal=normal,
                                            ramp_s=ramp), e)
        else:
            center = sec.vector("center", doc=_CENTER_DOC)
            normal = sec.vector("normal", 3, None, doc=_NORMAL_DOC) if center.size == 3 else None
            traj = circle(center, r, T, turns=turns, start_angle=start_angle, normal=normal, ramp_s=ramp)
    elif kind in ("square", "polygon"):
        if space != "task":
            raise sec.error("space", f"a {kind} is a task-space path")
        T = sec.float("duration_s", minimum=0.0, strict_min=True, doc=_PATH_DURATION_DOC)
        if kind == "square":
            traj = square(sec.vector("start", 2, doc="first corner (x, y) [m]"),
                          sec.float("side_m", minimum=0.0, strict_min=True, doc="side length [m]"), T,
                          first_direction=sec.vector("first_direction", 2, [1.0, 0.0],
                                                     doc="direction of the first side (x, y)"),
                          ccw=sec.bool("ccw", True, doc="counter-clockwise"), **_corner_kw(sec))
        else:
            traj = polygon(sec.matrix("vertices", doc="corners, one row each (K x dim) [m]"), T,
                           closed=sec.bool("closed", True, doc="return to the first vertex"), **_corner_kw(sec))
        if parallel and model.task_layout == "planar":
            if traj.dim != 2:
                raise sec.error("vertices", "3RRR polygons are 2-D (x, y)")
            phi = sec.float("phi", float(np.asarray(model.home_pose, float)[2]),
                            doc="3RRR: constant platform angle [rad] (default: the home pose's)")
            if isinstance(traj, PathTrajectory):
                traj = _with_phi(traj, phi)
            else:
                traj = Sequence([_with_phi(s, phi) for s in traj.segments])
        elif parallel and model.task_dof != traj.dim:
            raise sec.error("type", f"{kind} paths are not defined for a {model.task_dof}-DOF platform")
    else:  # pragma: no cover - guarded by choices
        raise sec.error("type", f"unknown trajectory type {kind!r}")

    if space == "task":
        traj = _to_actuators(traj, model, sec)
    return traj


def load_trajectory(section: Section, model: Model) -> Trajectory:
    """Build the trajectory described by a ``[trajectory]`` table (see module docstring).

    Parameters
    ----------
    section : dynamics.config.Section
        The ``[trajectory]`` table (its ``file``/``path`` are used in errors).
    model : Model
        The robot the trajectory is for.

    Returns
    -------
    Trajectory
        In actuator space (dim ``model.dof``); mapped trajectories keep the
        task reference in ``.task``.

    Raises
    ------
    ConfigError
        Naming the file and field, for invalid, unknown or inconsistent
        entries, and for trajectories that cannot be built (unreachable,
        infeasible: the message carries the cause).
    """
    if not isinstance(section, Section):
        section = Section(section)
    kind = section.str("type", choices=TRAJECTORY_TYPES, doc="kind of reference: --explain trajectory")
    try:
        traj = _build(section, model, kind)
        if traj.dim != model.dof:
            raise section.error("space", f"trajectory has dim {traj.dim} but {model.name} has {model.dof} "
                                         "actuators (use space = \"task\" for task coordinates?)")
        dt = section.float("check_dt_s", 0.01, minimum=0.0, strict_min=True,
                           doc="time grid of scale_to_limits and check [s]")
        acc = _limit(section, "acceleration_max", model.dof)
        if section.bool("scale_to_limits", False,
                        doc="stretch the trajectory in time, uniformly, to the actuator limits"):
            traj = time_scale_to_limits(traj, model, dt_s=dt, acceleration_max=acc)
        if section.bool("check", False, doc="refuse a trajectory that exceeds the robot's limits"):
            rep = check_feasibility(traj, model, dt_s=dt, acceleration_max=acc)
            if not rep.ok:
                raise section.error(None, f"trajectory infeasible: {rep.first}")
        mapped = isinstance(traj, _Mapped) or (isinstance(traj, TimeScaled) and isinstance(traj.base, _Mapped))
        tab = section.float("tabulate_dt_s", 0.001 if mapped else 0.0, minimum=0.0,
                            doc="step of a precomputed table used in the loop [s] (0: none) (default: "
                                "0.001 for paths mapped through inverse kinematics, else 0)")
        if tab > 0:
            traj = Tabulated(traj, tab)
    except ConfigError:
        raise
    except (TrajectoryError, KinematicsError) as err:
        raise section.error(None, f"{type(err).__name__}: {err}") from err
    section.finish()
    return traj
