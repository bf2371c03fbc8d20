"""Driver for MIT-protocol actuators (CubeMars / T-Motor AK series, mini cheetah drives) over CAN.

Outside: joint side, SI (:mod:`drivers.base`).  Inside: motor side, protocol
units, via each joint's :class:`~drivers.base.JointMapping` and
:class:`~drivers.codecs.mit.MitLimits`.

One control cycle (:meth:`MitCanDriver.cycle`):

1. :meth:`~MitCanDriver.make_commands` turns the joint command into one 8-byte
   frame per motor (pure; refuses non-finite values and impossible set-points
   with :class:`~dynamics.errors.DriverError` before anything is sent);
2. frames still queued from earlier cycles are discarded (counted as
   ``late``), then every bus gets its motors' frames back to back;
3. replies are collected until every motor answered or ``reply_timeout_s``
   (wall clock) passed.  A missing reply leaves that joint ``fresh=False`` with
   its last good values; an undecodable frame is counted (``corrupt``) and
   treated as missing.  Only a failing bus raises
   (:class:`~dynamics.errors.CommsError`).

The values of a cycle are handled by compiled functions on the driver's arrays
(:mod:`drivers._mit_kernels`): a command of torques only is encoded by one call (any
other command by the codec's functions in Python), and the collected replies are
decoded, mapped to the joint side, checked by the follow rule and turned into the
Feedback's vectors by one call.  Python does the frames' I/O (python-can needs a
``Message`` per frame) and sorts the received frames (error, remote, corrupt,
unexpected, duplicate).  The results equal the codec's plain functions to the bit
(``tests/test_mit_kernels.py``).

On one bus whose emulated drives are served in this thread on a lock-step clock (an
offline run: :meth:`~drivers.transport.CanTransport.serve_batch`), a command of torques
only is exchanged in one call: nothing queued, the frames served by the drives at once
(one compiled call in the emulator), their ordinary replies put in the receive buffer by
one compiled call (:func:`drivers._mit_kernels.take_replies`), any other reply read frame
by frame as below; the same frames, state and Feedback as frame by frame
(``tests/test_mit_batch.py``).  On a real bus, a wall clock or a thread-served emulator
nothing changes.

Gains: the drive's PD acts on motor-side quantities, so joint gains are
mapped as ``kp_motor = kp_joint / (gear_ratio**2 * efficiency)`` (same for
kd), which makes the joint-side torque ``kp_joint * (q_des - q)``.

``Feedback.fault`` is the CubeMars error byte (see
:data:`drivers.codecs.mit.MIT_ERROR_CODES`) when it is non-zero, else a fault the
driver detected itself (:data:`drivers.mit_health.DETECTED_FAULTS`, codes above
255, latched until the next :meth:`~MitCanDriver.enable`):

* the measured torque does not follow the commanded one (a limp motor), or the
  replies repeat byte for byte while the command changes (a hung drive), checked
  by :class:`~drivers.mit_health.FollowMonitor` on every reply, both variants;
* a reported temperature above ``temperature_max_c`` (8-byte replies only).

The classic 6-byte reply has no error byte, so there only the detected faults
exist; ``reply_variant = "cubemars8"`` makes a 6-byte reply count as corrupt (the
setting for drives that send the 8-byte reply, so a drive that lost its error
byte is not taken for healthy).  ``Feedback.info`` holds per-cycle counters
(``missing``, ``corrupt``, ``late``, ``unexpected``, ``duplicate``,
``error_frames``, ``saturated``, ``foreign``), ``temperature_c`` (NaN where unknown) and
``torque_residual_nm`` (measured minus expected motor torque, per joint).

Foreign traffic (another controller or a spoofer on the bus): :meth:`MitCanDriver.enable`
first listens ``listen_s`` and refuses (:class:`~dynamics.errors.ForeignTrafficError`) without
sending a frame when it hears command frames to our motor ids or replies from our motors;
a refused driver's :meth:`~MitCanDriver.disable` sends nothing.  While it runs, a command
frame on one of our motors' ids (we never receive our own) ends the exchange with that error
at once; replies we did not ask for (one more than the requests sent to that motor, differing
from the one kept: a byte-identical duplicate is CAN's own retransmission) are not used, and
:data:`FOREIGN_REPLIES_MAX` of them within :data:`FOREIGN_WINDOW_CYCLES` cycles raise it too
(a single one can be a reply whose id byte a gateway corrupted).
"""

from __future__ import annotations

import collections
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from dynamics.errors import CommsError, CommsTimeoutError, DriverError

from .base import TIMEOUT_MAX_S, Command, Feedback, JointMapping, TransportDriver, check_mapping, command_vector
from . import _mit_kernels as _k
from .codecs import mit as codec
from .mit_health import FAULT_OVER_TEMPERATURE, FollowConfig, FollowMonitor, follow_config
from .transport import CanTransport, Frame, group_by_bus, recv_any_fields

__all__ = ["MitJoint", "MitCanDriver", "build"]

#: replies nobody of ours asked for, within FOREIGN_WINDOW_CYCLES cycles, that make foreign traffic
FOREIGN_REPLIES_MAX = 3
FOREIGN_WINDOW_CYCLES = 50
#: requests a motor may owe a reply for: a reply up to this many cycles late is still ours (a
#: stalled peer answers a burst of them; the stale-feedback limit, at most 100 cycles, ends a run
#: whose motor stays silent longer)
_OWED_MAX = 100
#: frames read without waiting once a cycle's reply deadline has passed (what was queued in time)
_LATE_FRAMES_MAX = 64

#: p, v, kp, kd fields all at their maximum (with t = 0xFFC..0xFFE the frame is ENTER/EXIT/ZERO)
_ALL_ONES_4 = (0xFFFF, 0xFFF, 0xFFF, 0xFFF)


