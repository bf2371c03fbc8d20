"""Bring-up: walk a real (or emulated) robot joint by joint under a hard low torque cap, and the
calibration file that ``run`` applies.

``torqueloop bringup CONFIG`` (or :func:`bringup`) takes an ordinary run config (its robot,
driver and ``[bringup]`` table; the trajectory only gives the default reference pose).  Every
torque it sends is clipped to ``torque_cap_nm``; every joint gets the model's gravity torque at
its reading as feed-forward throughout (so a gravity-loaded joint is held while the others are
tested), and a reference pose whose gravity torque is over half a joint's cap is refused before
anything is enabled.  The checks:

1. **ids answer**: the driver's ``enable()`` (each driver checks its devices: MIT motor mode
   replies, ODrive ``Get_Version`` and heartbeats, CiA 402 SDO/NMT, Dynamixel ping), then
   fresh, fault-free feedback from every joint.
2. **zero** (encoder offset): the robot stands at its reference pose ``home_rad`` (a hard stop,
   marks or a jig; default: the trajectory's start); the reading there gives the offset
   correction (as read once a reversed sign is fixed).  With ``set_zero`` (MIT drives only,
   asked before anything is enabled) the drives' own zero is set there instead (SET_ZERO).
3. **direction and torque constant**: per joint, a torque doublet (``+u`` for ``T``, then ``-u``
   for ``T``, then a settle) and the reverse one, the other joints on gravity only; ``u`` and
   ``T`` are planned with the model to move the joint ``pulse_rad`` at no more than half
   ``velocity_max_rad_s`` and well above its Coulomb friction.  The readings of *every* joint
   are replayed through the robot model (:class:`drivers.sim.plant.SimulatedPlant` of the robot
   file: inertia, coupling, gravity, friction) with the commands that were sent, under each
   hypothesis of reversed joints (a reversed joint reads ``2 offset_rad - q`` and turns the other
   way): the best fit gives the directions.  A joint's motion alone cannot tell (a reversed
   motor and encoder are self-consistent); the coupling between joints and gravity can, except
   for reversing every joint of a robot without gravity torque, which mirrors it (the fewer
   reversals are taken then).  The torque factor (torque delivered per torque commanded: a
   wrong torque constant) is then fitted per joint, as the factor on its commands whose replay
   matches its readings best: the holding-against-gravity test for a gravity-loaded joint, the
   acceleration-against-inertia test for one without.
4. **friction breakaway**: the torque beyond gravity is ramped (both directions) until the joint
   moves ``motion_rad``; the last torque that left it still is compared with the robot file's
   Coulomb friction (reported, not a finding).

A bring-up stops at once (zero torque, drives disabled) when a joint moves faster than
``velocity_max_rad_s``, travels farther than ``travel_max_rad`` from the reference pose,
reports a fault, its feedback goes stale or the bus fails; the finding names the joint.  A
reading that no motion under the robot's limits can make (the run's feedback plausibility,
:mod:`controller.plausibility`: a drive or gateway corrupting values) is not used, as in the
run; ``stale_cycles`` of them in a row on a joint, or more than :data:`IMPLAUSIBLE_MAX` over
the bring-up, stop it as corrupt feedback.

It writes the calibration file (TOML): a SHA-256 digest of the hardware-relevant config (the
``[driver]`` table without the simulation's ``plant``/``emulator``/``faults`` tables, and the
robot file's bytes) with the tables it was taken from, a UTC timestamp, each joint's offset
correction, measured torque factor and breakaway torque, and the findings with the fix to
apply (the config key and its value).  ``run`` applies the offset corrections
(:class:`CalibratedDriver`); a hardware run refuses a missing calibration, a stale one (the
hardware config changed since: the message names the keys) and one with open findings
(exit 2, naming the file).  Simulated runs need none; a fresh one is applied when present.

The run config's table (every key optional)::

    [bringup]
    torque_cap_nm = 2.0              # scalar or per joint [N m | N]; default 5 % of the limit
                                     #   (safety.torque_max, else the robot file's); refused
                                     #   above 20 % of it
    home_rad = [0.0, 0.0]            # the reference pose (default: the trajectory's start)
    pulse_rad = 0.05                 # displacement of the doublet [rad | m]
    pulse_max_s = 1.0                # longest half-doublet [s]
    velocity_max_rad_s = 2.0         # stop above [rad/s | m/s]
    travel_max_rad = 0.5             # stop farther than this from home_rad [rad | m]
    zero_tolerance_rad = 0.01        # offset larger than this: a finding
    torque_factor_tolerance = 0.3    # |k| outside 1 +- this: a finding
    motion_rad = 0.002               # breakaway: motion onset [rad | m]
    ramp_s = 2.0                     # breakaway: time to ramp 0 -> torque_cap_nm [s]
    calibration_file = "arm.calibration.toml"   # default: <config stem>.calibration.toml
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from drivers.base import Command, Driver, Feedback
from dynamics.config import write_toml
from dynamics.errors import ConfigError, ForeignTrafficError, KinematicsError, SafetyError, TorqueloopError

from ..plausibility import FeedbackPlausibility
from .calibration import (CAP_FRACTION_DEFAULT, CAP_FRACTION_MAX, CALIBRATION_VERSION, BringupSpec,
                          HOLD_FRACTION_MAX, _ceil3, hardware_digest, hardware_tables, reference_pose_refusal)
from .run import _joint_start, make_safety, sim_driver_section

__all__ = ["BringupSpec", "BringupResult", "Finding", "bringup", "write_calibration", "CAP_FRACTION_DEFAULT",
           "CAP_FRACTION_MAX"]

#: cycles in a row a drive reads not enabled before the bring-up stops on it
DISABLED_CYCLES = 2
#: what to do when another node sends to the drives' ids (the driver's listen before its first
#: frame, or its check in every cycle): retrying cannot help while that node runs
FOREIGN_FIX = ("another controller (or a spoofer) sends to these drives: stop it, or find which node on the bus "
               "it is, so that this is the drives' only master, then run bringup again")


def _fault_text(driver: Driver, j: int, code: int) -> str:
    """The driver's name of joint ``j``'s fault ``code`` (:meth:`Driver.fault_text`); the number
    where it has none or fails (a finding must not be lost to its message)."""
    try:
        return str(driver.fault_text(j, code))
    except Exception:  # noqa: BLE001 - the number then
        return f"fault code {code}"


@dataclass
class Finding:
    """One thing a bring-up found wrong.

    ``fix`` is the config key and the value to set (or what to do); ``blocking`` findings make
    the calibration refused by a hardware run until fixed and brought up again."""

    joint: int
    joint_name: str
    check: str
    message: str
    fix: str
    blocking: bool = True


@dataclass
class BringupResult:
    """What :func:`bringup` measured.

    Attributes
    ----------
    joint_names : list of str, length n
    home_rad : ndarray, shape (n,)
        The reference pose [rad | m].
    measured_home_rad : ndarray, shape (n,)
        What the drives read there (after a set-zero, if one was sent).
    offset_correction_rad : ndarray, shape (n,)
        Added to every reading by ``run`` (:class:`controller.app.calibration.CalibratedDriver`).
    torque_factor : ndarray, shape (n,)
        Torque delivered per torque commanded (1: the torque constant is right; NaN: not measured).
    breakaway_nm : ndarray, shape (n,)
        Torque beyond gravity at the onset of motion [N m | N] (NaN: not measured, inf: no motion).
    model_coulomb_nm, torque_cap_nm : ndarray, shape (n,)
        The robot file's Coulomb friction and the cap used [N m | N].
    findings : list of Finding
    lines : list of str
        The report's lines, one per check.
    calibration_file : pathlib.Path or None
    set_zero_joints : list of int
        Joints whose drive got SET_ZERO.
    """

    joint_names: list
    home_rad: np.ndarray
    measured_home_rad: np.ndarray
    offset_correction_rad: np.ndarray
    torque_factor: np.ndarray
    breakaway_nm: np.ndarray
    model_coulomb_nm: np.ndarray
    torque_cap_nm: np.ndarray
    findings: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    calibration_file: Path | None = None
    set_zero_joints: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No blocking finding."""
        return not any(f.blocking for f in self.findings)

    def report(self) -> str:
        """The printed report: per-check lines, then every finding with its fix."""
        out = list(self.lines)
        if self.findings:
            out.append("findings:")
            for f in self.findings:
                out.append(f"  {f.joint_name}: {f.check}: {f.message}")
                out.append(f"    fix: {f.fix}")
        else:
            out.append("findings: none")
        return "\n".join(out)


