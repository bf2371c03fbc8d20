"""Driver for CANopen CiA 402 servo drives in cyclic synchronous torque (CST) mode.

Built on the ``canopen`` library (imported only when this driver is chosen):
each drive is a :class:`canopen.RemoteNode` with its object dictionary from
an EDS file (default: the generic CiA 402 one shipped in
``drivers/eds/cia402_generic.eds``); canopen does NMT, the SDO client
(expedited and segmented transfers, aborts), the PDO configuration and the
EMCY / heartbeat bookkeeping.  The cyclic hot path encodes and decodes the
PDO payloads with :mod:`drivers.codecs.cia402` (checked byte-exact against
canopen's own PDO maps in the tests) and is the only place where drive units
(increments, increments/s, per mille of the rated torque) become SI.

No receive thread: every frame is read in the caller's thread and handed to
canopen's ``Network.notify``.  While canopen's SDO client waits for a
response, the bus adapter (:class:`_SdoPumpBus`) has already read it: after
sending an SDO request it receives until the node's response arrived (or the
SDO timeout passed), so the library's blocking calls work without a
notifier, also with an emulator served in the caller's thread.

Enable (:meth:`Cia402Driver.enable`), per drive: NMT pre-operational; SDO
checks of the device type (profile 402), the supported modes (CST), the
rated torque (0x6076) and encoder resolution (0x608F) against the
configuration; SDO writes of max torque (0x6072), quick stop and fault
reaction option codes (0x605A, 0x605E), SYNC COB-ID, producer heartbeat
(0x1017), consumer heartbeat of the master (0x1016), modes of operation = 10
and target torque 0; the PDO mapping of :mod:`drivers.codecs.cia402` (RPDO1,
TPDO1, TPDO2 synchronous; the others made not valid by their COB-ID) through canopen's PDO maps;
NMT operational; then the power state machine is walked with controlwords in
RPDO1 and one SYNC per step (shutdown -> switch on -> enable operation) until
every statusword says OPERATION ENABLED.  A drive in FAULT is not reset here
(that would hide a fault): enable raises :class:`DeviceFaultError` naming its
EMCY code; :meth:`fault_reset` acknowledges it explicitly.

Cycle (:meth:`Cia402Driver.cycle`): frames queued since the last cycle are
handled (EMCY, heartbeats); per bus every drive's RPDO1 (enable operation +
target torque) is sent, then one SYNC; TPDO1 and TPDO2 of every drive are
collected until all arrived or ``reply_timeout_s`` (wall clock) passed.  The
drives apply the RPDO and sample the TPDO values at the SYNC.  The master
heartbeat (consumed by the drives, 0x1016) is sent when due on the loop clock.
On one bus whose drives are served in this thread on a lock-step clock (an
offline run: :meth:`~drivers.transport.CanTransport.serve_batch`), the RPDOs'
bytes the encoder wrote and the SYNC are handed over and the TPDOs received in
one call, the same frames and values (``tests/test_sim_cia402_kernel.py``).

Faults, through the driver interface (the safety supervisor stops):

* ``Feedback.fault``: the drive's EMCY error code (CiA 301, e.g. 0x2310
  over-current, 0x8130 heartbeat) while its statusword says FAULT or FAULT
  REACTION ACTIVE (0x1000 'generic' if no EMCY arrived);
  :data:`FAULT_HEARTBEAT_LOST` (0x8130) when the drive's heartbeat is older
  than ``heartbeat_timeout_s`` on the loop clock (the master's heartbeat
  consumer); 0 otherwise.
* ``Feedback.enabled``: statusword says OPERATION ENABLED.
* ``Feedback.fresh``: both TPDOs arrived this cycle.
* ``Feedback.info``: counters (``corrupt``, ``unexpected``, ``error_frames``,
  ``saturated``, ``missing``, ``emcy``), ``state`` (:class:`State` per
  drive), ``nmt_state``, ``heartbeat_age_s``, ``emcy_code``.

The drive's own reaction to a fault (0x605E) and to a lost master heartbeat
happens in the drive; :meth:`quick_stop` asks for the quick stop reaction
(0x605A); :meth:`disable` sends shutdown (power stage off) and NMT
pre-operational.
"""

from __future__ import annotations

import math
import struct
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from dynamics.errors import (CommsError, CommsTimeoutError, ConfigError, DecodeError, DeviceFaultError,
                             DriverError, TorqueloopError)

from .base import TIMEOUT_MAX_S, Command, Timeout, Feedback, JointMapping, TransportDriver, check_mapping, torque_only
from . import _cia402_kernels as _kernels
from .codecs import cia402 as codec
from .codecs.cia402 import Cia402Units, NmtState, State
from .follow import FollowConfig, TorqueFollow, follow_config
from .transport import CanTransport, Frame, group_by_bus, recv_any_fields

__all__ = ["Cia402Axis", "Cia402Driver", "build", "GENERIC_EDS", "FAULT_HEARTBEAT_LOST"]

#: the generic CiA 402 object dictionary shipped with the package
GENERIC_EDS = "cia402_generic.eds"
#: SDO requests sent in all per transfer step before it is aborted (python-canopen's
#: ``SdoClient.MAX_RETRIES``, which counts the first): a lost response is asked for again
SDO_ATTEMPTS = 3
#: a drive's NMT Start Remote Node is sent again after 2 of the enable walk's cycles in a row
#: without its TPDOs, then every this many (NMT is not acknowledged: a lost one leaves the drive
#: pre-operational; counted in cycles, so a lock-step run stays deterministic)
NMT_START_REPEAT_CYCLES = 20
#: Feedback.fault code of a drive whose heartbeat is missing (CiA 301 'heartbeat error')
FAULT_HEARTBEAT_LOST = codec.EMCY_HEARTBEAT
_NMT_NAMES = {0x00: "BOOT-UP", 0x04: "STOPPED", 0x05: "OPERATIONAL", 0x7F: "PRE-OPERATIONAL"}
#: COB-ID bits of a PDO's communication parameter (CiA 301): not valid, no RTR allowed
_PDO_NOT_VALID, _PDO_RTR_NOT_ALLOWED = 0x80000000, 0x40000000
_FAULT, _FAULT_REACTION, _OPERATION_ENABLED = int(State.FAULT), int(State.FAULT_REACTION_ACTIVE), int(State.OPERATION_ENABLED)
_SWITCH_ON_DISABLED, _NMT_BOOT_UP = int(State.SWITCH_ON_DISABLED), int(NmtState.BOOT_UP)


def eds_path(name_or_path: str | Path | None) -> str:
    """Path of an EDS file: a shipped one by file name (``drivers/eds/``), or a path."""
    if name_or_path is None:
        name_or_path = GENERIC_EDS
    p = Path(name_or_path)
    if p.is_file():
        return str(p)
    shipped = resources.files("drivers") / "eds" / str(name_or_path)
    if shipped.is_file():
        return str(shipped)
    raise ConfigError(f"EDS file {str(name_or_path)!r} not found (neither a path nor one of drivers/eds/)")


def _import_canopen():
    try:
        import canopen  # noqa: PLC0415 - imported only when a CiA 402 driver is built
    except ImportError as err:
        raise DriverError("the CiA 402 driver needs the 'canopen' package") from err
    return canopen