@dataclass(frozen=True)
class MitJoint:
    """One MIT actuator driving one joint.

    Attributes
    ----------
    transport : CanTransport
        The bus the motor is on.
    can_id : int
        Motor CAN id, 1..255 (commands use it as arbitration id; replies carry
        it in byte 0).
    limits : MitLimits
        Field ranges flashed in the drive.
    mapping : JointMapping
        Motor side <-> joint side.
    name : str
        Joint name for messages.
    """

    transport: CanTransport
    can_id: int
    limits: codec.MitLimits
    mapping: JointMapping = field(default_factory=JointMapping)
    name: str = ""

    def __post_init__(self):
        if isinstance(self.can_id, bool) or not isinstance(self.can_id, int) or not 1 <= self.can_id <= 255:
            raise DriverError(f"MIT can_id must be an integer in [1, 255], got {self.can_id!r}")
        if not isinstance(self.limits, codec.MitLimits):
            raise DriverError(f"limits must be MitLimits, got {type(self.limits).__name__}")
        check_mapping(self.mapping, self.name or f"can_id {self.can_id}")


class MitCanDriver(TransportDriver):
    """n MIT actuators on one or more CAN buses.

    Parameters
    ----------
    joints : sequence of MitJoint
        In joint order.
    now : callable
        The control loop's clock [s]; used to time-stamp feedback.
    reply_timeout_s : float
        How long a cycle waits (wall clock) for replies after sending.
    enable_timeout_s : float
        How long :meth:`enable` waits for the replies to ENTER_MOTOR_MODE (per try).
    enable_tries : int
        Number of times ENTER_MOTOR_MODE is sent to motors that did not answer.
    owns_transports : bool
        Close the transports in :meth:`close`.
    quantization : {"nearest", "truncate"}
        How command values are rounded to the protocol's integer fields:
        ``"nearest"`` (unbiased, default) or ``"truncate"`` (the reference host
        code; biases every torque by -1/2 LSB, see :mod:`drivers.codecs.mit`).
    reply_centered : bool
        Decode the replies' position, velocity and torque to the middle of their
        quantisation step (default), correcting the firmware's truncation; False
        reads them as the plain inverse mapping does.
    reply_variant : {"auto", "classic6", "cubemars8"}
        ``"auto"`` accepts 6- and 8-byte replies; ``"classic6"`` / ``"cubemars8"``
        accept only their length (anything else counts as corrupt).
    follow : FollowConfig
        Settings of the "drive follows its commands" checks (module docstring).
    temperature_max_c : float
        Highest reported driver temperature [degC] before a fault (8-byte replies).
    """

    def __init__(self, joints: Sequence[MitJoint], *, now: Callable[[], float], reply_timeout_s: float = 0.002,
                 enable_timeout_s: float = 0.05, enable_tries: int = 3, owns_transports: bool = True,
                 quantization: str = "nearest", reply_centered: bool = True, reply_variant: str = "auto",
                 follow: FollowConfig | None = None, temperature_max_c: float = 85.0):
        joints = list(joints)
        if not joints:
            raise DriverError("MitCanDriver needs at least one joint")
        for name, v in (("reply_timeout_s", reply_timeout_s), ("enable_timeout_s", enable_timeout_s)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise DriverError(f"{name} must be finite and > 0, got {v!r}")
        if not callable(now):
            raise DriverError("now must be a callable returning the loop time [s]")
        self._joints = joints
        self._now = now
        self.reply_timeout_s = float(reply_timeout_s)
        self.enable_timeout_s = float(enable_timeout_s)
        self.enable_tries = int(enable_tries)
        if quantization not in ("nearest", "truncate"):
            raise DriverError(f"quantization must be 'nearest' or 'truncate', got {quantization!r}")
        self.quantization = quantization
        self._nearest = quantization == "nearest"
        self.reply_centered = bool(reply_centered)
        lengths = {"auto": (6, 8), "classic6": (6,), "cubemars8": (8,)}
        if reply_variant not in lengths:
            raise DriverError(f"reply_variant must be one of {sorted(lengths)}, got {reply_variant!r}")
        self.reply_variant = reply_variant
        self._reply_lengths = lengths[reply_variant]
        if not (isinstance(temperature_max_c, (int, float)) and math.isfinite(temperature_max_c)
                and 0 < temperature_max_c <= 255):
            raise DriverError(f"temperature_max_c must be in (0, 255] degC, got {temperature_max_c!r}")
        self.temperature_max_c = float(temperature_max_c)
        self._owns = owns_transports
        # buses in order of first appearance; per bus the joint index of each motor id
        self._buses, self._bus_of, self._by_id = group_by_bus([(jt.transport, jt.can_id) for jt in joints],
                                                              "joints", "CAN id")
        n = len(joints)
        # per-joint scalars of the Python path (make_commands): plain Python lists (per-element
        # access to a small numpy array costs more than the arithmetic)
        m = [jt.mapping for jt in joints]
        self._sign = [float(x.sign) for x in m]
        self._gear = [float(x.gear_ratio) for x in m]
        self._off = [float(x.offset_rad) for x in m]
        self._eff = [float(x.efficiency) for x in m]
        self._ge = [g * e for g, e in zip(self._gear, self._eff)]
        self._lim = [jt.limits for jt in joints]
        # the codec's functions for each drive's limits (constants computed once, same values)
        nearest = self._nearest
        #: per joint, what make_commands needs: (limits, sign, gear, offset, g*g*e, g*e, can id, fields encoder)
        self._cmd_consts = [(jt.limits, s, g, off, g * g * e, ge, jt.can_id,
                             codec.command_fields_encoder(jt.limits, nearest))
                            for jt, s, g, off, e, ge in zip(joints, self._sign, self._gear, self._off, self._eff,
                                                            self._ge)]
        #: per joint, the command values decoder (what decoding a sent frame gives; the follow
        #: check's input for a command the compiled encoder did not make)
        self._cmd_values = [codec.command_values_decoder(L) for L in self._lim]
        # a torque-only command (no position, velocity or gains): every field but the torque's is
        # what _encode computes for zeros, per joint
        fixed4 = [fields(0.0, s * 0.0 * g, 0.0 / gge, 0.0 / gge, 0.0)[:4]
                  for L, s, g, off, gge, ge, can_id, fields in self._cmd_consts]
        # (a zero position is mid-range, so these fields are never all ones; if they were, the
        # special-frame check of _encode would apply and the compiled torque encoder would not)
        self._torque_path = all(f != _ALL_ONES_4 for f in fixed4)
        # the compiled cycle's constants and state (drivers._mit_kernels: the layouts)
        C = np.zeros((_k.C_ROWS, n))
        fixed = np.zeros((n, 8), dtype=np.uint8)
        for j, L in enumerate(self._lim):
            pm, vm, t_max = L.p_max_rad, L.v_max_rad_s, L.t_max_nm
            C[_k.C_SIGN, j], C[_k.C_GEAR, j], C[_k.C_OFF, j] = self._sign[j], self._gear[j], self._off[j]
            C[_k.C_EFF, j], C[_k.C_GE, j], C[_k.C_TMAX, j] = self._eff[j], self._ge[j], t_max
            # the spans and half steps as the codec computes them (field_encoder, command_values_decoder,
            # decode_reply_values): the same operands
            C[_k.C_T_LO, j], C[_k.C_T_SPAN, j] = -t_max, t_max - -t_max
            C[_k.C_P_LO, j], C[_k.C_P_SPAN, j] = -pm, pm - -pm
            C[_k.C_V_LO, j], C[_k.C_V_SPAN, j] = -vm, vm - -vm
            C[_k.C_P_HALF, j] = 0.5 * (pm - -pm) / 0xFFFF
            C[_k.C_V_HALF, j] = 0.5 * (vm - -vm) / 0xFFF
            C[_k.C_T_HALF, j] = 0.5 * (t_max - -t_max) / 0xFFF
            C[_k.C_FIX_P:_k.C_FIX_KD + 1, j] = self._cmd_values[j](*fixed4[j], 0)[:4]
            fixed[j] = np.frombuffer(codec.pack_command(*fixed4[j], 0), dtype=np.uint8)
        self._C = C
        self._fixed = fixed
        self._half = 0.5 if nearest else 0.0
        S = np.zeros((_k.S_ROWS, n))
        S[[_k.S_Q, _k.S_QD, _k.S_TAU, _k.S_TEMP]] = math.nan
        self._S = S
        self._I = np.zeros((_k.I_ROWS, n), dtype=np.int64)
        # the frames: the payloads the compiled encoder writes, the replies _collect keeps
        # (numpy views of bytearrays: Python slices them, the kernels read and write them)
        self._tx_buf = bytearray(8 * n)
        self._tx = np.frombuffer(self._tx_buf, dtype=np.uint8).reshape(n, 8)
        self._rx_buf = bytearray(_k.RX_STRIDE * n)
        self._rx = np.frombuffer(self._rx_buf, dtype=np.uint8)
        self._no_lengths = bytes(n)
        self.monitor = FollowMonitor([L.t_max_nm for L in self._lim], follow if follow is not None
                                     else FollowConfig())
        # what _feedback copies for the enabled vector
        self._all_true = np.ones(n, dtype=bool)
        self._all_false = np.zeros(n, dtype=bool)
        self._enabled = False                       # every drive in motor mode (enable() .. disable())
        self._closed = False
        #: number of values clamped to the protocol ranges by the last make_commands()
        self.last_saturated = 0
        self.cycles = 0
        #: joints whose EXIT_MOTOR_MODE the last disable() could not confirm (no reply, twice)
        self.exit_unconfirmed: list[int] = []
        self._reply_len = 6   # length of the replies seen (6 classic, 8 CubeMars), for bus_flows
        #: per joint, requests sent that no reply answered yet (at most _OWED_MAX)
        self._owed = [0] * n
        #: per joint, the last payloads sent (a bus that echoes our frames, as udp_multicast does,
        #: hands them back: those are not foreign; TransportDriver._screen_master)
        self._recent = [self._echo_of(self._bus_of[j], jt.can_id) for j, jt in enumerate(self._joints)]
        self._foreign_seen: list[str] = []          # foreign command frames seen since the last check
        self._foreign_replies: list[int] = []       # cycles in which a reply nobody asked for came
        # the batch exchange (one bus whose devices are served in this thread on a lock-step clock:
        # CanTransport.serve_batch): the commands' ids in joint order, the replies' buffers, each
        # motor id's joint, the reply lengths accepted
        self._batch_ids = tuple(jt.can_id for jt in joints) if len(self._buses) == 1 else None
        self._batch_arb = np.zeros(n, dtype=np.int64)
        self._batch_rep = np.zeros((n, _k.RX_STRIDE), dtype=np.uint8)
        self._id_joint = np.full(256, -1, dtype=np.int64)
        for j, jt in enumerate(joints):
            self._id_joint[jt.can_id] = j
        self._len_ok = np.zeros(9, dtype=np.bool_)
        self._len_ok[list(self._reply_lengths)] = True
        #: frames a batch exchange took off the bus that were not read yet (read before the bus)
        self._carry: collections.deque = collections.deque()

    # ------------------------------------------------------------------
    @property
    def n_joints(self) -> int:
        return len(self._joints)

    @property
    def joints(self) -> tuple[MitJoint, ...]:
        return tuple(self._joints)

    @property
    def transports(self) -> tuple[CanTransport, ...]:
        """The distinct buses, in order of first use."""
        return tuple(self._buses)

    # ------------------------------------------------------------------
    def _vec(self, x, name: str, n: int, default: float | None):
        if x is None:
            return None if default is None else [default] * n
        return command_vector(x, name, n)

    def make_commands(self, command: Command) -> list[Frame]:
        """Encode one cycle's command: one MIT command frame per joint, in joint order.

        Pure (no I/O).  Joint values are mapped to the motor side and clamped to
        the protocol ranges (torque, velocity, gains); the number of clamped
        values is available as :attr:`last_saturated`.

        Raises
        ------
        DriverError
            Wrong shapes, non-finite values, negative gains, or a position
            set-point outside the drive's position range while kp > 0 (it
            would be clamped to a different target).
        """
        return [Frame(can_id, data) for can_id, data, _ in self._encode(command)]

    def _encode(self, command: Command) -> list[tuple[int, bytes, tuple]]:
        """:meth:`make_commands` as ``(can_id, payload, integer fields)`` per joint (no records).

        The fields are :func:`~drivers.codecs.mit.encode_command_fields` of the frame, so the
        follow check gets the sent command's values without decoding the payload.
        """
        n = len(self._joints)
        tau = self._vec(command.torque_nm, "torque_nm", n, None)
        if tau is None:
            raise DriverError("command.torque_nm is required")
        kp = self._vec(command.kp_nm_per_rad, "kp_nm_per_rad", n, 0.0)
        kd = self._vec(command.kd_nm_s_per_rad, "kd_nm_s_per_rad", n, 0.0)
        pos = self._vec(command.position_rad, "position_rad", n, None)
        vel = self._vec(command.velocity_rad_s, "velocity_rad_s", n, 0.0)
        if pos is None and any(kp):         # a non-zero kp (the values are finite)
            raise DriverError("command.position_rad is required when kp_nm_per_rad is non-zero")
        out = []
        saturated = 0
        pack = codec.pack_command
        for j, (L, s, g, off, gge, ge, can_id, fields) in enumerate(self._cmd_consts):
            kp_j, kd_j = kp[j], kd[j]
            if kp_j < 0 or kd_j < 0:
                raise DriverError(f"joint {j}: gains must be >= 0, got kp={kp_j}, kd={kd_j}")
            kp_m = kp_j / gge
            kd_m = kd_j / gge
            p_m = s * (pos[j] - off) * g if pos is not None else 0.0
            if kp_m > 0 and abs(p_m) > L.p_max_rad:
                raise DriverError(
                    f"joint {j}: position set-point {pos[j]:.4g} rad is motor position {p_m:.4g} rad, outside "
                    f"the drive's range +-{L.p_max_rad} rad")
            v_m = s * vel[j] * g
            t_m = s * tau[j] / ge
            saturated += (abs(t_m) > L.t_max_nm) + (abs(v_m) > L.v_max_rad_s) + (kp_m > L.kp_max) + (kd_m > L.kd_max)
            f = fields(p_m, v_m, kp_m, kd_m, t_m)
            if 0xFFC <= f[4] <= 0xFFE and f[:4] == _ALL_ONES_4:
                # the payload would be ENTER/EXIT/ZERO (0xFF x 7, then 0xFC / 0xFD / 0xFE): lower the
                # torque by 3 LSB (the last byte to 0xF9..0xFB); 0xFF x 8 is an ordinary command
                f = f[:4] + (f[4] - 3,)
            out.append((can_id, pack(*f), f))
        self.last_saturated = saturated
        return out

    # ------------------------------------------------------------------
    def _sent(self, joints, payloads) -> None:
        """Count a request sent to each of ``joints`` (each owes one more reply) and keep its
        payload (to tell an echo of it from a foreign frame)."""
        owed = self._owed
        recent = self._recent
        for j, data in zip(joints, payloads):
            if owed[j] < _OWED_MAX:
                owed[j] += 1
            recent[j].append(bytes(data))

    def _send_per_bus(self, frames: Sequence[Frame], joints: Sequence[int]) -> None:
        # frames of ``joints`` (in that order); send bus by bus, back to back
        for b, t in enumerate(self._buses):
            for j, f in zip(joints, frames):
                if self._bus_of[j] == b:
                    t.send_frame(f)
        self._sent(joints, [f.data for f in frames])

    def _send_encoded(self, encoded: Sequence[tuple]) -> None:
        """:meth:`_send_per_bus` for :meth:`_encode`'s output (the same frames, without records)."""
        buses = self._buses
        if len(buses) == 1:
            send = buses[0].send
            for can_id, data, _ in encoded:
                send(can_id, data)
        else:
            bus_of = self._bus_of
            for b, t in enumerate(buses):
                for j, e in enumerate(encoded):
                    if bus_of[j] == b:
                        t.send(e[0], e[1])
        self._sent(range(len(encoded)), [e[1] for e in encoded])

    def _serve_batch(self, stats: dict) -> bool:
        """The encoded frames (``_tx``) sent and their replies received in one call where the bus
        serves its devices in this thread on a lock-step clock (:meth:`CanTransport.serve_batch`):
        what :meth:`_drain`, :meth:`_send_encoded` and :meth:`_collect` do then (nothing is queued
        before the send: the bus declines otherwise), the ordinary replies put in the receive
        buffer by one compiled call (:func:`drivers._mit_kernels.take_replies`), any other
        read frame by frame.  False, nothing sent, where the bus declines."""
        r = self._buses[0].serve_batch(self._batch_ids, self._tx, self._batch_arb, self._batch_rep)
        if r is None:
            return False
        tb = bytes(self._tx_buf)
        length = _k.take_replies(r, self._batch_arb, self._batch_rep, self._id_joint, self._len_ok, self._rx)
        if length:
            # what _sent, then _collect for each reply do: every joint was sent a request and
            # answered it (a count at the cap, which _sent leaves, one less), its payload kept
            self._reply_len = length
            for j, recent in enumerate(self._recent):
                recent.append(tb[8 * j:8 * j + 8])
            owed = self._owed
            if _OWED_MAX in owed:
                owed[:] = [min(o, _OWED_MAX - 1) for o in owed]
        else:
            self._sent(range(len(self._joints)), [tb[8 * j:8 * j + 8] for j in range(len(self._joints))])
            rep = self._batch_rep
            now = time.time()
            self._carry.extend((int(a), bytes(rep[i, 1:1 + rep[i, 0]]), now, False, False, False, None)
                               for i, a in enumerate(self._batch_arb[:r].tolist()))
            self._collect(set(range(len(self._joints))), self.reply_timeout_s, stats)
        return True

    def _collect(self, pending: set[int], timeout_s: float, stats: dict) -> None:
        """Receive replies until every joint in ``pending`` answered or the time is up, and put
        each joint's reply (its length, then its payload) in the receive buffer, where the
        compiled step (:meth:`_after_collect`) decodes and keeps it; a length of 0: no reply."""
        rx = self._rx_buf
        rx[::_k.RX_STRIDE] = self._no_lengths
        monotonic = time.monotonic
        deadline = monotonic() + timeout_s
        buses = self._buses
        one = buses[0].recv_fields if len(buses) == 1 else None
        lengths = self._reply_lengths
        by_id = self._by_id
        carry = self._carry
        late = 0
        while pending:
            # past the deadline, what is already queued is still read (a reply that arrived in
            # time is not lost because this process was stalled), without waiting, and at most
            # a bus's worth of frames
            remaining = deadline - monotonic()
            if remaining <= 0:
                remaining = 0.0
                late += 1
                if late > _LATE_FRAMES_MAX:
                    break
            if carry:
                # a batch exchange's replies, taken off the (one) bus before it is read again
                b, frame = 0, carry.popleft()
            elif one is not None:
                # recv_any_fields with one transport
                b, frame = 0, one(remaining)
                if frame is None:
                    break
            else:
                got = recv_any_fields(buses, remaining)
                if got is None:
                    break
                b, frame = got
            # frame: (arbitration_id, data, timestamp, is_error_frame, is_remote, ...)
            if frame[3]:
                stats["error_frames"] += 1
                continue
            if frame[4]:
                stats["unexpected"] += 1
                continue
            data = frame[1]
            if frame[0] in by_id[b]:            # a command to one of our motors: not ours
                self._screen(b, frame, stats)
                continue
            length = len(data)
            if length not in lengths:           # not an MIT reply of the accepted variants
                stats["corrupt"] += 1
                continue
            # the motor id is in byte 0
            j = by_id[b].get(data[0])
            if j is None:
                stats["unexpected"] += 1
                continue
            k = _k.RX_STRIDE * j
            if rx[k]:
                self._screen(b, frame, stats)   # a second reply in one exchange
                continue
            rx[k] = length
            rx[k + 1:k + 1 + length] = data
            self._reply_len = length
            if self._owed[j]:
                self._owed[j] -= 1
            pending.discard(j)

    def _fresh(self) -> list[bool]:
        """Per joint, whether the last :meth:`_collect` got its reply."""
        return [x != 0 for x in self._rx_buf[::_k.RX_STRIDE]]

    def _after_collect(self, mode: int, a: float = 0.0):
        """The compiled step after :meth:`_collect` (:func:`drivers._mit_kernels.after_collect`):
        the replies kept (``MODE_STORE``), the follow checks (``MODE_FOLLOW``, gain ``a``),
        the Feedback's vectors (``MODE_FEEDBACK``).  Returns (missing, floats, fault, fresh)."""
        n = len(self._joints)
        cfg = self.monitor.config
        out_f = np.empty(5 * n)
        fault = np.empty(n, dtype=np.int64)
        fresh = np.empty(n, dtype=np.bool_)
        missing = _k.after_collect(self._rx, self._C, self._S, self._I, self.monitor._f, self.monitor._i, mode,
                                   self.reply_centered, self.temperature_max_c, a, cfg.rel_tol, cfg.window_cycles,
                                   cfg.frozen_cycles, out_f, fault, fresh)
        return missing, out_f, fault, fresh

    def _feedback(self, stats: dict, fresh: list[bool] | None = None, step=None, t_s: float | None = None
                  ) -> Feedback:
        """This cycle's :class:`Feedback`; ``stats`` (a fresh dict per cycle) becomes its ``info``.

        ``step``: :meth:`_after_collect`'s output with ``MODE_FEEDBACK``, else it is run here;
        ``fresh``: per joint, whether it answered (default: the last :meth:`_collect`'s);
        ``t_s``: its time stamp (default: the clock now)."""
        missing, a, fault, fr = self._after_collect(_k.MODE_FEEDBACK) if step is None else step
        if fresh is not None:
            fr = np.array(fresh, dtype=bool)
            missing = len(fresh) - fresh.count(True)
        n = len(fault)
        # the five float vectors are slices of one array (views, as the rows of it reshaped to
        # (5, n) are, which cost more to make)
        stats["missing"] = missing
        stats["temperature_c"] = a[3 * n:4 * n]
        stats["torque_residual_nm"] = a[4 * n:]
        return Feedback(float(self._now()) if t_s is None else t_s, a[:n], a[n:2 * n], a[2 * n:3 * n], fault, fr,
                        (self._all_true if self._enabled else self._all_false).copy(), stats)

    @staticmethod
    def _new_stats(late: int = 0, saturated: int = 0) -> dict:
        return {"corrupt": 0, "late": late, "unexpected": 0, "duplicate": 0, "error_frames": 0,
                "saturated": saturated}

    def _screen(self, b: int, frame: tuple, stats: dict) -> None:
        """A frame received outside its exchange (queued before a send) or beside it (a second
        reply, a command frame): a late reply of ours, a duplicate, or foreign traffic (noted for
        :meth:`_check_foreign`)."""
        if frame[3] or frame[4]:
            stats["error_frames" if frame[3] else "unexpected"] += 1
            return
        arb, data = frame[0], frame[1]
        by_id = self._by_id[b]
        what = self._screen_master(b, arb, data)
        if what is not None:                    # a command frame: ours echoed, or foreign
            if what:
                stats["foreign"] = stats.get("foreign", 0) + 1
            return
        j = by_id.get(data[0]) if len(data) in self._reply_lengths else None
        if j is None:
            stats["corrupt" if len(data) not in self._reply_lengths else "unexpected"] += 1
            return
        if self._owed[j]:                       # a reply of ours, late
            self._owed[j] -= 1
            stats["late"] += 1
            return
        k = _k.RX_STRIDE * j
        n = self._rx_buf[k]
        if n == len(data) and self._rx_buf[k + 1:k + 1 + n] == data:
            stats["duplicate"] += 1             # CAN's retransmission of the reply kept
            return
        self._foreign_replies.append(self.cycles)
        stats["foreign"] = stats.get("foreign", 0) + 1

    def _foreign_found(self) -> list[str]:
        """The foreign command frames seen (:meth:`TransportDriver._foreign_found`), and
        :data:`FOREIGN_REPLIES_MAX` unasked replies within :data:`FOREIGN_WINDOW_CYCLES` cycles."""
        what = super()._foreign_found()
        fr = self._foreign_replies
        if fr:
            fr[:] = [c for c in fr if c > self.cycles - FOREIGN_WINDOW_CYCLES]
            if len(fr) >= FOREIGN_REPLIES_MAX:
                what.append(f"{len(fr)} replies nobody of ours asked for in {FOREIGN_WINDOW_CYCLES} cycles")
                fr.clear()
        return what

    def _master_frame(self, bus: int, arb: int, data: bytes) -> str | None:
        """A command frame (its id is a motor id: replies carry the id in byte 0)."""
        if arb in self._by_id[bus]:
            return f"command frames to motor id {arb}"
        return None

    def _foreign(self, bus: int, frame: tuple) -> str | None:
        """Before the first frame: a command frame to one of our motors, or a reply from one."""
        what = super()._foreign(bus, frame)
        if what is not None or frame[3] or frame[4]:
            return what
        data = frame[1]
        if len(data) in self._reply_lengths and data[0] in self._by_id[bus]:
            return f"replies from motor id {data[0]}"
        return None

    def _drain(self, stats: dict | None = None) -> int:
        """Take every frame queued before a send (each screened by :meth:`_screen`); how many."""
        st = stats if stats is not None else self._new_stats()
        n = 0
        carry = self._carry
        while carry:
            n += 1
            self._screen(0, carry.popleft(), st)
        for b, t in enumerate(self._buses):
            recv = t.recv_fields
            while n < 100_000:
                f = recv(0.0)
                if f is None:
                    break
                n += 1
                self._screen(b, f, st)
        return n

    def _exchange(self, frames: Sequence[Frame], joints: Sequence[int], timeout_s: float,
                  stats: dict) -> list[bool]:
        """Send ``frames`` (one per joint of ``joints``, in that order) and collect (and keep) their
        replies; per joint whether it answered."""
        self._drain(stats)
        self._send_per_bus(frames, joints)
        self._collect(set(joints), timeout_s, stats)
        self._after_collect(_k.MODE_STORE)
        return self._fresh()

    # ------------------------------------------------------------------
    def fault_text(self, joint: int, code: int) -> str:
        """The CubeMars error byte's name, or the fault the driver detected itself
        (:data:`drivers.mit_health.DETECTED_FAULTS`)."""
        from .codecs.mit import MIT_ERROR_CODES
        from .mit_health import DETECTED_FAULTS

        code = int(code)
        if 0 < code <= 0xFF:
            return f"{MIT_ERROR_CODES.get(code, 'unknown error')} (the drive's error byte {code})"
        if code in DETECTED_FAULTS:
            return f"{DETECTED_FAULTS[code]} (the driver's check, code 0x{code:X})"
        return super().fault_text(joint, code)

    def enable(self) -> Feedback:
        """Send ENTER_MOTOR_MODE to every motor and wait for each one's reply.

        Raises
        ------
        CommsTimeoutError
            Some motors never answered (they are sent EXIT_MOTOR_MODE, best effort).
        """
        self._check_open()
        if not self._touched:
            self.listen_before_talk()   # another controller on our ids: refused, nothing sent
        self._touched = True
        self._foreign_seen.clear()
        self._foreign_replies.clear()
        stats = self._new_stats()
        answered = [False] * self.n_joints
        self._owed = [0] * self.n_joints
        for _ in range(max(1, self.enable_tries)):
            todo = [j for j in range(self.n_joints) if not answered[j]]
            if not todo:
                break
            frames = [Frame(self._joints[j].can_id, codec.ENTER_MOTOR_MODE) for j in todo]
            self._drain(stats)
            self._send_per_bus(frames, todo)
            self._collect(set(todo), self.enable_timeout_s, stats)
            self._after_collect(_k.MODE_STORE)
            answered = [a or f for a, f in zip(answered, self._fresh())]
        if not all(answered):
            missing = [self._joints[j].name or f"joint {j} (id {self._joints[j].can_id})"
                       for j in range(self.n_joints) if not answered[j]]
            for j in np.flatnonzero(answered):
                self._buses[self._bus_of[j]].send(self._joints[j].can_id, codec.EXIT_MOTOR_MODE)
            raise CommsTimeoutError(f"no answer to ENTER_MOTOR_MODE from {', '.join(missing)}")
        self._check_foreign()
        self._enabled = True
        S, I = self._S, self._I
        I[_k.I_DETECTED] = 0
        # the monitor's filter starts at each motor's last reported torque
        self.monitor.reset([t if has else 0.0 for t, has in zip(S[_k.S_TM].tolist(), I[_k.I_HAS_REP].tolist())])
        # a temperature already too high at enable is a fault too
        I[_k.I_DETECTED, S[_k.S_TEMP] > self.temperature_max_c] = FAULT_OVER_TEMPERATURE
        return self._feedback(stats, answered)

    def cycle(self, command: Command) -> Feedback:
        """Send every joint's command and collect the replies (see the module docstring).

        Raises
        ------
        DriverError
            Not enabled / closed, or a bad command (nothing is sent then).
        CommsError
            A bus failed.
        """
        self._check_open()
        if not self._enabled:
            raise DriverError("cycle() before enable()")
        n = len(self._joints)
        saturated = -1
        if (self._torque_path and command.kp_nm_per_rad is None and command.kd_nm_s_per_rad is None
                and command.position_rad is None and command.velocity_rad_s is None):
            # torques only: the compiled encoder (-1, or torques that are not n numbers: the
            # Python path raises its error)
            tau = command.torque_nm
            if type(tau) is not np.ndarray or tau.dtype != np.float64:
                try:
                    tau = np.asarray(tau, dtype=float)
                except (TypeError, ValueError):
                    tau = None
            if tau is not None and tau.shape == (n,):
                saturated = _k.encode_torque(tau, self._C, self._fixed, self._tx, self._S, self._half)
        if saturated >= 0:
            self.last_saturated = saturated
            stats = self._new_stats(0, saturated)
            if self._batch_ids is None or self._carry or not self._serve_batch(stats):
                tx = self._tx_buf
                self._drain(stats)
                self._send_encoded([(jt.can_id, tx[8 * j:8 * j + 8], None) for j, jt in enumerate(self._joints)])
                self._collect(set(range(n)), self.reply_timeout_s, stats)
        else:
            encoded = self._encode(command)
            # the commands' values, as decoding the frames gives them, for the follow check
            self._S[_k.S_CP:_k.S_CT + 1] = np.array([values(*f) for values, (_, _, f)
                                                      in zip(self._cmd_values, encoded)]).T
            stats = self._new_stats(0, self.last_saturated)
            self._drain(stats)
            self._send_encoded(encoded)
            self._collect(set(range(n)), self.reply_timeout_s, stats)
        self.cycles += 1
        if self._foreign_seen or self._foreign_replies:
            self._check_foreign()
        mon = self.monitor
        t_s = float(self._now())        # the replies' time: the follow check's and the Feedback's
        if mon.config.enabled:
            step = self._after_collect(_k.MODE_STORE | _k.MODE_FOLLOW | _k.MODE_FEEDBACK, mon.gain(t_s))
        else:
            step = self._after_collect(_k.MODE_STORE | _k.MODE_FEEDBACK)
        return self._feedback(stats, step=step, t_s=t_s)

    def set_zero(self) -> Feedback:
        """Make every motor's current position its zero (SET_ZERO frame); motors must be disabled.

        The joint offsets of the mappings still apply afterwards.
        """
        self._check_open()
        if self._enabled:
            raise DriverError("set_zero() needs the motors disabled")
        frames = [Frame(jt.can_id, codec.SET_ZERO) for jt in self._joints]
        if not self._touched:
            self.listen_before_talk()
        self._touched = True
        stats = self._new_stats()
        self._exchange(frames, range(self.n_joints), self.enable_timeout_s, stats)
        return self._feedback(stats)

    def disable(self) -> None:
        """Command zero torque (and zero gains), then EXIT_MOTOR_MODE to every motor.

        Replies are not required, but a motor that did not answer its EXIT_MOTOR_MODE
        is sent the zero command and the exit once more (a lost frame would otherwise
        leave it in motor mode until its own watchdog, if any, runs out).

        Raises
        ------
        CommsError
            A bus failed.
        """
        self._check_open()
        if not self._touched:
            return              # this driver never sent a frame: nothing of ours to disable
        stats = self._new_stats()
        zero = self.make_commands(Command(np.zeros(self.n_joints)))
        exits = [Frame(jt.can_id, codec.EXIT_MOTOR_MODE) for jt in self._joints]
        todo = list(range(self.n_joints))
        first_err = None
        for attempt in range(2):
            fresh = [False] * self.n_joints
            for frames in (zero, exits):
                # an exchange that fails (of any type) must not keep the EXIT frames from going out
                try:
                    fresh = self._exchange([frames[j] for j in todo], todo, self.reply_timeout_s, stats)
                except Exception as err:  # noqa: BLE001 - raised below, after every EXIT was tried
                    first_err = first_err or err
                    fresh = [False] * self.n_joints
                self._enabled = False
            todo = [j for j in todo if not fresh[j]]
            if not todo:
                break
        self.exit_unconfirmed = todo
        if first_err is not None:
            if isinstance(first_err, CommsError):
                raise first_err
            raise DriverError(f"disable: {type(first_err).__name__}: {first_err}") from first_err

    # ------------------------------------------------------------------
    def bus_flows(self, loop_hz: float, *, reply_bytes: int | None = None):
        """Bus-load description for :func:`drivers.busload.budget`: one (BusSpec, flows) per bus.

        ``reply_bytes`` defaults to the length of the replies seen so far (6 before any).
        """
        if reply_bytes is None:
            reply_bytes = self._reply_len
        from .busload import BusSpec, mit_flows
        out = {}
        for b, t in enumerate(self._buses):
            n = len(self._by_id[b])
            spec = BusSpec(bitrate_bit_s=float(t.bitrate or 1_000_000), fd=t.data_bitrate is not None,
                           data_bitrate_bit_s=t.data_bitrate, name=t.name)
            out[t.name] = (spec, mit_flows(n, loop_hz, reply_bytes=reply_bytes))
        return out


def build(section, *, now: Callable[[], float], transports=None) -> MitCanDriver:
    """Build a :class:`MitCanDriver` from a ``[driver]`` config table (see :mod:`drivers.registry`)."""
    from . import registry
    buses = registry.open_buses(section, transports)
    try:
        rt = section.float("reply_timeout_s", 0.002, minimum=0.0, strict_min=True, maximum=TIMEOUT_MAX_S["reply_timeout_s"])
        et = section.float("enable_timeout_s", 0.05, minimum=0.0, strict_min=True, maximum=TIMEOUT_MAX_S["enable_timeout_s"])
        tries = section.int("enable_tries", 3, minimum=1)
        quant = section.str("quantization", "nearest", choices=["nearest", "truncate"])
        centered = section.bool("reply_centered", True)
        variant = section.str("reply_variant", "auto", choices=["auto", "classic6", "cubemars8"])
        temp_max = section.float("temperature_max_c", 85.0, minimum=0.0, strict_min=True, maximum=255.0)
        follow = follow_config(section.section("follow", {}))
        joints = []
        seen = {}
        for js in section.sections("joints"):
            bus_name = registry.joint_bus(js, buses)
            can_id = js.int("can_id", minimum=1, maximum=255, doc="the actuator's CAN id (set with the vendor's tool)")
            if (bus_name, can_id) in seen:
                raise js.error("can_id", f"CAN id {can_id} already used by {seen[bus_name, can_id]} on bus '{bus_name}'")
            seen[bus_name, can_id] = js.path
            limits = _limits(js)
            name = js.str("name", "", doc=registry.JOINT_NAME_DOC)
            mapping = registry.joint_mapping(js)
            js.finish()
            joints.append(MitJoint(buses[bus_name], can_id, limits, mapping, name))
        if not joints:
            raise section.error("joints", "at least one joint is required")
        section.finish()
        return MitCanDriver(joints, now=now, reply_timeout_s=rt, enable_timeout_s=et, enable_tries=tries,
                            owns_transports=True, quantization=quant, reply_centered=centered,
                            reply_variant=variant, follow=follow, temperature_max_c=temp_max)
    except BaseException:
        registry.close_buses(buses, transports)
        raise


def _limits(js) -> codec.MitLimits:
    """``model = "AK80-9"`` or an explicit ``[limits]`` table (or both: the table overrides fields)."""
    doc = "actuator model: its position, velocity, gain and torque ranges; required unless [limits] gives them all"
    model = js.str("model", None, choices=sorted(codec.MIT_MODELS), doc=doc) if js.has("model", doc=doc) else None
    base = codec.MIT_MODELS[model] if model else None
    if not js.has("limits", doc="the MIT protocol's ranges p_max_rad, v_max_rad_s, kp_max, kd_max, "
                                "t_max_nm (override the model's; all of them without a model)"):
        if base is None:
            raise js.error("model", "give a model (one of " + ", ".join(sorted(codec.MIT_MODELS)) +
                           ") or a [limits] table")
        return base
    ls = js.section("limits")
    vals = {}
    for key in ("p_max_rad", "v_max_rad_s", "kp_max", "kd_max", "t_max_nm"):
        default = getattr(base, key) if base is not None else ...
        vals[key] = ls.float(key, minimum=0.0, strict_min=True) if default is ... else \
            ls.float(key, default, minimum=0.0, strict_min=True)
    ls.finish()
    return codec.MitLimits(**vals)


def capabilities(section) -> list:
    """Each joint's :class:`~drivers.base.JointCapability` of an ``mit_can`` table: the model's
    (or ``[limits]``') torque range ``t_max_nm x gear_ratio x efficiency``, the position field
    ``offset +- p_max_rad / gear_ratio`` and the velocity field ``v_max_rad_s / gear_ratio``,
    joint side (the fields' ranges are the drive's: a value beyond one cannot be sent or read)."""
    from . import registry
    from .base import JointCapability
    out = []
    for js in registry.capability_joints(section):
        lim = _limits(js)
        m = registry.joint_mapping(js)
        g = m.gear_ratio
        src = f"model {js.raw('model')!r}" if js.has("model") and not js.has("limits") else \
            f"[limits] ({js.field('limits')})"
        okey = registry.offset_key(js) or "offset_rad"
        out.append(JointCapability(
            torque_max_nm=lim.t_max_nm * g * m.efficiency,
            torque_from=f"t_max_nm {lim.t_max_nm:g} N m of {src} x {registry.mapping_text(m)}",
            settings=(js.field("model"), js.field("limits.t_max_nm"), js.field("gear_ratio")),
            position_range=(m.offset_rad - lim.p_max_rad / g, m.offset_rad + lim.p_max_rad / g),
            position_from=(f"the position field +-{lim.p_max_rad:g} rad of {src} / gear_ratio {g:g}, "
                           f"around {okey} {m.offset_rad:g}"),
            velocity_max=lim.v_max_rad_s / g,
            velocity_from=f"the velocity field +-{lim.v_max_rad_s:g} rad/s of {src} / gear_ratio {g:g}",
            offset_key=registry.offset_key(js), path=js.path))
    return out
