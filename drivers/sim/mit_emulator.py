"""Emulated MIT-protocol motors (CubeMars / T-Motor AK series in MIT mode, mini cheetah drives).

What the emulator does, and the firmware behaviour it follows
------------------------------------------------------------
Sources: the CubeMars "AK Series Actuator Driver Manual" V1.0.8, section 5.3 (MIT
power mode, p. 48-51), and B. Katz' mini cheetah motor-controller firmware
(``CAN_com.cpp``, ``main.cpp``), from which the AK drives' MIT mode descends.

* **Frames it answers**: classic data frames with the motor's 11-bit id and exactly
  8 data bytes (the manual's command is "DLC: 8 bytes", p. 48).  Each is answered
  with one reply (arbitration id ``reply_id``, the manual's "0X00", motor id in
  byte 0) carrying the state at that moment, as the firmware packs its reply in the
  receive interrupt.  Remote frames, error frames, extended ids, other ids and
  frames of another length are ignored without a reply and change nothing (the
  manual defines no answer to them; the closed CubeMars firmware cannot be checked,
  so the emulator takes the conservative reading: not a command).
* **Special frames** (seven ``0xFF`` then ``0xFC`` / ``0xFD`` / ``0xFE``, p. 48):
  enter motor mode (refused while an error is latched), exit motor mode (clears
  the latch, zero torque), set zero (the current position becomes 0).  All three
  are answered, the manual's way to read the state without moving (p. 48).  Any
  other ``0xFF x 7`` frame is an ordinary command, as in the firmware.
* **Commands** apply only in motor mode.  Every field is clamped by its fixed-point
  range (a 12-bit field cannot say more than ``t_max``); the total torque
  (feed-forward plus the drive-side PD) is clamped to the model's torque range at the
  plant (:meth:`MitEmulator.bind`).
* **Watchdog**: the CubeMars manual documents none for MIT mode, so by default
  there is none: a motor holds its last command until told otherwise (which is why
  the driver must send EXIT_MOTOR_MODE and check it was answered).
  ``watchdog_timeout_s`` emulates the mini cheetah firmware's optional CAN timeout
  (``CAN_TIMEOUT``): no command for that long and the motor holds zero torque and
  zero gains (still in motor mode) until the next command.
* **A run of commands at one time** (:meth:`MitEmulator.on_batch`, an inline host on a
  lock-step clock): served by one compiled call exactly as frame by frame, or declined
  (then served frame by frame) for anything but plain torque commands to healthy drives
  in motor mode.
* **Never stops serving**: nothing a frame can contain raises out of
  :meth:`MitEmulator.on_frame` (fuzzed in the suite and by
  ``benchmarks/bench_mit_emulator_fuzz.py``).

Device faults (what a real drive can do that the bus cannot show)
------------------------------------------------------------------
:meth:`MitEmulator.inject_fault` latches an error code: the motor leaves motor mode,
applies zero torque and reports the code in the 8-byte reply only.
:meth:`MitEmulator.set_device_fault` sets a fault the drive does *not* report:

* ``"limp"``: the power stage gives no torque (and the measured current, hence the
  reply's torque field, decays to zero through the current-loop lag) while the logic
  keeps answering normally;
* ``"frozen"``: the drive's control loop stops: its last command stays applied and
  every reply repeats the last one byte for byte.

:meth:`MitEmulator.schedule_device_fault` starts one at a given loop time (used by
``[driver.faults] device_fault`` in :mod:`drivers.sim.build`).  :meth:`set_silent`
disconnects a motor from the bus.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Sequence

import can
import numpy as np

from dynamics.errors import ConfigError, DriverError
from ..base import JointMapping
from ..codecs import mit as mitc
from . import _mit_kernel as _mk
from .emulators import EmulatedDevice, _msg
from .plant import Plant

__all__ = ["MitMotorConfig", "MitEmulator", "MIT_DEVICE_FAULTS"]

#: device faults the drive does not report (see the module docstring)
MIT_DEVICE_FAULTS = ("limp", "frozen")


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


def _array_slot(arr: str, col: int, kind):
    """A :class:`_MitState` attribute kept in column ``col`` of the motor's row of the emulator's
    per-motor array (``arr`` the state's view of that row), where the compiled batch path reads
    and writes it."""
    if arr == "_v":
        return property(lambda st: kind(st._v[col]), lambda st, value: st._v.__setitem__(col, value))
    return property(lambda st: kind(st._w[col]), lambda st, value: st._w.__setitem__(col, value))


class _MitState:
    __slots__ = ("cfg", "limits", "motor_mode", "silent", "map", "device_fault", "scheduled",
                 "joint", "g2e", "ge", "values", "enc_p", "enc_v", "enc_t", "reply_head", "reply8", "K",
                 "index", "_v", "_w", "_r", "_last_reply")

    # the state the compiled batch path (drivers.sim._mit_kernel.mit_command_batch) reads or
    # writes lives in the emulator's arrays V, W, R (row ``index``)
    zero_m = _array_slot("_v", _mk.V_ZERO, float)            # raw motor position at the last "set zero"
    temperature_c = _array_slot("_v", _mk.V_TEMP, float)
    last_cmd_t = _array_slot("_v", _mk.V_LAST_T, float)
    fault = _array_slot("_w", _mk.W_FAULT, int)
    commands = _array_slot("_w", _mk.W_COMMANDS, int)        # commands applied to the plant (for tests)
    received = _array_slot("_w", _mk.W_RECEIVED, int)        # command frames received in motor mode
    armed = _array_slot("_w", _mk.W_ARMED, bool)             # watchdog armed (a command is being held)

    def __init__(self, cfg: MitMotorConfig, limits: mitc.MitLimits, index: int, V: np.ndarray, W: np.ndarray,
                 R: np.ndarray, K: np.ndarray):
        self.cfg = cfg
        #: the motor's place in MitEmulator._states (and _dues) and its row of V, W, R, K
        self.index = index
        # memoryviews of the motor's rows: an item read or written is a Python float or int, at
        # a fraction of a numpy scalar's cost (the per-frame path touches several per frame)
        self._v, self._w, self._r = memoryview(V[index]), memoryview(W[index]), memoryview(R[index])
        self._last_reply: bytes | None = None
        m = cfg.mapping
        # (sign, gear ratio, offset, efficiency) as floats for the hot path
        self.map = (float(m.sign), float(m.gear_ratio), float(m.offset_rad), float(m.efficiency))
        self.limits = limits
        self.motor_mode = False
        self.zero_m = 0.0
        self.last_cmd_t = -math.inf
        self.fault = 0
        self.silent = False
        self.temperature_c = float(cfg.temperature_c)
        self.commands = 0
        self.received = 0
        self.armed = False
        self.device_fault: str | None = None       # "limp" / "frozen" (not reported)
        self.scheduled: tuple[float, str] | None = None
        self.last_reply = None
        # the per-frame path's constants and this drive's codec (drivers.codecs.mit's
        # per-drive functions: the values of decode_command_values / encode_reply, bit for bit)
        self.joint = cfg.joint
        _, g, _, eff = self.map
        self.g2e = g * g * eff     # joint-side PD gain of a motor-side gain
        self.ge = g * eff          # joint torque of a motor torque
        self.values = mitc.command_values_decoder(limits)
        self.enc_p = mitc.field_encoder(-limits.p_max_rad, limits.p_max_rad, 16)
        self.enc_v = mitc.field_encoder(-limits.v_max_rad_s, limits.v_max_rad_s, 12)
        self.enc_t = mitc.field_encoder(-limits.t_max_nm, limits.t_max_nm, 12)
        # the reply's bytes as one big-endian integer: id (8 bits), p (16), v, t (12 each)
        # [, temperature, error (8 each)]
        self.reply_head = cfg.can_id << 40
        self.reply8 = mitc.reply_length(cfg.variant) == 8
        W[index, _mk.W_ID] = cfg.can_id
        W[index, _mk.W_LEN] = 8 if self.reply8 else 6
        W[index, _mk.W_JOINT] = cfg.joint
        # the compiled paths' constants (drivers.sim._mit_kernel, layout K_*): row ``index`` of K
        K = K[index]
        K[_mk.K_P_MAX], K[_mk.K_V_MAX], K[_mk.K_KP_MAX] = limits.p_max_rad, limits.v_max_rad_s, limits.kp_max
        K[_mk.K_KD_MAX], K[_mk.K_T_MAX] = limits.kd_max, limits.t_max_nm
        K[_mk.K_SIGN], K[_mk.K_GEAR], K[_mk.K_OFFSET], K[_mk.K_EFF] = self.map
        K[_mk.K_G2E], K[_mk.K_GE] = self.g2e, self.ge
        self.K = K
        self.quantum = None

    @property
    def quantum(self) -> float | None:
        """The joint encoder's step for the compiled paths [rad] (0: none); None: the plant draws
        sensor noise, so the Python path measures (set by MitEmulator.bind)."""
        v = self._v[_mk.V_QUANTUM]
        return None if v < 0 else float(v)

    @quantum.setter
    def quantum(self, value: float | None) -> None:
        self._v[_mk.V_QUANTUM] = -1.0 if value is None else value

    @property
    def last_reply(self) -> bytes | None:
        """The last reply's payload (what a frozen drive repeats), None before one: the one the
        batch path wrote in R when it is newer (``W_R_NEWER``) than the one kept here."""
        if self._w[_mk.W_R_NEWER]:
            r = self._r
            return bytes(r[1:1 + r[0]])
        return self._last_reply

    @last_reply.setter
    def last_reply(self, reply: bytes | None) -> None:
        self._last_reply = reply
        self._w[_mk.W_R_NEWER] = 0


class MitEmulator(EmulatedDevice):
    """MIT-protocol motors behaving like the firmware (see the module docstring).

    Parameters
    ----------
    motors : sequence of MitMotorConfig
        The motors (distinct ids, distinct joints).
    reply_id : int
        Arbitration id of the replies (the firmware's ``CAN_MASTER``, 0).
    watchdog_timeout_s : float, optional
        The mini cheetah firmware's CAN timeout [s] on the loop clock; ``None``
        (default, as the CubeMars firmware documents none) disables it.
    """

    def __init__(self, motors: Sequence[MitMotorConfig], *, reply_id: int = 0,
                 watchdog_timeout_s: float | None = None):
        motors = list(motors)
        if not motors:
            raise ConfigError("at least one motor is required", field="motors")
        self._by_id: dict[int, _MitState] = {}
        # the motors' state the compiled batch path reads and writes (drivers.sim._mit_kernel
        # layouts V_*, W_*, R_STRIDE, K_*), one row per motor
        nm = len(motors)
        self._V = np.zeros((nm, _mk.V_ROWS))
        self._W = np.zeros((nm, _mk.W_ROWS), dtype=np.int64)
        self._R = np.zeros((nm, _mk.R_STRIDE), dtype=np.uint8)
        self._K = np.zeros((nm, _mk.K_SIZE))
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
            self._by_id[m.can_id] = _MitState(m, lim, i, self._V, self._W, self._R, self._K)
        self._states = tuple(self._by_id.values())
        #: increased by every change of what decides whether a frame goes the batch path (motor
        #: mode, silence, device faults, their schedule, the encoder step): on_batch's cache key
        self._generation = 0
        #: on_batch's last preparation: (generation, ids, rows, states, earliest scheduled fault)
        self._batch_prep: tuple | None = None
        #: each motor's watchdog due time on the loop clock [s] (``last_cmd_t + watchdog``
        #: while armed, else inf), kept by _arm and _zero_output: next_timer_s is their minimum
        self._dues = [math.inf] * len(self._states)
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
    def bind(self, plant: Plant) -> None:
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
            st.quantum = plant._joint_quantum(j)
        self._generation += 1

    @property
    def can_ids(self) -> tuple[int, ...]:
        return tuple(self._by_id)

    def motor_mode(self, can_id: int) -> bool:
        return self._state(can_id).motor_mode

    def commands_applied(self, can_id: int) -> int:
        """Number of command frames applied to the plant by this motor."""
        return self._state(can_id).commands

    def commands_received(self, can_id: int) -> int:
        """Number of command frames received in motor mode (applied, or swallowed by a device fault)."""
        return self._state(can_id).received

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
            self._generation += 1
            self.plant.set_brake(True, joints=[st.cfg.joint])

    def reboot(self, can_id: int) -> None:
        """Power-cycle one motor (a brown-out, an e-stop that cut its supply): it comes back out of
        motor mode (zero torque, brake engaged), with no latched error and its SET_ZERO zero lost,
        and answers as before; commands are ignored until it is told to enter motor mode again."""
        with self._lock:
            st = self._state(can_id)
            self._zero_output(st)
            st.motor_mode = False
            st.fault = 0
            st.zero_m = 0.0
            st.device_fault = None
            st.scheduled = None
            st.last_reply = None
            self._generation += 1
            self.plant.set_brake(True, joints=[st.cfg.joint])

    def set_silent(self, can_id: int, silent: bool = True) -> None:
        """Disconnect (``True``) or reconnect a motor from the bus."""
        with self._lock:
            self._state(can_id).silent = bool(silent)
            self._generation += 1

    def set_temperature(self, can_id: int, temperature_c: float) -> None:
        """Set the driver temperature a motor reports (8-byte replies) [degC]."""
        t = float(temperature_c)
        if not math.isfinite(t):
            raise DriverError(f"temperature must be finite, got {temperature_c!r}")
        with self._lock:
            self._state(can_id).temperature_c = t

    def set_device_fault(self, can_id: int, kind: str | None) -> None:
        """Start (``"limp"``, ``"frozen"``) or end (``None``) an unreported device fault now."""
        if kind is not None and kind not in MIT_DEVICE_FAULTS:
            raise DriverError(f"device fault must be one of {list(MIT_DEVICE_FAULTS)} or None, got {kind!r}")
        with self._lock:
            st = self._state(can_id)
            st.scheduled = None
            self._start_device_fault(st, kind)

    def schedule_device_fault(self, can_id: int, kind: str, t_s: float) -> None:
        """Start device fault ``kind`` on a motor with the first frame at loop time >= ``t_s``."""
        if kind not in MIT_DEVICE_FAULTS:
            raise DriverError(f"device fault must be one of {list(MIT_DEVICE_FAULTS)}, got {kind!r}")
        t = float(t_s)
        if not math.isfinite(t):
            raise DriverError(f"fault time must be finite, got {t_s!r}")
        with self._lock:
            self._state(can_id).scheduled = (t, kind)
            self._generation += 1

    def device_fault(self, can_id: int) -> str | None:
        """The unreported device fault active on a motor (``None``: healthy)."""
        return self._state(can_id).device_fault

    def _start_device_fault(self, st: _MitState, kind: str | None) -> None:
        st.device_fault = kind
        self._generation += 1
        if kind == "limp" and self.plant is not None:
            self._zero_output(st)

    # -- behaviour -------------------------------------------------------------------
    def _zero_output(self, st: _MitState) -> None:
        self.plant.set_joint_command(st.cfg.joint, 0.0)
        st.armed = False
        self._dues[st.index] = math.inf

    def _arm(self, st: _MitState, t_s: float) -> None:
        """A command applied at ``t_s``: the watchdog restarts from it (st.last_cmd_t = t_s,
        st.armed = True, in the motor's rows)."""
        st._v[_mk.V_LAST_T] = t_s
        st._w[_mk.W_ARMED] = 1
        if self._wd is not None:
            self._dues[st.index] = t_s + self._wd

    #: on_frame returns None for every frame accepts refuses (its first checks)
    on_frame_filters = True

    def accepts(self, msg: can.Message) -> bool:
        return (not msg.is_extended_id and not msg.is_remote_frame and not msg.is_error_frame
                and msg.arbitration_id in self._by_id)

    def next_timer_s(self) -> float:
        # the earliest st.last_cmd_t + watchdog of the armed motors (one C call on the list;
        # an element is replaced whole, so no lock is needed to read them)
        return math.inf if self._wd is None else min(self._dues)

    def on_timer(self, t_s: float) -> list[can.Message]:
        with self._lock:
            for st in self._by_id.values():
                if st.armed and st.last_cmd_t + self._wd <= t_s:
                    self._zero_output(st)
        return []

    def on_frame(self, msg: can.Message, t_s: float) -> list[can.Message] | None:
        with self._lock:
            if msg.is_extended_id or msg.is_remote_frame or msg.is_error_frame:
                return None
            st = self._by_id.get(msg.arbitration_id)
            if st is None or st.silent:
                return None
            data = bytes(msg.data)
            if len(data) != 8:
                return []
            if st.scheduled is not None and t_s >= st.scheduled[0]:
                kind = st.scheduled[1]
                st.scheduled = None
                self._start_device_fault(st, kind)
            device_fault = st.device_fault
            if device_fault is None and data[0] != 0xFF and st.motor_mode:
                # the usual frame, a command to a healthy drive in motor mode: what the branches
                # below do for it (kind "command", neither frozen nor limp), without the tests
                # (the state in the motor's rows: st.received += 1, st.last_reply = reply)
                w = st._w
                w[_mk.W_RECEIVED] += 1
                reply = self._command(st, data, t_s)
                st._last_reply = reply
                w[_mk.W_R_NEWER] = 0
                return [_msg(self._reply_id, reply)]
            # not the usual frame: the motor's mode, its faults may change
            self._generation += 1
            frozen = device_fault == "frozen"
            kind = mitc.classify_command(data) if data[0] == 0xFF else "command"
            cfg = st.cfg
            if frozen:
                # the control loop is stopped: nothing is applied, the interrupt repeats its reply
                if kind == "command" and st.motor_mode:
                    st.received += 1
            elif kind == "enter":
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
                st.received += 1
                if st.device_fault == "limp":
                    self._zero_output(st)
                else:
                    self._apply(st, data, t_s)
            if frozen and st.last_reply is not None:
                reply = st.last_reply
            else:
                reply = self._reply(st)
                st.last_reply = reply
            return [_msg(self._reply_id, reply)]

    def on_batch(self, arbs: tuple, payloads: np.ndarray, t_s: float, out_arb: np.ndarray,
                 out: np.ndarray) -> int | None:
        """Serve a run of command frames sent one after the other at loop time ``t_s`` in one call
        (:meth:`EmulatedDevice.on_batch`): when every one is the usual frame (a command, its first
        byte not 0xFF, without drive-side gains, to a motor of this emulator in motor mode,
        connected, without a device fault or one due, on a plant without sensor noise, drive-side
        gains held or a stuck actuator), all of them by one call of the compiled
        :func:`~drivers.sim._mit_kernel.mit_command_batch`, with what :meth:`on_frame` does for
        each in turn (the command held, the watchdog armed, the counters, the reply's bytes);
        else None, having changed nothing.

        Parameters
        ----------
        arbs : tuple of int
            The frames' arbitration ids (classic data frames, 11-bit ids, 8 data bytes).
        payloads : ndarray of uint8, shape (m, 8)
        t_s : float
        out_arb : ndarray of int64, shape (>= m,)
            Out: each reply's arbitration id (the replies in the frames' order, one per frame).
        out : ndarray of uint8, shape (>= m, 9)
            Out: each reply's length, then its payload.

        Returns
        -------
        int or None
            The number of replies written (m).
        """
        with self._lock:
            plant = self.plant
            if plant is None or plant._pd or plant._stuck:
                return None
            prep = self._batch_prep
            if prep is None or prep[0] != self._generation or (prep[1] is not arbs and prep[1] != arbs):
                prep = self._prepare_batch(arbs)
                if prep is None:
                    return None
            if t_s >= prep[4]:
                return None                         # a device fault starts with one of these frames
            with plant._lock:
                try:
                    m = _mk.mit_command_batch(self._K, self._V, self._W, self._R, prep[2], payloads, t_s,
                                              plant._cmd, plant._q, plant._qd, plant._tau_applied, self._reply_id,
                                              out_arb, out)
                except TypeError:       # the plant's state in arrays of another layout: frame by frame
                    return None
            if m < 0:
                return None
            if self._wd is not None:
                due = t_s + self._wd
                dues = self._dues
                for i in prep[3]:
                    dues[i] = due
            return m

    def _prepare_batch(self, arbs: tuple) -> tuple | None:
        """What :meth:`on_batch` needs of the motors ``arbs`` name, kept until one of them changes
        (``_generation``): None when one of them cannot take the batch path now."""
        rows = []
        sched = math.inf
        for a in arbs:
            st = self._by_id.get(a)
            if st is None or st.silent or not st.motor_mode or st.device_fault is not None or st.quantum is None:
                return None
            if st.scheduled is not None:
                sched = min(sched, st.scheduled[0])
            rows.append(st.index)
        self._batch_prep = (self._generation, arbs, np.array(rows, dtype=np.int64), tuple(rows), sched)
        return self._batch_prep

    def _apply(self, st: _MitState, data: bytes, t_s: float) -> None:
        """Apply a command payload (kind ``"command"``) received at ``t_s`` to the motor's joint:
        ``mitc.decode_command_values`` through the motor's per-drive decoder, mapped to the
        joint side, held by the plant; the watchdog is armed."""
        x = int.from_bytes(data, "big")
        p_m, v_m, kp_m, kd_m, t_m = st.values(x >> 48, (x >> 36) & 0xFFF, (x >> 24) & 0xFFF,
                                              (x >> 12) & 0xFFF, x & 0xFFF)
        s, g, off, eff = st.map
        g2e = st.g2e
        self.plant.set_joint_command(st.joint, s * t_m * g * eff, kp_m * g2e, kd_m * g2e,
                                     s * (p_m + st.zero_m) / g + off, s * v_m / g)
        self._arm(st, t_s)
        st.commands += 1

    def _command(self, st: _MitState, data: bytes, t_s: float) -> bytes:
        """:meth:`_apply` then :meth:`_reply` (the same command held, the same reply bytes), in
        one call of the compiled :func:`~drivers.sim._mit_kernel.mit_command_frame` when the
        plant draws no sensor noise and the joint's actuator is not stuck; the Python path
        otherwise, and for a value the kernel declines (it raises the proper error)."""
        v = st._v
        quantum = v[_mk.V_QUANTUM]                  # st.quantum, -1 for None
        plant = self.plant
        if quantum < 0 or (plant._stuck and st.joint in plant._stuck):
            # a stuck actuator keeps its command: set_joint_command (in _apply) knows
            self._apply(st, data, t_s)
            return self._reply(st)
        x = int.from_bytes(data, "big")
        with plant._lock:
            try:
                status, fields = _mk.mit_command_frame(st.K, plant._cmd, plant._q, plant._qd, plant._tau_applied,
                                                       st.joint, x >> 32, x & 0xFFFFFFFF, v[_mk.V_ZERO], quantum)
            except TypeError:           # the plant's state in arrays of another layout: the Python path
                status = _mk.ST_BAD_COMMAND
            if status & _mk.ST_BAD_COMMAND:
                # nothing was written: the Python path (it raises for a non-finite command)
                self._apply(st, data, t_s)
                return self._reply(st)
            if status & _mk.ST_GAINS or plant._pd:
                plant._gains_updated()
        self._arm(st, t_s)
        st._w[_mk.W_COMMANDS] += 1                  # st.commands += 1
        if status & _mk.ST_BAD_MEASUREMENT:
            return self._reply(st)                  # raises
        return self._pack(st, st.reply_head | fields)

    def _reply(self, st: _MitState) -> bytes:
        """The reply payload of a motor's state now: ``mitc.encode_reply`` of its measured
        joint, through the motor's per-drive field encoders (the same bytes)."""
        q, qd, tau = self.plant.measure_joint(st.joint)
        s, g, off, eff = st.map
        p = s * (q - off) * g - st.zero_m
        v = s * qd * g
        t = s * tau / st.ge
        return self._pack(st, st.reply_head | (st.enc_p(p) << 24) | (st.enc_v(v) << 12) | st.enc_t(t))

    @staticmethod
    def _pack(st: _MitState, word: int) -> bytes:
        """The reply payload of ``word`` (id, p, v, t; 48 bits) and, in the 8-byte variant,
        the temperature and the error byte."""
        if not st.reply8:
            return word.to_bytes(6, "big")
        temp = st.temperature_c
        if not math.isfinite(temp):
            raise DriverError(f"refusing to encode non-finite temperature {temp!r}")
        return ((word << 16) | (min(255, max(0, int(round(temp)))) << 8) | st.fault).to_bytes(8, "big")
