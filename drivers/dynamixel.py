"""Driver for Dynamixel X-series servos in current control over Protocol 2.0 (serial, pyserial).

Outside: joint side, SI.  Inside: the servo's output side through each joint's
:class:`~drivers.base.JointMapping` (``gear_ratio`` for a reduction after the
horn, 1 otherwise; ``torque_constant_nm_per_a`` is the servo's output torque
per ampere, default the model's, see :class:`~drivers.codecs.dynamixel.DxlModel`),
protocol units only in :mod:`drivers.codecs.dynamixel`.

:meth:`DynamixelDriver.enable` pings every ID (the Model Number must match the
configured model), refuses a servo with a hardware error, then with torque off
sets Return Delay Time (9) and Operating Mode (11) = 0 (current control) when
they differ, reads Current Limit (38), arms the Bus Watchdog (98), writes
Goal Current 0 and Torque Enable 1 and reads it back.

One cycle (:meth:`DynamixelDriver.cycle`), one write and one read on the port:

1. :meth:`~DynamixelDriver.make_commands` (pure) turns the torques into one
   Sync Write of Goal Current (102) for every servo (clamped to each Current
   Limit, counted as ``saturated``; a value beyond it would be refused by the
   firmware and the old goal kept);
2. the Sync Write and a Fast Sync Read (or Sync Read) of Present Current,
   Velocity and Position (126, 10 bytes) are written back to back;
3. the status packet(s) are read until every servo answered or
   ``reply_timeout_s``; a servo without a valid answer is ``fresh=False``;
4. a status with the Alert bit makes the driver read that servo's Hardware
   Error Status (70) at once; every ``status_every`` cycles Torque Enable (64)
   and Bus Watchdog (98) are read too.

Steps 1 and 3 of a cycle are compiled (:mod:`drivers._dxl_kernels`, loaded with the first
driver): the Sync Write of a float64 torque vector in one call, and a Fast Sync Read status
packet read whole (header, then its length) and decoded into the joint values in one call; a
command, a packet or a read they decline takes the Python path (the reference, the same bytes
and values; ``fast = False`` switches them off).

``Feedback.fault`` per joint: the Hardware Error Status bits
(:data:`~drivers.codecs.dynamixel.HW_ERROR_BITS`: 0x01 input voltage, 0x04
overheating, 0x08 encoder, 0x10 electrical shock, 0x20 overload) |
:data:`FAULT_WATCHDOG` (0x100, the Bus Watchdog tripped) | :data:`FAULT_TORQUE_OFF`
(0x200, torque found off while the driver had it on).  ``Feedback.info``:
per-cycle ``missing``, ``corrupt`` (CRC or framing errors), ``status_errors``
(status packets with a non-zero error number), ``saturated``, and
``hardware_error`` per joint.  A port that fails raises
:class:`~dynamics.errors.CommsError` (the loop's comms fault).
"""

from __future__ import annotations

import math
import termios
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from dynamics.errors import CommsError, CommsTimeoutError, DecodeError, DeviceFaultError, DriverError

from .base import TIMEOUT_MAX_S, Command, Feedback, JointMapping, TransportDriver, check_mapping, torque_only
from .codecs import dynamixel as dx
from .follow import FollowConfig, TorqueFollow, follow_config
from .codecs.dynamixel import Addr

__all__ = ["DynamixelServo", "DynamixelDriver", "build", "FAULT_WATCHDOG", "FAULT_TORQUE_OFF", "READ_MODES"]

FAULT_WATCHDOG = 0x100
FAULT_TORQUE_OFF = 0x200
READ_MODES = ("fast_sync", "sync")
_RD_MAX_US = 508
#: the first five bytes of a Fast Sync Read status packet (header, broadcast ID)
_FSR_HEAD = dx.HEADER + bytes((dx.BROADCAST_ID,))


