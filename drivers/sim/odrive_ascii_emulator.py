"""An emulated ODrive (firmware 0.5.6, two axes) speaking the ODrive ASCII protocol on a serial
line, driving a :class:`~drivers.sim.plant.Plant`: on a pseudo-terminal served by a thread, or inline.

Behaviour read from the firmware's source (``Firmware/communication/ascii_protocol.cpp`` and
``.hpp``, ``MotorControl/axis.cpp``/``axis.hpp``, ``main.cpp``, ``controller.cpp``,
``motor.cpp``, ``fibre-cpp/protocol.hpp`` and ``include/fibre/introspection.hpp`` at tag
``fw-v0.5.6``; the property names and types from ``odrive-interface.yaml`` there), not from our
driver.  Firmware 0.6 is closed source and not emulated (its property names differ: our
driver's ``error_property = "error"`` is the 0.5 one).

The line layer (``AsciiProtocol::on_read_finished``, ``process_line``, ``respond``)
----------------------------------------------------------------------------------
* A line ends at ``\\r``, ``\\n`` or ``!``; each is processed, an empty one too (a host
  ending its lines with ``\\r\\n`` gets an extra ``unknown command`` for the empty line
  between them).  256 bytes without an end reset the buffer and the rest of that line is
  ignored up to the next end.
* ``;`` starts a comment.  ``*N`` after the command is a checksum: the XOR of the bytes
  before ``*``, written in decimal (``%u``); a line whose checksum is missing its number or
  wrong is dropped without an answer; a line with a good one is answered with the checksum of
  the reply appended (``*%u``, decimal).
* Every reply line is ``snprintf`` into a 64-byte buffer and ended ``\\r\\n`` (or
  ``*<checksum>\\r\\n``): a longer text is cut as the C code cuts it (:func:`respond_bytes`).

Commands (``process_line``'s switch on the first byte)
------------------------------------------------------
``c m T`` torque (sets TORQUE_CONTROL, ``controller.input_torque``), ``v m V [T]``, ``p m P
[V [T]]``, ``q m P [Vlim [Tlim]]`` (the 4th value is ``motor.config.torque_lim``), ``t m P``
(TRAP_TRAJ), each feeding the axis' watchdog and answering nothing; ``f m`` answers ``"%f
%f"`` (``encoder.pos_estimate`` turns, ``encoder.vel_estimate`` turn/s, float32);
``u m`` feeds the watchdog; ``esl m N`` sets the linear count (answers ``encoder set to
%u``); ``r path`` answers the value (a 10-byte buffer: longer values cut to 9 characters;
floats ``%f``, bools ``1``/``0``), ``invalid property`` for a path that is no property;
``w path value`` answers nothing, ``invalid property``, or ``not implemented`` (a read-only
property, a value that does not parse); ``ss``/``se``/``sr``/``sc`` save, erase, reboot,
clear errors (no answer); ``h`` help, ``i`` info; anything else ``unknown command``.
Arguments are read as ``sscanf`` reads them (``%u`` takes a sign and wraps: ``c -1 0``
answers ``invalid motor 4294967295``); fewer than the required values answer ``invalid
command format``, an axis past 1 ``invalid motor %u``.

The axes (``axis.cpp``, ``controller.cpp``, ``main.cpp``)
---------------------------------------------------------
* ``requested_state`` is consumed at once (reads back 0): any request first clears
  ``INVALID_STATE``; IDLE disarms; CLOSED_LOOP_CONTROL arms (the watchdog is fed) unless an
  error is set (then the first control tick disarms it: IDLE again); other states (the
  calibrations, which are not emulated: the axes come up calibrated) are answered as the
  firmware answers an invalid one: ``INVALID_STATE`` and IDLE.
* Torque (``Controller::update`` in TORQUE_CONTROL): ``input_torque``, then the torque-mode
  velocity limit (``enable_torque_mode_vel_limit`` on, ``vel_limit`` 2 turn/s, ``vel_gain``
  1/6 N m s/turn by default: ``limitVel`` with the velocity estimate at the command), then
  clamped to ``min(current_lim x torque_constant, torque_lim)``.  Velocity and position control
  are not emulated (no torque).  The mechanical brake follows armed / IDLE.
* The watchdog (``Axis::watchdog_check``, every control tick at 8 kHz, in every state, while
  ``config.enable_watchdog``): fed to ``watchdog_timeout x 8000`` ticks by ``c``/``v``/``p``/
  ``q``/``t``/``u``/``esl`` and on entering closed loop; at zero ``WATCHDOG_TIMER_EXPIRED``
  (0x800) is set and the motor disarms (IDLE).  Disabled, the counter stands still.
* ``axis.error`` is writable (``w axis0.error 0`` clears it); ``sc`` clears every axis' errors;
  ``sr`` reboots: the configuration saved with ``ss`` (or the power-on one) comes back, axes
  IDLE, errors and inputs cleared.

Timing: the host's bytes take 10 bits each at ``baudrate`` on the receive line; a line is
executed at the loop time ``now()`` when its last byte arrived (the plant and the watchdogs
first brought to that time); its reply starts ``reply_delay_s`` later (an assumption: the
firmware's processing time is not in its source) or when the transmit line is free (UART is
full duplex: replies and requests overlap) and takes its bytes' time.  Inline
(:class:`InlineOdriveAsciiPort`) the same schedule is waited for (``wire_time="wait"``) or
counted (``"count"``, for the lock-step clock).  The pty, the serving thread, the inline port
and the byte time are every serial device's (:mod:`drivers.sim.serial_emulator`); this module
holds the firmware.

Units: the firmware's (turns and turn/s at the motor, N m at the motor); the joint mapping
(sign, gear ratio, offset, efficiency) of each axis turns them into the plant's joint values.
"""

