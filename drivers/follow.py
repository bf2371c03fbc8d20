"""The "drive follows its commands" rule, for every driver that can see it (protocol neutral).

A drive that answers but does not produce the torque it is told (limp, saturated below its
command) or ignores its commands is seen by the host only through the torque the drive reports
against the torque it was sent.  Per joint, every cycle:

* expected torque ``u`` from the command actually sent (MIT: ``t_ff + kp (p_des - p) +
  kd (v_des - v)`` with the reported state; torque-only drives: the commanded torque), clamped
  to the drive's torque range;
* the reply to the *next* command carries the current driven by ``u`` through the current
  loop, modelled as first order: ``x_k = x_{k-1} + a (u_{k-1} - x_{k-1})``,
  ``a = 1 - exp(-dt / lag_s)`` (``a = 1`` for ``lag_s = 0``);
* **not following** (:data:`FAULT_NOT_FOLLOWING`): ``|t_meas - x| > tol_nm + rel_tol |x|`` on
  ``window_cycles`` consecutive fresh replies;
* **frozen** (:data:`FAULT_FROZEN`): ``frozen_cycles`` consecutive fresh replies with identical
  raw fields (position, velocity and torque) while the expected torque ``x`` moved by more than
  ``tol_nm`` over them (a motor at rest under a constant command legitimately repeats its
  reply; one told to change its torque does not).

A fault latches (per joint) until :meth:`FollowMonitor.reset`.  :func:`follow_step` is the
rule's one source: plain Python here (the torque-only drivers' :class:`TorqueFollow`, which load
no compiled code), compiled by :mod:`drivers._mit_kernels` for the MIT driver's cycle.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dynamics.errors import ConfigError

__all__ = ["FollowConfig", "FollowMonitor", "TorqueFollow", "follow_config", "follow_step",
           "FAULT_NOT_FOLLOWING", "FAULT_FROZEN", "HOST_FAULT_OFFSET", "TORQUE_ONLY_TOL"]

#: rows of the monitor's float state M (float64, (M_ROWS, n)) and int state MI (int64)
M_X, M_U, M_XLO, M_XHI, M_RESID, M_TOL, M_TMAX = range(7)
M_ROWS = 7
MI_BAD, MI_SAME, MI_LAST, MI_HAS_LAST, MI_CODE = range(5)
MI_ROWS = 5

#: measured torque (current) does not follow the commanded torque
FAULT_NOT_FOLLOWING = 0x100
#: replies repeat while the command changes
FAULT_FROZEN = 0x101


def follow_step(M, MI, a, fresh, p, v, t_meas, raw, cmd, rel_tol, window, frozen):
    """One cycle of :class:`FollowMonitor` (the module docstring states the rule); plain Python,
    compiled as it is for the MIT driver's cycle (:data:`drivers._mit_kernels.follow_step`).

    Parameters
    ----------
    M : ndarray, shape (M_ROWS, n)
        The monitor's float state (expected torque, last command's clamped torque, the range of
        the expectation over identical replies, the residual) and constants (tolerance, torque
        range), motor side [N m].
    MI : ndarray of int64, shape (MI_ROWS, n)
        Its counters, the last raw reply and the latched codes.
    a : float
        The current loop's filter gain for this cycle's time step.
    fresh : ndarray of bool, shape (n,)
        Whether motor j answered this cycle.
    p, v, t_meas : ndarray, shape (n,)
        This cycle's replies, motor side [rad, rad/s, N m] (read where fresh).
    raw : ndarray of int64, shape (n,)
        The replies' raw fields (compared for equality).
    cmd : ndarray, shape (5, n)
        The commands sent this cycle, motor side (p_des, v_des, kp, kd, t_ff).
    rel_tol : float
    window, frozen : int
    """
    n = M.shape[1]
    for j in range(n):
        # the reply to this cycle's command shows the current driven by the previous one
        x = M[M_X, j] + a * (M[M_U, j] - M[M_X, j])
        M[M_X, j] = x
        t_ff = cmd[4, j]
        if not fresh[j]:
            # no state to evaluate the drive's PD with: assume it sees the target
            u = t_ff
        else:
            u = t_ff + cmd[2, j] * (cmd[0, j] - p[j]) + cmd[3, j] * (cmd[1, j] - v[j])
            if MI[MI_CODE, j] == 0:
                tol = M[M_TOL, j]
                r = t_meas[j] - x
                M[M_RESID, j] = r
                if abs(r) > tol + rel_tol * abs(x):
                    MI[MI_BAD, j] += 1
                    if MI[MI_BAD, j] >= window:
                        MI[MI_CODE, j] = FAULT_NOT_FOLLOWING
                else:
                    MI[MI_BAD, j] = 0
                if MI[MI_CODE, j] == 0:
                    if MI[MI_HAS_LAST, j] != 0 and raw[j] == MI[MI_LAST, j]:
                        MI[MI_SAME, j] += 1
                        if x < M[M_XLO, j]:
                            M[M_XLO, j] = x
                        elif x > M[M_XHI, j]:
                            M[M_XHI, j] = x
                        if MI[MI_SAME, j] >= frozen and M[M_XHI, j] - M[M_XLO, j] > tol:
                            MI[MI_CODE, j] = FAULT_FROZEN
                    else:
                        MI[MI_LAST, j] = raw[j]
                        MI[MI_HAS_LAST, j] = 1
                        MI[MI_SAME, j] = 1
                        M[M_XLO, j] = x
                        M[M_XHI, j] = x
        tm = M[M_TMAX, j]
        M[M_U, j] = tm if u > tm else -tm if u < -tm else u


@dataclass(frozen=True)
class FollowConfig:
    """Settings of :class:`FollowMonitor` (motor side).

    Attributes
    ----------
    enabled : bool
        Run the checks (a hardware config must say ``false`` explicitly to switch them off).
    lag_s : float
        Time constant of the drive's current loop used for the prediction [s].
    tol_nm : float or None
        Absolute tolerance [N m]; ``None``: 1 % of the model's torque range.
    rel_tol : float
        Relative tolerance (fraction of the expected torque), in [0, 1).
    window_cycles : int
        Consecutive out-of-tolerance replies that make a "not following" fault.
    frozen_cycles : int
        Consecutive identical replies (with a changing command) that make a "frozen" fault.
    """

    enabled: bool = True
    lag_s: float = 0.0005
    tol_nm: float | None = None
    rel_tol: float = 0.25
    window_cycles: int = 10
    frozen_cycles: int = 20

    def __post_init__(self):
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"must be true or false, got {self.enabled!r}", field="enabled")
        if not (math.isfinite(self.lag_s) and 0.0 <= self.lag_s <= 0.1):
            raise ConfigError(f"must be in [0, 0.1] s, got {self.lag_s!r}", field="lag_s")
        if self.tol_nm is not None and not (math.isfinite(self.tol_nm) and self.tol_nm > 0):
            raise ConfigError(f"must be finite and > 0, got {self.tol_nm!r}", field="tol_nm")
        if not (math.isfinite(self.rel_tol) and 0.0 <= self.rel_tol < 1.0):
            raise ConfigError(f"must be in [0, 1), got {self.rel_tol!r}", field="rel_tol")
        for name in ("window_cycles", "frozen_cycles"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 10_000:
                raise ConfigError(f"must be an integer in [1, 10000], got {v!r}", field=name)


class FollowMonitor:
    """Per-motor "does the drive follow its commands" checks (see the module docstring).

    The rule is :func:`follow_step` (on this object's arrays; :attr:`_step`, plain Python here,
    compiled in :class:`drivers.mit_health.FollowMonitor`, whose arrays
    :class:`~drivers.mit.MitCanDriver`'s compiled cycle step updates).

    Parameters
    ----------
    t_max_nm : sequence of float
        Each motor's torque range half-width [N m] (motor side).
    config : FollowConfig
    """

    #: the rule's step (:func:`follow_step`)
    _step = staticmethod(follow_step)

    def __init__(self, t_max_nm: Sequence[float], config: FollowConfig = FollowConfig()):
        self.config = config
        tmax = [float(t) for t in t_max_nm]
        n = len(tmax)
        #: float state and constants (rows: drivers._mit_kernels.M_*), motor side [N m]
        self._f = np.zeros((M_ROWS, n))
        self._f[M_TMAX] = tmax
        self._f[M_TOL] = [config.tol_nm if config.tol_nm is not None else 0.01 * t for t in tmax]
        #: counters, last raw reply, latched codes (rows: drivers._mit_kernels.MI_*)
        self._i = np.zeros((MI_ROWS, n), dtype=np.int64)
        self._t = None

    @property
    def n(self) -> int:
        return self._f.shape[1]

    @property
    def codes(self) -> list[int]:
        """Latched fault code per motor (0: none)."""
        return self._i[MI_CODE].tolist()

    @property
    def tol_nm(self) -> list[float]:
        """Absolute tolerance per motor [N m] (``config.tol_nm`` or 1 % of the torque range)."""
        return self._f[M_TOL].tolist()

    @property
    def residual_nm(self) -> list[float]:
        """Last measured minus expected torque per motor [N m] (motor side)."""
        return self._f[M_RESID].tolist()

    def reset(self, measured_nm: Sequence[float] | None = None) -> None:
        """Clear the latches and the history (at enable); the filter starts at ``measured_nm``."""
        n = self.n
        m = [0.0] * n if measured_nm is None else [float(v) if math.isfinite(v) else 0.0 for v in measured_nm]
        f, i = self._f, self._i
        f[M_X] = m
        f[M_U] = m
        f[M_RESID] = 0.0
        i[[MI_BAD, MI_SAME, MI_HAS_LAST, MI_CODE]] = 0
        self._t = None

    def gain(self, t_s: float) -> float:
        """The current-loop filter's gain ``a`` for the step from the last call's time to ``t_s``
        (0 at the first call; 1 with ``lag_s = 0``); keeps ``t_s``."""
        dt = 0.0 if self._t is None else max(0.0, t_s - self._t)
        self._t = t_s
        lag = self.config.lag_s
        return 1.0 if lag == 0.0 else 1.0 - math.exp(-dt / lag) if dt > 0 else 0.0

    def update(self, t_s: float, fresh: Sequence[bool], replies: Sequence, commands: Sequence) -> list[int]:
        """Check one cycle; return the latched codes (one per motor).

        Parameters
        ----------
        t_s : float
            Time of this cycle [s] (the loop's clock).
        fresh : sequence of bool
            Whether motor j answered this cycle.
        replies : sequence of (p_rad, v_rad_s, t_nm, raw) or None
            Motor-side values of this cycle's reply and its raw fields (an int, or bytes read
            as a big-endian integer; compared for equality); ``None`` where there is none.
        commands : sequence of (p_des, v_des, kp, kd, t_ff)
            The command sent this cycle (decoded from its frame), motor side.
        """
        if not self.config.enabled:
            return self.codes
        n = self.n
        ok = np.array([bool(fresh[j]) and replies[j] is not None for j in range(n)], dtype=bool)
        rep = np.zeros((3, n))
        raw = np.zeros(n, dtype=np.int64)
        for j in np.flatnonzero(ok):
            p, v, t, r = replies[j]
            rep[:, j] = p, v, t
            raw[j] = int.from_bytes(r, "big") if isinstance(r, (bytes, bytearray)) else int(r)
        cmd = np.ascontiguousarray(np.array(commands, dtype=float).reshape(n, 5).T)
        self.step(t_s, ok, rep, raw, cmd)
        return self.codes

    def step(self, t_s: float, ok, rep, raw, cmd) -> None:
        """:meth:`update` on arrays (the rule's step at ``t_s``, the filter's gain from the last
        call's time): ``ok`` (n,) bool, ``rep`` (3, n) the replies' position, velocity and
        torque where ``ok``, ``raw`` (n,) int64 their raw fields, ``cmd`` (5, n) the commands."""
        cfg = self.config
        self._step(self._f, self._i, self.gain(t_s), ok, rep[0], rep[1], rep[2], raw, cmd, cfg.rel_tol,
                   cfg.window_cycles, cfg.frozen_cycles)


def follow_config(fs) -> FollowConfig:
    """The ``[driver.follow]`` table (all optional, see :class:`FollowConfig`)."""
    d = FollowConfig()
    kw = dict(enabled=fs.bool("enabled", d.enabled),
              lag_s=fs.float("lag_s", d.lag_s, minimum=0.0, maximum=0.1),
              # beyond any actuator's torque range here the limp check would never fire
              tol_nm=fs.float("tol_nm", None, minimum=0.0, strict_min=True, maximum=1e5) if fs.has("tol_nm") else None,
              rel_tol=fs.float("rel_tol", d.rel_tol, minimum=0.0, maximum=0.99),
              window_cycles=fs.int("window_cycles", d.window_cycles, minimum=1, maximum=10_000),
              frozen_cycles=fs.int("frozen_cycles", d.frozen_cycles, minimum=1, maximum=10_000))
    fs.finish()
    return FollowConfig(**kw)


#: added to :data:`FAULT_NOT_FOLLOWING` / :data:`FAULT_FROZEN` in the fault word of a torque-only
#: drive (:class:`TorqueFollow`): above every bit of the drives' own 32-bit error words (an ODrive
#: axis error 0x100 is DC_BUS_OVER_VOLTAGE), so a code is never read as the drive's own
HOST_FAULT_OFFSET = 1 << 32


#: :class:`TorqueFollow`'s absolute tolerance without ``tol_nm``: this share of the deliverable torque
TORQUE_ONLY_TOL = 0.0025


class TorqueFollow:
    """The follow rule of :class:`FollowMonitor` for drives that take a joint torque and report one.

    Expected torque: the commanded joint torque, clamped to the drive's deliverable torque
    (``t_max_nm``, joint side), through the current loop's lag; tolerance ``tol_nm`` or
    :data:`TORQUE_ONLY_TOL` of ``t_max_nm``, plus ``rel_tol``; the measured one is the
    driver's ``Feedback.torque_nm``.  Not following for ``window_cycles`` fresh replies (a
    drive saturated below its command, a limp one) or replies frozen for ``frozen_cycles``
    while the command moves (a drive that ignores its commands): the joint's fault is
    ``HOST_FAULT_OFFSET + code`` (when the drive reports none itself), and the supervisor stops
    the run (``device_fault``) in that cycle.

    Parameters
    ----------
    t_max_nm : sequence of float
        Each joint's deliverable torque [N m | N] (joint side).
    config : FollowConfig
    step : callable, optional
        :func:`follow_step` compiled (a driver's kernels); default: the plain Python rule.
    """

    def __init__(self, t_max_nm: Sequence[float], config: FollowConfig = FollowConfig(), *, step=None):
        if config.tol_nm is None:
            # a drive's reported torque is finer than the MIT fields' 12 bits (ODrive float32,
            # CiA 402 per mille of the rated torque, Dynamixel ~3 mA): a quarter of their 1 %
            tmax = [float(t) for t in t_max_nm]
            self.monitor = FollowMonitor(tmax, config)
            self.monitor._f[M_TOL] = [TORQUE_ONLY_TOL * t for t in tmax]
        else:
            self.monitor = FollowMonitor(t_max_nm, config)
        if step is not None:
            # the rule compiled by the driver's own kernels (the same function)
            self.monitor._step = step
        n = self.monitor.n
        # the step's arguments, filled in place every cycle: fresh replies, their values and raw
        # fields, the commands (only the torque row, 4, is not zero)
        self._ok = np.zeros(n, dtype=bool)
        self._rep = np.zeros((3, n))
        self._raw = np.zeros(n, dtype=np.int64)
        self._cmd = np.zeros((5, n))

    @property
    def config(self) -> FollowConfig:
        return self.monitor.config

    def reset(self, feedback) -> None:
        """Clear the latches at enable; the filter starts at the measured torque."""
        self.monitor.reset(np.asarray(feedback.torque_nm, dtype=float).tolist())

    def check(self, tau_cmd_nm, feedback) -> None:
        """Check one cycle: ``tau_cmd_nm`` (n,) the joint torques sent, ``feedback`` the cycle's
        :class:`~drivers.base.Feedback` (its ``fault`` is updated in place)."""
        mon = self.monitor
        if not mon.config.enabled:
            return
        tau = feedback.torque_nm
        fresh = feedback.fresh
        q = feedback.position_rad
        qd = feedback.velocity_rad_s
        ok, rep, raw = self._ok, self._rep, self._raw
        for j in range(mon.n):
            t = float(tau[j])
            if fresh[j] and math.isfinite(t):
                p = float(q[j])
                v = float(qd[j])
                if not math.isfinite(v):                  # as numpy.nan_to_num: NaN 0, inf the largest
                    v = 0.0 if v != v else math.copysign(sys.float_info.max, v)
                ok[j] = True
                rep[0, j] = p
                rep[1, j] = v
                rep[2, j] = t
                # "frozen" compares the whole reply (position, velocity, torque), as the MIT rule its
                # bytes: a saturated drive repeats its torque exactly while its joint moves
                raw[j] = hash((p, v, t))
            else:
                ok[j] = False
                rep[0, j] = rep[1, j] = rep[2, j] = 0.0
                raw[j] = 0
        self._cmd[4] = tau_cmd_nm
        mon.step(float(feedback.t_s), ok, rep, raw, self._cmd)
        fault = feedback.fault
        for j, c in enumerate(mon._i[MI_CODE].tolist()):
            if c and fault[j] == 0:
                fault[j] = HOST_FAULT_OFFSET + c
