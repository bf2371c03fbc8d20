"""Build simulated drivers from a ``[driver]`` config table.

Three driver types are registered in :data:`drivers.registry.DRIVER_TYPES`:

``sim_direct``
    :class:`~drivers.sim.direct.DirectPlantDriver` on a simulated plant (no bus).
``sim_mit_can`` / ``sim_odrive_can``
    The *real* :class:`~drivers.mit.MitCanDriver` / ODrive driver, built from
    the same keys as ``mit_can`` / ``odrive_can``, talking over an in-process
    python-can ``virtual`` bus to emulated devices
    (:mod:`drivers.sim.emulators`) that drive the simulated plant.  A
    hardware config is turned into its simulation by changing ``type`` and
    adding a ``[driver.plant]`` table; ``bus``/``buses`` entries are kept only
    for their names (each named bus becomes its own virtual channel).

Keys
----
Every key of these tables (type, unit, bounds, default, meaning) is declared once, where it is
read, and listed from there by ``torqueloop check --explain TOPIC`` (one source of truth; this
docstring does not repeat them): ``driver.sim_direct``, ``driver.sim_mit_can`` ... (every table
of one driver type), ``driver.plant`` (the plant: mass and inertia factors, payload, friction,
current lag, encoder, noise, integrator, engine and the MuJoCo keys, brakes), ``driver.emulator``
(reply latency, watchdog, serving thread or inline, MIT reply variant, ODrive cyclic messages,
planted errors), ``driver.faults`` (seeded frame faults, device faults, bus-off, reboots).
For example::

    [driver]
    type = "sim_mit_can"             # or "sim_direct", "sim_odrive_can", ...
    # ... every key of the real driver (joints, timeouts, bus names) ...
    [driver.plant]
    mass_factor = 1.1
    current_lag_s = 0.0005
    [driver.faults]
    seed = 3
    drop_prob = 0.01

Joint mappings (gear ratio, sign, offset, efficiency) and MIT limits of the
emulated devices are taken from the built driver's joints, so device and
driver always agree.
"""

from __future__ import annotations

import math
import uuid
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from dynamics.base import Model, ParallelModel
from dynamics.config import Section
from dynamics.errors import ConfigError, ModelError, TorqueloopError
from ..base import Command, Driver, Feedback
from .direct import DirectPlantDriver
from .planted import device_mappings
from .plant import SimulatedPlant

__all__ = ["plant_from_section", "build_sim_direct", "build_sim_mit_can", "build_sim_odrive_can",
           "build_sim_cia402_can", "EmulatedDriver"]


def _per_joint(sec: Section, key: str, n: int, default=None, *, minimum=None, doc=None):
    """A float or a list of n floats (or ``default`` when absent); ``doc``: the key's meaning."""
    doc = doc and doc + " (a number, or one per joint)"
    if not sec.has(key, doc=doc):
        sec.raw(key, None)
        return default
    v = sec.raw(key)
    if isinstance(v, list):
        return sec.as_array(key, v, (n,), minimum=minimum)
    return sec.float(key, minimum=minimum, doc=doc)


#: plant models scaled so far, {(id(model), mass factor, inertia factor): (model, scaled)}: the
#: runs of a sweep with the same plant draw simulate one model (the entry keeps ``model`` alive,
#: so its id names no other model while it is here)
_SCALED: dict = {}
#: entries :data:`_SCALED` keeps (the oldest goes first)
_SCALED_ENTRIES = 8


def _scaled(model: Model, mass_factor: float, inertia_factor: float | None) -> Model:
    """``model.scaled(mass_factor, inertia_factor)``, the same object for the same model and factors.

    Models are constant parameters (a plant keeps its state itself), so plants may share one.
    """
    key = (id(model), mass_factor, inertia_factor)
    hit = _SCALED.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    out = model.scaled(mass_factor, inertia_factor)
    if len(_SCALED) >= _SCALED_ENTRIES:
        _SCALED.pop(next(iter(_SCALED), None), None)
    _SCALED[key] = (model, out)
    return out


