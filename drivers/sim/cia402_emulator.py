"""Emulated CANopen CiA 402 servo drives (cyclic synchronous torque) on the simulated plant.

Each drive is a :class:`canopen.LocalNode` (object dictionary from the same
EDS the driver uses): canopen's SDO server answers configuration requests,
its NMT slave follows NMT commands, its PDO maps read the mapping the master
wrote, and its EMCY producer sends emergencies.  The cyclic path is the
drive's own, as in a firmware: when the node enters OPERATIONAL each mapped
object is found once (:class:`_Field`); at each SYNC the TPDOs are packed from
the drive's values (what its object-dictionary read callback answers) and
the RPDOs' values are written through to the object dictionary (with its
write callbacks, so SDO reads see them); a synchronous RPDO is received by
the emulator itself when its map is the COB-ID's only subscriber (else by
canopen's ``Network.notify``).  At a SYNC where every drive of the bus is
in the common healthy case (OPERATIONAL, OPERATION ENABLED in CST, an RPDO
saying 'enable operation', PDO maps of the objects it knows, a plant without
sensor noise) the numbers of all of them are one compiled call
(:mod:`drivers.sim._cia402_kernel`), the same values as this Python path,
which serves every other case and stays the reference.  Frames may be given
and answered as fields (``on_fields``, for an inline host), and a whole cycle
(an RPDO to each drive, then the SYNC) served on a lock-step clock in one call
(``on_batch``: the RPDOs' bytes as the master's driver encoded them in, the
TPDOs' bytes written to its reply buffer, the object dictionary written as the
frames would write it, the drives' other state when anything else looks).  The
drive behaviour around it is modelled here, as a drive firmware does it:

* NMT: boot-up message at start, PDOs and SYNC only in OPERATIONAL, no SDO
  in STOPPED; reset node / communication returns to PRE-OPERATIONAL with a
  new boot-up (reset node also clears a fault whose cause is gone).
* PDOs: the mapping is taken from the object dictionary when the node
  enters OPERATIONAL; a mapping longer than 64 bits or of an object that is
  not PDO-mappable is refused by SDO abort (0x06040042 / 0x06040041).
  Synchronous RPDOs are applied at the next SYNC (the latest one received),
  asynchronous ones (254/255) at once; an RPDO shorter than its mapping is
  not processed and raises EMCY 0x8210.  At each SYNC the actual values are
  sampled once, the RPDOs applied, then every synchronous TPDO due is sent.
* Power state machine (CiA 402): controlword commands shutdown, switch on,
  enable operation, disable voltage, quick stop, disable operation and fault
  reset (rising edge of bit 7); statusword bits 0-6, voltage enabled, remote,
  internal limit active (torque clamped to 0x6072) and 'following' (bit 12).
* CST: in OPERATION ENABLED with modes of operation 10 the target torque
  0x6071 (per mille of 0x6076, clamped to 0x6072) is applied to the plant
  joint; otherwise the motor torque is zero.  0x6060 accepts only 0 and 10
  (others: SDO abort 0x06090030).
* Quick stop (0x605A) and fault reaction (0x605E): 0 switches the power
  stage off (motor coasts); 1/2 brake with the drive's velocity loop (joint
  damping ``brake_kd_nm_s_per_rad``, torque limited by 0x6072) until the
  joint speed is below ``standstill_rad_s`` (or ``max_brake_s`` passed),
  then switch off (SWITCH ON DISABLED, or FAULT after a fault reaction);
  quick stop 5/6 brake and stay in QUICK STOP ACTIVE.
* Heartbeat producer (0x1017) on the loop clock; heartbeat consumer
  (0x1016 sub1: node id and time), armed by the first heartbeat of that
  node: on a timeout EMCY 0x8130 and, with the power stage on, the fault
  reaction.
* Faults (:meth:`Cia402Emulator.inject_fault`): EMCY with the code, 0x603F,
  error register 0x1001, fault reaction, FAULT; a fault reset is accepted
  once the cause is gone (EMCY 0x0000 'error reset').

Units (motor side, :class:`~drivers.codecs.cia402.Cia402Units` from 0x608F
and 0x6076): position in increments, velocity in increments/s, torques in
per mille of the rated torque.
"""

from __future__ import annotations

import math
import struct
import threading
from dataclasses import dataclass, field
from typing import Sequence

import can
import numpy as np

from dynamics.errors import ConfigError, DriverError
from ..base import JointMapping
from ..cia402 import GENERIC_EDS, eds_path
from ..codecs import cia402 as codec
from ..codecs.cia402 import Cia402Units, State
from . import _cia402_kernel as _ck
from .emulators import EmulatedDevice, _msg
from .plant import Plant

__all__ = ["Cia402DriveConfig", "Cia402Emulator"]

_POWER_ON = (State.SWITCHED_ON, State.OPERATION_ENABLED, State.QUICK_STOP_ACTIVE, State.FAULT_REACTION_ACTIVE)
_REACTION_CHECK_S = 0.001
_NMT_OPERATIONAL, _NMT_STOPPED, _NMT_PREOP, _NMT_INIT = 5, 4, 127, 0
_I8 = struct.Struct("<b")
#: COB-ID function codes (bits 7-10) canopen's node scanner does not note: an RPDO frame with one
#: of them may bypass ``Network.notify`` (which would only hand it to the PDO map and the scanner)
_UNSCANNED = frozenset((0x200, 0x300, 0x400, 0x500))


@dataclass(frozen=True)
class Cia402DriveConfig:
    """One emulated CiA 402 drive.

    Attributes
    ----------
    node_id : int
        1..127.
    joint : int
        Plant joint it drives.
    units : Cia402Units
        Encoder increments per motor revolution (0x608F) and rated torque (0x6076).
    mapping : JointMapping
        Joint <-> motor side (as the driver's).
    eds : str
        EDS file (a shipped name or a path).
    brake_kd_nm_s_per_rad : float
        Joint-side damping of the drive's velocity loop during quick stop / fault reaction.
    standstill_rad_s : float
        Joint speed below which a braking reaction ends.
    max_brake_s : float
        Longest braking reaction (loop clock).
    """

    node_id: int
    joint: int
    units: Cia402Units
    mapping: JointMapping = field(default_factory=JointMapping)
    eds: str = GENERIC_EDS
    brake_kd_nm_s_per_rad: float = 5.0
    standstill_rad_s: float = 0.02
    max_brake_s: float = 1.0


class _Outbox:
    """The 'bus' of the emulator's canopen network: collects what the nodes send (messages), and
    the TPDOs the drives send at a SYNC, as ``(arbitration_id, data)`` pairs of data frames (in
    the order they were sent; :meth:`Cia402Emulator._take_messages` and ``_take_pairs`` hand them
    over in one form)."""

    def __init__(self, emu: "Cia402Emulator"):
        self.frames: list = []
        self._emu = emu

    def send(self, msg, timeout=None):
        emu = self._emu
        if not emu._serving:
            # raised between bus events (inject_fault): next_timer_s says 'now' for it; a frame
            # sent while a frame or timer is served is handed over when that call returns
            emu.timer_epoch += 1
        if msg.is_remote_frame:
            self.frames.append(can.Message(arbitration_id=msg.arbitration_id, data=bytes(msg.data),
                                           is_extended_id=False, is_remote_frame=True))
        else:
            self.frames.append((msg.arbitration_id, bytes(msg.data)))      # a data frame, standard id

    def send_periodic(self, msg, period, *args, **kwargs):
        # heartbeats are produced on the loop clock by the emulator (on_timer), not by a thread
        return _NoTask()

    def __bool__(self):
        return True


class _Serving:
    """``with emu._served:`` the emulator's lock held while a frame or its timers are served
    (``emu._serving``, a depth, non-zero meanwhile: what the drives send is handed over when the
    call returns); the drives' state the batch path owes is brought up to date first
    (:meth:`Cia402Emulator._settle`)."""

    __slots__ = ("_emu",)

    def __init__(self, emu: "Cia402Emulator"):
        self._emu = emu

    def __enter__(self):
        emu = self._emu
        emu._lock.acquire()
        emu._serving += 1
        if emu._owed:
            emu._settle()
        return self

    def __exit__(self, *exc):
        emu = self._emu
        emu._serving -= 1
        emu._lock.release()
        return False


class _NoTask:
    def stop(self):
        return None

    def modify_data(self, msg):
        return None


class _Timer:
    """A drive's attribute that moves its emulator's next timed event: setting it first counts one
    in the emulator's ``timer_epoch`` (see :attr:`EmulatedDevice.timer_epoch`)."""

    __slots__ = ("key",)

    def __set_name__(self, owner, name):
        self.key = "_" + name

    def __get__(self, d, owner=None):
        return self if d is None else d.__dict__[self.key]

    def __set__(self, d, value) -> None:
        d.emu.timer_epoch += 1
        d.__dict__[self.key] = value


