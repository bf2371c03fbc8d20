"""Emulated CAN actuators on top of a :class:`~drivers.sim.plant.SimulatedPlant`.

The emulators speak the real protocols (through :mod:`drivers.codecs`), so the
real drivers can be run, unchanged, against a simulated robot:

* :class:`MitEmulator` -- one or more MIT "mini cheetah" protocol motors
  (CubeMars / T-Motor AK series in MIT mode);
* :class:`OdriveEmulator` -- one or more ODrive CANSimple axes;
* :class:`EmulatorHost` -- serves a set of devices on a python-can bus from a
  background thread (an in-process ``virtual`` channel, or ``udp_multicast``
  from a separate process, see :mod:`drivers.sim.serve`).

Time and determinism
--------------------
The host reads the control loop's clock ``now()`` when a frame arrives,
processes every timed device event due up to then (watchdog expiries,
cyclic broadcasts) *at its own due time*, advances the plant to ``now()``,
applies the command and replies.  The plant is therefore only ever advanced
to event times on the loop's clock; with a lock-step clock the physics is
deterministic given the command sequence, whatever the thread scheduling.
Reply latency is wall-clock time (it models the bus and the drive's
processing; it decides whether a reply makes the driver's deadline).

Joint <-> motor side
--------------------
Each motor/axis drives one plant joint through a
:class:`~drivers.base.JointMapping` (gear ratio, sign, offset, efficiency),
the same convention as the drivers: ``q = sign*p/G + offset``,
``tau_joint = sign*G*eff*tau_motor``.  A drive-side PD (MIT) with motor gains
``kp, kd`` is ``G**2 * eff * kp`` (``kd``) on the joint side.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import can

from dynamics.errors import (CommsError, CommsTimeoutError, ConfigError, DecodeError, DriverError,
                             TorqueloopError)
from ..base import JointMapping
from ..codecs import mit as mitc
from ..codecs import odrive as odc
from .plant import SimulatedPlant

__all__ = ["MitMotorConfig", "MitEmulator", "OdriveAxisConfig", "OdriveEmulator",
           "EmulatedDevice", "EmulatorHost", "InlineServedBus", "LocalBus"]

_TWO_PI = 2.0 * math.pi
#: timed events due up to this much after ``now()`` are processed (absorbs clock rounding
#: such as a loop clock accumulated as ``t += dt``)
_TIME_EPS_S = 1e-9


def _msg(arb_id: int, data: bytes) -> can.Message:
    return can.Message(arbitration_id=arb_id, data=data, is_extended_id=False)


class EmulatedDevice:
    """Interface of a device served by :class:`EmulatorHost`.

    A device owns some plant joints.  The host calls, from its thread:

    * :meth:`bind` once with the plant;
    * :meth:`next_timer_s` / :meth:`on_timer` for timed events on the loop
      clock (watchdogs, broadcasts), always in time order and before any frame
      received later;
    * :meth:`on_frame` for every received frame (return ``None`` when the
      frame is not for this device).
    """

    plant: SimulatedPlant | None = None

    def bind(self, plant: SimulatedPlant) -> None:
        self.plant = plant

    def next_timer_s(self) -> float:
        """Loop time [s] of the next timed event (``inf`` if none)."""
        return math.inf

    def on_timer(self, t_s: float) -> list[can.Message]:
        """Handle the timed event(s) due at ``t_s`` (the plant is already at ``t_s``)."""
        return []

    def on_frame(self, msg: can.Message, t_s: float) -> list[can.Message] | None:
        """Handle one frame at loop time ``t_s`` (plant already advanced)."""
        return None

    def accepts(self, msg: can.Message) -> bool:
        """Whether ``msg`` is addressed to this device (cheap pre-check)."""
        return False


# ---------------------------------------------------------------------------
# MIT protocol
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class MitMotorConfig:
    """One emulated MIT-protocol motor.

    Attributes
    ----------
    can_id : int
        The motor's CAN id (1..255); it answers frames with this id.
    joint : int
        Plant joint it drives.
    limits : MitLimits or str
        Protocol field ranges (or a key of :data:`drivers.codecs.mit.MIT_MODELS`).
    mapping : JointMapping
        Joint <-> motor side (must match the driver's).
    variant : {"classic6", "cubemars8"}
        Reply layout (``"servo7"`` is accepted as an alias of ``"cubemars8"``).
    temperature_c : float
        Driver temperature reported in the 8-byte reply [degC].
    """

    can_id: int
    joint: int
    limits: mitc.MitLimits | str = "AK80-9"
    mapping: JointMapping = field(default_factory=JointMapping)
    variant: str = "classic6"
    temperature_c: float = 35.0


class _MitState:
    __slots__ = ("cfg", "limits", "motor_mode", "zero_m", "last_cmd_t", "fault", "silent",
                 "temperature_c", "commands", "armed", "map")

    def __init__(self, cfg: MitMotorConfig, limits: mitc.MitLimits):
        self.cfg = cfg
        m = cfg.mapping
        # (sign, gear ratio, offset, efficiency) as floats for the hot path
        self.map = (float(m.sign), float(m.gear_ratio), float(m.offset_rad), float(m.efficiency))
        self.limits = limits
        self.motor_mode = False
        self.zero_m = 0.0          # raw motor position at the last "set zero"
        self.last_cmd_t = -math.inf
        self.fault = 0
        self.silent = False
        self.temperature_c = float(cfg.temperature_c)
        self.commands = 0          # commands applied to the plant (for tests)
        self.armed = False         # watchdog armed (a command is being held)


class MitEmulator(EmulatedDevice):
    """MIT-protocol motors ("mini cheetah" firmware behaviour).

    Behaviour per motor, as in the reference firmware: every 8-byte frame
    with the motor's id is answered with one reply (id ``reply_id``, motor id
    in byte 0) carrying the quantised position, velocity and torque;
    ``ENTER_MOTOR_MODE`` / ``EXIT_MOTOR_MODE`` switch the motor mode (outside
    it, commands are not applied and the torque is zero); ``SET_ZERO`` makes
    the current position the motor's zero.  Frames of another length are
    ignored without a reply (a real drive drops them).

    Parameters
    ----------
    motors : sequence of MitMotorConfig
        The motors (distinct ids, distinct joints).
    reply_id : int
        Arbitration id of the replies (the firmware's ``CAN_MASTER``, 0).
    watchdog_timeout_s : float, optional
        When no command frame arrives for this long (loop clock), the motor
        holds zero torque and zero gains until the next command (as the
        firmware's ``CAN_TIMEOUT``).  ``None`` disables it.

    Fault injection
    ---------------
    :meth:`inject_fault` latches an error code (see
    :data:`drivers.codecs.mit.MIT_ERROR_CODES`): the motor leaves motor mode,
    applies zero torque and reports the code in the 8-byte reply (the
    classic 6-byte reply cannot carry it).  ``EXIT_MOTOR_MODE`` clears the
    latch.  :meth:`set_silent` disconnects a motor from the bus (it neither
    applies nor answers frames; its held command is dropped by its watchdog).
    """

    def __init__(self, motors: Sequence[MitMotorConfig], *, reply_id: int = 0,
                 watchdog_timeout_s: float | None = None):
        motors = list(motors)
        if not motors:
            raise ConfigError("at least one motor is required", field="motors")
        self._by_id: dict[int, _MitState] = {}
        joints = set()
        for i, m in enumerate(motors):
            if not isinstance(m, MitMotorConfig):
                raise ConfigError(f"expected MitMotorConfig, got {type(m).__name__}",
                                  field=f"motors[{i}]")
            if isinstance(m.can_id, bool) or not isinstance(m.can_id, int) or not 1 <= m.can_id <= 0xFF:
                raise ConfigError(f"can_id must be an integer in 1..255, got {m.can_id!r}",
                                  field=f"motors[{i}].can_id")
            if m.can_id in self._by_id or m.can_id == reply_id:
                raise ConfigError(f"duplicate CAN id {m.can_id}", field=f"motors[{i}].can_id")
            if m.joint in joints:
                raise ConfigError(f"joint {m.joint} driven twice", field=f"motors[{i}].joint")
            joints.add(m.joint)
            lim = m.limits
            if isinstance(lim, str):
                if lim not in mitc.MIT_MODELS:
                    raise ConfigError(f"unknown MIT model {lim!r}; known: {sorted(mitc.MIT_MODELS)}",
                                      field=f"motors[{i}].limits")
                lim = mitc.MIT_MODELS[lim]
            try:
                mitc.reply_length(m.variant)
            except (DriverError, KeyError) as err:
                raise ConfigError(str(err), field=f"motors[{i}].variant") from err
            self._by_id[m.can_id] = _MitState(m, lim)
        self._reply_id = int(reply_id)
        if watchdog_timeout_s is not None:
            w = float(watchdog_timeout_s)
            if not math.isfinite(w) or w <= 0:
                raise ConfigError(f"must be > 0, got {watchdog_timeout_s!r}",
                                  field="watchdog_timeout_s")
            watchdog_timeout_s = w
        self._wd = watchdog_timeout_s
        self._lock = threading.RLock()

    # -- setup -----------------------------------------------------------------
    def bind(self, plant: SimulatedPlant) -> None:
        super().bind(plant)
        for st in self._by_id.values():
            j = st.cfg.joint
            if not 0 <= j < plant.n_joints:
                raise ConfigError(f"joint {j} out of range for a {plant.n_joints}-joint plant",
                                  field=f"motor {st.cfg.can_id}.joint")
            mp = st.cfg.mapping
            lim = abs(st.limits.t_max_nm * mp.gear_ratio * mp.efficiency)
            cur = plant.torque_limit_nm[j]
            plant.set_torque_limit([min(cur, lim)], joints=[j])

    @property
    def can_ids(self) -> tuple[int, ...]:
        return tuple(self._by_id)

    def motor_mode(self, can_id: int) -> bool:
        return self._state(can_id).motor_mode

    def commands_applied(self, can_id: int) -> int:
        """Number of command frames applied to the plant by this motor."""
        return self._state(can_id).commands

    def _state(self, can_id: int) -> _MitState:
        try:
            return self._by_id[can_id]
        except KeyError as err:
            raise DriverError(f"no emulated MIT motor with id {can_id}") from err

    # -- fault injection ---------------------------------------------------------
    def inject_fault(self, can_id: int, code: int = 1, *, temperature_c: float | None = None) -> None:
        """Latch error ``code`` (1 over-temperature, 2 over-current, ...) on a motor."""
        if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= 255:
            raise DriverError(f"fault code must be in 1..255, got {code!r}")
        with self._lock:
            st = self._state(can_id)
            st.fault = code
            if temperature_c is not None:
                st.temperature_c = float(temperature_c)
            self._zero_output(st)
            st.motor_mode = False
            self.plant.set_brake(True, joints=[st.cfg.joint])

    def set_silent(self, can_id: int, silent: bool = True) -> None:
        """Disconnect (``True``) or reconnect a motor from the bus."""
        with self._lock:
            self._state(can_id).silent = bool(silent)

    # -- behaviour -------------------------------------------------------------------
    def _zero_output(self, st: _MitState) -> None:
        self.plant.set_joint_command(st.cfg.joint, 0.0)
        st.armed = False

    def accepts(self, msg: can.Message) -> bool:
        return (not msg.is_extended_id and not msg.is_remote_frame
                and msg.arbitration_id in self._by_id)

    def next_timer_s(self) -> float:
        if self._wd is None:
            return math.inf
        with self._lock:
            return min((st.last_cmd_t + self._wd for st in self._by_id.values() if st.armed),
                       default=math.inf)

    def on_timer(self, t_s: float) -> list[can.Message]:
        with self._lock:
            for st in self._by_id.values():
                if st.armed and st.last_cmd_t + self._wd <= t_s:
                    self._zero_output(st)
        return []

    def on_frame(self, msg: can.Message, t_s: float) -> list[can.Message] | None:
        with self._lock:
            st = self._by_id.get(msg.arbitration_id)
            if st is None or msg.is_remote_frame or st.silent:
                return None
            data = bytes(msg.data)
            if len(data) != 8:
                return []
            kind = mitc.classify_command(data)
            cfg = st.cfg
            if kind == "enter":
                if st.fault == 0:
                    st.motor_mode = True
                    # the drive releases the joint's holding brake when it enters motor mode
                    self.plant.set_brake(False, joints=[cfg.joint])
                self._zero_output(st)
            elif kind == "exit":
                st.motor_mode = False
                st.fault = 0
                st.temperature_c = float(cfg.temperature_c)
                self._zero_output(st)
                self.plant.set_brake(True, joints=[cfg.joint])
            elif kind == "zero":
                q = self.plant.state.q[cfg.joint]
                st.zero_m = float(cfg.mapping.joint_to_motor_position(q))
            elif st.motor_mode:
                cmd = mitc.decode_command(data, st.limits)
                s, g, off, eff = st.map
                g2e = g * g * eff
                self.plant.set_joint_command(cfg.joint, s * cmd.t_nm * g * eff, cmd.kp * g2e,
                                             cmd.kd * g2e, s * (cmd.p_rad + st.zero_m) / g + off,
                                             s * cmd.v_rad_s / g)
                st.last_cmd_t = t_s
                st.armed = True
                st.commands += 1
            return [self._reply(st)]

    def _reply(self, st: _MitState) -> can.Message:
        _, q, qd, tau = self.plant.measure()
        cfg = st.cfg
        j = cfg.joint
        s, g, off, eff = st.map
        p = s * (float(q[j]) - off) * g - st.zero_m
        v = s * float(qd[j]) * g
        t = s * float(tau[j]) / (g * eff)
        data = mitc.encode_reply(cfg.can_id, p, v, t, st.limits, variant=cfg.variant,
                                 temperature_c=st.temperature_c, error=st.fault)
        return _msg(self._reply_id, data)


# ---------------------------------------------------------------------------
# ODrive CANSimple
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class OdriveAxisConfig:
    """One emulated ODrive axis.

    Attributes
    ----------
    node_id : int
        CANSimple node id (0..63).
    joint : int
        Plant joint it drives.
    mapping : JointMapping
        Joint <-> motor side (must match the driver's); its
        ``torque_constant_nm_per_a`` converts torque to the reported Iq.
    torque_limit_nm : float
        Motor torque limit (the drive's current limit times its torque
        constant) [N m]; ``inf`` = none.
    heartbeat_period_s : float or None
        Cyclic ``Heartbeat`` period on the loop clock (ODrive default 0.1 s);
        ``None`` = only on RTR request.  Cyclic messages are due at
        ``t0 + k * period``, k = 0, 1, ... (``t0`` of the emulator).
    encoder_period_s : float or None
        Cyclic ``Get_Encoder_Estimates`` period (ODrive default 0.01 s);
        ``None`` = only on RTR request.
    watchdog_timeout_s : float or None
        ODrive ``axis.config.watchdog_timeout`` (``enable_watchdog`` when not
        ``None``): in closed loop, when no frame addressed to the axis arrives
        for this long, the axis sets ``WATCHDOG_TIMER_EXPIRED`` and goes IDLE.
    bus_voltage_v : float
        Value of the ``Get_Bus_Voltage_Current`` answer.
    iq_period_s, torques_period_s : float or None
        Cyclic ``Get_Iq`` / ``Get_Torques`` periods (default: RTR only).
    """

    node_id: int
    joint: int
    mapping: JointMapping = field(default_factory=JointMapping)
    torque_limit_nm: float = math.inf
    heartbeat_period_s: float | None = 0.1
    encoder_period_s: float | None = 0.01
    watchdog_timeout_s: float | None = None
    bus_voltage_v: float = 24.0
    iq_period_s: float | None = None
    torques_period_s: float | None = None


_WATCHDOG_BIT = 0x1000000
_ESTOP_BIT = 0x2000000
_PERIODIC = ((odc.Cmd.HEARTBEAT, "heartbeat_period_s"),
             (odc.Cmd.GET_ENCODER_ESTIMATES, "encoder_period_s"),
             (odc.Cmd.GET_IQ, "iq_period_s"),
             (odc.Cmd.GET_TORQUES, "torques_period_s"))


class _AxisState:
    __slots__ = ("cfg", "state", "control_mode", "input_mode", "input_torque", "axis_error",
                 "procedure_result", "last_feed_t", "periods", "next_due", "count", "t0",
                 "silent", "commands")

    def __init__(self, cfg: OdriveAxisConfig, t0: float):
        self.cfg = cfg
        self.state = odc.AxisState.IDLE
        self.control_mode = odc.ControlMode.TORQUE_CONTROL
        self.input_mode = odc.InputMode.PASSTHROUGH
        self.input_torque = 0.0
        self.axis_error = 0
        self.procedure_result = int(odc.ProcedureResult.SUCCESS)
        self.last_feed_t = -math.inf
        self.periods = {cmd: getattr(cfg, name) for cmd, name in _PERIODIC
                        if getattr(cfg, name) is not None}
        # cyclic messages are due at t0 + k * period, k = 0, 1, ... (no accumulated rounding)
        self.t0 = t0
        self.count = {cmd: 0 for cmd in self.periods}
        self.next_due = {cmd: t0 for cmd in self.periods}
        self.silent = False
        self.commands = 0


class OdriveEmulator(EmulatedDevice):
    """ODrive axes speaking CANSimple (firmware 0.6 subset).

    Handled frames: ``Set_Axis_State`` (IDLE, CLOSED_LOOP_CONTROL; closed loop
    is refused, with ``procedure_result = DISARMED``, while an axis error is
    set), ``Set_Controller_Mode``, ``Set_Input_Torque`` (applied only in
    closed loop with ``TORQUE_CONTROL``), ``Clear_Errors``, ``Estop``,
    ``Reboot``; RTR requests for ``Heartbeat``, ``Get_Encoder_Estimates``,
    ``Get_Iq``, ``Get_Torques``, ``Get_Error``, ``Get_Bus_Voltage_Current``.
    ``Heartbeat``, ``Encoder_Estimates``, ``Iq`` and ``Torques`` are also
    broadcast at their configured periods of the loop clock.  Other commands
    are ignored.  Any data frame addressed to an axis feeds its watchdog.

    Fault injection: :meth:`inject_error` sets axis error bits (the axis
    disarms to IDLE, as the firmware does); :meth:`set_silent` disconnects an
    axis (no frames in or out).
    """

    def __init__(self, axes: Sequence[OdriveAxisConfig], *, t0_s: float = 0.0):
        axes = list(axes)
        if not axes:
            raise ConfigError("at least one axis is required", field="axes")
        self._axes: dict[int, _AxisState] = {}
        joints = set()
        for i, a in enumerate(axes):
            if not isinstance(a, OdriveAxisConfig):
                raise ConfigError(f"expected OdriveAxisConfig, got {type(a).__name__}",
                                  field=f"axes[{i}]")
            if isinstance(a.node_id, bool) or not isinstance(a.node_id, int) \
                    or not 0 <= a.node_id <= odc.MAX_NODE_ID:
                raise ConfigError(f"node_id must be in 0..{odc.MAX_NODE_ID}, got {a.node_id!r}",
                                  field=f"axes[{i}].node_id")
            if a.node_id in self._axes:
                raise ConfigError(f"duplicate node id {a.node_id}", field=f"axes[{i}].node_id")
            if a.joint in joints:
                raise ConfigError(f"joint {a.joint} driven twice", field=f"axes[{i}].joint")
            joints.add(a.joint)
            for name in ("heartbeat_period_s", "encoder_period_s", "watchdog_timeout_s",
                         "iq_period_s", "torques_period_s"):
                v = getattr(a, name)
                if v is not None and (not math.isfinite(float(v)) or float(v) <= 0):
                    raise ConfigError(f"must be > 0 or None, got {v!r}", field=f"axes[{i}].{name}")
            self._axes[a.node_id] = _AxisState(a, float(t0_s))
        self._lock = threading.RLock()

    def bind(self, plant: SimulatedPlant) -> None:
        super().bind(plant)
        for ax in self._axes.values():
            j = ax.cfg.joint
            if not 0 <= j < plant.n_joints:
                raise ConfigError(f"joint {j} out of range for a {plant.n_joints}-joint plant",
                                  field=f"axis {ax.cfg.node_id}.joint")
            mp = ax.cfg.mapping
            lim = abs(ax.cfg.torque_limit_nm * mp.gear_ratio * mp.efficiency)
            plant.set_torque_limit([min(plant.torque_limit_nm[j], lim)], joints=[j])

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(self._axes)

    def _axis(self, node_id: int) -> _AxisState:
        try:
            return self._axes[node_id]
        except KeyError as err:
            raise DriverError(f"no emulated ODrive axis with node id {node_id}") from err

    def axis_state(self, node_id: int) -> odc.AxisState:
        return self._axis(node_id).state

    def axis_error(self, node_id: int) -> int:
        return self._axis(node_id).axis_error

    def commands_applied(self, node_id: int) -> int:
        """Number of ``Set_Input_Torque`` frames applied to the plant by this axis."""
        return self._axis(node_id).commands

    # -- fault injection --------------------------------------------------------------
    def inject_error(self, node_id: int, bits: int = 0x2000) -> None:
        """Set axis error bits (default ``MOTOR_OVER_TEMP``); the axis goes IDLE."""
        if isinstance(bits, bool) or not isinstance(bits, int) or not 0 < bits < (1 << 32):
            raise DriverError(f"error bits must be a non-zero uint32, got {bits!r}")
        with self._lock:
            ax = self._axis(node_id)
            ax.axis_error |= bits
            self._disarm(ax)

    def set_silent(self, node_id: int, silent: bool = True) -> None:
        with self._lock:
            self._axis(node_id).silent = bool(silent)

    # -- behaviour ----------------------------------------------------------------------
    def _apply(self, ax: _AxisState) -> None:
        active = (ax.state == odc.AxisState.CLOSED_LOOP_CONTROL
                  and ax.control_mode == odc.ControlMode.TORQUE_CONTROL)
        t_m = ax.input_torque if active else 0.0
        lim = ax.cfg.torque_limit_nm
        t_m = min(max(t_m, -lim), lim)
        mp = ax.cfg.mapping
        self.plant.set_joint_command(ax.cfg.joint, mp.sign * t_m * mp.gear_ratio * mp.efficiency)

    def _disarm(self, ax: _AxisState) -> None:
        ax.state = odc.AxisState.IDLE
        ax.input_torque = 0.0
        self._apply(ax)
        self.plant.set_brake(True, joints=[ax.cfg.joint])

    def accepts(self, msg: can.Message) -> bool:
        return not msg.is_extended_id and (msg.arbitration_id >> 5) in self._axes

    def next_timer_s(self) -> float:
        with self._lock:
            t = math.inf
            for ax in self._axes.values():
                for due in ax.next_due.values():
                    if due < t:
                        t = due
                wd = ax.cfg.watchdog_timeout_s
                if wd is not None and ax.state == odc.AxisState.CLOSED_LOOP_CONTROL:
                    t = min(t, ax.last_feed_t + wd)
            return t

    def on_timer(self, t_s: float) -> list[can.Message]:
        out: list[can.Message] = []
        with self._lock:
            for ax in self._axes.values():
                wd = ax.cfg.watchdog_timeout_s
                if (wd is not None and ax.state == odc.AxisState.CLOSED_LOOP_CONTROL
                        and ax.last_feed_t + wd <= t_s):
                    ax.axis_error |= _WATCHDOG_BIT
                    self._disarm(ax)
                for cmd, due in ax.next_due.items():
                    if due <= t_s:
                        ax.count[cmd] += 1
                        ax.next_due[cmd] = ax.t0 + ax.count[cmd] * ax.periods[cmd]
                        if not ax.silent:
                            out.extend(self._rtr(ax, cmd))
        return out

    def _heartbeat(self, ax: _AxisState) -> can.Message:
        return _msg(odc.arbitration_id(ax.cfg.node_id, odc.Cmd.HEARTBEAT),
                    odc.encode_heartbeat(ax.axis_error, ax.state, ax.procedure_result, True))

    def _encoder(self, ax: _AxisState) -> can.Message:
        _, q, qd, _tau = self.plant.measure()
        mp = ax.cfg.mapping
        j = ax.cfg.joint
        pos = float(mp.joint_to_motor_position(q[j])) / _TWO_PI
        vel = float(mp.joint_to_motor_velocity(qd[j])) / _TWO_PI
        return _msg(odc.arbitration_id(ax.cfg.node_id, odc.Cmd.GET_ENCODER_ESTIMATES),
                    odc.encode_encoder_estimates(pos, vel))

    def _rtr(self, ax: _AxisState, cmd: int) -> list[can.Message]:
        node = ax.cfg.node_id
        if cmd == odc.Cmd.HEARTBEAT:
            return [self._heartbeat(ax)]
        if cmd == odc.Cmd.GET_ENCODER_ESTIMATES:
            return [self._encoder(ax)]
        if cmd == odc.Cmd.GET_TORQUES or cmd == odc.Cmd.GET_IQ:
            tau = self.plant.applied_torque_nm[ax.cfg.joint]
            t_m = float(ax.cfg.mapping.joint_to_motor_torque(tau))
            if cmd == odc.Cmd.GET_TORQUES:
                data = odc.encode_torques(ax.input_torque, t_m)
            else:
                kt = ax.cfg.mapping.torque_constant_nm_per_a
                data = odc.encode_iq(ax.input_torque / kt, t_m / kt)
            return [_msg(odc.arbitration_id(node, cmd), data)]
        if cmd == odc.Cmd.GET_ERROR:
            return [_msg(odc.arbitration_id(node, cmd), odc.encode_error_status(ax.axis_error, 0))]
        if cmd == odc.Cmd.GET_BUS_VOLTAGE_CURRENT:
            return [_msg(odc.arbitration_id(node, cmd),
                         odc.encode_bus_voltage_current(ax.cfg.bus_voltage_v, 0.0))]
        return []

    def on_frame(self, msg: can.Message, t_s: float) -> list[can.Message] | None:
        if msg.is_extended_id:
            return None
        node, cmd = msg.arbitration_id >> 5, msg.arbitration_id & 0x1F
        with self._lock:
            ax = self._axes.get(node)
            if ax is None or ax.silent:
                return None
            if msg.is_remote_frame:
                return self._rtr(ax, cmd)
            data = bytes(msg.data)
            try:
                return self._command(ax, cmd, data, t_s)
            except DecodeError:
                # a malformed frame is dropped by the firmware: no state change
                return []

    def _command(self, ax: _AxisState, cmd: int, data: bytes, t_s: float) -> list[can.Message]:
        if cmd in (odc.Cmd.HEARTBEAT, odc.Cmd.GET_ENCODER_ESTIMATES, odc.Cmd.GET_TORQUES,
                   odc.Cmd.GET_ERROR, odc.Cmd.GET_BUS_VOLTAGE_CURRENT, odc.Cmd.GET_IQ):
            return []  # our own message types sent by someone else
        ax.last_feed_t = t_s
        if cmd == odc.Cmd.SET_AXIS_STATE:
            req = odc.decode_set_axis_state(data)
            if req == odc.AxisState.CLOSED_LOOP_CONTROL:
                if ax.axis_error:
                    ax.procedure_result = int(odc.ProcedureResult.DISARMED)
                    return []
                ax.state = req
                ax.input_torque = 0.0
                ax.procedure_result = int(odc.ProcedureResult.SUCCESS)
                self._apply(ax)
                # firmware 0.6 mechanical brake: released in closed loop, applied when idle
                self.plant.set_brake(False, joints=[ax.cfg.joint])
            elif req == odc.AxisState.IDLE:
                self._disarm(ax)
            else:
                ax.procedure_result = int(odc.ProcedureResult.INVALID_STATE)
        elif cmd == odc.Cmd.SET_CONTROLLER_MODE:
            mode = odc.decode_set_controller_mode(data)
            ax.control_mode = mode.control_mode
            ax.input_mode = mode.input_mode
            self._apply(ax)
        elif cmd == odc.Cmd.SET_INPUT_TORQUE:
            t_m = odc.decode_set_input_torque(data)
            if ax.state == odc.AxisState.CLOSED_LOOP_CONTROL:
                ax.input_torque = t_m
                self._apply(ax)
                ax.commands += 1
        elif cmd == odc.Cmd.CLEAR_ERRORS:
            odc.decode_clear_errors(data)
            ax.axis_error = 0
            ax.procedure_result = int(odc.ProcedureResult.SUCCESS)
        elif cmd == odc.Cmd.ESTOP:
            ax.axis_error |= _ESTOP_BIT
            self._disarm(ax)
        elif cmd == odc.Cmd.REBOOT:
            ax.axis_error = 0
            self._disarm(ax)
        return []


# ---------------------------------------------------------------------------
# hosting
# ---------------------------------------------------------------------------
class EmulatorHost:
    """Serve emulated devices on one or more python-can buses from one background thread.

    Parameters
    ----------
    bus : python-can bus, or sequence of buses
        The devices' side of the bus (e.g. ``can.Bus(interface="virtual",
        channel=name)``, another instance on the same channel as the driver).
        Several buses: one thread serves them all, so the timed events of
        every device are processed in one global time order (deterministic
        with a lock-step clock).
    devices : sequence of EmulatedDevice, or sequence of such sequences
        Devices sharing ``plant``; with several buses, one sequence per bus.
    plant : SimulatedPlant
    now : callable () -> float
        The control loop's clock [s].
    reply_latency_s : float
        Wall-clock delay before each reply/broadcast is put on the bus.
    poll_s : float
        ``recv`` timeout of the serving loop (timed events are checked at least
        this often).
    own_bus : bool
        Shut the bus(es) down in :meth:`close`.
    start : bool
        Start the thread immediately (else call :meth:`start`).
    serve : {"thread", "inline"}
        ``"thread"``: a background thread serves the devices (any clock).
        ``"inline"``: no thread; the devices are served in the caller's thread
        by :meth:`pump`, which :class:`InlineServedBus` (the driver's side of
        the bus) calls on every send and receive.  Only for a lock-step clock
        (the loop time does not move while the driver waits, so serving a frame
        when it is sent is the same as serving it from a thread, without the
        thread hand-offs) and ``reply_latency_s = 0``.

    Notes
    -----
    An exception in the serving thread stops it; it is re-raised by
    :meth:`check`, :meth:`stop` and :meth:`close` (python-can errors wrapped in
    :class:`~dynamics.errors.CommsError`).
    """

    def __init__(self, bus, devices, plant: SimulatedPlant,
                 now: Callable[[], float], *, reply_latency_s: float = 0.0, poll_s: float = 0.001,
                 own_bus: bool = False, start: bool = True, serve: str = "thread"):
        if serve not in ("thread", "inline"):
            raise ConfigError(f"must be 'thread' or 'inline', got {serve!r}", field="serve")
        if serve == "inline" and float(reply_latency_s) != 0.0:
            raise ConfigError("inline serving needs reply_latency_s = 0", field="serve")
        self._inline = serve == "inline"
        if isinstance(bus, (list, tuple)):
            buses = list(bus)
            groups = [list(g) for g in devices]
            if len(groups) != len(buses) or not buses:
                raise ConfigError(f"{len(buses)} buses need as many device lists, got {len(groups)}",
                                  field="devices")
        else:
            buses = [bus]
            groups = [list(devices)]
        self._buses = buses
        self._bus = buses[0]
        self._devices: list[EmulatedDevice] = []
        self._dev_bus: list = []            # bus of each device (same order)
        self._bus_devices: dict[int, list] = {}
        for b, g in zip(buses, groups):
            if not g:
                raise ConfigError("at least one device is required per bus", field="devices")
            self._bus_devices[id(b)] = g
            for d in g:
                if not isinstance(d, EmulatedDevice):
                    raise ConfigError(f"expected an EmulatedDevice, got {type(d).__name__}",
                                      field="devices")
                self._devices.append(d)
                self._dev_bus.append(b)
        if not isinstance(plant, SimulatedPlant):
            raise ConfigError(f"plant must be a SimulatedPlant, got {type(plant).__name__}",
                              field="plant")
        if not callable(now):
            raise ConfigError("now must be callable", field="now")
        lat = float(reply_latency_s)
        if not math.isfinite(lat) or lat < 0:
            raise ConfigError(f"must be finite and >= 0, got {reply_latency_s!r}",
                              field="reply_latency_s")
        p = float(poll_s)
        if not math.isfinite(p) or p <= 0:
            raise ConfigError(f"must be > 0, got {poll_s!r}", field="poll_s")
        self._plant = plant
        self._now = now
        self._latency = lat
        self._poll = p
        self._own_bus = own_bus
        for d in self._devices:
            d.bind(plant)
        self._outq: list = []          # heap of (wall_release, seq, bus, msg)
        self._seq = itertools.count()
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._idle_count = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.frames_in = 0
        self.frames_out = 0
        self._started = False
        self._failed = False       # inline: serving stopped by an error (like a dead thread)
        if start:
            self.start()

    @property
    def plant(self) -> SimulatedPlant:
        return self._plant

    @property
    def devices(self) -> tuple[EmulatedDevice, ...]:
        return tuple(self._devices)

    @property
    def buses(self) -> tuple:
        return tuple(self._buses)

    @property
    def inline(self) -> bool:
        """Whether the devices are served inline by :meth:`pump` (no thread)."""
        return self._inline

    @property
    def running(self) -> bool:
        if self._inline:
            return self._started and not self._closed and not self._failed
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the serving thread (no-op when running); inline: start serving in :meth:`pump`."""
        if self._closed:
            raise DriverError("emulator host is closed")
        if self.running:
            return
        if self._inline:
            self._started = True
            self._failed = False
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="torqueloop-emulator-host",
                                        daemon=True)
        self._thread.start()

    # -- event processing (serving thread, or handle() when not threaded) ----------
    def _advance(self, t: float, emit) -> None:
        """Process every timed device event due up to ``t``, then advance the plant to ``t``."""
        plant = self._plant
        devices = self._devices
        while True:
            te, k = math.inf, -1
            for i, d in enumerate(devices):
                tn = d.next_timer_s()
                if tn < te:
                    te, k = tn, i
            if k < 0 or te > t + _TIME_EPS_S:
                break
            # an event due within _TIME_EPS_S after t is handled at t (before any frame at t)
            plant.advance_to(min(max(te, plant.t_s), t))
            frames = devices[k].on_timer(te)
            if frames:
                emit(frames, self._dev_bus[k])
        plant.advance_to(t)

    def _process(self, msg: can.Message | None, bus, emit) -> None:
        t = self._now()
        self._advance(t, emit)
        if msg is not None:
            for d in self._bus_devices[id(bus)]:
                if d.accepts(msg):
                    r = d.on_frame(msg, t)
                    if r:
                        emit(r, bus)

    def handle(self, msg: can.Message | None, bus=None) -> list[can.Message]:
        """Process one frame received on ``bus`` (default: the first), or only the timers
        when ``msg`` is ``None``, at ``now()``.

        Returns the frames to send (nothing is sent).  For single-threaded
        tests; the serving thread does the same and sends the frames as they
        are produced.
        """
        out: list[can.Message] = []
        self._process(msg, self._bus if bus is None else bus, lambda frames, _b: out.extend(frames))
        return out

    def _send_due(self) -> None:
        now = time.monotonic()
        while self._outq and self._outq[0][0] <= now:
            _, _, bus, m = heapq.heappop(self._outq)
            bus.send(m)
            self.frames_out += 1

    def _queue(self, frames: list[can.Message], bus) -> None:
        if self._latency == 0.0:
            for m in frames:
                bus.send(m)
                self.frames_out += 1
            return
        release = time.monotonic() + self._latency
        for m in frames:
            heapq.heappush(self._outq, (release, next(self._seq), bus, m))

    def _recv(self, wait: float):
        """Next frame from any bus as ``(msg, bus)``, or ``(None, None)`` after ``wait`` [s]."""
        buses = self._buses
        if len(buses) == 1:
            return buses[0].recv(wait), buses[0]
        deadline = time.monotonic() + wait
        while True:
            for b in buses:
                m = b.recv(0.0)
                if m is not None:
                    return m, b
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, None
            m = buses[0].recv(min(remaining, 0.0002))
            if m is not None:
                return m, buses[0]

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                wait = self._poll
                if self._outq:
                    wait = max(0.0, min(wait, self._outq[0][0] - time.monotonic()))
                msg, bus = self._recv(wait)
                if msg is not None:
                    self.frames_in += 1
                self._process(msg, bus, self._queue)
                self._send_due()
                if msg is None:
                    with self._idle:
                        self._idle_count += 1
                        self._idle.notify_all()
        except BaseException as err:  # re-raised in check()/stop(); the thread must not die silently
            self._error = err
        finally:
            with self._idle:
                self._idle.notify_all()

    def pump(self, idle: bool = True) -> None:
        """Inline serving: process every frame pending on the devices' buses, then the timers due.

        Does what one pass of the serving thread does until its buses are empty
        (frames in arrival order, polling the buses in order as the thread does),
        then, with ``idle``, an idle poll (timed events due at ``now()``; every
        frame is processed after the events due before it anyway).  An error stops the
        serving, as it would stop the thread: it is kept and re-raised by
        :meth:`check`, and later pumps do nothing.  No-op for a threaded host,
        a host not started or closed, or after an error.
        """
        if not self._inline or not self._started or self._closed or self._failed:
            return
        try:
            buses = self._buses
            while True:
                for b in buses:
                    msg = b.recv(0.0)
                    if msg is not None:
                        self.frames_in += 1
                        self._process(msg, b, self._queue)
                        break
                else:
                    break
            if idle:
                self._process(None, None, self._queue)
        except Exception as err:  # noqa: BLE001 - kept and re-raised by check(), like the thread's
            self._error = err
            self._failed = True

    def sync(self, timeout_s: float = 5.0) -> None:
        """Block until every frame sent to the devices before this call was processed.

        Waits for the serving thread to complete an idle poll (no frame
        pending) that started after the call, so all frames already on the bus
        were handled and the plant was advanced to at least the ``now()`` of
        the call.  Useful with a lock-step clock after a large time step.

        Raises
        ------
        CommsTimeoutError
            Not synchronised within ``timeout_s`` (wall clock).
        """
        if self._inline:
            self.pump()
            self.check()
            if not self.running:
                raise DriverError("emulator host is not running")
            return
        deadline = time.monotonic() + timeout_s
        with self._idle:
            target = self._idle_count + 2
            while self._idle_count < target:
                if self._error is not None or not self.running:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CommsTimeoutError(f"emulator host not idle within {timeout_s} s")
                self._idle.wait(min(remaining, 0.05))
        self.check()
        if not self.running:
            raise DriverError("emulator host is not running")

    # -- control ----------------------------------------------------------------------------
    def check(self) -> None:
        """Re-raise an exception that stopped the serving thread."""
        err = self._error
        if err is None:
            return
        self._error = None
        if isinstance(err, TorqueloopError):
            raise err
        if isinstance(err, can.CanError):
            raise CommsError(f"emulator host bus error: {err}") from err
        raise err

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop and join the serving thread (idempotent); re-raise its error if any."""
        self._stop.set()
        self._started = False
        th = self._thread
        if th is not None and th.is_alive() and th is not threading.current_thread():
            th.join(timeout_s)
            if th.is_alive():
                raise CommsError("emulator host thread did not stop")
        self._thread = None
        self.check()

    def close(self) -> None:
        """Stop the thread and (if owned) shut the bus(es) down; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self.stop()
        finally:
            if self._own_bus:
                for b in self._buses:
                    b.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class InlineServedBus:
    """The driver's side of a bus served by an inline :class:`EmulatorHost`.

    Wraps a python-can bus: :meth:`send` sends, then lets the host serve
    (so the reply is queued before ``send`` returns); :meth:`recv` lets the
    host serve, then receives.  Everything else is the wrapped bus's.  The
    driver's code is unchanged: it sees an ordinary bus.
    """

    def __init__(self, bus, host: EmulatorHost | None = None):
        self._bus = bus
        #: the serving host (``None``: not attached yet, a plain bus)
        self.host = host

    @property
    def inner(self):
        """The wrapped bus."""
        return self._bus

    def send(self, msg, timeout: float | None = None) -> None:
        self._bus.send(msg, timeout)
        if self.host is not None:
            self.host.pump(idle=False)

    def recv(self, timeout: float | None = None):
        host = self.host
        if host is not None:
            msg = self._bus.recv(0.0)
            if msg is not None:
                return msg
            host.pump()
        return self._bus.recv(timeout)

    def shutdown(self) -> None:
        self._bus.shutdown()

    def __getattr__(self, name):
        if name in ("_bus", "host"):
            raise AttributeError(name)
        return getattr(self._bus, name)