class _Abort(Exception):
    """A bring-up guard tripped (the message names the joint; ``fix`` what to check)."""

    def __init__(self, message: str, fix: str = "check that joint (its sign, wiring, brake)"):
        super().__init__(message)
        self.fix = fix


class _Session:
    """The bring-up's cycle: one command per period on the run's clock, every torque clipped to
    the cap, every feedback checked (faults, staleness, speed, travel)."""

    def __init__(self, driver: Driver, clock, period_s: float, bs: BringupSpec, names: list, gravity,
                 stale_cycles: int, plausibility: FeedbackPlausibility | None = None):
        self.driver, self.clock, self.P, self.bs, self.names = driver, clock, period_s, bs, names
        self.stale_cycles = int(stale_cycles)
        #: the run's feedback plausibility (controller.plausibility): a reading no motion under the
        #: robot's limits can make is not used (None: every reading is)
        self.plaus = plausibility
        #: q (n,) -> the model's gravity torque (n,) [N m | N], fed forward on every joint
        self.gravity = gravity
        self.last_sent = None
        #: damping gains (n,) [N m s/rad] of the joints whose direction is verified (None: none yet)
        self.damp = None
        self.v_est = np.zeros(driver.n_joints)
        self.n = driver.n_joints
        self.k = 0
        self.t0 = None
        self.stale = np.zeros(self.n, dtype=int)
        self.off = np.zeros(self.n, dtype=int)
        #: per joint, the cycles in a row its gravity torque was over its cap
        self.unheld = np.zeros(self.n, dtype=int)
        #: how late the last few cycles' feedback was in hand [s]
        self.late_s: list = []
        self.fb: Feedback | None = None
        self.q_last = None

    def start(self, fb: Feedback) -> None:
        self.t0 = self.t_sent = self.clock.now()
        self.k = 0
        self.fb = fb
        self.q_last = np.asarray(fb.position_rad, dtype=float).copy()
        self.t_fresh = np.full(self.n, self.t_sent)
        self.over_last = np.zeros(self.n)       # per joint, the sign of its last over-speed estimate
        self.off = np.zeros(self.n, dtype=int)  # per joint, the cycles in a row it read not enabled
        if self.home_measured is None:      # the travel guard's reference: the first reading
            self.home_measured = self.q_last.copy()
        if self.plaus is not None:
            self.plaus.accept(self._t_meas(fb), fb)

    def _t_meas(self, fb: Feedback) -> float:
        """The time of a reading [s]: its time stamp, else the time its cycle's command was sent."""
        t = float(fb.t_s)
        return t if math.isfinite(t) else float(self.t_sent)

    def _plausible(self, fb: Feedback) -> Feedback:
        """``fb`` with every joint whose reading no motion under the robot's limits can make
        marked not fresh and given its last accepted reading (the run's rule,
        :class:`~controller.plausibility.FeedbackPlausibility`): such a value is not a motion to
        stop for, nor one to measure.  As in the run, ``stale_cycles`` of them in a row on one
        joint stop the bring-up; so do more than :data:`IMPLAUSIBLE_MAX` over the bring-up: a
        bus that keeps passing corrupt values (CAN's CRC stops the wire's errors; a drive's or a
        gateway's are framed afresh) cannot be measured through."""
        if self.plaus is None:
            return fb
        q_ok, qd_ok = self.plaus._q.copy(), self.plaus._qd.copy()
        out, bad, faulted = self.plaus.check(self._t_meas(fb), fb)
        if not bad.size:
            return out
        n_bad = int(self.plaus.rejected.sum())     # readings not used so far
        j = int(faulted[0]) if faulted.size else int(bad[0])
        if faulted.size:
            what = f"{self.plaus.run_max} readings in a row"
        elif n_bad > IMPLAUSIBLE_MAX:
            what = f"{n_bad} readings over the bring-up (the last on this joint)"
        else:
            return out
        late = max(self.late_s, default=0.0)
        seen = (f"{self.names[j]}: {what} that no motion under the robot's limits can make "
                f"({float(fb.position_rad[j]):.6g} at {float(fb.velocity_rad_s[j]):.6g}/s, "
                f"{float(self.t_sent - self.t0):.3f} s in, after {q_ok[j]:.6g} at {qd_ok[j]:.6g}/s)")
        corrupt = ("check that joint's encoder and the values on its bus (a drive or gateway corrupting "
                   "them, another node sending on its id), then run bringup again")
        if late > 0.5 * self.P:
            # a reading handled late is timed late: its motion looks like a jump
            raise _Abort(f"{seen}, while this computer was {late * 1e3:.3g} ms late with a cycle of "
                         f"{self.P * 1e3:.3g} ms: a loop that does not keep up, or corrupt feedback",
                         "keep up with loop.rate_hz (the real-time settings [loop.realtime], fewer other "
                         "processes, or a lower rate); if it was on time: " + corrupt)
        raise _Abort(f"{seen}: corrupt feedback, not a motion", corrupt)

    def step(self, tau: np.ndarray) -> Feedback:
        """Send the model's gravity torque at the last reading plus ``tau``, clipped to the cap, in
        the next cycle (kept in :attr:`last_sent`) and return its feedback."""
        q = np.asarray(self.fb.position_rad, dtype=float)
        g = self.gravity(q)
        self._held(q, g)
        if self.damp is not None:
            v = np.asarray(self.fb.velocity_rad_s, dtype=float)
            v = np.where(np.isfinite(v), v, self.v_est)
            g = g - self.damp * v
        tau = np.clip(np.nan_to_num(g + np.asarray(tau, dtype=float), nan=0.0), -self.bs.torque_cap_nm,
                      self.bs.torque_cap_nm)
        self.last_sent = tau
        self.k += 1
        due = self.t0 + self.k * self.P
        self.clock.wait_until(due)
        t = self.clock.now()
        self.t_sent = t
        fb = self.driver.cycle(Command(tau))
        # how late this cycle's feedback is in hand (the wall clock: a process that is not kept
        # up with; 0 on the lock-step clock), the last few kept
        self.late_s.append(max(0.0, self.clock.now() - due))
        del self.late_s[:-4]
        fb = self._plausible(fb)
        self._guard(fb)
        self.fb = fb
        return fb

    def hold_after_enable(self) -> Feedback:
        """No test torque for :data:`ENABLE_SETTLE_S` (at least 5 cycles) after an enable: the
        gravity feed-forward, and the damping :attr:`damp` where set (the joints whose direction
        is verified).  A joint's holding brake lets go some time after its drive is enabled
        (50 ms on the arm rehearsal's emulated brakes; tens of ms on real spring-applied ones),
        and a test against a brake still holding reads as a weak drive (the arm's first doublet
        gave 0.54 x the torque) or a high breakaway.  Returns the last feedback."""
        fb = self.fb
        for _ in range(max(5, int(math.ceil(ENABLE_SETTLE_S / self.P)))):
            fb = self.step(np.zeros(self.n))
        return fb

    def _held(self, q: np.ndarray, g: np.ndarray) -> None:
        """Stop when a joint's gravity torque alone has been over its cap for :data:`HOLD_CYCLES`
        cycles in a row: the cap cannot hold it there, and it is falling (the reference pose was
        checked, but the test pulses' coupling can carry a joint to where it is not held)."""
        cap = self.bs.torque_cap_nm
        over = np.abs(g) > cap
        self.unheld = np.where(over, self.unheld + 1, 0)
        j = int(np.argmax(self.unheld))
        if self.unheld[j] >= HOLD_CYCLES:
            raise _Abort(f"{self.names[j]}: its gravity torque {g[j]:.3g} at {q[j]:.4g} (the joints at "
                         f"{np.array2string(q, precision=4, separator=', ')}) has been over its bring-up cap "
                         f"{cap[j]:.3g} for {HOLD_CYCLES} cycles: the cap cannot hold it there",
                         f"raise bringup.torque_cap_nm for {self.names[j]} to at least {_ceil3(abs(g[j]) / HOLD_FRACTION_MAX):g} "
                         f"(at most {CAP_FRACTION_MAX:.0%} of its limit), or bring it up supported, or from a "
                         f"reference pose where the test pulses leave it less loaded (bringup.home_rad)")

    def _guard(self, fb: Feedback) -> None:
        fresh = np.asarray(fb.fresh, dtype=bool)
        self.stale = np.where(fresh, 0, self.stale + 1)
        # what the drive says of itself first (as the run's safety: a fault, then a drive that
        # is off), then what its silence says
        fault = np.flatnonzero(np.asarray(fb.fault) != 0)
        if fault.size:
            j = int(fault[0])
            raise _Abort(f"{self.names[j]}: device fault: {_fault_text(self.driver, j, int(fb.fault[j]))}",
                         "read the drive's fault (its manual), clear it, then run bringup again")
        # a drive that switched itself off stays off (a reboot, a watchdog); one reading that
        # says so is a corrupt reply's as well (a flipped statusword bit): two in a row
        self.off = np.where(np.asarray(fb.enabled, dtype=bool), 0, self.off + 1)
        off = np.flatnonzero(self.off >= DISABLED_CYCLES)
        if off.size:
            raise _Abort(f"{self.names[off[0]]}: drive not enabled any more (it switched itself off: a reboot or "
                         f"brown-out, its own watchdog or fault, an e-stop)",
                         "check the drive's supply, e-stop and watchdog, then run bringup again")
        bad = np.flatnonzero(self.stale >= self.stale_cycles)
        if bad.size:
            raise _Abort(f"{self.names[bad[0]]}: no feedback for {self.stale_cycles} cycles (safety.stale_cycles)",
                         "check the bus, the drive's power and id, and that this computer keeps up with "
                         "loop.rate_hz (a lower rate, or fewer other processes)")
        q = np.asarray(fb.position_rad, dtype=float)
        if not np.all(np.isfinite(q)):
            raise _Abort(f"{self.names[int(np.flatnonzero(~np.isfinite(q))[0])]}: non-finite position")
        # each joint's speed since its last fresh reading: a lost reply holds the last reading,
        # and the next one is two cycles' motion, not a double speed
        fresh = np.asarray(fb.fresh, dtype=bool)
        dt = np.maximum(self.t_sent - self.t_fresh, 1e-6)
        self.v_est = np.where(fresh, (q - self.q_last) / dt, self.v_est)
        v = np.abs(self.v_est)
        self.q_last = np.where(fresh, q, self.q_last)
        self.t_fresh = np.where(fresh, self.t_sent, self.t_fresh)
        # over the speed limit in two fresh readings in a row, the same way: a motion (one wrong
        # reading makes one estimate out and the next one back, of opposite signs)
        over = np.where(v > self.bs.velocity_max_rad_s, np.sign(self.v_est), 0.0)
        fast = np.flatnonzero((over != 0) & (over == self.over_last))
        self.over_last = np.where(fresh, over, self.over_last)
        if fast.size:
            raise _Abort(f"{self.names[fast[0]]}: moved at {v[fast[0]]:.3g} rad/s, over velocity_max_rad_s = "
                         f"{self.bs.velocity_max_rad_s:g}")
        far = np.flatnonzero(np.abs(q - self.home_measured) > self.bs.travel_max_rad)
        if far.size:
            raise _Abort(f"{self.names[far[0]]}: travelled {q[far[0]] - self.home_measured[far[0]]:+.3g} from the "
                         f"reference pose, over travel_max_rad = {self.bs.travel_max_rad:g}")

    home_measured: np.ndarray = None


