"""MIT "mini cheetah" CAN protocol (CubeMars / T-Motor AK series in MIT mode).

Pure functions, no I/O.  All quantities are *motor side* (output shaft of the
actuator module, i.e. after its built-in gearbox): rad, rad/s, N m, and the
drive-side PD gains kp [N m/rad], kd [N m s/rad].

Frame layouts (classic CAN, standard 11-bit id = the motor's CAN id; the reply
carries the id in byte 0).  Bit packing follows the reference firmware
(B. Katz, "Motor Control" firmware for the MIT Mini Cheetah, ``CAN_com.cpp``
``unpack_cmd`` / ``pack_reply``; the CubeMars AK manual, MIT mode, uses the same
packing):

Command, 8 bytes, big-endian bit fields::

    byte 0..1 : p  [15..0]          16 bit, range [-p_max, p_max]
    byte 2    : v  [11..4]          12 bit, range [-v_max, v_max]
    byte 3    : v  [3..0] | kp [11..8]
    byte 4    : kp [7..0]           12 bit, range [0, kp_max]
    byte 5    : kd [11..4]          12 bit, range [0, kd_max]
    byte 6    : kd [3..0] | t [11..8]
    byte 7    : t  [7..0]           12 bit, range [-t_max, t_max]

Reply, ``"classic6"`` (6 bytes, mini cheetah firmware)::

    byte 0    : motor id
    byte 1..2 : p  16 bit
    byte 3    : v  [11..4]
    byte 4    : v  [3..0] | t [11..8]
    byte 5    : t  [7..0]

Reply, ``"cubemars8"`` (8 bytes, CubeMars AK firmware in MIT mode): the classic
six bytes followed by ``byte 6`` = driver temperature [degC] as an unsigned
byte and ``byte 7`` = error code (see :data:`MIT_ERROR_CODES`).  ``"servo7"``
is accepted as an alias of ``"cubemars8"`` (the name used in the original
design brief; the real frame carries both bytes and is 8 bytes long).

Special 8-byte command frames: :data:`ENTER_MOTOR_MODE`,
:data:`EXIT_MOTOR_MODE`, :data:`SET_ZERO` (seven ``0xFF`` then ``0xFC`` /
``0xFD`` / ``0xFE``).  The firmware recognises them before unpacking, so a
regular command that happens to have exactly these bytes cannot be sent.

Quantisation (:func:`float_to_uint`) clamps, scales and *truncates* like the
firmware; the firmware does this in float32, here it is done in float64, which
can differ by one LSB exactly at a truncation boundary.  With ``nearest=True``
it rounds to the nearest step instead: the drive decodes both the same way,
but truncation biases every value by -1/2 LSB on average (for the 12-bit torque
of an AK80-9, -4.4 mN m on every actuator, which on a symmetric parallel robot
adds up to a steady platform torque), so the drivers round by default.

Scale: ``(2**bits - 1) / span``, the scale of the firmware's ``uint_to_float``
(Katz ``math_ops.cpp``; every decoder checked, ours and both third-party ones,
uses it).  The host example in the CubeMars manual V1.0.8 (p. 51) and
``TMotorCANControl`` encode with ``2**bits / span`` instead, which sends up to
one LSB more than the value asked for (and, in the manual's example, overflows
the field at ``x_max``); ``tmotor-can-mit-mode`` encodes as here.  The manual's
example also packs ``kp`` where the torque's high nibble belongs (``data[6]``,
p. 51); the layout above is the firmware's and the manual's table (p. 48-49).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from dynamics.errors import ConfigError, DecodeError, DriverError

__all__ = [
    "MitLimits",
    "MIT_MODELS",
    "MIT_ERROR_CODES",
    "REPLY_VARIANTS",
    "ENTER_MOTOR_MODE",
    "EXIT_MOTOR_MODE",
    "SET_ZERO",
    "MitCommand",
    "MitReply",
    "float_to_uint",
    "uint_to_float_centered",
    "uint_to_float",
    "classify_command",
    "encode_command",
    "encode_command_fields",
    "pack_command",
    "command_values",
    "decode_command",
    "decode_command_values",
    "encode_reply",
    "decode_reply",
    "decode_reply_values",
    "reply_length",
    "command_fields_encoder",
    "field_encoder",
    "command_values_decoder",
]


@dataclass(frozen=True)
class MitLimits:
    """Ranges of the MIT protocol's fixed-point fields for one actuator model.

    Position, velocity and torque ranges are symmetric (``[-x_max, x_max]``);
    gains are ``[0, kp_max]`` and ``[0, kd_max]``.  These must match the values
    flashed in the drive, otherwise every number is scaled wrongly.

    Attributes
    ----------
    p_max_rad : float
        Position range half-width [rad] (motor output side).
    v_max_rad_s : float
        Velocity range half-width [rad/s].
    kp_max : float
        Maximum position gain [N m/rad].
    kd_max : float
        Maximum velocity gain [N m s/rad].
    t_max_nm : float
        Torque range half-width [N m].
    """

    p_max_rad: float
    v_max_rad_s: float
    kp_max: float
    kd_max: float
    t_max_nm: float

    def __post_init__(self):
        for name in ("p_max_rad", "v_max_rad_s", "kp_max", "kd_max", "t_max_nm"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ConfigError(f"MitLimits.{name} must be a finite number > 0, got {v!r}", field=name)
            object.__setattr__(self, name, float(v))


#: Field ranges per actuator model (motor output side).
#:
#: Source of the AK rows: CubeMars, "AK Series Actuator Driver Manual", V1.0.8,
#: section 5.3 "MIT power mode communication protocol", range table on p. 49-50
#: (P +-12.5 rad, Kp 0..500, Kd 0..5 for every model; V and T per model).  The
#: table's last column is headed "AK80-80" on p. 49; the same values (V +-8 rad/s,
#: T +-144 N m) are the AK80-64 in both third-party tables below, and CubeMars
#: sells the AK80-64 with this driver, so the row is keyed "AK80-64".
#:
#: Checked against (tests/test_mit_thirdparty.py):
#:
#: * ``tmotor-can-mit-mode`` 1.1.2 (``tmotor.return_params``): agrees on every row;
#: * ``TMotorCANControl`` 1.2.6 (``mit_can.MIT_Params``): agrees except AK60-6
#:   velocity, which it has as +-50 rad/s (the manual and tmotor-can-mit-mode say
#:   +-45; the first release of this table had copied the +-50).
#:
#: ``"mini_cheetah"``: defaults of B. Katz' mini cheetah motor-controller firmware
#: (``CAN_com.h``: P 12.5 rad, V 65 rad/s, KP 500, KD 5, T 18 N m).  Drives can be
#: re-flashed with other ranges: pass explicit limits then.
MIT_MODELS: dict[str, MitLimits] = {
    # model       P [rad]           V [rad/s]           Kp           Kd           T [N m]      manual V1.0.8
    "AK10-9": MitLimits(p_max_rad=12.5, v_max_rad_s=50.0, kp_max=500.0, kd_max=5.0, t_max_nm=65.0),   # p. 50
    "AK60-6": MitLimits(p_max_rad=12.5, v_max_rad_s=45.0, kp_max=500.0, kd_max=5.0, t_max_nm=15.0),   # p. 50
    "AK70-10": MitLimits(p_max_rad=12.5, v_max_rad_s=50.0, kp_max=500.0, kd_max=5.0, t_max_nm=25.0),  # p. 50
    "AK80-6": MitLimits(p_max_rad=12.5, v_max_rad_s=76.0, kp_max=500.0, kd_max=5.0, t_max_nm=12.0),   # p. 50
    "AK80-9": MitLimits(p_max_rad=12.5, v_max_rad_s=50.0, kp_max=500.0, kd_max=5.0, t_max_nm=18.0),   # p. 50
    "AK80-64": MitLimits(p_max_rad=12.5, v_max_rad_s=8.0, kp_max=500.0, kd_max=5.0, t_max_nm=144.0),  # p. 49-50
    "mini_cheetah": MitLimits(p_max_rad=12.5, v_max_rad_s=65.0, kp_max=500.0, kd_max=5.0, t_max_nm=18.0),
}

#: Error byte (``byte 7``) of the CubeMars 8-byte MIT reply.  The manual V1.0.8
#: names the byte ("An error code", p. 49) without listing the values; this table
#: is the one of ``TMotorCANControl`` 1.2.6 (``MIT_Params["ERROR_CODES"]``).  Any
#: non-zero value is a device fault for the driver, listed here or not.
MIT_ERROR_CODES: dict[int, str] = {
    0: "no error",
    1: "over temperature",
    2: "over current",
    3: "over voltage",
    4: "under voltage",
    5: "encoder fault",
    6: "phase current unbalance",
}

#: Reply variant name -> payload length in bytes.
REPLY_VARIANTS: dict[str, int] = {"classic6": 6, "cubemars8": 8}
_VARIANT_ALIASES = {"servo7": "cubemars8"}

_SPECIAL_PREFIX = bytes([0xFF] * 7)
ENTER_MOTOR_MODE = _SPECIAL_PREFIX + bytes([0xFC])
EXIT_MOTOR_MODE = _SPECIAL_PREFIX + bytes([0xFD])
SET_ZERO = _SPECIAL_PREFIX + bytes([0xFE])
_SPECIAL_KIND = {0xFC: "enter", 0xFD: "exit", 0xFE: "zero"}


@dataclass(frozen=True)
class MitCommand:
    """A decoded MIT command (motor side, quantised values).

    Attributes
    ----------
    p_rad, v_rad_s : float
        Position [rad] and velocity [rad/s] set-points.
    kp, kd : float
        Drive PD gains [N m/rad], [N m s/rad].
    t_nm : float
        Feed-forward torque [N m].
    """

    p_rad: float
    v_rad_s: float
    kp: float
    kd: float
    t_nm: float


@dataclass(frozen=True)
class MitReply:
    """A decoded MIT reply (motor side, quantised values).

    Attributes
    ----------
    motor_id : int
        CAN id the drive reports in byte 0.
    p_rad, v_rad_s, t_nm : float
        Measured position [rad], velocity [rad/s], torque [N m].
    temperature_c : int or None
        Driver temperature [degC] (8-byte variant only).
    error : int or None
        Error code (8-byte variant only, see :data:`MIT_ERROR_CODES`).
    """

    motor_id: int
    p_rad: float
    v_rad_s: float
    t_nm: float
    temperature_c: int | None = None
    error: int | None = None


# ---------------------------------------------------------------------------
# fixed point
# ---------------------------------------------------------------------------
def float_to_uint(x: float, x_min: float, x_max: float, bits: int, nearest: bool = False) -> int:
    """Quantise ``x`` to an unsigned ``bits``-bit integer over ``[x_min, x_max]``.

    As in the reference firmware: clamp to the range, scale so that ``x_min``
    maps to 0 and ``x_max`` to ``2**bits - 1``, then truncate toward zero
    (``nearest=False``) or round to the nearest integer (``nearest=True``,
    halves away from zero).

    Raises
    ------
    DriverError
        If ``x`` is not finite (nothing non-finite is ever encoded).
    """
    x = float(x)
    if not x_min <= x <= x_max:         # outside the range, or NaN
        if not math.isfinite(x):
            raise DriverError(f"refusing to encode non-finite value {x!r}")
        x = x_min if x < x_min else x_max
    top = (1 << bits) - 1
    u = int((x - x_min) * top / (x_max - x_min) + (0.5 if nearest else 0.0))
    return top if u > top else u


def uint_to_float(u: int, x_min: float, x_max: float, bits: int) -> float:
    """Inverse of :func:`float_to_uint`: ``u * span / (2**bits - 1) + x_min``.

    Raises
    ------
    DecodeError
        If ``u`` is not in ``[0, 2**bits - 1]``.
    """
    top = (1 << bits) - 1
    if not 0 <= u <= top:
        raise DecodeError(f"{bits}-bit field value {u} out of range")
    return u * (x_max - x_min) / top + x_min


def uint_to_float_centered(u: int, x_min: float, x_max: float, bits: int) -> float:
    """Best estimate of a value the *sender truncated* to ``u``: the middle of its step.

    :func:`uint_to_float` returns the bottom of the step ``[u, u + 1)``, i.e. half a
    step below the sent value on average; this adds the half step back (except at
    ``2**bits - 1``, which holds only the clamped maximum).

    Raises
    ------
    DecodeError
        If ``u`` is not in ``[0, 2**bits - 1]``.
    """
    top = (1 << bits) - 1
    x = uint_to_float(u, x_min, x_max, bits)
    return x if u == top else x + 0.5 * (x_max - x_min) / top


# ---------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------
def classify_command(data: bytes) -> str:
    """Return ``"enter"``, ``"exit"``, ``"zero"`` or ``"command"`` for an 8-byte command payload.

    Raises
    ------
    DecodeError
        If the payload is not 8 bytes long.
    """
    data = bytes(data)
    if len(data) != 8:
        raise DecodeError(f"MIT command must be 8 bytes, got {len(data)}")
    if data[:7] == _SPECIAL_PREFIX:
        kind = _SPECIAL_KIND.get(data[7])
        if kind is not None:
            return kind
    return "command"


def encode_command(p_rad: float, v_rad_s: float, kp: float, kd: float, t_nm: float,
                   limits: MitLimits, nearest: bool = False) -> bytes:
    """Pack one MIT command (motor side values) into 8 bytes.

    Values outside the protocol ranges are clamped (as the firmware does).

    Parameters
    ----------
    p_rad, v_rad_s : float
        Position [rad] and velocity [rad/s] set-points.
    kp, kd : float
        PD gains [N m/rad], [N m s/rad] (0 for pure torque control).
    t_nm : float
        Feed-forward torque [N m].
    limits : MitLimits
        Field ranges of the drive.
    nearest : bool
        Round each field to the nearest step (unbiased) instead of truncating
        as the reference firmware's host code does (see the module notes).

    Returns
    -------
    bytes
        The 8-byte payload.

    Raises
    ------
    DriverError
        If any value is not finite.
    """
    return pack_command(*encode_command_fields(p_rad, v_rad_s, kp, kd, t_nm, limits, nearest))


def _clamped(x: float, x_min: float, x_max: float) -> float:
    """``x`` clamped to ``[x_min, x_max]`` (``x`` outside it or NaN; refuses non-finite values)."""
    if not math.isfinite(x):
        raise DriverError(f"refusing to encode non-finite value {x!r}")
    return x_min if x < x_min else x_max


def encode_command_fields(p_rad: float, v_rad_s: float, kp: float, kd: float, t_nm: float,
                          limits: MitLimits, nearest: bool = False) -> tuple[int, int, int, int, int]:
    """The quantised integer fields ``(p, v, kp, kd, t)`` of :func:`encode_command`.

    Each is :func:`float_to_uint` of its value over its range (16 bits for ``p``,
    12 for the others), computed the same way; :func:`pack_command` packs them into
    the 8-byte payload and :func:`command_values` gives what
    :func:`decode_command_values` decodes from it, without unpacking the bytes.

    Raises
    ------
    DriverError
        If any value is not finite.
    """
    half = 0.5 if nearest else 0.0
    # float_to_uint(x, lo, hi, bits, nearest) inline, field by field
    hi = limits.p_max_rad
    lo = -hi
    x = float(p_rad)
    if not lo <= x <= hi:
        x = _clamped(x, lo, hi)
    p = int((x - lo) * 0xFFFF / (hi - lo) + half)
    hi = limits.v_max_rad_s
    lo = -hi
    x = float(v_rad_s)
    if not lo <= x <= hi:
        x = _clamped(x, lo, hi)
    v = int((x - lo) * 0xFFF / (hi - lo) + half)
    hi = limits.kp_max
    x = float(kp)
    if not 0.0 <= x <= hi:
        x = _clamped(x, 0.0, hi)
    kp_u = int((x - 0.0) * 0xFFF / (hi - 0.0) + half)
    hi = limits.kd_max
    x = float(kd)
    if not 0.0 <= x <= hi:
        x = _clamped(x, 0.0, hi)
    kd_u = int((x - 0.0) * 0xFFF / (hi - 0.0) + half)
    hi = limits.t_max_nm
    lo = -hi
    x = float(t_nm)
    if not lo <= x <= hi:
        x = _clamped(x, lo, hi)
    t = int((x - lo) * 0xFFF / (hi - lo) + half)
    return (0xFFFF if p > 0xFFFF else p, 0xFFF if v > 0xFFF else v, 0xFFF if kp_u > 0xFFF else kp_u,
            0xFFF if kd_u > 0xFFF else kd_u, 0xFFF if t > 0xFFF else t)


def pack_command(p: int, v: int, kp_u: int, kd_u: int, t: int) -> bytes:
    """The 8-byte command payload of the integer fields (16-bit ``p``, 12-bit others; see the module notes)."""
    return bytes((
        p >> 8, p & 0xFF,
        v >> 4, ((v & 0xF) << 4) | (kp_u >> 8),
        kp_u & 0xFF,
        kd_u >> 4, ((kd_u & 0xF) << 4) | (t >> 8),
        t & 0xFF,
    ))


def command_values(p: int, v: int, kp_u: int, kd_u: int, t: int,
                   limits: MitLimits) -> tuple[float, float, float, float, float]:
    """The values ``(p_rad, v_rad_s, kp, kd, t_nm)`` of a command's integer fields.

    Exactly what :func:`decode_command_values` returns for :func:`pack_command` of the
    same fields (it calls this), each field mapped as :func:`uint_to_float` maps it.
    """
    # uint_to_float(u, lo, hi, bits) = u * (hi - lo) / (2**bits - 1) + lo, term for term
    p_lo, v_lo, t_lo = -limits.p_max_rad, -limits.v_max_rad_s, -limits.t_max_nm
    return (p * (limits.p_max_rad - p_lo) / 0xFFFF + p_lo,
            v * (limits.v_max_rad_s - v_lo) / 0xFFF + v_lo,
            kp_u * (limits.kp_max - 0.0) / 0xFFF + 0.0,
            kd_u * (limits.kd_max - 0.0) / 0xFFF + 0.0,
            t * (limits.t_max_nm - t_lo) / 0xFFF + t_lo)


def decode_command(data: bytes, limits: MitLimits) -> MitCommand:
    """Unpack an 8-byte MIT command payload (what a drive / emulator does).

    Raises
    ------
    DecodeError
        Wrong length, or the payload is one of the special frames (use
        :func:`classify_command` first).
    """
    return MitCommand(*decode_command_values(data, limits))


def decode_command_values(data: bytes, limits: MitLimits) -> tuple[float, float, float, float, float]:
    """:func:`decode_command` as a plain tuple ``(p_rad, v_rad_s, kp, kd, t_nm)`` (same values).

    For the emulated drive's per-frame path: the fields are mapped exactly as
    :func:`uint_to_float` maps them (:func:`command_values`), without the record.

    Raises
    ------
    DecodeError
        Wrong length, or the payload is one of the special frames.
    """
    data = bytes(data)
    if len(data) != 8:
        raise DecodeError(f"MIT command must be 8 bytes, got {len(data)}")
    if data[:7] == _SPECIAL_PREFIX:
        kind = _SPECIAL_KIND.get(data[7])
        if kind is not None:
            raise DecodeError(f"payload is the special '{kind}' frame, not a command")
    return command_values((data[0] << 8) | data[1], (data[2] << 4) | (data[3] >> 4),
                          ((data[3] & 0xF) << 8) | data[4], (data[5] << 4) | (data[6] >> 4),
                          ((data[6] & 0xF) << 8) | data[7], limits)


# ---------------------------------------------------------------------------
# replies
# ---------------------------------------------------------------------------
def _variant(variant: str) -> str:
    v = _VARIANT_ALIASES.get(variant, variant)
    if v not in REPLY_VARIANTS:
        raise DriverError(f"unknown MIT reply variant {variant!r}; use one of {sorted(REPLY_VARIANTS)}")
    return v


def reply_length(variant: str) -> int:
    """Payload length [bytes] of a reply variant (``"classic6"`` 6, ``"cubemars8"`` 8)."""
    return REPLY_VARIANTS[_variant(variant)]


def _byte(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
        raise DriverError(f"{name} must be an integer in [0, 255], got {value!r}")
    return value


def encode_reply(motor_id: int, p_rad: float, v_rad_s: float, t_nm: float, limits: MitLimits, *,
                 variant: str = "classic6", temperature_c: float = 0, error: int = 0) -> bytes:
    """Pack a drive's reply (what a drive / emulator sends).

    Parameters
    ----------
    motor_id : int
        CAN id of the drive, 0..255 (byte 0).
    p_rad, v_rad_s, t_nm : float
        Measured position [rad], velocity [rad/s], torque [N m] (clamped to range).
    limits : MitLimits
        Field ranges of the drive.
    variant : {"classic6", "cubemars8"}
        Frame layout (``"servo7"`` is an alias of ``"cubemars8"``).
    temperature_c : float
        Driver temperature [degC], rounded and clamped to 0..255 (8-byte variant).
    error : int
        Error code 0..255 (8-byte variant).

    Returns
    -------
    bytes
        6 or 8 bytes.

    Raises
    ------
    DriverError
        Non-finite values, ids/codes out of range, unknown variant.
    """
    var = _variant(variant)
    mid = _byte("motor_id", motor_id)
    p = float_to_uint(p_rad, -limits.p_max_rad, limits.p_max_rad, 16)
    v = float_to_uint(v_rad_s, -limits.v_max_rad_s, limits.v_max_rad_s, 12)
    t = float_to_uint(t_nm, -limits.t_max_nm, limits.t_max_nm, 12)
    out = bytes((mid, p >> 8, p & 0xFF, v >> 4, ((v & 0xF) << 4) | (t >> 8), t & 0xFF))
    if var == "classic6":
        return out
    temp = float(temperature_c)
    if not math.isfinite(temp):
        raise DriverError(f"refusing to encode non-finite temperature {temperature_c!r}")
    temp_u = min(255, max(0, int(round(temp))))
    return out + bytes((temp_u, _byte("error", error)))


def decode_reply(data: bytes, limits: MitLimits, centered: bool = False) -> MitReply:
    """Unpack a drive's reply; the layout is chosen by length (6 or 8 bytes).

    ``centered=True`` decodes position, velocity and torque to the middle of their
    quantisation step (:func:`uint_to_float_centered`): the firmware truncates
    when it packs the reply, so the plain decoding reads every value low by half a
    step on average (for an AK80-9 12 mrad/s of velocity, which a derivative gain
    turns into a steady force).

    Raises
    ------
    DecodeError
        If the payload is neither 6 nor 8 bytes long.
    """
    return MitReply(*decode_reply_values(data, limits, centered))


def decode_reply_values(data: bytes, limits: MitLimits, centered: bool = False
                        ) -> tuple[int, float, float, float, int | None, int | None]:
    """:func:`decode_reply` as a plain tuple ``(motor_id, p_rad, v_rad_s, t_nm, temperature_c, error)``.

    Same values (each field mapped exactly as :func:`uint_to_float` /
    :func:`uint_to_float_centered` map it), without the record; for the driver's
    per-frame path.

    Raises
    ------
    DecodeError
        If the payload is neither 6 nor 8 bytes long.
    """
    data = bytes(data)
    n = len(data)
    if n != 6 and n != 8:
        raise DecodeError(f"MIT reply must be 6 or 8 bytes, got {n}")
    p = (data[1] << 8) | data[2]
    v = (data[3] << 4) | (data[4] >> 4)
    t = ((data[4] & 0xF) << 8) | data[5]
    pm, vm, tm = limits.p_max_rad, limits.v_max_rad_s, limits.t_max_nm
    p_lo, v_lo, t_lo = -pm, -vm, -tm
    # uint_to_float(u, lo, hi, bits) = u * (hi - lo) / top + lo, term for term
    x_p = p * (pm - p_lo) / 0xFFFF + p_lo
    x_v = v * (vm - v_lo) / 0xFFF + v_lo
    x_t = t * (tm - t_lo) / 0xFFF + t_lo
    if centered:
        # uint_to_float_centered: + half a step, except at the top (the clamped maximum)
        if p != 0xFFFF:
            x_p = x_p + 0.5 * (pm - p_lo) / 0xFFFF
        if v != 0xFFF:
            x_v = x_v + 0.5 * (vm - v_lo) / 0xFFF
        if t != 0xFFF:
            x_t = x_t + 0.5 * (tm - t_lo) / 0xFFF
    if n == 8:
        return data[0], x_p, x_v, x_t, data[6], data[7]
    return data[0], x_p, x_v, x_t, None, None


# ---------------------------------------------------------------------------
# one drive's codec with its constants computed once (the driver's per-cycle path)
# ---------------------------------------------------------------------------
# Each factory returns a function equal to the plain function above for one ``MitLimits``
# (and rounding / centring): the range ends, spans and half steps are computed once, with
# the same operations on the same operands, so every value is bit-identical (the arithmetic
# of each field is the plain function's expression, term for term).  ``math.trunc`` is
# ``int`` for a float (both are ``float.__trunc__``).
def field_encoder(x_min: float, x_max: float, bits: int, nearest: bool = False) -> Callable[[float], int]:
    """:func:`float_to_uint` over one range, as a function of a Python float ``x`` alone.

    Returns
    -------
    callable
        ``f(x) -> int``, ``float_to_uint(x, x_min, x_max, bits, nearest)``; it raises
        :class:`~dynamics.errors.DriverError` if ``x`` is not finite.
    """
    half = 0.5 if nearest else 0.0
    top = (1 << bits) - 1
    span = x_max - x_min
    trunc = math.trunc

    def encode(x: float) -> int:
        if not x_min <= x <= x_max:
            x = _clamped(x, x_min, x_max)
        u = trunc((x - x_min) * top / span + half)
        return top if u > top else u

    return encode


def command_fields_encoder(limits: MitLimits, nearest: bool = False
                           ) -> Callable[[float, float, float, float, float], tuple[int, int, int, int, int]]:
    """:func:`encode_command_fields` for one drive: ``f(p_rad, v_rad_s, kp, kd, t_nm)``.

    Returns
    -------
    callable
        ``f(p_rad, v_rad_s, kp, kd, t_nm) -> (p, v, kp_u, kd_u, t)`` for Python floats (the
        driver's values; the plain function converts its arguments with ``float`` first):
        what ``encode_command_fields(p_rad, v_rad_s, kp, kd, t_nm, limits, nearest)``
        returns; it raises :class:`~dynamics.errors.DriverError` if any value is not finite.
    """
    half = 0.5 if nearest else 0.0
    p_hi = limits.p_max_rad
    p_lo = -p_hi
    p_span = p_hi - p_lo
    v_hi = limits.v_max_rad_s
    v_lo = -v_hi
    v_span = v_hi - v_lo
    kp_hi = limits.kp_max
    kp_span = kp_hi - 0.0
    kd_hi = limits.kd_max
    kd_span = kd_hi - 0.0
    t_hi = limits.t_max_nm
    t_lo = -t_hi
    t_span = t_hi - t_lo
    trunc = math.trunc

    def fields(p_rad: float, v_rad_s: float, kp: float, kd: float, t_nm: float) -> tuple[int, int, int, int, int]:
        x = p_rad
        if not p_lo <= x <= p_hi:
            x = _clamped(x, p_lo, p_hi)
        p = trunc((x - p_lo) * 0xFFFF / p_span + half)
        x = v_rad_s
        if not v_lo <= x <= v_hi:
            x = _clamped(x, v_lo, v_hi)
        v = trunc((x - v_lo) * 0xFFF / v_span + half)
        x = kp
        if not 0.0 <= x <= kp_hi:
            x = _clamped(x, 0.0, kp_hi)
        kp_u = trunc((x - 0.0) * 0xFFF / kp_span + half)
        x = kd
        if not 0.0 <= x <= kd_hi:
            x = _clamped(x, 0.0, kd_hi)
        kd_u = trunc((x - 0.0) * 0xFFF / kd_span + half)
        x = t_nm
        if not t_lo <= x <= t_hi:
            x = _clamped(x, t_lo, t_hi)
        t = trunc((x - t_lo) * 0xFFF / t_span + half)
        return (0xFFFF if p > 0xFFFF else p, 0xFFF if v > 0xFFF else v, 0xFFF if kp_u > 0xFFF else kp_u,
                0xFFF if kd_u > 0xFFF else kd_u, 0xFFF if t > 0xFFF else t)

    return fields


def command_values_decoder(limits: MitLimits) -> Callable[[int, int, int, int, int],
                                                          tuple[float, float, float, float, float]]:
    """:func:`command_values` for one drive.

    Returns
    -------
    callable
        ``f(p, v, kp_u, kd_u, t) -> (p_rad, v_rad_s, kp, kd, t_nm)``: what
        ``command_values(p, v, kp_u, kd_u, t, limits)`` returns.
    """
    p_lo, v_lo, t_lo = -limits.p_max_rad, -limits.v_max_rad_s, -limits.t_max_nm
    p_span = limits.p_max_rad - p_lo
    v_span = limits.v_max_rad_s - v_lo
    kp_span = limits.kp_max - 0.0
    kd_span = limits.kd_max - 0.0
    t_span = limits.t_max_nm - t_lo

    def values(p: int, v: int, kp_u: int, kd_u: int, t: int) -> tuple[float, float, float, float, float]:
        return (p * p_span / 0xFFFF + p_lo,
                v * v_span / 0xFFF + v_lo,
                kp_u * kp_span / 0xFFF + 0.0,
                kd_u * kd_span / 0xFFF + 0.0,
                t * t_span / 0xFFF + t_lo)

    return values