class LocalBus:
    """One end of an in-process, point-to-point CAN channel (python-can-like bus).

    A lighter stand-in for python-can's ``virtual`` interface for the inline
    emulator: a sent frame is copied into the peer's receive queue with the
    same fields a ``virtual`` bus sets (``timestamp = time.time()``, the
    channel name, ``is_rx``) but without ``copy.deepcopy`` and ``queue.Queue``.
    Create the two ends with :meth:`pair`.  Thread-safe; ``recv`` with a
    timeout blocks until a frame arrives or the timeout passes.
    """

    def __init__(self, channel: str):
        self.channel_info = f"local {channel}"
        self._channel = channel
        self._rx: collections.deque = collections.deque()   # appends/pops are atomic
        self._cond = threading.Condition()
        self._waiting = 0          # receivers blocked in recv (set under _cond)
        self._peer: LocalBus | None = None
        self._open = True

    @classmethod
    def pair(cls, channel: str) -> tuple["LocalBus", "LocalBus"]:
        """The two connected ends of a new channel."""
        a, b = cls(channel), cls(channel)
        a._peer, b._peer = b, a
        return a, b

    def _check_open(self) -> None:
        if not self._open:
            raise can.CanOperationError("Cannot operate on a closed bus")

    def send(self, msg: can.Message, timeout: float | None = None) -> None:
        self._check_open()
        peer = self._peer
        if peer is None or not peer._open:
            return  # nobody listening (a virtual bus drops it too)
        cp = can.Message(timestamp=time.time(), arbitration_id=msg.arbitration_id,
                         is_extended_id=msg.is_extended_id, is_remote_frame=msg.is_remote_frame,
                         is_error_frame=msg.is_error_frame, channel=self._channel, dlc=msg.dlc,
                         data=msg.data, is_fd=msg.is_fd, is_rx=True, bitrate_switch=msg.bitrate_switch,
                         error_state_indicator=msg.error_state_indicator, check=False)
        peer._rx.append(cp)
        if peer._waiting:
            # a receiver set _waiting under the lock before testing the queue, so
            # either it sees this frame or it is waiting and gets this notification
            with peer._cond:
                peer._cond.notify_all()

    def recv(self, timeout: float | None = None) -> can.Message | None:
        self._check_open()
        rx = self._rx
        if rx:
            return rx.popleft()
        if timeout is not None and timeout <= 0:
            return None
        with self._cond:
            self._waiting += 1
            try:
                if not self._cond.wait_for(lambda: rx or not self._open, timeout):
                    return None
            finally:
                self._waiting -= 1
            self._check_open()
            return rx.popleft()

    def set_filters(self, filters=None) -> None:
        if filters:
            raise can.CanInterfaceNotImplementedError("LocalBus has no receive filters")

    def flush_tx_buffer(self) -> None:
        return None

    def fileno(self) -> int:
        return -1

    @property
    def protocol(self):
        return can.CanProtocol.CAN_20

    def shutdown(self) -> None:
        with self._cond:
            self._open = False
            self._cond.notify_all()
