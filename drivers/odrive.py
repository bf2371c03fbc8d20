"""Driver for ODrive axes in torque control over CAN (CANSimple protocol).

Outside: joint side, SI.  Inside: the ODrive's motor-side units (turns, N m)
through :mod:`drivers.codecs.odrive` and each axis' :class:`JointMapping`:
``position_rad = 2 pi * pos_rev`` on the motor side, then the mapping; the
torque sent with ``Set_Input_Torque`` is motor-side N m (the ODrive divides by
its own configured torque constant); a measured ``Iq`` is turned into motor
torque with ``mapping.torque_constant_nm_per_a``.

Cycle (:meth:`OdriveCanDriver.cycle`): frames queued since the previous cycle
are processed first (cyclic broadcasts: Heartbeat, Encoder_Estimates, Iq /
Torques); then ``Set_Input_Torque`` is sent to every axis (this also feeds
the ODrive's watchdog), followed in ``feedback="rtr"`` mode by remote
requests for the feedback messages; then frames are read until every axis
has a new Encoder_Estimates or ``reply_timeout_s`` (wall clock) passed.
Axes without a new estimate are ``fresh=False`` (last values kept);
``Feedback.info["hint"]`` then names the settings involved.  enable() with
``feedback="broadcast"`` requests (RTR) the estimates of axes that have not
broadcast one yet (a real ODrive answers requests in any mode; on a lock-step
clock no loop time, hence no broadcast period, passes during enable()).

Firmware generation (``firmware``, ``"0.6"`` default or ``"0.5"``): selects
the CANSimple layout (heartbeat bits, error names, ids; see
:mod:`drivers.codecs.odrive`).  :meth:`OdriveCanDriver.enable` first reads
``Get_Version`` from every axis on 0.6 and refuses (ConfigError naming the
``firmware`` setting) an axis on another generation or one that never
answers (firmware 0.5 has no ``Get_Version``); on 0.5 an axis that answers
``Get_Version`` is refused the same way.  Firmware 0.5 answers no heartbeat
request: enable() then relies on its cyclic heartbeats (so on a lock-step
clock, where no loop time passes during enable(), it cannot confirm closed
loop: use the wall clock or firmware 0.6).

``Feedback.fault`` is the heartbeat's axis error word (0 = healthy; bit names
in :data:`drivers.codecs.odrive.AXIS_ERROR_NAMES`); ``Feedback.enabled`` is
"heartbeat says CLOSED_LOOP_CONTROL".  ``Feedback.info`` holds counters
(``corrupt``, ``unexpected``, ``error_frames``, ``saturated``, ``missing``),
``axis_state`` and ``heartbeat_age_s`` per axis.

The ODrive only does torque control here: a command with non-zero drive-side
gains (``kp``/``kd``) is refused with :class:`DriverError` rather than ignored.

:class:`OdriveAsciiDriver` does the same over the ODrive ASCII protocol on a
serial port (``c``/``f`` commands, ``r``/``w`` properties); registry type
``odrive_ascii``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from dynamics.errors import (CommsError, CommsTimeoutError, ConfigError, DecodeError, DeviceFaultError,
                             DriverError)

from .base import TIMEOUT_MAX_S, Command, Feedback, JointMapping, TransportDriver, check_mapping, torque_only
from . import _odrive_kernels as _ok
from .codecs import odrive as codec
from .codecs.odrive import AxisState, Cmd
from .serial_port import SERIAL_BAUD_MAX, encode_line
from .follow import HOST_FAULT_OFFSET, FollowConfig, TorqueFollow, follow_config
from .transport import CanTransport, Frame, group_by_bus, recv_any_fields, recv_queued_fields

__all__ = ["OdriveAxis", "OdriveCanDriver", "OdriveAsciiDriver", "build", "build_ascii", "capabilities",
           "capabilities_ascii", "deliverable_torque_nm", "DEFAULT_CURRENT_LIMIT_A"]

_TWO_PI = 2.0 * math.pi
_CLOSED_LOOP = int(AxisState.CLOSED_LOOP_CONTROL)
_GET_ENCODER_ESTIMATES = int(Cmd.GET_ENCODER_ESTIMATES)
_FEEDBACK_MODES = ("broadcast", "rtr")
#: enable(): an axis still IDLE (no error) this long after Set_Axis_State gets the request again [s]
_STATE_RETRY_S = 0.05
_TORQUE_FEEDBACK = ("iq", "torques", "none")
#: enable(): Get_Version requests are repeated this often until answered [s]
_VERSION_RETRY_S = 0.02
#: an axis' current limit unless a joint sets ``current_limit_a``: the firmware's default
#: ``motor.config.current_lim`` [A] (ODrive 3.6 and Pro/S1 ship with 10 A)
DEFAULT_CURRENT_LIMIT_A = 10.0
#: the highest ``current_limit_a`` accepted [A] (the ODrive Pro is rated 120 A peak)
CURRENT_LIMIT_MAX_A = 200.0
#: per torque feedback, the messages OdriveCanDriver._handle_queued decodes by one compiled call:
#: command id -> kind of drivers._odrive_kernels.decode_feedback_run
_RUN_KINDS = {"none": {_GET_ENCODER_ESTIMATES: _ok.KIND_ESTIMATES},
              "iq": {_GET_ENCODER_ESTIMATES: _ok.KIND_ESTIMATES, int(Cmd.GET_IQ): _ok.KIND_IQ},
              "torques": {_GET_ENCODER_ESTIMATES: _ok.KIND_ESTIMATES, int(Cmd.GET_TORQUES): _ok.KIND_TORQUES}}
#: the largest float32: Set_Limits' velocity field when no velocity limit is configured
_F32_MAX = 3.4028234663852886e38
_F64 = np.dtype(np.float64)
#: how many patterns of a receive pass' decoded frames OdriveCanDriver._handle_queued keeps
_RUNS_KEPT = 16


def axis_fault_text(code: int, firmware: str) -> str | None:
    """An ODrive axis error word's bit names (:func:`drivers.codecs.odrive.axis_error_names`) with
    the number, or None for no error or a host check's code (``HOST_FAULT_OFFSET`` and above)."""
    if 0 < code < HOST_FAULT_OFFSET:
        return f"axis error {', '.join(codec.axis_error_names(code, firmware))} (0x{code:X})"
    return None


@dataclass(frozen=True)
class OdriveAxis:
    """One ODrive axis driving one joint.

    Attributes
    ----------
    transport : CanTransport
    node_id : int
        CANSimple node id, 0..63.
    mapping : JointMapping
    name : str
    torque_limit_nm : float or None
        Motor-side torque clamp applied before sending (None: no clamp here;
        the ODrive applies its own limits).
    current_limit_a : float
        Motor current limit [A] sent with ``Set_Limits`` at :meth:`OdriveCanDriver.enable`
        (default 10 A, the firmware's ``motor.config.current_lim`` default).  With the
        torque constant, gear ratio and efficiency it gives the joint torque the axis can
        deliver (:meth:`torque_capability_nm`).
    velocity_limit_rad_s : float or None
        Joint-side velocity limit [rad/s] sent with ``Set_Limits`` (the firmware's torque-mode
        velocity limit, ``controller.config.vel_limit``, motor side in turn/s); None: the
        largest float32 is sent, which lifts the drive's limit (the host's ``[safety]
        velocity_max`` still applies).
    """

    transport: CanTransport
    node_id: int
    mapping: JointMapping = field(default_factory=JointMapping)
    name: str = ""
    torque_limit_nm: float | None = None
    current_limit_a: float = DEFAULT_CURRENT_LIMIT_A
    velocity_limit_rad_s: float | None = None

    def __post_init__(self):
        if isinstance(self.node_id, bool) or not isinstance(self.node_id, int) or \
                not 0 <= self.node_id <= codec.MAX_NODE_ID:
            raise DriverError(f"ODrive node_id must be an integer in [0, 63], got {self.node_id!r}")
        check_mapping(self.mapping, self.name or f"node {self.node_id}")
        for key in ("torque_limit_nm", "velocity_limit_rad_s"):
            v = getattr(self, key)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise DriverError(f"{key} must be finite and > 0, got {v!r}")
        if not (math.isfinite(self.current_limit_a) and 0 < self.current_limit_a <= CURRENT_LIMIT_MAX_A):
            raise DriverError(f"current_limit_a must be in (0, {CURRENT_LIMIT_MAX_A:g}] A, "
                              f"got {self.current_limit_a!r}")

    def torque_capability_nm(self) -> float:
        """Joint torque the axis delivers [N m] (:func:`deliverable_torque_nm`)."""
        return deliverable_torque_nm(self.mapping, self.current_limit_a, self.torque_limit_nm)

    def set_limits_frame(self) -> bytes:
        """The ``Set_Limits`` payload: velocity limit [turn/s, motor side] and current limit [A]."""
        return codec.encode_set_limits(_vel_limit_rev_s(self.mapping, self.velocity_limit_rad_s),
                                       self.current_limit_a)


def deliverable_torque_nm(mapping: JointMapping, current_limit_a: float, torque_limit_nm: float | None) -> float:
    """Joint torque [N m] an ODrive axis delivers: ``current_limit_a x torque_constant_nm_per_a``
    (or the motor-side ``torque_limit_nm`` clamp when lower) x gear ratio x efficiency."""
    t = current_limit_a * mapping.torque_constant_nm_per_a
    if torque_limit_nm is not None:
        t = min(t, torque_limit_nm)
    return t * mapping.gear_ratio * mapping.efficiency