def _predictor(model, q0: np.ndarray, qd0: np.ndarray | None = None):
    """The model's own plant at ``q0``, ``qd0`` (default rest; its friction, no brakes, no noise)."""
    from drivers.sim.plant import SimulatedPlant

    qd = None if qd0 is None else np.nan_to_num(np.asarray(qd0, dtype=float))
    return SimulatedPlant(model, q0=np.asarray(q0, dtype=float), qd0=qd, substeps=2)


@dataclass
class _Experiment:
    """One doublet as run: the start (q, qd) (n,), the commands (cycles, n), how long each was
    held [s] (cycles,) and the readings (cycles, n)."""

    j: int
    q0: np.ndarray
    qd0: np.ndarray
    tau: np.ndarray
    q: np.ndarray
    dt: np.ndarray


def _doublet(sess: _Session, j: int, u: float, T_s: float, settle_s: float) -> _Experiment:
    """A doublet ``+u`` for ``T_s`` then ``-u`` on joint j (others at zero torque), then zero torque
    for ``settle_s``."""
    q_start = np.asarray(sess.fb.position_rad, dtype=float).copy()
    qd_start = np.nan_to_num(np.asarray(sess.fb.velocity_rad_s, dtype=float))   # NaN: at rest
    n_half = max(1, int(round(T_s / sess.P)))
    n_settle = int(round(settle_s / sess.P))
    taus, qs, ts = [], [], []
    for c in range(2 * n_half + n_settle):
        tau = np.zeros(sess.n)
        tau[j] = u if c < n_half else (-u if c < 2 * n_half else 0.0)
        fb = sess.step(tau)
        taus.append(sess.last_sent)
        ts.append(sess.t_sent)
        qs.append(np.asarray(fb.position_rad, dtype=float).copy())
    # each command held until the next was sent (the wall clock's late cycles included)
    dt = np.append(np.diff(ts), sess.P)
    return _Experiment(j, q_start, qd_start, np.array(taus), np.array(qs), dt)