def plant_from_section(sec: Section | None, model: Model, *, now: Callable[[], float],
                       rng: np.random.Generator | None = None,
                       base_dir: str | Path | None = None) -> Plant:
    """Build a :class:`SimulatedPlant` from a ``[plant]`` table (see module docstring).

    Parameters
    ----------
    sec : Section or None
        The table (``None``: all defaults).
    model : Model
        The controller's model; the plant uses ``model.scaled(...)`` of it (or
        the ``robot`` file).
    now : callable
        Loop clock; the plant starts at ``now()``.
    rng : numpy.random.Generator, optional
        Noise source when the table has no ``seed``.
    base_dir : path, optional
        Directory for a relative ``robot`` path (default: the config file's).
    """
    if not isinstance(model, Model):
        raise ConfigError(f"a dynamics.Model is required to simulate, got {type(model).__name__}",
                          sec.file if sec else None, sec.path if sec else None)
    sec = sec if sec is not None else Section({}, None, "plant")
    root = Path(base_dir) if base_dir is not None else (Path(sec.file).parent if sec.file else Path.cwd())
    engine = sec.str("engine", "numba", choices=["numba", "mujoco"],
                     doc="what integrates the rigid-body dynamics: the robot file's numba kernels, or "
                         "MuJoCo (pip install 'torqueloop[mujoco]')")
    robot_doc = "the plant's robot file, relative to this config (default: the controller's model)"
    if sec.has("robot", doc=robot_doc):
        from dynamics import load_model
        path = Path(sec.str("robot", doc=robot_doc))
        if not path.is_absolute():
            path = root / path
        base = load_model(path)
        if base.dof != model.dof:
            raise sec.error("robot", f"plant robot has {base.dof} joints, the controller's model "
                                     f"{model.dof}")
    else:
        base = model
    mf = sec.float("mass_factor", 1.0, minimum=0.0, strict_min=True,
                   doc="every body's mass in the plant = the model's x this (a model error)")
    inf = sec.float("inertia_factor", None, minimum=0.0, strict_min=True,
                    doc="every body's inertia x this (default: mass_factor)")
    plant_model = base if (mf == 1.0 and inf in (None, 1.0)) else _scaled(base, mf, inf)
    payload = sec.float("payload_kg", 0.0, minimum=0.0,
                        doc="a point mass at the tool the controller does not model [kg] (both engines; "
                            "MuJoCo with mjcf: use [driver.plant.payload])")
    if payload > 0.0:
        try:
            plant_model = plant_model.with_payload(payload)
        except ModelError as err:
            raise sec.error("payload_kg", str(err)) from err
    n = plant_model.dof
    q0_doc = "initial joint positions [rad or m] (default: zeros, or a parallel robot's home pose)"
    if sec.has("q0", doc=q0_doc):
        q0 = sec.vector("q0", n, doc=q0_doc)
    elif isinstance(plant_model, ParallelModel):
        q0 = np.asarray(plant_model.inverse_kinematics(plant_model.home_pose), dtype=float)
    else:
        q0 = np.zeros(n)
    qd0 = sec.vector("qd0", n, None, doc="initial joint velocities [rad/s or m/s] (default: zeros)")
    kw = dict(
        viscous=_per_joint(sec, "viscous", n, minimum=0.0,
                           doc="viscous friction [N m s/rad] (default: the robot file's drive friction)"),
        coulomb=_per_joint(sec, "coulomb", n, minimum=0.0,
                           doc="Coulomb friction [N m] (default: the robot file's drive friction)"),
        torque_limit_nm=_per_joint(sec, "torque_limit_nm", n, minimum=0.0,
                                   doc="torque the plant's actuators can give [N m] (default: the "
                                       "robot file's limits)"),
        current_lag_s=sec.float("current_lag_s", 0.0, minimum=0.0,
                                doc="time constant of the first-order current-loop lag [s]"),
        encoder_counts_per_rev=sec.int("encoder_counts_per_rev", None, minimum=1,
                                       doc="joint-side encoder resolution [counts/turn] (default: exact)"),
        position_noise_std_rad=_per_joint(sec, "position_noise_std_rad", n, 0.0, minimum=0.0,
                                          doc="std of the measured position's noise [rad]"),
        velocity_noise_std_rad_s=_per_joint(sec, "velocity_noise_std_rad_s", n, 0.0, minimum=0.0,
                                            doc="std of the measured velocity's noise [rad/s]"),
        torque_noise_std_nm=_per_joint(sec, "torque_noise_std_nm", n, 0.0, minimum=0.0,
                                       doc="std of the measured torque's noise (current sensor) [N m]"),
        substeps=sec.int("substeps", 2, minimum=1, doc="integration steps per dt_max_s"),
        dt_max_s=sec.float("dt_max_s", 1e-3, minimum=0.0, strict_min=True,
                           doc="longest interval integrated at once [s]"),
        integrator=sec.str("integrator", "rk4", choices=["rk4", "semi_implicit_euler"] if engine == "numba"
                           else ["rk4", "implicitfast", "implicit", "euler"],
                           doc="the integration scheme (choices per engine)"),
    )
    engine_kw = _mujoco_keys(sec, engine, root, mf, inf)
    brakes = sec.bool("brakes", True, doc="holding brakes, engaged until the drive enables the joint and "
                                          "again when it disables or faults")
    if sec.has("brake_torque_nm") and not brakes:
        raise sec.error("brake_torque_nm", "given with brakes = false")
    brake_nm = _per_joint(sec, "brake_torque_nm", n, math.inf, minimum=0.0,
                          doc="holding torque of the brakes [N m] (default: they never slip)")
    if sec.has("brake_release_s") and not brakes:
        raise sec.error("brake_release_s", "given with brakes = false")
    brake_release_s = sec.float("brake_release_s", 0.0, minimum=0.0,
                                doc="mechanical release time of the brakes after the drive enables [s]")
    seed = sec.int("seed", None, minimum=0, doc="seed of the measurement noise (default: the run's)")
    sec.finish()
    if seed is not None:
        rng = np.random.default_rng(seed)
    if engine == "mujoco":
        try:
            from .mujoco_plant import MujocoPlant as engine_class
        except ConfigError as err:                  # the mujoco package is not installed
            raise sec.error("engine", err.message) from err
        if engine_kw.get("mjcf_path") is not None:
            if payload > 0.0:
                raise sec.error("payload_kg", "changes the robot file's model, not the MJCF: with "
                                              "mjcf, fix a body with [driver.plant.payload]")
            plant_model = base                # the user's MJCF is scaled itself
    else:
        engine_class = SimulatedPlant
    try:
        return engine_class(plant_model, q0=q0, qd0=qd0, rng=rng, t0_s=float(now()),
                            brake_torque_nm=brake_nm if brakes else 0.0, brakes_engaged=brakes,
                            brake_release_s=brake_release_s, **kw, **engine_kw)
    except ConfigError as err:
        if err.field == "rng":
            raise sec.error("seed", "measurement noise needs a seed (no rng was given)") from err
        raise ConfigError(err.message, sec.file,
                          sec.field(err.field) if err.field else (sec.path or None)) from err


