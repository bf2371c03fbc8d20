"""Emulated Dynamixel X-series servos driving a :class:`~drivers.sim.plant.Plant`, on a
pseudo-terminal or inline.

:class:`DynamixelBusEmulator` opens a pseudo-terminal pair (``os.openpty``)
and answers on the master side from a thread; a driver (ours, or ``dynamixel_sdk``) opens
:attr:`~DynamixelBusEmulator.port_path` like a real serial port.  Made with
``serve="inline"`` it has no pseudo-terminal and no thread: its
:meth:`~DynamixelBusEmulator.inline_port` (:class:`InlineDynamixelPort`) is the
driver's serial port, and the servos handle the bytes written to it in the
driver's thread (the same bytes, firmware and wire schedule).  Behind it,
one :class:`EmulatedServo` per ID behaves like the X-series firmware
(e-Manual, "DYNAMIXEL Protocol 2.0" and the model pages):

* control table with sizes, access rights and ranges: a write to a read-only
  or undefined address, or to the EEPROM area while Torque Enable is 1, gets
  Access Error (0x07); a value outside its range Data Range Error (0x04);
  a Goal Current beyond Current Limit (38) Data Limit Error (0x06); a write
  that covers part of an item Data Length Error (0x05); nothing is written then;
* Ping, Read, Write, Reboot, Sync Write, Sync Read, Fast Sync Read; broadcast
  Read/Write get no status; Status Return Level (68) decides which
  instructions are answered; packets for other IDs are ignored;
* a packet with a CRC error addressed to this ID is answered with CRC Error
  (0x03) and not executed (broadcast ones are dropped silently);
* current control (Operating Mode 0): with torque on, the plant joint gets
  ``kt * Goal Current`` through the joint mapping; Present Current is the
  plant's applied torque back in current units; Present Position is the
  multi-turn pulse count, Present Velocity in 0.229 rev/min;
* Bus Watchdog (98): with torque on and a value k > 0, no instruction packet
  for this device for k x 20 ms (loop clock) stops the motor and sets the
  value to -1; Goal values then refuse writes (Data Range Error) until 0 is
  written;
* hardware errors: input voltage outside the voltage limits (32, 34),
  temperature above Temperature Limit (31), and injected ones (overload...)
  set Hardware Error Status (70) and the Alert bit (0x80) of every status
  packet; bits enabled in Shutdown (63) turn the torque off until Reboot.

Timing: replies are written to the master after the request's and reply's
wire time at ``baudrate`` (10 bits per byte) plus the servo's Return Delay
Time (9), one device after the other, all in wall-clock time (inline: the
port waits for that schedule, or counts it, :class:`InlineDynamixelPort`).  The pty, the
serving thread, the inline port and the byte time are every serial device's
(:mod:`drivers.sim.serial_emulator`); this module holds the servos' firmware.  The plant is
advanced on the loop clock ``now()`` when a packet has been received (timed
events such as a watchdog expiry at their own due time), as
:class:`~drivers.sim.emulators.EmulatorHost` does for the CAN devices.

Compiled firmware: the servos' state lives in the bus's arrays (the control tables as rows of
one array, the rest as columns; :class:`EmulatedServo`'s attributes read and write them), and
served inline, the common healthy cycle (a Sync Write of Goal Current and/or a (Fast) Sync Read,
whole and valid, to servos with nothing pending: no watchdog due, no shutdown, no brake change,
a plant without noise) is served by two compiled calls (:mod:`drivers.sim._dxl_kernel`) around
the plant's step; everything else takes the Python path below, the reference
(``tests/test_dxl_kernels.py`` compares the two).  ``fast = False`` switches it off.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from dynamics.errors import ConfigError, DecodeError, DriverError
from ..base import JointMapping
from ..codecs import dynamixel as dx
from ..codecs.dynamixel import Addr, Inst, StatusError
from . import _dxl_kernel as _dk
from .plant import Plant
from .serial_emulator import TIME_EPS_S as _TIME_EPS_S, InlineSerialPort, SerialDeviceEmulator

__all__ = ["ServoConfig", "EmulatedServo", "DynamixelBusEmulator", "InlineDynamixelPort"]


@dataclass(frozen=True)
class _Item:
    size: int
    signed: bool = False
    writable: bool = True
    eeprom: bool = False
    lo: int = 0
    hi: int = 0


def _items(model: dx.DxlModel) -> dict[int, _Item]:
    E = dict(eeprom=True)
    return {
        Addr.MODEL_NUMBER: _Item(2, writable=False),
        2: _Item(4, writable=False),                      # Model Information
        Addr.FIRMWARE_VERSION: _Item(1, writable=False),
        Addr.ID: _Item(1, lo=0, hi=252, **E),
        Addr.BAUD_RATE: _Item(1, lo=0, hi=7, **E),
        Addr.RETURN_DELAY_TIME: _Item(1, lo=0, hi=254, **E),
        Addr.DRIVE_MODE: _Item(1, lo=0, hi=5, **E),
        Addr.OPERATING_MODE: _Item(1, lo=0, hi=16, **E),
        12: _Item(1, lo=0, hi=255, **E),                  # Secondary ID
        13: _Item(1, lo=1, hi=2, **E),                    # Protocol Type
        Addr.HOMING_OFFSET: _Item(4, signed=True, lo=-1044479, hi=1044479, **E),
        24: _Item(4, lo=0, hi=1023, **E),                 # Moving Threshold
        Addr.TEMPERATURE_LIMIT: _Item(1, lo=0, hi=100, **E),
        Addr.MAX_VOLTAGE_LIMIT: _Item(2, lo=model.min_voltage_lsb, hi=model.max_voltage_lsb, **E),
        Addr.MIN_VOLTAGE_LIMIT: _Item(2, lo=model.min_voltage_lsb, hi=model.max_voltage_lsb, **E),
        Addr.PWM_LIMIT: _Item(2, lo=0, hi=885, **E),
        Addr.CURRENT_LIMIT: _Item(2, lo=0, hi=model.current_limit_lsb, **E),
        Addr.VELOCITY_LIMIT: _Item(4, lo=0, hi=1023, **E),
        Addr.MAX_POSITION_LIMIT: _Item(4, lo=0, hi=4095, **E),
        Addr.MIN_POSITION_LIMIT: _Item(4, lo=0, hi=4095, **E),
        Addr.SHUTDOWN: _Item(1, lo=0, hi=255, **E),
        Addr.TORQUE_ENABLE: _Item(1, lo=0, hi=1),
        Addr.LED: _Item(1, lo=0, hi=1),
        Addr.STATUS_RETURN_LEVEL: _Item(1, lo=0, hi=2),
        Addr.REGISTERED_INSTRUCTION: _Item(1, writable=False),
        Addr.HARDWARE_ERROR_STATUS: _Item(1, writable=False),
        Addr.BUS_WATCHDOG: _Item(1, signed=True, lo=0, hi=127),
        Addr.GOAL_PWM: _Item(2, signed=True, lo=-885, hi=885),
        Addr.GOAL_CURRENT: _Item(2, signed=True, lo=-model.current_limit_lsb, hi=model.current_limit_lsb),
        Addr.GOAL_VELOCITY: _Item(4, signed=True, lo=-1023, hi=1023),
        108: _Item(4, lo=0, hi=32767),                    # Profile Acceleration
        112: _Item(4, lo=0, hi=32767),                    # Profile Velocity
        Addr.GOAL_POSITION: _Item(4, signed=True, lo=-1048575, hi=1048575),
        Addr.REALTIME_TICK: _Item(2, writable=False),
        Addr.MOVING: _Item(1, writable=False),
        123: _Item(1, writable=False),                    # Moving Status
        Addr.PRESENT_PWM: _Item(2, signed=True, writable=False),
        Addr.PRESENT_CURRENT: _Item(2, signed=True, writable=False),
        Addr.PRESENT_VELOCITY: _Item(4, signed=True, writable=False),
        Addr.PRESENT_POSITION: _Item(4, signed=True, writable=False),
        136: _Item(4, signed=True, writable=False),
        140: _Item(4, signed=True, writable=False),
        Addr.PRESENT_INPUT_VOLTAGE: _Item(2, writable=False),
        Addr.PRESENT_TEMPERATURE: _Item(1, writable=False),
    }


_TABLE_END = _dk.TABLE_END    # reads beyond the RAM block are refused (no indirect area emulated)
_FAST_OUT_MAX = 4096          # the compiled firmware's longest status packet (longer: the Python path)
_GOALS = frozenset(int(a) for a in (Addr.GOAL_PWM, Addr.GOAL_CURRENT, Addr.GOAL_VELOCITY, Addr.GOAL_POSITION))

#: the little-endian struct of an item by (size, signed)
_STRUCTS = {(1, False): struct.Struct("<B"), (1, True): struct.Struct("<b"), (2, False): struct.Struct("<H"),
            (2, True): struct.Struct("<h"), (4, False): struct.Struct("<I"), (4, True): struct.Struct("<i")}
_U16, _I16, _I32 = _STRUCTS[2, False], _STRUCTS[2, True], _STRUCTS[4, True]
# the addresses the per-packet paths read, as plain ints
_ID = int(Addr.ID)
_OPERATING_MODE = int(Addr.OPERATING_MODE)
_HOMING_OFFSET = int(Addr.HOMING_OFFSET)
_TEMPERATURE_LIMIT = int(Addr.TEMPERATURE_LIMIT)
_MAX_VOLTAGE_LIMIT = int(Addr.MAX_VOLTAGE_LIMIT)
_MIN_VOLTAGE_LIMIT = int(Addr.MIN_VOLTAGE_LIMIT)
_CURRENT_LIMIT = int(Addr.CURRENT_LIMIT)
_SHUTDOWN = int(Addr.SHUTDOWN)
_TORQUE_ENABLE = int(Addr.TORQUE_ENABLE)
_STATUS_RETURN_LEVEL = int(Addr.STATUS_RETURN_LEVEL)
_HW_ERROR = int(Addr.HARDWARE_ERROR_STATUS)
_BUS_WATCHDOG = int(Addr.BUS_WATCHDOG)
_GOAL_CURRENT = int(Addr.GOAL_CURRENT)
_REALTIME_TICK = int(Addr.REALTIME_TICK)
_PRESENT_CURRENT = int(Addr.PRESENT_CURRENT)
_PRESENT_INPUT_VOLTAGE = int(Addr.PRESENT_INPUT_VOLTAGE)
_PRESENT_TEMPERATURE = int(Addr.PRESENT_TEMPERATURE)


@dataclass(frozen=True)
class ServoConfig:
    """One emulated servo.

    Attributes
    ----------
    dxl_id : int
        Bus ID (0..252).
    joint : int
        Plant joint it drives.
    model : DxlModel or str
        Model (or a key of :data:`drivers.codecs.dynamixel.DXL_MODELS`).
    mapping : JointMapping
        Joint <-> servo output side (as the driver's); ``torque_constant_nm_per_a``
        is the servo's output torque per A.
    firmware_version : int
    supply_voltage_v : float
    temperature_c : float
    """

    dxl_id: int
    joint: int
    model: dx.DxlModel | str = "XM430-W350"
    mapping: JointMapping = field(default_factory=JointMapping)
    firmware_version: int = 52
    supply_voltage_v: float = 12.0
    temperature_c: float = 35.0


class EmulatedServo:
    """One X-series servo: control table, instruction processing, watchdog, hardware errors."""

    def __init__(self, cfg: ServoConfig, plant: Plant):
        model = cfg.model
        if isinstance(model, str):
            if model not in dx.DXL_MODELS:
                raise ConfigError(f"unknown Dynamixel model {model!r}; known: {sorted(dx.DXL_MODELS)}",
                                  field="model")
            model = dx.DXL_MODELS[model]
        if not 0 <= cfg.joint < plant.n_joints:
            raise ConfigError(f"joint {cfg.joint} out of range for a {plant.n_joints}-joint plant", field="joint")
        self.cfg = cfg
        self.model = model
        self.plant = plant
        self.items = _items(model)
        # the servo's state in arrays (columns of the bus's arrays once on a bus, its own before:
        # _adopt), read and written through the properties below and by the compiled firmware
        # (drivers.sim._dxl_kernel)
        self._F = np.zeros((_dk.F_ROWS, 1))
        self._I = np.zeros((_dk.I_ROWS, 1), dtype=np.int64)
        self._k = 0
        m = cfg.mapping
        for row, v in ((_dk.F_SIGN, m.sign), (_dk.F_GEAR, m.gear_ratio), (_dk.F_OFF, m.offset_rad),
                       (_dk.F_EFF, m.efficiency), (_dk.F_KT, m.torque_constant_nm_per_a),
                       (_dk.F_ALSB, model.current_a_per_lsb)):
            self._F[row, 0] = v
        self._I[_dk.I_JOINT, 0] = cfg.joint
        self.supply_voltage_v = float(cfg.supply_voltage_v)
        self.temperature_c = float(cfg.temperature_c)
        self.injected = 0            # injected hardware error bits (kept until reboot)
        self.silent = False
        self.instructions = 0        # instruction packets executed (for tests)
        self.last_instruction_t = -math.inf
        self._t0 = float(plant.t_s)
        self._tab = memoryview(np.zeros(_TABLE_END, dtype=np.uint8))
        #: each item's little-endian struct (its size and sign)
        self._fmt = {a: _STRUCTS[it.size, it.signed] for a, it in self.items.items()}
        self._brake_released = None      # what the plant's brake was last told (None: nothing yet)
        self._factory()
        # the servo limits the plant joint to what its Current Limit can give
        m = cfg.mapping
        lim = abs(m.motor_to_joint_torque(model.current_limit_a * m.torque_constant_nm_per_a))
        plant.set_torque_limit([min(float(plant.torque_limit_nm[cfg.joint]), float(lim))], joints=[cfg.joint])

    def _adopt(self, T: np.ndarray, F: np.ndarray, I: np.ndarray, k: int) -> None:
        """Move this servo's state into column ``k`` of a bus's arrays (and its table into row
        ``k`` of ``T``): the values are copied, the servo reads and writes them there from now on."""
        T[k] = np.frombuffer(self._tab, dtype=np.uint8)
        F[:, k] = self._F[:, self._k]
        I[:, k] = self._I[:, self._k]
        self._tab = memoryview(T[k])
        self._F, self._I, self._k = F, I, k

    def _f(row: int, doc: str):          # noqa: N805 - a property factory of the class body
        def get(self) -> float:
            return float(self._F[row, self._k])

        def put(self, value) -> None:
            self._F[row, self._k] = value
        return property(get, put, doc=doc)

    def _i(row: int, doc: str, kind=int):  # noqa: N805
        def get(self):
            return kind(self._I[row, self._k])

        def put(self, value) -> None:
            self._I[row, self._k] = int(value)
        return property(get, put, doc=doc)

    supply_voltage_v = _f(_dk.F_VOLTS, "Input voltage the servo sees [V].")
    temperature_c = _f(_dk.F_TEMP, "Internal temperature [degC].")
    last_instruction_t = _f(_dk.F_LAST_T, "Loop time of the last instruction executed [s].")
    _t0 = _f(_dk.F_T0, "Loop time of power on [s] (the realtime tick's origin).")
    injected = _i(_dk.I_INJECTED, "Injected hardware error bits (kept until reboot).")
    silent = _i(_dk.I_SILENT, "Whether the servo is off the bus (answers nothing, executes nothing).", bool)
    instructions = _i(_dk.I_INSTR, "Instruction packets executed (for tests).")
    del _f, _i

    @property
    def _brake_released(self) -> bool | None:
        """What the plant's brake was last told: released (True), engaged (False), nothing yet (None)."""
        b = self._I[_dk.I_BRAKE, self._k]
        return None if b < 0 else bool(b)

    @_brake_released.setter
    def _brake_released(self, value: bool | None) -> None:
        self._I[_dk.I_BRAKE, self._k] = -1 if value is None else int(bool(value))

    @property
    def _env(self) -> tuple[float, float] | None:
        """The input voltage and temperature last written to the table (None: not yet)."""
        if not self._I[_dk.I_ENV_SET, self._k]:
            return None
        return float(self._F[_dk.F_ENV_V, self._k]), float(self._F[_dk.F_ENV_T, self._k])

    @_env.setter
    def _env(self, value: tuple[float, float] | None) -> None:
        k = self._k
        if value is None:
            self._I[_dk.I_ENV_SET, k] = 0
        else:
            self._I[_dk.I_ENV_SET, k] = 1
            self._F[_dk.F_ENV_V, k], self._F[_dk.F_ENV_T, k] = value

    # -- table -------------------------------------------------------------------------------------
    def _factory(self) -> None:
        m = self.model
        t = self._tab
        t[:] = bytes(len(t))
        self._put(Addr.MODEL_NUMBER, m.model_number)
        self._put(Addr.FIRMWARE_VERSION, self.cfg.firmware_version)
        self._put(Addr.ID, self.cfg.dxl_id)
        self._put(Addr.BAUD_RATE, 1)
        self._put(Addr.RETURN_DELAY_TIME, 250)
        self._put(Addr.OPERATING_MODE, 3)
        self._put(12, 255)
        self._put(13, 2)
        self._put(24, 10)
        self._put(Addr.TEMPERATURE_LIMIT, m.temperature_limit_c)
        self._put(Addr.MAX_VOLTAGE_LIMIT, m.max_voltage_lsb)
        self._put(Addr.MIN_VOLTAGE_LIMIT, m.min_voltage_lsb)
        self._put(Addr.PWM_LIMIT, 885)
        self._put(Addr.CURRENT_LIMIT, m.current_limit_lsb)
        self._put(Addr.VELOCITY_LIMIT, m.velocity_limit_lsb)
        self._put(Addr.MAX_POSITION_LIMIT, 4095)
        self._put(Addr.SHUTDOWN, m.shutdown_default)
        self._reset_ram()

    def _reset_ram(self) -> None:
        for a in range(Addr.TORQUE_ENABLE, _TABLE_END):
            self._tab[a] = 0
        self._env = None             # Present Input Voltage and Temperature zeroed: written at the next refresh
        self._put(Addr.STATUS_RETURN_LEVEL, 2)
        self.injected = 0
        self._apply_output()

    def _put(self, addr: int, value: int) -> None:
        self._fmt[addr].pack_into(self._tab, addr, int(value))

    def get(self, addr: int) -> int:
        """Value of the item at ``addr`` (as the device holds it)."""
        return self._fmt[addr].unpack_from(self._tab, addr)[0]

    @property
    def dxl_id(self) -> int:
        return self._tab[_ID]

    @property
    def torque_on(self) -> bool:
        return self._tab[_TORQUE_ENABLE] == 1

    @property
    def hardware_error(self) -> int:
        return self._tab[_HW_ERROR]

    # -- plant coupling ----------------------------------------------------------------------------
    def _apply_output(self) -> None:
        j = self.cfg.joint
        tab = self._tab
        cur = 0.0
        if tab[_TORQUE_ENABLE] == 1 and tab[_OPERATING_MODE] == 0 and tab[_BUS_WATCHDOG] < 0x80:
            cur = self.model.lsb_to_current(_I16.unpack_from(tab, _GOAL_CURRENT)[0])
        # the robot's holding brake (the plant's, if it has one) follows torque enable
        released = tab[_TORQUE_ENABLE] == 1
        if released != self._brake_released:
            self._brake_released = released
            self.plant.set_brake(not released, joints=[j])
        m = self.cfg.mapping
        self.plant.set_joint_command(j, float(m.motor_to_joint_torque(cur * m.torque_constant_nm_per_a)))

    def _refresh_present(self, t_s: float) -> None:
        q, qd, tau = self.plant.measure_joint(self.cfg.joint)
        m = self.cfg.mapping
        tab = self._tab
        pos = m.joint_to_motor_position(q) / dx.POSITION_RAD_PER_PULSE + _I32.unpack_from(tab, _HOMING_OFFSET)[0]
        vel = m.joint_to_motor_velocity(qd) / dx.VELOCITY_RAD_S_PER_LSB
        cur = m.joint_to_motor_torque(tau) / m.torque_constant_nm_per_a
        tab[_PRESENT_CURRENT:_PRESENT_CURRENT + 10] = dx.encode_present(
            self.model.current_to_lsb(cur), int(round(vel)), int(math.floor(pos + 0.5)))
        env = (self.supply_voltage_v, self.temperature_c)
        if env != self._env:                            # written again only when they changed
            self._env = env
            _U16.pack_into(tab, _PRESENT_INPUT_VOLTAGE, max(0, min(0xFFFF, int(round(self.supply_voltage_v * 10)))))
            tab[_PRESENT_TEMPERATURE] = max(0, min(255, int(round(self.temperature_c))))
        _U16.pack_into(tab, _REALTIME_TICK, int((t_s - self._t0) * 1000.0) % 32768)
        self._check_hardware()

    def _check_hardware(self) -> None:
        tab = self._tab
        bits = self.injected
        v = self.supply_voltage_v * 10.0
        if v > _U16.unpack_from(tab, _MAX_VOLTAGE_LIMIT)[0] or v < _U16.unpack_from(tab, _MIN_VOLTAGE_LIMIT)[0]:
            bits |= 0x01
        if self.temperature_c > tab[_TEMPERATURE_LIMIT]:
            bits |= 0x04
        old = tab[_HW_ERROR]
        shutdown = tab[_SHUTDOWN]
        # shutdown errors latch until reboot; others follow the condition
        latched = old & shutdown
        new = bits | latched
        tab[_HW_ERROR] = new
        if new & shutdown and tab[_TORQUE_ENABLE]:
            tab[_TORQUE_ENABLE] = 0
            self._apply_output()

    # -- watchdog ----------------------------------------------------------------------------------
    def watchdog_due_s(self) -> float:
        tab = self._tab
        wd = tab[_BUS_WATCHDOG]
        if wd == 0 or wd >= 0x80 or tab[_TORQUE_ENABLE] != 1:       # off, or -1: tripped
            return math.inf
        return self.last_instruction_t + wd * dx.BUS_WATCHDOG_S_PER_LSB

    def on_watchdog(self, t_s: float) -> None:
        if self.watchdog_due_s() <= t_s + _TIME_EPS_S:
            self._put(Addr.BUS_WATCHDOG, -1)
            self._apply_output()

    # -- instructions ------------------------------------------------------------------------------
    def _status(self, error: int, params: bytes = b"") -> bytes:
        if self.hardware_error:
            error |= dx.ALERT_BIT
        return dx.encode_status(self.dxl_id, error, params)

    def _answers(self, inst: int) -> bool:
        level = self._tab[Addr.STATUS_RETURN_LEVEL]
        return inst == Inst.PING or level == 2 or (level == 1 and inst in (Inst.READ, Inst.SYNC_READ,
                                                                           Inst.FAST_SYNC_READ))

    def read(self, addr: int, length: int) -> tuple[int, bytes]:
        """``(error, data)`` of a read of ``length`` bytes at ``addr``."""
        if length < 1 or addr + length > _TABLE_END:
            return StatusError.ACCESS, b""
        return 0, bytes(self._tab[addr:addr + length])

    def write(self, addr: int, data: bytes) -> int:
        """Apply a write of ``data`` at ``addr`` (all or nothing); return the error number."""
        end = addr + len(data)
        pending = []
        tab = self._tab
        items = self.items
        torque_on = tab[_TORQUE_ENABLE] == 1
        a = addr
        while a < end:
            it = items.get(a)
            if it is None:
                return StatusError.ACCESS
            if a + it.size > end:
                return StatusError.DATA_LENGTH
            if not it.writable or (it.eeprom and torque_on):
                return StatusError.ACCESS
            v = self._fmt[a].unpack_from(data, a - addr)[0]
            if a in _GOALS and tab[_BUS_WATCHDOG] >= 0x80:            # -1: the watchdog tripped
                return StatusError.DATA_RANGE
            if a == _GOAL_CURRENT:
                if abs(v) > _U16.unpack_from(tab, _CURRENT_LIMIT)[0]:
                    return StatusError.DATA_LIMIT
            elif not it.lo <= v <= it.hi:
                return StatusError.DATA_RANGE
            pending.append((a, v))
            a += it.size
        for a, v in pending:
            if a == _TORQUE_ENABLE and v == 1 and tab[_HW_ERROR] & tab[_SHUTDOWN]:
                return StatusError.RESULT_FAIL     # only a reboot re-enables torque after a shutdown
        for a, v in pending:
            self._put(a, v)
        self._apply_output()
        return StatusError.NONE

    def reboot(self) -> None:
        """Reboot: RAM area to its defaults, hardware errors and watchdog cleared, torque off."""
        self._reset_ram()

    def execute(self, pkt: dx.Packet, t_s: float) -> bytes | None:
        """Execute one instruction addressed to this servo (unicast or broadcast) at loop time ``t_s``.

        Returns the status packet to send, or None.  Sync instructions are
        handled by the bus (:meth:`DynamixelBusEmulator`), which calls
        :meth:`read` / :meth:`write`.
        """
        self.instructions += 1
        self.last_instruction_t = t_s
        self._refresh_present(t_s)
        inst, p = pkt.instruction, pkt.params
        unicast = pkt.id != dx.BROADCAST_ID
        if inst == Inst.PING:
            return self._status(0, self.get(Addr.MODEL_NUMBER).to_bytes(2, "little") +
                                bytes((self._tab[Addr.FIRMWARE_VERSION],)))
        if inst == Inst.READ:
            if len(p) != 4:
                err, data = StatusError.DATA_LENGTH, b""
            else:
                err, data = self.read(p[0] | p[1] << 8, p[2] | p[3] << 8)
            return self._status(err, data) if unicast and self._answers(inst) else None
        if inst == Inst.WRITE:
            err = StatusError.DATA_LENGTH if len(p) < 3 else self.write(p[0] | p[1] << 8, p[2:])
            return self._status(err) if unicast and self._answers(inst) else None
        if inst == Inst.REBOOT:
            self.reboot()
            return self._status(0) if unicast and self._answers(inst) else None
        return self._status(StatusError.INSTRUCTION) if unicast and self._answers(inst) else None

    def crc_error(self) -> bytes | None:
        """Status for a packet to this ID whose CRC failed (not executed)."""
        return self._status(StatusError.CRC) if self._answers(Inst.WRITE) else None


def _warm_plant(plant: Plant) -> None:
    """Step a throw-away copy of the plant once, so that the just-in-time compilation of its
    kernel happens here and not in the serving thread during the first exchanges (where it
    would look like servos that do not answer)."""
    plant.warm_up()


class DynamixelBusEmulator(SerialDeviceEmulator):
    """A Dynamixel bus of emulated servos, served on a pseudo-terminal from a background thread,
    or inline in the driver's thread through :meth:`inline_port`.

    Parameters
    ----------
    servos : sequence of ServoConfig
        Distinct IDs, distinct joints (more with :meth:`add_servos`).
    plant : Plant
    now : callable
        The loop clock [s].
    baudrate : int
        Modelled wire speed [bit/s] (8N1: 10 bits per byte).
    poll_s : float
        Longest idle wait of the serving thread [s].
    serve : {"thread", "inline"}
        ``"thread"``: a pseudo-terminal (:attr:`port_path`, opened by our driver's
        :class:`~drivers.serial_port.SerialTransport` or by ``dynamixel_sdk``) answered by a
        thread.  ``"inline"``: no pseudo-terminal and no thread; the servos are served in the
        caller's thread when bytes are written to the port of :meth:`inline_port` (same bytes,
        same firmware, same reply timing on the modelled wire: :class:`InlineDynamixelPort`).

    Fault injection: :meth:`set_supply_voltage`, :meth:`set_temperature`,
    :meth:`inject_hardware_error`, :meth:`set_silent`,
    :meth:`corrupt_replies` (flip a byte of the next replies: CRC errors on
    the controller side), :meth:`disconnect` (the port disappears).
    """

    NAME = "Dynamixel"

    def __init__(self, servos: Sequence[ServoConfig], plant: Plant, now: Callable[[], float], *,
                 baudrate: int = 4_000_000, poll_s: float = 0.005, serve: str = "thread"):
        self._serial_init(now, baudrate, serve, poll_s)
        self._servos: dict[int, EmulatedServo] = {}
        self._slots: list[EmulatedServo] = []
        self.plant = plant
        #: the compiled firmware's scratch (drivers.sim._dxl_kernel): what check() found, the
        #: status packet built
        self._P = np.zeros(_dk.P_SIZE, dtype=np.int64)
        self._out = np.zeros(_FAST_OUT_MAX, dtype=np.uint8)
        self._R = np.zeros(3 * 256, dtype=np.int64)
        #: writes served by the compiled firmware (for tests)
        self.fast_writes = 0
        #: whether writes may be served by the compiled firmware (the Python path otherwise: the
        #: reference, :meth:`_serve_fast`)
        self.fast = True
        _warm_plant(plant)
        self.add_servos(servos)
        self._framer = dx.PacketFramer()
        self._bus_free = 0.0
        self.packets_in = 0
        self.crc_errors_in = 0
        self._start("torqueloop-dynamixel-bus")

    def add_servos(self, servos: Sequence[ServoConfig]) -> None:
        """Connect servos to the bus (distinct IDs and joints; may be called while serving)."""
        with self._lock:
            joints = {s.cfg.joint for s in self._servos.values()}
            new = {}
            for i, c in enumerate(servos):
                if not isinstance(c, ServoConfig):
                    raise ConfigError(f"expected ServoConfig, got {type(c).__name__}", field=f"servos[{i}]")
                if isinstance(c.dxl_id, bool) or not isinstance(c.dxl_id, int) or not 0 <= c.dxl_id <= dx.MAX_ID:
                    raise ConfigError(f"ID must be in 0..252, got {c.dxl_id!r}", field=f"servos[{i}].dxl_id")
                if c.dxl_id in self._servos or c.dxl_id in new:
                    raise ConfigError(f"duplicate ID {c.dxl_id}", field=f"servos[{i}].dxl_id")
                if c.joint in joints:
                    raise ConfigError(f"joint {c.joint} driven twice", field=f"servos[{i}].joint")
                joints.add(c.joint)
                new[c.dxl_id] = EmulatedServo(c, self.plant)
            self._servos.update(new)
            # every servo's state in the bus's arrays, one column (a table row) per servo
            slots = list(self._servos.values())
            n = len(slots)
            T = np.zeros((n, _TABLE_END), dtype=np.uint8)
            F = np.zeros((_dk.F_ROWS, n))
            I = np.zeros((_dk.I_ROWS, n), dtype=np.int64)
            slot_of = np.full(256, -1, dtype=np.int64)
            for k, (i, s) in enumerate(self._servos.items()):
                s._adopt(T, F, I, k)
                slot_of[i] = k
            self._slots = slots
            self._T, self._F, self._I, self._slot_of = T, F, I, slot_of

    # -- access --------------------------------------------------------------------------------------
    def servo(self, dxl_id: int) -> EmulatedServo:
        try:
            return self._servos[dxl_id]
        except KeyError as err:
            raise DriverError(f"no emulated servo with ID {dxl_id}") from err

    @property
    def servos(self) -> tuple[EmulatedServo, ...]:
        return tuple(self._servos.values())

    # -- fault injection -------------------------------------------------------------------------------
    def set_supply_voltage(self, volts: float) -> None:
        with self._lock:
            for s in self._servos.values():
                s.supply_voltage_v = float(volts)
                s._check_hardware()

    def set_temperature(self, dxl_id: int, temperature_c: float) -> None:
        with self._lock:
            s = self.servo(dxl_id)
            s.temperature_c = float(temperature_c)
            s._check_hardware()

    def inject_hardware_error(self, dxl_id: int, bits: int = 0x20) -> None:
        """Raise hardware error bits (default 0x20 overload) on a servo, as its firmware would."""
        with self._lock:
            s = self.servo(dxl_id)
            s.injected |= int(bits) & 0xFF
            s._check_hardware()

    def reboot(self, dxl_id: int) -> None:
        """Power-cycle one servo (a brown-out, an e-stop that cut its supply): as its Reboot
        instruction, the RAM area back to its defaults (torque off, Bus Watchdog off, hardware
        errors cleared), the EEPROM area kept (id, operating mode, limits)."""
        with self._lock:
            self.servo(dxl_id).reboot()

    def set_silent(self, dxl_id: int, silent: bool = True) -> None:
        with self._lock:
            self.servo(dxl_id).silent = bool(silent)

    # -- serving ----------------------------------------------------------------------------------
    def _advance(self, t: float) -> None:
        plant = self.plant
        while self._servos:
            due, s = math.inf, None
            for x in self._servos.values():          # the first servo of the earliest watchdog
                d = x.watchdog_due_s()
                if d < due:
                    due, s = d, x
            if s is None or due > t + _TIME_EPS_S:
                break
            plant.advance_to(min(max(due, plant.t_s), t))
            s.on_watchdog(due)
        plant.advance_to(t)

    def _schedule(self, replies: list[tuple[EmulatedServo, bytes]], t_request_end: float) -> None:
        """Queue replies one after the other on the half-duplex wire."""
        free = max(self._bus_free, t_request_end)
        for s, data in replies:
            start = max(free, t_request_end + s.get(Addr.RETURN_DELAY_TIME) * dx.RETURN_DELAY_S_PER_LSB)
            release = start + len(data) * self._byte_s
            self._push_reply(release, data)
            free = release
        self._bus_free = free

    def _handle(self, item, t_wall: float) -> None:
        t_end = max(self._bus_free, t_wall)
        if isinstance(item, DecodeError):
            self.crc_errors_in += 1
            pid = getattr(item, "packet_id", None)
            s = self._servos.get(pid)
            if s is not None and not s.silent:
                r = s.crc_error()
                if r:
                    self._schedule([(s, r)], t_end)
            return
        pkt: dx.Packet = item
        if pkt.is_status:
            return                       # another device's answer (not ours to process)
        t = self._now()
        self._advance(t)
        replies: list[tuple[EmulatedServo, bytes]] = []
        inst = pkt.instruction
        if pkt.id != dx.BROADCAST_ID:
            s = self._servos.get(pkt.id)
            if s is None or s.silent:
                return
            r = s.execute(pkt, t)
            if r:
                replies.append((s, r))
        elif inst in (Inst.SYNC_WRITE, Inst.SYNC_READ, Inst.FAST_SYNC_READ):
            self._sync(pkt, t, replies)
        elif inst == Inst.PING:
            for i in sorted(self._servos):
                s = self._servos[i]
                if not s.silent:
                    replies.append((s, s.execute(pkt, t)))
        else:
            for s in self._servos.values():
                if not s.silent:
                    s.execute(pkt, t)
        if replies:
            self._schedule(replies, t_end)

    def _sync(self, pkt: dx.Packet, t: float, replies: list) -> None:
        try:
            addr, length, rest = dx.parse_sync_params(pkt.params)
        except DecodeError:
            return
        if pkt.instruction == Inst.SYNC_WRITE:
            step = 1 + length
            if length < 1 or len(rest) % step:
                return                      # malformed: the firmware drops it
            for k in range(0, len(rest), step):
                s = self._servos.get(rest[k])
                if s is not None and not s.silent:
                    s.instructions += 1
                    s.last_instruction_t = t
                    s._refresh_present(t)
                    s.write(addr, rest[k + 1:k + step])
            return
        ids = list(rest)
        segs = []
        for i in ids:
            s = self._servos.get(i)
            if s is None or s.silent:
                if pkt.instruction == Inst.FAST_SYNC_READ:
                    break                   # the chain of segments stops at a missing device
                continue
            s.instructions += 1
            s.last_instruction_t = t
            s._refresh_present(t)
            err, data = s.read(addr, length)
            if err:
                data = bytes(length)
            if s.hardware_error:
                err |= dx.ALERT_BIT
            if pkt.instruction == Inst.SYNC_READ:
                if s._answers(Inst.SYNC_READ):
                    replies.append((s, dx.encode_status(s.dxl_id, err, data)))
            else:
                segs.append((s, err, data))
        if segs:
            data = dx.encode_fast_sync_status([(e, s.dxl_id, d) for s, e, d in segs])
            # one packet built by the devices in turn: the first one's return delay starts it
            replies.append((segs[0][0], data))

    def _receive(self, data: bytes, t_start: float) -> None:
        """Inline serving: the bytes a driver wrote, on the wire from wall time ``t_start`` [s].

        What the serving thread does with bytes it reads, in the caller's thread: each packet is
        handled when it is complete on the wire (its replies queued on the half-duplex wire,
        :meth:`_schedule`).  An error stops the serving, as it would stop the thread: it is kept
        and re-raised by :meth:`check`, and later bytes go unanswered.
        """
        if self._failed or self._closed:
            return
        try:
            with self._lock:
                if self.fast and not self._framer.pending and self._serve_fast(data, t_start):
                    return
                t_end = t_start
                for item in self._framer.feed(data):
                    if not isinstance(item, DecodeError):
                        self.packets_in += 1
                        t_end += len(item.raw) * self._byte_s
                    self._handle(item, t_end)
        except Exception as err:  # noqa: BLE001 - kept and re-raised by check(), like the thread's
            self._error = err
            self._failed = True

    def _serve_fast(self, data: bytes, t_start: float) -> bool:
        """Inline serving of the common healthy case in the compiled firmware
        (:mod:`drivers.sim._dxl_kernel`): a Sync Write of Goal Current and/or a (Fast) Sync Read to
        servos that need nothing of the Python path; the same tables, plant commands, replies and
        wire schedule as :meth:`_handle` gives them.  Returns False (nothing done) for anything
        else: the caller takes the Python path.  Lock held."""
        plant = self.plant
        if plant._noisy or plant._tau_noisy or plant._stuck or plant._pd or not self._slots:
            return False
        buf = np.frombuffer(data, dtype=np.uint8)
        P = self._P
        t1 = self._now()
        if _dk.check(buf, self._T, self._F, self._I, self._slot_of, t1, P) != _dk.OK:
            return False
        n_pk = int(P[_dk.P_COUNT])
        # the encoder step per joint (measure_joint's _quantum_f holds the same values)
        quant = plant._quantum
        has_quant = quant is not None
        if not has_quant:
            quant = self._F[_dk.F_GEAR]              # not read
        plant.advance_to(t1)                          # no watchdog due (check): what _advance does
        byte_s = self._byte_s
        t_end1 = t_start + int(P[2]) * byte_s
        t2 = t1
        which = (1 << n_pk) - 1
        if n_pk == 2:
            t_end2 = t_end1 + int(P[5]) * byte_s
            t2 = self._now()
            if t2 != t1:                               # the wall clock moved: served packet by packet
                which = 1
        out, R = self._out, self._R
        with plant._lock:
            try:
                n_rep = _dk.serve(buf, P, which, self._T, self._F, self._I, self._slot_of, t1, t2, plant._q,
                                  plant._qd, plant._tau_applied, plant._cmd, quant, has_quant, out, R)
            except TypeError:       # the plant's state in arrays of another layout: the Python path
                n_rep = -1
        if n_rep < 0:
            return False            # nothing written (the plant is at t1: no watchdog was due); the Python path
        self.fast_writes += 1
        if which == 1 and n_pk == 2:
            # the wall clock moved between the two packets: the second one (the read) goes the
            # Python path at its own time, which looks at the servos again (a Bus Watchdog may
            # have expired, a Shutdown happened, meanwhile: the check above was at t1)
            self.packets_in += 1
            t_end = t_end1
            for item in self._framer.feed(data[int(P[2]):]):
                if not isinstance(item, DecodeError):
                    self.packets_in += 1
                    t_end += len(item.raw) * self._byte_s
                self._handle(item, t_end)
            return True
        self.packets_in += n_pk
        if n_rep:                   # the replies of the last packet, from its end on the wire
            t_end = t_end2 if n_pk == 2 else t_end1
            slots = self._slots
            self._schedule([(slots[R[k]], out[R[k + 1]:R[k + 2]].tobytes()) for k in range(0, 3 * n_rep, 3)],
                           max(self._bus_free, t_end))
        return True

    def _serve_read(self, data: bytes, t_read: float) -> None:
        """The thread: each packet of bytes read at wall time ``t_read`` [s] is complete on the
        wire its own bytes' time later (no compiled path: the thread serves in Python)."""
        with self._lock:
            for item in self._framer.feed(data):
                if not isinstance(item, DecodeError):
                    self.packets_in += 1
                self._handle(item, t_read + len(getattr(item, "raw", b"")) * self._byte_s)


class InlineDynamixelPort(InlineSerialPort):
    """The driver's serial port to a :class:`DynamixelBusEmulator` served inline (no pseudo-terminal,
    no thread): an :class:`~drivers.sim.serial_emulator.InlineSerialPort` (``wire_time``
    ``"wait"`` or ``"count"``).

    :meth:`write` hands the bytes to the servos at once: each packet is executed, in this thread,
    at the loop time ``now()``, when it is complete on the modelled wire.  Their status packets
    go on the half-duplex wire as the threaded emulator schedules them: a reply starts after the
    request's last byte and the servo's Return Delay Time (9), after the replies before it, and
    lasts its bytes' time at the baud rate (10 bits a byte).  A read gets a reply packet once its
    last byte is on the wire.
    """

    URL = "inline://dynamixel"


DynamixelBusEmulator.PORT = InlineDynamixelPort
