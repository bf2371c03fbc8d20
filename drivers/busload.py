"""CAN bus-load budget: does a driver configuration fit in the control period?

Frame lengths
-------------
Classic CAN (ISO 11898-1), payload ``n`` bytes:

* base (11-bit) id: 34 + 8n bits are subject to stuffing (SOF, id, RTR, IDE,
  r0, DLC, data, CRC), plus 13 bits that are not (CRC delimiter, ACK slot and
  delimiter, 7 EOF bits, 3 interframe-space bits): 47 + 8n bits nominal;
* extended (29-bit) id: 54 + 8n stuffed + 13 = 67 + 8n bits nominal;
* worst-case bit stuffing adds ``floor((g + 8n - 1) / 4)`` bits for the ``g =
  34 | 54`` stuffed header/CRC bits (Davis, Burns, Bril, Lukkien, "Controller
  Area Network (CAN) schedulability analysis: refuted, revisited and revised",
  Real-Time Systems 35, 2007, eq. 1).  An 8-byte base frame is 111 bits
  nominal and 135 worst case: at 1 Mbit/s at most 7,407 such frames per second
  (8,696 for the 6-byte MIT reply).

CAN FD (ISO 11898-1:2015) with bit-rate switching: the arbitration phase (SOF
.. BRS: 17 bits base / 36 extended) and the tail (ACK slot, ACK delimiter,
EOF, IFS: 12 bits) run at the nominal rate; ESI, DLC, data, stuff count (4),
CRC (17 bits up to 16 bytes, 21 above), its fixed stuff bits (one per 4 bits)
and the CRC delimiter run at the data rate.  Dynamic stuffing is bounded per
phase by one bit per four.  The payload is rounded up to a valid FD length.
This is an upper-bound estimate, good to a few bits per frame.

Budget
------
A bus carries *flows*: frames of a given payload at a given rate (``rate_hz``
per device, ``count`` devices).  Utilisation = sum(rate * count * frame time).
The verdict is ``"ok"`` up to ``tight_above`` (70 %), ``"tight"`` up to 100 %,
``"over"`` beyond; when not ok the report lists remedies (split the devices
over k buses, lower the loop rate to X Hz, CAN FD if the devices support it,
a higher bit rate).

Pure computations; nothing here touches a bus.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from dynamics.errors import ConfigError

__all__ = [
    "BusSpec", "FrameFlow", "BusLoad", "BudgetReport",
    "classic_frame_bits", "fd_frame_bits", "fd_payload_length", "frame_time_s",
    "mit_flows", "odrive_flows", "cia402_flows", "bus_load", "budget", "mit_budget", "odrive_budget", "driver_budget",
    "TIGHT_ABOVE",
    "SerialBudget", "dynamixel_cycle_bytes", "dynamixel_budget", "SERIAL_BITS_PER_BYTE",
]

#: utilisation above which the verdict is "tight"
TIGHT_ABOVE = 0.70

_FD_LENGTHS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 32, 48, 64)
_STUFFING = ("worst", "none")


def _check_payload(n: int, maximum: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= maximum:
        raise ConfigError(f"payload must be an integer number of bytes in [0, {maximum}], got {n!r}")
    return n


def _check_stuffing(stuffing: str) -> None:
    if stuffing not in _STUFFING:
        raise ConfigError(f"stuffing must be one of {_STUFFING}, got {stuffing!r}")


def classic_frame_bits(payload_bytes: int, *, extended: bool = False, stuffing: str = "worst") -> int:
    """Bits on the wire for one classic CAN data frame, interframe space included.

    Parameters
    ----------
    payload_bytes : int
        0..8 (0 also for a remote frame).
    extended : bool
        29-bit identifier.
    stuffing : {"worst", "none"}
        Worst-case stuff bits or none (nominal length).

    Examples
    --------
    >>> classic_frame_bits(8), classic_frame_bits(8, stuffing="none"), classic_frame_bits(8, extended=True)
    (135, 111, 160)
    """
    n = _check_payload(payload_bytes, 8)
    _check_stuffing(stuffing)
    g = 54 if extended else 34
    stuffed = g + 8 * n
    stuff = (stuffed - 1) // 4 if stuffing == "worst" else 0
    return stuffed + 13 + stuff


def fd_payload_length(payload_bytes: int) -> int:
    """Smallest valid CAN FD payload length >= ``payload_bytes`` (0..64)."""
    n = _check_payload(payload_bytes, 64)
    return next(k for k in _FD_LENGTHS if k >= n)


def fd_frame_bits(payload_bytes: int, *, extended: bool = False, stuffing: str = "worst") -> tuple[int, int]:
    """Bits of a CAN FD frame (with bit-rate switch) as ``(nominal_rate_bits, data_rate_bits)``."""
    n = fd_payload_length(payload_bytes)
    _check_stuffing(stuffing)
    arb = 36 if extended else 17               # SOF .. BRS
    tail = 12                                  # ACK slot + delimiter, EOF, IFS
    crc = 17 if n <= 16 else 21
    dyn = 1 + 4 + 8 * n                        # ESI, DLC, data (dynamically stuffed)
    fixed_stuff = math.ceil((4 + crc) / 4)     # fixed stuff bits of stuff count + CRC
    data = dyn + 4 + crc + fixed_stuff + 1     # + stuff count, CRC, CRC delimiter
    if stuffing == "worst":
        arb += (arb - 1) // 4
        data += dyn // 4
    return arb + tail, data


@dataclass(frozen=True)
class BusSpec:
    """Bit timing of one bus.

    Attributes
    ----------
    bitrate_bit_s : float
        Nominal (arbitration) bit rate [bit/s].
    fd : bool
        CAN FD frames with bit-rate switching.
    data_bitrate_bit_s : float or None
        FD data-phase bit rate [bit/s] (default: the nominal rate).
    name : str
        Label used in reports.
    """

    bitrate_bit_s: float = 1_000_000.0
    fd: bool = False
    data_bitrate_bit_s: float | None = None
    name: str = "can0"

    def __post_init__(self):
        for key in ("bitrate_bit_s", "data_bitrate_bit_s"):
            v = getattr(self, key)
            if v is None and key == "data_bitrate_bit_s":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ConfigError(f"BusSpec.{key} must be a finite number > 0, got {v!r}", field=key)


def frame_time_s(payload_bytes: int, bus: BusSpec, *, extended: bool = False, stuffing: str = "worst") -> float:
    """Time one frame occupies the bus [s]."""
    if bus.fd:
        nom, dat = fd_frame_bits(payload_bytes, extended=extended, stuffing=stuffing)
        return nom / bus.bitrate_bit_s + dat / (bus.data_bitrate_bit_s or bus.bitrate_bit_s)
    return classic_frame_bits(payload_bytes, extended=extended, stuffing=stuffing) / bus.bitrate_bit_s


@dataclass(frozen=True)
class FrameFlow:
    """A periodic stream of frames on one bus.

    Attributes
    ----------
    name : str
        What it is (``"MIT command"``, ``"ODrive heartbeat"``...).
    payload_bytes : int
        Payload length (0 for a remote frame).
    rate_hz : float
        Frames per second per device.
    count : int
        Number of devices producing it.
    per_cycle : bool
        True if the flow is sent every control cycle (scales with the loop rate).
    extended : bool
        29-bit identifier.
    """

    name: str
    payload_bytes: int
    rate_hz: float
    count: int = 1
    per_cycle: bool = True
    extended: bool = False


def mit_flows(n_motors: int, loop_hz: float, *, reply_bytes: int = 6) -> list[FrameFlow]:
    """Flows of ``n_motors`` MIT drives: one 8-byte command and one reply per motor per cycle."""
    return [FrameFlow("MIT command", 8, loop_hz, n_motors),
            FrameFlow("MIT reply", reply_bytes, loop_hz, n_motors)]


def odrive_flows(n_axes: int, loop_hz: float, *, feedback: str = "broadcast",
                 torque_feedback: str = "none",
                 encoder_rate_hz: float | None = None, heartbeat_rate_hz: float = 10.0,
                 torques_rate_hz: float = 0.0, iq_rate_hz: float = 0.0) -> list[FrameFlow]:
    """Flows of ``n_axes`` ODrive axes in torque control.

    Parameters
    ----------
    feedback : {"broadcast", "rtr"}
        Cyclic broadcast of Encoder_Estimates at ``encoder_rate_hz`` (default:
        the loop rate), or one RTR request + answer per axis per cycle.
    torque_feedback : {"none", "iq", "torques"}
        With ``feedback="rtr"`` the driver also requests Get_Iq or Get_Torques
        every cycle (one more RTR + answer per axis); with broadcasts they come
        at ``iq_rate_hz``/``torques_rate_hz``.
    heartbeat_rate_hz, torques_rate_hz, iq_rate_hz : float
        Broadcast rates of Heartbeat, Get_Torques and Get_Iq (0: off).
    """
    from .codecs.odrive import MESSAGE_LENGTH, Cmd   # the DBC's 8 bytes, as the driver sends them
    if torque_feedback not in ("none", "iq", "torques"):
        raise ConfigError(f"torque_feedback must be 'none', 'iq' or 'torques', got {torque_feedback!r}")
    flows = [FrameFlow("ODrive Set_Input_Torque", MESSAGE_LENGTH[Cmd.SET_INPUT_TORQUE], loop_hz, n_axes)]
    if feedback == "rtr":
        flows += [FrameFlow("ODrive RTR Encoder_Estimates", 0, loop_hz, n_axes),
                  FrameFlow("ODrive Encoder_Estimates", 8, loop_hz, n_axes)]
        if torque_feedback != "none":
            name = "Get_Iq" if torque_feedback == "iq" else "Get_Torques"
            flows += [FrameFlow(f"ODrive RTR {name}", 0, loop_hz, n_axes),
                      FrameFlow(f"ODrive {name}", 8, loop_hz, n_axes)]
    elif feedback == "broadcast":
        rate = loop_hz if encoder_rate_hz is None else encoder_rate_hz
        flows.append(FrameFlow("ODrive Encoder_Estimates", 8, rate, n_axes, per_cycle=encoder_rate_hz is None))
    else:
        raise ConfigError(f"feedback must be 'broadcast' or 'rtr', got {feedback!r}")
    if heartbeat_rate_hz > 0:
        flows.append(FrameFlow("ODrive Heartbeat", 8, heartbeat_rate_hz, n_axes, per_cycle=False))
    if torques_rate_hz > 0:
        flows.append(FrameFlow("ODrive Get_Torques", 8, torques_rate_hz, n_axes, per_cycle=False))
    if iq_rate_hz > 0:
        flows.append(FrameFlow("ODrive Get_Iq", 8, iq_rate_hz, n_axes, per_cycle=False))
    return flows


def cia402_flows(n_drives: int, loop_hz: float, *, heartbeat_rate_hz: float = 20.0,
                 master_heartbeat_rate_hz: float = 20.0) -> list[FrameFlow]:
    """Flows of ``n_drives`` CiA 402 drives in cyclic synchronous torque (:mod:`drivers.cia402`).

    Per cycle: one SYNC (0 bytes) per bus, and per drive RPDO1 (controlword +
    target torque, 4 bytes), TPDO1 (statusword, position, torque, 8 bytes)
    and TPDO2 (velocity, mode display, 5 bytes); plus every drive's heartbeat
    and the master's heartbeat (1 byte each) at their rates.
    """
    flows = [FrameFlow("CiA 402 SYNC", 0, loop_hz, 1),
             FrameFlow("CiA 402 RPDO1 controlword+target torque", 4, loop_hz, n_drives),
             FrameFlow("CiA 402 TPDO1 statusword+position+torque", 8, loop_hz, n_drives),
             FrameFlow("CiA 402 TPDO2 velocity+mode", 5, loop_hz, n_drives)]
    if heartbeat_rate_hz > 0:
        flows.append(FrameFlow("CiA 402 drive heartbeat", 1, heartbeat_rate_hz, n_drives, per_cycle=False))
    if master_heartbeat_rate_hz > 0:
        flows.append(FrameFlow("CANopen master heartbeat", 1, master_heartbeat_rate_hz, 1, per_cycle=False))
    return flows


def cia402_budget(n_drives: int, loop_hz: float, *, bus: BusSpec = BusSpec(), stuffing: str = "worst",
                  **flow_kwargs) -> "BudgetReport":
    """Budget of ``n_drives`` CiA 402 drives on one bus (``flow_kwargs`` go to :func:`cia402_flows`)."""
    return budget([(bus, cia402_flows(n_drives, loop_hz, **flow_kwargs))], loop_hz, stuffing=stuffing)


@dataclass(frozen=True)
class BusLoad:
    """Load of one bus.

    Attributes
    ----------
    bus : BusSpec
    flows : tuple of FrameFlow
    utilisation : float
        Fraction of bus time used (1.0 = saturated).
    cycle_time_s : float
        Bus time of the frames sent every control cycle [s] (the burst that
        must fit in one period together with the background traffic).
    background_utilisation : float
        Part of ``utilisation`` from flows that do not scale with the loop rate.
    frames_per_s : float
    verdict : str
        ``"ok"``, ``"tight"`` or ``"over"``.
    """

    bus: BusSpec
    flows: tuple
    utilisation: float
    cycle_time_s: float
    background_utilisation: float
    frames_per_s: float
    verdict: str


def bus_load(bus: BusSpec, flows: Sequence[FrameFlow], loop_hz: float, *, stuffing: str = "worst",
             tight_above: float = TIGHT_ABOVE) -> BusLoad:
    """Utilisation of one bus carrying ``flows`` with the control loop at ``loop_hz``."""
    if not (math.isfinite(loop_hz) and loop_hz > 0):
        raise ConfigError(f"loop_hz must be finite and > 0, got {loop_hz!r}")
    util = 0.0
    background = 0.0
    cycle = 0.0
    fps = 0.0
    for f in flows:
        t = frame_time_s(f.payload_bytes, bus, extended=f.extended, stuffing=stuffing)
        u = f.rate_hz * f.count * t
        util += u
        fps += f.rate_hz * f.count
        if f.per_cycle:
            cycle += (f.rate_hz / loop_hz) * f.count * t
        else:
            background += u
    verdict = "over" if util > 1.0 else "tight" if util > tight_above else "ok"
    return BusLoad(bus, tuple(flows), util, cycle, background, fps, verdict)


@dataclass(frozen=True)
class BudgetReport:
    """Bus-load budget of a whole driver configuration.

    Attributes
    ----------
    loop_hz : float
    loads : tuple of BusLoad
        One per bus.
    verdict : str
        Worst verdict over the buses.
    remedies : tuple of str
        Suggestions when the verdict is not ``"ok"``.
    """

    loop_hz: float
    loads: tuple
    verdict: str
    remedies: tuple = field(default_factory=tuple)

    def __str__(self) -> str:
        return self.summary()

    @property
    def fits(self) -> bool:
        """True unless some bus is over 100 %."""
        return self.verdict != "over"

    def summary(self) -> str:
        """Human-readable multi-line report."""
        lines = [f"bus-load budget at {self.loop_hz:g} Hz: {self.verdict.upper()}"]
        for ld in self.loads:
            rate = f"{ld.bus.bitrate_bit_s / 1e6:g} Mbit/s" + (
                f" / FD data {(ld.bus.data_bitrate_bit_s or ld.bus.bitrate_bit_s) / 1e6:g} Mbit/s" if ld.bus.fd else "")
            lines.append(f"  {ld.bus.name} ({rate}): {100 * ld.utilisation:.1f} % "
                         f"({ld.frames_per_s:,.0f} frames/s, {1e6 * ld.cycle_time_s:.0f} us per cycle) -> {ld.verdict}")
        for r in self.remedies:
            lines.append(f"  remedy: {r}")
        return "\n".join(lines)


def _remedies(ld: BusLoad, loop_hz: float, stuffing: str, tight_above: float) -> list[str]:
    out = []
    name = ld.bus.name
    per_cycle_util = ld.utilisation - ld.background_utilisation
    counts = [f.count for f in ld.flows if f.per_cycle]
    n_dev = max(counts) if counts else 0
    # split over k buses (devices spread evenly): the smallest k that brings each bus under the threshold
    for k in range(max(2, math.ceil(ld.utilisation / tight_above)), n_dev + 1):
        per_bus = math.ceil(n_dev / k)
        split = [replace(f, count=min(f.count, per_bus)) for f in ld.flows]
        u = bus_load(ld.bus, split, loop_hz, stuffing=stuffing).utilisation
        if u <= tight_above or k == n_dev:
            out.append(f"{name}: split the {n_dev} devices over {k} buses (<= {per_bus} per bus: "
                       f"{100 * u:.0f} % each)")
            break
    # lower the loop rate
    if per_cycle_util > 0 and ld.cycle_time_s > 0:
        budget_left = tight_above - ld.background_utilisation
        if budget_left > 0:
            hz = math.floor(budget_left / ld.cycle_time_s)
            out.append(f"{name}: lower the loop rate to <= {hz} Hz (keeps it under {100 * tight_above:.0f} %)")
    # CAN FD
    if not ld.bus.fd:
        fd_bus = replace(ld.bus, fd=True, bitrate_bit_s=1_000_000.0,
                         data_bitrate_bit_s=5_000_000.0)
        u = bus_load(fd_bus, ld.flows, loop_hz, stuffing=stuffing).utilisation
        out.append(f"{name}: CAN FD at 1/5 Mbit/s would use {100 * u:.0f} % (only if every device on the "
                   f"bus supports CAN FD; MIT-protocol AK drives and ODrive CANSimple are classic CAN)")
    if ld.bus.bitrate_bit_s < 1_000_000.0 and not ld.bus.fd:
        fast = replace(ld.bus, bitrate_bit_s=1_000_000.0)
        u = bus_load(fast, ld.flows, loop_hz, stuffing=stuffing).utilisation
        out.append(f"{name}: raise the bit rate to 1 Mbit/s ({100 * u:.0f} %)")
    return out


def budget(buses: Mapping[str, tuple[BusSpec, Sequence[FrameFlow]]] | Sequence[tuple[BusSpec, Sequence[FrameFlow]]],
           loop_hz: float, *, stuffing: str = "worst", tight_above: float = TIGHT_ABOVE) -> BudgetReport:
    """Budget of several buses: per-bus load, overall verdict and remedies.

    Parameters
    ----------
    buses : mapping name -> (BusSpec, flows), or a sequence of (BusSpec, flows)
    loop_hz : float
        Control loop rate [Hz].
    stuffing : {"worst", "none"}
    tight_above : float
        Utilisation above which the verdict is "tight".
    """
    items = list(buses.values()) if isinstance(buses, Mapping) else list(buses)
    loads = tuple(bus_load(spec, flows, loop_hz, stuffing=stuffing, tight_above=tight_above)
                  for spec, flows in items)
    order = {"ok": 0, "tight": 1, "over": 2}
    verdict = max((ld.verdict for ld in loads), key=order.__getitem__, default="ok")
    remedies = []
    for ld in loads:
        if ld.verdict != "ok":
            remedies += _remedies(ld, loop_hz, stuffing, tight_above)
    return BudgetReport(float(loop_hz), loads, verdict, tuple(remedies))


def mit_budget(n_motors: int, loop_hz: float, *, bus: BusSpec = BusSpec(), reply_bytes: int = 6,
               stuffing: str = "worst") -> BudgetReport:
    """Budget of ``n_motors`` MIT drives on one bus."""
    return budget([(bus, mit_flows(n_motors, loop_hz, reply_bytes=reply_bytes))], loop_hz, stuffing=stuffing)


def odrive_budget(n_axes: int, loop_hz: float, *, bus: BusSpec = BusSpec(), stuffing: str = "worst",
                  **flow_kwargs) -> BudgetReport:
    """Budget of ``n_axes`` ODrive axes on one bus (``flow_kwargs`` go to :func:`odrive_flows`)."""
    return budget([(bus, odrive_flows(n_axes, loop_hz, **flow_kwargs))], loop_hz, stuffing=stuffing)


def driver_budget(driver, loop_hz: float, *, stuffing: str = "worst",
                  tight_above: float = TIGHT_ABOVE) -> BudgetReport:
    """Budget of a built CAN driver (anything with ``bus_flows(loop_hz)``, e.g.
    :class:`~drivers.mit.MitCanDriver`, :class:`~drivers.odrive.OdriveCanDriver`).

    Bit rates come from the transports (1 Mbit/s assumed where unknown, e.g. virtual buses).

    Raises
    ------
    ConfigError
        If the driver has no bus traffic to budget.
    """
    flows = getattr(driver, "bus_flows", None)
    if flows is None:
        raise ConfigError(f"{type(driver).__name__} has no CAN bus flows to budget")
    return budget(flows(loop_hz), loop_hz, stuffing=stuffing, tight_above=tight_above)


# ---------------------------------------------------------------------------
# Dynamixel Protocol 2.0 on a half-duplex serial bus
# ---------------------------------------------------------------------------
#: bits on the wire per byte on a Dynamixel bus (8N1: start, 8 data, stop)
SERIAL_BITS_PER_BYTE = 10
_DXL_HEAD = 10      # header 4, ID, length 2, instruction, CRC 2
_READ_MODES = ("fast_sync", "sync")


@dataclass(frozen=True)
class SerialBudget:
    """Per-cycle time of a Dynamixel bus (one Sync Write + one (Fast) Sync Read per cycle).

    Attributes
    ----------
    n_servos : int
    loop_hz : float
    baudrate : int
        [bit/s]
    read_mode : str
    bytes_out, bytes_in : int
        Bytes the host sends / the servos answer per cycle (no byte stuffing).
    wire_time_s : float
        Their time on the wire at ``baudrate`` (10 bits per byte).
    delay_s : float
        Return delays (once for Fast Sync Read, once per servo for Sync Read)
        plus ``host_latency_s`` (USB adapter turnaround, if given).
    cycle_time_s : float
        ``wire_time_s + delay_s``.
    utilisation : float
        ``cycle_time_s * loop_hz``.
    verdict : str
        ``"ok"`` (<= 70 %), ``"tight"`` (<= 100 %) or ``"over"``.
    max_servos_ok, max_servos_fit : int
        Most servos of this configuration that stay under 70 % / 100 % of the period.
    """

    n_servos: int
    loop_hz: float
    baudrate: int
    read_mode: str
    bytes_out: int
    bytes_in: int
    wire_time_s: float
    delay_s: float
    cycle_time_s: float
    utilisation: float
    verdict: str
    max_servos_ok: int
    max_servos_fit: int

    @property
    def fits(self) -> bool:
        return self.verdict != "over"

    def summary(self) -> str:
        """Human-readable report."""
        return (f"Dynamixel bus at {self.baudrate / 1e6:g} Mbit/s, {self.n_servos} servos, {self.read_mode} read, "
                f"{self.loop_hz:g} Hz: {self.bytes_out} B out + {self.bytes_in} B in per cycle = "
                f"{1e6 * self.wire_time_s:.0f} us on the wire + {1e6 * self.delay_s:.0f} us delays = "
                f"{1e6 * self.cycle_time_s:.0f} us ({100 * self.utilisation:.1f} % of the period) -> "
                f"{self.verdict.upper()}; at most {self.max_servos_ok} servos under {100 * TIGHT_ABOVE:.0f} %, "
                f"{self.max_servos_fit} under 100 %")

    def __str__(self) -> str:
        return self.summary()


def dynamixel_cycle_bytes(n_servos: int, *, read_mode: str = "fast_sync", write_bytes: int = 2,
                          read_bytes: int = 10) -> tuple[int, int]:
    """``(bytes_out, bytes_in)`` of one cycle: Sync Write of ``write_bytes`` per servo (Goal Current)
    and a (Fast) Sync Read of ``read_bytes`` per servo (Present Current/Velocity/Position).

    Packet sizes (e-Manual, Protocol 2.0): Sync Write 14 + n (1 + w); Sync Read request
    14 + n; Sync Read answers n (11 + r); Fast Sync Read answer 8 + n (4 + r).
    """
    if isinstance(n_servos, bool) or not isinstance(n_servos, int) or n_servos < 1:
        raise ConfigError(f"n_servos must be a positive integer, got {n_servos!r}")
    if read_mode not in _READ_MODES:
        raise ConfigError(f"read_mode must be one of {_READ_MODES}, got {read_mode!r}")
    out = (_DXL_HEAD + 4 + n_servos * (1 + write_bytes)) + (_DXL_HEAD + 4 + n_servos)
    if read_mode == "fast_sync":
        inn = 8 + n_servos * (4 + read_bytes)
    else:
        inn = n_servos * (_DXL_HEAD + 1 + read_bytes)
    return out, inn


def _dxl_cycle_s(n: int, baudrate: int, return_delay_s: float, read_mode: str, host_latency_s: float) -> tuple:
    out, inn = dynamixel_cycle_bytes(n, read_mode=read_mode)
    wire = (out + inn) * SERIAL_BITS_PER_BYTE / baudrate
    delay = return_delay_s * (1 if read_mode == "fast_sync" else n) + host_latency_s
    return out, inn, wire, delay


def dynamixel_budget(n_servos: int, loop_hz: float, *, baudrate: int = 4_000_000, return_delay_s: float = 0.0,
                     read_mode: str = "fast_sync", host_latency_s: float = 0.0,
                     tight_above: float = TIGHT_ABOVE) -> SerialBudget:
    """Does one Sync Write + (Fast) Sync Read per cycle of ``n_servos`` fit in the period?

    Parameters
    ----------
    n_servos : int
    loop_hz : float
        Control loop rate [Hz].
    baudrate : int
        Bus speed [bit/s] (X series: up to 4.5 Mbit/s).
    return_delay_s : float
        Return Delay Time of the servos [s] (factory 500 us; the driver sets 0 by default).
    read_mode : {"fast_sync", "sync"}
    host_latency_s : float
        Host-side turnaround per cycle [s] (USB adapter latency timer, OS); 0 counts the bus only.
    """
    if not (isinstance(loop_hz, (int, float)) and math.isfinite(loop_hz) and loop_hz > 0):
        raise ConfigError(f"loop_hz must be finite and > 0, got {loop_hz!r}")
    if isinstance(baudrate, bool) or not isinstance(baudrate, int) or baudrate <= 0:
        raise ConfigError(f"baudrate must be a positive integer, got {baudrate!r}")
    for name, v in (("return_delay_s", return_delay_s), ("host_latency_s", host_latency_s)):
        if not (math.isfinite(v) and v >= 0):
            raise ConfigError(f"{name} must be finite and >= 0, got {v!r}")
    out, inn, wire, delay = _dxl_cycle_s(n_servos, baudrate, return_delay_s, read_mode, host_latency_s)
    period = 1.0 / loop_hz
    util = (wire + delay) / period

    def most(frac: float) -> int:
        k = 0
        while k < 253:
            _, _, w, d = _dxl_cycle_s(k + 1, baudrate, return_delay_s, read_mode, host_latency_s)
            if w + d > frac * period:
                break
            k += 1
        return k

    verdict = "over" if util > 1.0 else "tight" if util > tight_above else "ok"
    return SerialBudget(n_servos, float(loop_hz), baudrate, read_mode, out, inn, wire, delay, wire + delay,
                        util, verdict, most(tight_above), most(1.0))
