"""A simulated robot: integrates a dynamics model under a held torque command.

:class:`Plant` is the plant's one interface (drive train, brakes, sensors, clock, lock); an
engine subclass integrates the rigid-body dynamics: :class:`SimulatedPlant` below (the numba
engine, described here) or :class:`drivers.sim.mujoco_plant.MujocoPlant` (MuJoCo, chosen with
``[driver.plant] engine = "mujoco"``).

:class:`SimulatedPlant` is the "hardware" of every offline run.  It wraps any
:class:`dynamics.Model` (usually a perturbed copy of the controller's model,
e.g. ``controller_model.scaled(1.1)``, so that model mismatch is normal) and
adds what a real drive train adds on top of rigid-body dynamics:

* friction: viscous (smooth, inside the integrator) and Coulomb (set-valued,
  with true stiction, see *Coulomb friction* below);
* torque saturation of the commanded joint torque;
* a first-order current-loop lag between commanded and applied torque;
* an optional drive-side PD law (MIT-style ``kp``/``kd`` fields) evaluated at
  the integration sub-step rate, like a drive's inner loop;
* encoder quantisation and seeded Gaussian noise on the *measurements only*;
  the true state is kept separately (:attr:`SimulatedPlant.state`).

Time
----
The plant owns a clock ``t`` that only moves forward, via
:meth:`SimulatedPlant.advance_to`.  Commands are zero-order held: a command set
at time ``t`` acts from ``t`` until the next command.  The interval between two
``advance_to`` targets is split into equal integration steps no longer than
``dt_max_s / substeps``, so the integration grid always contains the command
times and the result does not depend on wall-clock timing.

Coulomb friction
----------------
Coulomb friction is treated as a set-valued law ``tau_c in -c * Sign(qd)``,
integrated implicitly (backward Euler) after each smooth step (operator
splitting).  With ``v*`` the velocity after the smooth step and ``M`` the mass
matrix at the new position, the post-friction velocity solves the convex
problem ``min_v 1/2 (v - v*)^T M (v - v*) + h * sum_i c_i |v_i|``, whose
optimality condition is exactly ``M (v - v*) in -h c Sign(v)``.  It is solved
by projected Gauss-Seidel (exact coordinate minimisation, a soft threshold per
joint).  A joint whose smooth-step velocity change is smaller than the
friction impulse stops exactly (stiction, ``v_i = 0``); there is no
regularisation velocity and no stiffness, so the step size is not limited by
the friction law.  The position is corrected consistently with the velocity
change (``h/2 * (v - v*)`` for RK4, ``h * (v - v*)`` for semi-implicit Euler),
and a joint at rest before and after a step keeps its position exactly, so a
stuck joint does not creep.  The splitting is first-order accurate in the
friction term; with ``coulomb = 0`` the integrator keeps its full order.

Current-loop lag
----------------
The applied torque follows ``T * d(tau_a)/dt = tau_c - tau_a`` where ``tau_c``
is the saturated command, constant within one integration step.  The
exponential solution is used inside the RK4 stages, so the lag is exact for a
held command and stable for any ``T``.
"""

from __future__ import annotations

import math
import threading
from typing import Sequence

import numpy as np

from dynamics import exact_model_kind
from dynamics.base import Model, ParallelModel
from dynamics.errors import ConfigError, DriverError, ModelError

__all__ = ["Plant", "SimulatedPlant", "PlantState"]

_INTEGRATORS = ("rk4", "semi_implicit_euler")


class PlantState(tuple):
    """True plant state ``(t_s, q, qd)``; ``q``, ``qd`` shape (n,) (copies)."""

    __slots__ = ()

    def __new__(cls, t_s: float, q: np.ndarray, qd: np.ndarray):
        return super().__new__(cls, (t_s, q, qd))

    @property
    def t_s(self) -> float:
        return self[0]

    @property
    def q(self) -> np.ndarray:
        return self[1]

    @property
    def qd(self) -> np.ndarray:
        return self[2]


