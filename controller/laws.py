"""Control laws: joint- and task-space computed torque, PD + gravity, PID.

A control law knows a model (its *own* model, normally not the plant's) and a
reference; it never talks to a bus.  Every law implements :class:`Controller`:

* ``reset()`` clears the internal state (integrators, last pose, last time);
* ``compute(t_s, ref, state) -> tau`` returns the actuator torques, shape
  ``(n,)`` [N m, or N for prismatic actuators];
* after ``compute``, ``last_error`` holds the position error ``e = ref - measured``
  in the controller's space (joint space, or task space for the task-space
  laws) and ``last_saturated`` the per-actuator saturation mask of the
  controller's own :class:`Saturation` (all False without one).

``ref`` is any object with ``pos``, ``vel``, ``acc`` arrays of shape ``(dim,)``
(e.g. :class:`trajectories.base.Sample` or :class:`Ref`); ``state`` is a
:class:`State` of the *measured* joint positions and velocities.  Gains are
constant; they may be given as a scalar, a vector of shape ``(dim,)`` (diagonal
gains) or a full ``(dim, dim)`` matrix.

Anti-windup
-----------
Laws with an integrator take an optional :class:`Saturation`.  The integrator
is then protected against windup: with ``"clamp"`` (conditional integration)
the integrator does not integrate on a step whose output saturates in the
direction the error pushes; with ``"back_calculation"`` (PID only) the
integral term is driven back by ``(tau_sat - tau) / tracking_time_s``.  An
optional ``integral_limit`` additionally bounds the integral state.
"""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

import numpy as np
from numba import njit

from dynamics._kernel_cache import stamp_package_caches
from dynamics import exact_model_kind
from dynamics.base import Model, ParallelModel
from dynamics.errors import ModelError, SingularityError

from . import _law_kernels as _LK
from .metrics import TASK_LAYOUTS

__all__ = ["State", "Ref", "Saturation", "Controller", "ComputedTorque", "PDGravity", "PID",
           "TaskComputedTorque", "TaskPDGravity", "gravity_feedforward", "euler_rotation",
           "rotation_error", "task_error"]


@dataclass(frozen=True, init=False)
class State:
    """Measured joint state at time ``t_s`` [s]: ``q`` [rad|m] and ``qd``, shape (n,)."""

    t_s: float
    q: np.ndarray
    qd: np.ndarray

    def __init__(self, t_s: float, q: np.ndarray, qd: np.ndarray):
        # the fields set in the instance dict: the generated __init__ of a frozen dataclass
        # (object.__setattr__ per field) cost 0.2 us more, once per control cycle
        d = self.__dict__
        d["t_s"] = t_s
        d["q"] = q
        d["qd"] = qd


@dataclass(frozen=True)
class Ref:
    """A reference sample: position, velocity, acceleration, shape (dim,)."""

    pos: np.ndarray
    vel: np.ndarray
    acc: np.ndarray

    @staticmethod
    def setpoint(pos) -> "Ref":
        """A constant set-point (zero velocity and acceleration)."""
        p = np.asarray(pos, dtype=float)
        return Ref(p, np.zeros_like(p), np.zeros_like(p))


