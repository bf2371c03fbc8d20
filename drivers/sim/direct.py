"""In-process driver backend: the control loop talks to the plant directly.

:class:`DirectPlantDriver` is the fastest simulated :class:`drivers.base.Driver`:
no bus, no encoding, no threads.  Use it for offline runs and tuning sweeps;
use the emulated CAN devices (:mod:`drivers.sim.emulators`) to exercise the
real drivers and protocols.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from dynamics.errors import DriverError
from ..base import Command, Driver, Feedback
from .plant import Plant

__all__ = ["DirectPlantDriver"]


class DirectPlantDriver(Driver):
    """A :class:`Driver` that applies commands straight to a :class:`Plant`.

    Parameters
    ----------
    plant : Plant
        The simulated robot (joint side, SI).
    now : callable () -> float
        The control loop's clock [s]; the plant is advanced to ``now()`` at
        every cycle, so with a lock-step clock the run is deterministic.
    joint_names : sequence of str, optional
        Names reported in ``Feedback.info["joint_names"]`` (default: the
        model's joint names).

    Notes
    -----
    Each :meth:`cycle` does what a drive does when a command frame arrives:
    advance the plant to ``now()``, sample the sensors, then hold the new
    command (feed-forward torque plus the optional drive-side PD, see
    :meth:`SimulatedPlant.set_command`).  The feedback therefore describes the
    state at ``now()`` under the *previous* command, as with a real bus.
    While disabled the commands are ignored and the plant receives zero
    torque; :meth:`enable` releases the plant's holding brakes (if it has
    any, see :class:`SimulatedPlant`) and :meth:`disable` engages them.  Fault codes are always ``FAULT_NONE``.
    """

    def __init__(self, plant: Plant, *, now: Callable[[], float],
                 joint_names: Sequence[str] | None = None):
        if not isinstance(plant, Plant):
            raise DriverError(f"plant must be a Plant, got {type(plant).__name__}")
        if not callable(now):
            raise DriverError("now must be a callable returning the loop time [s]")
        self._plant = plant
        self._now = now
        n = plant.n_joints
        self._n = n
        names = tuple(plant.model.joint_names if joint_names is None else joint_names)
        if len(names) != n:
            raise DriverError(f"expected {n} joint names, got {len(names)}")
        self._info = {"joint_names": names, "backend": "direct"}
        self._enabled = False
        self._closed = False
        self._zero = np.zeros(n)
        self._faults = np.zeros(n, dtype=int)
        self._fresh = np.ones(n, dtype=bool)

    @property
    def n_joints(self) -> int:
        return self._n

    @property
    def plant(self) -> Plant:
        return self._plant

    @property
    def enabled(self) -> bool:
        return self._enabled

    def feedback(self) -> Feedback:
        """The sensors now, without advancing the plant or changing the command."""
        self._check_open()
        return self._feedback()

    def _feedback(self) -> Feedback:
        t, q, qd, tau = self._plant.measure()
        return Feedback(t, q, qd, tau, self._faults.copy(), self._fresh.copy(),
                        np.full(self._n, self._enabled), dict(self._info))

    def _check_open(self) -> None:
        if self._closed:
            raise DriverError("driver is closed")

    def enable(self) -> Feedback:
        """Release the holding brakes, enable with zero torque, return the first feedback."""
        self._check_open()
        self._plant.advance_to(self._now())
        self._plant.set_torque(self._zero)
        self._plant.set_brake(False)
        self._enabled = True
        return self._feedback()

    def disable(self) -> None:
        """Zero torque, engage the holding brakes, stop accepting commands (until :meth:`enable`)."""
        self._check_open()
        self._plant.advance_to(self._now())
        self._plant.set_torque(self._zero)
        self._plant.set_brake(True)
        self._enabled = False

    def _field(self, name, value):
        if value is None:
            return None
        arr = np.asarray(value, dtype=float)
        if arr.shape != (self._n,):
            raise DriverError(f"command.{name}: expected shape ({self._n},), got {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise DriverError(f"command.{name}: non-finite value {arr!r}")
        return arr

    def cycle(self, command: Command) -> Feedback:
        """Advance the plant to ``now()``, read the sensors, hold ``command``.

        Raises
        ------
        DriverError
            Closed driver, wrong shapes or non-finite values (nothing is
            applied then).
        """
        self._check_open()
        tau = self._field("torque_nm", command.torque_nm)
        if tau is None:
            raise DriverError("command.torque_nm is required")
        kp = self._field("kp_nm_per_rad", command.kp_nm_per_rad)
        kd = self._field("kd_nm_s_per_rad", command.kd_nm_s_per_rad)
        pos = self._field("position_rad", command.position_rad)
        vel = self._field("velocity_rad_s", command.velocity_rad_s)
        if kp is not None and pos is None and np.any(kp != 0):
            raise DriverError("command.kp_nm_per_rad given without position_rad")
        if kd is not None and vel is None and np.any(kd != 0):
            # a drive damps towards zero velocity when no set-point is given
            vel = self._zero
        plant = self._plant
        plant.advance_to(self._now())
        fb = self._feedback()
        if self._enabled:
            if kp is None and kd is None:
                plant.set_torque(tau)
            else:
                plant.set_command(tau, kp, kd, pos, vel)
        return fb

    def close(self) -> None:
        """Zero torque and release the plant; safe to call twice."""
        if self._closed:
            return
        try:
            self.disable()
        finally:
            self._closed = True