from __future__ import annotations

import heapq
import math
import re
import struct
from dataclasses import dataclass, field
from typing import Callable, Sequence

from dynamics.errors import ConfigError, DriverError
from ..base import JointMapping
from .plant import Plant
from .serial_emulator import TIME_EPS_S as _TIME_EPS_S, InlineSerialPort, SerialDeviceEmulator

__all__ = ["OdriveAsciiAxisConfig", "OdriveAsciiEmulator", "InlineOdriveAsciiPort", "respond_bytes",
           "AXIS_COUNT", "WATCHDOG_TIMER_EXPIRED", "INVALID_STATE"]

#: axes of an ODrive 3.x (``AXIS_COUNT``)
AXIS_COUNT = 2
#: the control loop rate of ODrive 3.x (``current_meas_hz``) [Hz]: the watchdog counts its ticks
CURRENT_MEAS_HZ = 8000
#: ``Axis::ERROR_WATCHDOG_TIMER_EXPIRED`` / ``ERROR_INVALID_STATE`` (0.5.6)
WATCHDOG_TIMER_EXPIRED = 0x800
INVALID_STATE = 0x1
_MAX_LINE = 256                # MAX_LINE_LENGTH, the receive buffer
_TX_BUF = 64                   # respond()'s tx_buf
_PROP_BUF = 10                 # cmd_read_property's response[10]
_IDLE, _CLOSED_LOOP = 1, 8
_TORQUE_CONTROL, _VELOCITY_CONTROL, _POSITION_CONTROL = 1, 2, 3
_PASSTHROUGH, _TRAP_TRAJ = 1, 5
_F32 = struct.Struct("<f")
_ENCODER_CPR = 8192            # encoder.config.cpr default
_U32 = 1 << 32

_HELP = ("Please see documentation for more details", "", "Available commands syntax reference:",
         "Position: q axis pos vel-lim I-lim", "Position: p axis pos vel-ff I-ff", "Velocity: v axis vel I-ff",
         "Torque: c axis T", "", "Properties start at odrive root, such as axis0.requested_state",
         "Read: r property", "Write: w property value", "", "Save config: ss", "Erase config: se", "Reboot: sr")