#: the keys only the MuJoCo engine takes, and their meanings
_MUJOCO_DOCS = {
    "mjcf": "engine = 'mujoco': the user's own MJCF file, relative to this config (joints matched by "
            "name to the controller's, each driven by an actuator; default: written from the robot file)",
    "solref": "engine = 'mujoco': [timeconst_s, dampratio] of the MJCF's equality constraints (loop "
              "closures; default: the file's)",
    "solimp": "engine = 'mujoco': [dmin, dmax, width_m, midpoint, power] impedance of those constraints "
              "(default: the file's)",
    "payload_body": "engine = 'mujoco': the body [driver.plant.payload] is fixed to (default: the tool's)",
    "payload": "engine = 'mujoco': a rigid body the controller does not model (mass_kg, com_m, inertia_kg_m2)",
}


def _mujoco_keys(sec: Section, engine: str, root: Path, mass_factor: float,
                 inertia_factor: float | None) -> dict:
    """The keys only the MuJoCo engine takes (``mjcf``, ``solref``, ``solimp``, ``payload``,
    ``payload_body``) as its keyword arguments; refused with ``engine = "numba"``."""
    if engine != "mujoco":
        for key, doc in _MUJOCO_DOCS.items():
            if sec.has(key, doc=doc):
                raise sec.error(key, 'needs engine = "mujoco"')
            sec.raw(key, None)
        return {}
    out: dict = {}
    if sec.has("mjcf", doc=_MUJOCO_DOCS["mjcf"]):
        path = Path(sec.str("mjcf", doc=_MUJOCO_DOCS["mjcf"]))
        out["mjcf_path"] = path if path.is_absolute() else root / path
        if not out["mjcf_path"].is_file():
            raise sec.error("mjcf", f"no such file: {out['mjcf_path']}")
        if mass_factor != 1.0 or inertia_factor not in (None, 1.0):
            out["mass_factor"] = mass_factor
            out["inertia_factor"] = inertia_factor
    else:
        sec.raw("mjcf", None)
    for key, size in (("solref", 2), ("solimp", 5)):
        if sec.has(key, doc=_MUJOCO_DOCS[key]):
            out[key] = [float(v) for v in sec.vector(key, size, doc=_MUJOCO_DOCS[key])]
        else:
            sec.raw(key, None)
    out["payload_body"] = sec.str("payload_body", None, doc=_MUJOCO_DOCS["payload_body"])
    pay = sec.section("payload", None, doc=_MUJOCO_DOCS["payload"])
    if pay is not None:
        from .mujoco_plant import Payload
        try:
            out["payload"] = Payload(pay.float("mass_kg", minimum=0.0, strict_min=True,
                                               doc="mass of the payload [kg]"),
                                     pay.vector("com_m", 3, (0.0, 0.0, 0.0),
                                                doc="its centre of mass in the body's frame [m]"),
                                     pay.vector("inertia_kg_m2", 3, (0.0, 0.0, 0.0), minimum=0.0,
                                                doc="principal inertias about its centre of mass [kg m^2]"))
        except ConfigError as err:
            if err.file is not None:
                raise
            raise ConfigError(err.message, sec.file, sec.field(err.field)) from err
        pay.finish()
    return out


