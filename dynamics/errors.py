"""The one error tree of torqueloop.

Every error the package raises on purpose derives from :class:`TorqueloopError`,
so a caller can catch the whole family with one ``except``.  Vendor errors
(python-can, pyserial, numpy.linalg) are wrapped with ``raise ... from err``.

This module lives in :mod:`dynamics` because that package imports nothing from
the others; ``controller``, ``drivers`` and ``trajectories`` import from here.
"""

from __future__ import annotations

__all__ = [
    "TorqueloopError",
    "ConfigError",
    "ModelError",
    "KinematicsError",
    "UnreachableError",
    "SingularityError",
    "ConvergenceError",
    "TrajectoryError",
    "InfeasibleTrajectoryError",
    "CommsError",
    "CommsTimeoutError",
    "DecodeError",
    "ForeignTrafficError",
    "DriverError",
    "DeviceFaultError",
    "SafetyError",
]


class TorqueloopError(Exception):
    """Base class of every error raised by torqueloop."""


class ConfigError(TorqueloopError, ValueError):
    """A configuration or robot file is invalid.

    Parameters
    ----------
    message : str
        What is wrong.
    file : str or None
        The file the bad value came from (``None`` for an in-memory dict).
    field : str or None
        Dotted path of the offending field, e.g. ``"links[2].inertia"``.
    """

    def __init__(self, message: str, file: str | None = None, field: str | None = None):
        self.message = message
        self.file = file
        self.field = field
        where = []
        if file:
            where.append(str(file))
        if field:
            where.append(f"field '{field}'")
        prefix = ": ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class ModelError(TorqueloopError):
    """A model cannot evaluate the requested quantity (bad shape, non-finite input...)."""


class KinematicsError(ModelError):
    """Base class for kinematics failures."""


class UnreachableError(KinematicsError):
    """A pose or point is outside the workspace (names the leg/joint where possible)."""


class SingularityError(KinematicsError):
    """The configuration is singular (or too close to singular) for the requested map."""


class ConvergenceError(KinematicsError):
    """An iterative solver (forward kinematics, numerical IK) did not converge."""


class TrajectoryError(TorqueloopError, ValueError):
    """A trajectory cannot be built from the given arguments."""


class InfeasibleTrajectoryError(TrajectoryError):
    """A trajectory violates limits that cannot be met."""


class CommsError(TorqueloopError):
    """Communication with a device failed (bus error, bad frame, port error)."""


class CommsTimeoutError(CommsError, TimeoutError):
    """A device did not answer in time."""


class DecodeError(CommsError):
    """A frame or message could not be decoded (wrong length, id, checksum...)."""


class ForeignTrafficError(CommsError):
    """Another node talks to our devices: command frames we did not send, replies we did not ask
    for (a second controller on the bus, a spoofer).  Raised before the first frame when a
    driver finds the ids busy, so a refused run sends nothing."""


class DriverError(TorqueloopError):
    """A driver was used wrongly (not enabled, closed, wrong number of joints...)."""


class DeviceFaultError(DriverError):
    """A device reported a fault."""


class SafetyError(TorqueloopError):
    """The safety supervisor stopped the run or refused to start it."""
