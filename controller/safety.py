"""Safety supervisor: limits, watchdogs and stop reactions between controller and driver.

Every cycle the loop passes the controller's torque through
:meth:`SafetySupervisor.check`, which returns the torque actually sent and a
:class:`SafetyState`.  The supervisor never lets a non-finite or out-of-limit
torque through.

Checks (each a *fault* unless said otherwise)
---------------------------------------------
* external stop request (:meth:`SafetySupervisor.request_stop`, e.g. SIGINT) -> ``"signal"``
* NaN/inf in the measured state, the reference, the tracking error or the torque -> ``"nonfinite"``
* device fault code ``feedback.fault != 0`` -> ``"device_fault"``
* drive reports not enabled -> ``"drive_disabled"``
* feedback not fresh for ``stale_cycles`` consecutive cycles -> ``"stale_feedback"``;
  more than ``stale_fraction_max`` of the last ``stale_window_cycles`` cycles with
  some joint's feedback not fresh (intermittent loss) -> ``"stale_feedback"``
* deadline overruns reported by the loop (:meth:`SafetySupervisor.note_overrun`,
  wall clock): one cycle later than ``lateness_max_s``, or more than
  ``overrun_fraction_max`` of the last ``overrun_window_cycles`` cycles missed
  -> ``"overrun"``
* position outside the hard limits -> ``"position_limit"``; inside the soft zone
  (``position_margin_rad`` from a hard limit) and moving towards it: not a fault,
  the torque component pushing towards the limit is removed and a damping
  torque ``-soft_kd qd`` added (flag ``SOFT_LIMIT``)
* ``|qd| > velocity_max`` -> ``"velocity_limit"``
* ``|tau| > torque_max``: not a fault, clipped and flagged (``CLIPPED``)
* ``|e| > tracking_error_max`` (controller space) -> ``"tracking_error"``
* parallel robots, optional: ``singularity(q, X).margin < singularity_margin_min``
  (checked every ``singularity_every`` cycles), or predicted to fall below it
  before the next check plus ``singularity_horizon_s`` from the margin's rate of
  change between checks, or while it falls, the torque it will take there (the
  forces grow as 1 / margin) beyond ``TORQUE_RESERVE`` (80 %) of a limit ->
  ``"singularity"`` (:func:`controller._safety_rules.singularity_code`)
* faults reported by the loop (:meth:`SafetySupervisor.fault`: controller
  exception, communication error)

Stop reactions (``stop_reaction``)
----------------------------------
* ``"zero_disable"``: zero torque and disable at once (like STO).
* ``"brake_disable"``: damped braking under the load, ``tau = g^(q) - d - brake_kd qd``
  for ``brake_time_s`` or until every ``|qd| < stop_velocity_rad_s``, then disable
  (like SS1).  ``g^`` is the model's gravity at the measured pose (with a model), ``d``
  the load the model misses (mass, payload, friction), measured while braking by a
  generalized-momentum observer (:meth:`SafetySupervisor._observe_load`), so a
  gravity-loaded robot is held while its motion is damped instead of sinking at the
  damping's terminal velocity.  The
  brake uses only fresh, finite, plausible feedback (``|qd| <= 2 velocity_max``):
  a joint without it gets zero torque, and with none left the drives are
  disabled at once.  The damping's limit ramps from 0 to ``torque_max`` over
  ``brake_ramp_s`` (never a step), so one corrupt sample cannot command a full
  brake.  Falls back to zero_disable when the state is not finite.
* ``"hold"``: hold the position at the fault, ``tau = g^(q) + hold_kp (q_f - q)
  - hold_kd qd`` (gravity only with a model), for ``hold_time_s``, then disable
  (like SS2 followed by a stop at the end of the run); disables at once when
  the feedback is not fresh for ``stale_cycles`` cycles during the hold.
* A second stop request (:meth:`SafetySupervisor.request_stop`, e.g. a second
  SIGINT) during a brake or hold cuts it short: zero torque and disable.

Faults latch until :meth:`SafetySupervisor.reset`; each is recorded as a
:class:`Fault` (time, cause, joint, values).

Plausible ranges
----------------
Every numeric setting has a plausible range (:data:`SAFETY_RANGES`); a value
outside it, or one that would switch a protection off (``1e300``, ``inf``, 0
where 0 means "never"), is refused with a :class:`ConfigError` naming the
field.  Protections that are off by default in simulation (no tracking-error
limit, no velocity limit, no singularity guard on a parallel robot) must be
on for a hardware run unless listed in ``disabled_protections`` (checked by
:func:`controller.app.run.validate_run`).
"""

from __future__ import annotations

import functools
import math
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from numba import njit

from dynamics._kernel_cache import stamp_package_caches
from dynamics._planar3rrr_kernels import WS_SIZE as _RRR_WS_SIZE
from dynamics._planar3rrr_kernels import regular_margin_ws as _rrr_regular_margin_ws
from dynamics import exact_model_kind
from dynamics.base import JointLimits, Model, ParallelModel
from dynamics.config import Section
from dynamics.errors import ConfigError, SafetyError

from . import _safety_rules as _rules

#: empty inputs of the rule kernel: no tracking error / no driver feedback this cycle
_NO_ERROR = np.zeros(0)
_NO_CODES = np.zeros(0, dtype=np.int64)
_NO_FLAGS = np.zeros(0, dtype=np.bool_)


#: the argument types of :func:`_evaluate_checked` for which it is compiled: a cycle's float64,
#: int64 and bool vectors (contiguous), the (6, n) limits and the int64 rule bits
_RULES_SIGNATURE = ("int64(" + "float64[::1], " * 8
                    + "int64[::1], boolean[::1], boolean[::1], float64[:, ::1], int64[::1], int64[::1])")


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()


@njit(cache=True, error_model="numpy")
def _evaluate_checked(q, qd, tau, pos, vel, acc, err, err_max, fault, enabled, fresh, limits, jbits, ebits):
    """:func:`controller._safety_rules.evaluate` (the same rules, arguments and result) of a
    cycle whose inputs have the lengths :meth:`SafetySupervisor.check` accepts: ``q``, ``qd``,
    ``tau`` and the feedback's ``fault``, ``enabled``, ``fresh`` one entry per joint (``n``:
    the columns of ``limits``, the length of ``jbits``), ``ebits`` one per axis of ``err``,
    ``err_max`` one or one per axis.  Otherwise -1, and nothing is written (the check then
    validates, raises or evaluates as it does).
    """
    n = limits.shape[1]
    m = err.shape[0]
    if (q.shape[0] != n or qd.shape[0] != n or tau.shape[0] != n or fault.shape[0] != n or enabled.shape[0] != n
            or fresh.shape[0] != n or jbits.shape[0] != n or ebits.shape[0] != m
            or not (err_max.shape[0] == 1 or err_max.shape[0] == m)):
        return -1
    return _rules.evaluate_inline(q, qd, tau, pos, vel, acc, err, err_max, fault, enabled, fresh, limits, jbits,
                                  ebits)


@functools.cache
def _saturation_counter():
    """:func:`controller._safety_rules.count_saturated`, compiled for a cycle's argument types
    alone (loaded from numba's cache at the first call in a process: when a supervisor is made)."""
    _rules.count_saturated.compile("boolean(float64[::1], float64[:, ::1], int64[::1])")
    _rules.count_saturated.disable_compile()
    return _rules.count_saturated


