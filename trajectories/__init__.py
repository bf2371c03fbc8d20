"""Trajectories: timing laws, point-to-point moves, task-space paths, mapping to
actuator space, feasibility checks, presets of the source papers, config loader.

Every trajectory implements :class:`Trajectory`: ``duration_s``, ``dim`` and
``sample(t) -> Sample(pos, vel, acc, jerk)`` (t scalar -> (dim,) arrays, t of
shape (N,) -> (N, dim) arrays; clamped to the end points outside [0, T]).
SI units, radians; derivatives are analytic (chain rule / Jacobians), never
finite differences of positions (the one documented exception: the jerk of
mapped joint trajectories).
"""

from .base import GridCache, Hold, Sample, Sequence, Stack, TimeScaled, Trajectory
from .config import TRAJECTORY_TYPES, load_trajectory
from .feasibility import FeasibilityReport, Violation, check_feasibility, time_scale_to_limits
from .mapping import JointSpaceTrajectory, SerialIKTrajectory, Tabulated, TaskSelection
from .paths import (ArcCurve, CompositeCurve, Curve, LineCurve, PathTrajectory, SineCurve, SlerpCurve,
                    StackedCurve, circle, line, planar_circle_pose, polygon, pose_move, square)
from .presets import PRESETS, preset
from .profiles import (ConstantSpeedLaw, PiecewiseLaw, PointToPoint, ShapeLaw, TimingLaw, constant_speed_law,
                       double_s_law, point_to_point, shape_law, trapezoidal_law)
from .splines import ViaPointSpline
from .files import FileTrajectory, read_samples

__all__ = [
    "Trajectory", "Sample", "Hold", "Sequence", "Stack", "TimeScaled", "GridCache",
    "TimingLaw", "ShapeLaw", "PiecewiseLaw", "ConstantSpeedLaw", "PointToPoint", "point_to_point",
    "shape_law", "trapezoidal_law", "double_s_law", "constant_speed_law", "ViaPointSpline",
    "Curve", "LineCurve", "ArcCurve", "CompositeCurve", "StackedCurve", "SineCurve", "SlerpCurve",
    "PathTrajectory", "line", "circle", "polygon", "square", "planar_circle_pose", "pose_move",
    "JointSpaceTrajectory", "SerialIKTrajectory", "TaskSelection", "Tabulated",
    "FeasibilityReport", "Violation", "check_feasibility", "time_scale_to_limits",
    "PRESETS", "preset", "load_trajectory", "TRAJECTORY_TYPES", "FileTrajectory", "read_samples",
]