class _Drive:
    boot_due = _Timer()
    hb_due = _Timer()
    next_check = _Timer()
    consumer_last = _Timer()

    def __init__(self, cfg: Cia402DriveConfig, node, emu: "Cia402Emulator"):
        self.cfg = cfg
        self.node = node
        self.emu = emu
        self.state = State.NOT_READY_TO_SWITCH_ON
        self.cw = 0
        self.error_code = 0
        self.error_register = 0
        self.cause = False           # injected fault cause still present
        self.reaction: str | None = None   # "quick_stop" | "fault"
        self.reaction_t0 = 0.0
        self.next_check = math.inf
        self.limit_active = False
        self.hb_due = math.inf
        self.consumer_last = -math.inf   # loop time of the last master heartbeat (-inf: not armed)
        self.boot_due = 0.0
        self.silent = False
        self.commands = 0
        self.sync_count = 0
        self.units = cfg.units
        self.meas = None              # (t, q, qd, tau) of its joint, sampled at the last SYNC / SDO read
        self.rpdo_ready: list = []
        self.tpdo_ready: list = []
        #: the PDO maps of rpdo_ready / tpdo_ready as _PdoPlan (in the same order), and the
        #: synchronous RPDOs the emulator receives itself by COB-ID (see _read_pdo_config)
        self.rx_plans: list[_PdoPlan] = []
        self.tx_plans: list[_PdoPlan] = []
        self.rx_own: dict[int, _PdoPlan] = {}
        #: the compiled SYNC's view of the PDO maps (_FastMaps), None when they are not ones it
        #: handles (see _fast_maps)
        self.fast: _FastMaps | None = None
        self.brake_released: bool | None = None
        self.own_writes: list = []


class _Field:
    """One object mapped into a PDO, as the cyclic path reads and writes it.

    ``aligned``: whole bytes at a byte offset, where canopen's ``PdoVariable.get_data`` /
    ``set_data`` copy the bytes ``[off, off + n)`` (``n``: the object's size); otherwise those are
    called.  ``bits``: the object's size in bits when LocalNode.set_data checks a value's length
    against it (number types), else None.  ``reader``: the emulator's own value of the object
    (what its object-dictionary read callback returns), None for a value the dictionary holds;
    ``pack`` encodes that value as the object's ``encode_raw`` does.
    """

    __slots__ = ("var", "index", "sub", "od", "off", "n", "aligned", "bits", "reader", "pack")

    def __init__(self, var, node, reader):
        from canopen import objectdictionary as odm
        self.var = var
        self.index, self.sub = var.index, var.subindex
        self.od = node._find_object(var.index, var.subindex)
        self.off = var.offset // 8
        self.n = len(var.od) // 8
        self.aligned = not (var.offset % 8 or var.length % 8)
        self.bits = len(self.od) if self.od.data_type in odm.NUMBER_TYPES else None
        self.reader = reader
        od = self.od
        if (reader is not None and od.data_type in odm.INTEGER_TYPES and od.min is None
                and od.max is None and od.data_type in od.STRUCT_TYPES):
            self.pack = od.STRUCT_TYPES[od.data_type].pack
        else:
            self.pack = od.encode_raw


class _PdoPlan:
    """A PDO map of a drive in OPERATIONAL with its mapped objects (:class:`_Field`)."""

    __slots__ = ("pm", "cob_id", "trans_type", "nbytes", "fields")

    def __init__(self, pm, fields):
        self.pm = pm
        self.cob_id = pm.cob_id
        self.trans_type = pm.trans_type or 0
        self.nbytes = (pm.length + 7) // 8
        self.fields = fields


#: the objects a TPDO of the compiled SYNC may map: index -> (its place in the values the SYNC
#: packs, the canopen data type it must have)
_FAST_TX = {0x6041: (0, "UNSIGNED16"), 0x6064: (1, "INTEGER32"), 0x606C: (2, "INTEGER32"),
            0x6077: (3, "INTEGER16"), 0x6074: (4, "INTEGER16"), 0x6061: (5, "INTEGER8"),
            0x603F: (6, "UNSIGNED16"), 0x1001: (7, "UNSIGNED8")}
_CST_RAW = bytes([codec.MODE_CST])
#: a controlword's bytes -> its value when its command (codec.controlword_command) is 'enable
#: operation', else -1; filled as controlwords come
_CW_ENABLE: dict[bytes, int] = {}
_OE = State.OPERATION_ENABLED


class _FastMaps:
    """The PDO maps of a drive in the form the compiled SYNC (:meth:`Cia402Emulator._sync_fast`)
    uses: one synchronous RPDO mapping exactly the controlword 0x6040 and the target torque 0x6071
    (their byte offsets), and TPDOs of whole objects the drive computes itself (:data:`_FAST_TX`),
    back to back from byte 0: each packed by the compiled SYNC from the values in its order."""

    __slots__ = ("rx", "cw_off", "tg_off", "tx", "quantum", "units")

    def __init__(self, rx: _PdoPlan, cw_off: int, tg_off: int, tx: list):
        self.rx = rx
        self.cw_off = cw_off
        self.tg_off = tg_off
        #: per TPDO: (plan, ((place, size [bytes]) of each object, in its order)), the place
        #: among the values the SYNC computes: statusword, position, velocity, torque, torque
        #: demand, mode display, error code, error register
        self.tx = tx
        #: the joint encoder's step [rad] (0: none), None: the plant draws sensor noise (the
        #: Python path measures); set by Cia402Emulator._read_pdo_config
        self.quantum: float | None = None
        #: the units the emulator's row of constants was made of (None: not made yet)
        self.units = None


def _fast_maps(d: _Drive, odm) -> _FastMaps | None:
    """:class:`_FastMaps` of a drive's PDO maps (just read), None when they are not of that form
    (the Python path serves such a drive)."""
    if len(d.rx_plans) != 1 or len(d.node._read_callbacks) != 1:
        return None
    rx = d.rx_plans[0]
    offs = {}
    for f in rx.fields:
        if not (f.aligned and f.sub == 0 and f.var.length == 16 and f.n == 2 and f.index in (0x6040, 0x6071)):
            return None
        offs[f.index] = f.off
    if rx.trans_type > 240 or len(offs) != 2 or len(rx.fields) != 2:
        return None
    tx = []
    for plan in d.tx_plans:
        places, off = [], 0
        for f in plan.fields:
            spec = _FAST_TX.get(f.index)
            if (spec is None or f.reader is None or f.sub != 0 or not f.aligned or f.off != off
                    or f.var.length != 8 * f.n or f.od.data_type != getattr(odm, spec[1])
                    or f.od.min is not None or f.od.max is not None):
                return None
            places.append((spec[0], f.n))
            off += f.n
        if not places or off != plan.nbytes or len(plan.pm.data) != off or off > 8:
            return None
        tx.append((plan, tuple(places)))
    return _FastMaps(rx, offs[0x6040], offs[0x6071], tx)


def _layout(fms: list) -> tuple:
    """The TPDOs of drives whose PDO maps are ``fms`` (:class:`_FastMaps`, in drive order) as the
    compiled SYNC writes them: ``(its layout, an (m, L_SIZE) int64 array (see
    :func:`~drivers.sim._cia402_kernel.cia402_sync`), ((plan, drive's place) of each row),
    whether every one is sent at every SYNC)``."""
    rows, plans = [], []
    for i, fm in enumerate(fms):
        for plan, places in fm.tx:
            row = [plan.cob_id, i, plan.nbytes, len(places)] + [0] * 16
            for k, (place, size) in enumerate(places):
                row[_ck.L_FIELDS + 2 * k], row[_ck.L_FIELDS + 2 * k + 1] = place, size
            rows.append(row)
            plans.append((plan, i))
    lay = np.array(rows, dtype=np.int64).reshape(len(rows), _ck.L_SIZE)
    return lay, tuple(plans), all(plan.trans_type == 1 for plan, _ in plans)