def _replay(model, ex: _Experiment, P: float, s: np.ndarray, off: np.ndarray, gain=1.0) -> np.ndarray:
    """The readings the model predicts for experiment ``ex`` if the joints' true directions are
    ``s`` (n,) times the configured ones (a reversed joint reads ``2 off - q`` and turns the
    other way) and each delivers ``gain`` (scalar or (n,)) times the torque commanded.
    Returns (cycles, n)."""
    pl = _predictor(model, s * (ex.q0 - off) + off, s * ex.qd0)
    out = np.empty_like(ex.q)
    for c in range(ex.tau.shape[0]):
        pl.set_torque(s * gain * ex.tau[c])
        pl.advance_to(pl.t_s + ex.dt[c])
        out[c] = s * (np.asarray(pl.state.q, dtype=float) - off) + off
    return out


def _torque_factor(model, exps: list, P: float, s: np.ndarray, off: np.ndarray, j: int) -> float:
    """The factor ``k`` on joint j's commanded torque whose model replay fits joint j's readings
    best (a log-spaced scan over [0.02, 5], refined by a parabola through the best three)."""
    def resid(k):
        g = np.ones(len(off))
        g[j] = k
        try:
            return sum(float(np.sum((_replay(model, ex, P, s, off, g)[:, j] - ex.q[:, j]) ** 2)) for ex in exps)
        except TorqueloopError:
            return math.inf

    ks = np.geomspace(0.02, 5.0, 25)
    r = np.array([resid(k) for k in ks])
    i = int(np.argmin(r))
    if not np.isfinite(r[i]):
        return math.nan
    if i in (0, len(ks) - 1) or not np.all(np.isfinite(r[i - 1:i + 2])):
        return float(ks[i]) if i else 0.0
    x = np.log(ks[i - 1:i + 2])
    a, b, _ = np.polyfit(x, r[i - 1:i + 2], 2)
    return float(np.exp(-b / (2 * a))) if a > 0 else float(ks[i])


#: cycles in a row a joint's gravity torque may be over its cap before the bring-up stops
HOLD_CYCLES = 10
#: gravity only this long after each enable before a test [s] (_Session.hold_after_enable)
ENABLE_SETTLE_S = 0.25
#: implausible readings (not used) over a bring-up beyond which it stops as corrupt feedback
IMPLAUSIBLE_MAX = 10

#: a sign hypothesis whose replay residual is within this fraction of the best one's fits the
#: doublets as well: the data cannot tell them apart
TIE_FRACTION = 0.02


def _directions(model, exps: list, P: float, off: np.ndarray) -> tuple[np.ndarray, list, np.ndarray]:
    """The joints' directions that explain the doublets best: for every sign pattern (the first
    joint's fixed when the model is symmetric under reversing every joint), the model's replay
    of every experiment against every joint's reading; returns (best s (n,), [(residual, s)...]
    sorted, unobservable (n,) bool).

    A joint whose reversal fits within :data:`TIE_FRACTION` of the best is not observable from
    these doublets (it couples to no other joint's reading and carries no gravity torque at this
    pose, as the base yaw of an arm does: a reversed motor and encoder are self-consistent); it
    is taken as configured and flagged."""
    import itertools

    n = len(off)
    scores = []
    for pattern in itertools.product((1.0, -1.0), repeat=n):
        s = np.array(pattern)
        try:
            r = sum(float(np.sum((_replay(model, ex, P, s, off) - ex.q) ** 2)) for ex in exps)
        except TorqueloopError:
            r = math.inf        # not a pose of this robot (a parallel robot's closure fails): ruled out
        scores.append((r, s))
    scores.sort(key=lambda x: x[0])
    best_r, best = scores[0]
    # reversing every joint mirrors a robot without gravity torque on its joints: the same
    # motion, so the data cannot tell the two apart; take the one with fewer reversed joints
    mirror_r = next(r for r, sv in scores if np.all(sv == -best))
    if np.sum(-best < 0) < np.sum(best < 0) and np.isfinite(mirror_r) and mirror_r <= (1 + TIE_FRACTION) * best_r:
        best = -best
    by_pattern = {tuple(sv): r for r, sv in scores}
    unobservable = np.zeros(n, dtype=bool)
    for j in range(n):
        flip = best.copy()
        flip[j] = -flip[j]
        r_flip = by_pattern.get(tuple(flip), math.inf)
        if np.isfinite(r_flip) and r_flip <= (1 + TIE_FRACTION) * by_pattern[tuple(best)]:
            unobservable[j] = True
    if unobservable.any():
        best = np.where(unobservable, 1.0, best)
    return best, scores, unobservable


