"""Serve emulated CAN devices and a simulated plant from a separate process.

Usage::

    python -m drivers.sim.serve CONFIG.toml [--duration-s SECONDS] [--set KEY=VALUE ...]

The process builds the plant and the emulated devices described by the
``[driver]`` table of ``CONFIG`` (a ``sim_mit_can`` or ``sim_odrive_can``
table, the same as for the in-process simulation, see
:mod:`drivers.sim.build`) and serves them on the bus given by ``[server]``,
by default python-can's ``udp_multicast`` interface with a multicast TTL of 0,
so frames never leave the machine.  A controller in another process then
opens the same bus with the *real* driver type (``mit_can`` /
``odrive_can``).  The clock is ``time.monotonic`` (shared by all processes
on the machine; the plant's time is the time since the server started serving),
so no lock-step is possible across processes.

``[server]`` keys::

    [server]
    interface = "udp_multicast"     # python-can interface
    rehearsal = "my_arm"            # the group and port, derived from this name and the user
    #                               # (drivers.transport.rehearsal_address); the run config's
    #                               # [driver.bus] names the same rehearsal.  Or, explicitly:
    # channel = "239.74.163.2"      # multicast group
    # port = 43113
    hop_limit = 0                   # multicast TTL; 0 = this host only
    robot = "arm.toml"              # robot file of the controller's model (relative to CONFIG)
    toy_model = "planar_two_link"   # ... or a closed-form toy model: "pendulum", "planar_two_link"
    duration_s = 60.0               # optional: stop after this long
    [server.realtime]               # optional, as the loop's [loop.realtime] (where permitted)
    sched_fifo_priority = 70        # SCHED_FIFO: the emulated robot answers at once however
    #                               # busy the machine (below a real-time loop's 80)
    cpu = 0                         # pinned to another CPU than the loop's

The process prints one line ``READY <interface> <channel> <port>`` to stdout
once it serves (after a line ``note: ...`` on stderr for each real-time setting the
operating system refused), and exits with 0 after SIGINT/SIGTERM or ``duration_s``,
2 on a configuration error, 3 when the bus cannot be opened.
"""

from __future__ import annotations

import argparse
import gc
import math
import signal
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

from drivers.realtime import apply_realtime, restore_realtime
from dynamics.config import Section, apply_overrides, parse_sets, read_toml
from dynamics.errors import CommsError, ConfigError, TorqueloopError

__all__ = ["main", "build_server", "Server", "TOY_MODELS"]

#: closed-form models selectable with ``toy_model``
TOY_MODELS = {"pendulum": "Pendulum", "planar_two_link": "PlanarTwoLink"}

class Server(NamedTuple):
    """What :func:`build_server` builds."""

    host: object            #: the EmulatorHost on the server bus
    duration_s: float | None
    where: tuple            #: (interface, channel, port)
    realtime: dict          #: ``[server.realtime]`` (:func:`drivers.realtime.apply_realtime`'s keys)


EXIT_CONFIG = 2
EXIT_COMMS = 3


def _server_model(srv: Section, base_dir: Path):
    if srv.has("robot") == srv.has("toy_model"):
        raise srv.error("robot", "give exactly one of 'robot' and 'toy_model'")
    if srv.has("robot"):
        from dynamics import load_model
        p = Path(srv.str("robot"))
        return load_model(p if p.is_absolute() else base_dir / p)
    from dynamics import toy_models
    name = srv.str("toy_model", choices=sorted(TOY_MODELS))
    return getattr(toy_models, TOY_MODELS[name])()