class Plant:
    """A simulated robot: the drive train and sensors around a rigid-body engine.

    The engine-neutral part of every plant (command holding, saturation, drive PD, lag
    parameters, holding brakes, encoder quantisation and noise, the clock and the lock);
    an engine subclass integrates the rigid-body dynamics: :class:`SimulatedPlant` (the
    numba models of :mod:`dynamics`) or :class:`drivers.sim.mujoco_plant.MujocoPlant`.
    The subclass keeps ``_q``, ``_qd`` (the actuated joints' true state) and
    ``_tau_applied`` current after every :meth:`_advance`, and implements ``_advance``,
    ``_mass_diagonal``, ``pose``, ``energy`` and ``set_external_wrench``.

    Parameters
    ----------
    model : dynamics.Model
        The plant's own rigid-body model (its parameters are the "true" ones).
    q0 : array_like, shape (n,)
        Initial joint positions [rad or m].
    qd0 : array_like, shape (n,), optional
        Initial joint velocities (default zeros).
    substeps : int
        Integration steps per ``dt_max_s`` (default 2).  The largest
        integration step is ``h_max = dt_max_s / substeps``.
    dt_max_s : float
        Reference step [s] (default 1e-3, one 1 kHz control period).
    integrator : {"rk4", "semi_implicit_euler"}
        Classical 4th-order Runge-Kutta, or symplectic (semi-implicit) Euler.
    viscous, coulomb : float or array_like (n,), optional
        Friction coefficients [N m s/rad], [N m].  ``None`` takes them from
        ``model.drive``.
    torque_limit_nm : float or array_like (n,), optional
        Saturation of the commanded joint torque (symmetric).  ``None`` takes
        ``model.limits.torque_max`` (``inf`` = no saturation).
    current_lag_s : float
        Time constant T of the first-order current loop [s]; 0 = none.
    encoder_counts_per_rev : int or array_like (n,), optional
        Joint-side encoder resolution: measured positions are rounded to
        multiples of ``2*pi/counts`` (in the joint's unit).  ``None`` = ideal.
    position_noise_std_rad, velocity_noise_std_rad_s : float or array_like (n,)
        Standard deviation of zero-mean Gaussian noise added to measured
        positions (before quantisation) and velocities.
    torque_noise_std_nm : float or array_like (n,)
        Standard deviation of zero-mean Gaussian noise on the measured torque
        (current-sensor noise) [N m]; the applied torque is not affected.
    rng : numpy.random.Generator, optional
        Source of measurement noise; required when any noise std is > 0.
    t0_s : float
        Initial time of the plant clock [s].
    brake_torque_nm : float or array_like (n,)
        Holding torque of each joint's brake [N m] ([N] for prismatic joints);
        ``inf`` never slips, ``0`` (default here) = no brake.  The ``[driver.plant]``
        table (:func:`drivers.sim.build.plant_from_section`) gives every joint an
        ``inf`` brake unless ``brakes = false``.
    brakes_engaged : bool
        Whether the brakes start engaged (default ``False``: the plant moves
        freely until :meth:`set_brake` engages them).
    brake_release_s : float
        Mechanical release time of the brakes [s]: a joint's brake lets go this
        long after :meth:`set_brake` releases it (spring-applied brakes take tens
        of milliseconds; the drive is already in closed loop meanwhile).  Engaging
        is immediate.  Default 0.

    Notes
    -----
    All public methods take an internal re-entrant lock, so emulator threads
    and the loop may share one plant.
    """

    def __init__(self, model: Model, *, q0, qd0=None, substeps: int = 2, dt_max_s: float = 1e-3,
                 integrator: str = "rk4", viscous=None, coulomb=None, torque_limit_nm=None,
                 current_lag_s: float = 0.0, encoder_counts_per_rev=None,
                 position_noise_std_rad=0.0, velocity_noise_std_rad_s=0.0,
                 rng: np.random.Generator | None = None, t0_s: float = 0.0,
                 brake_torque_nm=0.0, brakes_engaged: bool = False,
                 brake_release_s: float = 0.0, torque_noise_std_nm=0.0):
        if not isinstance(model, Model):
            raise ConfigError(f"model must be a dynamics.Model, got {type(model).__name__}",
                              field="model")
        self._model = model
        n = model.dof
        self._n = n
        self._q = self._vec("q0", q0)
        self._qd = np.zeros(n) if qd0 is None else self._vec("qd0", qd0)
        if isinstance(substeps, bool) or not isinstance(substeps, (int, np.integer)) or substeps < 1:
            raise ConfigError(f"must be an integer >= 1, got {substeps!r}", field="substeps")
        self._substeps = int(substeps)
        self._dt_max_s = self._positive("dt_max_s", dt_max_s)
        self._h_max = self._dt_max_s / self._substeps
        if integrator not in self.INTEGRATORS:
            raise ConfigError(f"must be one of {list(self.INTEGRATORS)}, got {integrator!r}",
                              field="integrator")
        self._integrator = integrator
        drive = model.drive
        self._viscous = self._vec("viscous", drive.viscous if viscous is None else viscous,
                                  broadcast=True, minimum=0.0)
        self._coulomb = self._vec("coulomb", drive.coulomb if coulomb is None else coulomb,
                                  broadcast=True, minimum=0.0)
        self._brake_nm = self._vec("brake_torque_nm", brake_torque_nm, broadcast=True,
                                   minimum=0.0, allow_inf=True)
        self._braked = np.full(n, bool(brakes_engaged)) & (self._brake_nm > 0)
        rel = float(brake_release_s)
        if not math.isfinite(rel) or rel < 0:
            raise ConfigError(f"must be finite and >= 0, got {brake_release_s!r}",
                              field="brake_release_s")
        self._brake_release_s = rel
        self._release_at = np.full(n, math.inf)     # pending releases (plant time)
        self._next_release_s = math.inf              # min(_release_at), kept with it
        self._par = np.stack([self._viscous, self._coulomb, np.zeros(n)])
        self._viscous = self._par[0]
        self._has_viscous = bool(np.any(self._viscous > 0))
        self._friction_values()
        lim = model.limits.torque_max if torque_limit_nm is None else torque_limit_nm
        self._par[2] = self._vec("torque_limit_nm", lim, broadcast=True, minimum=0.0, allow_inf=True)
        self._tau_max = self._par[2]
        self._saturate = bool(np.any(np.isfinite(self._tau_max)))
        lag = float(current_lag_s)
        if not math.isfinite(lag) or lag < 0:
            raise ConfigError(f"must be finite and >= 0, got {current_lag_s!r}",
                              field="current_lag_s")
        self._lag_s = lag
        if encoder_counts_per_rev is None:
            self._quantum = None
        else:
            counts = self._vec("encoder_counts_per_rev", encoder_counts_per_rev, broadcast=True)
            if np.any(counts < 1) or np.any(counts != np.round(counts)):
                raise ConfigError(f"must be positive integers, got {encoder_counts_per_rev!r}",
                                  field="encoder_counts_per_rev")
            self._quantum = 2.0 * np.pi / counts
        # the quanta as floats, for measure_joint
        self._quantum_f = None if self._quantum is None else tuple(self._quantum.tolist())
        self._pos_std = self._vec("position_noise_std_rad", position_noise_std_rad,
                                  broadcast=True, minimum=0.0)
        self._vel_std = self._vec("velocity_noise_std_rad_s", velocity_noise_std_rad_s,
                                  broadcast=True, minimum=0.0)
        self._tau_std = self._vec("torque_noise_std_nm", torque_noise_std_nm, broadcast=True, minimum=0.0)
        self._tau_noisy = bool(np.any(self._tau_std > 0))
        self._noisy = bool(np.any(self._pos_std > 0) or np.any(self._vel_std > 0))
        if (self._noisy or self._tau_noisy) and not isinstance(rng, np.random.Generator):
            raise ConfigError("a numpy.random.Generator is required when noise std > 0",
                              field="rng")
        self._rng = rng
        t0 = float(t0_s)
        if not math.isfinite(t0):
            raise ConfigError(f"must be finite, got {t0_s!r}", field="t0_s")
        self._t = t0
        # held command (joint side): rows of one array (views), so the compiled
        # fast path gets the whole command in one argument
        self._cmd = np.zeros((5, n))
        self._tau_ff, self._kp, self._kd, self._q_ref, self._qd_ref = self._cmd
        #: joints whose actuator ignores its commands (:meth:`set_stuck`)
        self._stuck: set[int] = set()
        self._pd = False
        self._h_pd = math.inf          # step limit imposed by the drive PD gains
        self._gains_at_h = (None, None)
        self._tau_applied = np.zeros(n)
        self._lock = threading.RLock()

    def _vec(self, name, value, *, broadcast=False, minimum=None, allow_inf=False) -> np.ndarray:
        try:
            arr = np.asarray(value, dtype=float)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"expected numbers, got {value!r}", field=name) from err
        if broadcast and arr.ndim == 0:
            arr = np.full(self._n, float(arr))
        if arr.shape != (self._n,):
            raise ConfigError(f"expected shape ({self._n},), got {arr.shape}", field=name)
        bad = np.isnan(arr) if allow_inf else ~np.isfinite(arr)
        if np.any(bad):
            raise ConfigError(f"values must be finite, got {value!r}", field=name)
        if minimum is not None and np.any(arr < minimum):
            raise ConfigError(f"values must be >= {minimum}, got {value!r}", field=name)
        return arr.copy()

    @staticmethod
    def _positive(name, value) -> float:
        v = float(value)
        if not math.isfinite(v) or v <= 0:
            raise ConfigError(f"must be finite and > 0, got {value!r}", field=name)
        return v

    @property
    def model(self) -> Model:
        """The plant's own model."""
        return self._model

    @property
    def n_joints(self) -> int:
        return self._n

    @property
    def t_s(self) -> float:
        """Current plant time [s]."""
        return self._t

    @property
    def step_s(self) -> float:
        """Largest integration step ``dt_max_s / substeps`` [s]."""
        return self._h_max

    @property
    def torque_limit_nm(self) -> np.ndarray:
        """Joint torque saturation, shape (n,) (``inf`` = none)."""
        return self._tau_max.copy()

    @property
    def state(self) -> PlantState:
        """True state ``(t_s, q, qd)`` (copies, no noise or quantisation)."""
        with self._lock:
            return PlantState(self._t, self._q.copy(), self._qd.copy())

    @property
    def applied_torque_nm(self) -> np.ndarray:
        """Torque currently applied to the joints (after saturation and lag), shape (n,)."""
        with self._lock:
            return self._tau_applied.copy()

    def _joint_array(self, name, value, idx, *, default=None):
        m = self._n if idx is None else len(idx)
        if value is None:
            return default
        arr = np.asarray(value, dtype=float)
        if arr.ndim == 0:
            arr = np.full(m, float(arr))
        if arr.shape != (m,):
            raise DriverError(f"{name}: expected shape ({m},), got {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise DriverError(f"{name}: non-finite command {arr!r}")
        return arr

    def set_torque(self, tau_nm, *, joints: Sequence[int] | None = None) -> None:
        """Hold a pure joint torque command from now on (clears any PD law).

        Parameters
        ----------
        tau_nm : array_like, shape (n,) or (len(joints),)
            Joint torques [N m] (forces [N] for prismatic joints).
        joints : sequence of int, optional
            Update only these joints (emulated motors own one joint each).
        """
        if (joints is None and type(tau_nm) is np.ndarray and tau_nm.dtype == np.float64
                and tau_nm.shape == (self._n,)):
            # fast path of set_command(tau_nm): same checks, same held command
            tau = tau_nm
            if not np.isfinite(tau).all():
                raise DriverError(f"tau_nm: non-finite command {tau!r}")
            with self._lock:
                self._tau_ff[:] = tau
                self._cmd[1:] = 0.0
                self._pd = False
                self._h_pd = math.inf
            return
        self.set_command(tau_nm, joints=joints)

    def set_command(self, tau_nm, kp=None, kd=None, q_ref=None, qd_ref=None, *,
                    joints: Sequence[int] | None = None) -> None:
        """Hold a torque command with an optional drive-side PD law.

        The applied command is ``tau + kp*(q_ref - q) + kd*(qd_ref - qd)``,
        evaluated from the true state at the start of every integration step
        (the drive's inner loop runs at the sub-step rate), then saturated
        and lagged.  While PD gains are held the step is additionally limited
        to ``h <= 0.25 m/kd`` and ``h <= 0.1 sqrt(m/kp)`` per joint (``m`` the
        diagonal of the mass matrix when the gains were set), so a stiff
        drive loop stays stable: it just costs more steps.

        Parameters
        ----------
        tau_nm : array_like, shape (m,)
            Feed-forward torque [N m], ``m = n`` or ``len(joints)``.
        kp, kd : array_like, shape (m,), optional
            Joint-side gains [N m/rad], [N m s/rad]; ``None`` = 0.
        q_ref, qd_ref : array_like, shape (m,), optional
            Set-points [rad], [rad/s]; ``None`` = 0.
        joints : sequence of int, optional
            Indices of the joints to update; the others keep their command.

        Raises
        ------
        DriverError
            Wrong shape or a non-finite value (nothing is changed then).
        """
        idx = None if joints is None else np.asarray(joints, dtype=int).reshape(-1)
        if idx is not None and (idx.size and (idx.min() < 0 or idx.max() >= self._n)):
            raise DriverError(f"joint index out of range 0..{self._n - 1}: {list(idx)}")
        m = self._n if idx is None else idx.size
        zero = np.zeros(m)
        tau = self._joint_array("tau_nm", tau_nm, idx)
        if tau is None:
            raise DriverError("tau_nm is required")
        kp_ = self._joint_array("kp", kp, idx, default=zero)
        kd_ = self._joint_array("kd", kd, idx, default=zero)
        qr = self._joint_array("q_ref", q_ref, idx, default=zero)
        qdr = self._joint_array("qd_ref", qd_ref, idx, default=zero)
        with self._lock:
            sl = slice(None) if idx is None else idx
            self._tau_ff[sl] = tau
            self._kp[sl] = kp_
            self._kd[sl] = kd_
            self._q_ref[sl] = qr
            self._qd_ref[sl] = qdr
            self._gains_updated()

    def set_joint_command(self, joint: int, tau_nm: float, kp: float = 0.0, kd: float = 0.0,
                          q_ref: float = 0.0, qd_ref: float = 0.0) -> None:
        """Scalar fast path of :meth:`set_command` for one joint (used by the emulators).

        Raises
        ------
        DriverError
            Joint index out of range or a non-finite value (nothing is changed then).
        """
        if not 0 <= joint < self._n:
            raise DriverError(f"joint index {joint} out of range 0..{self._n - 1}")
        if self._stuck and joint in self._stuck:
            return                  # an actuator that ignores its commands (set_stuck)
        vals = (float(tau_nm), float(kp), float(kd), float(q_ref), float(qd_ref))
        # a finite sum has finite terms; a sum that is not (a NaN, an inf, or an overflow) is looked into
        if (not math.isfinite(vals[0] + vals[1] + vals[2] + vals[3] + vals[4])
                and not all(map(math.isfinite, vals))):
            raise DriverError(f"non-finite command for joint {joint}: {vals!r}")
        with self._lock:
            (self._tau_ff[joint], self._kp[joint], self._kd[joint], self._q_ref[joint],
             self._qd_ref[joint]) = vals
            if vals[1] != 0.0 or vals[2] != 0.0 or self._pd:
                self._gains_updated()

    def _gains_updated(self) -> None:
        pd = bool(self._kp.any() or self._kd.any())
        if pd and not (self._pd and np.array_equal(self._kp, self._gains_at_h[0])
                       and np.array_equal(self._kd, self._gains_at_h[1])):
            self._h_pd = self._pd_step_limit()
            self._gains_at_h = (self._kp.copy(), self._kd.copy())
        self._pd = pd
        if not pd:
            self._h_pd = math.inf

    def _pd_step_limit(self) -> float:
        # The drive PD is sampled once per integration step (a digital inner
        # loop); keep h * kd/m <= 0.25 and h * sqrt(kp/m) <= 0.1, with m the
        # diagonal of M at the current position, so the sampled loop is
        # stable and accurate for any gains.
        md = self._mass_diagonal()
        kp = np.abs(self._kp)
        kd = np.abs(self._kd)
        with np.errstate(divide="ignore"):
            h_kd = np.where(kd > 0, 0.25 * md / np.where(kd > 0, kd, 1.0), np.inf)
            h_kp = np.where(kp > 0, 0.1 * np.sqrt(md / np.where(kp > 0, kp, 1.0)), np.inf)
        return float(min(h_kd.min(), h_kp.min()))

    def set_stuck(self, joint: int, stuck: bool = True) -> None:
        """Make joint ``joint``'s actuator ignore its commands from now on (fault injection: a
        drive that keeps the torque it had whatever it is told, including zero and disable, as
        the emulated drives command it through :meth:`set_joint_command`); ``False`` ends it."""
        if not 0 <= joint < self._n:
            raise DriverError(f"joint index {joint} out of range 0..{self._n - 1}")
        with self._lock:
            if stuck:
                self._stuck.add(joint)
            else:
                self._stuck.discard(joint)

    def set_torque_limit(self, torque_limit_nm, *, joints: Sequence[int] | None = None) -> None:
        """Change the joint torque saturation (e.g. to a drive's current limit).

        Parameters
        ----------
        torque_limit_nm : float or array_like, shape (m,)
            New symmetric limits [N m] (``inf`` = none), ``m = n`` or ``len(joints)``.
        joints : sequence of int, optional
            Joints to update.
        """
        idx = None if joints is None else np.asarray(joints, dtype=int).reshape(-1)
        m = self._n if idx is None else idx.size
        arr = np.asarray(torque_limit_nm, dtype=float)
        if arr.ndim == 0:
            arr = np.full(m, float(arr))
        if arr.shape != (m,) or np.any(np.isnan(arr)) or np.any(arr < 0):
            raise DriverError(f"torque_limit_nm: expected {m} values >= 0, got {torque_limit_nm!r}")
        with self._lock:
            self._tau_max[slice(None) if idx is None else idx] = arr
            self._saturate = bool(np.any(np.isfinite(self._tau_max)))

    @property
    def brake_torque_nm(self) -> np.ndarray:
        """Holding torque of each joint's brake, shape (n,) (``inf`` = never slips, 0 = none)."""
        return self._brake_nm.copy()

    @property
    def brakes_engaged(self) -> np.ndarray:
        """Which joints' brakes are engaged, shape (n,) bool (always False without a brake)."""
        with self._lock:
            return self._braked.copy()

    def set_brake(self, engaged: bool, *, joints: Sequence[int] | None = None) -> None:
        """Engage (``True``) or release (``False``) the holding brakes of some or all joints.

        Call :meth:`advance_to` first so that the change happens at the right time (the
        emulated drives do).  A release takes effect ``brake_release_s`` later; engaging
        is immediate (and cancels a pending release).  A joint without a brake (holding
        torque 0) stays free.

        Parameters
        ----------
        engaged : bool
        joints : sequence of int, optional
            Joint indices (default: all).
        """
        idx = slice(None) if joints is None else np.asarray(joints, dtype=int).reshape(-1)
        if joints is not None and idx.size and (idx.min() < 0 or idx.max() >= self._n):
            raise DriverError(f"joint index out of range 0..{self._n - 1}: {list(idx)}")
        with self._lock:
            if engaged or self._brake_release_s == 0.0:
                self._braked[idx] = bool(engaged)
                self._braked &= self._brake_nm > 0
                self._release_at[idx] = math.inf
                self._update_friction()
            else:
                sel = np.zeros(self._n, dtype=bool)
                sel[idx] = True
                pend = sel & self._braked & np.isinf(self._release_at)
                self._release_at[pend] = self._t + self._brake_release_s
            self._next_release_s = float(self._release_at.min())

    def _friction_values(self) -> None:
        # an engaged brake is Coulomb friction with the brake's holding torque
        self._par[1] = self._coulomb + np.where(self._braked, self._brake_nm, 0.0)
        self._has_coulomb = bool(np.any(self._par[1] > 0))
        self._locked = bool(self._braked.all() and np.all(np.isinf(self._brake_nm)))

    def _update_friction(self) -> None:
        self._friction_values()
        self._brakes_changed()

    # -- what an engine provides -----------------------------------------------------
    #: the integrators the engine offers (the first is the default)
    INTEGRATORS: tuple = ()

    def _brakes_changed(self) -> None:
        """The engaged brakes (``_braked``, ``_par[1]``) changed; lock held.  Default: nothing
        (an engine that reads ``_par`` at every step)."""

    def _advance(self, t_s: float) -> float:
        """Integrate from ``_t`` to ``t_s`` under the held command, no brake event inside
        (lock held); update ``_q``, ``_qd``, ``_tau_applied`` and ``_t``; return ``_t``."""
        raise NotImplementedError

    def _steps(self, span: float) -> int:
        """How many equal steps integrate ``span`` [s] (> 0): ``ceil(span / h_max)``, ``h_max``
        the largest step, shortened while stiff drive PD gains are held (:meth:`set_command`)."""
        h_max = self._h_max if self._h_pd >= self._h_max else self._h_pd
        return max(1, math.ceil(span / h_max - 1e-9))

    def _mass_diagonal(self) -> np.ndarray:
        """Diagonal of the joint-space mass matrix at the current state, shape (n,) [kg m^2 | kg]."""
        raise NotImplementedError

    @property
    def pose(self) -> np.ndarray | None:
        """Platform pose X of a parallel robot (``None`` for a serial one)."""
        return None

    def energy(self) -> float:
        """Total mechanical energy (kinetic + potential) of the true state [J]."""
        raise NotImplementedError

    def set_external_wrench(self, wrench) -> None:
        """Hold an external wrench on the tool/platform (``None`` removes it); same convention
        as :meth:`dynamics.Model.forward_dynamics`."""
        raise NotImplementedError

    def compiled_step_args(self):
        """The plant as the compiled offline loop steps it, or why it cannot: ``(None, reason)``
        unless the engine has a compiled step (:meth:`SimulatedPlant.compiled_step_args`)."""
        return None, f"the {type(self).__name__} engine has no compiled step for the offline loop"

    def warm_up(self) -> None:
        """Load or compile what the first step needs, without changing the plant (default: nothing)."""

    def closure_log(self) -> tuple[np.ndarray, np.ndarray]:
        """``(t_s, error_m)``, shape (k,) each: the loop-closure error of a closed chain whose
        closures the engine keeps softly, after every ``advance_to``; empty (the default) when
        the engine keeps them exactly (the numba engine integrates the actuated coordinates
        and solves the closure at every stage) or the robot is serial."""
        return np.zeros(0), np.zeros(0)

    def _command_torque(self, q, qd):
        tau = self._tau_ff.copy()  # a new array: it may become the applied torque
        if self._pd:
            tau = tau + self._kp * (self._q_ref - q) + self._kd * (self._qd_ref - qd)
        if self._saturate:
            tau = np.clip(tau, -self._tau_max, self._tau_max)
        return tau

    def _check_state(self) -> None:
        if not (np.all(np.isfinite(self._q)) and np.all(np.isfinite(self._qd))):
            raise ModelError(f"plant state became non-finite at t={self._t:.6f} s "
                             f"(q={self._q!r}, qd={self._qd!r})")

    def advance_to(self, t_s: float) -> float:
        """Integrate from the current time to ``t_s`` under the held command.

        The interval is split into ``ceil((t_s - t)/h_max)`` equal steps
        (``h_max`` reduced further while stiff drive PD gains are held, see
        :meth:`set_command`).  A
        target in the past (or equal to the current time) does nothing: the
        plant never goes back in time.

        Returns
        -------
        float
            The plant time after the call.

        Raises
        ------
        DriverError
            ``t_s`` is not finite.
        ModelError
            The state became non-finite, or the model failed.
        """
        t_s = float(t_s)
        if not math.isfinite(t_s):
            raise DriverError(f"advance_to: non-finite time {t_s!r}")
        with self._lock:
            if t_s <= self._t:
                return self._t
            while self._next_release_s < t_s:        # pending brake releases inside the interval
                t_rel = self._next_release_s
                self._advance(t_rel)
                due = self._release_at <= t_rel
                self._release_at[due] = math.inf
                self._next_release_s = float(self._release_at.min())
                self._braked[due] = False
                self._update_friction()
            return self._advance(t_s)

    def measure(self) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """Sensor readings at the current plant time.

        Returns
        -------
        t_s : float
            Plant time [s].
        q_meas : ndarray, shape (n,)
            Position + noise, then rounded to the encoder resolution.
        qd_meas : ndarray, shape (n,)
            Velocity + noise.
        tau_applied : ndarray, shape (n,)
            Torque applied to the joints (after saturation and lag) [N m],
            plus the current-sensor noise ``torque_noise_std_nm``.
        """
        with self._lock:
            q = self._q.copy()
            qd = self._qd.copy()
            if self._noisy:
                q += self._pos_std * self._rng.standard_normal(self._n)
                qd += self._vel_std * self._rng.standard_normal(self._n)
            if self._quantum is not None:
                q = np.round(q / self._quantum) * self._quantum
            tau = self._tau_applied.copy()
            if self._tau_noisy:
                tau += self._tau_std * self._rng.standard_normal(self._n)
            return self._t, q, qd, tau

    def _joint_quantum(self, j: int) -> float | None:
        """For the emulators' compiled per-frame paths (:mod:`drivers.sim._mit_kernel`): joint
        ``j``'s encoder step [rad] (0.0: none), or None when the plant draws sensor noise (its
        measurement needs this plant's random stream: the Python path measures).  Such a path
        reads ``_q``, ``_qd``, ``_tau_applied`` and writes column ``j`` of ``_cmd`` holding
        ``_lock``, then calls ``_gains_updated`` as :meth:`set_joint_command` does."""
        if self._noisy or self._tau_noisy:
            return None
        return 0.0 if self._quantum_f is None else self._quantum_f[j]

    def measure_joint(self, j: int) -> tuple[float, float, float]:
        """One joint's sensor readings ``(q_meas, qd_meas, tau_applied)`` at the current plant time.

        The values :meth:`measure` returns for joint ``j`` (as floats), without the
        arrays of the other joints: a drive reads only its own joint.  A noisy plant
        draws its noise for every joint, as :meth:`measure` does (same random stream).
        """
        if self._noisy or self._tau_noisy:
            _, q, qd, tau = self.measure()
            return float(q[j]), float(qd[j]), float(tau[j])
        with self._lock:
            q = float(self._q[j])
            quantum = self._quantum_f
            if quantum is not None:
                step = quantum[j]
                x = q / step
                # np.round: half to even, as round(); the sign of a zero result kept;
                # round() refuses NaN / inf
                q = (math.copysign(float(round(x)), x) if math.isfinite(x) else float(np.round(x))) * step
            return q, float(self._qd[j]), float(self._tau_applied[j])


class SimulatedPlant(Plant):
    """Fixed-step simulation of a :mod:`dynamics` model (the numba engine); the parameters
    are :class:`Plant`'s.

    RK4 or semi-implicit Euler on the model's forward dynamics, with Coulomb friction
    as an implicit step (module docstring); the compiled kernels of
    :mod:`._plant_kernels` step an exact 3RRR, serial chain or Stewart platform.
    """

    INTEGRATORS = _INTEGRATORS

    def __init__(self, model: Model, **kw):
        super().__init__(model, **kw)
        self._wrench = None
        n = self._n
        # parallel robots: track the platform pose, pass it as a hint
        self._parallel = isinstance(model, ParallelModel)
        self._X = None
        # the pose hint goes to the methods that take it (the model names them)
        hint = getattr(model, "pose_hint_methods", frozenset()) if self._parallel else frozenset()
        self._fd_kw = "forward_dynamics" in hint
        self._mm_kw = "mass_matrix" in hint
        self._ke_kw = "kinetic_energy" in hint
        self._pe_kw = "potential_energy" in hint
        if self._parallel:
            try:
                guess = model.home_pose
            except NotImplementedError:
                guess = None
            self._X = self._fk(self._q, guess)
        self._kernel, self._kind, work_size = self._fast_kernel()
        #: the compiled step's work array (it allocates nothing per call)
        self._work = np.empty(work_size)
        self._check_state()
        # the compiled step's two output buffers, each with its views (q, qd, X, applied torque):
        # a step writes the buffer the state does not view, then the state takes its views
        nx = 0 if self._X is None else self._X.shape[0]
        self._bufs = []
        for _ in range(2):
            b = np.zeros(3 * n + nx)
            self._bufs.append((b, (b[0:n], b[n:2 * n], b[2 * n:2 * n + nx] if nx else None,
                                   b[2 * n + nx:3 * n + nx])))
        self._buf_next = 0
        if self._kernel is not None:
            # load the compiled step's machine code now (from numba's cache: 10-15 ms for the
            # 3RRR), not in the first advance_to, which on the wall clock is inside the first
            # control cycle: a call of zero steps loads it and changes nothing
            self._advance_compiled(self._h_max, 0)

    def _fast_kernel(self):
        """The compiled step of :mod:`._plant_kernels` when it applies to this plant, the
        robot's kind ("rrr", "serial", "stewart") and the size of the step's work array, else
        ``(None, None, 0)``.

        It applies to the RK4 integration of an exact :class:`dynamics.planar3rrr.Planar3RRR`,
        :class:`dynamics.serial.SerialModel` or :class:`dynamics.stewart.StewartPlatform`
        (not a subclass, whose methods may differ); the external wrench is checked per call.
        The classes are looked up among the loaded modules (:func:`dynamics.exact_model_kind`),
        so that another robot's plant does not load that family's kernels.
        """
        if self._integrator != "rk4":
            return None, None, 0
        kind = exact_model_kind(self._model)
        if kind == "rrr":
            from ._plant_kernels import RRR_WORK, rrr_advance_ws
            return rrr_advance_ws, "rrr", RRR_WORK
        if kind == "serial":
            from ._plant_kernels import serial_advance_ws, serial_work_size
            return serial_advance_ws, "serial", serial_work_size(self._n)
        if kind == "stewart":
            from ._stewart_plant_kernel import STEWART_WORK, stewart_advance_ws
            return stewart_advance_ws, "stewart", STEWART_WORK
        return None, None, 0

    def _kernel_params(self):
        """The packed model parameters the compiled step takes."""
        m = self._model
        return m._params if self._kind == "stewart" else m._P

    @property
    def pose(self) -> np.ndarray | None:
        """Tracked platform pose X of a parallel model (``None`` for serial models)."""
        with self._lock:
            return None if self._X is None else self._X.copy()

    def set_external_wrench(self, wrench) -> None:
        """Hold an external wrench on the tool/platform (``None`` removes it).

        Same convention as :meth:`dynamics.Model.forward_dynamics`.
        """
        with self._lock:
            if wrench is None:
                self._wrench = None
                return
            w = np.asarray(wrench, dtype=float)
            if not np.all(np.isfinite(w)):
                raise DriverError(f"non-finite wrench {w!r}")
            self._wrench = w.copy()

    def _mass_diagonal(self) -> np.ndarray:
        kw = {"pose": self._X} if self._mm_kw else {}
        return np.diagonal(np.asarray(self._model.mass_matrix(self._q, **kw), dtype=float))

    def _fk(self, q, guess):
        try:
            return np.asarray(self._model.forward_kinematics_task(q, guess=guess), dtype=float)
        except ModelError:
            raise
        except (ValueError, FloatingPointError, np.linalg.LinAlgError) as err:
            raise ModelError(f"plant forward kinematics failed at q={q!r}") from err

    def _qdd(self, q, qd, tau):
        rhs_tau = tau - self._viscous * qd if self._has_viscous else tau
        kw = {}
        if self._wrench is not None:
            kw["wrench"] = self._wrench
        if self._fd_kw:
            kw["pose"] = self._X
        return self._model.forward_dynamics(q, qd, rhs_tau, **kw)

    def _step(self, h: float) -> None:
        q, qd = self._q, self._qd
        tau_c = self._command_torque(q, qd)
        lag = self._lag_s
        if lag > 0.0:
            a0 = self._tau_applied
            diff = a0 - tau_c
            def tau_at(s):
                return tau_c + diff * math.exp(-s / lag)
        else:
            def tau_at(s):
                return tau_c
        if self._integrator == "rk4":
            t_mid = tau_at(0.5 * h)
            k1v = self._qdd(q, qd, tau_at(0.0))
            k1q = qd
            k2q = qd + 0.5 * h * k1v
            k2v = self._qdd(q + 0.5 * h * k1q, k2q, t_mid)
            k3q = qd + 0.5 * h * k2v
            k3v = self._qdd(q + 0.5 * h * k2q, k3q, t_mid)
            k4q = qd + h * k3v
            k4v = self._qdd(q + h * k3q, k4q, tau_at(h))
            q_new = q + (h / 6.0) * (k1q + 2.0 * k2q + 2.0 * k3q + k4q)
            qd_new = qd + (h / 6.0) * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
            q_corr = 0.5 * h
        else:
            # semi-implicit Euler with the step-averaged applied torque
            if lag > 0.0:
                e = math.exp(-h / lag)
                tau_mean = tau_c + (self._tau_applied - tau_c) * (lag / h) * (1.0 - e)
            else:
                tau_mean = tau_c
            qd_new = qd + h * self._qdd(q, qd, tau_mean)
            q_new = q + h * qd_new
            q_corr = h
        if self._has_coulomb:
            kw = {"pose": self._X} if self._mm_kw else {}
            M = np.asarray(self._model.mass_matrix(q_new, **kw), dtype=float)
            v = _coulomb_implicit(M, qd_new, h * self._par[1])
            q_new = q_new + q_corr * (v - qd_new)
            stuck = (v == 0.0) & (qd == 0.0)
            if stuck.any():
                # at rest before and after the step: the joint did not move
                q_new[stuck] = q[stuck]
            qd_new = v
        self._tau_applied = tau_at(h) if lag > 0.0 else tau_c
        self._q = q_new
        self._qd = qd_new
        if self._parallel:
            self._X = self._fk(q_new, self._X)

    def _advance(self, t_s: float) -> float:
        """:meth:`advance_to` without brake events (lock held)."""
        span = t_s - self._t
        if span <= 0.0:
            return self._t
        n_steps = self._steps(span)
        h = span / n_steps
        t0 = self._t
        done = 0
        if self._locked and not self._qd.any():
            self._hold_locked(span)
            self._t = t_s
            return self._t
        if self._kernel is not None and self._wrench is None:
            done = self._advance_compiled(h, n_steps)
            self._t = t0 + done * h
        for k in range(done, n_steps):
            self._step(h)
            self._t = t0 + (k + 1) * h
        self._t = t_s
        if done < n_steps:      # the kernel checked its own steps' state for finiteness
            self._check_state()
        return self._t

    def _hold_locked(self, span: float) -> None:
        """Every joint braked (infinite holding torque) and at rest: only the lag state moves.

        Exactly what the integration would give: the friction law returns zero velocity
        and keeps the positions, and the applied torque follows the held command through
        the lag's exponential solution.
        """
        tau_c = self._command_torque(self._q, self._qd)
        if self._lag_s > 0.0:
            self._tau_applied = tau_c + (self._tau_applied - tau_c) * math.exp(-span / self._lag_s)
        else:
            self._tau_applied = tau_c

    def _advance_compiled(self, h: float, n_steps: int) -> int:
        """Run up to ``n_steps`` steps in the compiled kernel; returns how many completed.

        The state after the completed steps is committed; a step the kernel could not
        complete (any model status) is left to :meth:`_step`, which raises the error.
        """
        flags = ((1 if self._has_viscous else 0) | (2 if self._has_coulomb else 0)
                 | (4 if self._pd else 0) | (8 if self._saturate else 0))
        # the buffer the state does not view (the state is the other one's views, or arrays
        # of their own after another path set it): nothing outside this plant holds either,
        # every accessor copies
        k = self._buf_next
        out, views = self._bufs[k]
        if self._parallel:
            st, done = self._kernel(self._kernel_params(), self._q, self._qd, self._X, self._tau_applied,
                                    self._cmd, self._par, self._lag_s, flags, h, n_steps, out, self._work)
            if done:
                self._q, self._qd, self._X, self._tau_applied = views
                self._buf_next = 1 - k
            return done
        st, done = self._kernel(self._model._P, self._q, self._qd, self._tau_applied,
                                self._cmd, self._par, self._lag_s, flags, h, n_steps, out, self._work)
        if done:
            self._q, self._qd, _, self._tau_applied = views
            self._buf_next = 1 - k
        return done

    def compiled_step_args(self):
        """The plant as the compiled offline loop steps it, or the reason it cannot.

        Returns
        -------
        (dict or None, str)
            ``state`` (q, qd, X, applied torque, time (1,): copies the caller advances and
            hands back with :meth:`set_compiled_state`), ``cmd`` (the held command, a copy),
            the constants of :func:`._plant_kernels.rrr_advance_ws` (``kind`` "rrr"),
            :func:`._plant_kernels.serial_advance_ws` (``kind`` "serial"; ``X`` is then empty) or
            :func:`._stewart_plant_kernel.stewart_advance_ws` (``kind`` "stewart", ``X`` (6,)),
            the encoder quantum and ``work``, a work array of the step's size (the ``*_ws``
            form of the step takes it); or None and why (the loop then steps this plant through
            :meth:`advance_to`).  Applies while the compiled RK4 step does: an exact
            ``Planar3RRR``, ``SerialModel`` or ``StewartPlatform``, no external wrench, no
            drive PD, no brake engaged or pending, no measurement noise.
        """
        with self._lock:
            step = self._kernel
            if step is None:
                return None, "the compiled plant step is the RK4 step of a 3RRR, a serial chain or a Stewart platform"
            if self._wrench is not None:
                return None, "an external wrench is applied"
            if self._pd:
                return None, "a drive-side PD command is held"
            if self._braked.any() or np.isfinite(self._release_at).any():
                return None, "a brake is engaged or releasing"
            if self._noisy or self._tau_noisy:
                return None, "measurement noise is drawn per cycle"
            flags = ((1 if self._has_viscous else 0) | (2 if self._has_coulomb else 0)
                     | (8 if self._saturate else 0))
            quant = self._quantum is not None
            has_pose = self._X is not None
            return {"kind": self._kind, "P": self._kernel_params(), "q": self._q.copy(),
                    "qd": self._qd.copy(), "X": self._X.copy() if has_pose else np.zeros(0),
                    "ta": self._tau_applied.copy(), "t": np.array([self._t]), "cmd": self._cmd.copy(),
                    "par": self._par.copy(), "lag": self._lag_s, "flags": flags, "h_max": self._h_max,
                    "has_quant": quant,
                    "quantum": self._quantum.copy() if quant else np.ones(self._n),
                    "work": np.empty_like(self._work)}, ""

    def set_compiled_state(self, q, qd, X, tau_applied, t_s: float, tau_held) -> None:
        """Take back the state the compiled loop advanced (see :meth:`compiled_step_args`):
        positions, rates, pose (ignored without one), applied torque, plant time [s] and the
        held torque command."""
        with self._lock:
            self._q = np.array(q, dtype=float)
            self._qd = np.array(qd, dtype=float)
            if self._X is not None:
                self._X = np.array(X, dtype=float)
            self._tau_applied = np.array(tau_applied, dtype=float)
            self._t = float(t_s)
            self._tau_ff[:] = tau_held
            self._cmd[1:] = 0.0
            self._pd = False
            self._h_pd = math.inf

    def warm_up(self) -> None:
        """Compile (or load from numba's cache) the integration kernels now.

        A twin of this plant (same model and settings, no brakes, the current state) takes
        two steps, once through the compiled kernel and once through the Python step; this
        plant is not changed.  A server calls it before it serves, so that the first step
        after a brake lets go does not stall the emulated devices for the compile time.
        """
        with self._lock:
            twin = SimulatedPlant(self._model, q0=self._q, qd0=self._qd, substeps=self._substeps,
                                  dt_max_s=self._dt_max_s, integrator=self._integrator,
                                  viscous=self._viscous, coulomb=self._coulomb,
                                  torque_limit_nm=self._tau_max, current_lag_s=self._lag_s,
                                  t0_s=self._t)
        twin.advance_to(self._t + self._h_max)
        twin._step(self._h_max)

    def energy(self) -> float:
        """Total mechanical energy (kinetic + potential) of the true state [J]."""
        with self._lock:
            kw = {"pose": self._X} if self._ke_kw else {}
            ke = float(self._model.kinetic_energy(self._q, self._qd, **kw))
            kw = {"pose": self._X} if self._pe_kw else {}
            pe = float(self._model.potential_energy(self._q, **kw))
            return ke + pe



def _coulomb_implicit(M: np.ndarray, v_star: np.ndarray, impulse: np.ndarray,
                      *, rtol: float = 1e-10, max_iter: int = 100) -> np.ndarray:
    """Backward-Euler Coulomb friction step (compiled; see :func:`_coulomb_implicit_py`)."""
    from ._friction_kernel import coulomb_pgs

    return coulomb_pgs(np.ascontiguousarray(M, dtype=np.float64), np.ascontiguousarray(v_star, dtype=np.float64),
                       np.ascontiguousarray(impulse, dtype=np.float64), float(rtol), int(max_iter))


def _coulomb_implicit_py(M: np.ndarray, v_star: np.ndarray, impulse: np.ndarray,
                         *, rtol: float = 1e-10, max_iter: int = 100) -> np.ndarray:
    """Backward-Euler Coulomb friction: argmin 1/2 (v-v*)^T M (v-v*) + sum impulse_i |v_i|.

    ``v = 0`` is optimal exactly when ``|M v*| <= impulse`` componentwise (all
    joints stick; checked first).  Otherwise projected Gauss-Seidel (exact
    coordinate minimisation: a soft threshold per joint) until no component
    changes by more than ``rtol * max|v*|``.  ``M`` SPD (n, n), ``v_star`` (n,),
    ``impulse = h * coulomb`` (n,).
    """
    p = M @ v_star
    if np.all(np.abs(p) <= impulse):
        return np.zeros_like(v_star)
    n = v_star.shape[0]
    if n == 1:
        m = M[0, 0]
        b = p[0]
        return np.array([math.copysign(max(abs(b) - impulse[0], 0.0), b) / m])
    v = v_star.copy()
    diag = np.diagonal(M)
    tol = rtol * float(np.max(np.abs(v_star)))
    for _ in range(max_iter):
        delta = 0.0
        for i in range(n):
            # b = M_ii v*_i - sum_{j != i} M_ij (v_j - v*_j)
            r = M[i] @ (v - v_star) - diag[i] * (v[i] - v_star[i])
            b = diag[i] * v_star[i] - r
            vi = math.copysign(max(abs(b) - impulse[i], 0.0), b) / diag[i]
            d = abs(vi - v[i])
            if d > delta:
                delta = d
            v[i] = vi
        if delta <= tol:
            break
    return v
