"""Feedback plausibility: a sample the robot's limits make impossible is not used.

A frame check (CAN's CRC, a packet checksum) cannot see a value that was wrong before it was
framed: a drive's or gateway's bit flip in a velocity field arrives as a valid, fresh reply,
and the controller's damping term turns it into a torque spike (on the 3RRR demo one flip
of the MIT velocity field's bit 7 commanded the 15 N m limit).  Before the loop uses a
sample, :class:`FeedbackPlausibility` compares each fresh joint's reading with the last one it
accepted (``dt`` seconds earlier) and rejects it when

* the position jumped further than the plausible velocity allows:
  ``|q - q_ok| > v_plausible dt + position_tol``;
* the velocity jumped further than the plausible acceleration allows:
  ``|qd - qd_ok| > a_plausible dt + velocity_tol``;
* position and velocity disagree: the position moved by more than the mean of the two
  velocities explains, ``|q - q_ok - dt (qd + qd_ok) / 2| > a_plausible dt^2 / 2 +
  position_tol``.

``v_plausible`` is twice the velocity limit (the supervisor's own "plausible" bound, as for
the brake); ``a_plausible`` is ``[safety] feedback_accel_max`` or, by default,
:data:`ACCEL_FACTOR` times the largest acceleration the actuators' torque limits can give the
model at the start pose (``sum_k |M^-1|_jk tau_max_k + |qdd_0|``, by forward dynamics).
A rejected joint is marked not fresh and keeps its last accepted values (as a missing reply
does), so the stale-feedback rules count it; ``stale_cycles`` rejections in a row of one
joint are a fault, ``"implausible_feedback"``, naming the joint and the values.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from dynamics.base import ParallelModel

from . import _safety_rules as _rules
from ._safety_rules import POSITION_TOL, VELOCITY_TOL

__all__ = ["FeedbackPlausibility", "plausible_acceleration", "ACCEL_FACTOR", "POSITION_TOL", "VELOCITY_TOL"]

#: margin of the default plausible acceleration over the model's bound at the start pose (the
#: inertia changes with the pose, the real robot differs from its model)
ACCEL_FACTOR = 2.0

#: the argument types of :func:`controller._safety_rules.implausible` for which it is compiled
_CHECK_SIGNATURE = ("int64(float64, float64[::1], float64[::1], boolean[::1], float64[:, ::1], float64[:, ::1], "
                    "int64[::1], boolean[::1])")
#: no joint (the rejected joints of a clean sample)
_NONE = np.zeros(0, dtype=np.intp)
_NONE.flags.writeable = False


@functools.cache
def _checker():
    """:func:`controller._safety_rules.implausible`, compiled for :data:`_CHECK_SIGNATURE` alone
    (loaded from numba's cache at the first call in a process: :meth:`FeedbackPlausibility.load`)."""
    _rules.implausible.compile(_CHECK_SIGNATURE)
    _rules.implausible.disable_compile()
    return _rules.implausible


def plausible_acceleration(model, q, tau_max) -> np.ndarray:
    """The largest joint acceleration the actuators can give ``model`` at rest at ``q`` [rad/s^2|m/s^2].

    ``sum_k |M^-1|_jk tau_max_k + |qdd_0|_j`` per joint, with the columns of ``M^-1 tau_max``
    and the free acceleration ``qdd_0`` (gravity) from the model's forward dynamics; shape (n,).
    Raises what the model raises (a parallel robot's forward kinematics may fail).
    """
    q = np.asarray(q, dtype=float)
    n = q.size
    kw = {}
    if isinstance(model, ParallelModel):
        kw["pose"] = np.asarray(model.forward_kinematics_task(q, guess=model.home_pose), dtype=float)
    zero = np.zeros(n)
    a0 = np.asarray(model.forward_dynamics(q, zero, zero, **kw), dtype=float)
    out = np.abs(a0)
    for k in range(n):
        e = np.zeros(n)
        e[k] = tau_max[k]
        out = out + np.abs(np.asarray(model.forward_dynamics(q, zero, e, **kw), dtype=float) - a0)
    return out


class FeedbackPlausibility:
    """The plausibility check of the loop's feedback (see module docstring).

    Parameters
    ----------
    v_plausible : ndarray, shape (n,)
        Largest plausible |velocity| [rad/s|m/s] (inf: no position-jump check).
    a_plausible : ndarray, shape (n,)
        Largest plausible |acceleration| [rad/s^2|m/s^2] (inf: no velocity checks).
    run_max : int
        Rejections in a row of one joint that make a fault.
    """

    def __init__(self, v_plausible, a_plausible, run_max: int):
        v = np.asarray(v_plausible, dtype=float)
        n = v.size
        # the bounds as the rows of one array (one argument of the compiled check); v and a
        # are views of its rows
        self._va = np.stack([np.broadcast_to(v, (n,)), np.broadcast_to(np.asarray(a_plausible, dtype=float), (n,))])
        self.run_max = int(run_max)
        self.rejected = np.zeros(n, dtype=np.int64)       # per joint, over the run
        self._run = np.zeros(n, dtype=np.int64)           # per joint, in a row
        # the last accepted reading of each joint: position, velocity, time (rows; NaN: none)
        self._ok = np.full((3, n), np.nan)
        self._bad = np.zeros(n, dtype=np.bool_)           # the joints rejected by the last check

    v = property(lambda self: self._va[0], doc="Largest plausible |velocity| (n,) [rad/s|m/s].")
    a = property(lambda self: self._va[1], doc="Largest plausible |acceleration| (n,) [rad/s^2|m/s^2].")
    _q = property(lambda self: self._ok[0], doc="Last accepted position (n,) [rad|m] (NaN: none).")
    _qd = property(lambda self: self._ok[1], doc="Last accepted velocity (n,) [rad/s|m/s] (NaN: none).")
    _t = property(lambda self: self._ok[2], doc="Time of the last accepted reading (n,) [s] (NaN: none).")

    @staticmethod
    def load() -> None:
        """Load the compiled check (numba's cache) now, not in the first control cycle."""
        _checker()

    @classmethod
    def for_supervisor(cls, safety, q0, accel_max=None) -> tuple["FeedbackPlausibility", str | None]:
        """The check for a :class:`~controller.safety.SafetySupervisor`'s limits and model, at the
        start pose ``q0`` (n,); ``accel_max`` (scalar or (n,)) overrides the derived acceleration.
        Returns ``(check, note)``, ``note`` saying what could not be derived (else None)."""
        n = safety.n
        note = None
        if accel_max is not None:
            a = np.broadcast_to(np.asarray(accel_max, dtype=float), (n,)).copy()
        elif safety.model is None:
            a = np.full(n, np.inf)
            note = "no model: the feedback's velocity is not checked against the acceleration limits"
        else:
            try:
                a = ACCEL_FACTOR * plausible_acceleration(safety.model, q0, safety.tau_max)
            except Exception as err:  # noqa: BLE001 - the check runs without it, said in the note
                a = np.full(n, np.inf)
                note = (f"the plausible acceleration could not be derived at the start pose ({err}): the "
                        "feedback's velocity is not checked against it; set [safety] feedback_accel_max")
            else:
                if not np.all(np.isfinite(a) & (a > 0)):
                    note = (f"the plausible acceleration derived at the start pose is {a.tolist()}: joints "
                            "without a finite one are not checked; set [safety] feedback_accel_max")
                    a = np.where(np.isfinite(a) & (a > 0), a, np.inf)
        return cls(2.0 * np.asarray(safety.v_max, dtype=float), a, safety.config.stale_cycles), note

    def accept(self, t_s: float, fb) -> None:
        """Take ``fb`` (the feedback of time ``t_s`` [s]) as the reference without checking it (the
        start-up feedback, checked by the start-up check; a sample from the compiled loop)."""
        fresh = np.asarray(fb.fresh, dtype=bool)
        q = np.asarray(fb.position_rad, dtype=float)
        qd = np.asarray(fb.velocity_rad_s, dtype=float)
        ok = fresh & np.isfinite(q)
        last = self._ok
        last[0] = np.where(ok, q, last[0])
        last[1] = np.where(ok, qd, last[1])
        last[2] = np.where(ok, t_s, last[2])
        self._run[:] = 0

    def check(self, t_s: float, fb):
        """``fb`` with every implausible joint marked not fresh and given its last accepted values.

        Returns ``(feedback, bad, faulted)``: the feedback to use (``fb`` itself when every
        sample is plausible), the joints rejected now (int array) and those rejected
        ``run_max`` times in a row (int array, for the fault).
        """
        shape = self._bad.shape
        fresh = np.ascontiguousarray(fb.fresh, dtype=np.bool_)
        q = np.ascontiguousarray(fb.position_rad, dtype=float)
        qd = np.ascontiguousarray(fb.velocity_rad_s, dtype=float)
        if fresh.shape != shape or q.shape != shape or qd.shape != shape:
            # one value for every joint (or a shape that does not broadcast: ValueError)
            fresh, q, qd = (np.ascontiguousarray(np.broadcast_to(x, shape)) for x in (fresh, q, qd))
        bad = self._bad
        if not _checker()(float(t_s), q, qd, fresh, self._va, self._ok, self._run, bad):
            return fb, _NONE, _NONE
        idx = np.flatnonzero(bad)
        self.rejected[idx] += 1
        last_q, last_qd = self._ok[0], self._ok[1]
        keep_qd = np.where(np.isfinite(last_qd), last_qd, qd)
        out = replace(fb, position_rad=np.where(bad, last_q, q), velocity_rad_s=np.where(bad, keep_qd, qd),
                      fresh=fresh & ~bad, info={**(fb.info or {}), "implausible": idx.tolist()})
        return out, idx, np.flatnonzero(self._run >= self.run_max)