@functools.cache
def _rules_checker():
    """:func:`_evaluate_checked`, compiled for :data:`_RULES_SIGNATURE` alone (loaded from numba's
    cache at the first call in a process): arguments of other types raise TypeError (no
    specialisation is compiled for them)."""
    _evaluate_checked.compile(_RULES_SIGNATURE)
    _evaluate_checked.disable_compile()
    return _evaluate_checked


def _exact_planar3rrr(model) -> bool:
    """Whether ``model`` is exactly a :class:`~dynamics.planar3rrr.Planar3RRR`
    (:func:`dynamics.exact_model_kind`: a supervisor of another robot does not import it)."""
    return exact_model_kind(model) == "rrr"


@njit(cache=True, error_model="numpy")
def _rrr_regular_margin(P, tol_sing, q, guess, X, out):
    """The pose and singularity margin of a 3RRR (``Planar3RRR``) when the pose is regular.

    ``X`` (3,) written: the pose by Newton from ``guess`` (3,) at the angles ``q`` (3,), as
    ``Planar3RRR.forward_kinematics_task(q, guess)`` finds it (tolerance 1e-12 m, 50
    iterations; ``P`` the model's packed parameters ``_P``); ``out[0]`` written: the margin
    of ``Planar3RRR.singularity(q, X)`` (the same kernel values, :func:`sing_margin_ws` is
    bit-identical to the model's ``sing_entry``).  Returns 0 when both are valid and the pose
    is regular (both normalised measures >= ``tol_sing``, a margin >= 0); otherwise non-zero,
    and the caller asks the model (non-finite inputs, a failed solve, a singular pose).
    """
    for i in range(3):
        if not (math.isfinite(q[i]) and math.isfinite(guess[i])):
            return 1
    so = np.empty(8)
    st = _rrr_regular_margin_ws(P, q, guess, tol_sing, X, np.empty(_RRR_WS_SIZE), so)
    if st != 0:
        return st
    out[0] = so[4]
    return 0

__all__ = ["SafetyConfig", "SafetySupervisor", "SafetyState", "Fault", "REACTIONS", "SAFETY_RANGES",
           "PROTECTIONS", "OK", "CLIPPED", "SOFT_LIMIT", "BRAKING", "HOLDING", "FAULT", "DISABLED"]

REACTIONS = ("zero_disable", "brake_disable", "hold")

#: plausible range of every numeric safety setting: (lowest, highest, lowest excluded, unit).
#: A value outside is refused (a limit of 1e300 or 0 would switch its protection off).
SAFETY_RANGES: dict[str, tuple[float, float, bool, str]] = {
    "position_min": (-1e4, 1e4, False, "rad|m"),
    "position_max": (-1e4, 1e4, False, "rad|m"),
    "velocity_max": (0.0, 1e4, True, "rad/s|m/s"),
    "torque_max": (0.0, 1e5, True, "N m|N"),
    "position_margin_rad": (0.0, 10.0, False, "rad|m"),
    "soft_kd_nm_s_per_rad": (1e-3, 1e5, False, "N m s/rad|N s/m"),
    "tracking_error_max": (0.0, 10.0, True, "rad|m (controller space)"),
    "stale_cycles": (1, 100, False, "cycles"),
    "stale_fraction_max": (0.0, 0.9, True, "fraction"),
    "stale_window_cycles": (10, 100_000, False, "cycles"),
    "overrun_fraction_max": (0.0, 0.9, True, "fraction"),
    "overrun_window_cycles": (10, 100_000, False, "cycles"),
    "lateness_max_s": (0.0, 10.0, True, "s"),
    "singularity_margin_min": (1e-4, 1.0, False, "margin"),
    "singularity_every": (1, 100, False, "cycles"),
    "singularity_horizon_s": (0.0, 1.0, False, "s"),
    "brake_time_s": (0.0, 10.0, True, "s"),
    "brake_ramp_s": (0.0, 1.0, True, "s"),
    "brake_kd_nm_s_per_rad": (1e-3, 1e5, False, "N m s/rad|N s/m"),
    "stop_velocity_rad_s": (0.0, 1.0, True, "rad/s|m/s"),
    "hold_time_s": (0.0, 60.0, True, "s"),
    "hold_kp_nm_per_rad": (1e-3, 1e6, False, "N m/rad|N/m"),
    "hold_kd_nm_s_per_rad": (0.0, 1e5, False, "N m s/rad|N s/m"),
    "startup_tolerance": (0.0, math.pi, True, "rad|m (controller space)"),
    "feedback_accel_max": (0.0, 1e7, True, "rad/s^2|m/s^2"),
}

#: protections that may be off in simulation but must be on (or explicitly listed in
#: ``disabled_protections``) for a hardware run
PROTECTIONS = ("tracking_error_max", "velocity_max", "singularity_margin_min", "position_margin_rad")

#: the narrowest soft zone accepted other than 0 (the soft limit off) [rad|m]: a tenth of a milliradian
#: (millimetre) is below what an encoder resolves at a joint (a 14-bit count is 0.38 mrad), so a
#: narrower zone is never entered before the hard limit and would switch the soft limit off unsaid
POSITION_MARGIN_MIN = 1e-4
_INT_FIELDS = ("stale_cycles", "stale_window_cycles", "overrun_window_cycles", "singularity_every")

#: cycles in a row with a joint's command clipped at its torque limit after which a tracking-error
#: or controller fault says the drives saturated (:meth:`SafetySupervisor.saturation_note`)
SATURATED_CYCLES = 5

#: SafetyState.code bits
OK = 0
CLIPPED = 1
SOFT_LIMIT = 2
BRAKING = 4
HOLDING = 8
FAULT = 16
DISABLED = 32