def _predicted_doublet(model, q0: np.ndarray, j: int, u: float, n: int, P: float) -> tuple[float, float, float]:
    """(displacement of joint j, peak speed of any joint, largest excursion of another joint) the
    model predicts for a doublet of ``n`` cycles a half on joint j, net of the motion without it."""
    pl, fr = _predictor(model, q0), _predictor(model, q0)
    tau = np.zeros(len(q0))
    others = np.arange(len(q0)) != j
    v_peak = x_other = 0.0
    for c in range(3 * n):          # the doublet, then as long again coasting
        tau[j] = u if c < n else (-u if c < 2 * n else 0.0)
        pl.set_torque(tau)
        try:
            pl.advance_to(pl.t_s + P)
            fr.advance_to(fr.t_s + P)
        except TorqueloopError:
            # the predicted motion left the robot's poses (a parallel robot whose other joints,
            # on gravity only, let the platform go): far too much
            return math.inf, math.inf, math.inf
        v_peak = max(v_peak, float(np.max(np.abs(np.asarray(pl.state.qd) - np.asarray(fr.state.qd)))))
        dq = np.abs(np.asarray(pl.state.q) - np.asarray(fr.state.q))
        x_other = max(x_other, float(np.max(dq[others], initial=0.0)))
        if c == 2 * n - 1:
            d = float(dq[j])
    return d, v_peak, x_other


def _plan_doublet(model, q0: np.ndarray, j: int, cap: float, bs: BringupSpec, P: float) -> tuple[float, float]:
    """Torque [N m | N] and half time [s] of joint j's doublet: the model's prediction moves it
    ``pulse_rad`` (within ``pulse_max_s``; less when the coupling would swing another joint
    farther than a quarter of ``travel_max_rad``) no faster than half ``velocity_max_rad_s``
    (a lower torque where the cap would be faster).  Displacement grows as u T**2 and the peak
    speed as u T for a free joint, so a few predictions settle both."""
    u, T = cap, max(0.02, 2 * P)
    v_lim = 0.5 * bs.velocity_max_rad_s
    target = bs.pulse_rad
    # well clear of the model's Coulomb friction (and a drive's torque resolution), within the cap
    coulomb = float(np.broadcast_to(np.asarray(model.drive.coulomb, dtype=float), q0.shape)[j])
    u_min = min(cap, max(5.0 * coulomb, 0.2 * cap))
    predicted = None            # the last doublet whose prediction stayed among the robot's poses
    for _ in range(16):
        n = max(1, int(round(T / P)))
        d, v, x = _predicted_doublet(model, q0, j, u, n, P)
        if not math.isfinite(d):
            # no prediction (it left the robot's poses): a shorter doublet, at the shortest less torque
            if n > 1:
                T = max(P, 0.5 * n * P)
            else:
                u *= 0.5
            continue
        predicted = (u, n * P)
        if d <= 0:
            return u, bs.pulse_max_s
        if x > 0.25 * bs.travel_max_rad and d > 0.1 * bs.pulse_rad:
            target = min(target, d * 0.25 * bs.travel_max_rad / x)
        if v > v_lim * 1.05:
            if u > u_min:
                # at the target displacement the peak speed goes as sqrt(u)
                u = max(u_min, u * (v_lim / v) ** 2)
                continue
            # the least torque is still too fast (a light joint): a shorter displacement, whose
            # peak speed goes as its square root at this torque
            target = min(target, d * (v_lim / v) ** 2)
        if abs(d - target) < 0.1 * target or (d < target and T >= bs.pulse_max_s):
            return u, n * P
        if d > target and n == 1:
            u *= target / d                 # the shortest doublet is still too far: less torque
            continue
        T = min(T * math.sqrt(target / d), bs.pulse_max_s)
    n = max(1, int(round(T / P)))
    if math.isfinite(_predicted_doublet(model, q0, j, u, n, P)[0]):
        return u, n * P
    if predicted is None:
        raise SafetyError(f"joint {j}: no test pulse under its cap keeps the model's predicted motion among the "
                          f"robot's poses; bring it up with a lower bringup.torque_cap_nm or pulse_max_s")
    return predicted


def _hold_and_disable(sess: _Session, driver: Driver) -> None:
    """A few cycles on gravity only (the last command of a test is not left held), then the drives
    disabled."""
    for _ in range(3):
        sess.step(np.zeros(sess.n))
    driver.cycle(Command(np.zeros(sess.n)))
    driver.disable()


def _ramp(sess: _Session, model, j: int, direction: float, damp: np.ndarray) -> float:
    """Ramp joint j's torque beyond gravity from 0 toward ``direction * cap`` over ``ramp_s`` until it
    moves ``motion_rad``; return that torque at the onset [N m | N] (``inf``: it did not move),
    then gravity and the damping ``damp`` (n,) [N m s/rad] while it settles."""
    bs = sess.bs
    cap = float(bs.torque_cap_nm[j])
    q0 = np.asarray(sess.fb.position_rad, dtype=float).copy()
    # wait (gravity only, at most 1 s) until the joint is at rest, moving less than a tenth of
    # motion_rad over 50 ms: drift is not breakaway
    window = max(2, int(round(0.05 / sess.P)))
    hist = [float(sess.fb.position_rad[j])]
    for _ in range(int(round(1.0 / sess.P))):
        sess.step(np.zeros(sess.n))
        hist.append(float(sess.fb.position_rad[j]))
        if len(hist) > window and abs(hist[-1] - hist[-1 - window]) < 0.1 * bs.motion_rad:
            break
    q0 = np.asarray(sess.fb.position_rad, dtype=float).copy()
    n_ramp = max(1, int(round(bs.ramp_s / sess.P)))
    onset = math.inf
    still = (0.0, q0)          # the last torque under which the joint had not yet moved, and where
    for c in range(1, n_ramp + 1):
        tau = np.zeros(sess.n)
        tau[j] = direction * cap * c / n_ramp
        fb = sess.step(tau)
        q = np.asarray(fb.position_rad, dtype=float)
        moved = abs(float(q[j]) - q0[j])
        if moved <= 0.1 * bs.motion_rad:
            still = (tau[j], q.copy())
        elif moved > bs.motion_rad:
            # the onset: the last torque beyond gravity that left the joint (within a tenth of
            # motion_rad) still
            onset = abs(still[0])
            break
    sess.damp = damp.copy()             # then damped (its direction is verified) while it settles
    for _ in range(int(round(0.3 / sess.P))):
        sess.step(np.zeros(sess.n))
    return onset