def build_sim_direct(section: Section, *, now: Callable[[], float], transports=None,
                     model: Model | None = None, rng: np.random.Generator | None = None
                     ) -> DirectPlantDriver:
    """Registry builder of ``type = "sim_direct"``: a plant and a DirectPlantDriver.

    Table keys: ``[plant]`` (see module docstring) and optional ``joint_names``.
    """
    if transports:
        raise section.error("type", "sim_direct uses no bus; do not pass transports")
    plant = plant_from_section(section.section("plant", {}), model, now=now, rng=rng)
    names = section.raw("joint_names", None)
    if names is not None and (not isinstance(names, list) or len(names) != plant.n_joints
                              or not all(isinstance(x, str) for x in names)):
        raise section.error("joint_names", f"expected {plant.n_joints} strings, got {names!r}")
    section.finish()
    return DirectPlantDriver(plant, now=now, joint_names=names)


class EmulatedDriver(Driver):
    """A real CAN driver plus the emulators and plant it talks to (owned together).

    Delegates the :class:`Driver` interface to :attr:`inner`; :meth:`close`
    closes the driver first (so its disable frames are still answered), then
    the emulator hosts.

    Attributes
    ----------
    inner : Driver
        The real driver (``MitCanDriver`` / ODrive driver).
    plant : Plant
    emulators : list of EmulatedDevice
        One per bus (in the order of the bus names).
    hosts : list of EmulatorHost
        One host serving every bus.
    fault_buses : list of FaultInjectingBus
        The fault injectors on the driver's side (empty without ``[faults]``).
    """

    def __init__(self, inner: Driver, plant: Plant, hosts: list, emulators: list,
                 fault_buses: list, *, faults_during_enable: bool = True):
        self.inner = inner
        self.plant = plant
        self.hosts = hosts
        self.emulators = emulators
        self.fault_buses = fault_buses
        self.faults_during_enable = faults_during_enable
        self._closed = False
        #: scheduled drive reboots ``(t_s, emulator, id)`` (``[driver.faults] device_reboot_ids``)
        #: and device faults ``(t_s, emulator, id, kind)`` (``device_fault_ids``), ``t_s`` in loop
        #: time: from the first :meth:`cycle` (the loop's time 0; the clock's own time then is
        #: the build and the enable on the wall clock, 0 on the lock-step clock), and the loop
        #: clock they are timed on (set by the builder)
        self.reboots: list = []
        self.device_faults: list = []
        self.now = None
        self._t0: float | None = None

    @property
    def n_joints(self) -> int:
        return self.inner.n_joints

    def _check_hosts(self) -> None:
        for h in self.hosts:
            h.check()

    def sync(self, timeout_s: float = 5.0) -> None:
        """Wait until every emulator host processed all frames sent so far (see EmulatorHost.sync)."""
        for h in self.hosts:
            h.sync(timeout_s)

    def enable(self) -> Feedback:
        self._check_hosts()
        if self.faults_during_enable or not self.fault_buses:
            return self.inner.enable()
        for b in self.fault_buses:
            b.active = False
        try:
            return self.inner.enable()
        finally:
            for b in self.fault_buses:
                b.active = True

    def disable(self) -> None:
        self.inner.disable()

    def fault_text(self, joint: int, code: int) -> str:
        return self.inner.fault_text(joint, code)

    def clear_faults(self) -> None:
        self._check_hosts()
        self.inner.clear_faults()

    def cycle(self, command: Command) -> Feedback:
        for h in self.hosts:
            h.check()  # a dead emulator thread: raise its error now
        if self._t0 is None and self.now is not None:
            self._t0 = self.now()
            for t_s, emu, cid, kind in self.device_faults:     # (the emulator times them on its clock)
                emu.schedule_device_fault(cid, kind, self._t0 + t_s)
        if self.reboots:
            t = self.now() - self._t0
            for item in [r for r in self.reboots if t >= r[0]]:
                self.reboots.remove(item)
                item[1].reboot(item[2])
        return self.inner.cycle(command)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        errors: list[BaseException] = []
        try:
            self.inner.close()
        except TorqueloopError as err:
            errors.append(err)
        for h in self.hosts:
            try:
                h.close()
            except TorqueloopError as err:
                errors.append(err)
        if errors:
            raise errors[0]

    @property
    def watchdog_s(self) -> float | None:
        """The real driver's :attr:`~drivers.base.Driver.watchdog_s` (the emulated drives')."""
        return self.inner.watchdog_s

    @watchdog_s.setter
    def watchdog_s(self, value) -> None:
        self.inner.watchdog_s = value

    def __getattr__(self, name):
        # driver-specific extras (set_zero, bus_flows, counters...) of the real driver
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _bus_names(section: Section) -> list[str]:
    from ..registry import DEFAULT_BUS
    if section.has("buses"):
        data = section.data["buses"]
        if not isinstance(data, Mapping) or not data:
            raise section.error("buses", "expected one or more [buses.<name>] tables")
        return list(data)
    return [DEFAULT_BUS]