@dataclass(frozen=True)
class Cia402Axis:
    """One CiA 402 drive driving one joint.

    Attributes
    ----------
    transport : CanTransport
    node_id : int
        CANopen node id, 1..127.
    units : Cia402Units
        Encoder increments per motor revolution and motor rated torque (checked
        against the drive's 0x608F / 0x6076 at enable).
    mapping : JointMapping
        Motor side <-> joint side (gear ratio, sign, offset, efficiency).
    name : str
    torque_limit_nm : float or None
        Motor-side torque limit written to the drive's max torque 0x6072 (per
        mille of the rated torque) and applied before sending; ``None``: the
        rated torque (1000 per mille).
    eds : str
        EDS file (a shipped name or a path).
    """

    transport: CanTransport
    node_id: int
    units: Cia402Units
    mapping: JointMapping = field(default_factory=JointMapping)
    name: str = ""
    torque_limit_nm: float | None = None
    eds: str = GENERIC_EDS

    def __post_init__(self):
        codec.rpdo_id(self.node_id)  # validates the id
        if not isinstance(self.units, Cia402Units):
            raise DriverError(f"units must be Cia402Units, got {type(self.units).__name__}")
        check_mapping(self.mapping, self.name or f"node {self.node_id}")
        lim = self.torque_limit_nm
        if lim is not None and not (isinstance(lim, (int, float)) and math.isfinite(lim) and lim > 0):
            raise DriverError(f"torque_limit_nm must be finite and > 0, got {lim!r}")

    def torque_capability_nm(self) -> float:
        """Joint torque the drive delivers [N m]: max torque 0x6072 x rated torque 0x6076 x gear
        ratio x efficiency."""
        return self.max_torque_permille * self.units.nm_per_permille * self.mapping.gear_ratio * self.mapping.efficiency

    @property
    def max_torque_permille(self) -> int:
        """0x6072 value: the torque limit in per mille of the rated torque (1..65535)."""
        if self.torque_limit_nm is None:
            return 1000
        return max(1, min(0xFFFF, int(math.floor(self.torque_limit_nm / self.units.nm_per_permille))))


class _SdoPumpBus:
    """The python-can-like bus canopen's Network sends on (see module docstring)."""

    def __init__(self, driver: "Cia402Driver", b: int):
        self._driver = driver
        self._b = b
        self.channel_info = driver._buses[b].name

    def send(self, msg, timeout: float | None = None) -> None:
        d = self._driver
        t = d._buses[self._b]
        arb = msg.arbitration_id
        if 0x601 <= arb <= 0x67F and not msg.is_extended_id:
            d._flush_before_request(self._b, arb - 0x80)
        if msg.is_extended_id:
            t.send(arb, bytes(msg.data), True, is_remote=msg.is_remote_frame,
                   dlc=msg.dlc if msg.is_remote_frame else None)
        else:
            # the same frame as send() makes (an in-process emulator's bus takes it as fields)
            t.send_batch(((arb, bytes(msg.data), msg.dlc if msg.is_remote_frame else None),))
        if not (msg.is_remote_frame or msg.is_extended_id):
            d._note_sent(self._b, arb, bytes(msg.data))     # NMT, SDO requests: an echo is ours
        if 0x601 <= arb <= 0x67F:      # an SDO request: read until the response is there
            d._pump_bus(self._b, d.sdo_timeout_s, until_id=arb - 0x80)

    def shutdown(self) -> None:  # the transport is closed by the driver
        return None