@dataclass(frozen=True)
class DynamixelServo:
    """One servo driving one joint.

    Attributes
    ----------
    dxl_id : int
        Bus ID (0..252).
    model : DxlModel
    mapping : JointMapping
        ``torque_constant_nm_per_a`` is the output torque per A of this servo.
    name : str
    current_limit_a : float or None
        A lower current clamp than the servo's Current Limit (None: the servo's).
    """

    dxl_id: int
    model: dx.DxlModel
    mapping: JointMapping
    name: str = ""
    current_limit_a: float | None = None

    def torque_capability_nm(self) -> float:
        """Joint torque the servo delivers [N m]: its current limit (``current_limit_a`` or the
        model's Current Limit, the lower) x torque constant x gear ratio x efficiency."""
        cur = self.model.current_limit_a if self.current_limit_a is None else min(self.current_limit_a,
                                                                                  self.model.current_limit_a)
        m = self.mapping
        return cur * m.torque_constant_nm_per_a * m.gear_ratio * m.efficiency

    def __post_init__(self):
        if isinstance(self.dxl_id, bool) or not isinstance(self.dxl_id, int) or not 0 <= self.dxl_id <= dx.MAX_ID:
            raise DriverError(f"Dynamixel ID must be an integer in 0..252, got {self.dxl_id!r}")
        if not isinstance(self.model, dx.DxlModel):
            raise DriverError(f"model must be a DxlModel, got {type(self.model).__name__}")
        check_mapping(self.mapping, self.name or f"ID {self.dxl_id}")
        c = self.current_limit_a
        if c is not None and not (math.isfinite(c) and c > 0):
            raise DriverError(f"current_limit_a must be finite and > 0, got {c!r}")


