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
rule's one source (in :mod:`drivers._follow_rule`, re-exported here): plain Python for
:meth:`FollowMonitor.update`, compiled by :mod:`drivers._mit_kernels` for the MIT driver's cycle
and by :mod:`drivers._follow_kernels` for the torque-only drivers' :class:`TorqueFollow` (this
module imports no numba: that kernel module loads when the first :class:`TorqueFollow` is built,
not when a driver module is imported).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dynamics.errors import ConfigError, DriverError

# the rule's step, its state's layout and its codes: drivers._follow_rule (a kernel source: the
# compiled checks read them), re-exported here
from ._follow_rule import (FAULT_FROZEN, FAULT_NOT_FOLLOWING, HOST_FAULT_OFFSET, M_RESID, M_ROWS,  # noqa: F401
                           M_TMAX, M_TOL, M_U, M_X, M_XHI, M_XLO, MI_BAD, MI_CODE, MI_HAS_LAST, MI_LAST,
                           MI_ROWS, MI_SAME, follow_step)

__all__ = ["FollowConfig", "FollowMonitor", "TorqueFollow", "follow_config", "follow_step", "host_fault_text",
           "FAULT_NOT_FOLLOWING", "FAULT_FROZEN", "HOST_FAULT_OFFSET", "TORQUE_ONLY_TOL"]


#: the rule's fault codes -> what they mean
FAULT_NAMES = {
    FAULT_NOT_FOLLOWING: "the measured torque does not follow the command (a limp or saturated drive?)",
    FAULT_FROZEN: "the replies repeat while the command changes (the drive's control loop stopped? "
                  "a drive that rebooted and ignores commands?)",
}


def host_fault_text(code: int) -> str | None:
    """What a torque-only driver's ``HOST_FAULT_OFFSET + code`` fault means (this rule's checks,
    made by the host, not reported by the drive), or None for any other code."""
    if code < HOST_FAULT_OFFSET:
        return None
    c = code - HOST_FAULT_OFFSET
    return f"{FAULT_NAMES.get(c, 'a host check')} (the host's check, code 0x{c:X})"


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

    :meth:`check` runs :func:`drivers._follow_kernels.torque_check` (the rule compiled).
    """

    def __init__(self, t_max_nm: Sequence[float], config: FollowConfig = FollowConfig()):
        if config.tol_nm is None:
            # a drive's reported torque is finer than the MIT fields' 12 bits (ODrive float32,
            # CiA 402 per mille of the rated torque, Dynamixel ~3 mA): a quarter of their 1 %
            tmax = [float(t) for t in t_max_nm]
            self.monitor = FollowMonitor(tmax, config)
            self.monitor._f[M_TOL] = [TORQUE_ONLY_TOL * t for t in tmax]
        else:
            self.monitor = FollowMonitor(t_max_nm, config)
        # the compiled cycle (numba) loads with the first TorqueFollow, not with the driver
        # modules: importing a torque-only driver stays free of numba's import (~0.6 s)
        from . import _follow_kernels
        self._kernel = _follow_kernels.torque_check
        n = self.monitor.n
        # the kernel's scratch, filled in place every cycle (drivers._follow_kernels.W_*), and the
        # reply kept last for the "same reply" test
        self._w = np.zeros((_follow_kernels.W_ROWS, n))
        self._raw = np.zeros(n, dtype=np.int64)
        self._ok = np.zeros(n, dtype=bool)

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
        cfg = mon.config
        if not cfg.enabled:
            return
        args = (feedback.torque_nm, feedback.fresh, feedback.position_rad, feedback.velocity_rad_s, tau_cmd_nm)
        fault = feedback.fault
        a = mon.gain(float(feedback.t_s))
        try:
            done = self._kernel(mon._f, mon._i, self._w, self._raw, self._ok, a, cfg.rel_tol, cfg.window_cycles,
                         cfg.frozen_cycles, *args, fault)
        except TypeError:
            # numba found no compiled version for these argument types (a list, another dtype):
            # the same values as the arrays it takes, the faults written back
            args = [np.ascontiguousarray(x, dtype=bool if k == 1 else float) for k, x in enumerate(args)]
            f = np.array(fault, dtype=np.int64)
            done = self._kernel(mon._f, mon._i, self._w, self._raw, self._ok, a, cfg.rel_tol, cfg.window_cycles,
                                cfg.frozen_cycles, *args, f)
            fault[:] = f
        if not done:
            raise DriverError(f"follow check of {mon.n} joints given vectors of another length (torques sent: "
                              f"{np.shape(tau_cmd_nm)}, feedback: {np.shape(feedback.torque_nm)})")