class Cia402Emulator(EmulatedDevice):
    """CiA 402 drives on one CAN bus (see the module docstring).

    Parameters
    ----------
    drives : sequence of Cia402DriveConfig
        Distinct node ids and joints.
    t0_s : float
        Loop time of power-on (boot-up messages are sent then).
    """

    def __init__(self, drives: Sequence[Cia402DriveConfig], *, t0_s: float = 0.0):
        import canopen
        self._canopen = canopen
        drives = list(drives)
        if not drives:
            raise ConfigError("at least one drive is required", field="drives")
        #: counts every change that may move the next timed event (EmulatedDevice.timer_epoch):
        #: the drives' timers (_Timer), a frame canopen's services put in the outbox (one raised
        #: outside on_frame / on_timer, by inject_fault, makes next_timer_s say 'now')
        self.timer_epoch = 0
        #: a frame or the timers are being served (on_frame, on_fields, on_fields_batch, on_timer,
        #: on_timer_fields): what the drives send meanwhile is taken when that call returns
        self._serving = 0
        #: statusword of (state, internal limit active, following)
        self._statuswords: dict[tuple, int] = {}
        self._out = _Outbox(self)
        self.network = canopen.Network(bus=self._out)
        self._generation = 0
        for name in ("subscribe", "unsubscribe"):
            # who hears a COB-ID decides whether an RPDO may take the batch path (on_batch)
            setattr(self.network, name, self._counted(getattr(self.network, name)))
        self._drives: dict[int, _Drive] = {}
        joints = set()
        ods = {}
        for i, c in enumerate(drives):
            if not isinstance(c, Cia402DriveConfig):
                raise ConfigError(f"expected Cia402DriveConfig, got {type(c).__name__}", field=f"drives[{i}]")
            try:
                codec.rpdo_id(c.node_id)
            except DriverError as err:
                raise ConfigError(str(err), field=f"drives[{i}].node_id") from err
            if c.node_id in self._drives:
                raise ConfigError(f"duplicate node id {c.node_id}", field=f"drives[{i}].node_id")
            if c.joint in joints:
                raise ConfigError(f"joint {c.joint} driven twice", field=f"drives[{i}].joint")
            joints.add(c.joint)
            path = eds_path(c.eds)
            if path not in ods:
                ods[path] = path
            node = canopen.LocalNode(c.node_id, path)
            self.network.add_node(node)
            d = _Drive(c, node, self)
            d.boot_due = float(t0_s)
            node.add_read_callback(lambda index, subindex, od, d=d: self._read(d, index, subindex))
            node.add_write_callback(lambda index, subindex, od, data, d=d: self._write(d, index, subindex, od, data))
            #: the write callbacks the drive's firmware has (canopen's NMT slave's and the emulator's):
            #: another one added later takes the Python path (_sync_fast)
            d.own_writes = list(node._write_callbacks)
            self._identity(d)
            self._drives[c.node_id] = d
        self._lock = threading.RLock()
        self._served = _Serving(self)
        self._limit0: dict[int, float] = {}
        # the compiled SYNC's arrays (_sync_fast), one row per drive in node order
        self._drive_list = list(self._drives.values())
        nd = len(self._drive_list)
        self._fast_K = np.zeros((nd, _ck.K_SIZE))
        self._fast_joints = np.array([d.cfg.joint for d in self._drive_list], dtype=np.int64)
        self._fast_res = np.zeros((nd, _ck.R_SIZE), dtype=np.int64)
        self._fast_tau = np.zeros(nd)
        #: the compiled SYNC's inputs (_ck.T_SIZE a drive: the RPDO's row, target torque 0x6071,
        #: max torque 0x6072), error code and register of each drive; no RPDO bytes (_sync_fast)
        self._fast_in = np.zeros((nd, _ck.T_SIZE), dtype=np.int64)
        self._fast_errs = np.zeros((nd, 2), dtype=np.int64)
        self._no_rx = np.zeros((0, 4), dtype=np.uint8)
        #: the drives' TPDOs as the compiled SYNC writes them (_layout), with the drives'
        #: _FastMaps it was made of and the buffers _sync_fast has them written to:
        #: (maps, layout, plans, every one at every SYNC, COB-IDs, rows of length then bytes)
        self._fast_combo: tuple | None = None
        #: counts every change of what decides whether a cycle goes the batch path (on_batch's
        #: cache key): a write to a drive's object dictionary through its callbacks (SDO, an RPDO
        #: applied by the Python path), a power state or NMT state change, a fault, a reaction,
        #: a drive disconnected, a subscription of the network, the PDO maps read
        #: on_batch's last preparation (_prepare_batch)
        self._batch_prep: tuple | None = None
        #: cycles on_batch served whose drives' own state (counters, controlword, internal limit,
        #: TPDO buffers: nothing of the object dictionary) is not written yet (_settle), with the
        #: preparation they were served with, the last one's kernel results and TPDO rows
        self._owed = 0
        self._owed_prep: tuple | None = None
        self._owed_res: list = []
        self._owed_tx = (b"", 9)
        #: the statusword in OPERATION ENABLED, CST, without and with the internal limit active
        self._sw_fast = tuple(codec.statusword_for(State.OPERATION_ENABLED, internal_limit=la, following=True)
                              for la in (False, True))
        self._readers = {0x6041: self.statusword, 0x6061: self._mode, 0x603F: self._rd_error_code,
                         0x1001: self._rd_error_register, 0x6064: self._rd_position,
                         0x606C: self._rd_velocity, 0x6077: self._rd_torque, 0x6074: self._rd_torque_demand}

    def _counted(self, f):
        """``f`` that first counts one in :attr:`_generation`."""
        def counted(*args, **kwargs):
            self._generation += 1
            return f(*args, **kwargs)
        return counted

    # -- setup ---------------------------------------------------------------------------------
    def bind(self, plant: Plant) -> None:
        super().bind(plant)
        self._generation += 1
        for d in self._drives.values():
            j = d.cfg.joint
            if not 0 <= j < plant.n_joints:
                raise ConfigError(f"joint {j} out of range for a {plant.n_joints}-joint plant",
                                  field=f"drive {d.cfg.node_id}.joint")
            self._limit0[j] = float(plant.torque_limit_nm[j])
            self._set_plant_limit(d)
            plant.set_joint_command(j, 0.0)
            d.state = State.SWITCH_ON_DISABLED     # self test passed

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(self._drives)

    def _drive(self, node_id: int) -> _Drive:
        if self._owed:
            self._settle()
        try:
            return self._drives[node_id]
        except KeyError as err:
            raise DriverError(f"no emulated CiA 402 drive with node id {node_id}") from err

    def state(self, node_id: int) -> State:
        """Power state of a drive."""
        return self._drive(node_id).state

    def nmt_state(self, node_id: int) -> str:
        return self._drive(node_id).node.nmt.state

    def error_code(self, node_id: int) -> int:
        return self._drive(node_id).error_code

    def commands_applied(self, node_id: int) -> int:
        """Number of SYNCs at which a target torque was applied in OPERATION ENABLED."""
        return self._drive(node_id).commands

    def local_node(self, node_id: int):
        """The drive's :class:`canopen.LocalNode` (object dictionary values: ``data_store``)."""
        return self._drive(node_id).node

    # -- fault injection -------------------------------------------------------------------------
    def inject_fault(self, node_id: int, code: int = 0x2310, *, persistent: bool = False) -> None:
        """Raise a drive fault with EMCY ``code`` (default 0x2310 over-current).

        ``persistent``: the cause stays until :meth:`clear_fault_cause` (fault reset refused).
        """
        if isinstance(code, bool) or not isinstance(code, int) or not 0 < code <= 0xFFFF:
            raise DriverError(f"EMCY code must be in 1..0xFFFF, got {code!r}")
        with self._lock:
            d = self._drive(node_id)
            d.cause = bool(persistent)
            self._fault(d, code, self.plant.t_s)

    def reboot(self, node_id: int) -> None:
        """Power-cycle one drive (a brown-out, an e-stop that cut its supply): what was written to
        its object dictionary since power-on (by SDO or PDO: the PDO maps, the mode, the target
        torque, the heartbeat times) is lost, it comes back with no fault, its power stage off
        (NOT READY TO SWITCH ON, then SWITCH ON DISABLED; brake engaged) and in NMT
        PRE-OPERATIONAL, announced by its boot-up message at the next timed event (CiA 301: a
        heartbeat with state 0).  Its position reads as before (an absolute encoder).  Commands
        do nothing until it is configured, started and enabled again."""
        with self._lock:
            d = self._drive(node_id)          # (the batch path's owed state written first)
            node = d.node
            node.data_store.clear()
            d.state = State.SWITCH_ON_DISABLED        # NOT READY TO SWITCH ON passes on its own
            d.cw = 0
            d.error_code = 0
            d.error_register = 0
            d.cause = False
            d.reaction = None
            d.next_check = math.inf
            d.limit_active = False
            d.hb_due = math.inf
            d.consumer_last = -math.inf
            node.nmt._state = _NMT_INIT
            self._identity(d)
            d.rpdo_ready, d.tpdo_ready = [], []
            d.rx_plans, d.tx_plans, d.rx_own, d.fast = [], [], {}, None
            if self.plant is not None:      # (not bound yet: nothing to put on a joint)
                self._set_plant_limit(d)
                self._output(d)
            d.boot_due = self.plant.t_s if self.plant is not None else 0.0

    def _identity(self, d: _Drive) -> None:
        """The drive's own identity in its object dictionary: units and rated torque."""
        c = d.cfg
        d.node.set_data(0x608F, 1, struct.pack("<I", int(round(c.units.counts_per_rev))))
        d.node.set_data(0x608F, 2, struct.pack("<I", 1))
        d.node.set_data(0x6076, 0, struct.pack("<I", c.units.rated_torque_mnm))

    def clear_fault_cause(self, node_id: int) -> None:
        with self._lock:
            self._drive(node_id).cause = False
            self._generation += 1

    def set_silent(self, node_id: int, silent: bool = True) -> None:
        """Disconnect (``True``) or reconnect a drive from the bus (it keeps running its reactions)."""
        with self._lock:
            self._drive(node_id).silent = bool(silent)
            self._generation += 1

    # -- object dictionary callbacks ----------------------------------------------------------------
    def _sample(self, d: _Drive):
        """``(t, q, qd, tau)`` of the drive's joint at the plant's time (measured once per time:
        ``Plant.measure_joint``, which draws a noisy plant's noise as ``measure`` does)."""
        plant = self.plant
        t = plant.t_s
        m = d.meas
        if m is None or m[0] != t:
            d.meas = m = (t, *plant.measure_joint(d.cfg.joint))
        return m

    def _mode(self, d: _Drive) -> int:
        try:
            return _I8.unpack(d.node.data_store[0x6060][0])[0]
        except KeyError:
            return 0

    def _u(self, d: _Drive, index: int, sub: int = 0, fmt: str = "<I") -> int:
        """An object's value as ``LocalNode.get_data`` gives it, for the objects :meth:`_read` does
        not answer: the stored value (written by SDO or PDO), else the EDS's (``get_data``)."""
        try:
            raw = d.node.data_store[index][sub]
        except KeyError:
            raw = d.node.get_data(index, sub)
        return struct.unpack(fmt, raw)[0]

    def statusword(self, d: _Drive) -> int:
        if self._owed:
            self._settle()
        following = d.state == State.OPERATION_ENABLED and self._mode(d) == codec.MODE_CST
        key = (d.state, d.limit_active, following)
        sw = self._statuswords.get(key)
        if sw is None:
            sw = self._statuswords[key] = codec.statusword_for(d.state, internal_limit=d.limit_active,
                                                                following=following)
        return sw

    def _read(self, d: _Drive, index: int, sub: int):
        """The object-dictionary read callback: the drive's own values (:meth:`_reader`), None for
        the values the dictionary holds."""
        f = self._readers.get(index)
        return None if f is None else f(d)

    def _reader(self, index: int):
        """The function ``f(d) -> int`` giving object ``index``'s value the drive computes itself
        (statusword, mode display, error code and register, the actual values), or None."""
        return self._readers.get(index)

    def _rd_error_code(self, d: _Drive) -> int:
        return d.error_code

    def _rd_error_register(self, d: _Drive) -> int:
        return d.error_register

    # the actual values, motor side: JointMapping's joint_to_motor_* on the joint's floats (the
    # same IEEE operations in the same order as its numpy scalars, without them)
    def _rd_position(self, d: _Drive) -> int:
        m = d.cfg.mapping
        return d.units.position_counts(m.sign * (self._sample(d)[1] - m.offset_rad) * m.gear_ratio)

    def _rd_velocity(self, d: _Drive) -> int:
        m = d.cfg.mapping
        return d.units.velocity_counts_s(m.sign * self._sample(d)[2] * m.gear_ratio)

    def _rd_torque(self, d: _Drive) -> int:
        m = d.cfg.mapping
        return self._permille(d, m.sign * self._sample(d)[3] / (m.gear_ratio * m.efficiency))

    def _rd_torque_demand(self, d: _Drive) -> int:
        self._sample(d)
        return self._permille(d, self._demand_nm(d))

    @staticmethod
    def _permille(d: _Drive, t_m: float) -> int:
        return max(-0x7FFF, min(0x7FFF, int(round(t_m / d.units.nm_per_permille))))

    def _write(self, d: _Drive, index: int, sub: int, od, data: bytes) -> None:
        self._generation += 1
        SdoAbortedError = self._canopen.SdoAbortedError
        if index == 0x6060:
            mode = struct.unpack("<b", data)[0]
            if mode not in (0, codec.MODE_CST):
                raise SdoAbortedError(0x06090030)      # value range of parameter exceeded
        elif index == 0x6040:
            self._controlword(d, struct.unpack("<H", data)[0], self.plant.t_s)
        elif index == 0x6072:
            self._set_plant_limit(d, struct.unpack("<H", data)[0])
        elif index in (0x6076, 0x608F):
            if d.state in _POWER_ON:
                raise SdoAbortedError(0x08000022)      # not in the present device state
            if index == 0x6076:
                d.units = Cia402Units(d.units.counts_per_rev, max(1, struct.unpack("<I", data)[0]) / 1000.0)
            elif sub == 1:
                d.units = Cia402Units(max(1, struct.unpack("<I", data)[0]), d.units.rated_torque_nm)
        elif 0x1600 <= index <= 0x1603 or 0x1A00 <= index <= 0x1A03:
            if sub == 0:
                n = data[0]
                bits = 0
                for s in range(1, n + 1):
                    try:
                        entry = struct.unpack("<I", d.node.get_data(index, s))[0]
                    except SdoAbortedError:
                        raise SdoAbortedError(0x06040041) from None
                    bits += entry & 0xFF
                if n > 8 or bits > 64:
                    raise SdoAbortedError(0x06040042)  # exceeds PDO length
            else:
                entry = struct.unpack("<I", data)[0]
                obj_index, obj_sub = entry >> 16, (entry >> 8) & 0xFF
                if entry:
                    try:
                        obj = d.node._find_object(obj_index, obj_sub)
                    except SdoAbortedError:
                        raise SdoAbortedError(0x06040041) from None
                    if not obj.pdo_mappable:
                        raise SdoAbortedError(0x06040041)  # object cannot be mapped
        elif index == 0x1017:
            ms = struct.unpack("<H", data)[0]
            if d.boot_due == math.inf:          # producer (re)started by the write
                d.hb_due = (self.plant.t_s if self.plant is not None else 0.0) + (ms / 1000.0 if ms else math.inf)
        elif index == 0x1016 and sub == 1:
            d.consumer_last = -math.inf                # re-armed by the next heartbeat

    def _set_plant_limit(self, d: _Drive, permille: int | None = None) -> None:
        if permille is None:
            permille = self._u(d, 0x6072, 0, "<H")
        m = d.cfg.mapping
        lim = abs(permille * d.units.nm_per_permille * m.gear_ratio * m.efficiency)
        j = d.cfg.joint
        if self.plant is not None:
            self.plant.set_torque_limit([min(self._limit0.get(j, math.inf), lim)], joints=[j])

    # -- behaviour ----------------------------------------------------------------------------------
    def _demand_nm(self, d: _Drive) -> float:
        if d.state != State.OPERATION_ENABLED or self._mode(d) != codec.MODE_CST:
            return 0.0
        target = self._u(d, 0x6071, 0, "<h")
        lim = self._u(d, 0x6072, 0, "<H")
        d.limit_active = abs(target) > lim
        target = max(-lim, min(lim, target))
        return target * d.units.nm_per_permille

    def _output(self, d: _Drive) -> None:
        """Put the drive's current output on the plant joint (and work its holding brake)."""
        self._generation += 1
        j = d.cfg.joint
        m = d.cfg.mapping
        # the drive's brake output: released while the power stage holds the axis
        released = d.state in (State.OPERATION_ENABLED, State.QUICK_STOP_ACTIVE) or d.reaction is not None
        if released != getattr(d, "brake_released", None):
            d.brake_released = released
            self.plant.set_brake(not released, joints=[j])
        if d.reaction is not None:
            self.plant.set_joint_command(j, 0.0, 0.0, d.cfg.brake_kd_nm_s_per_rad)
            return
        if d.state == State.QUICK_STOP_ACTIVE:     # quick stop 5/6: held by the velocity loop
            self.plant.set_joint_command(j, 0.0, 0.0, d.cfg.brake_kd_nm_s_per_rad)
            return
        t_m = self._demand_nm(d)
        if d.state != State.OPERATION_ENABLED:
            d.limit_active = False
        self.plant.set_joint_command(j, m.sign * t_m * m.gear_ratio * m.efficiency)

    def _start_reaction(self, d: _Drive, kind: str, option: int, t_s: float) -> None:
        if option == 0 or d.state not in (State.OPERATION_ENABLED, State.QUICK_STOP_ACTIVE,
                                           State.FAULT_REACTION_ACTIVE):
            d.reaction = None
            d.state = State.FAULT if kind == "fault" else State.SWITCH_ON_DISABLED
            self._output(d)
            return
        d.reaction = kind
        d.reaction_t0 = t_s
        d.next_check = t_s + _REACTION_CHECK_S
        d.state = State.FAULT_REACTION_ACTIVE if kind == "fault" else State.QUICK_STOP_ACTIVE
        self._output(d)

    def _end_reaction(self, d: _Drive) -> None:
        kind = d.reaction
        d.reaction = None
        d.next_check = math.inf
        if kind == "fault":
            d.state = State.FAULT
        else:
            option = self._u(d, 0x605A, 0, "<h")
            d.state = State.QUICK_STOP_ACTIVE if option in (5, 6, 7, 8) else State.SWITCH_ON_DISABLED
        self._output(d)

    def _fault(self, d: _Drive, code: int, t_s: float) -> None:
        self._generation += 1
        if d.state in (State.FAULT, State.FAULT_REACTION_ACTIVE) and d.error_code:
            return
        d.error_code = code
        d.error_register |= 0x01 | (0x10 if code & 0xFF00 == 0x8100 else 0)
        if not d.silent:
            d.node.emcy.send(code, d.error_register)
        was = d.state
        d.state = State.FAULT_REACTION_ACTIVE
        if was in (State.OPERATION_ENABLED, State.QUICK_STOP_ACTIVE):
            self._start_reaction(d, "fault", self._u(d, 0x605E, 0, "<h"), t_s)
        else:
            d.reaction = None
            d.state = State.FAULT
            self._output(d)

    def _controlword(self, d: _Drive, cw: int, t_s: float) -> None:
        prev, d.cw = d.cw, cw
        cmd = codec.controlword_command(cw)
        s = d.state
        if s == State.FAULT:
            if cmd == "fault_reset" and not prev & 0x80 and not d.cause:
                d.state = State.SWITCH_ON_DISABLED
                d.error_code = 0
                d.error_register = 0
                if not d.silent:
                    d.node.emcy.reset()
            return
        if s in (State.FAULT_REACTION_ACTIVE, State.NOT_READY_TO_SWITCH_ON) or cmd is None:
            return
        if cmd == "fault_reset":
            return
        if d.reaction == "quick_stop":
            if cmd == "disable_voltage":
                d.reaction = None
                d.next_check = math.inf
                d.state = State.SWITCH_ON_DISABLED
                self._output(d)
            return
        new = s
        if cmd == "disable_voltage":
            new = State.SWITCH_ON_DISABLED
        elif cmd == "quick_stop":
            if s == State.OPERATION_ENABLED:
                self._start_reaction(d, "quick_stop", self._u(d, 0x605A, 0, "<h"), t_s)
                return
            if s in (State.READY_TO_SWITCH_ON, State.SWITCHED_ON):
                new = State.SWITCH_ON_DISABLED
        elif cmd == "shutdown":
            if s in (State.SWITCH_ON_DISABLED, State.SWITCHED_ON, State.OPERATION_ENABLED):
                new = State.READY_TO_SWITCH_ON
        elif cmd == "switch_on":
            if s == State.READY_TO_SWITCH_ON or s == State.OPERATION_ENABLED:
                new = State.SWITCHED_ON
        elif cmd == "enable_operation":
            if s in (State.READY_TO_SWITCH_ON, State.SWITCHED_ON):
                new = State.OPERATION_ENABLED
            elif s == State.QUICK_STOP_ACTIVE and self._u(d, 0x605A, 0, "<h") in (5, 6, 7, 8):
                new = State.OPERATION_ENABLED
        if new != s:
            d.state = new
            self._output(d)

    def _read_pdo_config(self, d: _Drive) -> None:
        """Take the PDO mapping from the object dictionary (on entering OPERATIONAL)."""
        self._generation += 1
        node = d.node
        node.rpdo.read(from_od=False)
        node.tpdo.read(from_od=False)
        d.rpdo_ready = [pm for pm in node.rpdo.values() if pm.enabled]
        d.tpdo_ready = [pm for pm in node.tpdo.values() if pm.enabled and 1 <= (pm.trans_type or 0) <= 240]
        for pm in d.rpdo_ready:
            pm.is_received = False
            if pm.trans_type is not None and pm.trans_type >= 254 and self._apply_now not in pm.callbacks:
                pm.add_callback(self._apply_now)
        # the cyclic path: each map's objects found once; the values the drive computes itself
        # read from it directly while its read callback is the dictionary's only one
        own = len(node._read_callbacks) == 1
        d.rx_plans = [_PdoPlan(pm, [_Field(v, node, None) for v in pm.map if v.length]) for pm in d.rpdo_ready]
        d.tx_plans = [_PdoPlan(pm, [_Field(v, node, self._reader(v.index) if own else None)
                                    for v in pm.map if v.length]) for pm in d.tpdo_ready]
        # synchronous RPDOs without callbacks, on a COB-ID canopen's scanner ignores: received by
        # the emulator itself (on_frame checks that the map is the COB-ID's only subscriber)
        d.rx_own = {p.cob_id: p for p in d.rx_plans
                    if p.trans_type <= 240 and not p.pm.callbacks and p.cob_id & 0x780 in _UNSCANNED}
        d.fast = fm = _fast_maps(d, self._canopen.objectdictionary)
        if fm is not None:
            fm.quantum = None if self.plant is None else self.plant._joint_quantum(d.cfg.joint)

    def _own_rpdo(self, d: _Drive, arb: int) -> _PdoPlan | None:
        """The synchronous RPDO of ``d`` with COB-ID ``arb`` the emulator receives itself
        (:attr:`_Drive.rx_own`, its map the COB-ID's only subscriber), or None (``Network.notify``
        it)."""
        plan = d.rx_own.get(arb)
        if plan is None:
            return None
        subs = self.network.subscribers.get(arb)
        if subs is None or len(subs) != 1 or getattr(subs[0], "__self__", None) is not plan.pm:
            return None
        return plan

    @staticmethod
    def _received(pm, data, t_s: float) -> None:
        """What a PDO map's ``on_message`` does with a frame: the latest payload, its time stamps."""
        pm.data = bytearray(data)
        if pm.timestamp is not None:
            pm.period = t_s - pm.timestamp
        pm.timestamp = t_s
        pm.is_received = True

    def _receive_own(self, d: _Drive, arb: int, data, t_s: float) -> bool:
        """Receive a synchronous RPDO of ``d`` (:meth:`_own_rpdo`): what the map's ``on_message``
        does, applied at the next SYNC.  False: not such a frame (``Network.notify`` it)."""
        plan = self._own_rpdo(d, arb)
        if plan is None:
            return False
        self._received(plan.pm, data, t_s)
        return True

    def _apply_now(self, pm) -> None:
        d = self._drives.get(pm.pdo_node.node.id)
        if d is not None and d.node.nmt.state == "OPERATIONAL" and pm in d.rpdo_ready:
            self._apply_rpdo(d, d.rx_plans[d.rpdo_ready.index(pm)])

    def _od_write(self, d: _Drive, f: _Field | None, index: int, sub: int, raw: bytes) -> None:
        """``LocalNode.set_data(index, sub, raw)`` with the object already found (``f``; None:
        found here): the length check of a number, the write callbacks, then the store."""
        node = d.node
        if f is None:
            od = node._find_object(index, sub)
            bits = len(od) if od.data_type in self._canopen.objectdictionary.NUMBER_TYPES else None
        else:
            od, bits = f.od, f.bits
        if bits is not None and 8 * len(raw) != bits:
            raise self._canopen.SdoAbortedError(0x06070010)
        for callback in node._write_callbacks:
            callback(index=index, subindex=sub, od=od, data=raw)
        store = node.data_store.get(index)
        if store is None:
            store = node.data_store[index] = {}
        store[sub] = bytes(raw)

    def _apply_rpdo(self, d: _Drive, plan: _PdoPlan) -> None:
        pm = plan.pm
        pm.is_received = False
        data = pm.data
        if len(data) < plan.nbytes:
            d.node.emcy.send(0x8210, d.error_register)       # PDO not processed due to length error
            return
        data = bytes(data)
        ctrl = None
        for f in plan.fields:
            raw = data[f.off:f.off + f.n] if f.aligned else bytes(f.var.get_data())
            if f.index == 0x6040:
                ctrl = f, raw                    # the controlword acts after the targets are in
                continue
            self._od_write(d, f, f.index, f.sub, raw)
        if ctrl is not None:
            f, raw = ctrl
            self._od_write(d, f if f.sub == 0 else None, 0x6040, 0, raw)

    def _sync_fast(self, t_s: float) -> bool:
        """The SYNC of every drive of the bus in one call of the compiled
        :func:`~drivers.sim._cia402_kernel.cia402_sync`, when each is in the common healthy case:
        OPERATIONAL, OPERATION ENABLED in CST, no reaction running, connected, its PDO maps of
        the form :class:`_FastMaps`, an RPDO (if one came) of full length whose controlword says
        'enable operation' (no state change), only the firmware's object-dictionary callbacks,
        on a plant without sensor noise, drive-side gains or stuck joints.  Then does what
        :meth:`_sync` does for each (the values, the object dictionary, the counters and the
        TPDOs, in the same order).  False, having changed nothing: :meth:`_sync` serves the bus."""
        plant = self.plant
        if plant._pd or plant._stuck:
            return False
        drives = self._drive_list
        inputs = []             # no RPDO row, target torque 0x6071, max torque 0x6072 of each drive
        received = []           # per drive: None, or (its RPDO map, target bytes, controlword bytes, value)
        cw_enable = _CW_ENABLE
        from_bytes = int.from_bytes
        fms = []                # each drive's _FastMaps
        fast_case = self._fast_case
        for d in drives:
            fm = d.fast
            fms.append(fm)
            if not fast_case(d):
                return False
            pm = fm.rx.pm
            if pm.is_received:
                data = bytes(pm.data)
                if len(data) < fm.rx.nbytes:
                    return False                            # not processed: EMCY (the Python path)
                o = fm.cw_off
                cwb = data[o:o + 2]
                cw = cw_enable.get(cwb)
                if cw is None:
                    cw = from_bytes(cwb, "little")
                    cw = cw_enable[cwb] = cw if codec.controlword_command(cw) == "enable_operation" else -1
                if cw < 0:
                    return False
                o = fm.tg_off
                tg = data[o:o + 2]
                received.append((pm, tg, cwb, cw))
                inputs += (-1, from_bytes(tg, "little", signed=True))
            else:
                received.append(None)
                inputs += (-1, self._u(d, 0x6071, 0, "<h"))
            inputs.append(self._max_torque(d))
            if fm.units is not d.units:
                self._fast_constants(d)
        combo = self._fast_combo
        if combo is None or combo[0] != fms:
            combo = self._fast_combo = self._combo(fms)
        _, lay, plans, _, out_arb, out = combo
        res = self._fast_res
        self._fast_in.reshape(-1)[:] = inputs
        self._fast_errs.reshape(-1)[:] = [x for d in drives for x in (d.error_code, d.error_register)]
        sw0, sw1 = self._sw_fast
        with plant._lock:
            try:
                status = _ck.cia402_sync(self._fast_K, self._fast_joints, self._no_rx, self._fast_in, self._fast_errs,
                                         lay, sw0, sw1, codec.MODE_CST, plant._cmd, plant._q, plant._qd,
                                         plant._tau_applied, res, self._fast_tau, out_arb, out)
            except TypeError:           # the plant's state in arrays of another layout: the Python path
                return False
        if status != _ck.ST_OK:
            return False
        for d, got, row in zip(drives, received, res.tolist()):
            d.sync_count += 1
            d.meas = None
            if got is not None:
                pm, tg, cwb, d.cw = got
                pm.is_received = False
                store = d.node.data_store
                obj = store.get(0x6071)
                if obj is None:
                    obj = store[0x6071] = {}
                obj[0] = tg
                obj = store.get(0x6040)
                if obj is None:
                    obj = store[0x6040] = {}
                obj[0] = cwb
            d.limit_active = row[0] == 1
            d.commands += 1
        append = self._out.frames.append
        raw = out.tobytes()
        w = out.shape[1]
        for k, (plan, i) in enumerate(plans):
            if drives[i].sync_count % plan.trans_type == 0:
                data = raw[w * k + 1:w * k + 1 + plan.nbytes]
                plan.pm.data[:] = data
                append((plan.cob_id, data))
        return True

    @staticmethod
    def _combo(fms: list) -> tuple:
        """:attr:`_fast_combo` of the drives' PDO maps ``fms``."""
        lay, plans, every = _layout(fms)
        m = len(plans)
        return fms, lay, plans, every, np.zeros(m, dtype=np.int64), np.zeros((m, 9), dtype=np.uint8)

    @staticmethod
    def _fast_case(d: _Drive) -> bool:
        """The drive is in the case the compiled SYNC serves: PDO maps of the form
        :class:`_FastMaps` on a plant without sensor noise, OPERATIONAL, OPERATION ENABLED in CST,
        no reaction running, its brake released, connected, only the firmware's write callbacks."""
        fm = d.fast
        node = d.node
        if (fm is None or d.state is not _OE or d.reaction is not None or d.silent or d.brake_released is not True
                or node.nmt._state != _NMT_OPERATIONAL or node._write_callbacks != d.own_writes
                or fm.quantum is None):
            return False
        mode = node.data_store.get(0x6060)
        return mode is not None and mode.get(0) == _CST_RAW

    def _max_torque(self, d: _Drive) -> int:
        """The drive's max torque 0x6072 [per mille] (what ``_u`` gives, the stored value read
        directly)."""
        lim = d.node.data_store.get(0x6072)
        lim = None if lim is None else lim.get(0)
        return int.from_bytes(lim, "little") if lim is not None and len(lim) == 2 else self._u(d, 0x6072, 0, "<H")

    def _fast_constants(self, d: _Drive) -> None:
        """The drive's row of the compiled SYNC's constants (:data:`~drivers.sim._cia402_kernel.K_SIZE`)
        from its units and mapping."""
        i = self._drive_list.index(d)
        K, u, m = self._fast_K, d.units, d.cfg.mapping
        K[i, _ck.K_SIGN], K[i, _ck.K_GEAR], K[i, _ck.K_EFF] = m.sign, m.gear_ratio, m.efficiency
        K[i, _ck.K_OFFSET], K[i, _ck.K_RAD_PER_COUNT] = m.offset_rad, u.rad_per_count
        K[i, _ck.K_RAD_S_PER_COUNT_S], K[i, _ck.K_NM_PER_PERMILLE] = u.rad_s_per_count_s, u.nm_per_permille
        K[i, _ck.K_QUANTUM] = d.fast.quantum
        d.fast.units = u

    def _sync(self, d: _Drive, t_s: float) -> None:
        d.sync_count += 1
        d.meas = None
        self._sample(d)
        for plan in d.rx_plans:
            if plan.pm.is_received and plan.trans_type <= 240:
                self._apply_rpdo(d, plan)
        self._output(d)
        if d.state == State.OPERATION_ENABLED and self._mode(d) == codec.MODE_CST:
            d.commands += 1
        if d.silent:
            return
        frames = self._out.frames
        for plan in d.tx_plans:
            if d.sync_count % plan.trans_type == 0:
                data = plan.pm.data
                for f in plan.fields:
                    reader = f.reader
                    if reader is None:
                        raw = d.node.get_data(f.index, f.sub)
                    else:
                        v = reader(d)
                        try:
                            raw = f.pack(v)
                        except struct.error:
                            raw = f.od.encode_raw(v)        # raises what get_data raises
                    if f.aligned:
                        data[f.off:f.off + len(raw)] = raw
                    else:
                        f.var.set_data(raw)
                frames.append((plan.cob_id, bytes(data)))

    def _sync_each(self, t_s: float) -> None:
        """The SYNC by the Python path: :meth:`_sync` of every drive in OPERATIONAL."""
        for d in self._drives.values():
            if d.node.nmt._state == _NMT_OPERATIONAL:
                self._sync(d, t_s)

    def _nmt_changed(self, d: _Drive, before: int, t_s: float) -> None:
        self._generation += 1
        after = d.node.nmt._state
        if after == _NMT_INIT:
            # reset node / communication: back to pre-operational with a boot-up message
            if d.state in _POWER_ON:
                d.reaction = None
                d.state = State.SWITCH_ON_DISABLED
            if d.state == State.FAULT and not d.cause:
                d.state = State.SWITCH_ON_DISABLED
                d.error_code = 0
                d.error_register = 0
            self._output(d)
            d.node.nmt.send_command(0x80)        # sends nothing itself from a reset state ...
            self._out.frames.append(can.Message(arbitration_id=codec.heartbeat_id(d.cfg.node_id),
                                                data=b"\x00", is_extended_id=False))
            d.rpdo_ready, d.tpdo_ready = [], []
            d.rx_plans, d.tx_plans, d.rx_own, d.fast = [], [], {}, None
        elif after == _NMT_OPERATIONAL and before != _NMT_OPERATIONAL:
            self._read_pdo_config(d)
        elif before == _NMT_OPERATIONAL and after != _NMT_OPERATIONAL:
            d.rpdo_ready, d.tpdo_ready = [], []
            d.rx_plans, d.tx_plans, d.rx_own, d.fast = [], [], {}, None
            if d.state in (State.OPERATION_ENABLED, State.QUICK_STOP_ACTIVE) and d.reaction is None:
                d.state = State.SWITCH_ON_DISABLED        # communication lost: power stage off
                self._output(d)

    # -- EmulatedDevice ------------------------------------------------------------------------------
    def accepts(self, msg: can.Message) -> bool:
        return not msg.is_extended_id and not msg.is_error_frame

    #: on_frame refuses what accepts refuses itself (the host skips the pre-check)
    on_frame_filters = True

    def _hb_period(self, d: _Drive) -> float:
        ms = self._u(d, 0x1017, 0, "<H")
        return ms / 1000.0 if ms else math.inf

    def _consumer(self, d: _Drive) -> tuple[int, float]:
        v = self._u(d, 0x1016, 1)
        return (v >> 16) & 0x7F, (v & 0xFFFF) / 1000.0

    def next_timer_s(self) -> float:
        with self._lock:
            if self._out.frames and self.plant is not None:
                return self.plant.t_s      # an EMCY raised between bus events: send it now
            t = math.inf
            for d in self._drives.values():
                node_c, tc = self._consumer(d)
                armed = node_c and tc > 0 and math.isfinite(d.consumer_last)
                t = min(t, d.boot_due, d.hb_due, d.next_check, d.consumer_last + tc if armed else math.inf)
            return t

    def on_timer(self, t_s: float) -> list[can.Message]:
        with self._served:
            self._timers(t_s)
            return self._take_messages()

    def _timers(self, t_s: float) -> None:
        """The drives' timed events due at ``t_s`` (the lock held; what they send stays in the
        outbox)."""
        for d in self._drives.values():
            if d.boot_due <= t_s:
                self._generation += 1
                d.boot_due = math.inf
                d.node.nmt.send_command(0x80)           # INITIALISING -> PRE-OPERATIONAL
                if not d.silent:
                    self._out.frames.append(can.Message(arbitration_id=codec.heartbeat_id(d.cfg.node_id),
                                                        data=b"\x00", is_extended_id=False))
                d.hb_due = t_s + self._hb_period(d)
            if d.hb_due <= t_s:
                d.hb_due = t_s + self._hb_period(d)
                if not d.silent:
                    self._out.frames.append(can.Message(arbitration_id=codec.heartbeat_id(d.cfg.node_id),
                                                        data=codec.encode_heartbeat(d.node.nmt._state),
                                                        is_extended_id=False))
            node_c, tc = self._consumer(d)
            if node_c and tc > 0 and math.isfinite(d.consumer_last) and d.consumer_last + tc <= t_s:
                d.consumer_last = -math.inf          # disarmed until the next heartbeat
                if d.state in _POWER_ON:
                    self._fault(d, codec.EMCY_HEARTBEAT, t_s)
                elif not d.silent:
                    d.node.emcy.send(codec.EMCY_HEARTBEAT, d.error_register | 0x10)
            if d.next_check <= t_s:
                _, _, qd, _ = self.plant.measure()
                if abs(float(qd[d.cfg.joint])) < d.cfg.standstill_rad_s or \
                        t_s - d.reaction_t0 >= d.cfg.max_brake_s:
                    self._end_reaction(d)
                else:
                    d.next_check = t_s + _REACTION_CHECK_S

    def on_frame(self, msg: can.Message, t_s: float) -> list[can.Message] | None:
        if msg.is_remote_frame or msg.is_extended_id or msg.is_error_frame:
            return None                 # the last two: what accepts refuses
        with self._served:
            if not self._frame(msg.arbitration_id, msg.data, t_s):
                return None
            return self._take_messages()

    #: on_fields answers as on_frame, with (arbitration_id, data) pairs (EmulatedDevice.fields_native)
    fields_native = True

    def on_fields(self, arb: int, data: bytes, remote_dlc: int | None, t_s: float) -> list[tuple[int, bytes]] | None:
        if remote_dlc is not None:
            return None                 # a remote frame: on_frame ignores it too
        with self._served:
            if not self._frame(arb, data, t_s):
                return None
            return self._take_pairs()

    def on_fields_batch(self, frames, t_s: float) -> list[tuple[int, bytes]] | None:
        """:meth:`on_fields` of each of ``frames`` in turn, all received at ``t_s``, in one call: the
        same answers, in the same order, and the same drives' state after it, for a cycle's frames
        on this bus: synchronous RPDOs then one SYNC, the last frame.

        An RPDO the emulator receives itself (:meth:`_own_rpdo`) is taken as its map's
        ``on_message`` takes it; one the drives ignore (no such node, a disconnected drive, a
        node not OPERATIONAL) changes nothing, as on :meth:`on_fields`; then the SYNC
        (:meth:`_sync_fast`, else the Python path).  Returns ``None``, having changed nothing,
        for any other run (another frame, an RPDO canopen's network must deliver): the caller
        serves the frames one by one.  Only for frames served at one loop time with no timed
        event due between them (:meth:`EmulatorHost.serve_fields` decides): receiving an RPDO
        moves no timer, so the host's poll before each frame finds nothing due.
        """
        arb, _, remote_dlc = frames[-1]
        if arb != codec.SYNC_ID or remote_dlc is not None:
            return None
        drives = self._drives
        own = []
        for k in range(len(frames) - 1):
            arb, data, remote_dlc = frames[k]
            if remote_dlc is not None or not 0x201 <= arb <= 0x57F:
                return None
            d = drives.get(arb & 0x7F)
            if d is None or d.silent or d.node.nmt._state != _NMT_OPERATIONAL:
                continue                    # ignored (_frame returns False)
            plan = self._own_rpdo(d, arb)
            if plan is None:
                return None
            own.append((plan.pm, data))
        with self._served:
            received = self._received
            for pm, data in own:
                received(pm, data, t_s)
            out = self._out
            clean = not out.frames
            if self._sync_fast(t_s):
                if clean:
                    # only the TPDOs the compiled SYNC sent: pairs already
                    pairs, out.frames = out.frames, []
                    return pairs
            else:
                self._sync_each(t_s)
            return self._take_pairs()

    def on_batch(self, arbs: tuple, payloads: np.ndarray, t_s: float, out_arb: np.ndarray,
                 out: np.ndarray) -> int | None:
        """A cycle on this bus served in one call (:meth:`EmulatedDevice.on_batch`, an inline host on
        a lock-step clock): one RPDO to each drive then the SYNC, the RPDOs' bytes as the master's
        driver encoded them (``payloads``), the TPDOs written to its reply buffer; the same as
        :meth:`on_fields` of each frame in turn (the RPDOs received as their maps' ``on_message``
        takes them, applied at the SYNC: the object dictionary's 0x6071 / 0x6040, the controlword,
        the counters, the PDO buffers; the plant's command; the TPDOs' bytes), where every drive is
        in the case :meth:`_sync_fast` serves and each RPDO maps the controlword then the target
        torque (4 bytes), its controlword 'enable operation', every TPDO sent at every SYNC,
        nothing in the outbox.  Else None, having changed nothing: the caller sends the frames.

        What decides it is checked once per :attr:`_generation`; a write to the object
        dictionary by its callbacks (an SDO download, an RPDO the Python path applies), a state,
        NMT, fault or subscription change counts one there.

        Parameters
        ----------
        arbs : tuple of int
            The RPDOs' COB-IDs, then the SYNC's.
        payloads : ndarray of uint8, shape (>= len(arbs) - 1, 4)
            The RPDOs' payloads, in the order of ``arbs``.
        t_s : float
        out_arb : ndarray of int64, shape (>= m,)
            Out: the TPDOs' COB-IDs, in the order :meth:`on_fields` of the SYNC sends them.
        out : ndarray of uint8, shape (>= m, >= 9)
            Out: each TPDO's length, then its bytes.

        Returns
        -------
        int or None
            The number of TPDOs written (m).
        """
        with self._lock:
            plant = self.plant
            if plant is None or plant._pd or plant._stuck or self._out.frames:
                return None
            prep = self._batch_prep
            if prep is None or prep[0] != self._generation or (prep[1] is not arbs and prep[1] != arbs):
                if self._owed:
                    self._settle()
                prep = self._prepare_batch(arbs)
                if prep is None:
                    return None
            _, _, per, tl, errs, lay, tx = prep
            for d, n, _, _, _, _ in per:
                if len(d.node._write_callbacks) != n:
                    return None             # a callback added: the Python path calls it
            sw0, sw1 = self._sw_fast
            res = self._fast_res
            with plant._lock:
                try:
                    status = _ck.cia402_sync(self._fast_K, self._fast_joints, payloads, tl, errs, lay, sw0, sw1,
                                             codec.MODE_CST, plant._cmd, plant._q, plant._qd, plant._tau_applied,
                                             res, self._fast_tau, out_arb, out)
                except TypeError:       # arrays of another layout: frame by frame
                    return None
            if status != _ck.ST_OK:
                return None
            raw = payloads.tobytes()
            for _, _, pm, target, control, a in per:
                # the RPDO received (PdoMap.on_message) and applied at the SYNC (_apply_rpdo)
                pm.data = bytearray(raw[a:a + 4])
                ts = pm.timestamp
                if ts is not None:
                    pm.period = t_s - ts
                pm.timestamp = t_s
                pm.is_received = False
                target[0] = raw[a + 2:a + 4]
                control[0] = raw[a:a + 2]
            # the rest (nothing the object dictionary holds) when anything but this path looks
            self._owed += 1
            self._owed_prep = prep
            self._owed_res = res.tolist()
            m = len(tx)
            self._owed_tx = (out[:m].tobytes(), out.shape[1])
            return m

    def _settle(self) -> None:
        """What the :attr:`_owed` cycles :meth:`on_batch` served did to the drives' own state and
        did not write: each drive's SYNCs and commands counted, the last cycle's controlword,
        internal limit and TPDO buffers (``PdoMap.data``), its measurement cache cleared.  Called
        wherever anything but :meth:`on_batch` reads them: every frame or timer served, the
        accessors of a drive (:meth:`_drive`, :meth:`local_node`), :meth:`statusword`, a new
        preparation."""
        n, self._owed = self._owed, 0
        prep = self._owed_prep
        for (d, *_), row in zip(prep[2], self._owed_res):
            d.cw = row[_ck.R_CW]
            d.sync_count += n
            d.meas = None
            d.limit_active = row[_ck.R_LIMIT] == 1
            d.commands += n
        raw, w = self._owed_tx
        for k, (pm, nb) in enumerate(prep[6]):
            pm.data[:] = raw[w * k + 1:w * k + 1 + nb]

    def _prepare_batch(self, arbs: tuple) -> tuple | None:
        """What :meth:`on_batch` needs for the COB-IDs ``arbs``, kept until :attr:`_generation`
        moves: None when a drive cannot take the batch path now."""
        drives = self._drive_list
        if len(arbs) != len(drives) + 1 or arbs[-1] != codec.SYNC_ID:
            return None
        rows, lims, fms = [], [], []
        for d in drives:
            fm = d.fast
            if not self._fast_case(d):
                return None
            ds = d.node.data_store
            rx = fm.rx
            if (0 not in ds.get(0x6071, ()) or 0 not in ds.get(0x6040, ())
                    or rx.nbytes != 4 or fm.cw_off != 0 or fm.tg_off != 2 or arbs.count(rx.cob_id) != 1
                    or self._own_rpdo(d, rx.cob_id) is not rx):
                return None
            k = arbs.index(rx.cob_id)
            if k == len(drives):
                return None
            rows.append(k)
            lims.append(self._max_torque(d))
            if fm.units is not d.units:
                self._fast_constants(d)
            fms.append(fm)
        combo = self._fast_combo
        if combo is None or combo[0] != fms:
            combo = self._fast_combo = self._combo(fms)
        _, lay, plans, every, _, _ = combo
        if not every:
            return None
        tl = np.array([(k, 0, lim) for k, lim in zip(rows, lims)], dtype=np.int64).reshape(len(rows), _ck.T_SIZE)
        errs = np.array([(d.error_code, d.error_register) for d in drives], dtype=np.int64).reshape(len(rows), 2)
        # per drive: its write callbacks' number, RPDO map, the stored 0x6071 and 0x6040 (the
        # dictionaries LocalNode.set_data writes into) and its payload's offset in the RPDOs' bytes
        per = tuple((d, len(d.node._write_callbacks), fm.rx.pm, d.node.data_store[0x6071],
                     d.node.data_store[0x6040], 4 * k) for d, fm, k in zip(drives, fms, rows))
        self._batch_prep = (self._generation, arbs, per, tl, errs, lay,
                            tuple((plan.pm, plan.nbytes) for plan, _ in plans))
        return self._batch_prep

    def on_timer_fields(self, t_s: float) -> list[tuple[int, bytes]]:
        with self._served:
            self._timers(t_s)
            return self._take_pairs()

    def _take_messages(self) -> list[can.Message]:
        """What the drives sent since the last call, as messages (the outbox emptied)."""
        out, self._out.frames = self._out.frames, []
        return [_msg(*m) if type(m) is tuple else m for m in out]

    def _take_pairs(self) -> list[tuple[int, bytes]]:
        """What the drives sent since the last call, as ``(arbitration_id, data)`` pairs (the
        outbox emptied); every frame a drive sends is a data frame with a standard id."""
        out, self._out.frames = self._out.frames, []
        pairs = []
        for m in out:
            if type(m) is not tuple:
                if m.is_remote_frame:
                    raise DriverError(f"an emulated CiA 402 drive sent a remote frame (id 0x{m.arbitration_id:X}): "
                                      "not a frame of its firmware")
                m = (m.arbitration_id, bytes(m.data))
            pairs.append(m)
        return pairs

    def _frame(self, arb: int, data, t_s: float) -> bool:
        """Handle one data frame with a standard id (the lock held); False: not for these drives
        (nothing changed, what the outbox holds stays there)."""
        if arb == codec.SYNC_ID:
            if not self._sync_fast(t_s):
                self._sync_each(t_s)
        elif arb == 0:
            self._generation += 1
            before = {k: d.node.nmt._state for k, d in self._drives.items()}
            silent = {k for k, d in self._drives.items() if d.silent}
            for k in silent:
                before.pop(k)
            for k in silent:      # a disconnected drive does not hear the command
                self.network.unsubscribe(0, self._drives[k].node.nmt.on_command)
            self.network.notify(arb, bytearray(data), t_s)
            for k in silent:
                self.network.subscribe(0, self._drives[k].node.nmt.on_command)
            for k, b in before.items():
                d = self._drives[k]
                if d.node.nmt._state != b:
                    self._nmt_changed(d, b, t_s)
                    if d.silent:
                        self._out.frames.clear()
        elif 0x701 <= arb <= 0x77F:
            for d in self._drives.values():
                node_c, tc = self._consumer(d)
                if node_c == arb - 0x700 and not d.silent:
                    d.consumer_last = t_s
        else:
            d = self._drives.get(arb & 0x7F)
            if d is None or d.silent:
                return False
            if 0x601 <= arb <= 0x67F:
                if d.node.nmt._state == _NMT_STOPPED:
                    return False
                self._sample(d)
            elif 0x201 <= arb <= 0x57F:
                if d.node.nmt._state != _NMT_OPERATIONAL:
                    return False
                if self._receive_own(d, arb, data, t_s):
                    return True
            self.network.notify(arb, bytearray(data), t_s)
        return True