def bringup(spec, *, clock=None, confirm_set_zero: Callable[[str], bool] | None = None, set_zero: bool = False,
            write: bool = True, driver: Driver | None = None) -> BringupResult:
    """Walk the robot of run spec ``spec`` joint by joint (module docstring) and write its calibration.

    Parameters
    ----------
    spec : RunSpec
        A parsed run config (:func:`controller.app.run.load_run`); its ``[bringup]`` table.
        A simulated driver (``sim_*``) runs against the emulated devices with the plant
        starting at ``home_rad``.
    clock : optional
        The loop clock (default: lock-step for simulated runs, the wall clock for hardware).
    set_zero : bool
        MIT drives only: set each drive's zero at the reference pose (the drive's
        SET_ZERO command) instead of correcting the offset in the calibration; asks
        ``confirm_set_zero`` first and refuses without a yes.
    confirm_set_zero : callable (str) -> bool, optional
        Asked once, with what will be done, before the zero is set.
    write : bool
        Write the calibration file (``bringup.calibration_file``).
    driver : Driver, optional
        An already built driver to use (not closed here); default: built from the spec.

    Returns
    -------
    BringupResult

    Raises
    ------
    ConfigError
        A bad ``[bringup]`` table (naming the field).
    SafetyError
        Set-zero not confirmed, or not possible with this driver.
    """
    from drivers.registry import build_driver

    from ..clock import LockstepClock, WallClock

    bs = BringupSpec.from_spec(spec, _joint_start(spec)[0])
    if set_zero:            # asked before anything is enabled
        if "mit" not in spec.driver_type:
            raise SafetyError(f"--set-zero is for MIT drives (SET_ZERO command); {spec.driver_type} is homed by "
                              f"the calibration's offset correction")
        msg = (f"set the zero of every MIT drive at the pose the robot stands in, taken as the reference pose "
               f"{bs.home_rad.tolist()} (the drives then read offset_rad there)")
        if confirm_set_zero is None or not confirm_set_zero(msg):
            raise SafetyError("set-zero not confirmed: nothing was enabled")
    model = spec.model
    n = model.dof
    names = [str(x) for x in model.joint_names]
    P = spec.period_s
    g_home = np.asarray(model.gravity(bs.home_rad), dtype=float)
    refused = reference_pose_refusal(spec, bs)
    if refused is not None:
        raise refused
    # the doublets, planned with the model at the reference pose before anything is enabled (the
    # pulse rides on the gravity feed-forward: room for both under the cap, since clipping one
    # half of a doublet would leave the joint a net impulse)
    plans = []
    for j in range(n):
        cap = float(bs.torque_cap_nm[j])
        room = max(cap - 1.5 * abs(float(g_home[j])), 0.1 * cap)
        plans.append(_plan_doublet(model, bs.home_rad, j, room, bs, P))
    if clock is None:
        clock = LockstepClock() if spec.clock == "lockstep" else WallClock(spin_s=spec.spin_s, realtime=spec.realtime)
    own = driver is None
    if own:
        if spec.hardware:
            driver = build_driver(spec.driver_section, now=clock.now)
        else:
            sec = sim_driver_section(spec.driver_section.data, q0=bs.home_rad, clock=spec.clock, period_s=P,
                                     file=spec.file, path=spec.driver_section.path)
            driver = build_driver(sec, now=clock.now, model=model, rng=np.random.default_rng(0))
    drive_coulomb = np.broadcast_to(np.asarray(model.drive.coulomb, dtype=float), (n,)).copy()
    res = BringupResult(names, bs.home_rad.copy(), np.full(n, np.nan), np.zeros(n), np.full(n, np.nan),
                        np.full(n, np.nan), drive_coulomb, bs.torque_cap_nm.copy(),
                        calibration_file=bs.calibration_file)
    res.lines.append(f"bring-up of '{spec.name}' ({spec.driver_type}, {'HARDWARE' if spec.hardware else 'emulated'}), "
                     f"torque cap " + ", ".join(f"{nm} {c:.3g}" for nm, c in zip(names, bs.torque_cap_nm)))

    def gravity(q):
        return np.asarray(model.gravity(q), dtype=float)

    sess = _Session(driver, clock, P, bs, names, gravity, spec.safety.stale_cycles,
                    _plausibility(spec, bs.home_rad, res))
    joints_cfg = spec.driver_section.data.get("joints", [])
    enabled = False
    try:
        clock.start()
        # (1) ids answer
        try:
            fb = driver.enable()
            enabled = True
        except TorqueloopError as err:
            res.findings.append(Finding(-1, "drives", "ids answer", f"enable failed: {type(err).__name__}: {err}",
                                        FOREIGN_FIX if isinstance(err, ForeignTrafficError) else
                                        "check the ids, wiring, bus and power named above, then run bringup again"))
            return _finish(res, spec, write)
        sess.start(fb)
        fb = sess.hold_after_enable()
        res.lines.append(f"ids answer: {n} joint(s) enabled, fresh feedback, no device fault")
        # (2) zero at the reference pose, before anything moves
        q_home = np.asarray(fb.position_rad, dtype=float).copy()
        res.measured_home_rad = q_home.copy()
        sess.home_measured = q_home
        if set_zero:        # the drives take SET_ZERO disabled
            driver.disable()
            enabled = False
            _set_zero(driver, res)
            fb = driver.enable()
            enabled = True
            sess.home_measured = None       # the readings moved with the zero
            sess.start(fb)
            fb = sess.hold_after_enable()
            q_home = np.asarray(fb.position_rad, dtype=float).copy()
            sess.home_measured = q_home
        # (3) direction and torque constant: a doublet out and one back, per joint
        exps = []
        for j, (u, T) in enumerate(plans):
            for sgn in (1.0, -1.0):
                exps.append(_doublet(sess, j, sgn * u, T, settle_s=T))
            res.lines.append(f"direction/torque: {names[j]}: doublets +-{u:.3g} x {T * 1e3:.0f} ms")
        # the analysis takes a while: the drives are off meanwhile (no cycle would feed their
        # watchdogs), and on again for the breakaway ramps
        _hold_and_disable(sess, driver)
        enabled = False
        off = np.array([float(_joint_key(joints_cfg, j, "offset_rad", 0.0)) for j in range(n)])
        s_best, scores, unobservable = _directions(model, exps, P, off)
        res.lines.append("direction: " + ", ".join(f"{names[j]} " + ("not observable (taken as configured)"
                                                                     if unobservable[j] else "as configured"
                                                                     if s_best[j] > 0 else "REVERSED")
                                                   for j in range(n))
                         + f" (model replay residual {scores[0][0]:.3g} rad^2; as configured "
                           f"{next(r for r, sv in scores if np.all(sv > 0)):.3g})")
        # the torque each joint gives: the factor on its commands that makes the model's replay
        # of its doublets (friction included) match its readings best
        k = np.array([_torque_factor(model, [e for e in exps if e.j == j], P, s_best, off, j) for j in range(n)])
        res.lines.append("torque delivered / commanded (model replay fit): "
                         + ", ".join(f"{nm} {x:.3f}" for nm, x in zip(names, k)))
        res.torque_factor = k.copy()
        as_cfg = next(r for r, sv in scores if np.all(sv > 0))
        reversed_ = np.flatnonzero(s_best < 0)
        for j in reversed_:
            sign = int(_joint_key(joints_cfg, j, "sign", 1))
            res.findings.append(Finding(int(j), names[j], "direction", f"the joint turns against the robot model's "
                                        f"positive direction: the doublets' motion of every joint, replayed through "
                                        f"the model, fits with it reversed (residual {scores[0][0]:.3g} rad^2 "
                                        f"against {as_cfg:.3g} as configured): the sign is reversed",
                                        f"driver.joints[{j}].sign = {-sign}"))
        for j in np.flatnonzero(unobservable):
            res.findings.append(Finding(int(j), names[j], "direction", "the doublets cannot tell its direction: "
                                        "reversing it fits them as well (at the reference pose it moves no other "
                                        "joint and carries no gravity torque), so it is taken as configured and "
                                        "its friction ramp is not damped",
                                        f"check by eye that a positive torque on {names[j]} turns it the way the "
                                        f"robot file's positive direction does (else driver.joints[{j}].sign), or "
                                        f"bring it up from a reference pose where it carries gravity torque "
                                        f"(bringup.home_rad)", blocking=False))
        for j in range(n):
            if not np.isfinite(k[j]) or k[j] < 0.05:
                res.findings.append(Finding(j, names[j], "direction", f"the joint did not follow the torque pulses "
                                            f"(fitted torque factor {k[j]:.3f}): brake engaged, jammed, or a "
                                            f"cap too low for its friction", "check the joint; raise "
                                            f"bringup.torque_cap_nm within {CAP_FRACTION_MAX:.0%} of the limit"))
            elif abs(k[j] - 1.0) > bs.torque_factor_tolerance:
                res.findings.append(Finding(j, names[j], "torque constant", f"the joint gives {k[j]:.3f} x the "
                                            f"torque commanded (the model's replay of its doublets fits; tolerance "
                                            f"+-{bs.torque_factor_tolerance:g})", _kt_fix(spec, joints_cfg, j, k[j])))
        # the offset, as the driver reads it once each reversed sign is fixed
        q_fix = q_home.copy()
        for j in reversed_:
            off = float(_joint_key(joints_cfg, j, "offset_rad", 0.0))
            q_fix[j] = 2.0 * off - q_home[j]
        corr = bs.home_rad - q_fix       # after a set-zero the drives read offset_rad at home
        res.offset_correction_rad = corr
        res.lines.append("zero at the reference pose: " + ", ".join(
            f"{nm} reads {q:+.4f} (home {h:+.4f}, correction {c:+.4f})"
            for nm, q, h, c in zip(names, q_home, bs.home_rad, corr)))
        for j in np.flatnonzero(np.abs(corr) > bs.zero_tolerance_rad):
            off = float(_joint_key(joints_cfg, j, "offset_rad", 0.0))
            res.findings.append(Finding(int(j), names[j], "zero", f"the encoder's zero is {corr[j]:+.4f} off the "
                                        f"reference pose (tolerance {bs.zero_tolerance_rad:g}); the calibration "
                                        f"corrects it", f"driver.joints[{j}].offset_rad = {off + corr[j]:.6g} (or keep "
                                        f"the calibration's correction"
                                        + ("; MIT: --set-zero at the reference pose, then offset_rad = its home_rad)"
                                           if "mit" in spec.driver_type and not res.set_zero_joints else ")"),
                                        blocking=False))
        # (4) friction breakaway, on joints whose direction is right; those are damped meanwhile
        # (critically for a 0.1 s time constant, with the model's inertia at the reference pose)
        good = np.array([j not in reversed_ and not unobservable[j] and np.isfinite(k[j]) and 0.5 <= k[j] <= 2.0
                         for j in range(n)])
        M = np.asarray(model.mass_matrix(bs.home_rad), dtype=float)
        damp = np.where(good, np.diag(M) / 0.1, 0.0)
        ramped = [j for j in range(n) if j not in reversed_ and np.isfinite(k[j]) and k[j] >= 0.05]
        if ramped:
            sess.start(driver.enable())
            enabled = True
            sess.damp = damp.copy()         # (the joints whose direction is verified)
            sess.hold_after_enable()
        for j in ramped:
            b = []
            for d in (1.0, -1.0):
                sess.damp = damp.copy()
                sess.damp[j] = 0.0          # the ramped joint is free until it moves
                b.append(_ramp(sess, model, j, d, damp))
            sess.damp = None
            res.breakaway_nm[j] = float(np.mean(b)) * k[j]
            res.lines.append(f"friction breakaway: {names[j]}: {b[0]:.3g} / {b[1]:.3g} commanded "
                             f"({res.breakaway_nm[j]:.3g} delivered; model Coulomb {drive_coulomb[j]:.3g})")
            if not math.isfinite(res.breakaway_nm[j]):
                res.findings.append(Finding(j, names[j], "friction", f"no motion under the cap "
                                            f"{bs.torque_cap_nm[j]:.3g}", "check the joint (brake, jam) or raise "
                                            "bringup.torque_cap_nm"))
    except _Abort as err:
        loaded = bool(np.any(np.abs(g_home) > 0.05 * bs.torque_cap_nm))
        res.findings.append(Finding(-1, "drives", "stopped", str(err), f"{err.fix}; the robot was stopped at "
                                    "zero torque, the drives disabled"
                                    + ("; on a gravity-loaded robot a joint with a reversed sign, a wrong zero or a "
                                       "low torque constant is not held by the model's gravity feed-forward: bring "
                                       "it up supported, or from a reference pose without gravity load"
                                       if loaded else "")))
    except KinematicsError as err:          # the model at the readings: not a pose of this robot
        res.findings.append(Finding(-1, "drives", "stopped", f"{type(err).__name__}: {err}",
                                    "the joints' readings are not a pose of this robot (a parallel robot's "
                                    "closure fails): check each joint's sign, offset and gear ratio "
                                    "(driver.joints[i].sign, offset, gear_ratio), then run bringup again; the "
                                    "drives were disabled"))
    except ForeignTrafficError as err:      # another master on the drives' ids: not ours to fix by retrying
        res.findings.append(Finding(-1, "drives", "stopped", f"{type(err).__name__}: {err}",
                                    f"{FOREIGN_FIX}; the drives were disabled (best effort)"))
    except TorqueloopError as err:          # a bus or port that failed, a drive that refused a command
        res.findings.append(Finding(-1, "drives", "stopped", f"{type(err).__name__}: {err}",
                                    "check the bus/port and the drives, then run bringup again; the drives "
                                    "were disabled (best effort)"))
    finally:
        if enabled:
            try:
                driver.cycle(Command(np.zeros(n)))
            except TorqueloopError:
                pass
            try:
                driver.disable()
            except TorqueloopError as err:
                res.lines.append(f"disable failed: {type(err).__name__}: {err}")
        clock.stop()
        if own:
            try:
                driver.close()
            except TorqueloopError as err:      # a bus already failed: the findings still count
                res.lines.append(f"close failed: {type(err).__name__}: {err}")
        rejected = sess.plaus.rejected if sess.plaus is not None else ()
        if np.any(rejected):
            res.lines.append("feedback plausibility: " + ", ".join(
                f"{names[j]} {int(c)}" for j, c in enumerate(rejected) if c)
                + " reading(s) no motion under the robot's limits can make, not used")
    return _finish(res, spec, write)