class DynamixelDriver(TransportDriver):
    """n Dynamixel servos on one half-duplex bus, current control.

    Parameters
    ----------
    port : SerialTransport
        The open serial port (U2D2, USB-RS485...).
    servos : sequence of DynamixelServo
        In joint order.
    now : callable
        The loop clock [s].
    read_mode : {"fast_sync", "sync"}
        Fast Sync Read (one status packet; X430/540 firmware >= 45, X330 >= 46)
        or Sync Read (one status packet per servo).
    return_delay_us : int
        Return Delay Time written to every servo [us] (0..508, even).
    bus_watchdog_ms : int
        Bus Watchdog written at enable [ms] (20..2540, multiple of 20).  It
        cannot be switched off here: it is what stops the servos when the
        host dies.
    reply_timeout_s : float
        Wall-clock wait for a cycle's answers (and for each configuration answer).
    status_every : int
        Read Torque Enable and Bus Watchdog every that many cycles (0: never).
    baudrate : int
        The bus speed [bit/s] (for :meth:`bus_budget`).
    owns_port : bool
        Close the port in :meth:`close`.
    """

    def __init__(self, port, servos: Sequence[DynamixelServo], *, now: Callable[[], float],
                 read_mode: str = "fast_sync", return_delay_us: int = 0, bus_watchdog_ms: int = 100,
                 reply_timeout_s: float = 0.01, status_every: int = 50, baudrate: int = 4_000_000,
                 owns_port: bool = True, follow: FollowConfig | None = None):
        servos = list(servos)
        if not servos:
            raise DriverError("DynamixelDriver needs at least one servo")
        ids = [s.dxl_id for s in servos]
        if len(set(ids)) != len(ids):
            raise DriverError(f"duplicate Dynamixel IDs: {ids}")
        if read_mode not in READ_MODES:
            raise DriverError(f"read_mode must be one of {READ_MODES}, got {read_mode!r}")
        if isinstance(return_delay_us, bool) or not isinstance(return_delay_us, int) or \
                not 0 <= return_delay_us <= _RD_MAX_US or return_delay_us % 2:
            raise DriverError(f"return_delay_us must be an even integer in 0..{_RD_MAX_US}, got {return_delay_us!r}")
        if isinstance(bus_watchdog_ms, bool) or not isinstance(bus_watchdog_ms, int) or \
                not 20 <= bus_watchdog_ms <= 127 * 20 or bus_watchdog_ms % 20:
            raise DriverError(f"bus_watchdog_ms must be a multiple of 20 in 20..2540 (it cannot be switched off), "
                              f"got {bus_watchdog_ms!r}")
        if not (isinstance(reply_timeout_s, (int, float)) and math.isfinite(reply_timeout_s) and reply_timeout_s > 0):
            raise DriverError(f"reply_timeout_s must be finite and > 0, got {reply_timeout_s!r}")
        if not callable(now):
            raise DriverError("now must be a callable returning the loop time [s]")
        self._port = port
        self._servos = servos
        self._ids = ids
        self._index = {i: j for j, i in enumerate(ids)}
        self._now = now
        self.read_mode = read_mode
        self.return_delay_us = int(return_delay_us)
        self.bus_watchdog_ms = int(bus_watchdog_ms)
        self.reply_timeout_s = float(reply_timeout_s)
        self.status_every = int(status_every)
        self.baudrate = int(baudrate)
        self._owns = owns_port
        self._framer = dx.PacketFramer()
        self._ready: list = []
        n = len(servos)
        self._kt = [s.mapping.torque_constant_nm_per_a for s in servos]
        self._limit_lsb = [self._clamp_lsb(s, s.model.current_limit_lsb) for s in servos]
        self._q = np.full(n, np.nan)
        self._qd = np.full(n, np.nan)
        self._tau = np.full(n, np.nan)
        self._hw = np.zeros(n, dtype=np.int64)
        self._flags = np.zeros(n, dtype=np.int64)
        self._enabled = np.zeros(n, dtype=bool)
        self._read_req = (dx.encode_fast_sync_read if read_mode == "fast_sync" else dx.encode_sync_read)(
            dx.PRESENT_BLOCK_ADDR, dx.PRESENT_BLOCK_LEN, ids)
        self._enabled_cmd = False
        self._closed = False
        self.cycles = 0
        self.last_saturated = 0
        follow = FollowConfig() if follow is None else follow
        if follow.enabled:      # Present Current against Goal Current
            self.follow = TorqueFollow([s.torque_capability_nm() for s in servos], follow)
        # the compiled cycle (drivers._dxl_kernels: numba, loaded with the first driver, not with
        # this module): the Sync Write encoded and the Fast Sync Read status decoded in one call each
        from . import _dxl_kernels as dk
        self._dk = dk
        C = np.zeros((dk.C_ROWS, n))
        for j, s in enumerate(servos):
            m = s.mapping
            C[:, j] = (m.sign, m.gear_ratio, m.offset_rad, m.efficiency, m.gear_ratio * m.efficiency,
                       m.torque_constant_nm_per_a, s.model.current_a_per_lsb)
        self._C = C
        self._lim = np.array(self._limit_lsb, dtype=np.int64)
        self._ids_arr = np.array(ids, dtype=np.int64)
        self._slot_of = np.full(256, -1, dtype=np.int64)
        self._slot_of[ids] = np.arange(n)
        self._tx = np.zeros(16 + 2 * (3 * n + 4), dtype=np.uint8)
        self._fresh = np.zeros(n, dtype=bool)
        self._err = np.zeros(n, dtype=np.int64)
        self._order = np.zeros(n, dtype=np.int64)
        #: whether a cycle may take the compiled encode and decode (the Python path otherwise: the
        #: reference); cycles whose status packet the compiled decoder took (for tests)
        self.fast = True
        self.fast_decoded = 0
        self._n_seg = self._n_alert = 0

    # ------------------------------------------------------------------
    @property
    def n_joints(self) -> int:
        return len(self._servos)

    @property
    def servos(self) -> tuple[DynamixelServo, ...]:
        return tuple(self._servos)

    @staticmethod
    def _clamp_lsb(s: DynamixelServo, device_lsb: int) -> int:
        lim = int(device_lsb)
        if s.current_limit_a is not None:
            lim = min(lim, int(math.floor(s.current_limit_a / s.model.current_a_per_lsb)))
        return lim

    # ------------------------------------------------------------------
    def make_commands(self, command: Command) -> bytes:
        """The Sync Write of Goal Current for one cycle's torques (pure).

        Raises
        ------
        DriverError
            Wrong shape, non-finite torque, or non-zero drive-side gains.
        """
        tau = torque_only(command, self.n_joints, "Dynamixel driver (current control)")
        items = []
        sat = 0
        for j, s in enumerate(self._servos):
            m = s.mapping
            t_out = m.sign * float(tau[j]) / (m.gear_ratio * m.efficiency)
            lsb = s.model.current_to_lsb(t_out / self._kt[j])
            lim = self._limit_lsb[j]
            if abs(lsb) > lim:
                lsb = lim if lsb > 0 else -lim
                sat += 1
            items.append((s.dxl_id, (lsb & 0xFFFF).to_bytes(2, "little")))
        self.last_saturated = sat
        return dx.encode_sync_write(Addr.GOAL_CURRENT, 2, items)

    def _request(self, command: Command) -> bytes:
        """:meth:`make_commands`' Sync Write: a command of torques only (a float64 vector, no
        gains) encoded by one compiled call (:func:`drivers._dxl_kernels.encode_goal_current`:
        the same bytes); anything else, or a torque it declines, takes :meth:`make_commands`
        (which raises for a bad command)."""
        tau = command.torque_nm
        if (self.fast and command.kp_nm_per_rad is None and command.kd_nm_s_per_rad is None
                and type(tau) is np.ndarray and tau.dtype == np.float64 and tau.shape == (self.n_joints,)):
            n_tx, sat = self._dk.encode_goal_current(tau, self._C, self._lim, self._ids_arr, self._tx)
            if n_tx > 0:
                self.last_saturated = sat
                return self._tx[:n_tx].tobytes()
        return self.make_commands(command)

    # -- port I/O ------------------------------------------------------------------------------
    def _flush(self) -> None:
        try:
            self._port.reset_input()
        except termios.error as err:          # pyserial lets this through when the adapter is gone
            raise CommsError(f"serial port {getattr(self._port, 'url', '?')!r}: {err}") from err
        self._framer.clear()
        self._ready.clear()

    def _next(self, deadline: float, stats: dict | None):
        """The next packet (or decode error) from the port, or None at the deadline."""
        while not self._ready:
            # past the deadline, bytes that already arrived are still read, without waiting
            remaining = max(0.0, deadline - time.monotonic())
            try:
                data = self._port.read(self._framer.needed(), remaining)
            except CommsTimeoutError:
                return None
            except DecodeError:
                data = b""
            self._ready.extend(self._framer.feed(data))
        item = self._ready.pop(0)
        if isinstance(item, DecodeError) and stats is not None:
            stats["corrupt"] += 1
        return item

    def _transact(self, packet: bytes, dxl_id: int, what: str) -> dx.Packet:
        """Send a unicast instruction and return its status packet.

        Raises
        ------
        CommsTimeoutError
            No valid answer in time.
        DeviceFaultError
            The status reports an error number (names it).
        """
        self._flush()
        self._port.write(packet)
        deadline = time.monotonic() + self.reply_timeout_s
        while True:
            item = self._next(deadline, None)
            if item is None:
                raise CommsTimeoutError(f"Dynamixel ID {dxl_id}: no answer to {what} within {self.reply_timeout_s} s")
            if isinstance(item, DecodeError) or not item.is_status or item.id != dxl_id:
                continue
            if item.error & 0x7F:
                raise DeviceFaultError(f"Dynamixel ID {dxl_id}: {what} refused: {dx.status_error_name(item.error)}")
            return item

    def _read_u(self, dxl_id: int, addr: int, size: int, signed: bool = False) -> int:
        st = self._transact(dx.encode_read(dxl_id, addr, size), dxl_id, f"read of address {addr}")
        if len(st.params) != size:
            raise CommsError(f"Dynamixel ID {dxl_id}: read of address {addr} returned {len(st.params)} bytes")
        return int.from_bytes(st.params, "little", signed=signed)

    def _write(self, dxl_id: int, addr: int, value: int, size: int) -> None:
        data = (value & ((1 << 8 * size) - 1)).to_bytes(size, "little")
        self._transact(dx.encode_write(dxl_id, addr, data), dxl_id, f"write of {value} to address {addr}")

    def _sync_read_u8(self, addr: int, stats: dict) -> dict[int, int]:
        self._flush()
        self._port.write(dx.encode_sync_read(addr, 1, self._ids))
        return {i: d[0] for i, (e, d) in self._collect(stats, fast=False, length=1).items() if len(d) == 1}

    def _collect(self, stats: dict, *, fast: bool, length: int,
                 deadline: float | None = None) -> dict[int, tuple[int, bytes]]:
        if deadline is None:
            deadline = time.monotonic() + self.reply_timeout_s
        got: dict[int, tuple[int, bytes]] = {}
        n = self.n_joints
        while len(got) < n:
            item = self._next(deadline, stats)
            if item is None:
                break
            if isinstance(item, DecodeError) or not item.is_status:
                continue
            if fast:
                if item.id != dx.BROADCAST_ID:
                    continue
                try:
                    segs = dx.decode_fast_sync_status(item, length)
                except DecodeError:
                    stats["corrupt"] += 1
                    continue
                got.update({i: v for i, v in segs.items() if i in self._index})
                break
            if item.id in self._index:
                got[item.id] = (item.error, item.params)
        return got

    # ------------------------------------------------------------------
    def _feedback(self, fresh: np.ndarray, stats: dict, n_fresh: int | None = None) -> Feedback:
        info = dict(stats)
        info["missing"] = int(self.n_joints - (fresh.sum() if n_fresh is None else n_fresh))
        info["hardware_error"] = self._hw.copy()
        # positional (t_s, position, velocity, torque, fault, fresh, enabled, info): a keyword call
        # costs a few microseconds more, every cycle
        return Feedback(float(self._now()), self._q.copy(), self._qd.copy(), self._tau.copy(), self._hw | self._flags,
                        fresh, self._enabled.copy(), info)

    def _collect_fast(self, stats: dict):
        """A cycle's Fast Sync Read status read as one packet (its header, then the rest by its
        length field: what :meth:`_next` reads in three steps) and decoded by one compiled call
        (:func:`drivers._dxl_kernels.decode_fast_status`) into the joint values.  Returns None
        when the kernel took it (``_fresh``, ``_err``, ``_order`` hold its result), else what
        :meth:`_collect` returns for the same bytes (given to the framer: a damaged or unexpected
        packet, noise, a short read...)."""
        deadline = time.monotonic() + self.reply_timeout_s
        length = dx.PRESENT_BLOCK_LEN
        if self._ready or self._framer.pending:
            return self._collect(stats, fast=True, length=length, deadline=deadline)
        port = self._port
        try:
            head = port.read(7, max(0.0, deadline - time.monotonic()))
        except CommsTimeoutError:
            return {}
        except DecodeError:
            return self._collect(stats, fast=True, length=length, deadline=deadline)
        size = head[5] | head[6] << 8 if len(head) == 7 else 0
        if head[:5] != _FSR_HEAD or not 3 <= size <= self._framer.max_length:
            self._ready.extend(self._framer.feed(head))
            return self._collect(stats, fast=True, length=length, deadline=deadline)
        try:
            rest = port.read(size, max(0.0, deadline - time.monotonic()))
        except CommsTimeoutError:
            self._framer.feed(head)                 # held, as the framer holds a partial packet
            return {}
        except DecodeError:
            self._framer.feed(head)
            return self._collect(stats, fast=True, length=length, deadline=deadline)
        raw = head + rest
        k, n_err, n_alert = self._dk.decode_fast_status(np.frombuffer(raw, dtype=np.uint8), length, self._slot_of,
                                                        self._C, self._q, self._qd, self._tau, self._fresh,
                                                        self._err, self._order)
        if k < 0:
            self._ready.extend(self._framer.feed(raw))
            return self._collect(stats, fast=True, length=length, deadline=deadline)
        self.fast_decoded += 1
        stats["status_errors"] += n_err
        self._n_alert = n_alert
        self._n_seg = k
        return None

    def _exchange(self, sync_write: bytes) -> Feedback:
        stats = {"corrupt": 0, "status_errors": 0, "saturated": self.last_saturated}
        self._flush()
        self._port.write(sync_write + self._read_req)
        if self.fast and self.read_mode == "fast_sync":
            got = self._collect_fast(stats)
            if got is None:
                fresh = self._fresh.copy()
                alerts = []
                if self._n_alert:
                    alerts = [j for j in self._order[:self._n_seg].tolist() if self._err[j] & 0x80 and
                              not self._err[j] & 0x7F]
                return self._after_present(fresh, alerts, stats, self._n_seg - stats["status_errors"])
        else:
            got = self._collect(stats, fast=self.read_mode == "fast_sync", length=dx.PRESENT_BLOCK_LEN)
        fresh = np.zeros(self.n_joints, dtype=bool)
        alerts = []
        for i, (err, data) in got.items():
            j = self._index[i]
            if err & 0x7F:
                stats["status_errors"] += 1
                continue
            if err & dx.ALERT_BIT:
                alerts.append(j)
            try:
                p = dx.decode_present(data)
            except DecodeError:
                stats["corrupt"] += 1
                continue
            s = self._servos[j]
            m = s.mapping
            self._q[j] = m.motor_to_joint_position(p.position_pulse * dx.POSITION_RAD_PER_PULSE)
            self._qd[j] = m.motor_to_joint_velocity(p.velocity_lsb * dx.VELOCITY_RAD_S_PER_LSB)
            self._tau[j] = m.motor_to_joint_torque(s.model.lsb_to_current(p.current_lsb) * self._kt[j])
            fresh[j] = True
        return self._after_present(fresh, alerts, stats)

    def _after_present(self, fresh: np.ndarray, alerts: list, stats: dict, n_fresh: int | None = None) -> Feedback:
        """The rest of a cycle after the present values: the alerted servos' Hardware Error
        Status, the status poll when due, the feedback (``n_fresh``: ``fresh.sum()`` when known)."""
        for j in alerts:
            try:
                self._hw[j] = self._read_u(self._ids[j], Addr.HARDWARE_ERROR_STATUS, 1) or self._hw[j]
            except (CommsTimeoutError, DeviceFaultError):
                stats["status_errors"] += 1
        if self.status_every and self.cycles % self.status_every == 0 and self._enabled_cmd:
            self._poll_status(stats)
        return self._feedback(fresh, stats, n_fresh)

    def _poll_status(self, stats: dict) -> None:
        te = self._sync_read_u8(Addr.TORQUE_ENABLE, stats)
        wd = self._sync_read_u8(Addr.BUS_WATCHDOG, stats)
        for i, v in te.items():
            j = self._index[i]
            self._enabled[j] = v == 1
            if v != 1:
                self._flags[j] |= FAULT_TORQUE_OFF
        for i, v in wd.items():
            if v >= 0x80:                       # -1: Bus Watchdog Error
                self._flags[self._index[i]] |= FAULT_WATCHDOG

    # ------------------------------------------------------------------
    def enable(self) -> Feedback:
        """Current control, Goal Current 0, torque on, watchdog armed; return the first feedback.

        Raises
        ------
        DeviceFaultError
            A servo has a hardware error (reboot it deliberately first), is another
            model than configured, or refuses a setting.
        CommsTimeoutError
            A servo does not answer.
        """
        self._check_open()
        for j, s in enumerate(self._servos):
            i = s.dxl_id
            st = self._transact(dx.encode_ping(i), i, "ping")
            number = int.from_bytes(st.params[:2], "little") if len(st.params) >= 2 else -1
            if number != s.model.model_number:
                other = dx.model_by_number(number)
                raise DeviceFaultError(f"Dynamixel ID {i} is model {number}"
                                       f"{' (' + other.name + ')' if other else ''}, the config says "
                                       f"{s.model.name} ({s.model.model_number})")
            hw = self._read_u(i, Addr.HARDWARE_ERROR_STATUS, 1)
            if hw:
                self._hw[j] = hw
                raise DeviceFaultError(f"Dynamixel ID {i} reports hardware error(s) "
                                       f"{'|'.join(dx.hw_error_names(hw))}: check it and send a Reboot")
            self._write(i, Addr.TORQUE_ENABLE, 0, 1)
            if self._read_u(i, Addr.RETURN_DELAY_TIME, 1) != self.return_delay_us // 2:
                self._write(i, Addr.RETURN_DELAY_TIME, self.return_delay_us // 2, 1)
            if self._read_u(i, Addr.OPERATING_MODE, 1) != 0:
                self._write(i, Addr.OPERATING_MODE, 0, 1)
            self._limit_lsb[j] = self._clamp_lsb(s, self._read_u(i, Addr.CURRENT_LIMIT, 2))
            self._lim[j] = self._limit_lsb[j]
            self._write(i, Addr.BUS_WATCHDOG, 0, 1)        # clears a previous watchdog error
            self._write(i, Addr.GOAL_CURRENT, 0, 2)
        for s in self._servos:
            self._write(s.dxl_id, Addr.TORQUE_ENABLE, 1, 1)
            self._write(s.dxl_id, Addr.BUS_WATCHDOG, self.bus_watchdog_ms // 20, 1)
        for j, s in enumerate(self._servos):
            self._enabled[j] = self._read_u(s.dxl_id, Addr.TORQUE_ENABLE, 1) == 1
        if not self._enabled.all():
            bad = [self._ids[j] for j in np.flatnonzero(~self._enabled)]
            self.disable()
            raise DeviceFaultError(f"Dynamixel IDs {bad} did not enable torque")
        self._flags[:] = 0
        self._enabled_cmd = True
        return self._follow_start(self._exchange(self.make_commands(Command(np.zeros(self.n_joints)))))

    def disable(self) -> None:
        """Goal Current 0, then Torque Enable 0 for every servo (Sync Writes, no answers awaited)."""
        self._check_open()
        self._port.write(dx.encode_sync_write(Addr.GOAL_CURRENT, 2, [(i, b"\x00\x00") for i in self._ids]) +
                         dx.encode_sync_write(Addr.TORQUE_ENABLE, 1, [(i, b"\x00") for i in self._ids]))
        self._enabled_cmd = False
        self._enabled[:] = False

    def fault_text(self, joint: int, code: int) -> str:
        """The Hardware Error Status bits' names, the Bus Watchdog, torque found off, or the
        host's own check."""
        code = int(code)
        if 0 < code < 0x400:
            parts = dx.hw_error_names(code & 0xFF)
            if code & FAULT_WATCHDOG:
                parts.append("bus watchdog tripped")
            if code & FAULT_TORQUE_OFF:
                parts.append("torque found off")
            return f"{', '.join(parts)} (0x{code:X})"
        return super().fault_text(joint, code)

    def clear_faults(self) -> None:
        """Torque off, then a Reboot (0x08) of every servo that reports a hardware error (the
        Dynamixel's only way to clear one; the operator confirmed it in the recovery path,
        :meth:`Driver.clear_faults`); :meth:`enable` then sets the servos up again.

        Raises
        ------
        CommsTimeoutError
            A servo does not answer.
        """
        self.disable()
        for j, s in enumerate(self._servos):
            i = s.dxl_id
            if self._read_u(i, Addr.HARDWARE_ERROR_STATUS, 1):
                self._transact(dx.encode_reboot(i), i, "reboot")
                self._hw[j] = 0

    def bus_budget(self, loop_hz: float):
        """Serial bus budget of this configuration (:func:`drivers.busload.dynamixel_budget`)."""
        from .busload import dynamixel_budget
        return dynamixel_budget(self.n_joints, loop_hz, baudrate=self.baudrate,
                                return_delay_s=self.return_delay_us * 1e-6, read_mode=self.read_mode)

    @property
    def transports(self) -> tuple:
        """The serial port (one)."""
        return (self._port,)


def build(section, *, now: Callable[[], float], transports=None) -> DynamixelDriver:
    """Build a :class:`DynamixelDriver` from a ``[driver]`` table (``type = "dynamixel"``).

    Keys: ``port`` (device path or pyserial URL), ``baudrate`` (4000000),
    ``read_mode`` ("fast_sync" | "sync"), ``return_delay_us`` (0),
    ``bus_watchdog_ms`` (100; 0 is refused), ``reply_timeout_s`` (0.01),
    ``status_every`` (50); ``[[joints]]`` with ``id``, ``model`` (a key of
    :data:`drivers.codecs.dynamixel.DXL_MODELS`), optional ``current_limit_a``,
    ``name`` and the mapping keys (``torque_constant_nm_per_a`` defaults to
    the model's).  ``transports`` may hold ``{"port": SerialTransport}``.
    """
    from . import registry
    from .serial_port import SerialTransport
    given = (transports or {}).get("port")
    url = section.str("port", None) if given is not None else section.str("port")
    baud = section.int("baudrate", 4_000_000, minimum=1)
    mode = section.str("read_mode", "fast_sync", choices=list(READ_MODES))
    rd = section.int("return_delay_us", 0, minimum=0, maximum=_RD_MAX_US)
    if rd % 2:
        raise section.error("return_delay_us", f"must be even (2 us steps), got {rd}")
    wd = section.int("bus_watchdog_ms", 100, minimum=20, maximum=2540)
    if wd % 20:
        raise section.error("bus_watchdog_ms", f"must be a multiple of 20 ms, got {wd}")
    rt = section.float("reply_timeout_s", 0.01, minimum=0.0, strict_min=True, maximum=TIMEOUT_MAX_S["reply_timeout_s"])
    every = section.int("status_every", 50, minimum=0)
    follow = follow_config(section.section("follow", {}))
    servos = []
    seen = {}
    for js in section.sections("joints"):
        i = js.int("id", minimum=0, maximum=dx.MAX_ID, doc="the servo's Dynamixel ID (set with Dynamixel Wizard)")
        if i in seen:
            raise js.error("id", f"ID {i} already used by {seen[i]}")
        seen[i] = js.path
        model, mapping, lim = _servo_settings(js)
        name = js.str("name", "", doc=registry.JOINT_NAME_DOC)
        js.finish()
        servos.append(DynamixelServo(i, model, mapping, name, lim))
    if not servos:
        raise section.error("joints", "at least one joint is required")
    section.finish()
    if given is not None:
        port = given
    else:
        try:
            port = SerialTransport(url, baudrate=baud, timeout_s=rt, max_line_bytes=1 << 20)
        except CommsError as err:   # name the config file and field, as for a CAN bus
            raise CommsError(f"{section.file or '<config>'}: field '{section.path}.port': {err}") from err
    try:
        return DynamixelDriver(port, servos, now=now, read_mode=mode, return_delay_us=rd, bus_watchdog_ms=wd,
                               reply_timeout_s=rt, status_every=every, baudrate=baud, follow=follow)
    except BaseException:
        if given is None:
            port.close()
        raise


def _servo_settings(js) -> tuple:
    """``(model, mapping, current_limit_a or None)`` of a Dynamixel ``[[driver.joints]]`` table
    (``torque_constant_nm_per_a`` defaults to the model's)."""
    from . import registry
    model = dx.DXL_MODELS[js.str("model", choices=sorted(dx.DXL_MODELS),
                                 doc="servo model: its current unit, torque constant and limits")]
    mapping = registry.joint_mapping(js, model.torque_constant_nm_per_a)
    return model, mapping, js.float("current_limit_a", None, minimum=0.0, strict_min=True,
                                    doc="current limit written to the servo [A] (default: the model's)")


def capabilities(section) -> list:
    """Each joint's :class:`~drivers.base.JointCapability` of a ``dynamixel`` table: the current
    limit (``current_limit_a``, or the model's factory Current Limit when lower or unset) x
    ``torque_constant_nm_per_a`` (output torque per A, the model's stall torque / stall current
    by default) x gear ratio x efficiency; positions are int32 pulses (no range to check)."""
    from . import registry
    from .base import JointCapability
    out = []
    for js in registry.capability_joints(section):
        model, m, lim = _servo_settings(js)
        servo = DynamixelServo(1, model, m, "", lim)       # the servo's arithmetic (no port)
        cur = model.current_limit_a if lim is None else min(lim, model.current_limit_a)
        src = (f"current_limit_a {cur:g} A" if lim is not None and lim < model.current_limit_a
               else f"the {model.name}'s Current Limit {cur:g} A")
        out.append(JointCapability(
            torque_max_nm=servo.torque_capability_nm(),
            torque_from=(f"{src} x torque_constant_nm_per_a {m.torque_constant_nm_per_a:.4g} N m/A x "
                         f"{registry.mapping_text(m)}"),
            settings=(js.field("model"), js.field("current_limit_a"), js.field("gear_ratio")),
            offset_key=registry.offset_key(js), path=js.path))
    return out