def _gain(k, dim: int, name: str) -> np.ndarray:
    """Gain as a (dim, dim) matrix from a scalar, a (dim,) vector or a (dim, dim) matrix."""
    a = np.asarray(k, dtype=float)
    if a.ndim == 0:
        a = np.full(dim, float(a))
    if a.ndim == 1:
        if a.shape != (dim,):
            raise ModelError(f"gain {name}: expected {dim} values, got shape {a.shape}")
        a = np.diag(a)
    if a.shape != (dim, dim):
        raise ModelError(f"gain {name}: expected a scalar, ({dim},) or ({dim}, {dim}), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ModelError(f"gain {name} must be finite")
    return a


def _vec(x, n: int, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim == 0:
        a = np.full(n, float(a))
    if a.shape != (n,):
        raise ModelError(f"{name}: expected shape ({n},), got {a.shape}")
    return a


class Saturation:
    """Symmetric per-actuator torque saturation ``|tau_i| <= limit_nm[i]``.

    Parameters
    ----------
    limit_nm : float or array_like, shape (n,)
        Positive limits [N m | N]; ``inf`` disables a joint's limit.
    """

    def __init__(self, limit_nm, n: int | None = None):
        a = np.atleast_1d(np.asarray(limit_nm, dtype=float))
        if n is not None and a.size == 1:
            a = np.full(n, float(a[0]))
        if a.ndim != 1 or np.any(np.isnan(a)) or np.any(a <= 0):
            raise ModelError(f"saturation limits must be positive, got {limit_nm!r}")
        self.limit_nm = a

    def apply(self, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(clipped tau, mask of saturated actuators)``; shapes (n,)."""
        lim = self.limit_nm
        sat = np.abs(tau) > lim
        return np.clip(tau, -lim, lim), sat


class Controller(ABC):
    """Interface of every control law (see module docstring)."""

    #: number of actuators n
    n: int
    #: dimension of the reference (n for joint-space laws, task dof for task-space laws)
    dim: int
    #: "joint" or "task"
    space: str = "joint"

    def __init__(self, n: int, dim: int, saturation: Saturation | None = None):
        self.n = n
        self.dim = dim
        if saturation is not None and saturation.limit_nm.shape != (n,):
            saturation = Saturation(saturation.limit_nm, n)
            if saturation.limit_nm.shape != (n,):
                raise ModelError(f"saturation needs {n} limits")
        self.saturation = saturation
        self.last_error = np.zeros(dim)
        self.last_saturated = np.zeros(n, dtype=bool)

    def reset(self) -> None:
        """Clear internal state (integrators, filters, last pose)."""
        self.last_error = np.zeros(self.dim)
        self.last_saturated = np.zeros(self.n, dtype=bool)

    @abstractmethod
    def compute(self, t_s: float, ref, state: State) -> np.ndarray:
        """Torques for the measured ``state`` and reference ``ref``, shape (n,)."""

    def tracking_error(self, ref, state: State) -> np.ndarray:
        """Position error ``ref.pos - measured`` in the controller's space, shape (dim,)."""
        return np.asarray(ref.pos, dtype=float) - state.q

    def _saturate(self, tau: np.ndarray) -> np.ndarray:
        if self.saturation is None:
            self.last_saturated = np.zeros(self.n, dtype=bool)
            return tau
        tau_s, sat = self.saturation.apply(tau)
        self.last_saturated = sat
        return tau_s


class _Integrator:
    """Integral of the error with clamping anti-windup and an optional bound."""

    def __init__(self, dim: int, limit):
        self.z = np.zeros(dim)
        self.limit = None if limit is None else _vec(limit, dim, "integral_limit")
        self.t_last: float | None = None

    def reset(self):
        self.z[:] = 0.0
        self.t_last = None

    def candidate(self, t_s: float, e: np.ndarray) -> np.ndarray:
        dt = 0.0 if self.t_last is None else max(t_s - self.t_last, 0.0)
        z = self.z + e * dt
        if self.limit is not None:
            z = np.clip(z, -self.limit, self.limit)
        return z

    def commit(self, t_s: float, z: np.ndarray | None):
        if z is not None:
            self.z = z
        self.t_last = t_s

    def state(self) -> np.ndarray:
        """``[z, t_last]``, shape (dim + 1,) (``t_last`` [s] NaN before the first commit)."""
        return np.append(self.z, _time_or_nan(self.t_last))

    def set_state(self, s: np.ndarray) -> None:
        """Take back a :meth:`state` vector."""
        self.z = np.array(s[:-1])
        self.t_last = _nan_or_time(s[-1])


def _time_or_nan(t_s: float | None) -> float:
    """A time of last step [s] as the compiled laws carry it: NaN for none."""
    return np.nan if t_s is None else t_s


def _nan_or_time(t_s: float) -> float | None:
    """Back from :func:`_time_or_nan`."""
    return None if np.isnan(t_s) else float(t_s)


_FRICTION = ("none", "measured", "desired")


def _check_friction(friction: str, allowed=_FRICTION) -> str:
    if friction not in allowed:
        raise ModelError(f"friction compensation must be one of {list(allowed)}, got {friction!r}")
    return friction


def _pose_hint(model: ParallelModel, q, guess):
    """Platform pose by forward kinematics warm-started at ``guess``."""
    return np.asarray(model.forward_kinematics_task(q, guess=guess), dtype=float)


#: status of a compiled call whose inputs do not have the law's shapes (no kernel ran; the
#: numpy path then runs, as for a status of the kernel)
_ST_SHAPE = -1

#: the keys of ``TaskComputedTorque.compiled_args`` (3RRR) in ``consts``, in the order of
#: :func:`_rrr_task_computed_torque_call`
_RRR_TCT_CONSTS = ("P", "branch", "kp", "kd", "ki", "has_ki", "z_limit", "fric", "fmode", "has_sat", "sat_lim")


# numba takes a function's cache locator when it is decorated: the kernel files' stamp first
stamp_package_caches()


@njit(cache=True, error_model="numpy")
def _rrr_task_computed_torque_call(c, q, qd, pose, pos, vel, acc, z, dt, X, e, tau, mask, z_out):
    """:func:`controller._law_kernels.rrr_task_computed_torque` with its constant arguments in
    one tuple ``c`` (the values of :data:`_RRR_TCT_CONSTS`, built once per ``compiled_args``),
    so that one argument instead of eleven passes the dispatcher each cycle.

    The inputs ``q``, ``qd`` (n,) and ``pos``, ``vel``, ``acc`` (dim,) are first checked
    against the shapes of the outputs ``tau`` (n,) and ``e`` (dim,); on a mismatch nothing is
    written and the status is :data:`_ST_SHAPE`, else the kernel's status (0: clean).  The
    other arguments and the outputs are the kernel's.
    """
    # ``x.ndim`` is a constant of the compiled form: for an input of more dimensions these
    # branches are all that is compiled (no kernel could take it)
    if q.ndim != 1:
        return _ST_SHAPE
    if qd.ndim != 1:
        return _ST_SHAPE
    if pos.ndim != 1:
        return _ST_SHAPE
    if vel.ndim != 1:
        return _ST_SHAPE
    if acc.ndim != 1:
        return _ST_SHAPE
    n = tau.shape[0]
    m = e.shape[0]
    if q.shape[0] != n or qd.shape[0] != n or pos.shape[0] != m or vel.shape[0] != m or acc.shape[0] != m:
        return _ST_SHAPE
    return _LK.rrr_task_computed_torque(c[0], c[1], q, qd, pose, pos, vel, acc, c[2], c[3], c[4], c[5], z, dt,
                                        c[6], c[7], c[8], c[9], c[10], X, e, tau, mask, z_out)


class _CompiledLaw:
    """The compiled form of a law (see :mod:`controller._law_kernels`): its constant
    arguments, rebuilt when an object they are built from (:meth:`_compiled_inputs`:
    the model, a gain, the saturation, the friction mode...) was replaced."""

    _compiled_key = None
    _compiled = None
    #: the attributes the compiled arguments are built from (compared by identity; a dotted
    #: name reaches into an attribute), read by :meth:`_compiled_inputs` in one call
    _COMPILED_INPUTS: tuple[str, ...] = ("model", "kp", "kd", "saturation", "friction")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._inputs_of = operator.attrgetter(*cls._COMPILED_INPUTS)

    @property
    def compiled_args(self):
        """The constant arguments of the compiled law for the current model, gains and
        limits (rebuilt when any of them was replaced), or None (Python law)."""
        key = self._compiled_inputs()
        old = self._compiled_key
        if old is None or not all(map(operator.is_, key, old)):
            self._compiled = self._compiled_args()
            self._compiled_key = key
        return self._compiled

    def _compiled_inputs(self) -> tuple:
        """The objects the compiled arguments are built from (compared by identity):
        the attributes named in ``_COMPILED_INPUTS``."""
        return self._inputs_of(self)

    def _compiled_args(self):
        return None

    def compiled_state(self) -> np.ndarray:
        """The state the law carries from step to step as the compiled offline loop carries
        it (its layout: the law's cycle function in :mod:`controller._fast_loop`), a new
        float array (s,); empty for a law without state."""
        return np.zeros(0)

    def set_compiled_state(self, s: np.ndarray) -> None:
        """Take back the state of :meth:`compiled_state`, advanced by the compiled loop."""

    def _try_compiled(self, t_s, ref, state):
        """Torques by the compiled law (``_compute_compiled``), or None: no compiled form for
        this model, inputs of other shapes, or a step the kernel declines (the numpy path then
        runs and reports it).  Sets ``last_error`` and ``last_saturated`` when it ran.

        The shapes are checked here, or (``compiled_args["checks_shapes"]``) by the compiled
        call itself (:func:`_rrr_task_computed_torque_call`: status :data:`_ST_SHAPE`)."""
        c = self.compiled_args
        if c is None:
            return None
        # contiguous: the Stewart kernels call the model's kernels of explicit signatures
        q = np.ascontiguousarray(state.q, dtype=float)
        qd = np.ascontiguousarray(state.qd, dtype=float)
        pos = np.ascontiguousarray(ref.pos, dtype=float)
        vel = np.ascontiguousarray(ref.vel, dtype=float)
        acc = np.ascontiguousarray(ref.acc, dtype=float)
        if not c["checks_shapes"]:
            n, m = (self.n,), (self.dim,)
            if q.shape != n or qd.shape != n or pos.shape != m or vel.shape != m or acc.shape != m:
                return None
        e = np.empty(self.dim)
        tau = np.empty(self.n)
        mask = np.empty(self.n, dtype=np.bool_)
        if not self._compute_compiled(t_s, c, q, qd, pos, vel, acc, e, tau, mask):
            return None
        self.last_error = e
        self.last_saturated = mask
        return tau

    def _law_args(self, n: int) -> dict:
        """Gains, friction and saturation arguments shared by the compiled laws."""
        m = self.model
        fric = np.ascontiguousarray(np.stack([np.broadcast_to(np.asarray(m.drive.viscous, float), (n,)),
                                              np.broadcast_to(np.asarray(m.drive.coulomb, float), (n,))]))
        fmode = {"measured": _LK.FRICTION_MEASURED, "desired": _LK.FRICTION_DESIRED}.get(self.friction,
                                                                                        _LK.FRICTION_NONE)
        return {"checks_shapes": False,
                "kp": np.ascontiguousarray(self.kp, dtype=float), "kd": np.ascontiguousarray(self.kd, dtype=float),
                "fric": fric, "fmode": fmode,
                "has_sat": self.saturation is not None,
                "sat_lim": (np.full(n, np.inf) if self.saturation is None
                            else np.ascontiguousarray(self.saturation.limit_nm, dtype=float))}


class _CompiledIntegralLaw(_CompiledLaw):
    """:class:`_CompiledLaw` of a law with an optional integrator ``_int`` and gain ``ki``."""

    _COMPILED_INPUTS = _CompiledLaw._COMPILED_INPUTS + ("ki", "_int.limit")

    def _common_args(self, n: int) -> dict:
        """Gains, integral, friction and saturation arguments of the compiled computed-torque laws."""
        lim = self._int.limit
        return {**self._law_args(n),
                "ki": np.ascontiguousarray(self.ki if self.ki is not None else np.zeros((n, n)), dtype=float),
                "has_ki": self.ki is not None,
                "z_limit": np.full(n, np.inf) if lim is None else np.ascontiguousarray(lim, dtype=float)}


class ComputedTorque(_CompiledIntegralLaw, Controller):
    """Joint-space computed torque (inverse dynamics) control.

    Law::

        e    = q_d - q,  e_d = qd_d - qd
        v    = qdd_d + Kd e_d + Kp e [+ Ki int(e) dt]
        tau  = sat( M^(q) v + h^(q, qd) )

    with ``M^``, ``h^`` from the controller's ``model``.  With a matched model
    the error obeys ``e_dd + Kd e_d + Kp e (+ Ki int e) = 0`` per axis (diagonal
    gains), i.e. the poles chosen with :mod:`controller.gains`.

    For a :class:`~dynamics.base.ParallelModel` the reduced (actuated
    coordinate) model needs the platform pose as a hint: it is tracked by
    forward kinematics of the measured ``q`` warm-started from the previous
    pose (``pose0`` or the model's home pose at the first call) and passed as
    ``pose=`` to ``mass_matrix`` and ``bias``.

    Parameters
    ----------
    model : Model
        The controller's model (n actuated coordinates).
    kp, kd : float, (n,) or (n, n)
        Gains [1/s^2], [1/s].
    ki : float, (n,) or (n, n), optional
        Integral gain [1/s^3].
    integral_limit : float or (n,), optional
        Bound on each integrator state |int e dt| [rad s].
    saturation : Saturation, optional
        Actuator limits; enables clamping anti-windup (the integrator freezes on
        steps where any actuator saturates).
    pose0 : array_like, optional
        Initial pose hint for parallel models.
    friction : {"none", "measured", "desired"}
        Add the model's friction torque ``model.friction_torque(v)`` with ``v``
        the measured or the desired joint velocity (the rigid-body model
        excludes friction; "desired" avoids Coulomb chatter from noisy
        velocity measurements).
    """

    def __init__(self, model: Model, kp, kd, ki=None, integral_limit=None,
                 saturation: Saturation | None = None, pose0=None, friction: str = "none"):
        n = model.dof
        super().__init__(n, n, saturation)
        self.model = model
        self.friction = _check_friction(friction)
        self.kp = _gain(kp, n, "kp")
        self.kd = _gain(kd, n, "kd")
        self.ki = None if ki is None else _gain(ki, n, "ki")
        self._int = _Integrator(n, integral_limit)
        self._parallel = isinstance(model, ParallelModel)
        self._pose0 = None if pose0 is None else np.asarray(pose0, dtype=float)
        self.pose = None
        self.reset()

    def reset(self) -> None:
        super().reset()
        self._int.reset()
        if self._parallel:
            self.pose = self._pose0 if self._pose0 is not None else np.asarray(self.model.home_pose, float)

    def _dyn(self, q, qd):
        if self._parallel:
            self.pose = _pose_hint(self.model, q, self.pose)
            return (self.model.mass_matrix(q, pose=self.pose),
                    self.model.bias(q, qd, pose=self.pose))
        return self.model.mass_matrix(q), self.model.bias(q, qd)

    def _compiled_args(self):
        """Constant arguments of :func:`controller._law_kernels.serial_computed_torque`, or None.

        The compiled law serves an exact :class:`~dynamics.serial.SerialModel`; any other
        model takes the Python path below.
        """
        if exact_model_kind(self.model) != "serial":
            return None
        return {"kind": "serial", "P": self.model._P, **self._common_args(self.n)}

    def _compute_compiled(self, t_s, c, q, qd, pos, vel, acc, e, tau, mask) -> bool:
        """Run :func:`~controller._law_kernels.serial_computed_torque` into ``e``, ``tau``,
        ``mask`` (all (n,)) and commit the integrator; False when it reports a status."""
        itg = self._int
        dt = 0.0 if itg.t_last is None else max(t_s - itg.t_last, 0.0)
        z = np.empty(self.n)
        if _LK.serial_computed_torque(c["P"], q, qd, pos, vel, acc, c["kp"], c["kd"], c["ki"], c["has_ki"], itg.z,
                                      float(dt), c["z_limit"], c["fric"], c["fmode"], c["has_sat"], c["sat_lim"],
                                      e, tau, mask, z) != 0:
            return False
        itg.commit(t_s, z if c["has_ki"] else None)
        return True

    def compiled_state(self) -> np.ndarray:
        """``[z (n,), t_last]`` (see :meth:`_Integrator.state`)."""
        return self._int.state()

    def set_compiled_state(self, s: np.ndarray) -> None:
        self._int.set_state(s)

    def compute(self, t_s, ref, state):
        tau = self._try_compiled(t_s, ref, state)
        if tau is not None:
            return tau
        q, qd = state.q, state.qd
        e = np.asarray(ref.pos, dtype=float) - q
        ed = np.asarray(ref.vel, dtype=float) - qd
        M, h = self._dyn(q, qd)
        if self.friction != "none":
            h = h + self.model.friction_torque(qd if self.friction == "measured" else np.asarray(ref.vel, float))
        v = np.asarray(ref.acc, dtype=float) + self.kd @ ed + self.kp @ e
        z = None
        if self.ki is not None:
            z = self._int.candidate(t_s, e)
            tau_free = M @ (v + self.ki @ z) + h
        else:
            tau_free = M @ v + h
        tau = self._saturate(tau_free)
        if z is not None and np.any(self.last_saturated):
            z = None  # conditional integration: freeze while saturated
            tau = self._saturate(M @ (v + self.ki @ self._int.z) + h)
        self._int.commit(t_s, z)
        self.last_error = e
        return tau

    @property
    def integral(self) -> np.ndarray:
        """Integrator state int(e) dt, shape (n,) [rad s]."""
        return self._int.z.copy()


class PDGravity(_CompiledLaw, Controller):
    """PD control with gravity compensation: ``tau = Kp e + Kd e_d + g^(q)``.

    ``e = q_d - q``, ``e_d = qd_d - qd`` (for a set-point ``e_d = -qd``).  With
    exact gravity and positive definite gains the set-point is globally
    asymptotically stable (Takegaki-Arimoto).  For a parallel model the
    gravity term is evaluated with a pose hint tracked as in
    :class:`ComputedTorque`.  ``friction`` as in :class:`ComputedTorque`.

    For an exact :class:`~dynamics.serial.SerialModel` or
    :class:`~dynamics.planar3rrr.Planar3RRR` the law runs compiled
    (:func:`controller._law_kernels.serial_pd_gravity`,
    :func:`~controller._law_kernels.rrr_pd_gravity`); other models, and any input the
    compiled law declines, take the numpy path.
    """

    def __init__(self, model: Model, kp, kd, saturation: Saturation | None = None, pose0=None,
                 friction: str = "none"):
        n = model.dof
        super().__init__(n, n, saturation)
        self.model = model
        self.friction = _check_friction(friction)
        self.kp = _gain(kp, n, "kp")
        self.kd = _gain(kd, n, "kd")
        self._parallel = isinstance(model, ParallelModel)
        self._pose0 = None if pose0 is None else np.asarray(pose0, dtype=float)
        self.pose = None
        self.reset()

    def reset(self):
        super().reset()
        if self._parallel:
            self.pose = self._pose0 if self._pose0 is not None else np.asarray(self.model.home_pose, float)

    def _compiled_args(self):
        """Constant arguments of :func:`controller._law_kernels.serial_pd_gravity` (kind
        "serial", an exact ``SerialModel``) or :func:`~controller._law_kernels.rrr_pd_gravity`
        (kind "rrr", an exact ``Planar3RRR``), or None (the numpy path)."""
        kind = exact_model_kind(self.model)
        if kind not in ("serial", "rrr"):
            return None
        return {"kind": kind, "P": self.model._P, **self._law_args(self.n)}

    def _compute_compiled(self, t_s, c, q, qd, pos, vel, acc, e, tau, mask) -> bool:
        """Run the kernel of the model's kind into ``e``, ``tau``, ``mask`` (all (n,)) and
        commit the pose hint; False when it reports a status."""
        args = (c["kp"], c["kd"], c["fric"], c["fmode"], c["has_sat"], c["sat_lim"])
        if c["kind"] == "serial":
            return _LK.serial_pd_gravity(c["P"], q, qd, pos, vel, *args, e, tau, mask) == 0
        X = np.empty(3)
        if _LK.rrr_pd_gravity(c["P"], q, qd, np.asarray(self.pose, dtype=float), pos, vel, *args,
                              X, e, tau, mask) != 0:
            return False
        self.pose = X
        return True

    def compiled_state(self) -> np.ndarray:
        """The pose hint (3,) for a parallel model, else nothing (0,)."""
        return np.array(self.pose, dtype=float) if self._parallel else np.zeros(0)

    def set_compiled_state(self, s: np.ndarray) -> None:
        if self._parallel:
            self.pose = np.array(s)

    def compute(self, t_s, ref, state):
        tau = self._try_compiled(t_s, ref, state)
        if tau is not None:
            return tau
        q, qd = state.q, state.qd
        e = np.asarray(ref.pos, dtype=float) - q
        ed = np.asarray(ref.vel, dtype=float) - qd
        if self._parallel:
            self.pose = _pose_hint(self.model, q, self.pose)
            g = self.model.bias(q, np.zeros_like(q), pose=self.pose)
        else:
            g = self.model.gravity(q)
        if self.friction != "none":
            g = g + self.model.friction_torque(qd if self.friction == "measured" else np.asarray(ref.vel, float))
        self.last_error = e
        return self._saturate(self.kp @ e + self.kd @ ed + g)


class _GravityFeedforward:
    """``f(ref, state) -> model.gravity(state.q)``, shape (n,) [N m | N]."""

    def __init__(self, model: Model):
        self.model = model

    def __call__(self, ref, state):
        return self.model.gravity(state.q)


def gravity_feedforward(model: Model) -> Callable:
    """A PID feed-forward ``f(ref, state) -> g^(q)`` (gravity at the measured q)."""
    return _GravityFeedforward(model)


class PID(_CompiledLaw, Controller):
    """Independent-joint PID with feed-forward and anti-windup.

    Law (per joint, diagonal gains)::

        e   = q_d - q,  e_d = qd_d - qd          (derivative on measured velocity)
        I  += dt * (Ki e [+ (tau_sat - tau) / Tt])
        tau = sat( ff + Kp e + I + Kd e_d )

    Parameters
    ----------
    kp, ki, kd : float or (n,)
        Gains [N m/rad], [N m/(rad s)], [N m s/rad].
    n : int, optional
        Number of joints (needed when every gain is scalar and no saturation is given).
    feedforward : callable ``f(ref, state) -> (n,)``, optional
        E.g. :func:`gravity_feedforward`.
    saturation : Saturation, optional
    anti_windup : {"clamp", "back_calculation"}
        ``clamp``: joint i does not integrate while its output is saturated
        and ``e_i`` has the sign of the saturated output.  ``back_calculation``:
        the integral term is pulled back with tracking time ``tracking_time_s``
        (default per joint ``sqrt(Ti Td)`` with ``Ti = kp/ki``, ``Td = kd/kp``, or
        ``Ti`` when ``kd = 0``).
    integral_limit_nm : float or (n,), optional
        Bound on |I| [N m].

    Notes
    -----
    Without a feed-forward, or with :func:`gravity_feedforward` of an exact
    :class:`~dynamics.serial.SerialModel`, the law runs compiled
    (:func:`controller._law_kernels.pid`); any other feed-forward is Python code and takes
    the numpy path.
    """

    def __init__(self, kp, ki, kd, n: int | None = None, feedforward: Callable | None = None,
                 saturation: Saturation | None = None, anti_windup: str = "clamp",
                 tracking_time_s=None, integral_limit_nm=None):
        if n is None:
            sizes = [np.size(k) for k in (kp, ki, kd) if np.ndim(k) > 0]
            if not sizes and saturation is not None:
                sizes = [saturation.limit_nm.size]
            if not sizes:
                raise ModelError("PID: give n when all gains are scalars")
            n = sizes[0]
        super().__init__(n, n, saturation)
        self.kp = _vec(kp, n, "kp")
        self.ki = _vec(ki, n, "ki")
        self.kd = _vec(kd, n, "kd")
        if anti_windup not in ("clamp", "back_calculation"):
            raise ModelError(f"PID: anti_windup must be 'clamp' or 'back_calculation', got {anti_windup!r}")
        self.anti_windup = anti_windup
        if tracking_time_s is None:
            with np.errstate(divide="ignore", invalid="ignore"):
                ti = np.where(self.ki > 0, self.kp / self.ki, np.inf)
                td = np.where(self.kp > 0, self.kd / self.kp, 0.0)
                tt = np.where(td > 0, np.sqrt(ti * td), ti)
            tracking_time_s = np.where(np.isfinite(tt) & (tt > 0), tt, 1.0)
        self.tracking_time_s = _vec(tracking_time_s, n, "tracking_time_s")
        self.integral_limit_nm = None if integral_limit_nm is None else _vec(integral_limit_nm, n, "integral_limit_nm")
        self.feedforward = feedforward
        self.integral_nm = np.zeros(n)
        self._t_last: float | None = None
        self._aw = np.zeros(n)  # back-calculation term from the previous step

    def reset(self):
        super().reset()
        self.integral_nm = np.zeros(self.n)
        self._t_last = None
        self._aw = np.zeros(self.n)

    def _compiled_inputs(self) -> tuple:
        return (self.feedforward, getattr(self.feedforward, "model", None), self.kp, self.ki, self.kd,
                self.saturation, self.anti_windup, self.tracking_time_s, self.integral_limit_nm)

    def _compiled_args(self):
        """Constant arguments of :func:`controller._law_kernels.pid`, or None (the numpy path)."""
        ff = self.feedforward
        has_grav = ff is not None
        if has_grav and not (type(ff) is _GravityFeedforward and exact_model_kind(ff.model) == "serial"):
            return None
        n = self.n
        lim = self.integral_limit_nm
        vec = np.ascontiguousarray
        return {"kind": "serial", "checks_shapes": False, "P": ff.model._P if has_grav else np.zeros(1),
                "has_grav": has_grav,
                "kp": vec(self.kp), "ki": vec(self.ki), "kd": vec(self.kd),
                "back_calc": self.anti_windup == "back_calculation", "tt": vec(self.tracking_time_s),
                "i_limit": np.full(n, np.inf) if lim is None else vec(lim),
                "has_sat": self.saturation is not None,
                "sat_lim": np.full(n, np.inf) if self.saturation is None else vec(self.saturation.limit_nm)}

    def _compute_compiled(self, t_s, c, q, qd, pos, vel, acc, e, tau, mask) -> bool:
        """Run :func:`~controller._law_kernels.pid` into ``e``, ``tau``, ``mask`` (all (n,))
        and commit the integral; False when it declines the step."""
        n = self.n
        dt = 0.0 if self._t_last is None else max(t_s - self._t_last, 0.0)
        integral = np.empty(n)
        aw = np.empty(n)
        if _LK.pid(c["P"], c["has_grav"], q, qd, pos, vel, float(dt), c["kp"], c["ki"], c["kd"], c["back_calc"],
                   c["tt"], c["i_limit"], c["has_sat"], c["sat_lim"], self.integral_nm, self._aw,
                   e, tau, mask, integral, aw) != 0:
            return False
        self.integral_nm = integral
        self._aw = aw
        self._t_last = t_s
        return True

    def compiled_state(self) -> np.ndarray:
        """``[integral (n,) [N m], back-calculation term (n,), time of the last step [s] (NaN:
        none)]``."""
        return np.concatenate([self.integral_nm, self._aw, [_time_or_nan(self._t_last)]])

    def set_compiled_state(self, s: np.ndarray) -> None:
        n = self.n
        self.integral_nm = np.array(s[:n])
        self._aw = np.array(s[n:2 * n])
        self._t_last = _nan_or_time(s[2 * n])

    def compute(self, t_s, ref, state):
        tau = self._try_compiled(t_s, ref, state)
        if tau is not None:
            return tau
        q, qd = state.q, state.qd
        e = np.asarray(ref.pos, dtype=float) - q
        ed = np.asarray(ref.vel, dtype=float) - qd
        dt = 0.0 if self._t_last is None else max(t_s - self._t_last, 0.0)
        ff = np.zeros(self.n) if self.feedforward is None else np.asarray(self.feedforward(ref, state), float)
        base = ff + self.kp * e + self.kd * ed
        if self.anti_windup == "clamp":
            I_new = self.integral_nm + dt * self.ki * e
            if self.integral_limit_nm is not None:
                I_new = np.clip(I_new, -self.integral_limit_nm, self.integral_limit_nm)
            u = base + I_new
            if self.saturation is not None:
                lim = self.saturation.limit_nm
                hold = (np.abs(u) > lim) & (np.sign(e) == np.sign(u))
                I_new = np.where(hold, self.integral_nm, I_new)
            self.integral_nm = I_new
            tau = self._saturate(base + self.integral_nm)
        else:
            I_new = self.integral_nm + dt * (self.ki * e + self._aw)
            if self.integral_limit_nm is not None:
                I_new = np.clip(I_new, -self.integral_limit_nm, self.integral_limit_nm)
            self.integral_nm = I_new
            u = base + I_new
            tau = self._saturate(u)
            self._aw = (tau - u) / self.tracking_time_s
        self._t_last = t_s
        self.last_error = e
        return tau


# ---------------------------------------------------------------------------
# task space (parallel robots)
# ---------------------------------------------------------------------------

def _rx(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0, 0], [0, c, -s], [0, s, c]])


def _ry(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1.0, 0], [-s, 0, c]])