@dataclass
class SafetyConfig:
    """Safety settings.  Vectors may be given as a scalar (all joints) or shape (n,).

    Attributes
    ----------
    stop_reaction : str
        One of :data:`REACTIONS`.
    position_min, position_max, velocity_max, torque_max : array or None
        Override the model's limits (None: use the model's) [rad|m, rad/s|m/s, N m|N].
    position_margin_rad : float or array
        Width of the soft zone inside each hard position limit.
    soft_kd_nm_s_per_rad : float or array
        Damping gain applied in the soft zone.
    tracking_error_max : float or array or None
        Largest allowed |position error| in the controller's space (None: off,
        refused for hardware unless listed in ``disabled_protections``).
    stale_cycles : int
        Consecutive cycles of non-fresh feedback that make a fault.
    singularity_margin_min : float or None
        Fault when the singularity margin falls below (parallel robots).
    singularity_every : int
        Check the singularity margin every this many cycles.
    brake_time_s, brake_kd_nm_s_per_rad, stop_velocity_rad_s
        brake_disable parameters.
    hold_time_s, hold_kp_nm_per_rad, hold_kd_nm_s_per_rad
        hold parameters.
    startup_tolerance : float or array
        Largest |error| between the measured start and the trajectory's start
        (controller space) accepted by :meth:`SafetySupervisor.startup_check`.
    stale_fraction_max, stale_window_cycles
        Fault when more than this fraction of the last ``stale_window_cycles``
        cycles had feedback that was not fresh (intermittent loss).
    overrun_fraction_max, overrun_window_cycles, lateness_max_s
        Wall clock: fault when more than this fraction of the last
        ``overrun_window_cycles`` cycles missed their deadline, or when one
        cycle starts more than ``lateness_max_s`` late.
    singularity_horizon_s
        Predictive singularity guard: fault when the margin, extrapolated
        with its rate of change between checks, would fall below
        ``singularity_margin_min`` within this time (0: no prediction).
    brake_ramp_s
        Time over which the brake torque limit ramps from 0 to ``torque_max``.
    disabled_protections : tuple of str
        Protections of :data:`PROTECTIONS` deliberately off in a hardware run.
    feedback_accel_max : float or array or None
        Plausible |acceleration| of the feedback (:mod:`controller.plausibility`); None:
        derived from the model and the torque limits at the start pose.

    Notes
    -----
    Every numeric field must lie in its :data:`SAFETY_RANGES` range.
    """

    stop_reaction: str = "zero_disable"
    position_min: Any = None
    position_max: Any = None
    velocity_max: Any = None
    torque_max: Any = None
    position_margin_rad: Any = 0.05
    soft_kd_nm_s_per_rad: Any = 1.0
    tracking_error_max: Any = None
    stale_cycles: int = 3
    singularity_margin_min: float | None = None
    singularity_every: int = 1
    brake_time_s: float = 0.2
    brake_kd_nm_s_per_rad: Any = 1.0
    stop_velocity_rad_s: float = 1e-3
    hold_time_s: float = 0.5
    hold_kp_nm_per_rad: Any = 50.0
    hold_kd_nm_s_per_rad: Any = 5.0
    startup_tolerance: Any = 0.05
    stale_fraction_max: float = 0.2
    stale_window_cycles: int = 500
    overrun_fraction_max: float = 0.2
    overrun_window_cycles: int = 500
    lateness_max_s: float = 0.1
    singularity_horizon_s: float = 0.02
    brake_ramp_s: float = 0.05
    disabled_protections: tuple = ()
    feedback_accel_max: Any = None

    def __post_init__(self):
        if self.stop_reaction not in REACTIONS:
            raise ConfigError(f"must be one of {list(REACTIONS)}, got {self.stop_reaction!r}",
                              field="stop_reaction")
        for name, (lo, hi, strict, unit) in SAFETY_RANGES.items():
            v = getattr(self, name)
            if v is None:
                continue  # not set: the model's limit / protection off (see PROTECTIONS)
            try:
                a = np.asarray(v, dtype=float)
            except (TypeError, ValueError) as err:
                raise ConfigError(f"expected a number, got {v!r}", field=name) from err
            if a.ndim > 1 or a.size == 0:
                raise ConfigError(f"expected a number or a list of numbers, got {v!r}", field=name)
            if name in _INT_FIELDS and (a.ndim or a != np.round(a)):
                raise ConfigError(f"expected an integer, got {v!r}", field=name)
            bad = ~np.isfinite(a) | (a > hi) | (a < lo) | ((a == lo) if strict else False)
            if np.any(bad):
                op = ">" if strict else ">="
                raise ConfigError(f"must be {op} {lo:g} and <= {hi:g} [{unit}] (a value outside would "
                                  f"switch the protection off or is not plausible), got {v!r}", field=name)
        if self.position_margin_rad is not None:
            m = np.asarray(self.position_margin_rad, dtype=float)
            if np.any((m > 0) & (m < POSITION_MARGIN_MIN)):
                raise ConfigError(f"a soft zone of {self.position_margin_rad!r} [rad|m] is narrower than an encoder "
                                  f"resolves and would switch the soft limit off without saying so: use at least "
                                  f"{POSITION_MARGIN_MIN:g}, or 0 for no soft zone (a hardware run then lists "
                                  f"'position_margin_rad' in disabled_protections)", field="position_margin_rad")
        self.disabled_protections = tuple(self.disabled_protections)
        for p in self.disabled_protections:
            if p not in PROTECTIONS:
                raise ConfigError(f"unknown protection {p!r} (one of {list(PROTECTIONS)})",
                                  field="disabled_protections")

    @classmethod
    def from_section(cls, section: Section) -> "SafetyConfig":
        """Read a ``[safety]`` table; unknown keys and bad values raise ConfigError naming the field."""
        kw: dict[str, Any] = {}
        vector_keys = {"position_min", "position_max", "velocity_max", "torque_max",
                       "position_margin_rad", "soft_kd_nm_s_per_rad", "tracking_error_max",
                       "brake_kd_nm_s_per_rad", "hold_kp_nm_per_rad", "hold_kd_nm_s_per_rad",
                       "startup_tolerance", "feedback_accel_max"}
        for f in fields(cls):
            k = f.name
            if not section.has(k):
                continue
            if k == "stop_reaction":
                kw[k] = section.str(k, choices=REACTIONS)
            elif k in _INT_FIELDS:
                kw[k] = section.int(k)
            elif k == "disabled_protections":
                v = section.raw(k)
                if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                    raise section.error(k, f"expected a list of names from {list(PROTECTIONS)}, got {v!r}")
                kw[k] = tuple(v)
            elif k in vector_keys:
                v = section.raw(k)
                kw[k] = section.vector(k) if isinstance(v, (list, tuple)) else section.float(k)
            else:
                kw[k] = section.float(k)
        section.finish()
        try:
            return cls(**kw)
        except ConfigError as err:
            raise ConfigError(err.message, section.file, section.field(err.field or "")) from err


@dataclass(frozen=True)
class Fault:
    """One recorded fault: time [s], cause, joint index (or None), values, message."""

    t_s: float
    cause: str
    joint: int | None = None
    values: dict = field(default_factory=dict)
    message: str = ""

    def __str__(self) -> str:
        j = "" if self.joint is None else f" joint {self.joint}"
        return f"t={self.t_s:.4f}s {self.cause}{j}: {self.message}"


@dataclass
class SafetyState:
    """Result of one :meth:`SafetySupervisor.check`.

    Attributes
    ----------
    code : int
        Bit set of OK/CLIPPED/SOFT_LIMIT/BRAKING/HOLDING/FAULT/DISABLED.
    action : str
        ``"run"``, ``"brake"``, ``"hold"`` (send the torque and continue) or
        ``"disable"`` (send zero torque, disable the drives, end the run).
    saturated : ndarray of bool, shape (n,)
        Joints whose torque was clipped this cycle.
    new_faults : tuple of Fault
        Faults detected in this cycle.
    """

    code: int
    action: str
    saturated: np.ndarray
    new_faults: tuple = ()


def _set_in(bits: np.ndarray, bits_or: int, bit: int):
    """Indices of the elements of ``bits`` that have ``bit`` set.

    ``bits_or`` is the OR of every element (from the rule summary): when it lacks
    ``bit`` there are none, found without a numpy call.
    """
    return np.flatnonzero(bits & bit) if bits_or & bit else ()