def _vel_limit_rev_s(mapping: JointMapping, velocity_limit_rad_s: float | None) -> float:
    """The firmware's velocity limit [turn/s, motor side] for a joint-side one (None: float32 max)."""
    if velocity_limit_rad_s is None:
        return _F32_MAX
    return velocity_limit_rad_s * mapping.gear_ratio / _TWO_PI


class OdriveCanDriver(TransportDriver):
    """n ODrive axes (one joint each) on one or more CAN buses.

    Parameters
    ----------
    axes : sequence of OdriveAxis
        In joint order.
    now : callable
        The control loop's clock [s].
    feedback : {"broadcast", "rtr"}
        Use the ODrive's cyclic messages, or request them by RTR every cycle.
    torque_feedback : {"iq", "torques", "none"}
        Source of ``Feedback.torque_nm``: ``Get_Iq`` (times the torque
        constant), ``Get_Torques`` (estimate), or none (NaN).
    reply_timeout_s : float
        Wall-clock wait for feedback per cycle.
    enable_timeout_s : float
        How long :meth:`enable` waits for every axis to report CLOSED_LOOP_CONTROL.
    encoder_rate_hz, heartbeat_rate_hz : float or None
        Broadcast rates configured on the ODrives (for :meth:`bus_flows` only;
        ``encoder_rate_hz=None`` means once per control cycle).
    owns_transports : bool
        Close the transports in :meth:`close`.
    firmware : {"0.6", "0.5"}
        CANSimple generation of the ODrives (see the module docstring).
    settings : dict, optional
        Where each setting came from, e.g. ``{"firmware": "run.toml: field
        'driver.firmware'"}`` (filled by :func:`build`), quoted in errors and hints.
    follow : FollowConfig, optional
        The follow check (``[driver.follow]``, :class:`drivers.mit_health.TorqueFollow`): the
        measured torque (Iq or Get_Torques) against the command clamped to each axis'
        deliverable torque; off with ``torque_feedback = "none"``.
    """

    def __init__(self, axes: Sequence[OdriveAxis], *, now: Callable[[], float], feedback: str = "broadcast",
                 torque_feedback: str = "iq", reply_timeout_s: float = 0.002, enable_timeout_s: float = 1.0,
                 encoder_rate_hz: float | None = None, heartbeat_rate_hz: float = 10.0,
                 owns_transports: bool = True, firmware: str = "0.6", settings: dict | None = None,
                 follow: FollowConfig | None = None):
        axes = list(axes)
        if not axes:
            raise DriverError("OdriveCanDriver needs at least one axis")
        self.firmware = codec.check_firmware(firmware)
        if firmware == "0.5" and torque_feedback == "torques":
            raise DriverError("torque_feedback='torques' needs firmware 0.6 (0x1C is Get_ADC_Voltage on 0.5)")
        self._settings = dict(settings or {})
        if feedback not in _FEEDBACK_MODES:
            raise DriverError(f"feedback must be one of {_FEEDBACK_MODES}, got {feedback!r}")
        if torque_feedback not in _TORQUE_FEEDBACK:
            raise DriverError(f"torque_feedback must be one of {_TORQUE_FEEDBACK}, got {torque_feedback!r}")
        for name, v in (("reply_timeout_s", reply_timeout_s), ("enable_timeout_s", enable_timeout_s)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise DriverError(f"{name} must be finite and > 0, got {v!r}")
        if not callable(now):
            raise DriverError("now must be a callable returning the loop time [s]")
        self._axes = axes
        self._now = now
        self.feedback = feedback
        self.torque_feedback = torque_feedback
        self.reply_timeout_s = float(reply_timeout_s)
        self.enable_timeout_s = float(enable_timeout_s)
        #: Set_Axis_State requests the last enable() had to repeat (lost frames)
        self.state_requests_resent = 0
        self.encoder_rate_hz = encoder_rate_hz
        self.heartbeat_rate_hz = float(heartbeat_rate_hz)
        self._owns = owns_transports
        self._buses, self._bus_of, self._by_node = group_by_bus([(ax.transport, ax.node_id) for ax in axes],
                                                                "axes", "node id")
        #: per bus, its axes in joint order
        self._axes_of_bus = [[j for j in range(len(axes)) if self._bus_of[j] == b] for b in range(len(self._buses))]
        n = len(axes)
        self._torque_ids = [codec.arbitration_id(ax.node_id, int(Cmd.SET_INPUT_TORQUE)) for ax in axes]
        #: per axis, the Set_Input_Torque payloads lately sent (an echo of them is not foreign)
        self._torque_echo = [self._echo_of(self._bus_of[j], arb) for j, arb in enumerate(self._torque_ids)]
        # the compiled encoder's constants and payload buffer (drivers._odrive_kernels); its
        # float32 view writes the codec's little-endian bytes only on a little-endian machine
        self._kC = np.empty((_ok.C_ROWS, n))
        for j, ax in enumerate(axes):
            m = ax.mapping
            self._kC[_ok.C_SIGN, j] = m.sign
            self._kC[_ok.C_GE, j] = m.gear_ratio * m.efficiency
            self._kC[_ok.C_LIM, j] = math.inf if ax.torque_limit_nm is None else ax.torque_limit_nm
            self._kC[_ok.C_GEAR, j], self._kC[_ok.C_OFF, j] = m.gear_ratio, m.offset_rad
            self._kC[_ok.C_KT, j], self._kC[_ok.C_EFF, j] = m.torque_constant_nm_per_a, m.efficiency
        self._tx = np.zeros((n, 8), dtype=np.uint8)
        #: per axis, its Set_Input_Torque id and the offset of its payload in self._tx's bytes
        self._torque_rows = [(arb, 8 * j) for j, arb in enumerate(self._torque_ids)]
        self._tx_f32 = self._tx.view(np.float32) if sys.byteorder == "little" else None
        # the measurements, in one array (a cycle's Feedback copies it once): q, qd, tau
        self._meas = np.full(3 * n, np.nan)
        self._q = self._meas[:n]
        self._qd = self._meas[n:2 * n]
        self._tau = self._meas[2 * n:]
        self._axis_error = np.zeros(n, dtype=np.int64)
        self._axis_state = np.zeros(n, dtype=np.int64)       # UNDEFINED until a heartbeat
        # CLOSED_LOOP_CONTROL per axis: the feedback's enabled compares two arrays (an array
        # with a Python int costs numpy 2's scalar promotion, about twice as long)
        self._closed_loop = np.full(n, _CLOSED_LOOP, dtype=np.int64)
        self._hb_time = np.full(n, -np.inf)                 # monotonic time of the last heartbeat
        self._seen = np.zeros(n, dtype=bool)                # any frame from the axis since start-up
        #: Get_Version answer per axis (None: none yet)
        self.versions: list[codec.Version | None] = [None] * n
        self._version_ok = False
        self._fresh = np.zeros(n, dtype=bool)
        #: self._fresh's bytes when every axis is fresh (numpy's bool is one byte, 0 or 1): the
        #: cycle's test compares them (ndarray.all() costs about nine times as much)
        self._all_fresh = np.ones(n, dtype=bool).tobytes()
        #: per Encoder_Estimates of a pass of _handle_queued, whether the compiled call decoded it
        self._est_done = np.zeros(2 * n, dtype=bool)
        #: _handle_queued's runs: the axes and kinds arrays per tuple of them (a run's frames
        #: repeat a few patterns; kept up to _RUNS_KEPT), and decode_feedback_run's entry for
        #: these arrays (_ok.direct_entry: found again when _est_done grows)
        self._run_arrays: dict[tuple, tuple] = {}
        #: per torque feedback, _run_ids_of its _RUN_KINDS
        self._run_ids: dict[str, list] = {}
        self._decode_run = None
        #: the feedback requests of a cycle by torque feedback (_request_feedback)
        self._rtr_requests: dict[str, list] = {}
        #: a cycle's requests sent with its torques, one call per bus (_exchange)
        self._merge_requests = len(self._buses) == 1 or all(getattr(t, "fields_channel", False) is True
                                                                     for t in self._buses)
        self._stats = self._new_stats()
        self._enabled_cmd = False
        self._closed = False
        self.last_saturated = 0
        self.cycles = 0
        follow = FollowConfig() if follow is None else follow
        if torque_feedback != "none" and follow.enabled:
            self.follow = TorqueFollow([ax.torque_capability_nm() for ax in axes], follow)

    # ------------------------------------------------------------------
    @property
    def n_joints(self) -> int:
        return len(self._axes)

    @property
    def axes(self) -> tuple[OdriveAxis, ...]:
        return tuple(self._axes)

    @property
    def transports(self) -> tuple[CanTransport, ...]:
        return tuple(self._buses)

    @staticmethod
    def _new_stats() -> dict:
        return {"corrupt": 0, "unexpected": 0, "error_frames": 0, "saturated": 0}

    # ------------------------------------------------------------------
    def make_commands(self, command: Command) -> list[Frame]:
        """Encode one ``Set_Input_Torque`` frame per axis, in joint order (pure).

        Raises
        ------
        DriverError
            Wrong shape, non-finite torque, or non-zero drive-side gains.
        """
        return [Frame(arb, data) for arb, data in self._request(command)]

    def _request(self, command: Command) -> list[tuple[int, bytes]]:
        """:meth:`make_commands`' frames as ``(arbitration_id, payload)`` pairs (what a cycle sends).

        A command of torques only (a float64 vector, no gains) is encoded by one compiled call
        for every axis (:func:`drivers._odrive_kernels.encode_set_input_torque`: the same bytes);
        anything else, or a torque the codec refuses, takes the per-axis path below (which
        raises for a bad command)."""
        n = self.n_joints
        tau = command.torque_nm
        tx = self._tx_f32
        if (tx is not None and command.kp_nm_per_rad is None and command.kd_nm_s_per_rad is None
                and type(tau) is np.ndarray and (tau.dtype is _F64 or tau.dtype == _F64) and tau.shape == (n,)):
            sat = _ok.encode_set_input_torque(tau, self._kC, tx)
            if sat >= 0:
                self.last_saturated = sat
                # each axis' row of the payloads: its 8 bytes of their one copy
                payload = self._tx.tobytes()
                return [(arb, payload[k:k + 8]) for arb, k in self._torque_rows]
        tau = torque_only(command, n, "ODrive driver")
        frames = []
        sat = 0
        for j, ax in enumerate(self._axes):
            m = ax.mapping
            t_m = m.sign * float(tau[j]) / (m.gear_ratio * m.efficiency)
            lim = ax.torque_limit_nm
            if lim is not None and abs(t_m) > lim:
                t_m = math.copysign(lim, t_m)
                sat += 1
            frames.append((self._torque_ids[j], codec.encode_set_input_torque(t_m)))
        self.last_saturated = sat
        return frames

    def _send(self, j: int, cmd: Cmd, data: bytes = b"", *, remote: bool = False) -> None:
        ax = self._axes[j]
        t = self._buses[self._bus_of[j]]
        if remote:
            arb, dlc = codec.rtr_request(ax.node_id, cmd, self.firmware)
            t.send(arb, b"", is_remote=True, dlc=dlc)
        else:
            arb = codec.arbitration_id(ax.node_id, int(cmd))
            t.send(arb, data)
            self._note_sent(self._bus_of[j], arb, data)

    def _handle(self, b: int, frame: Frame) -> None:
        """What a frame received on bus ``b`` says (:meth:`_handle_fields` of its fields)."""
        self._handle_fields(b, (frame.arbitration_id, frame.data, frame.timestamp, frame.is_error_frame,
                                frame.is_remote, frame.is_extended_id, frame.dlc))

    def _handle_fields(self, b: int, f: tuple) -> None:
        """What a frame received on bus ``b`` says; ``f``: its fields as
        :meth:`~drivers.transport.CanTransport.recv_fields` gives them (no record per frame)."""
        st = self._stats
        if f[3]:                # is_error_frame
            st["error_frames"] += 1
            return
        if f[4] or f[5]:        # is_remote, is_extended_id
            return  # requests (ours echoed by some adapters, or another master's) carry no data
        arb = f[0]
        node, cmd = arb >> 5, arb & 0x1F
        data = f[1]
        j = self._by_node[b].get(node)
        if j is None:
            st["unexpected"] += 1
            return
        self._seen[j] = True
        try:
            if cmd == _GET_ENCODER_ESTIMATES:
                # one compiled call (drivers._odrive_kernels: the same values); a frame it
                # declines takes the codec's path below, which raises its DecodeError
                if type(data) is bytes and _ok.decode_encoder_estimates(data, self._kC, j, self._q, self._qd):
                    self._fresh[j] = True
                    return
                est = codec.decode_encoder_estimates(data)
                m = self._axes[j].mapping
                self._q[j] = m.sign * _TWO_PI * est.pos_rev / m.gear_ratio + m.offset_rad
                self._qd[j] = m.sign * _TWO_PI * est.vel_rev_s / m.gear_ratio
                self._fresh[j] = True
            elif cmd == Cmd.HEARTBEAT:
                hb = codec.decode_heartbeat(data, self.firmware)
                self._axis_error[j] = hb.axis_error
                self._axis_state[j] = int(hb.axis_state)
                self._hb_time[j] = time.monotonic()
            elif cmd == Cmd.GET_IQ and self.torque_feedback == "iq":
                # one compiled call (the same value); a frame it declines: the codec's DecodeError
                if type(data) is bytes and _ok.decode_torque_feedback(data, self._kC, j, True, self._tau):
                    return
                iq = codec.decode_iq(data)
                m = self._axes[j].mapping
                self._tau[j] = m.sign * iq.iq_measured_a * m.torque_constant_nm_per_a * m.gear_ratio * m.efficiency
            elif cmd == Cmd.GET_VERSION:
                # firmware 0.6 answers Get_Version; on 0.5 this id is CANopen NMT and never answered
                self.versions[j] = codec.decode_version(data)
            elif cmd == Cmd.GET_TORQUES and self.torque_feedback == "torques":
                if type(data) is bytes and _ok.decode_torque_feedback(data, self._kC, j, False, self._tau):
                    return
                tq = codec.decode_torques(data)
                m = self._axes[j].mapping
                self._tau[j] = m.sign * tq.torque_estimate_nm * m.gear_ratio * m.efficiency
            elif self._screen_master(b, arb, data) is not None:
                return  # a master's command: ours looped back, or another master's (noted)
            else:
                st["unexpected"] += 1
        except DecodeError:
            st["corrupt"] += 1

    def _pump(self, timeout_s: float, until: Callable[[], bool]) -> None:
        """Handle frames until ``until()`` is true or ``timeout_s`` passed (0: only what is queued)."""
        deadline = time.monotonic() + timeout_s
        while not until():
            remaining = deadline - time.monotonic()
            got = recv_any_fields(self._buses, max(0.0, remaining))
            if got is None:
                return
            self._handle_fields(*got)

    def _where(self, key: str) -> str:
        """``"<file>: field '<path>'"`` of a setting, or ``"[driver] <key>"`` when built in code."""
        return self._settings.get(key, f"[driver] {key}")

    def stale_hint(self) -> str:
        """What to check when an axis sends no encoder estimate in time (names the settings)."""
        if self.feedback == "broadcast":
            how = (f"with feedback = 'broadcast' ({self._where('feedback')}) every ODrive must broadcast "
                   f"Encoder_Estimates at least at the loop rate (axis.config.can.encoder_msg_rate_ms), or set "
                   f"feedback = 'rtr' to request them each cycle")
        else:
            how = f"feedback = 'rtr' ({self._where('feedback')}): the ODrives must answer Get_Encoder_Estimates requests"
        return (f"no Encoder_Estimates within reply_timeout_s = {self.reply_timeout_s} s "
                f"({self._where('reply_timeout_s')}); {how}")

    def _feedback(self) -> Feedback:
        n = self.n_joints
        fresh = self._fresh.copy()
        info = dict(self._stats)
        # (a bool array's bytes are 0 or 1: its count of ones, without np.count_nonzero's call)
        info["missing"] = n - fresh.tobytes().count(1)
        if info["missing"]:
            info["hint"] = self.stale_hint()
        info["axis_state"] = self._axis_state.copy()
        info["heartbeat_age_s"] = time.monotonic() - self._hb_time
        # the three measurement vectors: views of one copy
        a = self._meas.copy()
        if self.torque_feedback == "none":
            a[2 * n:] = np.nan
        return Feedback(float(self._now()), a[:n], a[n:2 * n], a[2 * n:], self._axis_error.copy(), fresh,
                        self._axis_state == self._closed_loop, info)

    def _feedback_requests(self) -> tuple[list, list]:
        """A cycle's feedback requests (RTR) as ``send_batch`` takes them: per axis in joint order
        Get_Encoder_Estimates, then the torque feedback's message, as :meth:`_send` makes them
        (``codec.rtr_request``); found once per torque feedback.  Returns them per bus (a list
        per bus), and as the runs of consecutive requests on one bus in that order
        (``(transport, batch)`` pairs)."""
        tf = self.torque_feedback
        reqs = self._rtr_requests.get(tf)
        if reqs is None:
            cmds = [Cmd.GET_ENCODER_ESTIMATES] + {"iq": [Cmd.GET_IQ], "torques": [Cmd.GET_TORQUES]}.get(tf, [])
            per_bus = [[] for _ in self._buses]
            runs = []
            for j, ax in enumerate(self._axes):
                t = self._buses[self._bus_of[j]]
                for cmd in cmds:
                    arb, dlc = codec.rtr_request(ax.node_id, cmd, self.firmware)
                    per_bus[self._bus_of[j]].append((arb, b"", dlc))
                    if not runs or runs[-1][0] is not t:
                        runs.append((t, []))
                    runs[-1][1].append((arb, b"", dlc))
            reqs = self._rtr_requests[tf] = (per_bus, runs)
        return reqs

    def _exchange(self, frames: Sequence[tuple[int, bytes]]) -> Feedback:
        self._stats = self._new_stats()
        self._stats["saturated"] = self.last_saturated
        self._fresh.fill(False)
        self._handle_queued()   # what arrived since the last cycle
        rtr = self.feedback == "rtr"
        if rtr:
            self._fresh.fill(False)  # only answers to this cycle's requests count
            per_bus, runs = self._feedback_requests()
        # every axis' Set_Input_Torque, bus by bus, one call per bus; then the requests.  With one
        # bus, or in-process buses (no fault injector drawing from a shared stream), the requests
        # go with the torques, one call per bus (on each bus the same frames in the same order)
        echo = self._torque_echo
        merged = rtr and self._merge_requests
        for b, (t, axes) in enumerate(zip(self._buses, self._axes_of_bus)):
            batch = []
            for j in axes:
                arb, data = frames[j]
                batch.append((arb, data, None))
                echo[j].append(data)
            if merged:
                batch += per_bus[b]
            t.send_batch(batch)
        if rtr and not merged:
            for t, batch in runs:
                t.send_batch(batch)
        # every reply already queued, in one pass over the buses (latest values win); the
        # wait only when one is missing
        self._handle_queued()
        if self._fresh.tobytes() != self._all_fresh:
            self._pump(self.reply_timeout_s, lambda: bool(self._fresh.all()))
            self._handle_queued()   # take whatever else is already queued
        return self._feedback()

    def _run_ids_of(self, run_kind: dict) -> list[dict]:
        """Per bus, each arbitration id :meth:`_handle_queued` decodes by the compiled call (a
        command of ``run_kind`` from one of the bus's axes) -> ``(axis, kind)``: the command id's
        kind and the node id's axis, found together."""
        return [{(node << 5) | cmd: (j, kind) for node, j in by_node.items() for cmd, kind in run_kind.items()}
                for by_node in self._by_node]

    def _handle_queued(self) -> None:
        """Handle every frame already queued on the buses (no wait; :func:`recv_queued_fields`).

        What :meth:`_handle_fields` of each in turn does, with the axes' Encoder_Estimates and
        torque feedback (the Iq or Torques message ``torque_feedback`` reads) of 8 bytes or more
        decoded by one compiled call (:func:`drivers._odrive_kernels.decode_feedback_run`, in their
        order: the same values); they change nothing another frame reads or writes, so the other
        frames are handled first.  A payload the kernel declines (not finite) takes
        :meth:`_handle_fields` after them (its DecodeError: nothing written), as does a shorter one."""
        got = recv_queued_fields(self._buses)
        if not got:
            return
        handle = self._handle_fields
        tf = self.torque_feedback
        by_arb = self._run_ids.get(tf)
        if by_arb is None:
            by_arb = self._run_ids[tf] = self._run_ids_of(_RUN_KINDS[tf])
        est = []
        hits = []
        for bf in got:
            f = bf[1]
            data = f[1]
            hit = by_arb[bf[0]].get(f[0])
            if hit is not None and type(data) is bytes and len(data) >= 8 and not (f[3] or f[4] or f[5]):
                # (a longer payload is read as the codec reads it: its first 8 bytes)
                est.append(bf)
                hits.append(hit)
                continue
            handle(*bf)
        if not est:
            return
        m = len(est)
        done = self._est_done
        if done.shape[0] < m:
            done = self._est_done = np.zeros(2 * m, dtype=bool)
            self._decode_run = None
        payload = b"".join([bf[1][1][:8] for bf in est])
        # the run's axes and kinds as arrays, made once per pattern (int64, C-contiguous, writeable:
        # what the entry below was found for)
        key = tuple(hits)
        arrays = self._run_arrays.get(key)
        if arrays is None:
            if len(self._run_arrays) >= _RUNS_KEPT:
                self._run_arrays.clear()
            arrays = self._run_arrays[key] = (np.array([j for j, _ in hits], dtype=np.int64),
                                              np.array([k for _, k in hits], dtype=np.int64))
        decode = self._decode_run
        if decode is None:
            decode = self._decode_run = _ok.direct_entry(_ok.decode_feedback_run, payload, *arrays, self._kC,
                                                         self._q, self._qd, self._tau, self._seen, self._fresh, done)
        if decode(payload, arrays[0], arrays[1], self._kC, self._q, self._qd, self._tau, self._seen, self._fresh,
                  done):
            for k in range(m):
                if not done[k]:
                    handle(*est[k])

    # ------------------------------------------------------------------
    def fault_text(self, joint: int, code: int) -> str:
        """The axis error word's bit names (:func:`axis_fault_text`), or the host's own check."""
        return axis_fault_text(int(code), self.firmware) or super().fault_text(joint, code)

    def enable(self) -> Feedback:
        """Set_Limits (each axis' ``current_limit_a`` and velocity limit), torque control /
        passthrough, zero torque, CLOSED_LOOP_CONTROL; wait until every axis reports it.

        Latched axis errors are not cleared here (that would hide a fault):
        call :meth:`clear_errors` first to acknowledge them.

        Raises
        ------
        DeviceFaultError
            An axis reports an error instead of entering closed loop (all axes are set IDLE).
        CommsTimeoutError
            Not every axis reported CLOSED_LOOP_CONTROL within ``enable_timeout_s``.
        """
        self._check_open()
        if not self._touched:
            self.listen_before_talk()   # another master on our axes: refused, nothing sent
        self._touched = True
        self._foreign_found()           # what was seen before this enable is history
        self._stats = self._new_stats()
        self._pump(0.0, lambda: False)
        if not self._version_ok:
            self._check_versions()
        for j in range(self.n_joints):
            # the current and velocity limits the capability check counted on (drivers.odrive.capabilities)
            self._send(j, Cmd.SET_LIMITS, self._axes[j].set_limits_frame())
            self._send(j, Cmd.SET_CONTROLLER_MODE, codec.encode_set_controller_mode(
                codec.ControlMode.TORQUE_CONTROL, codec.InputMode.PASSTHROUGH))
            self._send(j, Cmd.SET_INPUT_TORQUE, codec.encode_set_input_torque(0.0))
        t_req = time.monotonic()
        # heartbeats older than the request do not count
        self._hb_time[:] = -np.inf
        self._axis_state[:] = int(AxisState.UNDEFINED)
        for j in range(self.n_joints):
            self._send(j, Cmd.SET_AXIS_STATE, codec.encode_set_axis_state(AxisState.CLOSED_LOOP_CONTROL))
        t_state_req = np.full(self.n_joints, time.monotonic())
        self.state_requests_resent = 0
        self._enabled_cmd = True
        deadline = t_req + self.enable_timeout_s
        closed_loop = int(AxisState.CLOSED_LOOP_CONTROL)
        idle = int(AxisState.IDLE)
        while True:
            ok = (self._axis_state == closed_loop) & (self._hb_time >= t_req)
            if ok.all():
                break
            bad = [j for j in range(self.n_joints)
                   if self._hb_time[j] >= t_req and self._axis_error[j] != 0 and self._axis_state[j] != closed_loop]
            if bad:
                self._idle_all()
                desc = "; ".join(f"{self._name(j)}: "
                                 f"{'|'.join(codec.axis_error_names(int(self._axis_error[j]), self.firmware))}"
                                 for j in bad)
                raise DeviceFaultError(f"ODrive axes refused closed loop: {desc}")
            if self.firmware == "0.5":
                self._refuse_version_mismatch()
            now = time.monotonic()
            if now >= deadline:
                self._idle_all()
                desc = ", ".join(f"{self._name(j)} (state {codec.axis_state_name(int(self._axis_state[j]))})"
                                 for j in range(self.n_joints) if not ok[j])
                hint = ""
                if self.firmware == "0.5":
                    hint = (f"; firmware 0.5 ({self._where('firmware')}) sends heartbeats only cyclically "
                            f"(axis.config.can.heartbeat_rate_ms), never on request: check that rate; on a "
                            f"lock-step clock no loop time passes during enable(), use clock = 'wall'")
                raise CommsTimeoutError(f"ODrive axes not in CLOSED_LOOP_CONTROL after "
                                        f"{self.enable_timeout_s} s (enable_timeout_s, "
                                        f"{self._where('enable_timeout_s')}): {desc}{hint}")
            for j in range(self.n_joints):
                # every axis is fed (zero torque) while we wait: one already in closed loop would
                # otherwise trip its watchdog while another takes longer (a lost request, a slow
                # start-up sequence)
                self._send(j, Cmd.SET_INPUT_TORQUE, codec.encode_set_input_torque(0.0))
                if not ok[j]:
                    if self.firmware == "0.6":   # 0.5 answers no heartbeat request (cyclic only)
                        self._send(j, Cmd.HEARTBEAT, remote=True)
                    # still IDLE without an error well after the request: the Set_Axis_State frame
                    # was lost (CAN has no end-to-end acknowledgement); ask again.  Only from IDLE:
                    # a request during a calibration/start-up sequence would restart it.
                    if (self._hb_time[j] >= t_state_req[j] + _STATE_RETRY_S and self._axis_state[j] == idle
                            and self._axis_error[j] == 0):
                        self._send(j, Cmd.SET_AXIS_STATE,
                                   codec.encode_set_axis_state(AxisState.CLOSED_LOOP_CONTROL))
                        t_state_req[j] = time.monotonic()
                        self.state_requests_resent += 1
            slice_end = min(deadline, time.monotonic() + 0.01)
            self._pump(max(0.0, slice_end - time.monotonic()),
                       lambda: bool(((self._axis_state == closed_loop) & (self._hb_time >= t_req)).all()))
        fb = self._exchange(self._request(Command(np.zeros(self.n_joints))))
        if self.firmware == "0.5":
            self._refuse_version_mismatch()
        if not fb.fresh.all():
            # no broadcast estimate yet (e.g. no loop time has passed), or an answer to the RTR
            # later than reply_timeout_s: ask once more, as a real ODrive answers an RTR in any mode
            for j in np.flatnonzero(~fb.fresh):
                self._send(int(j), Cmd.GET_ENCODER_ESTIMATES, remote=True)
            # enable() is not time-critical: wait up to what is left of enable_timeout_s (a busy
            # host or a slow adapter can take longer than one reply_timeout_s)
            self._pump(max(self.reply_timeout_s, deadline - time.monotonic()), lambda: bool(self._fresh.all()))
            fb = self._feedback()
        self._check_foreign()
        return self._follow_start(fb)

    def _name(self, j: int) -> str:
        ax = self._axes[j]
        return ax.name or f"node {ax.node_id}"

    def _refuse_version_mismatch(self) -> None:
        """ConfigError (axes set IDLE) if an axis reported a firmware generation other than ``firmware``."""
        wrong = [(j, v) for j, v in enumerate(self.versions) if v is not None and v.firmware != self.firmware]
        if wrong:
            self._idle_all()
            desc = "; ".join(f"{self._name(j)} reports {v}" for j, v in wrong)
            src = self._where("firmware")
            raise ConfigError(f"ODrive firmware mismatch: the config says {self.firmware!r} ({src}) but {desc}; "
                              f"set firmware = {wrong[0][1].firmware!r} if that generation is supported "
                              f"({', '.join(codec.FIRMWARES)}), else update the ODrive firmware",
                              *self._setting_file_field("firmware"))

    def _setting_file_field(self, key: str) -> tuple[str | None, str | None]:
        where = self._settings.get(key)
        if where is None or ": field '" not in where:
            return None, f"driver.{key}"
        file, field = where.split(": field '", 1)
        return file, field.rstrip("'")

    def _check_versions(self) -> None:
        """Read Get_Version from every axis (0.6) and refuse another generation (see the module docstring)."""
        self.versions = [None] * self.n_joints
        if self.firmware == "0.5":
            # 0x00 is CANopen NMT on 0.5 (ignored); a 0.6 device answers with its version, which
            # enable() refuses as soon as it arrives (absence cannot be proven here)
            for j in range(self.n_joints):
                self._buses[self._bus_of[j]].send(codec.arbitration_id(self._axes[j].node_id, 0), b"",
                                                  is_remote=True, dlc=8)
            self._version_ok = True
            return
        for j in range(self.n_joints):
            self._send(j, Cmd.GET_VERSION, remote=True)
        deadline = time.monotonic() + self.enable_timeout_s
        last = time.monotonic()
        while not all(v is not None for v in self.versions):
            now = time.monotonic()
            if now >= deadline:
                dead = [self._name(j) for j, v in enumerate(self.versions) if v is None and not self._seen[j]]
                if dead:
                    raise CommsTimeoutError(f"no frame at all from ODrive axis/axes {', '.join(dead)} within "
                                            f"{self.enable_timeout_s} s (enable_timeout_s, "
                                            f"{self._where('enable_timeout_s')}): check power, wiring, bit rate "
                                            f"and node ids")
                missing = ", ".join(self._name(j) for j, v in enumerate(self.versions) if v is None)
                raise ConfigError(
                    f"no Get_Version answer from ODrive axis/axes {missing} within {self.enable_timeout_s} s "
                    f"(enable_timeout_s): firmware 0.6 answers it, firmware 0.5 (ODrive 3.6) does not; "
                    f"set firmware = '0.5' ({self._where('firmware')}) for an ODrive 3.6, else check wiring, "
                    f"bit rate and node ids", *self._setting_file_field("firmware"))
            if now - last >= _VERSION_RETRY_S:   # CAN has no end-to-end acknowledgement: ask again
                for j, v in enumerate(self.versions):
                    if v is None:
                        self._send(j, Cmd.GET_VERSION, remote=True)
                last = now
            self._pump(min(_VERSION_RETRY_S, max(0.0, deadline - now)),
                       lambda: all(v is not None for v in self.versions))
        self._refuse_version_mismatch()
        self._version_ok = True

    def _idle_all(self) -> None:
        for j in range(self.n_joints):
            self._send(j, Cmd.SET_INPUT_TORQUE, codec.encode_set_input_torque(0.0))
            self._send(j, Cmd.SET_AXIS_STATE, codec.encode_set_axis_state(AxisState.IDLE))
        self._enabled_cmd = False

    def disable(self) -> None:
        """Zero torque, then IDLE for every axis (no waiting for confirmation).  A driver that
        never sent a frame (refused before it spoke) sends nothing."""
        self._check_open()
        if not self._touched:
            return
        self._idle_all()

    def clear_faults(self) -> None:
        """Zero torque and IDLE, then ``Clear_Errors`` to every axis (see :meth:`Driver.clear_faults`)."""
        self.disable()
        self.clear_errors()

    #: what only a master sends to an axis (firmware 0.6 and 0.5 share these ids)
    _MASTER_CMDS = frozenset({Cmd.ESTOP, Cmd.SET_AXIS_STATE, Cmd.SET_CONTROLLER_MODE, Cmd.SET_INPUT_POS,
                              Cmd.SET_INPUT_VEL, Cmd.SET_INPUT_TORQUE, Cmd.SET_LIMITS, Cmd.CLEAR_ERRORS,
                              Cmd.REBOOT})

    def _heard(self, bus: int, frame: tuple) -> None:
        self._handle_fields(bus, frame)      # heartbeats, broadcasts: what the axes said counts

    def _master_frame(self, bus: int, arb: int, data: bytes) -> str | None:
        """A master's command to one of our axes (:data:`_MASTER_CMDS`)."""
        node, cmd = arb >> 5, arb & 0x1F
        if cmd in self._MASTER_CMDS and node in self._by_node[bus]:
            return f"commands ({Cmd(cmd).name}) to axis node {node}"
        return None

    def _foreign(self, bus: int, frame: tuple) -> str | None:
        """Before the first frame: a master's command (:meth:`_master_frame`) or request (RTR) to
        one of our axes, or an axis of ours reporting CLOSED_LOOP_CONTROL in its heartbeat
        (someone else enabled it)."""
        what = super()._foreign(bus, frame)
        arb, data, _, error, remote, extended = frame[:6]
        if what is not None or error or extended:
            return what
        node, cmd = arb >> 5, arb & 0x1F
        if node not in self._by_node[bus]:
            return None
        if remote:
            return f"requests (RTR) to axis node {node}"
        if cmd == Cmd.HEARTBEAT:
            try:
                hb = codec.decode_heartbeat(data, self.firmware)
            except DecodeError:
                return None
            if int(hb.axis_state) == int(AxisState.CLOSED_LOOP_CONTROL):
                return f"axis node {node} in CLOSED_LOOP_CONTROL before this driver enabled it"
        return None

    def clear_errors(self) -> None:
        """Send ``Clear_Errors`` to every axis (the axes stay IDLE; call :meth:`enable` again)."""
        self._check_open()
        for j in range(self.n_joints):
            self._send(j, Cmd.CLEAR_ERRORS, codec.encode_clear_errors(False, self.firmware))

    # ------------------------------------------------------------------
    def bus_flows(self, loop_hz: float):
        """Bus-load description for :func:`drivers.busload.budget`: one (BusSpec, flows) per bus."""
        from .busload import BusSpec, odrive_flows
        out = {}
        for b, t in enumerate(self._buses):
            n = len(self._by_node[b])
            spec = BusSpec(bitrate_bit_s=float(t.bitrate or 1_000_000), fd=t.data_bitrate is not None,
                           data_bitrate_bit_s=t.data_bitrate, name=t.name)
            tq_rate = self.encoder_rate_hz or loop_hz
            flows = odrive_flows(n, loop_hz, feedback=self.feedback, encoder_rate_hz=self.encoder_rate_hz,
                                 heartbeat_rate_hz=self.heartbeat_rate_hz,
                                 iq_rate_hz=tq_rate if self.torque_feedback == "iq" else 0.0,
                                 torques_rate_hz=tq_rate if self.torque_feedback == "torques" else 0.0)
            out[t.name] = (spec, flows)
        return out


def build(section, *, now: Callable[[], float], transports=None) -> OdriveCanDriver:
    """Build an :class:`OdriveCanDriver` from a ``[driver]`` table.

    Keys (besides the common ones of :mod:`drivers.registry`): ``firmware``
    ("0.6" | "0.5", the ODrives' CANSimple generation), ``feedback``
    ("broadcast" | "rtr"), ``torque_feedback`` ("iq" | "torques" | "none"),
    ``encoder_rate_hz``, ``heartbeat_rate_hz`` (the ODrives' configured
    broadcast rates, for the bus-load budget); per joint ``node_id`` (0..63),
    ``current_limit_a`` (10 A, the firmware default) and ``velocity_limit_rad_s`` (joint side;
    both sent with Set_Limits at enable) and optional ``torque_limit_nm`` (motor side).
    """
    from . import registry
    buses = registry.open_buses(section, transports)
    try:
        rt = section.float("reply_timeout_s", 0.002, minimum=0.0, strict_min=True, maximum=TIMEOUT_MAX_S["reply_timeout_s"])
        et = section.float("enable_timeout_s", 1.0, minimum=0.0, strict_min=True, maximum=TIMEOUT_MAX_S["enable_timeout_s"])
        fbm = section.str("feedback", "broadcast", choices=_FEEDBACK_MODES)
        tfb = section.str("torque_feedback", "iq", choices=_TORQUE_FEEDBACK)
        fw = section.str("firmware", "0.6", choices=list(codec.FIRMWARES))
        if fw == "0.5" and tfb == "torques":
            raise section.error("torque_feedback", "'torques' needs firmware 0.6 (Get_Torques; 0x1C is "
                                                   "Get_ADC_Voltage on firmware 0.5): use 'iq' or 'none'")
        follow = follow_config(section.section("follow", {}))
        enc = section.float("encoder_rate_hz", None, minimum=0.0, strict_min=True)
        hb = section.float("heartbeat_rate_hz", 10.0, minimum=0.0)
        axes = []
        seen = {}
        for js in section.sections("joints"):
            bus_name = registry.joint_bus(js, buses)
            node = js.int("node_id", minimum=0, maximum=codec.MAX_NODE_ID,
                          doc="the axis' CAN node id (odrv.axisN.config.can.node_id)")
            if (bus_name, node) in seen:
                raise js.error("node_id", f"node id {node} already used by {seen[bus_name, node]} on bus '{bus_name}'")
            seen[bus_name, node] = js.path
            name = js.str("name", "", doc=registry.JOINT_NAME_DOC)
            lim = _axis_limits(js)
            js.finish()
            axes.append(OdriveAxis(buses[bus_name], node, name=name, **lim))
        if not axes:
            raise section.error("joints", "at least one joint is required")
        section.finish()
        where = {k: f"{section.file or '<config>'}: field '{section.field(k)}'"
                 for k in ("firmware", "feedback", "reply_timeout_s", "enable_timeout_s")}
        return OdriveCanDriver(axes, now=now, feedback=fbm, torque_feedback=tfb, reply_timeout_s=rt,
                               enable_timeout_s=et, encoder_rate_hz=enc, heartbeat_rate_hz=hb, firmware=fw,
                               settings=where, follow=follow)
    except BaseException:
        registry.close_buses(buses, transports)
        raise


def _axis_limits(js) -> dict:
    """The mapping and limit keys of an ODrive ``[[driver.joints]]`` table (CAN and ASCII), as
    :class:`OdriveAxis` keywords: ``mapping``, ``torque_limit_nm``, ``current_limit_a``,
    ``velocity_limit_rad_s``."""
    from . import registry
    return {"mapping": registry.joint_mapping(js),
            "torque_limit_nm": js.float("torque_limit_nm", None, minimum=0.0, strict_min=True,
                                        doc="motor-side torque clamp applied before sending [N m] "
                                            "(default: none here, the ODrive's own limits)"),
            "current_limit_a": js.float("current_limit_a", DEFAULT_CURRENT_LIMIT_A, minimum=0.0,
                                        strict_min=True, maximum=CURRENT_LIMIT_MAX_A,
                                        doc="motor current limit sent with Set_Limits at enable [A]"),
            "velocity_limit_rad_s": js.float("velocity_limit_rad_s", None, minimum=0.0, strict_min=True,
                                             doc="joint velocity limit sent with Set_Limits [rad/s] "
                                                 "(default: the drive's limit lifted; [safety] still applies)")}


def _capabilities(section) -> list:
    from . import registry
    from .base import JointCapability
    out = []
    for js in registry.capability_joints(section):
        lim = _axis_limits(js)
        m = lim["mapping"]
        kt = m.torque_constant_nm_per_a
        what = (f"current_limit_a {lim['current_limit_a']:g} A x torque_constant_nm_per_a {kt:g} N m/A")
        if lim["torque_limit_nm"] is not None and lim["torque_limit_nm"] < lim["current_limit_a"] * kt:
            what = f"torque_limit_nm {lim['torque_limit_nm']:g} N m (motor side)"
        keys = ("torque_limit_nm",) if what.startswith("torque_limit_nm") else ("current_limit_a",
                                                                                "torque_constant_nm_per_a")
        settings = tuple(js.field(k) for k in keys + ("gear_ratio",))
        v = lim["velocity_limit_rad_s"]
        out.append(JointCapability(
            torque_max_nm=deliverable_torque_nm(m, lim["current_limit_a"], lim["torque_limit_nm"]),
            torque_from=f"{what} x {registry.mapping_text(m)}", settings=settings,
            velocity_max=math.inf if v is None else v,
            velocity_from=f"velocity_limit_rad_s ({js.field('velocity_limit_rad_s')})" if v is not None else "",
            offset_key=registry.offset_key(js), path=js.path))
    return out


def capabilities(section) -> list:
    """Each joint's :class:`~drivers.base.JointCapability` of an ``odrive_can`` table: joint torque
    ``min(current_limit_a x torque_constant_nm_per_a, torque_limit_nm) x gear_ratio x efficiency``,
    the velocity limit sent with Set_Limits; positions are float32 turns (no range to check)."""
    return _capabilities(section)


def capabilities_ascii(section) -> list:
    """As :func:`capabilities`, for an ``odrive_ascii`` table (the drive's own current limit, which
    the ASCII driver does not set, is assumed at ``current_limit_a``, default 10 A)."""
    return _capabilities(section)


# ---------------------------------------------------------------------------
# ODrive ASCII protocol over a serial port
# ---------------------------------------------------------------------------
def _fmt(x: float) -> str:
    return format(float(x), ".7g")


#: what firmware 0.5.6 answers a ``w``/``r`` line it refuses (``ascii_protocol.cpp``:
#: ``cmd_write_property`` answers nothing when the value was set, else one of these;
#: ``cmd_read_property`` answers the value or one of these); 0.5.1-0.5.3 answered
#: ``not implemented`` to some valid writes (``w axis0.requested_state``: their release notes)
_REFUSALS = frozenset({"invalid property", "not implemented", "invalid command format"})


def _pos_vel_text(raw: bytes) -> tuple[float, float] | None:
    """An ``f`` answer's position and velocity [turns, turns/s] read as text: the line decoded
    (ASCII), split at whitespace, two finite numbers; None for anything else."""
    try:
        parts = raw.decode("ascii").split()
        if len(parts) != 2:
            return None
        pos, vel = float(parts[0]), float(parts[1])
    except (UnicodeDecodeError, ValueError):
        return None
    if not (math.isfinite(pos) and math.isfinite(vel)):
        return None
    return pos, vel


def _pos_vel(raw: bytes) -> tuple[float, float] | None:
    """What :func:`_pos_vel_text` reads of ``raw``, read off the bytes without decoding first.

    Two tokens split at ASCII whitespace that ``float`` takes as bytes are ASCII (``float`` of
    bytes refuses any other byte and strips only ASCII whitespace), and split the same as the
    decoded text; any other line (a garbled one: non-ASCII bytes, ``\\x1c``-``\\x1f``, which
    ``str.split`` also splits at) is read by :func:`_pos_vel_text` itself."""
    parts = raw.split()
    if len(parts) == 2:
        try:
            pos, vel = float(parts[0]), float(parts[1])
        except ValueError:
            return _pos_vel_text(raw)
        if math.isfinite(pos) and math.isfinite(vel):
            return pos, vel
        return None
    return _pos_vel_text(raw)


class OdriveAsciiDriver(TransportDriver):
    """ODrive axes over the ODrive ASCII protocol (USB CDC or UART), torque control.

    Per cycle and axis: ``c <axis> <torque_nm>`` (torque set-point; also feeds
    the watchdog) and ``f <axis>`` (the ODrive answers ``<pos_rev> <vel_rev_s>``),
    one request/answer at a time.  Every ``status_every`` cycles the axes'
    ``current_state`` and error word are read (``r axis<k>.current_state``,
    ``r axis<k>.<error_property>``; ``active_errors`` on firmware 0.6,
    ``error`` on 0.5).

    A missing or malformed answer leaves that joint ``fresh=False`` (counted in
    ``info``); the input buffer is then flushed so a late answer cannot be
    taken for the next request.  Torque feedback is not available (NaN).

    :meth:`enable` checks its writes: the firmware answers a ``w`` line only when it refuses
    it (``invalid property``, ``not implemented``, ``invalid command format``), so each
    ``w <property> <value>`` is followed by ``r <property>``, whose one answer marks the end of
    what the write could answer; an ``r`` the firmware refuses (an ``error_property`` of
    the other firmware generation) raises too.  Every line :meth:`enable` sends is preceded by
    ``u <axis>`` for every axis (the firmware's watchdog feed, which answers nothing): an axis
    with a short watchdog does not trip while enable works, however slowly the host runs.
    What enable clears on the drives is listed in :attr:`enable_notes`.

    Parameters
    ----------
    port : SerialTransport
        The serial port (line terminator ``\\n``).
    axes : sequence of int
        ODrive axis numbers, one per joint.
    mappings : sequence of JointMapping
        Per joint.
    now : callable
        The loop clock [s].
    reply_timeout_s : float
        Deadline per answer.
    enable_timeout_s : float
        How long :meth:`enable` waits for CLOSED_LOOP_CONTROL.
    status_every : int
        Read state and errors every that many cycles (0: never during cycles).
    error_property : str
        Name of the axis error property.
    owns_port : bool
        Close the port in :meth:`close`.
    """

    def __init__(self, port, axes: Sequence[int], mappings: Sequence[JointMapping] | None = None, *,
                 now: Callable[[], float], reply_timeout_s: float = 0.01, enable_timeout_s: float = 1.0,
                 status_every: int = 50, error_property: str = "active_errors", owns_port: bool = True,
                 limits: Sequence[dict] | None = None):
        axes = list(axes)
        if not axes:
            raise DriverError("OdriveAsciiDriver needs at least one axis")
        if len(set(axes)) != len(axes) or not all(isinstance(a, int) and not isinstance(a, bool) and a >= 0
                                                  for a in axes):
            raise DriverError(f"axes must be distinct non-negative integers, got {axes}")
        mappings = list(mappings) if mappings is not None else [JointMapping() for _ in axes]
        if len(mappings) != len(axes):
            raise DriverError(f"{len(axes)} axes but {len(mappings)} mappings")
        for a, m in zip(axes, mappings):
            check_mapping(m, f"axis {a}")
        for name, v in (("reply_timeout_s", reply_timeout_s), ("enable_timeout_s", enable_timeout_s)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise DriverError(f"{name} must be finite and > 0, got {v!r}")
        if not error_property.replace("_", "").isalnum():
            raise DriverError(f"bad error_property {error_property!r}")
        self._port = port
        self._axes = axes
        self._maps = mappings
        #: per axis ``current_limit_a`` / ``velocity_limit_rad_s`` written at enable (None: not written)
        self._limits = list(limits) if limits is not None else [None] * len(axes)
        if len(self._limits) != len(axes):
            raise DriverError(f"{len(axes)} axes but {len(self._limits)} limits")
        self._now = now
        self.reply_timeout_s = float(reply_timeout_s)
        self.enable_timeout_s = float(enable_timeout_s)
        self.status_every = int(status_every)
        self.error_property = error_property
        self._owns = owns_port
        n = len(axes)
        self._q = np.full(n, np.nan)
        self._qd = np.full(n, np.nan)
        self._err = np.zeros(n, dtype=np.int64)
        self._state = np.zeros(n, dtype=np.int64)
        self._in_closed_loop = np.zeros(n, dtype=bool)      # _state == CLOSED_LOOP_CONTROL, kept with it
        self._no_torque = np.full(n, np.nan)
        # per axis, what every cycle uses: the feedback request's bytes, the mapping's factors
        # (the same operations on floats as JointMapping's) and the motor-side torque clamp
        self._ask_f = [b"\nf %d\n" % a for a in axes]     # ends the torque line, then asks
        self._fb_map = [(m.sign, m.gear_ratio, m.offset_rad) for m in mappings]
        self._sign_ge = [(m.sign, m.gear_ratio * m.efficiency) for m in mappings]
        self._clamps = [None if lim is None else lim.get("torque_limit_nm") for lim in self._limits]
        # what _request formats per axis: the torque line's head, the ask, the factors, the clamp
        self._per_axis = [(b"c %d " % a, ask, sign, ge, clamp) for a, ask, (sign, ge), clamp in
                          zip(axes, self._ask_f, self._sign_ge, self._clamps)]
        self._shape = (len(axes),)
        self._feed = b"".join(b"u %d\n" % a for a in axes)   # every axis' watchdog fed (enable)
        self._enabled_cmd = False
        self._closed = False
        self.cycles = 0
        self.last_saturated = 0
        #: what the last :meth:`enable` cleared on the drives (a stale watchdog trip), one line each
        self.enable_notes: list[str] = []

    @property
    def n_joints(self) -> int:
        return len(self._axes)

    def make_commands(self, command: Command) -> list[str]:
        """The ``c <axis> <torque>`` lines of one cycle, in joint order (pure).

        Raises
        ------
        DriverError
            Wrong shape, non-finite torque, or non-zero drive-side gains.
        """
        tau = torque_only(command, self.n_joints, "ODrive driver")
        out = []
        sat = 0
        for a, (sign, ge), t, clamp in zip(self._axes, self._sign_ge, tau, self._clamps):
            t_m = sign * t / ge                 # JointMapping.joint_to_motor_torque on a float
            if not math.isfinite(t_m):
                # a finite joint torque beyond the float range on the motor side (a gear ratio
                # times efficiency below 1): "c <axis> inf" would be a full-current command
                raise DriverError(f"ODrive driver: joint {a}'s torque {t!r} N m is {t_m!r} N m on the motor "
                                  f"side, not a finite number; nothing sent")
            if clamp is not None and abs(t_m) > clamp:
                t_m = math.copysign(clamp, t_m)
                sat += 1
            out.append(f"c {a} {_fmt(t_m)}")
        self.last_saturated = sat
        return out

    def _request(self, command: Command) -> list[bytes]:
        """What a cycle writes per axis: :meth:`make_commands`' ``c`` line, encoded, and the
        ``f <axis>`` request after it (``c <axis> <torque>\\nf <axis>\\n``).  A command of torques
        only (a float64 vector of the joints' shape, no gains), all finite, is formatted here
        directly (``b"%.7g"``: the same text as :func:`_fmt`, the same operations on the same
        floats as :meth:`make_commands`); anything else takes :meth:`make_commands` (which raises
        for a bad command, so nothing is sent then)."""
        tau = command.torque_nm
        if (command.kp_nm_per_rad is None and command.kd_nm_s_per_rad is None and type(tau) is np.ndarray
                and tau.dtype == np.float64 and tau.shape == self._shape):
            out = []
            sat = 0
            isfinite = math.isfinite
            for t, (head, ask, sign, ge, clamp) in zip(tau.tolist(), self._per_axis):
                if not isfinite(t):
                    break                       # make_commands raises for it
                t_m = sign * t / ge
                if not isfinite(t_m):
                    break                       # make_commands raises for it
                if clamp is not None and abs(t_m) > clamp:
                    t_m = math.copysign(clamp, t_m)
                    sat += 1
                out.append(head + b"%.7g" % t_m + ask)
            else:
                self.last_saturated = sat
                return out
        return [line.encode("ascii") + ask for line, ask in zip(self.make_commands(command), self._ask_f)]

    def _query(self, line: str, stats: dict | None = None, feed: bool = False) -> str | None:
        """Write ``line`` (after the watchdog feeds with ``feed``) and return the answer, or None
        (and flush input) on timeout / bad bytes."""
        if feed:
            self._port.write(self._feed + encode_line(line))
        else:
            self._port.write_line(line)
        try:
            return self._port.read_line(self.reply_timeout_s)
        except CommsTimeoutError:
            if stats is not None:
                stats["timeouts"] += 1
        except DecodeError:
            if stats is not None:
                stats["corrupt"] += 1
        self._port.reset_input()
        return None

    def _read_int(self, prop: str, stats: dict | None = None, feed: bool = False) -> int | None:
        """The integer property ``prop``, or None (timeout, bad bytes: counted in ``stats``).

        Raises
        ------
        DriverError
            The firmware refuses the read (no such property).
        """
        ans = self._query(f"r {prop}", stats, feed)
        if ans is None:
            return None
        try:
            return int(ans.strip())
        except ValueError:
            if stats is None and ans.strip() in _REFUSALS:
                # at enable (no cycle statistics): a refused status read is the wrong
                # ``error_property`` for this firmware; in a cycle's poll the same text is a
                # garbled line on a noisy UART, counted as corrupt like any other (enable
                # already proved the property exists)
                self._port.reset_input()
                raise DriverError(f"the ODrive answered 'r {prop}' with {ans.strip()!r}"
                                  f"{self._property_hint(prop)}") from None
            if stats is not None:
                stats["corrupt"] += 1
            return None

    def _property_hint(self, prop: str) -> str:
        if prop.endswith("." + self.error_property):
            return (f" (error_property = {self.error_property!r}: firmware 0.5 names the axis error 'error', "
                    f"0.6 'active_errors')")
        return ""

    def _poll_status(self, stats: dict | None, feed: bool = False) -> None:
        for j, a in enumerate(self._axes):
            st = self._read_int(f"axis{a}.current_state", stats, feed)
            if st is not None:
                self._state[j] = st
                self._in_closed_loop[j] = st == _CLOSED_LOOP
            err = self._read_int(f"axis{a}.{self.error_property}", stats, feed)
            if err is not None:
                self._err[j] = err

    def _write_checked(self, prop: str, value) -> None:
        """``w prop value`` after the watchdog feeds, then ``r prop``: the firmware answers the
        write only to refuse it, the read always, once (the class docstring).

        Raises
        ------
        DeviceFaultError
            The firmware refused the write (its answer named).
        CommsTimeoutError, DecodeError
            No answer in time, or not text.
        """
        port = self._port
        w = f"w {prop} {value}"
        port.write(self._feed + encode_line(w) + encode_line(f"r {prop}"))
        try:
            first = port.read_line(self.reply_timeout_s).strip()
        except (CommsTimeoutError, DecodeError):
            port.reset_input()                      # a late answer must not pass for the next one
            raise
        if first not in _REFUSALS:
            return                                  # the read's answer: the write was taken
        why = f"the ODrive refused '{w}': {first!r}{self._property_hint(prop)}"
        try:
            port.read_line(self.reply_timeout_s)   # the read's own answer, off the line
        except (CommsTimeoutError, DecodeError) as err:
            port.reset_input()
            raise DeviceFaultError(f"{why}; then {type(err).__name__}: {err}") from err
        raise DeviceFaultError(why)

    def _feedback(self, fresh: np.ndarray, stats: dict, missing: int | None = None) -> Feedback:
        info = stats
        info["missing"] = int(self.n_joints - fresh.sum()) if missing is None else missing
        info["axis_state"] = self._state.copy()
        # positional (t_s, position, velocity, torque, fault, fresh, enabled, info): a keyword call
        # costs more than the rest of this; enabled copied from the mask kept with _state (an
        # array compared with a Python int costs several copies)
        return Feedback(float(self._now()), self._q.copy(), self._qd.copy(), self._no_torque.copy(),
                        self._err.copy(), fresh, self._in_closed_loop.copy(), info)

    def _exchange(self, requests: Sequence[bytes]) -> Feedback:
        """One cycle's I/O: per axis its torque line and feedback request (:meth:`_request`) in one
        write, then the answer awaited and parsed (:func:`_pos_vel`); the status poll when due."""
        stats = {"timeouts": 0, "corrupt": 0}
        port = self._port
        port.reset_input()
        fresh = np.zeros(self.n_joints, dtype=bool)
        timeout = self.reply_timeout_s
        q, qd = self._q, self._qd
        missing = self.n_joints
        write, read_line = port.write, port.read_line
        for j, (req, (sign, gear, off)) in enumerate(zip(requests, self._fb_map)):
            # the torque line and the feedback request in one write: the same bytes on the line as
            # write_line(c) then write_line(f), one call less (the answer is still awaited per axis)
            write(req)
            try:
                ans = read_line(timeout, None)
            except CommsTimeoutError:
                stats["timeouts"] += 1
                port.reset_input()
                continue
            except DecodeError:
                stats["corrupt"] += 1
                port.reset_input()
                continue
            pv = _pos_vel(ans)
            if pv is None:
                stats["corrupt"] += 1
                port.reset_input()
                continue
            pos, vel = pv
            q[j] = sign * _TWO_PI * pos / gear + off
            qd[j] = sign * _TWO_PI * vel / gear
            fresh[j] = True
            missing -= 1
        if self.status_every and self.cycles % self.status_every == 0:
            self._poll_status(stats)
        return self._feedback(fresh, stats, missing)

    @property
    def firmware(self) -> str:
        """The firmware generation the error property names (``error``: 0.5, ``active_errors``: 0.6)."""
        return "0.5" if self.error_property == "error" else "0.6"

    def fault_text(self, joint: int, code: int) -> str:
        """The axis error word's bit names (:func:`axis_fault_text`, of :attr:`firmware`), or the
        host's own check."""
        return axis_fault_text(int(code), self.firmware) or super().fault_text(joint, code)

    def enable(self) -> Feedback:
        """Torque control, passthrough, zero torque, CLOSED_LOOP_CONTROL; wait until every axis reports it.

        An idle axis whose only error is ``WATCHDOG_TIMER_EXPIRED`` has its error cleared first: the
        firmware counts the watchdog down in every state, so an axis configured with it trips
        while idle before any controller feeds it (firmware 0.5.6 ``Axis::watchdog_check``);
        the clearing is listed in :attr:`enable_notes` (the loop adds it to the run's messages).
        Any other error refuses.  The writes are checked and the watchdogs fed throughout (the
        class docstring); firmware 0.5.1-0.5.3, which answered ``not implemented`` to some writes
        they did apply (the vendor's 0.5.4 release notes), are refused here.  Whatever fails after
        the first write sends :meth:`disable` (zero torque, IDLE) before the error is raised.

        Raises
        ------
        DeviceFaultError
            An axis reports an error instead, or the firmware refused a write.
        DriverError
            The firmware refused a status read (``error_property`` of the other generation).
        CommsTimeoutError
            Not in closed loop within ``enable_timeout_s``, or no answer to a checked write.
        DecodeError
            An answer that is not text.
        """
        self._check_open()
        self.enable_notes = []
        self._port.reset_input()
        self._poll_status(None, feed=True)
        try:
            return self._enable_axes()
        except BaseException as err:
            if self._port_usable():
                try:
                    self.disable()
                except Exception as derr:       # the enable's error stays the one raised
                    err.add_note(f"disable after the failed enable failed too: {type(derr).__name__}: {derr}")
            raise

    def _port_usable(self) -> bool:
        """Whether :meth:`disable` can still be sent (the port not closed or gone)."""
        try:
            self._check_open()
        except DriverError:
            return False
        return True

    def _enable_axes(self) -> Feedback:
        """:meth:`enable` after its first status poll: the stale trips cleared, the axes
        configured and put in closed loop, the first exchange."""
        # 0.5 only: its axis error is writable (0.6 clears every axis' errors at once)
        wd_bit = codec.WATCHDOG_ERROR_BIT["0.5"] if self.firmware == "0.5" else None
        for j, a in enumerate(self._axes):
            if self._err[j] == wd_bit and self._state[j] == int(AxisState.IDLE):
                self._write_checked(f"axis{a}.error", 0)      # fed (the feeds first), then the stale trip cleared
                self.enable_notes.append(
                    f"ODrive axis {a}: cleared its {'|'.join(codec.axis_error_names(int(wd_bit), self.firmware))} "
                    f"error (the watchdog tripped while the axis was idle, before enable) with 'w axis{a}.error 0'")
        for a, m, lim in zip(self._axes, self._maps, self._limits):
            if lim is not None:     # what the capability check counted on (drivers.odrive.capabilities_ascii)
                self._write_checked(f"axis{a}.motor.config.current_lim", _fmt(lim["current_limit_a"]))
                self._write_checked(f"axis{a}.controller.config.vel_limit",
                                    _fmt(_vel_limit_rev_s(m, lim.get("velocity_limit_rad_s"))))
            self._write_checked(f"axis{a}.controller.config.control_mode", int(codec.ControlMode.TORQUE_CONTROL))
            self._write_checked(f"axis{a}.controller.config.input_mode", int(codec.InputMode.PASSTHROUGH))
            self._port.write_line(f"c {a} 0")
            self._write_checked(f"axis{a}.requested_state", int(AxisState.CLOSED_LOOP_CONTROL))
        self._enabled_cmd = True
        deadline = time.monotonic() + self.enable_timeout_s
        closed = int(AxisState.CLOSED_LOOP_CONTROL)
        while True:
            self._poll_status(None, feed=True)
            if (self._state == closed).all():
                break
            bad = [j for j in range(self.n_joints) if self._err[j] != 0 and self._state[j] != closed]
            if bad or time.monotonic() >= deadline:      # (enable disables the axes)
                if bad:
                    desc = "; ".join(f"axis {self._axes[j]}: "
                                     f"{'|'.join(codec.axis_error_names(int(self._err[j]), self.firmware))}"
                                     for j in bad)
                    raise DeviceFaultError(f"ODrive axes refused closed loop: {desc}")
                raise CommsTimeoutError(f"ODrive axes not in CLOSED_LOOP_CONTROL after {self.enable_timeout_s} s "
                                        f"(states {self._state.tolist()})")
            time.sleep(0.005)
        return self._exchange(self._request(Command(np.zeros(self.n_joints))))

    def disable(self) -> None:
        """Zero torque, then IDLE for every axis."""
        self._check_open()
        for a in self._axes:
            self._port.write_line(f"c {a} 0")
            self._port.write_line(f"w axis{a}.requested_state {int(AxisState.IDLE)}")
        self._enabled_cmd = False

    @property
    def transports(self) -> tuple:
        """The serial port (one)."""
        return (self._port,)


def build_ascii(section, *, now: Callable[[], float], transports=None) -> OdriveAsciiDriver:
    """Build an :class:`OdriveAsciiDriver` from a ``[driver]`` table (``type = "odrive_ascii"``).

    Keys: ``port`` (device path or pyserial URL), ``baudrate`` (115200),
    ``reply_timeout_s``, ``enable_timeout_s``, ``status_every``,
    ``error_property``; ``[[joints]]`` with ``axis``, the mapping keys and the limits of
    :func:`build` (``current_limit_a``, ``velocity_limit_rad_s`` written to
    ``motor.config.current_lim`` / ``controller.config.vel_limit`` at enable, ``torque_limit_nm``).
    ``transports`` may hold ``{"port": SerialTransport}`` to use an open port.
    """
    from . import registry
    from .serial_port import SerialTransport
    given = (transports or {}).get("port")
    url = section.str("port", None) if given is not None else section.str("port")
    baud = section.int("baudrate", 115200, minimum=1, maximum=SERIAL_BAUD_MAX)
    rt = section.float("reply_timeout_s", 0.01, minimum=0.0, strict_min=True, maximum=TIMEOUT_MAX_S["reply_timeout_s"])
    et = section.float("enable_timeout_s", 1.0, minimum=0.0, strict_min=True, maximum=TIMEOUT_MAX_S["enable_timeout_s"])
    every = section.int("status_every", 50, minimum=0)
    errp = section.str("error_property", "active_errors", choices=["active_errors", "error"])
    axes, maps, limits = [], [], []
    for js in section.sections("joints"):
        a = js.int("axis", minimum=0, maximum=1, doc="the ODrive axis (0 or 1)")
        if a in axes:
            raise js.error("axis", f"axis {a} is used twice")
        js.str("name", "", doc=registry.JOINT_NAME_DOC)
        lim = _axis_limits(js)
        maps.append(lim.pop("mapping"))
        limits.append(lim)
        js.finish()
        axes.append(a)
    if not axes:
        raise section.error("joints", "at least one joint is required")
    section.finish()
    if given is not None:
        port = given
    else:
        try:
            port = SerialTransport(url, baudrate=baud, timeout_s=rt)
        except CommsError as err:   # name the config file and field, as for a CAN bus
            raise CommsError(f"{section.file or '<config>'}: field '{section.path}.port': {err}") from err
    return OdriveAsciiDriver(port, axes, maps, now=now, reply_timeout_s=rt, enable_timeout_s=et,
                             status_every=every, error_property=errp, limits=limits)