def _rz(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


_AXES = {"x": _rx, "y": _ry, "z": _rz}


def euler_rotation(convention: str) -> Callable[[np.ndarray], np.ndarray]:
    """Rotation matrix function ``R(angles)`` for a product convention.

    ``convention`` is three letters: ``"xyz"`` gives ``R = Rx(a0) Ry(a1) Rz(a2)``,
    ``"zyx"`` gives ``R = Rz(a0) Ry(a1) Rx(a2)``, etc. (matrix product in the
    order written, angles in that order).
    """
    conv = convention.lower()
    if len(conv) != 3 or any(c not in _AXES for c in conv):
        raise ModelError(f"euler convention must be three of x/y/z, got {convention!r}")
    f0, f1, f2 = (_AXES[c] for c in conv)

    def rot(angles):
        a = np.asarray(angles, dtype=float)
        return f0(a[0]) @ f1(a[1]) @ f2(a[2])

    rot.convention = conv
    return rot


def rotation_error(R_d: np.ndarray, R: np.ndarray) -> np.ndarray:
    """Rotation vector ``theta * axis`` (base frame) of ``R_d R^T``, shape (3,) [rad].

    Exact for any error up to pi (the geodesic on SO(3)), unlike the difference
    of Euler angles; computed by :func:`controller._law_kernels.rotation_vector`.
    """
    w = np.empty(3)
    _LK.rotation_vector(_mat3(R_d), _mat3(R), w)
    return w


def _mat3(A) -> np.ndarray:
    """A (3, 3) float matrix as the compiled kernels take it (C-contiguous float64)."""
    A = np.ascontiguousarray(A, dtype=float)
    if A.shape != (3, 3):
        raise ModelError(f"expected a (3, 3) matrix, got shape {A.shape}")
    return A


def _euler_rate_matrix(rot, angles, eps=1e-7):
    """E(angles) with omega = E angles_dot (base frame), by central differences of R."""
    R = rot(angles)
    E = np.empty((3, 3))
    for k in range(3):
        da = np.zeros(3)
        da[k] = eps
        dR = (rot(angles + da) - rot(angles - da)) / (2 * eps)
        W = dR @ R.T
        E[:, k] = (W[2, 1], W[0, 2], W[1, 0])
    return E


def task_error(X_d, X, rotation: Callable | None = None, rate_matrix: Callable | None = None,
               layout: str | None = None) -> np.ndarray:
    """Pose error ``X_d (-) X`` in task coordinates, by the task's layout
    (:data:`controller.metrics.TASK_LAYOUTS`: which coordinates are positions, which angles).

    * position coordinates: the plain difference [m];
    * one angle (planar ``phi``): the difference wrapped to ``(-pi, pi]``;
    * three angles (``"spatial"``: ``(x, y, z, a0, a1, a2)``; ``"orientation"``: ``(a0, a1,
      a2)``) with ``rotation`` the angle -> matrix function: the rotation vector of
      ``R_d R^T`` mapped to angle coordinates with ``E(X)^-1`` (``omega = E angles_dot``),
      which equals the Euler-angle difference to first order and stays correct (geodesic
      direction) for large errors.  ``rate_matrix`` (angles -> E, closed form) is used when
      given, else E is obtained from ``rotation`` by central differences.  Without
      ``rotation``: each angle's difference wrapped.
    * ``layout`` None: by the size, 3 ``"planar"`` and 6 ``"spatial"`` (the 3RRR's and the
      Stewart platform's); any other size (or a layout not in the table): the plain difference.
    """
    X_d = np.asarray(X_d, dtype=float)
    X = np.asarray(X, dtype=float)
    e = X_d - X
    if layout is None:
        layout = {(3,): "planar", (6,): "spatial"}.get(X.shape)
    ang = TASK_LAYOUTS.get(layout, ((), ()))[1]
    if len(ang) == 1:
        e[ang[0]] = _LK.wrap_angle(e[ang[0]])
    elif len(ang) == 3 and rotation is None:
        if layout != "spatial":          # a 6-DOF error without its convention stays plain
            for i in ang:
                e[i] = _LK.wrap_angle(e[i])
    elif len(ang) == 3:
        # the compiled orientation error (the Stewart laws' kernels compute the same)
        sl = slice(ang[0], ang[-1] + 1)
        E = rate_matrix(X[sl]) if rate_matrix is not None else _euler_rate_matrix(rotation, X[sl])
        eo = np.empty(3)
        if _LK.orientation_error(_mat3(rotation(X_d[sl])), _mat3(rotation(X[sl])), _mat3(E), eo) != 0:
            raise SingularityError("orientation error: Euler-angle rate map is singular")
        e[sl] = eo
    return e


def _default_rotation(model) -> Callable | None:
    """The model's angle -> rotation function for 6-DOF poses (and a three-angle
    ``"orientation"`` task), if it declares one.

    Looked up as a method ``rotation_matrix``/``pose_rotation``/``orientation_matrix``,
    an ``euler_convention`` string attribute, or a ``rotation_matrix`` function in
    the model's module (e.g. :func:`dynamics.stewart.rotation_matrix`).
    """
    if getattr(model, "task_dof", 0) != 6 and getattr(model, "task_layout", None) != "orientation":
        return None
    for name in ("rotation_matrix", "pose_rotation", "orientation_matrix"):
        f = getattr(model, name, None)
        if callable(f):
            return f
    conv = getattr(model, "euler_convention", None)
    if isinstance(conv, str):
        return euler_rotation(conv)
    f = model.task_rotation() if isinstance(model, ParallelModel) else None
    return f if callable(f) else None


def _matching_rate_matrix(model, rotation) -> Callable | None:
    """The model's closed-form Euler-rate matrix (:meth:`~dynamics.base.ParallelModel.task_rate_matrix`),
    if ``rotation`` is the model's own :meth:`~dynamics.base.ParallelModel.task_rotation` (same
    convention); None otherwise (numerical E is used)."""
    if rotation is None or not isinstance(model, ParallelModel):
        return None
    if model.task_rotation() is rotation:
        f = model.task_rate_matrix()
        return f if callable(f) else None
    return None


class _TaskBase(Controller):
    space = "task"

    def __init__(self, model: ParallelModel, kp, kd, saturation=None, pose0=None, rotation=None,
                 friction: str = "none"):
        if not isinstance(model, ParallelModel):
            raise ModelError("task-space control needs a ParallelModel")
        m, n = model.task_dof, model.dof
        super().__init__(n, m, saturation)
        self.model = model
        self.friction = _check_friction(friction, ("none", "measured"))
        self.kp = _gain(kp, m, "kp")
        self.kd = _gain(kd, m, "kd")
        if isinstance(rotation, str):
            rotation = euler_rotation(rotation)
        self.rotation = rotation if rotation is not None else _default_rotation(model)
        self.rate_matrix = _matching_rate_matrix(model, self.rotation)
        #: the task's layout (positions and angles, :data:`controller.metrics.TASK_LAYOUTS`)
        self.layout = model.task_layout
        if m == 6 and self.rotation is None:
            raise ModelError("6-DOF task-space control needs the orientation convention: pass "
                             "rotation='xyz'/'zyx'/... or a function angles -> R")
        self._pose0 = None if pose0 is None else np.asarray(pose0, dtype=float)
        self.pose = None
        self.reset()

    def reset(self):
        super().reset()
        self.pose = self._pose0 if self._pose0 is not None else np.asarray(self.model.home_pose, float)

    def _measure(self, q, qd):
        """Measured pose (FK warm-started at the last pose), J_x and pose rate."""
        X = _pose_hint(self.model, q, self.pose)
        self.pose = X
        Jx = np.asarray(self.model.task_jacobian(q, X), dtype=float)
        return X, Jx, Jx @ qd

    def tracking_error(self, ref, state):
        X = _pose_hint(self.model, state.q, self.pose)
        return task_error(ref.pos, X, self.rotation, self.rate_matrix, self.layout)

    def _planar3rrr(self) -> bool:
        """Whether the compiled 3RRR forms apply: an exact ``Planar3RRR`` with the planar task error."""
        from dynamics.planar3rrr import Planar3RRR

        return type(self.model) is Planar3RRR and self.rotation is None

    def _stewart_kernels(self):
        """The module of the compiled Gough-Stewart laws (:mod:`controller._stewart_law_kernels`)
        when they apply: an exact ``StewartPlatform`` with its own angle convention and closed-form
        Euler-rate matrix (``dynamics.stewart.rotation_matrix`` / ``euler_rate_matrix``); else None.

        Imported here, not at the top: the Stewart kernels take ~0.3 s to load and no other
        robot's run needs them."""
        m = self.model
        if (exact_model_kind(m) != "stewart" or self.rotation is not m.task_rotation()
                or self.rate_matrix is not m.task_rate_matrix()):
            return None
        from . import _stewart_law_kernels

        return _stewart_law_kernels

    #: the attributes besides the model, gains and limits that decide the compiled form
    #: (compared by identity, see :attr:`_CompiledLaw.compiled_args`)
    _TASK_INPUTS = ("rotation", "rate_matrix")


class TaskComputedTorque(_CompiledIntegralLaw, _TaskBase):
    """Task-space computed torque for a parallel robot.

    Law::

        X    = FK(q)  (Newton, warm-started at the previous pose)
        Xd   = J_x(q, X) qd
        e    = X_d (-) X            (see :func:`task_error`: wrapped angle / SO(3) error)
        a    = Xdd_d + Kd (Xd_d - Xd) + Kp e
        tau  = sat( task_inverse_dynamics(X, Xd, a) )

    i.e. the model's inverse dynamics at the *measured* pose and pose rate
    with the commanded task acceleration; with a matched model the task error
    obeys ``e_dd + Kd e_d + Kp e = 0`` (to first order in the orientation error).

    Parameters
    ----------
    model : ParallelModel
    kp, kd : float, (m,) or (m, m)
        Task-space gains [1/s^2], [1/s].
    saturation : Saturation, optional
    pose0 : array_like (m,), optional
        First FK guess (default: the model's home pose).
    rotation : str or callable, optional
        6-DOF only: angle convention (see :func:`euler_rotation`) or function
        angles -> R; default from the model (see ``_default_rotation``).
    friction : {"none", "measured"}
        Add ``model.friction_torque(qd)`` at the measured joint velocity.
    ki : float, (m,) or (m, m), optional
        Task-space integral gain [1/s^3]: ``a += Ki int(e) dt``.  Removes the
        steady error a mass or gravity mismatch leaves (``e = dg / Kp`` without).
    integral_limit : float or (m,), optional
        Bound on each integrator state |int e dt| [m s] / [rad s].

    Notes
    -----
    Anti-windup is conditional integration, as in :class:`ComputedTorque`: on a
    cycle where any actuator saturates the integrator keeps its previous value.

    The law runs compiled for an exact :class:`~dynamics.planar3rrr.Planar3RRR` with the
    planar task error and for an exact :class:`~dynamics.stewart.StewartPlatform` with its
    own angle convention (see :meth:`_compiled_args`); other models, and any step the
    compiled law declines, take the numpy path.
    """

    def __init__(self, model: ParallelModel, kp, kd, ki=None, integral_limit=None, saturation=None,
                 pose0=None, rotation=None, friction: str = "none"):
        if not isinstance(model, ParallelModel):
            raise ModelError("task-space control needs a ParallelModel")
        m = model.task_dof
        self.ki = None if ki is None else _gain(ki, m, "ki")
        self._int = _Integrator(m, integral_limit)
        super().__init__(model, kp, kd, saturation=saturation, pose0=pose0, rotation=rotation,
                         friction=friction)

    _COMPILED_INPUTS = _CompiledIntegralLaw._COMPILED_INPUTS + _TaskBase._TASK_INPUTS

    def _compiled_args(self):
        """Constant arguments of the compiled law, or None.

        :func:`controller._law_kernels.rrr_task_computed_torque` (``kind`` "rrr") serves an
        exact :class:`~dynamics.planar3rrr.Planar3RRR` model with the planar task error,
        :func:`controller._stewart_law_kernels.stewart_task_computed_torque` (``kind``
        "stewart") an exact :class:`~dynamics.stewart.StewartPlatform` with its own angle
        convention; any other model takes the Python path below.
        """
        if self._planar3rrr():
            c = {"kind": "rrr", "P": self.model._P, "branch": self.model._branch_k, **self._common_args(3)}
            # the constant arguments of the compiled call in one tuple (the same objects)
            c["consts"] = tuple(c[key] for key in _RRR_TCT_CONSTS)
            c["checks_shapes"] = True
            return c
        sk = self._stewart_kernels()
        if sk is None:
            return None
        return {"kind": "stewart", "P": self.model._params, "law": sk.stewart_task_computed_torque,
                **self._common_args(6)}

    def reset(self):
        super().reset()
        self._int.reset()

    def _compute_compiled(self, t_s, c, q, qd, pos, vel, acc, e, tau, mask) -> bool:
        """Run the compiled law (:meth:`_compiled_args`) into ``e``, ``tau``, ``mask`` (all (dim,))
        and commit the pose and the integrator; False when it reports a model status (the
        checked Python path then raises)."""
        itg = self._int
        dt = 0.0 if itg.t_last is None else max(t_s - itg.t_last, 0.0)
        X = np.empty(self.dim)
        z = np.empty(self.dim)
        pose = np.asarray(self.pose, dtype=float)
        if c["kind"] == "rrr":
            st = _rrr_task_computed_torque_call(c["consts"], q, qd, pose, pos, vel, acc, itg.z, float(dt),
                                                X, e, tau, mask, z)
        else:
            st = c["law"](c["P"], q, qd, pose, pos, vel, acc, c["kp"], c["kd"], c["ki"], c["has_ki"], itg.z,
                          float(dt), c["z_limit"], c["fric"], c["fmode"], c["has_sat"], c["sat_lim"], X, e, tau,
                          mask, z)
        if st != 0:
            return False
        self.pose = X
        if c["has_ki"]:
            itg.commit(t_s, z)
        return True

    def compiled_state(self) -> np.ndarray:
        """``[pose (dim,), z (dim,), t_last]`` (see :meth:`_Integrator.state`)."""
        return np.concatenate([np.asarray(self.pose, dtype=float), self._int.state()])

    def set_compiled_state(self, s: np.ndarray) -> None:
        self.pose = np.array(s[:self.dim])
        self._int.set_state(s[self.dim:])

    def _torque(self, X, Xd, a, qd):
        tau = np.asarray(self.model.task_inverse_dynamics(X, Xd, a), dtype=float)
        if self.friction == "measured":
            tau = tau + self.model.friction_torque(qd)
        return tau

    def compute(self, t_s, ref, state):
        tau = self._try_compiled(t_s, ref, state)
        if tau is not None:
            return tau
        X, Jx, Xd = self._measure(state.q, state.qd)
        e = task_error(ref.pos, X, self.rotation, self.rate_matrix, self.layout)
        ed = np.asarray(ref.vel, dtype=float) - Xd
        a = np.asarray(ref.acc, dtype=float) + self.kd @ ed + self.kp @ e
        self.last_error = e
        if self.ki is None:
            return self._saturate(self._torque(X, Xd, a, state.qd))
        z = self._int.candidate(t_s, e)
        tau = self._saturate(self._torque(X, Xd, a + self.ki @ z, state.qd))
        if np.any(self.last_saturated):
            z = None  # conditional integration: freeze while saturated
            tau = self._saturate(self._torque(X, Xd, a + self.ki @ self._int.z, state.qd))
        self._int.commit(t_s, z)
        return tau

    @property
    def integral(self) -> np.ndarray:
        """Integrator state int(e) dt, shape (m,) [m s] / [rad s]."""
        return self._int.z.copy()


class TaskPDGravity(_CompiledLaw, _TaskBase):
    """Task-space PD with gravity compensation for a parallel robot.

    Law: ``tau = J_x^T (Kp e + Kd (Xd_d - Xd)) + g^(q)`` with ``X``, ``Xd``, ``e``
    as in :class:`TaskComputedTorque`; ``J_x^T`` maps a task wrench to actuator
    torques (power: ``F . Xd = (J_x^T F) . qd``) and ``g^`` is the model's gravity
    at the measured configuration (pose hint ``X``).

    For an exact :class:`~dynamics.planar3rrr.Planar3RRR` with the planar task error the
    law runs compiled (:func:`controller._law_kernels.rrr_task_pd_gravity`), for an exact
    :class:`~dynamics.stewart.StewartPlatform` with its own angle convention too
    (:func:`controller._stewart_law_kernels.stewart_task_pd_gravity`); other models, and
    any step the compiled law declines, take the numpy path.
    """

    _COMPILED_INPUTS = _CompiledLaw._COMPILED_INPUTS + _TaskBase._TASK_INPUTS

    def _compiled_args(self):
        """Constant arguments of :func:`controller._law_kernels.rrr_task_pd_gravity` (``kind``
        "rrr") or :func:`controller._stewart_law_kernels.stewart_task_pd_gravity` (``kind``
        "stewart"), or None."""
        if self._planar3rrr():
            return {"kind": "rrr", "P": self.model._P, "law": _LK.rrr_task_pd_gravity, **self._law_args(3)}
        sk = self._stewart_kernels()
        if sk is None:
            return None
        return {"kind": "stewart", "P": self.model._params, "law": sk.stewart_task_pd_gravity, **self._law_args(6)}

    def _compute_compiled(self, t_s, c, q, qd, pos, vel, acc, e, tau, mask) -> bool:
        """Run the compiled law (:meth:`_compiled_args`) into ``e``, ``tau``, ``mask`` (all
        (dim,)) and commit the pose; False when it reports a status (the checked numpy path
        then raises)."""
        X = np.empty(self.dim)
        if c["law"](c["P"], q, qd, np.asarray(self.pose, dtype=float), pos, vel, c["kp"], c["kd"], c["fric"],
                    c["fmode"], c["has_sat"], c["sat_lim"], X, e, tau, mask) != 0:
            return False
        self.pose = X
        return True

    def compiled_state(self) -> np.ndarray:
        """The pose (dim,)."""
        return np.array(self.pose, dtype=float)

    def set_compiled_state(self, s: np.ndarray) -> None:
        self.pose = np.array(s)

    def compute(self, t_s, ref, state):
        tau = self._try_compiled(t_s, ref, state)
        if tau is not None:
            return tau
        X, Jx, Xd = self._measure(state.q, state.qd)
        e = task_error(ref.pos, X, self.rotation, self.rate_matrix, self.layout)
        ed = np.asarray(ref.vel, dtype=float) - Xd
        g = self.model.bias(state.q, np.zeros_like(state.q), pose=X)
        tau = Jx.T @ (self.kp @ e + self.kd @ ed) + np.asarray(g, dtype=float)
        if self.friction == "measured":
            tau = tau + self.model.friction_torque(state.qd)
        self.last_error = e
        return self._saturate(tau)
