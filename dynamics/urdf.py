"""URDF robot files for serial arms, parsed by Pinocchio.

:func:`load_urdf` reads a URDF with ``pinocchio.buildModelFromUrdf`` (fixed
joints are merged into their parent bodies by Pinocchio), checks that the
kinematic tree is a single serial chain of 1-DOF revolute/continuous/prismatic
joints, and converts it to a :class:`~dynamics.serial.SerialModel` with general
joint placements (no DH).  Each joint frame is rotated so that its axis becomes
the local z axis, as :class:`SerialModel` expects; :meth:`SerialModel.link_poses`
returns the URDF joint/link frames themselves.

Limits: URDF ``lower``/``upper`` (bounded revolute and prismatic joints),
``velocity`` and ``effort``; continuous joints are unbounded, and a missing or
non-positive velocity/effort limit means unbounded.  ``<dynamics damping
friction>`` become the viscous and Coulomb friction of the drive.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .base import DriveParams, JointLimits
from .errors import ConfigError, ModelError
from .serial import SerialModel

__all__ = ["load_urdf"]

_REVOLUTE = {"JointModelRX", "JointModelRY", "JointModelRZ", "JointModelRevoluteUnaligned",
             "JointModelRUBX", "JointModelRUBY", "JointModelRUBZ",
             "JointModelRevoluteUnboundedUnaligned"}
_PRISMATIC = {"JointModelPX", "JointModelPY", "JointModelPZ", "JointModelPrismaticUnaligned"}


def _z_to(axis: np.ndarray) -> np.ndarray:
    """A rotation R (3, 3) with R @ [0, 0, 1] = axis (unit vector)."""
    a = axis / np.linalg.norm(axis)
    # pick a helper vector not parallel to a
    h = np.array([1.0, 0.0, 0.0]) if abs(a[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    x = np.cross(h, a)
    x /= np.linalg.norm(x)
    y = np.cross(a, x)
    return np.column_stack([x, y, a])


def _bound(v: float, positive_only: bool = True) -> float:
    v = float(v)
    if not np.isfinite(v) or abs(v) > 1e300 or (positive_only and v <= 0.0):
        return np.inf
    return v


def load_urdf(path, *, tool_frame: str | None = None, gravity=None, name: str | None = None) -> SerialModel:
    """Build a :class:`SerialModel` from a URDF file.

    Parameters
    ----------
    path : str or Path
        The URDF file.
    tool_frame : str, optional
        Name of the URDF link (or frame) used as the tool frame.  Default: the
        last link attached to the last joint (e.g. a fixed ``tool0`` link).
    gravity : array_like, shape (3,), optional
        World-frame gravity [m/s^2]; default Pinocchio's ``[0, 0, -9.81]``.
    name : str, optional
        Model name (default: the URDF robot name).

    Raises
    ------
    ConfigError
        Naming the file, if Pinocchio is not installed, the file cannot be
        parsed, or the robot is not a serial chain of revolute/prismatic joints.
    """
    fname = str(path)
    try:
        import pinocchio as pin
    except ImportError as err:
        raise ConfigError("reading a URDF needs Pinocchio (pip package 'pin'), which is "
                          "not installed", file=fname) from err
    if not Path(fname).is_file():
        raise ConfigError("file not found", file=fname)
    try:
        pm = pin.buildModelFromUrdf(fname)
    except (RuntimeError, ValueError, OSError) as err:
        raise ConfigError(f"Pinocchio cannot parse the URDF: {err}", file=fname) from err
    n = pm.njoints - 1
    if n < 1:
        raise ConfigError("the URDF has no movable joint", file=fname)
    names = [pm.names[i] for i in range(1, n + 1)]
    for i in range(1, n + 1):
        if pm.parents[i] != i - 1:
            raise ConfigError(f"not a serial chain: joint '{pm.names[i]}' hangs from "
                              f"'{pm.names[pm.parents[i]]}', not from the previous joint "
                              f"'{pm.names[i - 1]}' (branching trees are not supported)",
                              file=fname, field=f"joint[{pm.names[i]}]")
    types = []
    for i in range(1, n + 1):
        kind = pm.joints[i].shortname()
        if kind in _REVOLUTE:
            types.append("revolute")
        elif kind in _PRISMATIC:
            types.append("prismatic")
        else:
            raise ConfigError(f"joint '{pm.names[i]}' is {kind}; only revolute, continuous and "
                              "prismatic joints are supported", file=fname,
                              field=f"joint[{pm.names[i]}]")
    # joint axes in their own frames: the local velocity for a unit joint speed
    pd = pm.createData()
    q0 = pin.neutral(pm)
    axes = np.empty((n, 3))
    for k in range(n):
        v = np.zeros(pm.nv)
        v[pm.joints[k + 1].idx_v] = 1.0
        pin.forwardKinematics(pm, pd, q0, v)
        mot = pd.v[k + 1]
        axes[k] = mot.angular if types[k] == "revolute" else mot.linear
    Ra = [_z_to(a) for a in axes]
    placements = np.empty((n, 4, 4))
    mass = np.empty(n)
    com = np.empty((n, 3))
    inertia = np.empty((n, 3, 3))
    link_frames = np.empty((n, 4, 4))
    for k in range(n):
        X = pm.jointPlacements[k + 1].homogeneous.copy()
        Rprev = Ra[k - 1] if k > 0 else np.eye(3)
        T = np.eye(4)
        T[:3, :3] = Rprev.T @ X[:3, :3] @ Ra[k]
        T[:3, 3] = Rprev.T @ X[:3, 3]
        placements[k] = T
        Y = pm.inertias[k + 1]
        mass[k] = Y.mass
        com[k] = Ra[k].T @ np.asarray(Y.lever)
        inertia[k] = Ra[k].T @ np.asarray(Y.inertia) @ Ra[k]
        L = np.eye(4)
        L[:3, :3] = Ra[k].T
        link_frames[k] = L
    # tool frame
    if tool_frame is None:
        cands = [f for f in pm.frames if f.parentJoint == n and f.type == pin.FrameType.BODY]
        if not cands:
            raise ConfigError("no link attached to the last joint to use as the tool frame",
                              file=fname)
        frame = cands[-1]
    else:
        if not pm.existFrame(tool_frame):
            raise ConfigError(f"no frame named {tool_frame!r}", file=fname, field="tool_frame")
        frame = pm.frames[pm.getFrameId(tool_frame)]
        if frame.parentJoint != n:
            raise ConfigError(f"frame {tool_frame!r} is not attached to the last joint",
                              file=fname, field="tool_frame")
    Tf = frame.placement.homogeneous.copy()
    tool = np.eye(4)
    tool[:3, :3] = Ra[-1].T @ Tf[:3, :3]
    tool[:3, 3] = Ra[-1].T @ Tf[:3, 3]
    # limits and drive
    pmin, pmax = np.full(n, -np.inf), np.full(n, np.inf)
    vmax, tmax = np.full(n, np.inf), np.full(n, np.inf)
    arm, visc, coul = np.zeros(n), np.zeros(n), np.zeros(n)
    for k in range(n):
        j = pm.joints[k + 1]
        iq, iv = j.idx_q, j.idx_v
        if j.nq == 1:
            lo, hi = _bound(pm.lowerPositionLimit[iq], False), _bound(pm.upperPositionLimit[iq], False)
            if np.isfinite(lo) and np.isfinite(hi) and lo < hi:
                pmin[k], pmax[k] = lo, hi
        vmax[k] = _bound(pm.velocityLimit[iv])
        tmax[k] = _bound(pm.effortLimit[iv])
        arm[k] = float(pm.armature[iv]) + float(pm.rotorInertia[iv]) * float(pm.rotorGearRatio[iv]) ** 2
        visc[k] = max(float(pm.damping[iv]), 0.0)
        coul[k] = max(float(pm.friction[iv]), 0.0)
    g = np.asarray(pm.gravity.linear, dtype=float) if gravity is None else np.asarray(gravity, dtype=float)
    try:
        return SerialModel(joint_types=types, placements=placements, mass=mass, com=com,
                           inertia=inertia, tool=tool, gravity=g, link_frames=link_frames,
                           base_frame=np.eye(4), joint_names=names,
                           limits=JointLimits(pmin, pmax, vmax, tmax),
                           drive=DriveParams(arm, visc, coul),
                           name=name or pm.name or Path(fname).stem, source=fname)
    except ModelError as err:
        raise ConfigError(str(err), file=fname) from err
