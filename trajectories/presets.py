"""Trajectories reproducing the cases of the source papers (``/work/shared/seeds``).

Every preset takes the model (a :class:`~dynamics.base.Model`, or a robot file
path loaded with :func:`dynamics.load_model`) and returns a trajectory in the
*actuator* space the controller tracks; for task-space cases it is a mapped
trajectory (:class:`~trajectories.mapping.JointSpaceTrajectory` /
:class:`~trajectories.mapping.SerialIKTrajectory`) whose ``task`` attribute and
``sample_with_task`` give the task-space reference too.  Presets that depend on
a robot's workspace check reachability, the singularity margin and the
actuator limits along the whole motion (:func:`check_feasibility`) and raise
:class:`~dynamics.errors.InfeasibleTrajectoryError` if the robot cannot do it.

=================  ============================================================
name               case
=================  ============================================================
``seed000_slow``   seed 000 inverse simulation, slow: cycloidal (sinusoidal
                   acceleration, inflection points at the extremes) joint moves
``seed000_fast``   the same motion with all rates 2.5 x faster
``seed004_square`` seed 004: the 5-link planar arm's tool runs a square from
                   (2, 2) at constant speed in one minute
``rrr_circle``     3RRR: from home, approach, circle with sinusoidally rotating
                   platform, return (horizontal or vertical robot)
``stewart_motion`` Stewart: multi-axis pose sequence (translations and
                   rotations about all axes, slerp orientation)
=================  ============================================================

Choices not given by the papers (their figures are missing from the text
extractions) are documented at each function and are keyword arguments.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from dynamics.base import Model, ParallelModel
from dynamics.errors import InfeasibleTrajectoryError, KinematicsError, TrajectoryError

from .base import Hold, Sequence, Trajectory
from .feasibility import check_feasibility
from .mapping import JointSpaceTrajectory, SerialIKTrajectory
from .paths import planar_circle_pose, pose_move, square
from .profiles import point_to_point

__all__ = ["seed000_motion", "seed000_slow", "seed000_fast", "seed000_forward_torques", "seed004_square", "rrr_circle",
           "stewart_motion", "PRESETS", "preset"]

#: seed 000 reference configuration (static equilibrium, gamma1 = alpha2 = alpha3 = 0) [rad]
SEED000_START = (0.0, 0.0, 0.0)
#: seed 000 extreme configuration of the prescribed motion [rad] (our choice: 90, 45, -60 deg)
SEED000_TARGET = (math.pi / 2, math.pi / 4, -math.pi / 3)
#: seed 004 initial joint angles (Table 3.1 / 5.1) [rad]
SEED004_Q0 = tuple(np.deg2rad([70.0, -30.0, 15.0, -40.0, 2.5]))


def _model(model) -> Model:
    if isinstance(model, Model):
        return model
    if isinstance(model, (str, Path)):
        from dynamics import load_model
        return load_model(model)
    raise TrajectoryError(f"expected a Model or a robot file path, got {model!r}")


def _mapped(build, model: Model, what: str) -> Trajectory:
    try:
        return build()
    except KinematicsError as err:
        raise InfeasibleTrajectoryError(f"{what} is infeasible for {model.name}: {err}") from err


def _verify(traj: Trajectory, model: Model, dt_s: float, what: str, **kw) -> Trajectory:
    rep = check_feasibility(traj, model, dt_s=dt_s, **kw)
    if not rep.ok:
        raise InfeasibleTrajectoryError(f"{what} is infeasible for {model.name}: {rep.first}")
    return traj


def seed000_motion(model=None, *, speed_factor: float = 1.0, move_s: float = 5.0, hold_s: float = 1.0,
                   start=SEED000_START, target=SEED000_TARGET) -> Trajectory:
    """Seed 000's prescribed joint motion (inverse simulation).

    Out-and-back: cycloidal move ``start -> target`` (all three joints
    synchronised), hold, cycloidal move back.  The cycloidal law has a
    sinusoidal acceleration and its extremes are inflection points (velocity
    and acceleration zero), as in the paper.  ``speed_factor`` divides every
    duration (the paper's second case is 2.5 x faster).

    Parameters
    ----------
    model : Model or path, optional
        When given, must have 3 joints (gamma1, alpha2, alpha3).
    speed_factor : float
        > 0; rates are multiplied by it (velocities x f, accelerations x f^2).
    move_s, hold_s : float
        Durations of each move and of the hold at the slow speed [s].
    start, target : sequence of 3 floats
        Joint positions [rad] (defaults: reference configuration and
        (90, 45, -60) deg; the paper's figures with the values are missing).

    Returns
    -------
    Sequence
        Joint trajectory, dim 3, duration ``(2 move_s + hold_s) / speed_factor``.
    """
    if model is not None:
        m = _model(model)
        if m.dof != 3:
            raise TrajectoryError(f"seed 000 motion needs a 3-joint arm, {m.name} has {m.dof}")
    f = float(speed_factor)
    if not (math.isfinite(f) and f > 0):
        raise TrajectoryError(f"speed_factor must be > 0, got {speed_factor!r}")
    names = ("gamma1", "alpha2", "alpha3")
    out = point_to_point(start, target, "cycloidal", duration_s=move_s / f, names=names)
    back = point_to_point(target, start, "cycloidal", duration_s=move_s / f, names=names)
    segs = [out] + ([Hold(target, hold_s / f)] if hold_s > 0 else []) + [back]
    seq = Sequence(segs)
    seq.names = names
    return seq


def seed000_slow(model=None, **kw) -> Trajectory:
    """Seed 000, first inverse simulation (slow prescribed motion), see :func:`seed000_motion`."""
    return seed000_motion(model, speed_factor=1.0, **kw)


def seed000_fast(model=None, **kw) -> Trajectory:
    """Seed 000, second inverse simulation: the same motion with rates 2.5 x faster."""
    return seed000_motion(model, speed_factor=2.5, **kw)


def seed004_square(model, *, side_m: float = 0.4, duration_s: float = 60.0, start=(2.0, 2.0),
                   first_direction=(-1.0, 0.0), ccw: bool = True, corners: str = "blend",
                   blend_radius_m: float = 0.02, ramp_s: float = 2.0, q_rest=SEED004_Q0,
                   components: str = "xy", check_dt_s: float = 0.05) -> SerialIKTrajectory:
    """Seed 004: the tool of the 5-link planar arm runs a square at constant speed.

    The paper: start and end at (2, 2), constant-velocity motion along the
    square, one minute.  It gives neither the side nor the direction; defaults:
    side 0.4 m toward the base, (2, 2) -> (1.6, 2) -> (1.6, 1.6) -> (2, 1.6) ->
    (2, 2).  An exactly constant speed has infinite accelerations at the corners
    and at the start/end, so by default the three interior corners are blended
    with arcs of ``blend_radius_m`` traversed at the same speed and the speed
    ramps up/down smoothly during ``ramp_s`` at the start/end
    (``corners="stop"`` instead stops at every corner).  Redundancy (5 joints,
    2 task coordinates) is resolved around the paper's initial joint angles
    ``q_rest`` (see :class:`SerialIKTrajectory`).

    Returns
    -------
    SerialIKTrajectory
        Joint trajectory (dim 5) with ``.task`` the tool path (x, y).
    """
    m = _model(model)
    if corners == "blend":
        task = square(start, side_m, duration_s, first_direction=first_direction, ccw=ccw, corners="blend",
                      blend_radius=blend_radius_m, ramp_s=ramp_s)
    else:
        task = square(start, side_m, duration_s, first_direction=first_direction, ccw=ccw, corners=corners,
                      profile="quintic")
    q_rest = np.asarray(q_rest, dtype=float)
    if q_rest.shape != (m.dof,):
        raise TrajectoryError(f"q_rest has shape {q_rest.shape}, {m.name} has {m.dof} joints")
    traj = _mapped(lambda: SerialIKTrajectory(task, m, components, q_rest=q_rest), m, "seed 004 square")
    return _verify(traj, m, check_dt_s, "seed 004 square")


def _rrr_scale(model) -> float:
    A = np.asarray(model.base_joints, dtype=float)
    return float(np.mean(np.linalg.norm(A - model.home_pose[:2], axis=1)))


def rrr_circle(model, *, radius_m: float | None = None, turns: float = 2.0, duration_s: float = 8.0,
               phi_amplitude: float = 0.15, phi_cycles: float | None = None, ramp_s: float = 1.0,
               approach_s: float = 1.5, hold_s: float = 0.0, check_dt_s: float = 0.01,
               singularity_margin: float = 0.05) -> JointSpaceTrajectory:
    """3RRR circle with a rotating platform, starting and ending at rest at home.

    Segments: quintic approach from the home pose to the circle start (home +
    (r, 0)), optional hold, ``turns`` turns of the circle centred on home at
    constant speed (speed ramps during ``ramp_s``) with
    ``phi = phi_home + phi_amplitude sin(2 pi phi_cycles u)`` (u the fraction
    of the circle done; default ``phi_cycles = turns``), quintic return to
    home.  Every junction is at rest, so velocity is continuous.  Default
    radius: 10 % of the mean distance from home to the base joints.

    Returns
    -------
    JointSpaceTrajectory
        Actuated angles; ``.task`` is the pose (x, y, phi) path.

    Raises
    ------
    InfeasibleTrajectoryError
        If the motion leaves the workspace, comes closer than
        ``singularity_margin`` to a singularity, or breaks actuator limits.
    """
    m = _model(model)
    if not isinstance(m, ParallelModel) or m.task_dof != 3:
        raise TrajectoryError(f"rrr_circle needs a planar parallel robot, got {type(m).__name__}")
    home = np.asarray(m.home_pose, dtype=float)
    r = 0.1 * _rrr_scale(m) if radius_m is None else float(radius_m)
    cycles = turns if phi_cycles is None else phi_cycles
    circ = planar_circle_pose(home[:2], r, duration_s, phi0=home[2], phi_amplitude=phi_amplitude,
                              phi_cycles=cycles, turns=turns, ramp_s=ramp_s)
    p_start = circ.start
    segs = [pose_move(home, p_start, approach_s)]
    if hold_s > 0:
        segs.append(Hold(p_start, hold_s))
    segs += [circ, pose_move(circ.end, home, approach_s)]
    task = Sequence(segs, tol=1e-9)
    task.names = ("x", "y", "phi")
    traj = _mapped(lambda: JointSpaceTrajectory(task, m), m, "3RRR circle")
    return _verify(traj, m, check_dt_s, "3RRR circle", singularity_margin=singularity_margin)


def stewart_motion(model, *, translation_m: float = 0.05, rotation_rad: float = 0.1, move_s: float = 2.0,
                   hold_s: float = 0.5, check_dt_s: float = 0.02,
                   singularity_margin: float = 1e-3) -> JointSpaceTrajectory:
    """Stewart platform multi-axis motion from home and back.

    Pose sequence relative to home (translations in units of
    ``translation_m``, rotations in units of ``rotation_rad``), each move a
    quintic rest-to-rest pose move (straight line, slerp orientation), with
    holds between them:

    1. heave up and surge: (+1, 0, +1 | 0, 0, 0)
    2. sway and roll + pitch: (+1, -1, +1 | +1, -1, 0)
    3. everything, yaw included: (-1, +1, -1 | -1, +1, +1.5)
    4. back to home.

    Returns
    -------
    JointSpaceTrajectory
        Leg lengths; ``.task`` is the 6-D pose path.
    """
    m = _model(model)
    if not isinstance(m, ParallelModel) or m.task_dof != 6:
        raise TrajectoryError(f"stewart_motion needs a 6-DOF parallel robot, got {type(m).__name__}")
    home = np.asarray(m.home_pose, dtype=float)
    scale = np.array([translation_m] * 3 + [rotation_rad] * 3)
    rel = np.array([[1, 0, 1, 0, 0, 0], [1, -1, 1, 1, -1, 0], [-1, 1, -1, -1, 1, 1.5], [0, 0, 0, 0, 0, 0]],
                   dtype=float)
    poses = [home] + [home + scale * r for r in rel]
    segs: list[Trajectory] = []
    for a, b in zip(poses[:-1], poses[1:]):
        segs.append(pose_move(a, b, move_s))
        if hold_s > 0 and b is not poses[-1]:
            segs.append(Hold(b, hold_s))
    task = Sequence(segs)
    task.names = ("x", "y", "z", "alpha", "beta", "gamma")
    traj = _mapped(lambda: JointSpaceTrajectory(task, m), m, "Stewart motion")
    return _verify(traj, m, check_dt_s, "Stewart motion", singularity_margin=singularity_margin)


#: preset name -> function(model, **options)
def seed000_forward_torques(model=None, *, variation_nm=(0.5, -1.0, 0.5), rise_s: float = 1.0,
                            static_nm=None) -> Trajectory:
    """Torque input of seed 000's forward simulation (not a motion: ``pos`` is torque [N m]).

    The paper's forward simulation starts at rest in the reference configuration
    (gamma1 = alpha2 = alpha3 = 0) and applies "slight variations of the static
    values of the torques" with the same kind of interpolating curve as the
    motions (sinusoidal second derivative, extremes are inflection points): here
    the static holding torques, then a cycloidal ramp of ``variation_nm`` over
    ``rise_s``, then held.  Integrate ``model.forward_dynamics`` under
    ``sample(t).pos`` to get the motion (figures of the values are missing in the
    paper, so the variation is our choice).

    Parameters
    ----------
    model : Model or path, optional
        The arm (3 joints); its ``gravity(0)`` gives the static torques unless
        ``static_nm`` is given.
    variation_nm : sequence of 3 floats
        Torque change at the end of the ramp [N m].
    rise_s : float
        Ramp duration [s] (> 0).
    static_nm : sequence of 3 floats, optional
        Static torques [N m] (default ``model.gravity(0)``; with Table 2,
        ``[0, 8 g, 2.5 g]``).

    Returns
    -------
    PointToPoint
        dim 3, duration ``rise_s``; ``sample(t).pos`` are torques [N m] (held after
        ``rise_s``).
    """
    if static_nm is None:
        if model is None:
            raise TrajectoryError("seed000_forward_torques needs the model or static_nm")
        m = _model(model)
        if m.dof != 3:
            raise TrajectoryError(f"seed 000 forward simulation needs a 3-joint arm, {m.name} has {m.dof}")
        static_nm = np.asarray(m.gravity(np.zeros(3)), dtype=float)
    static = np.asarray(static_nm, dtype=float)
    dv = np.asarray(variation_nm, dtype=float)
    if static.shape != (3,) or dv.shape != (3,) or not (np.all(np.isfinite(static)) and np.all(np.isfinite(dv))):
        raise TrajectoryError("static_nm and variation_nm must be 3 finite numbers each")
    return point_to_point(static, static + dv, "cycloidal", duration_s=rise_s,
                          names=("T1", "T2", "T3"))


PRESETS = {
    "seed000_slow": seed000_slow,
    "seed000_fast": seed000_fast,
    "seed004_square": seed004_square,
    "rrr_circle": rrr_circle,
    "stewart_motion": stewart_motion,
}


def preset(name: str, model, **options) -> Trajectory:
    """Build the preset ``name`` (see :data:`PRESETS`) for ``model``."""
    if name not in PRESETS:
        raise TrajectoryError(f"unknown preset {name!r}; expected one of {sorted(PRESETS)}")
    return PRESETS[name](model, **options)