def _plausibility(spec, home_rad: np.ndarray, res: BringupResult) -> FeedbackPlausibility:
    """The run's feedback plausibility check (:meth:`FeedbackPlausibility.for_supervisor` of the
    run's safety supervisor, at the reference pose): what it could not derive goes in the report."""
    check, note = FeedbackPlausibility.for_supervisor(make_safety(spec), home_rad, spec.safety.feedback_accel_max)
    if note:
        res.lines.append(f"feedback plausibility: {note}")
    FeedbackPlausibility.load()
    return check


def _joint_key(joints_cfg, j: int, key: str, default):
    try:
        return joints_cfg[j].get(key, default)
    except (IndexError, AttributeError, TypeError):
        return default


def _kt_fix(spec, joints_cfg, j: int, factor: float) -> str:
    """The config key (and value) that corrects a torque factor on this protocol."""
    kind = spec.driver_type.removeprefix("sim_")
    if kind in ("odrive_can", "odrive_ascii", "dynamixel"):
        # the key's default: the servo model's (Dynamixel), else 1 N m/A (drivers.registry.joint_mapping)
        kt = _joint_key(joints_cfg, j, "torque_constant_nm_per_a", None if kind == "dynamixel" else 1.0)
        drive = " and the drive's axis.motor.config.torque_constant" if kind.startswith("odrive") else ""
        val = f"{float(kt) * factor:.6g}" if kt is not None else f"{factor:.4g} x the servo model's"
        return f"driver.joints[{j}].torque_constant_nm_per_a = {val}{drive}"
    if kind == "cia402_can":
        return (f"the drive's torque scaling (motor rated torque 0x6076 / its torque constant) is off by "
                f"{factor:.3f}: correct it in the drive, then driver.joints[{j}].rated_torque_nm to match")
    eff = float(_joint_key(joints_cfg, j, "efficiency", 1.0))
    return (f"the drive's torque constant is off by {factor:.3f}: correct it in the drive, or "
            f"driver.joints[{j}].efficiency = {eff * factor:.6g}" + (" (over 1: fix the drive)" if eff * factor > 1 else ""))


