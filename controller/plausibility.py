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

from dataclasses import replace

import numpy as np

from dynamics.base import ParallelModel

__all__ = ["FeedbackPlausibility", "plausible_acceleration", "ACCEL_FACTOR", "POSITION_TOL", "VELOCITY_TOL"]

#: margin of the default plausible acceleration over the model's bound at the start pose (the
#: inertia changes with the pose, the real robot differs from its model)
ACCEL_FACTOR = 2.0
#: readings' tolerance beyond the limits' bounds: quantisation (an MIT position step is 0.38 mrad,
#: a velocity step 24 mrad/s) and noise [rad|m, rad/s|m/s]
POSITION_TOL = 1e-3
VELOCITY_TOL = 0.05


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
        self.v = np.asarray(v_plausible, dtype=float)
        self.a = np.asarray(a_plausible, dtype=float)
        self.run_max = int(run_max)
        n = self.v.size
        self.rejected = np.zeros(n, dtype=np.int64)       # per joint, over the run
        self._run = np.zeros(n, dtype=np.int64)           # per joint, in a row
        self._q = np.full(n, np.nan)
        self._qd = np.full(n, np.nan)
        self._t = np.full(n, np.nan)

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
        self._q = np.where(ok, q, self._q)
        self._qd = np.where(ok, qd, self._qd)
        self._t = np.where(ok, t_s, self._t)
        self._run[:] = 0

    def check(self, t_s: float, fb):
        """``fb`` with every implausible joint marked not fresh and given its last accepted values.

        Returns ``(feedback, bad, faulted)``: the feedback to use (``fb`` itself when every
        sample is plausible), the joints rejected now (int array) and those rejected
        ``run_max`` times in a row (int array, for the fault).
        """
        fresh = np.asarray(fb.fresh, dtype=bool)
        q = np.asarray(fb.position_rad, dtype=float)
        qd = np.asarray(fb.velocity_rad_s, dtype=float)
        # NaN where nothing was accepted yet; 0 on the lock-step clock between the start-up
        # feedback and the first cycle's (no time passed: the readings must agree within tolerance)
        dt = np.maximum(t_s - self._t, 0.0)
        with np.errstate(invalid="ignore"):
            dq = q - self._q
            bad = np.abs(dq) > self.v * dt + POSITION_TOL
            has_v = np.isfinite(qd) & np.isfinite(self._qd)
            a_dt = self.a * dt
            bad |= has_v & (np.abs(qd - self._qd) > a_dt + VELOCITY_TOL)
            bad |= has_v & (np.abs(dq - 0.5 * dt * (qd + self._qd)) > 0.5 * a_dt * dt + POSITION_TOL)
        bad &= fresh & np.isfinite(dt)
        good = fresh & ~bad & np.isfinite(q)
        self._q = np.where(good, q, self._q)
        self._qd = np.where(good, qd, self._qd)
        self._t = np.where(good, t_s, self._t)
        self._run = np.where(bad, self._run + 1, np.where(good, 0, self._run))
        idx = np.flatnonzero(bad)
        if idx.size == 0:
            return fb, idx, idx
        self.rejected[idx] += 1
        keep_qd = np.where(np.isfinite(self._qd), self._qd, qd)
        out = replace(fb, position_rad=np.where(bad, self._q, q), velocity_rad_s=np.where(bad, keep_qd, qd),
                      fresh=fresh & ~bad, info={**(fb.info or {}), "implausible": idx.tolist()})
        return out, idx, np.flatnonzero(self._run >= self.run_max)