def _fault_kwargs(sec: Section, rng: np.random.Generator | None
                  ) -> tuple[dict, np.random.Generator, bool]:
    seed = sec.int("seed", None, minimum=0, doc="seed of every fault decision (default: the run's)")
    if seed is not None:
        rng = np.random.default_rng(seed)
    if rng is None:
        raise sec.error("seed", "a seed is required for fault injection (no rng given)")
    kw = dict(
        drop_prob=sec.float("drop_prob", 0.0, minimum=0.0, maximum=1.0),
        delay_s=sec.float("delay_s", 0.0, minimum=0.0),
        duplicate_prob=sec.float("duplicate_prob", 0.0, minimum=0.0, maximum=1.0),
        reorder_prob=sec.float("reorder_prob", 0.0, minimum=0.0, maximum=1.0),
        corrupt_prob=sec.float("corrupt_prob", 0.0, minimum=0.0, maximum=1.0),
        corrupt_mode=sec.str("corrupt_mode", "truncate", choices=["truncate", "bitflip"]),
        bus_error_after=sec.int("bus_error_after", None, minimum=0),
        bus_restart_s=sec.float("bus_restart_s", None, minimum=0.0, maximum=3600.0),
        side=sec.str("side", "both", choices=["both", "send", "recv"]),
    )
    ids = sec.raw("silent_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise sec.error("silent_ids", f"expected a list of integer ids, got {ids!r}")
    kw["silent_ids"] = ids
    if kw["bus_restart_s"] is not None and kw["bus_error_after"] is None:
        raise sec.error("bus_restart_s", "needs bus_error_after")
    during_enable = sec.bool("during_enable", True, doc="faults also while the drives are being enabled "
                                                        "(false: frames pass unharmed during enable())")
    kw["device_fault"] = _device_fault(sec)
    kw["device_reboot"] = _device_reboot(sec)
    sec.finish()
    return kw, rng, during_enable


def _device_fault(sec: Section):
    """``device_fault`` / ``device_fault_ids`` / ``device_fault_at_s`` -> (kind, ids, t_s) or None."""
    docs = {"device_fault_ids": "device_fault: the CAN ids of the faulty drives",
            "device_fault_at_s": "device_fault: the loop time it starts at [s]"}
    if not sec.has("device_fault", doc="sim_mit_can: an unreported device fault: limp (no torque while "
                                       "replying) or frozen (replies repeat, last command held)"):
        for key in ("device_fault_ids", "device_fault_at_s"):
            if sec.has(key, doc=docs[key]):
                raise sec.error(key, "needs device_fault")
        return None
    from .mit_emulator import MIT_DEVICE_FAULTS
    kind = sec.str("device_fault", choices=list(MIT_DEVICE_FAULTS))
    ids = sec.raw("device_fault_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool)
                                                       for i in ids):
        raise sec.error("device_fault_ids", f"expected a non-empty list of CAN ids, got {ids!r}")
    t = sec.float("device_fault_at_s", 0.0, minimum=0.0)
    return kind, ids, t


def _device_reboot(sec: Section):
    """``device_reboot_ids`` / ``device_reboot_at_s`` -> (ids, t_s) or None."""
    if not sec.has("device_reboot_ids", doc="these drives power-cycle at device_reboot_at_s (MIT: out of "
                                            "motor mode, zero lost; ODrive: IDLE; CiA 402: object dictionary "
                                            "reset, PRE-OPERATIONAL, SWITCH ON DISABLED)"):
        if sec.has("device_reboot_at_s", doc="device_reboot_ids: the loop time they reboot at [s]"):
            raise sec.error("device_reboot_at_s", "needs device_reboot_ids")
        sec.raw("device_reboot_ids", None)      # read (recorded by `check --explain driver.faults`)
        return None
    ids = sec.raw("device_reboot_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise sec.error("device_reboot_ids", f"expected a non-empty list of device ids, got {ids!r}")
    return ids, sec.float("device_reboot_at_s", 0.0, minimum=0.0)


def _schedule_device_reboots(faults_sec: Section, spec, emulators: list, now) -> list:
    """Drives that reboot (power-cycle) at a loop time: ``(t_s, emulator, id)`` for each, checked
    by :class:`EmulatedDriver` before every cycle."""
    ids, t = spec
    out = []
    for did in ids:
        emu = next((e for e in emulators if did in (getattr(e, "can_ids", ()) or getattr(e, "node_ids", ()))), None)
        if emu is None or not hasattr(emu, "reboot"):
            raise faults_sec.error("device_reboot_ids", f"no emulated MIT motor, ODrive axis or CiA 402 drive with id {did}")
        out.append((t, emu, did))
    return out


def _schedule_device_faults(faults_sec: Section, spec, emulators: list) -> list:
    """Unreported device faults from a loop time: ``(t_s, emulator, id, kind)`` for each, handed to
    the emulator by :class:`EmulatedDriver` at its first cycle."""
    kind, ids, t = spec
    out = []
    for cid in ids:
        emu = next((e for e in emulators if cid in getattr(e, "can_ids", ())), None)
        if emu is None or not hasattr(emu, "schedule_device_fault"):
            raise faults_sec.error("device_fault_ids", f"no emulated MIT motor with CAN id {cid}")
        out.append((t, emu, cid, kind))
    return out


def _build_emulated(section: Section, kind: str, *, now, transports, model, rng) -> EmulatedDriver:
    import can

    from ..transport import CanTransport
    from .emulators import EmulatorHost, InlineBus
    from .faults import FaultInjectingBus

    if transports:
        raise section.error("type", f"sim_{kind} opens its own virtual buses; do not pass transports")
    plant = plant_from_section(section.section("plant", {}), model, now=now, rng=rng)
    emu_sec = section.section("emulator", {})
    faults_sec = section.section("faults", None)
    fault_kw, fault_rng, during_enable = (_fault_kwargs(faults_sec, rng) if faults_sec is not None
                                          else (None, None, True))
    serve = emu_sec.str("serve", "thread", choices=["thread", "inline"],
                        doc="the emulated devices answer from their own thread, or inline in the driver's "
                            "thread on send/recv (reply_latency_s = 0 only; on the wall clock the devices' timed "
                            "events and the plant are brought up to the clock at every send and receive)")
    names = _bus_names(section)
    channels = {name: f"torqueloop-sim-{uuid.uuid4().hex}" for name in names}
    device_fault = fault_kw.pop("device_fault") if fault_kw is not None else None
    device_reboot = fault_kw.pop("device_reboot") if fault_kw is not None else None
    fault_buses = []
    inline_buses = []
    given = {}
    device_ends = {}
    for name in names:
        if serve == "inline":
            # an in-process channel whose devices are served when a frame is sent
            # (no emulator thread to reach; the driver's end is a python-can bus)
            bus = InlineBus(channels[name])
            device_ends[name] = bus.device_end
            inline_buses.append(bus)
        else:
            bus = can.Bus(interface="virtual", channel=channels[name])
        if fault_kw is not None:
            bus = FaultInjectingBus(bus, rng=fault_rng, now=now, **fault_kw)
            fault_buses.append(bus)
        given[name] = CanTransport.from_bus(bus, name=name)
    if kind == "mit_can":
        from .. import mit as real
    elif kind == "cia402_can":
        from .. import cia402 as real
    else:
        from .. import odrive as real
    hosts = []
    try:
        driver = real.build(section, now=now, transports=given)
    except BaseException:
        for t in given.values():
            t.close()
        raise
    try:
        latency = emu_sec.float("reply_latency_s", 0.0, minimum=0.0,
                                doc="wall-clock delay of every reply and broadcast [s]")
        wd = emu_sec.float("watchdog_timeout_s", None, minimum=WATCHDOG_RANGE_S[0], maximum=WATCHDOG_RANGE_S[1],
                           doc="the devices' command timeout (MIT: CAN timeout; ODrive: axis watchdog) "
                               "[s] (default: off)")
        poll = emu_sec.float("poll_s", 0.001, minimum=0.0, strict_min=True, doc=_POLL_DOC)
        step_min = emu_sec.float("plant_step_min_s", 0.0, minimum=0.0, maximum=PLANT_STEP_MIN_MAX_S,
                                 doc="a frame less than this [s] after the plant's time does not advance the plant "
                                     "(0: every frame brings it to the clock; a drive's control tick, e.g. 1.25e-4, "
                                     "bounds the plant steps per cycle on the wall clock)")
        if kind == "cia402_can":
            from .cia402_emulator import devices_from_driver as make
        else:
            make = _mit_devices if kind == "mit_can" else _odrive_devices
        devices_by_bus = make(driver, emu_sec, wd, now)
        emu_sec.finish()
        emulators, buses = [], []
        for name in names:
            dev = devices_by_bus.get(id(given[name]))
            if dev is None:
                continue
            buses.append(device_ends.pop(name) if serve == "inline"
                         else can.Bus(interface="virtual", channel=channels[name]))
            emulators.append(dev)
        device_faults = ([] if device_fault is None
                         else _schedule_device_faults(faults_sec, device_fault, emulators))
        reboots = ([] if device_reboot is None
                   else _schedule_device_reboots(faults_sec, device_reboot, emulators, now))
        # one host (one thread) for every bus: device events are processed in one time order
        try:
            try:
                host = EmulatorHost(buses, [[d] for d in emulators], plant, now,
                                    reply_latency_s=latency, poll_s=poll, own_bus=True, serve=serve,
                                    plant_step_min_s=step_min)
            except ConfigError as err:
                raise emu_sec.error("serve" if serve == "inline" else None, str(err)) from err
            hosts.append(host)
            for b in inline_buses:
                b.host = host
        except BaseException:
            for b in buses:
                b.shutdown()
            raise
    except BaseException:
        for h in hosts:
            h.close()
        driver.close()
        raise
    if wd is not None and getattr(driver, "watchdog_s", None) is None:
        driver.watchdog_s = wd          # the emulated drives' own timeout: the loop's gap limit
    out = EmulatedDriver(driver, plant, hosts, emulators, fault_buses,
                         faults_during_enable=during_enable)
    out.reboots = reboots
    out.device_faults = device_faults
    out.now = now
    return out


def _joint_transport(jt):
    return getattr(jt, "transport")


def _mit_devices(driver, emu_sec: Section, wd, now) -> dict:
    from .mit_emulator import MitEmulator, MitMotorConfig
    # the drive's reply layout: what the driver is configured to expect, unless said here
    expect = getattr(driver, "reply_variant", "auto")
    variant = emu_sec.str("variant", "classic6" if expect == "auto" else expect,
                          choices=["classic6", "cubemars8", "servo7"],
                          doc="MIT: the emulated drives' reply layout (default: the driver's reply_variant "
                              "when it names one, else classic6)")
    reply_id = emu_sec.int("reply_id", 0, minimum=0, maximum=0x7FF, doc="MIT: the replies' arbitration id")
    temp = emu_sec.float("temperature_c", 35.0, doc=_TEMPERATURE_DOC)
    by_bus: dict[int, tuple] = {}
    maps = device_mappings(emu_sec, [jt.mapping for jt in driver.joints])
    for j, jt in enumerate(driver.joints):
        tr = _joint_transport(jt)
        by_bus.setdefault(id(tr), []).append(
            MitMotorConfig(jt.can_id, j, jt.limits, maps[j], variant, temp))
    try:
        return {k: MitEmulator(v, reply_id=reply_id, watchdog_timeout_s=wd) for k, v in by_bus.items()}
    except ConfigError as err:
        raise emu_sec.error(None, str(err)) from err


def _odrive_devices(driver, emu_sec: Section, wd, now) -> dict:
    from .odrive_emulator import OdriveAxisConfig, OdriveEmulator

    docs = {"heartbeat_period_s": "ODrive: period of the heartbeat broadcast [s] (0: RTR only)",
            "encoder_period_s": "ODrive: period of the encoder estimates broadcast [s] (0: RTR only)",
            "iq_period_s": "ODrive: period of the Iq broadcast [s] (default: encoder_period_s if the driver "
                           "reads Iq, else 0)",
            "torques_period_s": "ODrive: period of the Torques broadcast [s] (default: encoder_period_s if "
                                "the driver reads Torques, else 0)"}

    def period(key, default):
        # 0: off; else a rate a drive can send at (a period of 1e-300 s would have the emulator
        # generate messages without end inside enable())
        v = emu_sec.float(key, default, minimum=0.0, maximum=PERIOD_RANGE_S[1], doc=docs[key])
        if 0.0 < v < PERIOD_RANGE_S[0]:
            raise emu_sec.error(key, f"must be 0 (off) or in [{PERIOD_RANGE_S[0]:g}, {PERIOD_RANGE_S[1]:g}] s, got {v!r}")
        return None if v == 0.0 else v

    firmware = getattr(driver, "firmware", "0.6")
    hb = period("heartbeat_period_s", 0.1)
    enc = period("encoder_period_s", 0.001)
    # broadcast the torque message the driver reads, at the encoder rate
    tfb = getattr(driver, "torque_feedback", "none")
    iq = period("iq_period_s", (enc or 0.0) if tfb == "iq" else 0.0)
    tq = period("torques_period_s", (enc or 0.0) if tfb == "torques" else 0.0)
    tlim_doc = "ODrive: the motors' torque limit [N m] (default: none)"
    tlim = emu_sec.float("torque_limit_nm", math.inf, minimum=0.0, strict_min=True, doc=tlim_doc) \
        if emu_sec.has("torque_limit_nm", doc=tlim_doc) else math.inf
    cur = emu_sec.float("current_limit_a", 10.0, minimum=0.0, strict_min=True,
                        doc="ODrive: the motors' current limit [A] (the firmware's default 10 A); the "
                            "torque applied is clamped to min(torque_limit_nm, current_limit_a x kt)")
    if not math.isfinite(cur):
        raise emu_sec.error("current_limit_a", f"must be finite (a drive's current limit is), got {cur!r}")
    version = emu_sec.raw("fw_version", None, doc="ODrive: what Get_Version reports, [major, minor, "
                                                  "revision] (default: 0.6.10 or 0.5.6 per the driver's firmware)")
    by_bus: dict[int, list] = {}
    maps = device_mappings(emu_sec, [ax.mapping for ax in driver.axes])
    for j, ax in enumerate(driver.axes):
        tr = _joint_transport(ax)
        by_bus.setdefault(id(tr), []).append(
            OdriveAxisConfig(ax.node_id, j, maps[j], tlim, hb, enc, wd, iq_period_s=iq,
                             torques_period_s=tq, current_limit_a=cur))
    t0 = float(now())
    try:
        return {k: OdriveEmulator(v, t0_s=t0, firmware=firmware,
                                  fw_version=tuple(version) if isinstance(version, list) else version)
                for k, v in by_bus.items()}
    except (ConfigError, TypeError) as err:
        field = "fw_version" if isinstance(err, TypeError) or getattr(err, "field", None) == "fw_version" else None
        raise emu_sec.error(field, str(err)) from err


#: meanings of ``[driver.emulator]`` keys several emulators read
_POLL_DOC = "period the emulator thread polls its bus at [s]"
_TEMPERATURE_DOC = "the temperature the emulated drives report [degC]"

#: the largest ``[driver.emulator] plant_step_min_s`` [s]: a plant left behind the clock by more
#: than a millisecond is no longer a drive's control tick
PLANT_STEP_MIN_MAX_S = 1e-3

#: plausible periods of an emulated drive's cyclic messages [s]: 10 kHz to one every 10 s
PERIOD_RANGE_S = (1e-4, 10.0)
#: plausible command timeouts of an emulated drive [s] (``[driver.emulator] watchdog_timeout_s``): a
#: loop at 10 kHz can meet 0.1 ms; past 1 s a drive keeps its last torque too long to protect anyone
#: (a value that large is the watchdog switched off)
WATCHDOG_RANGE_S = (1e-4, 1.0)


def build_sim_mit_can(section: Section, *, now: Callable[[], float], transports=None,
                      model: Model | None = None, rng: np.random.Generator | None = None
                      ) -> EmulatedDriver:
    """Registry builder of ``type = "sim_mit_can"`` (see module docstring)."""
    return _build_emulated(section, "mit_can", now=now, transports=transports, model=model, rng=rng)


def build_sim_odrive_can(section: Section, *, now: Callable[[], float], transports=None,
                         model: Model | None = None, rng: np.random.Generator | None = None
                         ) -> EmulatedDriver:
    """Registry builder of ``type = "sim_odrive_can"`` (see module docstring)."""
    return _build_emulated(section, "odrive_can", now=now, transports=transports, model=model, rng=rng)


def build_sim_cia402_can(section: Section, *, now: Callable[[], float], transports=None,
                         model: Model | None = None, rng: np.random.Generator | None = None
                         ) -> EmulatedDriver:
    """Registry builder of ``type = "sim_cia402_can"``: the real CiA 402 driver against
    emulated drives (:mod:`drivers.sim.cia402_emulator`); keys as ``cia402_can``."""
    return _build_emulated(section, "cia402_can", now=now, transports=transports, model=model, rng=rng)