class SafetySupervisor:
    """Per-cycle safety checks and stop reactions (see module docstring).

    Parameters
    ----------
    config : SafetyConfig
    model_limits : JointLimits
        The model's limits (overridden per field by the config).
    model : Model, optional
        Used for gravity in the ``hold`` reaction and, for a ParallelModel, the
        singularity check (pose tracked by warm-started forward kinematics).
    pose0 : array_like, optional
        First FK guess for the singularity check (default: home pose).
    """

    #: take the clean cycle's shortcut in :meth:`check` (tests turn it off to compare it with the
    #: full path, which gives the same command and state)
    _clean_path = True

    def _fault_text(self, joint: int, code: int) -> str:
        if self.fault_text is not None:
            try:
                return str(self.fault_text(joint, code))
            except Exception:  # noqa: BLE001 - a message must not lose the stop: the number then
                pass
        return f"fault code {code}"

    def __init__(self, config: SafetyConfig, model_limits: JointLimits, *, model: Model | None = None,
                 pose0=None):
        self.config = config
        n = np.asarray(model_limits.position_min).size
        self.n = n
        #: ``(joint, code) -> str``, what a device fault code means in a fault's message (the
        #: loop sets the driver's :meth:`~drivers.base.Driver.fault_text`); None: the number
        self.fault_text = None

        def vec(name, value):
            a = np.asarray(value, dtype=float)
            if a.ndim == 0:
                a = np.full(n, float(a))
            if a.shape != (n,):
                raise ConfigError(f"expected a scalar or {n} values, got shape {a.shape}", field=name)
            if np.any(np.isnan(a)):
                raise ConfigError("values must not be NaN", field=name)
            return a

        c = config
        q_min = vec("position_min", model_limits.position_min if c.position_min is None else c.position_min)
        q_max = vec("position_max", model_limits.position_max if c.position_max is None else c.position_max)
        if np.any(q_min >= q_max):
            raise ConfigError("position_min must be below position_max", field="position_min")
        v_max = vec("velocity_max", model_limits.velocity_max if c.velocity_max is None else c.velocity_max)
        tau_max = vec("torque_max", model_limits.torque_max if c.torque_max is None else c.torque_max)
        if np.any(tau_max <= 0):
            raise ConfigError("torque limits must be > 0", field="torque_max")
        if not np.all(np.isfinite(tau_max)):
            raise ConfigError(
                f"no finite torque limit for actuator(s) {np.flatnonzero(~np.isfinite(tau_max)).tolist()}: "
                "a run needs one on every actuator (torque_max in the robot file's joints, or "
                "[safety] torque_max)", field="torque_max")
        lo, hi = SAFETY_RANGES["torque_max"][:2]
        if np.any(tau_max > hi):
            raise ConfigError(f"torque limits must be <= {hi:g} [N m|N], got {tau_max.tolist()}",
                              field="torque_max")
        self.margin = vec("position_margin_rad", c.position_margin_rad)
        # the six per-joint limits of the rules as the rows of one array (one argument of
        # _rules.evaluate); the attributes are views of its rows (edits in place reach the rules)
        self._limits = np.stack([q_min, q_max, v_max, q_min + self.margin, q_max - self.margin, tau_max])
        self.soft_kd = vec("soft_kd_nm_s_per_rad", c.soft_kd_nm_s_per_rad)
        self.brake_kd = vec("brake_kd_nm_s_per_rad", c.brake_kd_nm_s_per_rad)
        self.hold_kp = vec("hold_kp_nm_per_rad", c.hold_kp_nm_per_rad)
        self.hold_kd = vec("hold_kd_nm_s_per_rad", c.hold_kd_nm_s_per_rad)
        self.err_max = np.asarray(np.inf if c.tracking_error_max is None else c.tracking_error_max, dtype=float)
        # its 1-D form for the rules, and the array it was made from (err_max may be replaced)
        self._em_of, self._em = self.err_max, self.err_max.reshape(-1)
        #: plausible |velocity| for a brake: beyond twice the limit a reading is not trusted
        self.v_plausible = 2.0 * self.v_max
        self.start_tol = np.asarray(c.startup_tolerance, dtype=float)
        self.model = model
        self._sing = (c.singularity_margin_min is not None and isinstance(model, ParallelModel))
        self._pose0 = None if pose0 is None else np.asarray(pose0, dtype=float)
        self.reset()
        # the compiled rules once with a cycle's argument types (float64, int64 and bool
        # vectors): numba loads that specialisation from its cache now (about 9 ms the first
        # time in a process), not in the first control cycle, which would start late
        v = np.zeros(n)
        _rules.evaluate(v, v, v, v, v, v, v, self._em, _NO_CODES, _NO_FLAGS, _NO_FLAGS, self._limits,
                        np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
        _rules_checker()
        _saturation_counter()
        # the same for the compiled singularity check (its first one is in the first cycle);
        # the result is not used
        if self._sing and _exact_planar3rrr(model):
            _rrr_regular_margin(model._P, float(model._tol_sing), v, np.zeros(n), np.empty(n), np.empty(1))
        if self._sing:      # and its prediction (argument types as in _singularity_check)
            _rules.predicted_margin(0.0, 0.0, False, 0.0, 0.0, 0.0)
            _rules.singularity_code(1.0, 1.0, 0.5, v, self.tau_max)

    # the limits, views of the rows of ``_limits`` (read-only attributes: edit them in place; a
    # view made at each access, so a copied or unpickled supervisor's are its own array's)
    q_min = property(lambda self: self._limits[0], doc="Lower position limits (n,) [rad|m].")
    q_max = property(lambda self: self._limits[1], doc="Upper position limits (n,) [rad|m].")
    v_max = property(lambda self: self._limits[2], doc="Velocity limits (n,) [rad/s|m/s].")
    _soft_lo = property(lambda self: self._limits[3], doc="q_min + position margin (n,).")
    _soft_hi = property(lambda self: self._limits[4], doc="q_max - position margin (n,).")
    tau_max = property(lambda self: self._limits[5], doc="Torque limits (n,) [N m|N].")

    # -- state -----------------------------------------------------------------
    def reset(self) -> None:
        """Clear latched faults, counters and stop requests."""
        self.faults: list[Fault] = []
        self.latched = False
        self.t_fault: float | None = None
        self.q_fault: np.ndarray | None = None
        self.stop_reason: str | None = None
        self._stale = np.zeros(self.n, dtype=int)
        self._stale_any = False
        #: consecutive cycles each joint's command was clipped at its torque limit (drives saturated)
        self._clipped = np.zeros(self.n, dtype=np.int64)
        self._jbits = np.zeros(self.n, dtype=np.int64)     # rule bits of the last cycle, per joint
        self._ebits = np.zeros(0, dtype=np.int64)          # ... per tracking-error axis
        self._k = 0
        self._finished = False
        self._abort = False
        self._pending: list[Fault] = []
        self._stale_hist: deque = deque()
        self._overrun_hist: deque = deque()
        self._margin_prev: tuple[float, float] | None = None
        self.last_margin = np.nan
        self._t_brake: float | None = None      # the brake's last cycle [s] (its load observer's state)
        self._brake_cmd: tuple | None = None    # the brake's last command and gravity (n,), (n,)
        self._brake_p0: np.ndarray | None = None  # the momentum at the brake's start
        self._gravity_failed = False
        self.pose = None
        if self._sing:
            self.pose = self._pose0 if self._pose0 is not None else np.asarray(self.model.home_pose, float)

    def _quiet(self) -> bool:
        """Whether a cycle without a rule bit or singularity fault is clean: the clean path on, no
        stop request or pending fault, no stale counter to reset."""
        return self._clean_path and self.stop_reason is None and not self._pending and not self._stale_any

    def _singularity_check(self, t_s: float, q: np.ndarray, tau: np.ndarray) -> list[Fault]:
        """The singularity check of a cycle at time ``t_s`` [s], joint angles ``q`` (n,) and
        controller torques ``tau`` (n,): the margin (:meth:`_singularity_margin`), its
        prediction to the next check plus ``singularity_horizon_s`` and the torque it will take
        there, judged by :func:`controller._safety_rules.singularity_code` (the rule the compiled
        loop runs); updates :attr:`pose`, :attr:`last_margin` and the last checked margin.
        Returns the faults (none: an empty list).
        """
        new: list[Fault] = []
        try:
            m, kind = self._singularity_margin(q)
            self.last_margin = m
            m_min = self.config.singularity_margin_min
            h = self.config.singularity_horizon_s
            t0, m0 = (0.0, 0.0) if self._margin_prev is None else self._margin_prev
            predicted = float(_rules.predicted_margin(m, float(t_s), self._margin_prev is not None, t0, m0,
                                                      float(h)))
            self._margin_prev = (float(t_s), m)
            code = _rules.singularity_code(m, predicted, float(m_min), tau, self.tau_max)
            if code == _rules.S_BELOW:
                new.append(Fault(t_s, "singularity", None,
                                 {"margin": m, "kind": kind, "min": m_min},
                                 f"too close to a {kind} singularity"))
            elif code == _rules.S_PREDICTED:
                new.append(Fault(t_s, "singularity", None,
                                 {"margin": m, "predicted": predicted, "kind": kind, "min": m_min,
                                  "horizon_s": h},
                                 f"approaching a {kind} singularity: margin {m:.3g} predicted "
                                 f"{predicted:.3g} by the next check + {h:g} s (min {m_min:g})"))
            elif code == _rules.S_TORQUE:
                ratio = float(np.max(np.abs(tau) / self.tau_max)) * m / predicted
                new.append(Fault(t_s, "singularity", None,
                                 {"margin": m, "predicted": predicted, "kind": kind, "min": m_min,
                                  "horizon_s": h, "torque_ratio": ratio},
                                 f"approaching a {kind} singularity: margin {m:.3g} falling to {predicted:.3g} "
                                 f"by the next check + {h:g} s, where the torque would reach "
                                 f"{100 * ratio:.0f} % of its limit (the guard keeps "
                                 f"{100 * (1 - _rules.TORQUE_RESERVE):.0f} % for the brake)"))
        except Exception as err:  # noqa: BLE001 - any model failure is a fault, recorded
            new.append(Fault(t_s, "singularity", None, {"error": repr(err)},
                             f"singularity check failed: {err}"))
        return new

    def _singularity_margin(self, q) -> tuple[float, str]:
        """The singularity check's measures at the joint angles ``q`` (n,): ``(margin, kind)`` as
        the model's :meth:`~dynamics.base.ParallelModel.singularity` reports them at the pose
        found by its forward kinematics warm-started at :attr:`pose` (which becomes the new
        :attr:`pose`).  Raises what those raise.

        For an exact :class:`~dynamics.planar3rrr.Planar3RRR` a regular pose with a margin is
        found by one compiled call (:func:`_rrr_regular_margin`: the same kernels, the same
        values); anything else (a failure, a singular pose) is left to the model's methods,
        from the same start.
        """
        model = self.model
        if _exact_planar3rrr(model):
            X = np.empty(3)
            out = np.empty(1)
            if _rrr_regular_margin(model._P, float(model._tol_sing), q, self.pose, X, out) == 0:
                self.pose = X
                return float(out[0]), "regular"
        self.pose = np.asarray(model.forward_kinematics_task(q, guess=self.pose), dtype=float)
        rep = model.singularity(q, self.pose)
        return float(rep.margin), rep.kind

    def request_stop(self, reason: str = "signal") -> None:
        """Ask for a stop at the next :meth:`check` (safe to call from a signal handler).

        A second request while a stop is pending or a stop reaction (brake,
        hold) runs cuts it short: the next :meth:`check` commands zero torque
        and disable.
        """
        if self.latched or self.stop_reason is not None:
            self._abort = True
        self.stop_reason = reason

    def note_overrun(self, t_s: float, late_s: float) -> None:
        """The loop reports a missed deadline (cycle ``late_s`` seconds late, wall clock).

        A fault is raised at the next :meth:`check` when this cycle is later than
        ``lateness_max_s`` or the window's share of missed deadlines exceeds
        ``overrun_fraction_max``.
        """
        c = self.config
        k = self._k + 1  # the cycle about to be checked
        h = self._overrun_hist
        h.append(k)
        while h[0] <= k - c.overrun_window_cycles:
            h.popleft()
        if late_s > c.lateness_max_s:
            self._pending.append(Fault(t_s, "overrun", None, {"late_s": float(late_s), "max": c.lateness_max_s},
                                       f"cycle started {1e3 * late_s:.1f} ms late (lateness_max_s = "
                                       f"{1e3 * c.lateness_max_s:g} ms)"))
        elif len(h) > c.overrun_fraction_max * c.overrun_window_cycles:
            self._pending.append(Fault(t_s, "overrun", None, {"missed": len(h), "window": c.overrun_window_cycles},
                                       f"{len(h)} of the last {c.overrun_window_cycles} cycles missed their "
                                       f"deadline (overrun_fraction_max = {c.overrun_fraction_max:g})"))

    def _count_saturated(self, tau) -> None:
        """Count the cycles in a row each joint's torque is at (or beyond) its limit: the law's own
        saturation or the clipping here (read by :meth:`saturation_note`)."""
        if type(tau) is not np.ndarray or tau.shape != (self.n,):
            return
        _saturation_counter()(np.ascontiguousarray(tau, dtype=float), self._limits, self._clipped)

    def saturation_note(self) -> str:
        """``"; the drives saturated ..."`` when some joint's command was clipped at its torque limit
        in each of the last :data:`SATURATED_CYCLES` cycles (the robot could not follow: it fell, or
        lagged), else "": added to a tracking-error or controller fault, whose own words (a forward
        kinematics that no longer converges) would hide why."""
        j = np.flatnonzero(self._clipped >= SATURATED_CYCLES)
        if not j.size:
            return ""
        lims = ", ".join(f"joint {int(k)} at {self.tau_max[k]:.4g} for {int(self._clipped[k])} cycles" for k in j)
        return (f"; the drives saturated: the torque was at its limit ({lims}), so the robot "
                f"could not follow (it fell or lagged): the drives cannot carry this motion")

    def fault(self, t_s: float, cause: str, message: str = "", joint: int | None = None, **values) -> Fault:
        """Record and latch a fault found outside :meth:`check` (exception, comms error); a
        controller fault after cycles of saturated drives says so (:meth:`saturation_note`)."""
        if cause == "controller":
            message += self.saturation_note()
        f = Fault(float(t_s), cause, joint, dict(values), message)
        self._latch(t_s, None, [f])
        return f

    def _latch(self, t_s, q, new: list[Fault]):
        self.faults.extend(new)
        if not self.latched:
            self.latched = True
            self.t_fault = float(t_s)
            self.q_fault = None if q is None or not np.all(np.isfinite(q)) else np.array(q, dtype=float)

    # -- start-up ------------------------------------------------------------------
    def startup_check(self, feedback, error) -> None:
        """Refuse to start (SafetyError listing every problem) unless the robot is ready.

        Parameters
        ----------
        feedback : drivers.base.Feedback or None
            First feedback (from ``driver.enable()``).
        error : array_like
            Trajectory start minus measured state in the controller's space.
        """
        problems = []
        if feedback is None:
            raise SafetyError("start-up check: no feedback from the drives")
        q = np.asarray(feedback.position_rad, dtype=float)
        if q.shape != (self.n,):
            problems.append(f"feedback has {q.size} joints, expected {self.n}")
        else:
            if not np.all(feedback.fresh):
                hint = (getattr(feedback, "info", None) or {}).get("hint")   # the driver names its settings
                problems.append(f"no fresh feedback from joint(s) {np.flatnonzero(~np.asarray(feedback.fresh)).tolist()}"
                                + (f" ({hint})" if hint else ""))
            if not np.all(np.isfinite(q)):
                problems.append(f"non-finite position from joint(s) {np.flatnonzero(~np.isfinite(q)).tolist()}")
            if not np.all(feedback.enabled):
                problems.append(f"drive(s) not enabled: {np.flatnonzero(~np.asarray(feedback.enabled)).tolist()}")
            bad = np.flatnonzero(np.asarray(feedback.fault) != 0)
            if bad.size:
                problems.append("device fault on joint(s) " + ", ".join(
                    f"{j} (code {int(feedback.fault[j])})" for j in bad))
            out = np.flatnonzero((q < self.q_min) | (q > self.q_max))
            if out.size:
                problems.append(f"joint(s) {out.tolist()} outside position limits: q={q[out].tolist()}")
        e = np.asarray(error, dtype=float)
        if not np.all(np.isfinite(e)):
            problems.append("start error is not finite")
        else:
            far = np.flatnonzero(np.abs(e) > self.start_tol)
            if far.size:
                problems.append(f"measured state differs from the trajectory start on axis/axes {far.tolist()} "
                                f"by {e[far].tolist()} (tolerance {np.broadcast_to(self.start_tol, e.shape)[far].tolist()})")
        if problems:
            raise SafetyError("start-up check failed: " + "; ".join(problems))

    # -- per cycle ---------------------------------------------------------------------
    def check(self, t_s: float, state, feedback, ref, tau, *, error=None):
        """Check one cycle; return ``(command_tau (n,), SafetyState)``.

        ``state`` has ``q``, ``qd`` (measured, velocity possibly estimated);
        ``feedback`` the driver's Feedback (or None); ``ref`` the reference
        sample; ``tau`` the controller's torque (NaN if the controller failed);
        ``error`` the controller-space tracking error (default ``ref.pos - q``
        when sizes match).

        Every per-joint and per-axis rule is evaluated once, by
        :func:`controller._safety_rules.evaluate`; a cycle with no bit set (and no
        stale counter or singularity check pending) is clean, otherwise the bits
        become faults, soft-limit damping and clipping here.
        """
        self._count_saturated(tau)
        self._k += 1
        if self.latched:
            return self._react(t_s, state, (), feedback)
        n = self.n
        em = self._em
        if self._em_of is not self.err_max:     # err_max was replaced: its 1-D form anew
            self._em_of, em = self.err_max, self.err_max.reshape(-1)
            self._em = em
        due = self._sing and (self._k - 1) % self.config.singularity_every == 0
        summary = None
        if feedback is not None and error is not None:
            # a cycle's values as they are (no conversion, lengths checked in the compiled call);
            # any other kind of value (-1, TypeError...): converted and validated below
            try:
                summary = _rules_checker()(state.q, state.qd, tau, ref.pos, ref.vel, ref.acc, error, em,
                                           feedback.fault, feedback.enabled, feedback.fresh, self._limits,
                                           self._jbits, self._ebits)
            except Exception:  # noqa: BLE001 - the path below raises what it raises
                summary = None
            if summary == -1:
                summary = None
            elif summary == 0 and not due and type(tau) is np.ndarray and self._quiet():
                return tau.copy(), SafetyState(OK, "run", np.zeros(n, dtype=bool))
        q = np.asarray(state.q, dtype=float)
        qd = np.asarray(state.qd, dtype=float)
        tau = np.asarray(tau, dtype=float)
        shape = self._limits.shape[1:]          # (n,)
        if q.shape != shape or qd.shape != shape or tau.shape != shape:
            raise SafetyError(f"safety check: q, qd and tau must have shape ({n},), got {q.shape}, "
                              f"{qd.shape}, {tau.shape}")
        pos = np.asarray(ref.pos, dtype=float)
        vel = np.asarray(ref.vel, dtype=float)
        acc = np.asarray(ref.acc, dtype=float)
        if error is None and pos.shape == q.shape:
            error = pos - q
        e = _NO_ERROR if error is None else np.asarray(error, dtype=float)
        if e.ndim != 1 or em.shape[0] not in (1, e.shape[0]):
            raise SafetyError(f"safety check: tracking error of shape {e.shape} against "
                              f"tracking_error_max of shape {self.err_max.shape}")
        if feedback is None:
            fault, enabled, fresh = _NO_CODES, _NO_FLAGS, _NO_FLAGS
        else:
            fault = np.asarray(feedback.fault, dtype=np.int64)
            enabled = np.asarray(feedback.enabled, dtype=np.bool_)
            fresh = np.asarray(feedback.fresh, dtype=np.bool_)
            # the compiled rules read element j of each for every joint (no bounds check there)
            if fault.shape != shape or enabled.shape != shape or fresh.shape != shape:
                raise SafetyError(f"safety check: the feedback's fault, enabled and fresh must have shape "
                                  f"({n},), got {fault.shape}, {enabled.shape}, {fresh.shape}")
        jb = self._jbits
        eb = self._ebits
        if eb.shape != e.shape:
            eb = self._ebits = np.zeros(e.shape[0], dtype=np.int64)
        if summary is None:
            summary = _rules.evaluate(q, qd, tau, pos, vel, acc, e, em, fault, enabled, fresh, self._limits, jb, eb)
        # the singularity check when it is due (its faults join the others' below, last)
        sing = self._singularity_check(t_s, q, tau) if due else ()
        if not summary and not sing and self._quiet():
            # the clean cycle: no rule bit set and no singularity fault (else the full path
            # below finds what is set, or handles the limits)
            return tau.copy(), SafetyState(OK, "run", np.zeros(n, dtype=bool))
        # the OR of every joint's / axis' bits: a rule no joint broke needs no numpy call below
        jor = summary >> _rules.JOINT_SHIFT
        eor = summary >> _rules.E_SHIFT
        new: list[Fault] = []
        if self.stop_reason is not None:
            new.append(Fault(t_s, "signal", None, {}, f"stop requested: {self.stop_reason}"))
        if self._pending:
            new.extend(self._pending)
            self._pending = []
        finite_ok = True
        for name, arr, bit in (("q", q, _rules.J_Q_NONFINITE), ("qd", qd, _rules.J_QD_NONFINITE),
                               ("tau", tau, _rules.J_TAU_NONFINITE)):
            bad = _set_in(jb, jor, bit)
            if len(bad):
                new.append(Fault(t_s, "nonfinite", int(bad[0]), {name: arr.tolist()}, f"non-finite {name}"))
                finite_ok = False
        for name, arr, bit in (("pos", pos, _rules.G_REF_POS), ("vel", vel, _rules.G_REF_VEL),
                               ("acc", acc, _rules.G_REF_ACC)):
            if summary & bit:
                new.append(Fault(t_s, "nonfinite", None, {f"ref.{name}": arr.tolist()}, f"non-finite reference {name}"))
                finite_ok = False
        if feedback is not None:
            for j in _set_in(jb, jor, _rules.J_DEVICE_FAULT):
                new.append(Fault(t_s, "device_fault", int(j), {"code": int(fault[j])},
                                 f"device reports {self._fault_text(int(j), int(fault[j]))}"))
            for j in _set_in(jb, jor, _rules.J_DISABLED):
                new.append(Fault(t_s, "drive_disabled", int(j), {}, "drive not enabled"))
            if not jor & _rules.J_NOT_FRESH:
                if self._stale_any:
                    self._stale[:] = 0
                    self._stale_any = False
            else:
                stale = (jb & _rules.J_NOT_FRESH) != 0
                self._stale = np.where(stale, self._stale + 1, 0)
                self._stale_any = True
                for j in np.flatnonzero(self._stale >= self.config.stale_cycles):
                    new.append(Fault(t_s, "stale_feedback", int(j), {"cycles": int(self._stale[j])},
                                     f"no fresh feedback for {int(self._stale[j])} cycles"))
                new.extend(self._stale_window(t_s))
        if finite_ok:
            for j in _set_in(jb, jor, _rules.J_POSITION):
                new.append(Fault(t_s, "position_limit", int(j),
                                 {"q": float(q[j]), "min": float(self.q_min[j]), "max": float(self.q_max[j])},
                                 "position outside hard limits"))
            for j in _set_in(jb, jor, _rules.J_VELOCITY):
                new.append(Fault(t_s, "velocity_limit", int(j), {"qd": float(qd[j]), "max": float(self.v_max[j])},
                                 "velocity limit exceeded"))
            if error is not None:
                if eor & _rules.E_NONFINITE:
                    new.append(Fault(t_s, "nonfinite", None, {"error": e.tolist()}, "non-finite tracking error"))
                else:
                    for j in _set_in(eb, eor, _rules.E_BEYOND):
                        new.append(Fault(t_s, "tracking_error", int(j),
                                         {"error": float(e[j]), "max": float(em[0 if em.shape[0] == 1 else j])},
                                         "tracking error limit exceeded" + self.saturation_note()))
        new.extend(sing)
        if new:
            self._latch(t_s, q, new)
            return self._react(t_s, state, tuple(new))

        code = OK
        cmd = tau
        if jor & (_rules.J_SOFT_LO | _rules.J_SOFT_HI):
            lo = (jb & _rules.J_SOFT_LO) != 0
            hi = (jb & _rules.J_SOFT_HI) != 0
            soft = lo | hi
            code |= SOFT_LIMIT
            cmd = np.where(lo, np.maximum(cmd, 0.0), cmd)
            cmd = np.where(hi, np.minimum(cmd, 0.0), cmd)
            cmd = np.where(soft, cmd - self.soft_kd * qd, cmd)
            sat = np.abs(cmd) > self.tau_max        # the damped command against the limits
            clip = sat.any()
        else:
            sat = (jb & _rules.J_CLIP) != 0         # |tau| > tau_max: the rule's own bits
            clip = jor & _rules.J_CLIP
        if clip:
            code |= CLIPPED
            cmd = np.clip(cmd, -self.tau_max, self.tau_max)
        return cmd.copy() if cmd is tau else cmd, SafetyState(code, "run", sat)

    def _stale_window(self, t_s) -> list[Fault]:
        """Record a cycle with some feedback not fresh; a fault when the window's share is too high."""
        c = self.config
        h = self._stale_hist
        h.append(self._k)
        while h[0] <= self._k - c.stale_window_cycles:
            h.popleft()
        if len(h) > c.stale_fraction_max * c.stale_window_cycles:
            return [Fault(t_s, "stale_feedback", None, {"stale": len(h), "window": c.stale_window_cycles},
                          f"feedback not fresh in {len(h)} of the last {c.stale_window_cycles} cycles "
                          f"(stale_fraction_max = {c.stale_fraction_max:g})")]
        return []

    # -- reactions --------------------------------------------------------------------
    def _usable(self, q, qd, feedback) -> np.ndarray:
        """Joints whose feedback may drive a brake: fresh, finite and plausible (bool (n,))."""
        ok = np.isfinite(qd) & (np.abs(qd) <= self.v_plausible)
        if q is not None and q.shape == ok.shape:
            ok &= np.isfinite(q)
        if feedback is not None:
            fresh = np.asarray(feedback.fresh, dtype=bool)
            if fresh.shape == ok.shape:
                ok &= fresh
            else:
                ok[:] = False
        return ok

    def _end(self, t_s, new, message: str | None = None):
        """Finish the stop reaction: zero torque and disable (with an optional recorded reason)."""
        if message is not None:
            self.faults.append(Fault(t_s, "stop_reaction", None, {}, message))
        self._finished = True
        return np.zeros(self.n), SafetyState(FAULT | DISABLED, "disable", np.zeros(self.n, dtype=bool), new)

    def _path_damping(self, q, v) -> np.ndarray | None:
        """A parallel robot's brake damping (n,) along the platform's path: ``-M(q) W v`` with the
        model's joint-space mass matrix ``M`` (at :attr:`pose`) and ``W = diag(brake_kd / M_jj)``,
        so each joint alone is damped by ``brake_kd`` as in a serial arm, while near a parallel
        singularity, where the platform moves along a direction the joints hardly see (``M``
        grows there as ``J^-T M_x J^-1``), it decelerates the platform itself (the torque is
        ``J^-T M_x`` of a deceleration along its velocity) instead of letting it coast into the
        singularity.  None when the model has no answer (then ``-brake_kd v``)."""
        kw = {"pose": self.pose} if self.pose is not None else {}
        try:
            M = np.asarray(self.model.mass_matrix(q, **kw), dtype=float)
        except Exception:  # noqa: BLE001 - the joint damping then
            return None
        d = np.diag(M) if M.shape == (self.n, self.n) else np.zeros(0)
        if d.shape != (self.n,) or not (np.all(np.isfinite(M)) and np.all(d > 0)):
            return None
        return -(M @ (self.brake_kd / d * v))

    def _momentum(self, q, v) -> tuple[np.ndarray, np.ndarray] | None:
        """The model's generalized momentum ``M(q) v`` and ``C(q, v)^T v`` (n,), (n,) at ``q``, ``v``
        (n,) (a parallel robot's at :attr:`pose`), or None when the model has no answer."""
        kw = {"pose": self.pose} if isinstance(self.model, ParallelModel) and self.pose is not None else {}
        try:
            p = np.asarray(self.model.mass_matrix(q, **kw), dtype=float) @ v
            ctv = np.asarray(self.model.coriolis_matrix(q, v, **kw), dtype=float).T @ v
        except Exception:  # noqa: BLE001 - no load estimate then
            return None
        if p.shape != (self.n,) or ctv.shape != (self.n,) or not (np.all(np.isfinite(p)) and np.all(np.isfinite(ctv))):
            return None
        return p, ctv

    def _observe_load(self, t_s, q, v, g, finite) -> np.ndarray:
        """The brake's estimate ``r`` (n,) [N m|N] of the torque acting on the joints beyond the
        model's gravity ``g`` (n,): the generalized-momentum observer of De Luca and Mattone
        (2003), ``r = K (p - p0 - integral(tau - g + C^T v + r) dt)`` with the model's momentum
        ``p = M(q) v``, so that ``r' = K (d - r)``: it follows the disturbance ``d`` (unmodelled
        mass and payload, friction) with the time constant ``1/K = brake_ramp_s`` (at least 4
        cycles), whatever the damping, and without differentiating the velocity.  ``v`` (n,):
        the usable velocities (0 elsewhere); ``tau`` is the brake's last command.  Zero without
        a model, while its mass matrix has no answer, and after a singularity fault."""
        start = self._t_brake is None
        dt = 0.0 if start else t_s - self._t_brake
        self._t_brake = t_s
        # not after a singularity fault: the model's momentum is ill-conditioned there, and the
        # estimate would fight the brake's deceleration of the platform
        trusted = not any(f.cause == "singularity" for f in self.faults)
        mom = self._momentum(q, v) if self.model is not None and finite and trusted else None
        if start or self._brake_p0 is None:
            self._brake_r = np.zeros(self.n)
            self._brake_int = np.zeros(self.n)
            self._brake_p0 = None if mom is None else mom[0]
            return self._brake_r
        if mom is None or not dt > 0 or self._brake_cmd is None:
            return self._brake_r
        p, ctv = mom
        tau_prev, g_prev = self._brake_cmd
        k = 1.0 / max(self.config.brake_ramp_s, 4.0 * dt)
        self._brake_int += (tau_prev - g_prev + ctv + self._brake_r) * dt
        self._brake_r = np.clip(k * (p - self._brake_p0 - self._brake_int), -self.tau_max, self.tau_max)
        return self._brake_r

    def _gravity(self, t_s, q) -> np.ndarray | None:
        """The model's gravity torque (n,) [N m|N] at the measured ``q`` (n,) (a parallel robot's at
        the pose its forward kinematics finds from the last one), for the brake and the hold; None
        without a model or when it fails or is not finite (recorded once a reaction as a
        ``"stop_gravity"`` entry: the reaction goes on without it)."""
        if self.model is None:
            return None
        try:
            if isinstance(self.model, ParallelModel):
                guess = self.pose if self.pose is not None else self.model.home_pose
                self.pose = np.asarray(self.model.forward_kinematics_task(q, guess=guess), dtype=float)
                g = self.model.bias(q, np.zeros_like(q), pose=self.pose)
            else:
                g = self.model.gravity(q)
            g = np.asarray(g, dtype=float)
            if g.shape == (self.n,) and np.all(np.isfinite(g)):
                return g
            err = "gravity not finite"
        except Exception as exc:  # noqa: BLE001 - recorded, the reaction continues without gravity
            err = f"{type(exc).__name__}: {exc}"
        if not self._gravity_failed:
            self._gravity_failed = True
            self.faults.append(Fault(t_s, "stop_gravity", None, {"error": err},
                                     f"gravity failed during the {self.config.stop_reaction} reaction, going on "
                                     f"without it: {err}"))
        return None

    def _react(self, t_s, state, new, feedback=None):
        q = np.asarray(state.q, dtype=float) if state is not None else None
        qd = np.asarray(state.qd, dtype=float) if state is not None else None
        finite = q is not None and np.all(np.isfinite(q)) and np.all(np.isfinite(qd))
        reaction = self.config.stop_reaction
        elapsed = t_s - self.t_fault
        if self._abort and not self._finished:
            self._abort = False
            self.faults.append(Fault(t_s, "signal", None, {}, "second stop request: stop reaction cut short"))
            return self._end(t_s, new)
        if self._finished or reaction == "zero_disable":
            return self._end(t_s, new)
        if reaction == "brake_disable":
            if elapsed >= self.config.brake_time_s:
                return self._end(t_s, new)
            qd = np.full(self.n, np.nan) if qd is None or qd.shape != (self.n,) else qd
            use = self._usable(q, qd, feedback)
            if not use.any():
                return self._end(t_s, new, "brake: no fresh, plausible velocity feedback; disabled at once")
            if np.all(np.abs(qd[use]) < self.config.stop_velocity_rad_s):
                return self._end(t_s, new)
            ramp = min(1.0, max(0.0, elapsed) / self.config.brake_ramp_s)
            lim = self.tau_max * ramp
            v = np.where(use, qd, 0.0)
            # the load: the model's gravity at the measured pose, and what the model misses of
            # it (mass, payload, friction) measured by a momentum observer on each joint
            g = self._gravity(t_s, q) if finite else None
            g = np.zeros(self.n) if g is None else g
            d_hat = self._observe_load(t_s, q, v, g, finite)
            damp = self._path_damping(q, v) if finite and isinstance(self.model, ParallelModel) else None
            if damp is None:
                damp = -self.brake_kd * v
                sat = np.abs(damp) > lim
                damp = np.clip(damp, -lim, lim)                 # ramped: never a step of -kd qd
            else:   # scaled as a whole within the ramped limit: it keeps its direction
                sat = np.abs(damp) > lim
                big = np.max(np.abs(damp) / np.where(lim > 0, lim, np.inf), initial=0.0) if ramp > 0 else np.inf
                damp = damp / big if big > 1.0 else damp
                damp = np.where(np.isfinite(damp), damp, 0.0)
            total = g - d_hat + damp
            sat |= np.abs(total) > self.tau_max
            tau = np.clip(np.where(use, total, 0.0), -self.tau_max, self.tau_max)
            self._brake_cmd = (tau, g)
            return np.clip(tau, -self.tau_max, self.tau_max), SafetyState(FAULT | BRAKING, "brake", sat, new)
        # hold
        if not finite:
            return self._end(t_s, new)
        if elapsed >= self.config.hold_time_s:
            return self._end(t_s, new)
        if feedback is not None:
            fresh = np.asarray(feedback.fresh, dtype=bool)
            self._stale = np.where(fresh, 0, self._stale + 1)
            if np.any(self._stale >= self.config.stale_cycles):
                return self._end(t_s, new, "hold: feedback not fresh for stale_cycles cycles; disabled")
        if self.q_fault is None:
            self.q_fault = q.copy()
        tau = self.hold_kp * (self.q_fault - q) - self.hold_kd * qd
        g = self._gravity(t_s, q)
        if g is not None:
            tau = tau + g
        sat = np.abs(tau) > self.tau_max
        return np.clip(tau, -self.tau_max, self.tau_max), SafetyState(FAULT | HOLDING, "hold", sat, new)