def devices_from_driver(driver, emu_sec, wd, now) -> dict:
    """One :class:`Cia402Emulator` per bus of a built :class:`~drivers.cia402.Cia402Driver`
    (node ids, units, mappings and EDS from the driver's axes; ``[driver.emulator]`` keys
    ``eds`` (the drives' own object dictionary when it differs from the driver's EDS: a drive
    that lacks objects the EDS lists), ``brake_kd_nm_s_per_rad``, ``standstill_rad_s``,
    ``max_brake_s``)."""
    if wd is not None:
        raise emu_sec.error("watchdog_timeout_s", "CiA 402 drives watch the master heartbeat instead "
                                                  "(driver.master_heartbeat_timeout_s)")
    eds = emu_sec.str("eds", None, doc="CiA 402: the emulated drives' own object dictionary (default: the "
                                       "driver's EDS)")
    if eds is not None:
        try:
            eds = eds_path(eds)
        except ConfigError as err:
            raise emu_sec.error("eds", err.message) from err
    kd = emu_sec.float("brake_kd_nm_s_per_rad", 5.0, minimum=0.0, strict_min=True,
                       doc="CiA 402: damping of the drives' own quick-stop and fault-reaction ramp [N m s/rad]")
    still = emu_sec.float("standstill_rad_s", 0.02, minimum=0.0, strict_min=True,
                          doc="CiA 402: below this speed a braking drive counts as stopped [rad/s]")
    tmax = emu_sec.float("max_brake_s", 1.0, minimum=0.0, strict_min=True,
                         doc="CiA 402: the longest a drive's ramp brakes before it switches off [s]")
    from .planted import device_mappings

    by_bus: dict[int, list] = {}
    maps = device_mappings(emu_sec, [ax.mapping for ax in driver.axes])
    for j, ax in enumerate(driver.axes):
        by_bus.setdefault(id(ax.transport), []).append(
            Cia402DriveConfig(ax.node_id, j, ax.units, maps[j], eds or ax.eds, kd, still, tmax))
    t0 = float(now())
    try:
        return {k: Cia402Emulator(v, t0_s=t0) for k, v in by_bus.items()}
    except ConfigError as err:
        raise emu_sec.error(None, str(err)) from err