def f32(x: float) -> float:
    """``x`` rounded to float32 (a value past its range: +-inf, as ``strtof`` gives)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def respond_bytes(text: str, checksum: bool) -> bytes:
    """The bytes ``AsciiProtocol::respond`` sends for ``text`` (its ``snprintf`` into a 64-byte
    buffer, cut as C cuts it), ended ``\\r\\n`` or ``*<xor>\\r\\n``."""
    raw = text.encode("latin-1")
    n = len(raw)
    if n < _TX_BUF - 2 and not checksum:
        return raw + b"\r\n"
    buf = raw[:_TX_BUF - 1]                # snprintf writes size - 1 bytes and a NUL
    ln = min(n, _TX_BUF)
    if ln >= _TX_BUF:
        return buf + b"\0"
    tail = b"\r\n"
    if checksum:
        c = 0
        for b in buf[:ln]:
            c ^= b
        tail = b"*%d\r\n" % c
    room = _TX_BUF - ln                    # snprintf(tx_buf + len, 64 - len, ...)
    if len(tail) < room:
        return buf + tail
    return buf + tail[:room - 1] + b"\0"


# ---------------------------------------------------------------------------
# sscanf, as far as the firmware's formats use it
# ---------------------------------------------------------------------------
_FLOAT_RE = re.compile(rb"[ \t\n\v\f\r]*([+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|(?:inf(?:inity)?|nan)))",
                       re.IGNORECASE)
_UINT_RE = re.compile(rb"[ \t\n\v\f\r]*([+-]?\d+)")
_INT_RE = re.compile(rb"[ \t\n\v\f\r]*([+-]?(?:0[xX][0-9a-fA-F]+|0[0-7]*|[1-9]\d*))")
_STR_RE = re.compile(rb"[ \t\n\v\f\r]*([^ \t\n\v\f\r]+)")
_WS = b" \t\n\v\f\r"
_LINE_END = re.compile(rb"[\r\n!]")


def _c_int(tok: bytes, bits_mod: int | None) -> int:
    v = int(tok, 0) if tok.lstrip(b"+-")[:2].lower() == b"0x" else (
        int(tok, 8) if tok.lstrip(b"+-").startswith(b"0") and len(tok.lstrip(b"+-")) > 1 else int(tok))
    return v % bits_mod if bits_mod else v


_FAST: dict = {}
_CONV_RX = {"u": rb"([+-]?\d+)", "d": rb"([+-]?\d+)",
            "f": rb"([+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan))"}


def _to_u32(tok: bytes) -> int:
    return int(tok) % _U32


def _to_i32(tok: bytes) -> int:
    return (int(tok) + (1 << 31)) % _U32 - (1 << 31)


def _to_f32(tok: bytes) -> float:
    return f32(float(tok))


_CONVERT = {"u": _to_u32, "d": _to_i32, "f": _to_f32}


def _fast(fmt: str):
    """``(match, converters)`` of a format made of literals, spaces, ``%u``/``%d``/``%f``: the
    match when every conversion succeeds (:func:`scanf`'s common case at once); None for other
    formats."""
    if fmt in _FAST:
        return _FAST[fmt]
    out = b""
    k = 0
    fast = None
    convs = []
    while k < len(fmt):
        ch = fmt[k]
        if ch == " ":
            out += rb"[ \t\n\v\f\r]*"
        elif ch == "%":
            conv = fmt[k + 1]
            if conv not in _CONV_RX:
                break
            out += rb"[ \t\n\v\f\r]*" + _CONV_RX[conv]
            convs.append(_CONVERT[conv])
            k += 1
        else:
            out += re.escape(ch.encode())
        k += 1
    else:
        fast = (re.compile(out, re.IGNORECASE).match, convs)
    _FAST[fmt] = fast
    return fast


def scanf(s: bytes, fmt: str) -> tuple[int, list]:
    """``sscanf(s, fmt)`` for the directives the firmware uses (a literal, white space, ``%u``,
    ``%i``, ``%d``, ``%f``, ``%255s``): ``(count, values)``, count -1 (EOF) when the input ends
    before the first conversion."""
    fast = _FAST.get(fmt) or _fast(fmt)
    if fast is not None:
        m = fast[0](s)
        if m is not None:                      # every conversion succeeded: the values at once
            vals = [f(tok) for f, tok in zip(fast[1], m.groups())]
            return len(vals), vals
    vals: list = []
    i = 0
    n = len(s)
    k = 0
    while k < len(fmt):
        ch = fmt[k]
        if ch == " ":
            while i < n and s[i] in _WS:
                i += 1
            k += 1
            continue
        if ch != "%":
            if i >= n:
                return (len(vals) if vals else -1), vals
            if s[i] != ord(ch):
                return len(vals), vals
            i += 1
            k += 1
            continue
        j = k + 1
        while fmt[j].isdigit():
            j += 1
        conv = fmt[j]
        width = int(fmt[k + 1:j]) if j > k + 1 else None
        k = j + 1
        rest = s[i:]
        if not rest.strip(_WS):
            return (len(vals) if vals else -1), vals
        rx = {"f": _FLOAT_RE, "u": _UINT_RE, "d": _UINT_RE, "i": _INT_RE, "s": _STR_RE}[conv]
        m = rx.match(rest)
        if m is None:
            return len(vals), vals
        tok = m.group(1)
        if conv == "s" and width is not None:
            tok = tok[:width]
            end = m.start(1) + len(tok)
        else:
            end = m.end(1)
        i += end
        if conv == "f":
            vals.append(f32(float(tok)))
        elif conv == "u":
            vals.append(_c_int(tok, _U32))
        elif conv == "i":
            v = _c_int(tok, None)
            vals.append((v + (1 << 31)) % _U32 - (1 << 31))
        elif conv == "d":
            v = int(tok)
            vals.append((v + (1 << 31)) % _U32 - (1 << 31))
        else:
            vals.append(tok)
    return len(vals), vals


@dataclass(frozen=True)
class OdriveAsciiAxisConfig:
    """One emulated ODrive axis (its saved configuration).

    Attributes
    ----------
    axis : int
        0 or 1.
    joint : int
        Plant joint it drives.
    mapping : JointMapping
        Joint <-> motor side (as the driver's); ``torque_constant_nm_per_a`` is the axis'
        ``motor.config.torque_constant``.
    current_limit_a : float
        ``motor.config.current_lim`` at power-on [A] (the firmware's default 10 A).
    watchdog_timeout_s : float or None
        ``config.watchdog_timeout`` with ``config.enable_watchdog`` at power-on (None: off).
    """

    axis: int
    joint: int
    mapping: JointMapping = field(default_factory=JointMapping)
    current_limit_a: float = 10.0
    watchdog_timeout_s: float | None = None


#: the saved (power-on) configuration keys of an axis and their firmware defaults
def _default_config(cfg: OdriveAsciiAxisConfig) -> dict:
    wd = cfg.watchdog_timeout_s
    return {"config.watchdog_timeout": 0.0 if wd is None else f32(wd), "config.enable_watchdog": wd is not None,
            "controller.config.control_mode": _POSITION_CONTROL, "controller.config.input_mode": _PASSTHROUGH,
            "controller.config.vel_limit": 2.0, "controller.config.vel_gain": f32(1.0 / 6.0),
            "controller.config.enable_torque_mode_vel_limit": True,
            "motor.config.current_lim": f32(cfg.current_limit_a),
            "motor.config.torque_constant": f32(cfg.mapping.torque_constant_nm_per_a),
            "motor.config.torque_lim": math.inf}


class _Axis:
    """One axis' state (the firmware's Axis, Controller, Motor and Encoder fields emulated)."""

    def __init__(self, cfg: OdriveAsciiAxisConfig, plant: Plant, t0: float):
        self.cfg = cfg
        self.plant = plant
        self.saved = _default_config(cfg)
        self.power_on(t0)

    def power_on(self, t: float) -> None:
        self.conf = dict(self.saved)
        self._wd_for = None                    # the watchdog_timeout _wd_s was computed for
        self.state = _IDLE
        self.error = 0
        self.input_torque = self.input_vel = self.input_pos = 0.0
        self.pos_offset_rev = 0.0
        self.torque_nm = 0.0                   # the torque applied [N m, motor side]
        self.armed_brake = None
        self.wd_left = self._wd_reset()        # apply_config() feeds the watchdog
        self.wd_ref = t
        self.apply()

    # -- watchdog -----------------------------------------------------------------------------
    def _wd_reset(self) -> float:
        """``get_watchdog_reset()`` as a time: the ticks fed, plus the tick at zero that fires [s]."""
        timeout = self.conf["config.watchdog_timeout"]
        if timeout == self._wd_for:
            return self._wd_s
        self._wd_for = timeout
        ticks = int(min(max(self.conf["config.watchdog_timeout"], 0.0), (_U32 - 1) / (CURRENT_MEAS_HZ + 1))
                    * CURRENT_MEAS_HZ)
        self._wd_s = (ticks + 1) / CURRENT_MEAS_HZ
        return self._wd_s

    def wd_run(self, t: float) -> None:
        """Count the watchdog down to ``t`` (it stands still while disabled)."""
        if self.conf["config.enable_watchdog"]:
            self.wd_left -= t - self.wd_ref
        self.wd_ref = t

    def feed(self, t: float) -> None:
        self.wd_run(t)
        self.wd_left = self._wd_reset()

    def wd_due(self) -> float:
        if not self.conf["config.enable_watchdog"] or self.error & WATCHDOG_TIMER_EXPIRED and self.state == _IDLE:
            return math.inf
        return self.wd_ref + self.wd_left

    def on_watchdog(self, t: float) -> None:
        self.wd_run(t)
        if self.conf["config.enable_watchdog"] and self.wd_left <= _TIME_EPS_S:
            self.wd_left = 0.0
            self.error |= WATCHDOG_TIMER_EXPIRED
            self.disarm()

    # -- state machine ---------------------------------------------------------------------------
    def request(self, state: int, t: float) -> None:
        if state == 0:
            return
        self.error &= ~INVALID_STATE           # "Auto-clear any invalid state error"
        if state == _IDLE:
            self.disarm()
        elif state == _CLOSED_LOOP:
            self.feed(t)
            if self.error:                     # armed, disarmed by the next tick's checks: IDLE
                self.disarm()
                return
            self.state = _CLOSED_LOOP
            self.apply()
        else:
            self.error |= INVALID_STATE
            self.disarm()

    def disarm(self) -> None:
        self.state = _IDLE
        self.apply()

    # -- plant coupling ---------------------------------------------------------------------------
    def pos_vel(self) -> tuple[float, float]:
        """``encoder.pos_estimate`` [turn] and ``vel_estimate`` [turn/s] (float32)."""
        q, qd, _ = self.plant.measure_joint(self.cfg.joint)
        m = self.cfg.mapping
        return (f32(m.sign * (q - m.offset_rad) * m.gear_ratio / (2.0 * math.pi) + self.pos_offset_rev),
                f32(m.sign * qd * m.gear_ratio / (2.0 * math.pi)))

    def vel(self) -> float:
        """``encoder.vel_estimate`` [turn/s] (float32), as :meth:`pos_vel`'s."""
        m = self.cfg.mapping
        return f32(m.sign * self.plant.measure_joint(self.cfg.joint)[1] * m.gear_ratio / (2.0 * math.pi))

    def apply(self) -> None:
        """The torque the controller gives now (``Controller::update``, torque control), to the plant."""
        c = self.conf
        t = 0.0
        if self.state == _CLOSED_LOOP and c["controller.config.control_mode"] == _TORQUE_CONTROL:
            t = self.input_torque
            if c["controller.config.enable_torque_mode_vel_limit"]:
                vl, g = c["controller.config.vel_limit"], c["controller.config.vel_gain"]
                v = self.vel()
                t = min(max(t, (-vl - v) * g), (vl - v) * g)
            lim = min(max(c["motor.config.current_lim"] * c["motor.config.torque_constant"], 0.0),
                      c["motor.config.torque_lim"])
            t = min(max(t, -lim), lim)
        self.torque_nm = t
        released = self.state == _CLOSED_LOOP
        j = self.cfg.joint
        if released != self.armed_brake:
            self.armed_brake = released
            self.plant.set_brake(not released, joints=[j])
        m = self.cfg.mapping
        self.plant.set_joint_command(j, m.sign * t * m.gear_ratio * m.efficiency)

    def iq_setpoint(self) -> float:
        kt = self.conf["motor.config.torque_constant"]
        return f32(self.torque_nm / kt) if kt else 0.0


#: the set-point commands: format, control mode, where each value after the axis goes (an
#: attribute of the axis or a configuration key), the input mode set (None: kept)
_SETPOINTS = {
    b"c": ("c %u %f", _TORQUE_CONTROL, ("input_torque",), None),
    b"v": ("v %u %f %f", _VELOCITY_CONTROL, ("input_vel", "input_torque"), None),
    b"p": ("p %u %f %f %f", _POSITION_CONTROL, ("input_pos", "input_vel", "input_torque"), None),
    b"q": ("q %u %f %f %f", _POSITION_CONTROL, ("input_pos", "controller.config.vel_limit", "motor.config.torque_lim"),
           None),
    b"t": ("t %u %f", _POSITION_CONTROL, ("input_pos",), _TRAP_TRAJ),
}

#: property kinds: how ``to_string`` / ``from_string`` treat them
_FLOAT, _INT, _UINT, _BOOL = "f", "d", "u", "b"
#: axis properties: path -> (kind, writable); config keys live in ``_Axis.conf``
_AXIS_PROPS = {
    "error": (_UINT, True), "current_state": (_UINT, False), "requested_state": (_UINT, True),
    "config.watchdog_timeout": (_FLOAT, True), "config.enable_watchdog": (_BOOL, True),
    "controller.config.control_mode": (_UINT, True), "controller.config.input_mode": (_UINT, True),
    "controller.config.vel_limit": (_FLOAT, True), "controller.config.vel_gain": (_FLOAT, True),
    "controller.config.enable_torque_mode_vel_limit": (_BOOL, True),
    "controller.input_torque": (_FLOAT, True), "controller.input_vel": (_FLOAT, True),
    "controller.input_pos": (_FLOAT, True), "controller.error": (_UINT, True),
    "motor.config.current_lim": (_FLOAT, True), "motor.config.torque_constant": (_FLOAT, True),
    "motor.config.torque_lim": (_FLOAT, True), "motor.is_armed": (_BOOL, False),
    "motor.current_control.Iq_setpoint": (_FLOAT, False), "motor.current_control.Iq_measured": (_FLOAT, False),
    "encoder.pos_estimate": (_FLOAT, False), "encoder.vel_estimate": (_FLOAT, False),
    "encoder.error": (_UINT, True),
}
_ROOT_PROPS = {"vbus_voltage": (_FLOAT, False), "hw_version_major": (_UINT, False),
               "hw_version_minor": (_UINT, False), "hw_version_variant": (_UINT, False),
               "fw_version_major": (_UINT, False), "fw_version_minor": (_UINT, False),
               "fw_version_revision": (_UINT, False)}


def _to_string(kind: str, v) -> bytes:
    """``to_string`` into the 10-byte buffer of ``cmd_read_property`` (9 characters kept)."""
    if kind == _FLOAT:
        s = b"%f" % v
    elif kind == _BOOL:
        s = b"1" if v else b"0"
    elif kind == _UINT:
        s = b"%d" % (int(v) % _U32)
    else:
        s = b"%d" % int(v)
    return s[:_PROP_BUF - 1]


class OdriveAsciiEmulator(SerialDeviceEmulator):
    """An ODrive 3.x (firmware 0.5.6) on a serial line: see the module docstring.

    Parameters
    ----------
    axes : sequence of OdriveAsciiAxisConfig
        One or two axes (distinct axis numbers and joints); a missing axis is there but drives
        no joint (its commands are accepted, it moves nothing).
    plant : Plant
    now : callable
        The loop clock [s].
    baudrate : int
        The UART's speed [bit/s] (10 bits a byte).
    reply_delay_s : float
        From a line's last byte to its reply's first [s].
    serve : {"thread", "inline"}
        A pseudo-terminal (:attr:`port_path`) answered by a thread, or :meth:`inline_port`.
    poll_s : float
        Longest idle wait of the serving thread [s].
    vbus_voltage_v : float
    hw_version : tuple of 3 int
        ``hw_version_major/minor/variant`` (3.6-56V by default).
    serial_number : str
        What ``i`` reports.

    Fault injection: :meth:`corrupt_replies`, :meth:`replace_replies`, :meth:`set_silent`, :meth:`inject_error`,
    :meth:`disconnect`.
    """

    fw_version = (0, 5, 6)
    NAME = "ODrive ASCII"

    def __init__(self, axes: Sequence[OdriveAsciiAxisConfig], plant: Plant, now: Callable[[], float], *,
                 baudrate: int = 115200, reply_delay_s: float = 1e-4, serve: str = "thread", poll_s: float = 0.005,
                 vbus_voltage_v: float = 24.0, hw_version: tuple[int, int, int] = (3, 6, 56),
                 serial_number: str = "2087377E3548"):
        self._serial_init(now, baudrate, serve, poll_s)
        if not (math.isfinite(reply_delay_s) and reply_delay_s >= 0):
            raise ConfigError(f"must be finite and >= 0, got {reply_delay_s!r}", field="reply_delay_s")
        self.plant = plant
        plant.warm_up()
        t0 = float(now())
        self._t0 = t0
        self._t_adv = -math.inf                # the loop time the axes and the plant were brought to [s]
        self._axes: dict[int, _Axis] = {}
        self.add_axes(axes)
        self.reply_delay_s = float(reply_delay_s)
        self.vbus_voltage_v = float(vbus_voltage_v)
        self.hw_version = tuple(hw_version)
        self.serial_number = serial_number
        self._rx = bytearray()
        self._read_active = True
        self._rx_free = 0.0                    # the receive line is busy until then (wire time) [s]
        self._tx_free = 0.0
        self._replace: list[bytes] = []
        self.silent = False
        self.lines_in = 0
        self._start("torqueloop-odrive-ascii")

    def add_axes(self, axes: Sequence[OdriveAsciiAxisConfig]) -> None:
        """Wire axes to plant joints (distinct axis numbers 0/1 and joints; before serving)."""
        with self._lock:
            joints = {a.cfg.joint for a in self._axes.values()}
            new = {}
            for i, c in enumerate(axes):
                if not isinstance(c, OdriveAsciiAxisConfig):
                    raise ConfigError(f"expected OdriveAsciiAxisConfig, got {type(c).__name__}", field=f"axes[{i}]")
                if isinstance(c.axis, bool) or c.axis not in range(AXIS_COUNT) or c.axis in self._axes \
                        or c.axis in new:
                    raise ConfigError(f"axis must be 0 or 1 and used once, got {c.axis!r}", field=f"axes[{i}].axis")
                if not 0 <= c.joint < self.plant.n_joints or c.joint in joints:
                    raise ConfigError(f"joint {c.joint} out of range or driven twice", field=f"axes[{i}].joint")
                if not (math.isfinite(c.current_limit_a) and c.current_limit_a > 0):
                    raise ConfigError(f"must be finite and > 0, got {c.current_limit_a!r}",
                                      field=f"axes[{i}].current_limit_a")
                joints.add(c.joint)
                new[c.axis] = _Axis(c, self.plant, self._t0)
            self._axes.update(new)

    # -- inspection and fault injection -----------------------------------------------------------
    def axis(self, k: int) -> _Axis:
        """The emulated axis ``k`` (0 or 1); :class:`~dynamics.errors.DriverError` when there is none."""
        try:
            return self._axes[k]
        except KeyError as err:
            raise DriverError(f"no emulated ODrive axis {k}") from err

    def axis_state(self, k: int) -> int:
        """Axis ``k``'s ``current_state`` (the firmware's AxisState number)."""
        return self.axis(k).state

    def axis_error(self, k: int) -> int:
        """Axis ``k``'s ``error`` bits (firmware 0.5.6 names)."""
        return self.axis(k).error

    def applied_torque_nm(self, k: int) -> float:
        """The motor torque axis ``k`` applies now [N m]."""
        return self.axis(k).torque_nm

    def inject_error(self, k: int, bits: int = 0x40) -> None:
        """Set axis error bits (default MOTOR_FAILED); the motor disarms, as the firmware's checks do."""
        with self._lock:
            ax = self.axis(k)
            ax.error |= int(bits)
            ax.disarm()

    def set_silent(self, silent: bool = True) -> None:
        """The ODrive stops answering (lines are still executed: its transmit line is cut)."""
        with self._lock:
            self.silent = bool(silent)

    def replace_replies(self, lines: Sequence[bytes]) -> None:
        """Send these bytes instead of each of the next replies (garbled lines of one's choosing)."""
        with self._lock:
            self._replace.extend(bytes(x) for x in lines)

    def _advance(self, t: float) -> None:
        if t <= self._t_adv:
            return          # brought there already: a change since fires at the next tick, a later time
        self._t_adv = t
        plant = self.plant
        while True:
            due, ax = math.inf, None
            for a in self._axes.values():
                d = a.wd_due()
                if d < due:
                    due, ax = d, a
            if ax is None or due > t + _TIME_EPS_S:
                break
            plant.advance_to(min(max(due, plant.t_s), t))
            ax.on_watchdog(max(due, ax.wd_ref))
        plant.advance_to(t)

    # -- the line layer -----------------------------------------------------------------------------
    def _receive(self, data: bytes, t_start: float) -> None:
        """Bytes from the host, their first on the receive line at wall time ``t_start`` [s]:
        each complete line executed at ``now()`` and its reply queued on the transmit line."""
        if self._failed or self._closed:
            return
        try:
            with self._lock:
                t = max(self._rx_free, t_start)
                if data[-1:] == b"\n" and len(data) <= _MAX_LINE and not self._rx and self._read_active:
                    # the common case, whole lines none of which can fill the buffer: what the
                    # general path below does with them
                    end = 0
                    for line in _LINE_END.split(data)[:-1]:
                        end += len(line) + 1
                        self.lines_in += 1
                        self._line(line, t + end * self._byte_s)
                    self._rx_free = t + len(data) * self._byte_s
                    return
                start = 0
                for m in _LINE_END.finditer(data):
                    i = m.start()
                    self._fill(data[start:i])
                    start = i + 1
                    line = bytes(self._rx)
                    self._rx.clear()
                    if self._read_active:
                        self.lines_in += 1
                        self._line(line, t + (i + 1) * self._byte_s)
                    else:
                        self._read_active = True        # the end of an overlong line: ignored
                self._fill(data[start:])
                self._rx_free = t + len(data) * self._byte_s
        except Exception as err:  # noqa: BLE001 - kept and re-raised by check(), as the thread's
            self._error = err
            self._failed = True

    def _fill(self, chunk: bytes) -> None:
        """Bytes without a line end into the 256-byte receive buffer: a full buffer is reset and
        the rest of its line ignored (``read_active_``)."""
        rx = self._rx
        total = len(rx) + len(chunk)
        if total < _MAX_LINE:
            rx += chunk
            return
        keep = total % _MAX_LINE
        tail = (bytes(rx) + chunk)[total - keep:]
        rx[:] = tail
        self._read_active = False

    def _line(self, line: bytes, t_end: float) -> None:
        tnow = self._now()
        self._advance(tnow)
        replies = self.process_line(line, tnow)
        if not replies or self.silent:
            return
        free = max(self._tx_free, t_end + self.reply_delay_s)
        for data in replies:
            release = free + len(data) * self._byte_s
            if self._replace:
                heapq.heappush(self._outq, (release, next(self._seq), self._replace.pop(0)))
            else:
                self._push_reply(release, data)
            free = release
        self._tx_free = free

    def process_line(self, line: bytes, t: float) -> list[bytes]:
        """``AsciiProtocol::process_line`` of one received line (without its end) at loop time
        ``t``: the reply lines' bytes (none, one, or several for ``h``/``i``)."""
        checksum = 0
        cs_start = None
        for i, b in (enumerate(line) if b";" in line or b"*" in line else ()):
            if b == 0x3B:                       # ';' starts a comment
                line = line[:i]
                break
            if cs_start is None:
                if b == 0x2A:                   # '*'
                    cs_start = i + 1
                else:
                    checksum ^= b
        cmd = line[:_MAX_LINE]
        use_cs = cs_start is not None and cs_start < len(cmd)
        if use_cs:
            n, v = scanf(cmd[cs_start:].split(b"\0", 1)[0], "%u")
            if n < 1 or v[0] != checksum:
                return []                       # a bad or missing checksum: dropped, no answer
            cmd = cmd[:cs_start - 1]
        cmd = cmd.split(b"\0", 1)[0]            # the C string ends at a NUL
        out: list[bytes] = []

        def say(text: str) -> None:
            out.append(respond_bytes(text, use_cs))

        head = cmd[:1]
        handler = self._COMMANDS.get(head)
        if handler is None:
            say("unknown command")
        else:
            handler(self, cmd, t, say)
        return out

    # -- commands ------------------------------------------------------------------------------------
    def _axis_arg(self, n: int, vals: list, need: int, say) -> _Axis | None:
        if n < need:
            say("invalid command format")
            return None
        m = vals[0]
        if m >= AXIS_COUNT:
            say(f"invalid motor {m}")
            return None
        return self._axes.get(m) or self._spare(m)

    def _spare(self, m: int) -> _Axis:
        """An axis no joint is wired to (it exists on the board): accepts commands, moves nothing."""
        ax = _Axis.__new__(_Axis)
        ax.cfg = OdriveAsciiAxisConfig(m, -1)
        ax.plant = _NoPlant()
        ax.saved = _default_config(ax.cfg)
        ax.power_on(float(self._now()))
        self._axes[m] = ax
        return ax

    def _cmd_setpoint(self, cmd: bytes, t: float, say) -> None:
        """``c``, ``v``, ``p``, ``q``, ``t`` (``cmd_set_torque`` ... ``cmd_set_trapezoid_trajectory``):
        the control mode (and input mode) set, the values given stored, the watchdog fed."""
        fmt, mode, targets, input_mode = _SETPOINTS[cmd[:1]]
        n, v = scanf(cmd, fmt)
        ax = self._axis_arg(n, v, 2, say)
        if ax is None:
            return
        if input_mode is not None:
            ax.conf["controller.config.input_mode"] = input_mode
        ax.conf["controller.config.control_mode"] = mode
        for key, x in zip(targets, v[1:n]):
            if key in ax.conf:
                ax.conf[key] = x
            else:
                setattr(ax, key, x)
        ax.feed(t)
        ax.apply()

    def _cmd_f(self, cmd: bytes, t: float, say) -> None:
        n, v = scanf(cmd, "f %u")
        ax = self._axis_arg(n, v, 1, say)
        if ax is not None:
            pos, vel = ax.pos_vel()
            say("%f %f" % (pos, vel))

    def _cmd_u(self, cmd: bytes, t: float, say) -> None:
        n, v = scanf(cmd, "u %u")
        ax = self._axis_arg(n, v, 1, say)
        if ax is not None:
            ax.feed(t)

    def _cmd_e(self, cmd: bytes, t: float, say) -> None:
        if cmd[1:2] != b"s":
            say("invalid command format")
            return
        n, v = scanf(cmd[2:], "l %u %i")
        ax = self._axis_arg(n, v, 2, say)
        if ax is not None:
            ax.pos_offset_rev = 0.0             # the linear count set: the estimate is count / cpr
            ax.pos_offset_rev = v[1] / _ENCODER_CPR - ax.pos_vel()[0]
            ax.feed(t)
            say(f"encoder set to {v[1] % _U32}")

    def _cmd_h(self, cmd: bytes, t: float, say) -> None:
        for line in _HELP:
            say(line)

    def _cmd_i(self, cmd: bytes, t: float, say) -> None:
        say("Hardware version: %d.%d-%dV" % self.hw_version)
        say("Firmware version: %d.%d.%d" % self.fw_version)
        say(f"Serial number: {self.serial_number}")

    def _cmd_s(self, cmd: bytes, t: float, say) -> None:
        op = cmd[1:2]
        if op == b"s":
            if all(a.state == _IDLE for a in self._axes.values()):   # save_configuration refuses otherwise
                for a in self._axes.values():
                    a.saved = dict(a.conf)
        elif op == b"e":
            for a in self._axes.values():
                a.saved = _default_config(OdriveAsciiAxisConfig(a.cfg.axis, a.cfg.joint, a.cfg.mapping))
        elif op == b"r":
            for a in self._axes.values():
                a.power_on(t)
        elif op == b"c":
            for a in self._axes.values():
                a.error = 0

    def _lookup(self, name: bytes):
        """``(kind, writable, axis or None, key)`` of a property path, or None."""
        try:
            s = name.decode("ascii")
        except UnicodeDecodeError:
            return None
        if s in _ROOT_PROPS:
            return (*_ROOT_PROPS[s], None, s)
        if s.startswith("axis") and s[4:5] in ("0", "1") and s[5:6] == ".":
            prop = _AXIS_PROPS.get(s[6:])
            if prop is not None:
                k = int(s[4])
                return (*prop, self._axes.get(k) or self._spare(k), s[6:])
        return None

    def _get(self, ax: _Axis | None, key: str):
        if ax is None:
            return {"vbus_voltage": f32(self.vbus_voltage_v), "hw_version_major": self.hw_version[0],
                    "hw_version_minor": self.hw_version[1], "hw_version_variant": self.hw_version[2],
                    "fw_version_major": self.fw_version[0], "fw_version_minor": self.fw_version[1],
                    "fw_version_revision": self.fw_version[2]}[key]
        if key in ax.conf:
            return ax.conf[key]
        if key == "error":
            return ax.error
        if key == "current_state":
            return ax.state
        if key in ("requested_state", "controller.error", "encoder.error"):
            return 0
        if key == "controller.input_torque":
            return ax.input_torque
        if key == "controller.input_vel":
            return ax.input_vel
        if key == "controller.input_pos":
            return ax.input_pos
        if key == "motor.is_armed":
            return ax.state == _CLOSED_LOOP
        if key in ("motor.current_control.Iq_setpoint", "motor.current_control.Iq_measured"):
            return ax.iq_setpoint()
        pos, vel = ax.pos_vel()
        return pos if key == "encoder.pos_estimate" else vel

    def _property(self, cmd: bytes, fmt: str, say):
        """``(count, values, property)`` of an ``r``/``w`` line, or None when answered already
        (``invalid command format``, ``invalid property``)."""
        n, v = scanf(cmd, fmt)
        if n < 1:
            say("invalid command format")
            return None
        p = self._lookup(v[0])
        if p is None:
            say("invalid property")
            return None
        return n, v, p

    def _cmd_r(self, cmd: bytes, t: float, say) -> None:
        got = self._property(cmd, "r %255s", say)
        if got is not None:
            kind, _, ax, key = got[2]
            say(_to_string(kind, self._get(ax, key)).decode("ascii"))

    def _cmd_w(self, cmd: bytes, t: float, say) -> None:
        got = self._property(cmd, "w %255s %255s", say)
        if got is None:
            return
        n, v, (kind, writable, ax, key) = got
        if not writable or n < 2:                 # no set_string; or an unset value buffer: no number
            say("not implemented")
            return
        m, val = scanf(v[1], "%f" if kind == _FLOAT else "%d")
        if m != 1:
            say("not implemented")
            return
        x = val[0]
        if kind == _UINT:
            x %= _U32
        elif kind == _BOOL:
            x = x != 0
        if key in ax.conf:
            if key == "config.enable_watchdog" or key == "config.watchdog_timeout":
                ax.wd_run(t)
            ax.conf[key] = x
            ax.apply()
        elif key == "requested_state":
            ax.request(x, t)
        elif key == "error":
            ax.error = x
        elif key == "controller.input_torque":
            ax.input_torque = x
            ax.apply()
        elif key == "controller.input_vel":
            ax.input_vel = x
        elif key == "controller.input_pos":
            ax.input_pos = x

    _COMMANDS = {b"c": _cmd_setpoint, b"v": _cmd_setpoint, b"p": _cmd_setpoint, b"q": _cmd_setpoint,
                 b"t": _cmd_setpoint, b"f": _cmd_f,
                 b"u": _cmd_u, b"e": _cmd_e, b"h": _cmd_h, b"i": _cmd_i, b"s": _cmd_s, b"r": _cmd_r,
                 b"w": _cmd_w}

class _NoPlant:
    """The plant of an axis wired to no joint: nothing moves."""

    def measure_joint(self, j):
        return 0.0, 0.0, 0.0

    def set_brake(self, engaged, joints):
        pass

    def set_joint_command(self, j, tau):
        pass


class InlineOdriveAsciiPort(InlineSerialPort):
    """The host's serial port to an :class:`OdriveAsciiEmulator` served inline: an
    :class:`~drivers.sim.serial_emulator.InlineSerialPort` (``wire_time`` ``"wait"`` or
    ``"count"``) for the methods a line-protocol driver uses (:meth:`write_line`,
    :meth:`read_line`, :meth:`reset_input`, :meth:`write`, :meth:`close`): a reply line is
    read once its last byte is on the wire."""

    URL = "inline://odrive-ascii"


OdriveAsciiEmulator.PORT = InlineOdriveAsciiPort