def _set_zero(driver, res: BringupResult) -> None:
    """MIT SET_ZERO of every drive at the reference pose (the operator confirmed it)."""
    fn = getattr(driver, "set_zero", None)
    if fn is None:
        raise SafetyError(f"{type(driver).__name__} has no set_zero (an MIT driver has)")
    fn()
    res.set_zero_joints = list(range(driver.n_joints))
    res.lines.append("MIT set-zero sent to every drive at the reference pose (confirmed by the operator)")


def _finish(res: BringupResult, spec, write: bool) -> BringupResult:
    if write and res.calibration_file is not None:
        write_calibration(res, spec)
    return res


def write_calibration(res: BringupResult, spec) -> Path:
    """Write the calibration file of a bring-up result (``res.calibration_file``) for run spec
    ``spec``: its hardware digest and tables, a UTC time, the per-joint results and the findings.

    Returns
    -------
    pathlib.Path
        The file written.
    """
    tables = hardware_tables(spec)
    data = {
        "calibration": {"version": CALIBRATION_VERSION, "config": str(spec.file),
                        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                        "hardware_digest": hardware_digest(tables),
                        "hardware_json": json.dumps(tables, sort_keys=True),
                        "ok": res.ok, "torque_cap_nm": res.torque_cap_nm.tolist()},
        "joints": [{"name": nm, "home_rad": float(h), "measured_home_rad": float(m),
                    "offset_correction_rad": float(c), "torque_factor": float(k) if np.isfinite(k) else -1.0,
                    "breakaway_nm": float(b) if np.isfinite(b) else -1.0, "model_coulomb_nm": float(mc)}
                   for nm, h, m, c, k, b, mc in zip(res.joint_names, res.home_rad, res.measured_home_rad,
                                                    res.offset_correction_rad, res.torque_factor,
                                                    res.breakaway_nm, res.model_coulomb_nm)],
        "findings": [{"joint": f.joint, "joint_name": f.joint_name, "check": f.check, "message": f.message,
                      "fix": f.fix, "blocking": f.blocking} for f in res.findings],
    }
    write_toml(res.calibration_file, data)
    return Path(res.calibration_file)