class Cia402Driver(TransportDriver):
    """n CiA 402 drives in cyclic synchronous torque mode on one or more CAN buses.

    Parameters
    ----------
    axes : sequence of Cia402Axis
        In joint order.
    now : callable
        The control loop's clock [s] (time stamps, heartbeat ages and the master heartbeat).
    reply_timeout_s : float
        Wall-clock wait for the TPDOs after each SYNC.
    enable_timeout_s : float
        Wall-clock limit of the state machine walk in :meth:`enable`.
    sdo_timeout_s : float
        Wait for each SDO response.
    heartbeat_period_s : float
        Producer heartbeat time written to the drives (0x1017, ms resolution).
    heartbeat_timeout_s : float, optional
        A drive heartbeat older than this (loop clock) is a fault
        (:data:`FAULT_HEARTBEAT_LOST`); default 3 heartbeat periods.
    master_node_id : int or None
        Node id of this master's heartbeat (0x700 + id), consumed by the drives
        (0x1016 sub1); ``None`` switches the drives' consumer off.
    master_heartbeat_period_s : float
        Period of the master heartbeat on the loop clock.
    master_heartbeat_timeout_s : float, optional
        Consumer time written to the drives: a drive that hears no master
        heartbeat for this long runs its fault reaction (default 3 periods).
    quick_stop_option : int
        0x605A (1: slow-down ramp, 2: quick stop ramp -> SWITCH ON DISABLED; 5, 6: stay in QUICK STOP ACTIVE; 0: coast).
    fault_reaction_option : int
        0x605E (0: switch the power stage off, motor coasts; 1, 2: brake, then FAULT).
    owns_transports : bool
        Close the transports in :meth:`close`.
    """

    #: close() goes on to close the buses whatever disabling raised: canopen raises its own
    #: errors while sending NMT
    _disable_errors = (Exception,)

    sdo_timeout_s = Timeout()

    def __init__(self, axes: Sequence[Cia402Axis], *, now: Callable[[], float], reply_timeout_s: float = 0.002,
                 enable_timeout_s: float = 1.0, sdo_timeout_s: float = 0.1, heartbeat_period_s: float = 0.05,
                 heartbeat_timeout_s: float | None = None, master_node_id: int | None = 127,
                 master_heartbeat_period_s: float = 0.05, master_heartbeat_timeout_s: float | None = None,
                 quick_stop_option: int = 2, fault_reaction_option: int = 2, owns_transports: bool = True,
                 follow: FollowConfig | None = None):
        axes = list(axes)
        if not axes:
            raise DriverError("Cia402Driver needs at least one axis")
        for name, v in (("reply_timeout_s", reply_timeout_s), ("enable_timeout_s", enable_timeout_s),
                        ("sdo_timeout_s", sdo_timeout_s), ("heartbeat_period_s", heartbeat_period_s),
                        ("master_heartbeat_period_s", master_heartbeat_period_s)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise DriverError(f"{name} must be finite and > 0, got {v!r}")
        if not callable(now):
            raise DriverError("now must be a callable returning the loop time [s]")
        if quick_stop_option not in (0, 1, 2, 5, 6):
            raise DriverError(f"quick_stop_option must be 0, 1, 2, 5 or 6, got {quick_stop_option!r}")
        if fault_reaction_option not in (0, 1, 2):
            raise DriverError(f"fault_reaction_option must be 0, 1 or 2, got {fault_reaction_option!r}")
        self._canopen = _import_canopen()
        self._axes = axes
        self._now = now
        self.reply_timeout_s = float(reply_timeout_s)
        self.enable_timeout_s = float(enable_timeout_s)
        self.sdo_timeout_s = float(sdo_timeout_s)
        #: SDO responses received before the request they would answer was sent, dropped
        #: (:meth:`_flush_before_request`)
        self.sdo_responses_dropped = 0
        self.heartbeat_period_s = float(heartbeat_period_s)
        self.heartbeat_timeout_s = float(heartbeat_timeout_s if heartbeat_timeout_s is not None
                                         else 3.0 * heartbeat_period_s)
        if not (math.isfinite(self.heartbeat_timeout_s) and self.heartbeat_timeout_s > self.heartbeat_period_s):
            raise DriverError("heartbeat_timeout_s must be finite and longer than heartbeat_period_s "
                              "(a shorter one would report every drive as lost)")
        self.master_node_id = master_node_id
        self.master_heartbeat_period_s = float(master_heartbeat_period_s)
        self.master_heartbeat_timeout_s = float(master_heartbeat_timeout_s if master_heartbeat_timeout_s
                                                is not None else 3.0 * master_heartbeat_period_s)
        if master_node_id is not None:
            codec.heartbeat_id(master_node_id)
            if not self.master_heartbeat_timeout_s > self.master_heartbeat_period_s:
                raise DriverError("master_heartbeat_timeout_s must be longer than master_heartbeat_period_s")
        # the drives stop on a missing master heartbeat: the loop's gap limit
        self.watchdog_s = self.master_heartbeat_timeout_s if master_node_id is not None else None
        self.quick_stop_option = int(quick_stop_option)
        self.fault_reaction_option = int(fault_reaction_option)
        self._owns = owns_transports
        self._buses, self._bus_of, self._by_node = group_by_bus([(ax.transport, ax.node_id) for ax in axes],
                                                                "axes", "node id")
        for j, ax in enumerate(axes):
            if master_node_id is not None and ax.node_id == master_node_id:
                raise DriverError(f"axis {j}: node id {ax.node_id} is the master heartbeat's node id")
        n = len(axes)
        # canopen: one network per bus, one RemoteNode per drive (object dictionary from its EDS)
        canopen = self._canopen
        self._networks = []
        self.nodes = []
        #: (index, sub-index) of each drive's last SDO transfer, named in an abort's message
        self._sdo_object: list[tuple[int, int] | None] = [None] * len(axes)
        ods: dict[str, object] = {}
        for b in range(len(self._buses)):
            net = canopen.Network(bus=_SdoPumpBus(self, b))
            self._networks.append(net)
        for j, ax in enumerate(axes):
            path = eds_path(ax.eds)
            try:
                node = canopen.RemoteNode(ax.node_id, path)
            except Exception as err:  # noqa: BLE001 - any parse failure of a vendor file
                raise ConfigError(f"cannot read EDS {path}: {type(err).__name__}: {err}") from err
            node.sdo.RESPONSE_TIMEOUT = self.sdo_timeout_s
            # python-canopen's MAX_RETRIES counts the first request (its default, 1, never
            # repeats one): a request whose response was lost (a receive queue that overflowed)
            # is sent again, up to SDO_ATTEMPTS in all, before the transfer is aborted.  Every
            # SDO this driver sends writes a value or a level-triggered controlword, so a repeat
            # changes nothing a first one did not
            node.sdo.MAX_RETRIES = SDO_ATTEMPTS
            self._track_sdo(j, node.sdo)
            self._networks[self._bus_of[j]].add_node(node)
            self.nodes.append(node)
            ods[path] = node.object_dictionary
        # frame id -> (kind, joint) per bus for the hot path
        self._route: list[dict[int, tuple[int, int]]] = [{} for _ in self._buses]
        for j, ax in enumerate(axes):
            r = self._route[self._bus_of[j]]
            r[codec.tpdo_id(ax.node_id, 1)] = (1, j)
            r[codec.tpdo_id(ax.node_id, 2)] = (2, j)
            r[codec.emcy_id(ax.node_id)] = (3, j)
            r[codec.heartbeat_id(ax.node_id)] = (4, j)
        #: the TPDO entries of _route (the replies of a cycle, _handle_replies)
        self._tpdo_route = [{arb: hit for arb, hit in r.items() if hit[0] in (1, 2)} for r in self._route]
        self._rpdo_ids = [codec.rpdo_id(ax.node_id, 1) for ax in axes]
        #: per axis, the RPDO1 payloads lately sent (an echo of them is not foreign)
        self._rpdo_echo = [self._echo_of(self._bus_of[j], arb) for j, arb in enumerate(self._rpdo_ids)]
        #: per bus, what only a master sends to our nodes: frame id -> its description; and our
        #: node ids (NMT commands name the node in byte 1, 0: every node)
        self._master_ids: list[dict[int, str]] = [{} for _ in self._buses]
        self._nodes_of: list[frozenset[int]] = [frozenset(self._by_node[b]) for b in range(len(self._buses))]
        for j, ax in enumerate(axes):
            m = self._master_ids[self._bus_of[j]]
            for k in (1, 2, 3, 4):
                m[codec.rpdo_id(ax.node_id, k)] = f"RPDOs to node {ax.node_id}"
            m[codec.sdo_rx_id(ax.node_id)] = f"SDO requests to node {ax.node_id}"
        u = [ax.units for ax in axes]
        m = [ax.mapping for ax in axes]
        # joint-side scale factors: q = sign*counts*rad_per_count/G + off, ...
        self._kq = [x.sign * uu.rad_per_count / x.gear_ratio for x, uu in zip(m, u)]
        self._kqd = [x.sign * uu.rad_s_per_count_s / x.gear_ratio for x, uu in zip(m, u)]
        self._ktau = [x.sign * uu.nm_per_permille * x.gear_ratio * x.efficiency for x, uu in zip(m, u)]
        self._off = [float(x.offset_rad) for x in m]
        self._limit = [ax.max_torque_permille for ax in axes]
        # the compiled encoder's (_request) constants and payload buffer
        self._ktau_a = np.array(self._ktau, dtype=float)
        self._limit_a = np.array(self._limit, dtype=np.int64)
        self._tx = np.zeros((n, 4), dtype=np.uint8)
        #: the frames _request made of _tx (the batch exchange sends _tx itself)
        self._tx_frames: list | None = None
        # the batch exchange (one bus whose drives are served in this thread on a lock-step clock:
        # CanTransport.serve_batch): the RPDOs' ids then the SYNC's, the replies' buffers (room for
        # more TPDOs than ours), the replies expected (TPDO1, TPDO2 of each drive in joint order),
        # unpacked by one struct (rows of the length then the payload, 9 bytes)
        self._batch_arbs = tuple(self._rpdo_ids) + (codec.SYNC_ID,) if len(self._buses) == 1 else None
        self._batch_arb = np.zeros(4 * n, dtype=np.int64)
        self._batch_rep = np.zeros((4 * n, 9), dtype=np.uint8)
        self._batch_expect = [arb for ax in axes for arb in (codec.tpdo_id(ax.node_id, 1), codec.tpdo_id(ax.node_id, 2))]
        self._batch_struct = struct.Struct("<" + ("B" + codec.TPDO1_STRUCT.format[1:] + "B"
                                                  + codec.TPDO2_STRUCT.format[1:] + "3x") * n)
        self._batch_lens = (codec.TPDO1_STRUCT.size,) * n + (codec.TPDO2_STRUCT.size,) * n
        #: replies a batch exchange took off the bus that the cycle did not read (read before the bus)
        self._carry: list[tuple] = []
        # the drives' last values, per joint (Python lists: one frame writes one item; the
        # feedback's arrays are made from them once a cycle)
        self._q = [math.nan] * n
        self._qd = [math.nan] * n
        self._tau = [math.nan] * n
        self._sw = [0] * n
        self._state = [int(State.UNKNOWN)] * n
        self._mode = [0] * n
        self._emcy = [0] * n          # last EMCY error code (0 after 'error reset')
        self._nmt = [-1] * n
        self._hb_t = [-math.inf] * n                    # loop time of the last heartbeat
        # this cycle's TPDO1 / TPDO2 arrived, per drive, and how many of the 2 n are still missing
        self._got1 = [False] * n
        self._got2 = [False] * n
        self._missing = 2 * n
        #: joints of each bus, in joint order
        self._joints_of_bus = [[j for j in range(n) if self._bus_of[j] == b] for b in range(len(self._buses))]
        #: statusword -> power state (codec.decode_state), filled as statuswords come
        self._sw_state: dict[int, int] = {}
        self._stats = self._new_stats()
        self._enabled_cmd = False
        self._controlword = codec.CW_SHUTDOWN
        self._closed = False
        self._hb_master_due = -math.inf
        self.last_saturated = 0
        follow = FollowConfig() if follow is None else follow
        if follow.enabled:      # 0x6077 (torque actual value) against the command
            self.follow = TorqueFollow([ax.torque_capability_nm() for ax in axes], follow)
        self.cycles = 0
        #: joints whose shutdown the last disable() could not confirm
        self.disable_unconfirmed: list[int] = []

    # ------------------------------------------------------------------
    @property
    def n_joints(self) -> int:
        return len(self._axes)

    @property
    def axes(self) -> tuple[Cia402Axis, ...]:
        return tuple(self._axes)

    @property
    def transports(self) -> tuple[CanTransport, ...]:
        return tuple(self._buses)

    def states(self) -> list[State]:
        """Last power state reported by each drive."""
        return [State(int(s)) for s in self._state]

    @staticmethod
    def _new_stats() -> dict:
        return {"corrupt": 0, "unexpected": 0, "error_frames": 0, "saturated": 0, "emcy": 0}

    def _name(self, j: int) -> str:
        ax = self._axes[j]
        return ax.name or f"node {ax.node_id}"

    # ------------------------------------------------------------------
    def make_commands(self, command: Command, controlword: int = codec.CW_ENABLE_OPERATION) -> list[Frame]:
        """Encode one RPDO1 (controlword + target torque) per drive, in joint order (pure).

        Joint torques go to motor side, then per mille of the rated torque
        (nearest), clamped to the drive's max torque (0x6072); the number of
        clamped values is :attr:`last_saturated`.

        Raises
        ------
        DriverError
            Wrong shape, non-finite torque, or non-zero drive-side gains (CST has none).
        """
        return [Frame(arb, data) for arb, data in self._rpdos(command, controlword)]

    def _request(self, command: Command) -> list[tuple[int, bytes]]:
        """:meth:`make_commands`' frames as ``(arbitration_id, payload)`` pairs (what a cycle sends):
        a command of torques only (an array of n floats, no gains) by one compiled call
        (:func:`drivers._cia402_kernels.encode_torques`, the same bytes), any other, or a value
        the compiled encoder declines, by :meth:`_rpdos` (which raises the proper error)."""
        tau = command.torque_nm
        if command.kp_nm_per_rad is None and command.kd_nm_s_per_rad is None and type(tau) is np.ndarray:
            tx = self._tx
            try:
                sat = _kernels.encode_torques(tau, self._ktau_a, self._limit_a, codec.CW_ENABLE_OPERATION, tx) \
                    if tau.shape == (tx.shape[0],) else -1
            except TypeError:       # another dtype or layout (numba has no version for it)
                sat = -1
            if sat >= 0:
                self.last_saturated = sat
                raw = tx.tobytes()
                frames = self._tx_frames = [(arb, raw[k:k + 4]) for k, arb in zip(range(0, len(raw), 4), self._rpdo_ids)]
                return frames
        self._tx_frames = None
        return self._rpdos(command, codec.CW_ENABLE_OPERATION)

    def _rpdos(self, command: Command, controlword: int) -> list[tuple[int, bytes]]:
        """The RPDO1 of every drive as ``(arbitration_id, payload)``: :func:`codec.encode_rpdo1`'s
        bytes, packed unchecked where its checks hold (an int controlword and torque in range),
        else by it (which raises)."""
        n = self.n_joints
        lst = torque_only(command, n, "CiA 402 CST")
        if type(controlword) is not int or not 0 <= controlword <= 0xFFFF:
            codec.encode_rpdo1(controlword, 0)      # raises DriverError
        pack = codec.pack_rpdo1
        ktau, limit, ids = self._ktau, self._limit, self._rpdo_ids
        frames = []
        sat = 0
        for j in range(n):
            # joint torque -> per mille: tau_m = tau / (G eff) * sign, permille = tau_m / nm_per_permille
            x = lst[j] / ktau[j]
            lim = limit[j]
            if x > lim:
                p, sat = lim, sat + 1
            elif x < -lim:
                p, sat = -lim, sat + 1
            else:
                p = int(round(x))
            frames.append((ids[j], pack(controlword, p) if -0x8000 <= p <= 0x7FFF else codec.encode_rpdo1(controlword, p)))
        self.last_saturated = sat
        return frames

    # ------------------------------------------------------------------
    def _handle(self, b: int, f: tuple) -> int:
        """Handle one received frame (its fields as :meth:`CanTransport.recv_fields` gives them);
        return the CAN id it answered (for the SDO pump)."""
        st = self._stats
        if f[3]:                        # an error frame
            st["error_frames"] += 1
            return -1
        if f[4] or f[5]:                # remote, extended
            return -1
        arb = f[0]
        data = f[1]
        hit = self._route[b].get(arb)
        if hit is None and self._screen_master(b, arb, data) is not None:
            return -1           # a master's frame to our nodes: ours looped back, or another's (noted)
        try:
            if hit is not None:
                kind, j = hit
                if kind == 1:
                    self._tpdo1(j, *codec.decode_tpdo1(data))
                    return arb
                if kind == 2:
                    self._tpdo2(j, *codec.decode_tpdo2(data))
                    return arb
                if kind == 3:
                    em = codec.decode_emcy(data)
                    self._emcy[j] = em.code
                    st["emcy"] += 1
                    # canopen's EMCY consumer unpacks 8 bytes: a shorter EMCY (accepted, padded, by
                    # decode_emcy) goes to it padded as well, not as a struct.error out of the cycle
                    data = bytes(data).ljust(8, b"\0")
                elif kind == 4:
                    nmt = self._nmt[j] = codec.decode_heartbeat(data)
                    self._hb_t[j] = float(self._now())
                    if nmt == _NMT_BOOT_UP:
                        # the drive (re)started: a power-on leaves CiA 402's state machine in
                        # SWITCH ON DISABLED (NOT READY TO SWITCH ON passes on its own), and the
                        # drive in PRE-OPERATIONAL sends no TPDO that would say so
                        self._state[j] = _SWITCH_ON_DISABLED
        except DecodeError:
            st["corrupt"] += 1
            return -1
        if 0x581 <= arb <= 0x5FF or hit is not None:
            # SDO responses, EMCY and heartbeats also go to canopen (SDO client, EMCY log, NMT state)
            self._networks[b].notify(arb, bytearray(data), f[2])
        elif arb not in (codec.SYNC_ID, codec.NMT_ID) and not (0x201 <= arb <= 0x57F or 0x601 <= arb <= 0x7FF):
            st["unexpected"] += 1
        return arb

    def _tpdo1(self, j: int, sw: int, pos: int, tq: int) -> None:
        """Drive ``j``'s TPDO1 (statusword, position, torque actual) arrived."""
        self._sw[j] = sw
        state = self._sw_state.get(sw)
        if state is None:
            state = self._sw_state[sw] = int(codec.decode_state(sw))
        self._state[j] = state
        self._q[j] = self._kq[j] * pos + self._off[j]
        self._tau[j] = self._ktau[j] * tq
        if not self._got1[j]:
            self._got1[j] = True
            self._missing -= 1

    def _tpdo2(self, j: int, vel: int, mode: int) -> None:
        """Drive ``j``'s TPDO2 (velocity, modes of operation display) arrived."""
        self._qd[j] = self._kqd[j] * vel
        self._mode[j] = mode
        if not self._got2[j]:
            self._got2[j] = True
            self._missing -= 1

    def _handle_replies(self, b: int, frames: list) -> None:
        """:meth:`_handle` of each of ``frames`` (of bus ``b``) in turn: a TPDO1 / TPDO2 of one of
        our drives, a classic data frame of its length, decoded here (what :meth:`_handle` does
        with it), any other frame by :meth:`_handle`."""
        tpdo = self._tpdo_route[b]
        unpack1, unpack2 = codec.TPDO1_STRUCT.unpack, codec.TPDO2_STRUCT.unpack
        n1, n2 = codec.TPDO1_STRUCT.size, codec.TPDO2_STRUCT.size
        # _tpdo1 / _tpdo2 written out here (a statusword not seen before: _tpdo1 itself)
        sw_state, got1, got2 = self._sw_state, self._got1, self._got2
        sw_, state_, q_, tau_, qd_, mode_ = self._sw, self._state, self._q, self._tau, self._qd, self._mode
        kq, off, ktau, kqd = self._kq, self._off, self._ktau, self._kqd
        for f in frames:
            hit = tpdo.get(f[0])
            if hit is not None and not (f[3] or f[4] or f[5]):
                data = f[1]
                kind, j = hit
                if kind == 1 and len(data) == n1:
                    sw, pos, tq = unpack1(data)
                    state = sw_state.get(sw)
                    if state is None:
                        self._tpdo1(j, sw, pos, tq)
                        continue
                    sw_[j] = sw
                    state_[j] = state
                    q_[j] = kq[j] * pos + off[j]
                    tau_[j] = ktau[j] * tq
                    if not got1[j]:
                        got1[j] = True
                        self._missing -= 1
                    continue
                if kind == 2 and len(data) == n2:
                    vel, mode_[j] = unpack2(data)
                    qd_[j] = kqd[j] * vel
                    if not got2[j]:
                        got2[j] = True
                        self._missing -= 1
                    continue
            self._handle(b, f)

    def _take_carry(self, until_id: int | None = None) -> bool:
        """Handle the replies a batch exchange took off the bus that its cycle did not read (they
        come before what the bus holds), up to one with ``until_id``; True when that one came."""
        while self._carry:
            if self._handle(0, self._carry.pop(0)) == until_id:
                return True
        return False

    def _take_batch(self, r: int) -> None:
        """The ``r`` replies of a batch exchange (``_batch_arb`` / ``_batch_rep``): what
        :meth:`_take_queued` (``replies``) does with them as they came off the bus; the usual
        cycle (both TPDOs of every drive, in joint order) decoded by one struct."""
        arbs = self._batch_arb[:r].tolist()
        if arbs == self._batch_expect:
            vals = self._batch_struct.unpack(self._batch_rep[:r].tobytes())
            if vals[0::7] + vals[4::7] == self._batch_lens:
                # _handle_replies of each, written out (a statusword not seen before: _tpdo1)
                sw_state, sw_, state_, mode_ = self._sw_state, self._sw, self._state, self._mode
                q_, tau_, qd_ = self._q, self._tau, self._qd
                kq, off, ktau, kqd = self._kq, self._off, self._ktau, self._kqd
                it = iter(vals)
                for j, _, sw, pos, tq, _, vel, mode in zip(range(len(kq)), it, it, it, it, it, it, it):
                    state = sw_state.get(sw)
                    if state is None:
                        self._tpdo1(j, sw, pos, tq)
                    else:
                        sw_[j] = sw
                        state_[j] = state
                        q_[j] = kq[j] * pos + off[j]
                        tau_[j] = ktau[j] * tq
                    qd_[j] = kqd[j] * vel
                    mode_[j] = mode
                n = len(kq)
                self._got1 = [True] * n
                self._got2 = [True] * n
                self._missing = 0
                return
        rep = self._batch_rep
        now = time.time()
        got = [(a, bytes(rep[i, 1:1 + rep[i, 0]]), now, False, False, False, None) for i, a in enumerate(arbs)]
        k = 0
        while self._missing and k < len(got):
            want = self._missing
            self._handle_replies(0, got[k:k + want])
            k += want
        self._carry = got[k:]

    def _flush_before_request(self, b: int, response_id: int) -> None:
        """Handle the frames already received on bus ``b`` before an SDO request goes out, but
        drop the SDO responses on ``response_id`` among them: none answers a request not yet
        sent.  A response received twice (CAN's double reception, when the sender missed the
        acknowledgement and sent it again) would otherwise be taken for the answer to the next
        request: "Unexpected response 0x60" (python-canopen clears its own queue before a request,
        but frames still on our bus reach it only after)."""
        def stale(f) -> bool:
            return f[0] == response_id and not (f[3] or f[4] or f[5])

        if b == 0 and self._carry:
            carried, self._carry = self._carry, []
            for f in carried:
                if stale(f):
                    self.sdo_responses_dropped += 1
                else:
                    self._handle(0, f)
        t = self._buses[b]
        while (f := t.recv_fields(0.0)) is not None:
            if stale(f):
                self.sdo_responses_dropped += 1
            else:
                self._handle(b, f)

    def _pump_bus(self, b: int, timeout_s: float, until_id: int) -> None:
        """Handle frames of bus ``b`` until one with ``until_id`` arrived or ``timeout_s`` passed."""
        if self._take_carry(until_id):
            return
        t = self._buses[b]
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            f = t.recv_fields(max(0.0, remaining))
            if f is None:
                return
            if self._handle(b, f) == until_id:
                return

    def _pump(self, timeout_s: float, until: Callable[[], bool]) -> None:
        self._take_carry()
        deadline = time.monotonic() + timeout_s
        while not until():
            remaining = deadline - time.monotonic()
            got = recv_any_fields(self._buses, max(0.0, remaining))
            if got is None:
                return
            self._handle(*got)

    def _take_queued(self, replies: bool) -> None:
        """Handle the frames already queued, bus by bus, without waiting: every one (``replies``
        False), or until no TPDO of this cycle is missing (``replies``: what follows stays queued
        for the next cycle, as the frames after the replies always did)."""
        handle = self._handle
        self._take_carry()
        for b, t in enumerate(self._buses):
            if replies:
                # at most as many frames as TPDOs are missing at a time (what follows the last
                # one stays queued), taken from the bus in one call
                take = t.recv_fields_upto
                while self._missing:
                    want = self._missing
                    got = take(want)
                    self._handle_replies(b, got)
                    if len(got) < want:         # the queue ran dry (fewer frames than missing
                        break                   # TPDOs: some still missing after them)
                continue
            recv = t.recv_fields
            while True:
                f = recv(0.0)
                if f is None:
                    break
                handle(b, f)

    def _master_heartbeat(self, force: bool = False) -> None:
        if self.master_node_id is None:
            return
        t = float(self._now())
        if force or t >= self._hb_master_due:
            for bus in self._buses:
                bus.send(codec.heartbeat_id(self.master_node_id), codec.encode_heartbeat(NmtState.OPERATIONAL))
            self._hb_master_due = t + self.master_heartbeat_period_s

    def _exchange(self, frames: Sequence[tuple[int, bytes]]) -> Feedback:
        """Send the RPDOs (``(arbitration_id, payload)`` per joint) and one SYNC per bus, collect
        both TPDOs of every drive."""
        self._stats = self._new_stats()
        self._stats["saturated"] = self.last_saturated
        self._take_queued(False)        # EMCY / heartbeats / late TPDOs since the last cycle
        n = self.n_joints
        self._got1 = [False] * n
        self._got2 = [False] * n
        self._missing = 2 * n
        self._master_heartbeat()
        echo = self._rpdo_echo
        buses = self._buses
        if self._batch_arbs is not None and frames is self._tx_frames and not self._carry:
            # the RPDOs (_tx) and the SYNC sent, the TPDOs received, in one call where the bus
            # serves its drives in this thread on a lock-step clock (nothing queued: it declines)
            r = buses[0].serve_batch(self._batch_arbs, self._tx, self._batch_arb, self._batch_rep)
            if r is not None:
                for j in range(n):
                    echo[j].append(frames[j][1])
                self._take_batch(r)
                if self._missing:
                    self._pump(self.reply_timeout_s, lambda: self._missing == 0)
                return self._feedback()
        sync = (codec.SYNC_ID, b"", None)
        got = None
        for t, joints in zip(buses, self._joints_of_bus):
            batch = []
            for j in joints:
                arb, data = frames[j]
                batch.append((arb, data, None))
                echo[j].append(data)
            batch.append(sync)
            if len(buses) == 1:
                # one bus: the send and _take_queued's first take of the replies in one call
                # where the bus can
                got = t.exchange_fields(batch, 2 * n)
                if got is not None:
                    self._handle_replies(0, got)
                    break
            t.send_batch(batch)
        # the replies already queued in one pass (what the exchange did not take: it took fewer
        # than it asked for when the queue ran dry); the wait only when one is missing
        if got is None or (len(got) == 2 * n and self._missing):
            self._take_queued(True)
        if self._missing:
            self._pump(self.reply_timeout_s, lambda: self._missing == 0)
        return self._feedback()

    def _feedback(self) -> Feedback:
        """The cycle's :class:`Feedback` from the drives' last values.

        ``fault``: the EMCY code (0x1000 'generic' without one) of a drive in FAULT or FAULT
        REACTION ACTIVE, else :data:`FAULT_HEARTBEAT_LOST` when its heartbeat is older than
        ``heartbeat_timeout_s``, else 0."""
        t = float(self._now())
        # _missing counts the TPDOs not arrived (_tpdo1, _tpdo2): none, every drive fresh
        fresh = [a and b for a, b in zip(self._got1, self._got2)] if self._missing else [True] * len(self._got1)
        hb_age = [t - h for h in self._hb_t]
        lost_s = self.heartbeat_timeout_s
        state, emcy = self._state, self._emcy
        fault = [(e or codec.EMCY_GENERIC) if s == _FAULT or s == _FAULT_REACTION else
                 FAULT_HEARTBEAT_LOST if a > lost_s else 0 for s, e, a in zip(state, emcy, hb_age)]
        # the vectors are rows of three arrays (views, as the MIT driver's feedback): one array
        # made of each kind instead of one per vector
        # (each array made of one flat list: numpy converts it faster than a list of rows)
        n = len(state)
        ints = np.array(state + self._nmt + emcy + self._sw + fault, dtype=np.int64).reshape(5, n)
        floats = np.array(self._q + self._qd + self._tau + hb_age, dtype=float).reshape(4, n)
        flags = np.array(fresh + [s == _OPERATION_ENABLED for s in state], dtype=bool).reshape(2, n)
        info = {**self._stats, "missing": len(fresh) - fresh.count(True), "state": ints[0], "nmt_state": ints[1],
                "heartbeat_age_s": floats[3], "emcy_code": ints[2], "statusword": ints[3]}
        return Feedback(t, floats[0], floats[1], floats[2], ints[4], flags[0], flags[1], info)

    # ------------------------------------------------------------------
    def _track_sdo(self, j: int, sdo) -> None:
        """Record the object of every SDO transfer of drive ``j`` (canopen's aborts do not name it)."""
        upload, download = sdo.upload, sdo.download

        def tracked_upload(index, subindex, *args, **kwargs):
            self._sdo_object[j] = (index, subindex)
            return upload(index, subindex, *args, **kwargs)

        def tracked_download(index, subindex, *args, **kwargs):
            self._sdo_object[j] = (index, subindex)
            return download(index, subindex, *args, **kwargs)

        sdo.upload, sdo.download = tracked_upload, tracked_download

    def _sdo_object_name(self, j: int) -> str:
        """``"object 0x1800:3 (TPDO communication parameter 1: Inhibit time)"`` of drive ``j``'s last
        SDO transfer (its EDS names; "" when none was made)."""
        obj = self._sdo_object[j]
        if obj is None:
            return ""
        idx, sub = obj
        name = ""
        try:
            entry = self.nodes[j].object_dictionary[idx]
            name = entry.name
            if hasattr(entry, "subindices") and sub in entry.subindices:
                name = f"{name}: {entry.subindices[sub].name}"
        except (KeyError, IndexError, AttributeError):
            name = "not in the EDS"
        return f"object 0x{idx:04X}:{sub}" + (f" ({name})" if name else "")

    def _sdo_error(self, j: int, what: str, err: Exception) -> TorqueloopError:
        canopen = self._canopen
        obj = self._sdo_object_name(j)
        if obj:
            what = f"{what}, {obj}"
        if isinstance(err, canopen.SdoAbortedError):
            return DeviceFaultError(f"{self._name(j)}: SDO {what} aborted by the drive: {err}")
        if isinstance(err, canopen.sdo.SdoCommunicationError):
            return CommsTimeoutError(f"{self._name(j)}: SDO {what}: {err}")
        return CommsError(f"{self._name(j)}: SDO {what}: {type(err).__name__}: {err}")

    def _sdo(self, j: int, what: str, fn):
        canopen = self._canopen
        self._sdo_object[j] = None
        try:
            return fn(self.nodes[j])
        except (canopen.SdoAbortedError, canopen.sdo.SdoCommunicationError) as err:
            raise self._sdo_error(j, what, err) from err
        except TorqueloopError:
            raise
        except Exception as err:  # noqa: BLE001 - canopen raises plain exceptions for malformed responses
            raise self._sdo_error(j, what, err) from err

    def configure(self, j: int) -> None:
        """SDO configuration and PDO mapping of drive ``j`` (NMT pre-operational first)."""
        ax = self._axes[j]
        node = self.nodes[j]
        node.nmt.state = "PRE-OPERATIONAL"
        dev = self._sdo(j, "read 0x1000", lambda nd: nd.sdo[0x1000].raw)
        if dev & 0xFFFF != codec.DEVICE_PROFILE_402:
            raise DeviceFaultError(f"{self._name(j)}: device type 0x{dev:08X} is not a CiA 402 drive")
        modes = self._sdo(j, "read 0x6502", lambda nd: nd.sdo[0x6502].raw)
        if not modes & codec.SUPPORTED_MODE_CST:
            raise DeviceFaultError(f"{self._name(j)}: drive does not support cyclic synchronous torque "
                                   f"(0x6502 = 0x{modes:08X})")
        rated = self._sdo(j, "read 0x6076", lambda nd: nd.sdo[0x6076].raw)
        if rated != ax.units.rated_torque_mnm:
            raise DriverError(f"{self._name(j)}: drive's rated torque 0x6076 is {rated} mN m, the configuration "
                              f"says {ax.units.rated_torque_mnm} mN m (rated_torque_nm)")
        inc = self._sdo(j, "read 0x608F", lambda nd: (nd.sdo[0x608F][1].raw, nd.sdo[0x608F][2].raw))
        if inc[1] == 0 or abs(inc[0] / inc[1] - ax.units.counts_per_rev) > 1e-9 * ax.units.counts_per_rev:
            raise DriverError(f"{self._name(j)}: drive's encoder resolution 0x608F is {inc[0]}/{inc[1]} "
                              f"increments per revolution, the configuration says {ax.units.counts_per_rev}")
        hb_ms = max(1, int(round(self.heartbeat_period_s * 1000)))
        writes = [
            (0x6071, None, 0),
            (0x6072, None, ax.max_torque_permille),
            (0x605A, None, self.quick_stop_option),
            (0x605E, None, self.fault_reaction_option),
            (0x1005, None, codec.SYNC_ID),
            (0x1017, None, hb_ms),
            (0x1016, 1, 0 if self.master_node_id is None else
             (self.master_node_id << 16) | max(1, int(round(self.master_heartbeat_timeout_s * 1000)))),
            (0x6060, None, codec.MODE_CST),
        ]
        for idx, sub, val in writes:
            def w(nd, idx=idx, sub=sub, val=val):
                obj = nd.sdo[idx] if sub is None else nd.sdo[idx][sub]
                obj.raw = val
            self._sdo(j, f"write 0x{idx:04X}" + (f":{sub}" if sub else ""), w)

        def pdos(nd):
            nd.rpdo.read(from_od=True)
            nd.tpdo.read(from_od=True)
            for maps, layout, make_id in ((nd.rpdo, {1: codec.RPDO1_MAP}, codec.rpdo_id),
                                          (nd.tpdo, {1: codec.TPDO1_MAP, 2: codec.TPDO2_MAP}, codec.tpdo_id)):
                for k in range(1, 5):
                    pm = maps[k]
                    pm.clear()
                    pm.cob_id = make_id(ax.node_id, k)
                    # only the communication sub-indices every drive has (COB-ID :1, transmission
                    # type :2): inhibit time :3, event timer :5 and SYNC start value :6 are
                    # optional (CiA 301), not used by a SYNC-driven PDO, and a drive without them
                    # aborts the write (canopen writes whatever the EDS defaults gave)
                    pm.inhibit_time = pm.event_timer = pm.sync_start_value = None
                    if k in layout:
                        for idx, sub, bits in layout[k]:
                            pm.add_variable(idx, sub, bits)
                        pm.trans_type = 1
                        pm.enabled = True
                        pm.save()
                    else:
                        # a PDO made not valid (COB-ID bit 31, CiA 301) is neither sent nor
                        # received, and its transmission type and mapping are not used until a
                        # master makes it valid again, which writes them first: only the write
                        # that makes it not valid, the one canopen's save() starts with (its
                        # transmission type and mapping count writes after it: 15 of a drive's
                        # 56 SDO transfers)
                        pm.trans_type = 255
                        pm.enabled = False
                        pm.com_record[1].raw = (pm.cob_id | _PDO_NOT_VALID
                                                | (0 if pm.rtr_allowed else _PDO_RTR_NOT_ALLOWED))
        self._sdo(j, "PDO mapping", pdos)
        mode = self._sdo(j, "read 0x6061", lambda nd: nd.sdo[0x6061].raw)
        if mode != codec.MODE_CST:
            raise DeviceFaultError(f"{self._name(j)}: modes of operation display is {mode}, not 10 (CST)")

    def fault_text(self, joint: int, code: int) -> str:
        """The EMCY code's name (CiA 301 / 402), or the host's own check."""
        code = int(code)
        if 0 < code <= 0xFFFF:
            return f"EMCY 0x{code:04X} ({codec.EMCY_NAMES.get(code, 'unknown')})"
        return super().fault_text(joint, code)

    def enable(self) -> Feedback:
        """Configure every drive, start it (NMT) and walk the power state machine to OPERATION ENABLED.

        Raises
        ------
        DeviceFaultError
            A drive is (or goes) in FAULT, refuses a configuration write, or is not a CST drive.
        CommsTimeoutError
            No SDO answer, or not every drive OPERATION ENABLED within ``enable_timeout_s``.
        DriverError
            The drive's rated torque or encoder resolution differ from the configuration.
        """
        self._check_open()
        if not self._touched:
            self.listen_before_talk()   # another master on our nodes: refused, nothing sent
        self._touched = True
        self._foreign_found()           # what was seen before this enable is history
        self._stats = self._new_stats()
        self._take_queued(False)
        for j in range(self.n_joints):
            self.configure(j)
        for j in range(self.n_joints):
            self.nodes[j].nmt.state = "OPERATIONAL"
        self._master_heartbeat(force=True)
        n = self.n_joints
        t0 = float(self._now())
        self._hb_t = [max(h, t0) for h in self._hb_t]   # heartbeat ages count from the start
        deadline = time.monotonic() + self.enable_timeout_s
        zero = np.zeros(n)
        cw = [codec.CW_SHUTDOWN] * n
        silent = [0] * n        # per drive, the walk's cycles in a row without its TPDOs
        self._enabled_cmd = True
        while True:
            frames = self._rpdos(Command(zero), codec.CW_ENABLE_OPERATION)
            frames = [(arb, codec.encode_rpdo1(cw[j], 0)) for j, (arb, _) in enumerate(frames)]
            fb = self._exchange(frames)
            for j in range(n):
                silent[j] = 0 if fb.fresh[j] else silent[j] + 1
                if silent[j] >= 2 and (silent[j] - 2) % NMT_START_REPEAT_CYCLES == 0:
                    # NMT commands are not acknowledged: a lost Start Remote Node leaves the drive
                    # pre-operational, without PDOs.  Starting a started node changes nothing
                    self.nodes[j].nmt.state = "OPERATIONAL"
            states = [State(int(s)) for s in self._state]
            faulted = [j for j in range(n) if fb.fresh[j] and states[j] in (State.FAULT, State.FAULT_REACTION_ACTIVE)]
            if faulted:
                self._shutdown_all()
                desc = "; ".join(f"{self._name(j)}: {states[j].name}, EMCY 0x{int(self._emcy[j]):04X} "
                                 f"({codec.EMCY_NAMES.get(int(self._emcy[j]), 'unknown')})" for j in faulted)
                raise DeviceFaultError(f"CiA 402 drives in fault (call fault_reset() to acknowledge): {desc}")
            if fb.fresh.all() and all(s == State.OPERATION_ENABLED for s in states):
                break
            if time.monotonic() > deadline:
                self._shutdown_all()
                desc = ", ".join(f"{self._name(j)} ({states[j].name if fb.fresh[j] else 'no TPDO'})"
                                 for j in range(n) if not (fb.fresh[j] and states[j] == State.OPERATION_ENABLED))
                raise CommsTimeoutError(f"CiA 402 drives not OPERATION ENABLED after {self.enable_timeout_s} s: "
                                        f"{desc}")
            for j in range(n):
                s = states[j]
                if not fb.fresh[j]:
                    continue
                if s == State.SWITCH_ON_DISABLED:
                    cw[j] = codec.CW_SHUTDOWN
                elif s == State.READY_TO_SWITCH_ON:
                    cw[j] = codec.CW_SWITCH_ON
                elif s in (State.SWITCHED_ON, State.OPERATION_ENABLED):
                    cw[j] = codec.CW_ENABLE_OPERATION
                elif s == State.QUICK_STOP_ACTIVE:
                    cw[j] = codec.CW_DISABLE_VOLTAGE
        fb = self._exchange(self._request(Command(zero)))
        self._check_foreign()
        return self._follow_start(fb)

    def _controlword_cycle(self, controlword: int) -> Feedback:
        return self._exchange(self._rpdos(Command(np.zeros(self.n_joints)), controlword))

    def _shutdown_all(self) -> None:
        self._controlword_cycle(codec.CW_SHUTDOWN)
        self._enabled_cmd = False

    def quick_stop(self) -> Feedback:
        """Controlword 'quick stop': each drive runs its quick stop reaction (0x605A)."""
        self._check_open()
        fb = self._controlword_cycle(codec.CW_QUICK_STOP)
        self._enabled_cmd = False
        return fb

    def clear_faults(self) -> None:
        """Every drive configured again (:meth:`configure`: a drive that rebooted lost its PDO
        maps, mode and timeouts, and would start with its defaults' maps, which this driver's
        frames do not fit), NMT start (the controlword travels in a PDO), fault reset of every
        drive, then the drives disabled again (see :meth:`fault_reset` and
        :meth:`Driver.clear_faults`)."""
        self._check_open()
        self._take_queued(False)
        for j in range(self.n_joints):
            self.configure(j)
        for j in range(self.n_joints):
            self.nodes[j].nmt.state = "OPERATIONAL"
        self._master_heartbeat(force=True)
        self.fault_reset()
        self.disable()

    def _nmt_text(self, j: int) -> str:
        """Drive ``j``'s NMT state as its last heartbeat said it."""
        v = int(self._nmt[j])
        return "no heartbeat" if v < 0 else f"NMT {_NMT_NAMES.get(v, hex(v))}"

    def fault_reset(self, timeout_s: float | None = None) -> Feedback:
        """Acknowledge drive faults: controlword bit 7 rising edge (FAULT -> SWITCH ON DISABLED).

        Raises
        ------
        DeviceFaultError
            A drive is still in FAULT afterwards (its cause persists).
        """
        self._check_open()
        self._controlword_cycle(codec.CW_DISABLE_VOLTAGE)
        limit_s = self.enable_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit_s
        while True:
            fb = self._controlword_cycle(codec.CW_FAULT_RESET)
            still = [j for j in range(self.n_joints) if self._state[j] in (int(State.FAULT),
                                                                           int(State.FAULT_REACTION_ACTIVE))]
            if not still and fb.fresh.all():
                break
            if time.monotonic() > deadline:
                if still:
                    raise DeviceFaultError("fault reset not accepted by " + ", ".join(self._name(j) for j in still))
                raise CommsTimeoutError("fault reset: no TPDO from " + ", ".join(
                    f"{self._name(j)} ({self._nmt_text(j)})"
                    for j in range(self.n_joints) if not fb.fresh[j]) + f" within {limit_s} s")
            self._controlword_cycle(codec.CW_DISABLE_VOLTAGE)
        self._enabled_cmd = False
        return fb

    def _master_frame(self, bus: int, arb: int, data: bytes) -> str | None:
        """An RPDO or an SDO request to one of our nodes, or an NMT command to one (or to every
        node)."""
        if arb == codec.NMT_ID:
            if len(data) >= 2 and (data[1] == 0 or data[1] in self._nodes_of[bus]):
                return f"NMT commands to {'every node' if data[1] == 0 else f'node {data[1]}'}"
            return None
        return self._master_ids[bus].get(arb)

    def _foreign(self, bus: int, frame: tuple) -> str | None:
        """Before the first frame: another master's SYNC, or its frames to our nodes
        (:meth:`_master_frame`), or our nodes sending TPDOs (operational and synchronised by
        someone else)."""
        what = super()._foreign(bus, frame)
        arb, data, _, error, remote, extended = frame[:6]
        if what is not None or error or extended:
            return what
        if arb == codec.SYNC_ID:
            return "SYNC frames (another master)"
        for node in self._nodes_of[bus]:
            if arb in (codec.tpdo_id(node, 1), codec.tpdo_id(node, 2)):
                return f"TPDOs from node {node} (operational, synchronised by another master)"
        return None

    def disable(self) -> None:
        """Zero torque with controlword 'shutdown' (power stage off), then NMT pre-operational.

        Drives that do not confirm (statusword still OPERATION ENABLED) get the
        shutdown once more; those still unconfirmed are listed in
        :attr:`disable_unconfirmed`.
        """
        self._check_open()
        if not self._touched:
            return              # never sent a frame (refused before it spoke): nothing to undo
        todo = list(range(self.n_joints))
        for _ in range(2):
            fb = self._controlword_cycle(codec.CW_SHUTDOWN)
            todo = [j for j in todo if not fb.fresh[j] or self._state[j] == int(State.OPERATION_ENABLED)]
            if not todo:
                break
        self._enabled_cmd = False
        self.disable_unconfirmed = todo
        for node in self.nodes:
            node.nmt.state = "PRE-OPERATIONAL"

    # ------------------------------------------------------------------
    def bus_flows(self, loop_hz: float):
        """Bus-load description for :func:`drivers.busload.budget`: one (BusSpec, flows) per bus."""
        from .busload import BusSpec, cia402_flows
        out = {}
        for b, t in enumerate(self._buses):
            spec = BusSpec(bitrate_bit_s=float(t.bitrate or 1_000_000), fd=False, name=t.name)
            out[t.name] = (spec, cia402_flows(len(self._by_node[b]), loop_hz,
                                              heartbeat_rate_hz=1.0 / self.heartbeat_period_s,
                                              master_heartbeat_rate_hz=0.0 if self.master_node_id is None
                                              else 1.0 / self.master_heartbeat_period_s))
        return out


def build(section, *, now: Callable[[], float], transports=None) -> Cia402Driver:
    """Build a :class:`Cia402Driver` from a ``[driver]`` table (type ``cia402_can``).

    Keys besides the common ones of :mod:`drivers.registry`: ``enable_timeout_s``,
    ``sdo_timeout_s``, ``heartbeat_period_s``, ``heartbeat_timeout_s``,
    ``master_node_id`` (0 = no master heartbeat), ``master_heartbeat_period_s``,
    ``master_heartbeat_timeout_s``, ``quick_stop_option``, ``fault_reaction_option``;
    per joint ``node_id`` (1..127), ``counts_per_rev``, ``rated_torque_nm``,
    optional ``velocity_counts_per_rev_s``, ``torque_limit_nm`` (motor side,
    written to 0x6072), ``eds`` (a shipped EDS name or a path relative to the
    config file) and the mapping keys.
    """
    from . import registry
    buses = registry.open_buses(section, transports)
    try:
        rt = section.float("reply_timeout_s", 0.002, minimum=0.0, strict_min=True, maximum=TIMEOUT_MAX_S["reply_timeout_s"])
        et = section.float("enable_timeout_s", 1.0, minimum=0.0, strict_min=True, maximum=TIMEOUT_MAX_S["enable_timeout_s"])
        st = section.float("sdo_timeout_s", 0.1, minimum=0.0, strict_min=True, maximum=TIMEOUT_MAX_S["sdo_timeout_s"])
        hb = section.float("heartbeat_period_s", 0.05, minimum=0.001)
        hbt = section.float("heartbeat_timeout_s", None, minimum=0.0, strict_min=True)
        if hbt is not None and hbt <= hb:
            raise section.error("heartbeat_timeout_s", f"must be longer than heartbeat_period_s ({hb} s); "
                                                       "a shorter one would report every drive as lost")
        master = section.int("master_node_id", 127, minimum=0, maximum=127)
        mhb = section.float("master_heartbeat_period_s", 0.05, minimum=0.001)
        mhbt = section.float("master_heartbeat_timeout_s", None, minimum=0.0, strict_min=True)
        if mhbt is not None and mhbt <= mhb:
            raise section.error("master_heartbeat_timeout_s",
                                f"must be longer than master_heartbeat_period_s ({mhb} s)")
        qs = section.int("quick_stop_option", 2)
        if qs not in (0, 1, 2, 5, 6):
            raise section.error("quick_stop_option", f"must be 0, 1, 2, 5 or 6, got {qs}")
        fr = section.int("fault_reaction_option", 2)
        if fr not in (0, 1, 2):
            raise section.error("fault_reaction_option", f"must be 0, 1 or 2, got {fr}")
        follow = follow_config(section.section("follow", {}))
        base_dir = Path(section.file).parent if section.file else None
        axes = []
        seen = {}
        for js in section.sections("joints"):
            bus_name = registry.joint_bus(js, buses)
            node = js.int("node_id", minimum=1, maximum=127, doc="the drive's CANopen node id")
            if (bus_name, node) in seen:
                raise js.error("node_id", f"node id {node} already used by {seen[bus_name, node]} on bus '{bus_name}'")
            if node == master:
                raise js.error("node_id", f"node id {node} is the master_node_id")
            seen[bus_name, node] = js.path
            name = js.str("name", "", doc=registry.JOINT_NAME_DOC)
            units = _units(js)
            lim = js.float("torque_limit_nm", None, minimum=0.0, strict_min=True, doc=_TORQUE_LIMIT_DOC)
            eds = js.str("eds", GENERIC_EDS, doc="the drive's EDS file (relative to this config; default: "
                                                 "a generic CiA 402 dictionary)")
            if base_dir is not None and not Path(eds).is_absolute() and (base_dir / eds).is_file():
                eds = str(base_dir / eds)
            try:
                eds_path(eds)
            except ConfigError as err:
                raise js.error("eds", err.message) from err
            mapping = registry.joint_mapping(js)
            js.finish()
            axes.append(Cia402Axis(buses[bus_name], node, units, mapping, name, lim, eds))
        if not axes:
            raise section.error("joints", "at least one joint is required")
        section.finish()
        return Cia402Driver(axes, now=now, reply_timeout_s=rt, enable_timeout_s=et, sdo_timeout_s=st,
                            heartbeat_period_s=hb, heartbeat_timeout_s=hbt,
                            master_node_id=None if master == 0 else master, master_heartbeat_period_s=mhb,
                            master_heartbeat_timeout_s=mhbt, quick_stop_option=qs, fault_reaction_option=fr,
                            follow=follow)
    except BaseException:
        registry.close_buses(buses, transports)
        raise


_TORQUE_LIMIT_DOC = "max torque 0x6072 written to the drive [N m, motor side] (default: the rated torque)"


def _units(js) -> "Cia402Units":
    """The :class:`Cia402Units` of a ``[[driver.joints]]`` table."""
    return Cia402Units(js.float("counts_per_rev", minimum=0.0, strict_min=True,
                                doc="position increments per motor turn (0x608F/0x6091 as configured)"),
                       js.float("rated_torque_nm", minimum=0.0, strict_min=True,
                                doc="the motor's rated torque 0x6076 [N m]: the drive's torque unit is "
                                    "1/1000 of it"),
                       js.float("velocity_counts_per_rev_s", None, minimum=0.0, strict_min=True,
                                doc="velocity increments per motor turn per second (default: "
                                    "counts_per_rev)"))


def capabilities(section) -> list:
    """Each joint's :class:`~drivers.base.JointCapability` of a ``cia402_can`` table: max torque
    0x6072 (``torque_limit_nm`` in per mille of the rated torque, 1000 without one) x rated
    torque 0x6076 (``rated_torque_nm``) x gear ratio x efficiency; the position field 0x6064
    (int32 increments) and velocity field 0x606C (int32), joint side."""
    from . import registry
    from .base import JointCapability
    out = []
    for js in registry.capability_joints(section):
        units = _units(js)
        lim = js.float("torque_limit_nm", None, minimum=0.0, strict_min=True, doc=_TORQUE_LIMIT_DOC)
        m = registry.joint_mapping(js)
        ax = Cia402Axis(None, 1, units, m, "", lim)     # the drive's arithmetic (no bus)
        permille = ax.max_torque_permille
        g = m.gear_ratio
        span_rev = 2 ** 31 / units.counts_per_rev
        vel_counts = units.velocity_counts_per_rev_s or units.counts_per_rev
        out.append(JointCapability(
            torque_max_nm=ax.torque_capability_nm(),
            torque_from=(f"max torque 0x6072 {permille} per mille x rated torque 0x6076 "
                         f"{units.rated_torque_nm:g} N m x {registry.mapping_text(m)}"),
            settings=(js.field("torque_limit_nm"), js.field("rated_torque_nm"), js.field("gear_ratio")),
            position_range=(m.offset_rad - 2 * math.pi * span_rev / g, m.offset_rad + 2 * math.pi * span_rev / g),
            position_from=f"0x6064 (int32 of {units.counts_per_rev:g} increments per motor turn) / gear_ratio {g:g}",
            velocity_max=2 * math.pi * (2 ** 31 / vel_counts) / g,
            velocity_from="0x606C (int32)", offset_key=registry.offset_key(js), path=js.path))
    return out