def build_server(config_path: str | Path, *, now=time.monotonic, start: bool = True,
                 overrides: dict | None = None) -> Server:
    """Read ``CONFIG`` (with ``overrides``: dotted keys -> values, as ``--set`` gives them) and
    return a :class:`Server` ``(host, duration_s, (interface, channel, port), realtime)``: an
    EmulatorHost on the server bus, serving from its thread (``start=False``: not yet serving;
    :func:`main` serves it in the main thread with ``host.serve_until``, under the
    ``[server.realtime]`` settings).

    Raises
    ------
    ConfigError
        Bad configuration (naming file and field).
    CommsError
        The bus cannot be opened.
    """
    import can

    from .build import _build_emulated
    from .emulators import EmulatorHost

    path = Path(config_path)
    data = read_toml(path)
    if overrides:
        data = apply_overrides(data, overrides, file=str(path))
    root = Section(data, str(path))
    srv = root.section("server")
    interface = srv.str("interface", "udp_multicast")
    opts = {}
    if interface == "udp_multicast":
        # the rehearsal's own group and port: derived from its name and the user, as the
        # controller's [driver.bus] rehearsal = NAME derives them (never one group for all)
        if srv.has("rehearsal") == srv.has("channel") or srv.has("rehearsal") and srv.has("port"):
            raise srv.error("rehearsal", "give rehearsal = NAME (the same name as the run config's "
                                         "[driver.bus] rehearsal), or channel and port, not both")
        if srv.has("rehearsal"):
            from drivers.transport import rehearsal_address
            from dynamics.errors import DriverError
            try:
                channel, opts["port"] = rehearsal_address(srv.str("rehearsal"))
            except DriverError as err:
                raise srv.error("rehearsal", str(err)) from err
        else:
            channel = srv.raw("channel")
            opts["port"] = srv.int("port", minimum=1, maximum=65535)
        opts["hop_limit"] = srv.int("hop_limit", 0, minimum=0, maximum=255)
    else:
        channel = srv.raw("channel", None)
    duration = srv.float("duration_s", None, minimum=0.0, strict_min=True)
    realtime = {}
    if srv.has("realtime", doc="real-time settings of the serving process"):
        rsec = srv.section("realtime")
        if rsec.has("sched_fifo_priority"):
            realtime["sched_fifo_priority"] = rsec.int("sched_fifo_priority", minimum=1, maximum=99,
                                                       doc="SCHED_FIFO priority (needs CAP_SYS_NICE)")
        if rsec.has("cpu"):
            realtime["cpu"] = rsec.int("cpu", minimum=0, doc="the CPU the server is pinned to")
        rsec.finish()
    model = _server_model(srv, path.parent)
    srv.finish()
    dsec = root.section("driver")
    kind = dsec.str("type", choices=["sim_mit_can", "sim_odrive_can"])
    # Build the in-process setup once (real driver on a private virtual bus, frozen
    # clock) to get the plant and devices exactly as the client's driver expects
    # them, then move the devices to the server bus.
    sim = _build_emulated(dsec, kind[len("sim_"):], now=lambda: 0.0, transports=None, model=model,
                          rng=None)
    root.finish()
    plant = sim.plant
    devices = list(sim.emulators)
    # the plant steps at most once per `plant_step_min_s` of the server's (wall) clock; the
    # emulated ODrive axes default to the firmware's control tick, as in-process on the wall clock
    step_min = sim.hosts[0].plant_step_min_s if sim.hosts else 0.0
    emu = dsec.data.get("emulator", {})
    if kind == "sim_odrive_can" and "plant_step_min_s" not in emu:
        from .odrive_emulator import CONTROL_PERIOD_S

        step_min = CONTROL_PERIOD_S
    for h in sim.hosts:
        h.close()
    for t in sim.inner.transports:
        t.close()  # the throw-away driver is not disabled: nobody listens on its bus
    try:
        bus = can.Bus(interface=interface, channel=channel, **opts)
    except (can.CanError, OSError, ImportError, ValueError, TypeError, NotImplementedError,
            RuntimeError) as err:
        raise CommsError(f"cannot open {interface!r} channel {channel!r}: "
                         f"{type(err).__name__}: {err}") from err
    # compile the plant's kernels now: the first step after the brakes let go must not stall
    plant.warm_up()
    # the plant starts at 0 on the server clock: time since serving started
    t_start = now()
    host = EmulatorHost(bus, devices, plant, lambda: now() - t_start, own_bus=True, start=start,
                        plant_step_min_s=step_min, wall_rate=now is time.monotonic)
    return Server(host, duration, (interface, channel, opts.get("port")), realtime)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see module docstring); returns the exit code."""
    ap = argparse.ArgumentParser(prog="python -m drivers.sim.serve",
                                 description="Serve emulated CAN devices on a simulated plant.")
    ap.add_argument("config", help="TOML file with [server] and [driver] tables")
    ap.add_argument("--duration-s", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config value, e.g. --set 'driver.plant.q0=[0.0, -1.5708]' (the pose the "
                         "robot waits in: a bring-up's reference pose)")
    args = ap.parse_args(argv)
    try:
        host, duration, where, realtime = build_server(args.config, start=False,
                                                       overrides=parse_sets(args.set) if args.set else None)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_CONFIG
    except CommsError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_COMMS
    if args.duration_s is not None:
        duration = args.duration_s
    stop = threading.Event()

    def _on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    # everything built so far lives as long as the process: keep the cyclic garbage collector
    # off it (a full collection over numba's and numpy's objects stalls a reply for
    # milliseconds), as the control loop's freeze_gc does on its side
    gc.collect()
    gc.freeze()
    saved, notes = apply_realtime(realtime)
    for note in notes:
        print(f"note: [server.realtime] {note}", file=sys.stderr, flush=True)
    print("READY " + " ".join(str(x) for x in where), flush=True)
    t_end = math.inf if duration is None else time.monotonic() + duration
    try:
        # served in this thread: a frame is answered without a hand-over between threads
        host.serve_until(lambda: stop.is_set() or time.monotonic() >= t_end)
    except TorqueloopError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_COMMS
    finally:
        restore_realtime(saved)
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through a subprocess in the tests
    sys.exit(main())
