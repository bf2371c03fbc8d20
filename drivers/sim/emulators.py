"""Emulated CAN actuators on top of a :class:`~drivers.sim.plant.Plant`.

The emulators speak the real protocols (through :mod:`drivers.codecs`), so the
real drivers can be run, unchanged, against a simulated robot:

* :class:`MitEmulator` -- one or more MIT "mini cheetah" protocol motors
  (CubeMars / T-Motor AK series in MIT mode), in :mod:`drivers.sim.mit_emulator`,
  re-exported here;
* :class:`OdriveEmulator` -- one or more ODrive CANSimple axes (in
  :mod:`drivers.sim.odrive_emulator`, re-exported here);
* :class:`EmulatorHost` -- serves a set of devices on a python-can bus from a
  background thread (an in-process ``virtual`` channel, or ``udp_multicast``
  from a separate process, see :mod:`drivers.sim.serve`), or inline in the
  driver's thread on a lock-step clock (:class:`InlineBus`, the driver's end of
  the channel, a :class:`can.BusABC`).

Time and determinism
--------------------
The host reads the control loop's clock ``now()`` when a frame arrives (a
serving thread on a clock that runs at wall rate: the frame's arrival on that
clock, from its timestamp, however late the thread gets to it), processes
every timed device event due up to then (watchdog expiries, cyclic
broadcasts) *at its own due time*, advances the plant to that time, applies
the command and replies.  The plant is therefore only ever advanced
to event times on the loop's clock; with a lock-step clock the physics is
deterministic given the command sequence, whatever the thread scheduling.
Reply latency is wall-clock time (it models the bus and the drive's
processing; it decides whether a reply makes the driver's deadline).

Joint <-> motor side
--------------------
Each motor/axis drives one plant joint through a
:class:`~drivers.base.JointMapping` (gear ratio, sign, offset, efficiency),
the same convention as the drivers: ``q = sign*p/G + offset``,
``tau_joint = sign*G*eff*tau_motor``.  A drive-side PD (MIT) with motor gains
``kp, kd`` is ``G**2 * eff * kp`` (``kd``) on the joint side.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
import threading
import time
from typing import Callable

import can

from dynamics.errors import (CommsError, CommsTimeoutError, ConfigError, DriverError,
                             TorqueloopError)
from ..transport import message_fields
from .plant import Plant

__all__ = ["EmulatedDevice", "EmulatorHost", "InlineBus", "InlineServedBus", "LocalBus"]

_TWO_PI = 2.0 * math.pi
#: timed events due up to this much after ``now()`` are processed (absorbs clock rounding
#: such as a loop clock accumulated as ``t += dt``)
_TIME_EPS_S = 1e-9


def _msg(arb_id: int, data: bytes) -> can.Message:
    """``can.Message(arbitration_id=arb_id, data=data, is_extended_id=False)``, the arguments
    given by position (timestamp, arbitration_id, is_extended_id, is_remote_frame,
    is_error_frame, channel, dlc, data; the others at their defaults): the same message, made
    faster (tests/test_sim_emulators.py compares every slot)."""
    return can.Message(0.0, arb_id, False, False, False, None, None, data)


#: an inline bus waiting for a device's timed event sleeps at least this long at a time [s]
_INLINE_WAIT_MIN_S = 2e-4

#: a host serving in its own thread (wall clock) that falls this far behind the loop clock [s]
#: drops the cyclic broadcasts due before (:meth:`EmulatedDevice.drop_stale_broadcasts`)
STALE_BROADCAST_S = 0.05

#: a host serving in its own thread on a wall clock handles a frame at the time it arrived on the
#: bus (its ``timestamp``, ``time.time()`` as python-can's interfaces set it) when it gets to it
#: up to this late [s]; later (or no timestamp), at ``now()``
ARRIVAL_LATE_MAX_S = 1.0


class EmulatedDevice:
    """Interface of a device served by :class:`EmulatorHost`.

    A device owns some plant joints.  The host calls, from its thread:

    * :meth:`bind` once with the plant;
    * :meth:`next_timer_s` / :meth:`on_timer` for timed events on the loop
      clock (watchdogs, broadcasts), always in time order and before any frame
      received later;
    * :meth:`on_frame` for every received frame (return ``None`` when the
      frame is not for this device).
    """

    plant: Plant | None = None

    def bind(self, plant: Plant) -> None:
        self.plant = plant

    def next_timer_s(self) -> float:
        """Loop time [s] of the next timed event (``inf`` if none)."""
        return math.inf

    def on_timer(self, t_s: float) -> list[can.Message]:
        """Handle the timed event(s) due at ``t_s`` (the plant is already at ``t_s``)."""
        return []

    def drop_stale_broadcasts(self, t_s: float) -> None:
        """Skip the cyclic broadcasts due before ``t_s`` (the host could not serve the device then:
        a wall-clock host that was starved for longer than :data:`STALE_BROADCAST_S`).  A real
        device sent them when they were due, into a receive queue nobody read, which overflows:
        they must not come now as a burst ahead of the answers to new requests."""

    def on_frame(self, msg: can.Message, t_s: float) -> list[can.Message] | None:
        """Handle one frame at loop time ``t_s`` (plant already advanced)."""
        return None

    def accepts(self, msg: can.Message) -> bool:
        """Whether ``msg`` is addressed to this device (cheap pre-check)."""
        return False

    #: True when :meth:`on_frame` itself returns ``None``, changing nothing, for every frame
    #: :meth:`accepts` refuses: the host then calls :meth:`on_frame` without the pre-check
    on_frame_filters: bool = False

    #: True when the device answers frames given as fields (:meth:`on_fields`), the same as
    #: :meth:`on_frame` answers them as messages: an inline host then serves the frames its
    #: driver hands over as fields (:meth:`InlineBus.send_fields`) without a message per frame
    fields_native: bool = False

    def on_timer_fields(self, t_s: float) -> list[tuple[int, bytes]]:
        """:meth:`on_timer` with the frames sent as ``(arbitration_id, data)`` pairs of data
        frames with standard ids (only for a device with :attr:`fields_native`)."""
        raise NotImplementedError(f"{type(self).__name__} does not send frames as fields")

    def on_fields(self, arb: int, data: bytes, remote_dlc: int | None, t_s: float) -> list[tuple[int, bytes]] | None:
        """:meth:`on_frame` of a classic frame with a standard id, given as its fields: a data
        frame carrying ``data`` (``remote_dlc`` None) or a remote frame requesting ``remote_dlc``
        bytes; the answer as ``(arbitration_id, data)`` pairs of data frames with standard ids
        (only for a device with :attr:`fields_native`)."""
        raise NotImplementedError(f"{type(self).__name__} does not answer frames given as fields")

    def on_batch(self, arbs: tuple, payloads, t_s: float, out_arb, out) -> int | None:
        """Serve, in one call, frames sent one after the other at loop time ``t_s`` (classic data
        frames with standard ids ``arbs`` and 8 data bytes, ``payloads`` a (m, 8) uint8 array),
        the same as :meth:`on_frame` of each in turn, and write the frames the device sends in
        answer (its replies, in order) to ``out_arb`` (arbitration ids) and ``out`` (rows of the
        length, then the data); the number written.  None, having changed nothing, when it
        cannot (the caller sends the frames one by one): the default."""
        return None

    #: ``None``, or an int the device increases before every change that may move its next
    #: timed event (a frame, a timed event, a fault injected): while the sum over its devices
    #: stays the same, a host knows that event without asking :meth:`next_timer_s` again
    #: (the inline host asks at every send and empty receive).  ``None``: not counted.
    timer_epoch: int | None = None


# ---------------------------------------------------------------------------
# The device emulators live in their own modules and import this one (never the
# other way round): drivers/sim/mit_emulator.py (MIT protocol),
# drivers/sim/odrive_emulator.py (ODrive CANSimple), drivers/sim/cia402_emulator.py.
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# hosting
# ---------------------------------------------------------------------------
class EmulatorHost:
    """Serve emulated devices on one or more python-can buses from one background thread.

    Parameters
    ----------
    bus : python-can bus, or sequence of buses
        The devices' side of the bus (e.g. ``can.Bus(interface="virtual",
        channel=name)``, another instance on the same channel as the driver).
        Several buses: one thread serves them all, so the timed events of
        every device are processed in one global time order.
    devices : sequence of EmulatedDevice, or sequence of such sequences
        Devices sharing ``plant``; with several buses, one sequence per bus.
    plant : Plant
    now : callable () -> float
        The control loop's clock [s].
    reply_latency_s : float
        Wall-clock delay before each reply/broadcast is put on the bus.
    poll_s : float
        ``recv`` timeout of the serving loop (timed events are checked at least
        this often).
    own_bus : bool
        Shut the bus(es) down in :meth:`close`.
    plant_step_min_s : float
        0 (default): the plant is brought up to ``now()`` for every frame and idle poll.  Else a
        frame or poll less than this [s] of loop time after the plant's time leaves the plant
        there: the answer reads its state up to that old, a command acts from the plant's time
        (what a drive sampling and applying on its control tick does).  Timed events are still
        processed at their due time.  On a lock-step clock a cycle's frames come at one loop
        time, so it changes nothing there; on a wall clock it bounds the plant steps per cycle
        (each frame's own step otherwise: a few tens per cycle for six axes).
    start : bool
        Start the thread immediately (else call :meth:`start`).
    wall_rate : bool, optional
        Whether ``now()`` runs at the rate of the wall clock (``time.time()``, the
        frames' timestamps), so that a frame's arrival can be placed on it.
        Default: ``now`` is ``time.monotonic`` or a method of a clock whose
        ``frozen_while_waiting`` is False (:class:`controller.clock.WallClock`).
    serve : {"thread", "inline"}
        ``"thread"``: a background thread serves the devices (any clock).  On a
        clock that runs at wall rate (``wall_rate``) it handles a frame at the
        time it arrived on the bus (its ``timestamp``), as firmware does, even
        when the OS let the thread wait (:meth:`_arrival_t`); on any other clock
        at ``now()`` when it gets to it: with a lock-step clock the result is
        deterministic only while the driver waits for each cycle's replies
        before the clock moves on (a driver reading broadcasts does not, and a
        starved thread can miss a reply timeout): serve inline for reproducible
        lock-step runs.
        ``"inline"``: no thread; the devices are served in the caller's thread
        by :meth:`pump`, which :class:`InlineServedBus` (the driver's side of
        the bus) calls on every send and receive; ``reply_latency_s = 0`` only.
        On a lock-step clock the loop time does not move while the driver waits,
        so serving a frame when it is sent is the same as serving it from a
        thread, without the thread hand-offs.  On a wall clock the devices' timed
        events and the plant are brought up to ``now()`` at every send and
        receive, in time order, before the frame (what a thread does when it gets
        to them), and a receive waiting for a broadcast wakes when it falls due
        (:class:`InlineBus`); no thread competes with the loop for the CPU.

    Notes
    -----
    An exception in the serving thread stops it; it is re-raised by
    :meth:`check`, :meth:`stop` and :meth:`close` (python-can errors wrapped in
    :class:`~dynamics.errors.CommsError`).
    """

    def __init__(self, bus, devices, plant: Plant,
                 now: Callable[[], float], *, reply_latency_s: float = 0.0, poll_s: float = 0.001,
                 own_bus: bool = False, start: bool = True, serve: str = "thread", plant_step_min_s: float = 0.0,
                 wall_rate: bool | None = None):
        if serve not in ("thread", "inline"):
            raise ConfigError(f"must be 'thread' or 'inline', got {serve!r}", field="serve")
        if serve == "inline" and float(reply_latency_s) != 0.0:
            raise ConfigError("inline serving needs reply_latency_s = 0", field="serve")
        self._inline = serve == "inline"
        if isinstance(bus, (list, tuple)):
            buses = list(bus)
            groups = [list(g) for g in devices]
            if len(groups) != len(buses) or not buses:
                raise ConfigError(f"{len(buses)} buses need as many device lists, got {len(groups)}",
                                  field="devices")
        else:
            buses = [bus]
            groups = [list(devices)]
        self._buses = buses
        self._bus = buses[0]
        #: every bus is an InlineBus's device end: the frames waiting on each can be seen
        #: without taking them (serve_sent on a host of several buses)
        self._ends = all(isinstance(b, _InlineEnd) for b in buses)
        #: buses (ids) served from frame fields: an InlineBus's device end whose devices are all
        #: fields_native (serve_fields; decided here, once)
        self._fields_buses: set[int] = set()
        self._devices: list[EmulatedDevice] = []
        self._dev_bus: list = []            # bus of each device (same order)
        self._bus_devices: dict[int, list] = {}
        for b, g in zip(buses, groups):
            if not g:
                raise ConfigError("at least one device is required per bus", field="devices")
            if isinstance(b, _InlineEnd) and all(getattr(d, "fields_native", False) is True for d in g):
                self._fields_buses.add(id(b))
            self._bus_devices[id(b)] = g
            for d in g:
                if not isinstance(d, EmulatedDevice):
                    raise ConfigError(f"expected an EmulatedDevice, got {type(d).__name__}",
                                      field="devices")
                self._devices.append(d)
                self._dev_bus.append(b)
        if not isinstance(plant, Plant):
            raise ConfigError(f"plant must be a Plant, got {type(plant).__name__}",
                              field="plant")
        if not callable(now):
            raise ConfigError("now must be callable", field="now")
        lat = float(reply_latency_s)
        if not math.isfinite(lat) or lat < 0:
            raise ConfigError(f"must be finite and >= 0, got {reply_latency_s!r}",
                              field="reply_latency_s")
        p = float(poll_s)
        if not math.isfinite(p) or p <= 0:
            raise ConfigError(f"must be > 0, got {poll_s!r}", field="poll_s")
        h = float(plant_step_min_s)
        if not math.isfinite(h) or h < 0:
            raise ConfigError(f"must be finite and >= 0, got {plant_step_min_s!r}", field="plant_step_min_s")
        #: a frame or an idle poll less than this after the plant's time leaves the plant where it
        #: is (0: the plant is brought to now() at every one)
        self._plant_step_min = h
        #: per device, whether it is served from fields (its bus is one of _fields_buses)
        self._dev_fields = [id(b) in self._fields_buses for b in self._dev_bus]
        self._plant = plant
        self._now = now
        owner = getattr(now, "__self__", None)
        self._frozen_clock = bool(getattr(owner, "frozen_while_waiting", False))
        if wall_rate is None:
            wall_rate = now is time.monotonic or getattr(owner, "frozen_while_waiting", None) is False
        #: the loop clock runs at wall rate: a threaded host places a frame at its arrival (_arrival_t)
        self._wall_rate = bool(wall_rate)
        self._t_served = -math.inf        # the loop-clock time the last frame or poll was handled at [s]
        self._latency = lat
        self._poll = p
        self._own_bus = own_bus
        for d in self._devices:
            d.bind(plant)
        #: every device counts the changes of its timers (EmulatedDevice.timer_epoch): _advance
        #: keeps the next event time over the devices and the sum of the counts it was found at
        self._counted = all(d.timer_epoch is not None for d in self._devices)
        self._quiet_t = -math.inf      # no device event before this loop time ...
        self._quiet_key = -1           # ... while the sum of the devices' timer_epoch is this
        self._outq: list = []          # heap of (wall_release, seq, bus, msg)
        self._seq = itertools.count()
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._idle_count = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.frames_in = 0
        self.frames_out = 0
        self._started = False
        self._failed = False       # inline: serving stopped by an error (like a dead thread)
        #: serve_fields: the clock stood still while a call's frames were served (True), moved
        #: (False), not seen yet (None)
        self._clock_still: bool | None = None
        if start:
            self.start()

    @property
    def plant(self) -> Plant:
        return self._plant

    @property
    def devices(self) -> tuple[EmulatedDevice, ...]:
        return tuple(self._devices)

    @property
    def buses(self) -> tuple:
        return tuple(self._buses)

    @property
    def plant_step_min_s(self) -> float:
        """The shortest plant step a frame or poll makes [s] (0: to ``now()`` at every one)."""
        return self._plant_step_min

    @property
    def inline(self) -> bool:
        """Whether the devices are served inline by :meth:`pump` (no thread)."""
        return self._inline

    @property
    def running(self) -> bool:
        if self._inline:
            return self._started and not self._closed and not self._failed
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the serving thread (no-op when running); inline: start serving in :meth:`pump`."""
        if self._closed:
            raise DriverError("emulator host is closed")
        if self.running:
            return
        if self._inline:
            self._started = True
            self._failed = False
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="torqueloop-emulator-host",
                                        daemon=True)
        self._thread.start()

    # -- event processing (serving thread, or handle() when not threaded) ----------
    def _advance(self, t: float, emit, fields: bool = False) -> None:
        """Process every timed device event due up to ``t``, then advance the plant to ``t``
        (cyclic broadcasts more than :data:`STALE_BROADCAST_S` late are dropped, see
        :meth:`EmulatedDevice.drop_stale_broadcasts`: by the serving thread, and by an inline
        host whose driver did not send or receive for that long).  ``fields``: inline serving,
        whose devices on a fields bus send their timed frames as fields (to the bus at once,
        not through ``emit``)."""
        plant = self._plant
        devices = self._devices
        t_plant = plant.t_s
        if t - t_plant > STALE_BROADCAST_S and (self._inline or threading.current_thread() is self._thread):
            for d in devices:
                d.drop_stale_broadcasts(t - STALE_BROADCAST_S)
        counted = self._counted
        if counted:
            key = 0
            for d in devices:
                key += d.timer_epoch
            if key == self._quiet_key and t + _TIME_EPS_S < self._quiet_t:
                # no device changed since the next event was found, and it is not due
                # (drop_stale_broadcasts does not move the plant: t_plant is its time)
                if not t <= t_plant + self._plant_step_min:
                    plant.advance_to(t)
                return
        one = devices[0] if len(devices) == 1 else None
        while True:
            if counted:
                # read before the timers: a change made meanwhile moves the sum away from it
                key = 0
                for d in devices:
                    key += d.timer_epoch
            if one is not None:
                # the loop below for one device
                te = one.next_timer_s()
                k = 0 if te < math.inf else -1
            else:
                te, k = math.inf, -1
                for i, d in enumerate(devices):
                    tn = d.next_timer_s()
                    if tn < te:
                        te, k = tn, i
            if k < 0 or te > t + _TIME_EPS_S:
                if counted:
                    self._quiet_t, self._quiet_key = te, key
                break
            # an event due within _TIME_EPS_S after t is handled at t (before any frame at t)
            plant.advance_to(min(max(te, plant.t_s), t))
            if fields and self._dev_fields[k]:
                pairs = devices[k].on_timer_fields(te)
                if pairs:
                    self._dev_bus[k].deliver_all(pairs)
                    self.frames_out += len(pairs)
                continue
            frames = devices[k].on_timer(te)
            if frames:
                emit(frames, self._dev_bus[k])
        # else advance_to does nothing (NaN and inf go on: it refuses them), or the step is shorter
        # than plant_step_min_s
        if not t <= plant.t_s + self._plant_step_min:
            plant.advance_to(t)

    def _process(self, msg: can.Message | None, bus, emit, t: float | None = None) -> None:
        if t is None:
            t = self._now()
        self._t_served = t
        self._advance(t, emit)
        if msg is not None:
            for d in self._bus_devices[id(bus)]:
                if d.on_frame_filters or d.accepts(msg):
                    r = d.on_frame(msg, t)
                    if r:
                        emit(r, bus)

    def handle(self, msg: can.Message | None, bus=None) -> list[can.Message]:
        """Process one frame received on ``bus`` (default: the first), or only the timers
        when ``msg`` is ``None``, at ``now()``.

        Returns the frames to send (nothing is sent).  For single-threaded
        tests; the serving thread does the same and sends the frames as they
        are produced.
        """
        out: list[can.Message] = []
        self._process(msg, self._bus if bus is None else bus, lambda frames, _b: out.extend(frames))
        return out

    def _send_due(self) -> None:
        now = time.monotonic()
        while self._outq and self._outq[0][0] <= now:
            _, _, bus, m = heapq.heappop(self._outq)
            bus.send(m)
            self.frames_out += 1

    def _queue(self, frames: list[can.Message], bus) -> None:
        if self._latency == 0.0:
            for m in frames:
                bus.send(m)
                self.frames_out += 1
            return
        release = time.monotonic() + self._latency
        for m in frames:
            heapq.heappush(self._outq, (release, next(self._seq), bus, m))

    def _recv(self, wait: float):
        """Next frame from any bus as ``(msg, bus)``, or ``(None, None)`` after ``wait`` [s]."""
        buses = self._buses
        if len(buses) == 1:
            return buses[0].recv(wait), buses[0]
        deadline = time.monotonic() + wait
        while True:
            for b in buses:
                m = b.recv(0.0)
                if m is not None:
                    return m, b
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, None
            m = buses[0].recv(min(remaining, 0.0002))
            if m is not None:
                return m, buses[0]

    def _run(self) -> None:
        self._serve_loop(self._stop.is_set)

    def serve_until(self, should_stop: Callable[[], bool]) -> None:
        """Serve in the calling thread (a host made with ``start=False``) until ``should_stop()``
        is true (checked at least every ``poll_s``), then close the host.

        What the serving thread does, without a thread: a process that only serves (``python -m
        drivers.sim.serve``) answers each frame without handing it between threads, and its
        replies never wait for a lock another thread holds.  An error is raised at once.
        """
        if self._inline:
            raise DriverError("an inline host is served by pump(), not serve_until()")
        if self.running:
            raise DriverError("the host is already served by its thread")
        if self._closed:
            raise DriverError("emulator host is closed")
        # this thread is the serving thread now (what _advance and stop() ask)
        self._thread = threading.current_thread()
        try:
            self._serve_loop(should_stop)
        finally:
            self.close()

    def _serve_loop(self, should_stop: Callable[[], bool]) -> None:
        try:
            while not should_stop():
                wait = self._poll
                if self._outq:
                    wait = max(0.0, min(wait, self._outq[0][0] - time.monotonic()))
                msg, bus = self._recv(wait)
                self._serve_frame(msg, bus)
                self._send_due()
                if msg is None:
                    with self._idle:
                        self._idle_count += 1
                        self._idle.notify_all()
        except BaseException as err:  # re-raised in check()/stop(); the thread must not die silently
            self._error = err
        finally:
            with self._idle:
                self._idle.notify_all()

    def _serve_frame(self, msg: can.Message | None, bus) -> None:
        """What the serving thread does with what one receive gave (``None``: an idle poll)."""
        t = None
        if msg is not None:
            self.frames_in += 1
            t = self._arrival_t(msg)
        self._process(msg, bus, self._queue, t)

    def _arrival_t(self, msg: can.Message) -> float:
        """The loop-clock time [s] at which the serving thread handles ``msg``: when it arrived on
        the bus, as firmware handles a frame when it comes (a thread the OS let wait would
        otherwise see a watchdog expire that a fed drive never sees).  ``now()`` on a clock that
        does not run at wall rate (``wall_rate``), for a frame with no timestamp or one more
        than :data:`ARRIVAL_LATE_MAX_S` old; never before the last time served or the plant's
        time (time runs forward).  A frame more than :data:`STALE_BROADCAST_S` late drops the
        cyclic broadcasts due before ``now() - STALE_BROADCAST_S`` first, as a poll after a
        starved wait does (:meth:`EmulatedDevice.drop_stale_broadcasts`): they do not come as a
        burst ahead of the answers."""
        now = self._now()
        ts = msg.timestamp
        if not self._wall_rate or not ts:
            return now
        late = time.time() - ts
        if 0.0 < late < ARRIVAL_LATE_MAX_S:
            if late > STALE_BROADCAST_S:
                for d in self._devices:
                    d.drop_stale_broadcasts(now - STALE_BROADCAST_S)
            t = now - late
            lo = self._t_served
            tp = self._plant.t_s
            if tp > lo:
                lo = tp
            return t if t > lo else lo
        return now

    def pump(self, idle: bool = True) -> None:
        """Inline serving: process every frame pending on the devices' buses, then the timers due.

        Does what one pass of the serving thread does until its buses are empty
        (frames in arrival order, polling the buses in order as the thread does),
        then, with ``idle``, an idle poll (timed events due at ``now()``; every
        frame is processed after the events due before it anyway).  An error stops the
        serving, as it would stop the thread: it is kept and re-raised by
        :meth:`check`, and later pumps do nothing.  No-op for a threaded host,
        a host not started or closed, or after an error.
        """
        if not self._inline or not self._started or self._closed or self._failed:
            return
        try:
            buses = self._buses
            if len(buses) == 1:
                # one bus: the loop below, without its scan
                b = buses[0]
                recv = b.recv
                msg = recv(0.0)
                while msg is not None:
                    self.frames_in += 1
                    self._process(msg, b, self._queue)
                    msg = recv(0.0)
            else:
                # InlineBus ends: only those whose queue holds a frame (or that are closed: recv
                # raises) are asked; the others' recv would return None
                ends = self._ends
                while True:
                    for b in buses:
                        if ends and not b._peer._tx and b._open:
                            continue
                        msg = b.recv(0.0)
                        if msg is not None:
                            self.frames_in += 1
                            self._process(msg, b, self._queue)
                            break
                    else:
                        break
            if idle:
                self._advance(self._now(), self._queue, True)        # _process of no frame
        except Exception as err:  # noqa: BLE001 - kept and re-raised by check(), like the thread's
            self._error = err
            self._failed = True

    def now(self) -> float:
        """The loop clock's time [s] (what the devices are served at)."""
        return self._now()

    @property
    def frozen_clock(self) -> bool:
        """Whether the loop clock stands still while the driver waits: ``now`` is the method of a
        clock whose ``frozen_while_waiting`` is true (:class:`controller.clock.LockstepClock`).
        An inline host's devices then cannot answer during a wait: :class:`InlineBus` does not
        sleep a receive's time out."""
        return self._frozen_clock

    def next_event_delay_s(self) -> float:
        """Loop-clock time [s] until the devices' next timed event (a broadcast, a watchdog),
        ``inf`` when none; <= 0 when one is due."""
        t = math.inf
        for d in self._devices:
            tn = d.next_timer_s()
            if tn < t:
                t = tn
        return t - self._now()

    def serve_sent(self, msg: can.Message, bus) -> bool:
        """Inline serving of one frame just sent on ``bus``, one of the host's buses, with no
        other frame pending on any of them: what :meth:`pump` (``idle=False``) does for it,
        without the round trip through the channel.  Returns False, doing nothing, when the
        host is not serving inline now, ``bus`` is not its only bus or a frame may be waiting
        on another (the caller queues the frame and pumps).  Several buses: only when every
        one is an :class:`InlineBus`'s device end (their queues are seen without taking a frame)."""
        if not self._inline or not self._started or self._closed or self._failed:
            return False
        if bus is not self._bus or len(self._buses) != 1:
            if not self._ends or id(bus) not in self._bus_devices:
                return False
            for b in self._buses:
                if b._peer._tx:
                    return False
        try:
            self.frames_in += 1
            self._process(msg, bus, self._queue)
        except Exception as err:  # noqa: BLE001 - kept and re-raised by check(), like pump's
            self._error = err
            self._failed = True
        return True

    def serve_fields(self, frames, end, into: list | None = None) -> bool:
        """:meth:`serve_sent` of each of ``frames``, classic frames with standard ids given as
        ``(arbitration_id, data, remote_dlc)`` (see :meth:`EmulatedDevice.on_fields`), sent one
        after the other on ``end``, an :class:`InlineBus`'s device end whose devices are all
        :attr:`~EmulatedDevice.fields_native`: each frame is served at ``now()`` after the timed
        events due, the devices answer with fields, delivered without a message per frame.
        Returns False, doing nothing, where :meth:`serve_sent` would, or for another bus (the
        caller sends the frames as messages).  ``into``: a list the answers of a run served in
        one call (``on_fields_batch``) are appended to, as the fields :meth:`_InlineEnd.deliver`
        queues, instead of the driver's queue, when that queue is empty then (the caller takes
        them as the first frames received)."""
        if not self._inline or not self._started or self._closed or self._failed:
            return False
        key = id(end)
        if key not in self._fields_buses:
            return False
        if len(self._buses) != 1:
            for b in self._buses:
                if b._peer._tx:
                    return False
        devices = self._bus_devices[key]
        one = devices[0].on_fields if len(devices) == 1 else None
        now, advance, queue, deliver = self._now, self._advance, self._queue, end.deliver
        # a device that serves a run of frames at one time in one call (on_fields_batch): once the
        # clock was seen standing still while a call's frames were served (a lock-step clock moves
        # only between the driver's calls), and never after it was seen moving
        batch = getattr(devices[0], "on_fields_batch", None) if one is not None and len(frames) > 1 else None
        t_first = None
        try:
            if batch is not None and self._clock_still:
                t = now()
                advance(t, queue, True)
                r = batch(frames, t)
                if r is not None:
                    self.frames_in += len(frames)
                    if into is not None and not end._peer._rx:
                        end.deliver_to(into, r)
                    elif r:
                        end.deliver_all(r)
                    self.frames_out += len(r)
                    if now() != t:
                        self._clock_still = False
                    return True
            for arb, data, remote_dlc in frames:
                self.frames_in += 1
                t = now()
                if t_first is None:
                    t_first = t
                elif t != t_first:
                    self._clock_still = False
                advance(t, queue, True)
                if one is not None:
                    r = one(arb, data, remote_dlc, t)
                    if r:
                        for a, dd in r:
                            deliver(a, dd)
                        self.frames_out += len(r)
                    continue
                for d in devices:
                    r = d.on_fields(arb, data, remote_dlc, t)
                    if r:
                        for a, dd in r:
                            deliver(a, dd)
                        self.frames_out += len(r)
            if batch is not None and self._clock_still is None and now() == t_first:
                self._clock_still = True
        except Exception as err:  # noqa: BLE001 - kept and re-raised by check(), like pump's
            self._error = err
            self._failed = True
        return True

    def serve_batch(self, end, arbs: tuple, payloads, out_arb, out) -> int | None:
        """Frames sent one after the other on ``end``, the host's only bus (an :class:`InlineBus`'s
        device end) with its only device, served in one call on a clock that stands still while
        the driver waits (:attr:`frozen_clock`: every frame would be served at the same ``now()``):
        the timed events due and the plant brought to ``now()`` (what a drain's idle pump does),
        then, when nothing is queued for the driver, the device answers them all
        (:meth:`EmulatedDevice.on_batch`) and its answers are written to ``out_arb`` / ``out``
        instead of the driver's queue.  Returns the number of answers, or None when the frames
        were not served (the caller drains its queue and sends them one by one: the pump it makes
        finds nothing more to do at this time)."""
        if (not self._inline or not self._started or self._closed or self._failed or not self._frozen_clock
                or end is not self._bus or len(self._buses) != 1):
            return None
        devices = self._bus_devices[id(end)]
        if len(devices) != 1:
            return None
        try:
            t = self._now()
            self._advance(t, self._queue, True)
            if end._peer._rx:
                return None             # frames for the driver (a timed event's): it reads them first
            r = devices[0].on_batch(arbs, payloads, t, out_arb, out)
        except Exception as err:  # noqa: BLE001 - kept and re-raised by check(), like pump's
            self._error = err
            self._failed = True
            return None
        if r is not None:
            self.frames_in += len(arbs)
            self.frames_out += r
        return r

    def sync(self, timeout_s: float = 5.0) -> None:
        """Block until every frame sent to the devices before this call was processed.

        Waits for the serving thread to complete an idle poll (no frame
        pending) that started after the call, so all frames already on the bus
        were handled and the plant was advanced to at least the ``now()`` of
        the call.  Useful with a lock-step clock after a large time step.

        Raises
        ------
        CommsTimeoutError
            Not synchronised within ``timeout_s`` (wall clock).
        """
        if self._inline:
            self.pump()
            self.check()
            if not self.running:
                raise DriverError("emulator host is not running")
            return
        deadline = time.monotonic() + timeout_s
        with self._idle:
            target = self._idle_count + 2
            while self._idle_count < target:
                if self._error is not None or not self.running:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CommsTimeoutError(f"emulator host not idle within {timeout_s} s")
                self._idle.wait(min(remaining, 0.05))
        self.check()
        if not self.running:
            raise DriverError("emulator host is not running")

    # -- control ----------------------------------------------------------------------------
    def check(self) -> None:
        """Re-raise an exception that stopped the serving thread."""
        err = self._error
        if err is None:
            return
        self._error = None
        if isinstance(err, TorqueloopError):
            raise err
        if isinstance(err, can.CanError):
            raise CommsError(f"emulator host bus error: {err}") from err
        raise err

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop and join the serving thread (idempotent); re-raise its error if any."""
        self._stop.set()
        self._started = False
        th = self._thread
        if th is not None and th.is_alive() and th is not threading.current_thread():
            th.join(timeout_s)
            if th.is_alive():
                raise CommsError("emulator host thread did not stop")
        self._thread = None
        self.check()

    def close(self) -> None:
        """Stop the thread and (if owned) shut the bus(es) down; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self.stop()
        finally:
            if self._own_bus:
                for b in self._buses:
                    b.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class InlineServedBus:
    """The driver's side of a bus served by an inline :class:`EmulatorHost`.

    Wraps a python-can bus: :meth:`send` sends, then lets the host serve
    (so the reply is queued before ``send`` returns); :meth:`recv` lets the
    host serve, then receives.  Everything else is the wrapped bus's.  The
    driver's code is unchanged: it sees an ordinary bus.
    """

    def __init__(self, bus, host: EmulatorHost | None = None):
        self._bus = bus
        #: the serving host (``None``: not attached yet, a plain bus)
        self.host = host

    @property
    def inner(self):
        """The wrapped bus."""
        return self._bus

    def send(self, msg, timeout: float | None = None) -> None:
        self._bus.send(msg, timeout)
        if self.host is not None:
            self.host.pump(idle=False)

    def recv(self, timeout: float | None = None):
        host = self.host
        if host is not None:
            msg = self._bus.recv(0.0)
            if msg is not None:
                return msg
            host.pump()
        return self._bus.recv(timeout)

    def shutdown(self) -> None:
        self._bus.shutdown()

    def __getattr__(self, name):
        if name in ("_bus", "host"):
            raise AttributeError(name)
        return getattr(self._bus, name)


class LocalBus:
    """One end of an in-process, point-to-point CAN channel (python-can-like bus).

    A lighter stand-in for python-can's ``virtual`` interface for the inline
    emulator: a sent frame is copied into the peer's receive queue with the
    same fields a ``virtual`` bus sets (``timestamp = time.time()``, the
    channel name, ``is_rx``) but without ``copy.deepcopy`` and ``queue.Queue``.
    Create the two ends with :meth:`pair`.  Thread-safe; ``recv`` with a
    timeout blocks until a frame arrives or the timeout passes.
    """

    def __init__(self, channel: str):
        self.channel_info = f"local {channel}"
        self._channel = channel
        self._rx: collections.deque = collections.deque()   # appends/pops are atomic
        self._cond = threading.Condition()
        self._waiting = 0          # receivers blocked in recv (set under _cond)
        self._peer: LocalBus | None = None
        self._open = True

    @classmethod
    def pair(cls, channel: str) -> tuple["LocalBus", "LocalBus"]:
        """The two connected ends of a new channel."""
        a, b = cls(channel), cls(channel)
        a._peer, b._peer = b, a
        return a, b

    def _check_open(self) -> None:
        if not self._open:
            raise can.CanOperationError("Cannot operate on a closed bus")

    def send(self, msg: can.Message, timeout: float | None = None) -> None:
        self._check_open()
        peer = self._peer
        if peer is None or not peer._open:
            return  # nobody listening (a virtual bus drops it too)
        cp = can.Message(timestamp=time.time(), arbitration_id=msg.arbitration_id,
                         is_extended_id=msg.is_extended_id, is_remote_frame=msg.is_remote_frame,
                         is_error_frame=msg.is_error_frame, channel=self._channel, dlc=msg.dlc,
                         data=msg.data, is_fd=msg.is_fd, is_rx=True, bitrate_switch=msg.bitrate_switch,
                         error_state_indicator=msg.error_state_indicator, check=False)
        peer._rx.append(cp)
        if peer._waiting:
            # a receiver set _waiting under the lock before testing the queue, so
            # either it sees this frame or it is waiting and gets this notification
            with peer._cond:
                peer._cond.notify_all()

    def recv(self, timeout: float | None = None) -> can.Message | None:
        self._check_open()
        rx = self._rx
        if rx:
            return rx.popleft()
        if timeout is not None and timeout <= 0:
            return None
        with self._cond:
            self._waiting += 1
            try:
                if not self._cond.wait_for(lambda: rx or not self._open, timeout):
                    return None
            finally:
                self._waiting -= 1
            self._check_open()
            return rx.popleft()

    def set_filters(self, filters=None) -> None:
        if filters:
            raise can.CanInterfaceNotImplementedError("LocalBus has no receive filters")

    def flush_tx_buffer(self) -> None:
        return None

    def fileno(self) -> int:
        return -1

    @property
    def protocol(self):
        return can.CanProtocol.CAN_20

    def shutdown(self) -> None:
        with self._cond:
            self._open = False
            self._cond.notify_all()


class _InlineEnd:
    """The devices' end of an :class:`InlineBus` (what the inline host polls and answers on)."""

    __slots__ = ("_peer", "_open", "channel_info")

    def __init__(self, peer: "InlineBus"):
        self._peer = peer
        self._open = True
        self.channel_info = f"inline {peer.channel_name} (devices)"

    def recv(self, timeout: float | None = None) -> can.Message | None:
        """Next frame the driver sent and the host has not served yet (never waits)."""
        if not self._open:
            raise can.CanOperationError("Cannot operate on a closed bus")
        tx = self._peer._tx
        return tx.popleft() if tx else None

    def send(self, msg: can.Message, timeout: float | None = None) -> None:
        """Deliver a device's frame to the driver's receive queue, stamped as a ``virtual`` bus does."""
        if not self._open:
            raise can.CanOperationError("Cannot operate on a closed bus")
        peer = self._peer
        if peer._is_shutdown:
            return  # nobody listening (a virtual bus drops it too)
        msg.timestamp = time.time()
        msg.channel = peer.channel_name
        msg.is_rx = True
        peer._rx.append(msg)

    def deliver(self, arb: int, data: bytes) -> None:
        """:meth:`send` of a device's data frame with a standard id, given as its fields: queued
        for the driver as the fields :meth:`InlineBus.recv_fields` returns (the timestamp a
        ``virtual`` bus sets), no message made."""
        if not self._open:
            raise can.CanOperationError("Cannot operate on a closed bus")
        peer = self._peer
        if peer._is_shutdown:
            return  # nobody listening (a virtual bus drops it too)
        peer._rx.append((arb, data, time.time(), False, False, False, None))

    def deliver_all(self, pairs) -> None:
        """:meth:`deliver` of each ``(arbitration_id, data)`` pair in turn (each stamped in turn),
        the end's state looked at once (nothing changes it meanwhile: one thread): :meth:`deliver_to`
        the driver's queue."""
        self.deliver_to(self._peer._rx, pairs)

    def deliver_to(self, out: list, pairs) -> None:
        """:meth:`deliver` of each of ``pairs`` (``(arbitration_id, data)``), the fields appended
        to ``out`` instead of the driver's queue (:meth:`InlineBus.exchange_fields`)."""
        if not self._open:
            raise can.CanOperationError("Cannot operate on a closed bus")
        if self._peer._is_shutdown:
            return  # nobody listening (a virtual bus drops it too)
        clock = time.time
        out += [(a, d, clock(), False, False, False, None) for a, d in pairs]

    def shutdown(self) -> None:
        self._open = False


#: methods of an :class:`InlineBus` that a tap (a test's frame counter, a recorder) replaces on
#: the instance to see every frame: the batched exchange declines then
_TAPS = frozenset({"send", "send_fields", "recv", "recv_fields"})


class InlineBus(can.BusABC):
    """The driver's end of an in-process channel served inline by an :class:`EmulatorHost`.

    A python-can bus (:class:`can.BusABC`): the real driver and its
    :class:`~drivers.transport.CanTransport` use it as any other interface.
    :attr:`device_end` is the devices' end, given to the host (``serve="inline"``)
    as its bus.  :meth:`send` puts the frame on the channel and lets the host serve
    it at once, so the devices' replies are in this bus's receive queue when ``send``
    returns; :meth:`recv` returns the next queued frame and, when there is none, lets
    the host run an idle poll (its timed events due at ``now()``) first.  This is
    what :class:`InlineServedBus` over a :class:`LocalBus` pair does, without the
    copy of every frame, its locks and the wrapper: the frames a device sends are
    handed over as they are, stamped with the fields a ``virtual`` bus sets
    (``timestamp = time.time()``, ``channel``, ``is_rx``).

    A driver's :class:`~drivers.transport.CanTransport` over this bus (not over a wrapper of
    it) hands its frames over as fields (:meth:`send_fields`, :meth:`recv_fields`,
    ``fields_channel``): a host whose devices answer fields (``fields_native``) serves them
    without a python-can message per frame and queues the answers as fields; for another
    host the message is made and sent.  A frame queued as fields is made a message when read
    by :meth:`recv`.

    Only for an inline host: nothing but the host puts frames on the channel, so a
    receive that finds the queue empty after the idle poll waits its ``timeout`` out
    (as a bus nobody answers on), or until the devices' next timed event falls due
    (on a wall clock: a cyclic broadcast comes when it is due), and returns ``None``
    when nothing came.  Not thread-safe (one driver thread).
    """

    #: a CanTransport may hand frames over as fields (send_fields / recv_fields)
    fields_channel = True

    def __init__(self, channel: str, host: EmulatorHost | None = None, can_filters=None, **kwargs):
        self.channel_name = str(channel)
        self.channel_info = f"inline {channel}"
        self._rx: collections.deque = collections.deque()    # frames for the driver
        self._tx: collections.deque = collections.deque()    # frames not served yet
        self._can_protocol = can.CanProtocol.CAN_20
        #: the serving host (``None``: not attached yet; frames wait in the channel)
        self.host = host
        self.device_end = _InlineEnd(self)
        #: the last wait of _recv_internal found the loop clock where it was before (lock-step)
        self._frozen = False
        super().__init__(channel=channel, can_filters=can_filters, **kwargs)

    def _check_open(self) -> None:
        if self._is_shutdown:
            raise can.CanOperationError("Cannot operate on a closed bus")

    @property
    def wait_futile(self) -> bool:
        """Whether a receive's wait cannot bring a frame: the serving host runs on a clock that
        stands still while the driver waits (:attr:`EmulatorHost.frozen_clock`)."""
        host = self.host
        return host is not None and host.frozen_clock and host.running

    def send(self, msg: can.Message, timeout: float | None = None) -> None:
        if self._is_shutdown:
            raise can.CanOperationError("Cannot operate on a closed bus")
        end = self.device_end
        if not end._open:
            return  # nobody listening (a virtual bus drops it too)
        host = self.host
        if host is None:
            self._tx.append(msg)
        elif self._tx or not host.serve_sent(msg, end):
            # frames already waiting (a host not serving yet), or a host that cannot see
            # whether frames wait on its other buses
            self._tx.append(msg)
            host.pump(idle=False)

    def send_fields(self, frames) -> None:
        """:meth:`send` of each of ``frames``, classic frames with standard ids given as
        ``(arbitration_id, data, remote_dlc)`` (a data frame carrying ``data`` when
        ``remote_dlc`` is None, else a remote frame requesting ``remote_dlc`` bytes), one after
        the other: served from the fields when the host can (:meth:`EmulatorHost.serve_fields`),
        else each sent as the message :class:`~drivers.transport.CanTransport` makes of it."""
        if self._is_shutdown:
            raise can.CanOperationError("Cannot operate on a closed bus")
        end = self.device_end
        if not end._open:
            return  # nobody listening (a virtual bus drops it too)
        host = self.host
        if host is not None and not self._tx and host.serve_fields(frames, end):
            return
        for arb, data, remote_dlc in frames:
            if remote_dlc is not None:
                msg = can.Message(arbitration_id=arb, is_extended_id=False, is_remote_frame=True, dlc=remote_dlc)
            else:
                msg = can.Message(0.0, arb, False, False, False, None, None, data, False, True, False)
            self.send(msg)

    def exchange_fields(self, frames, n: int) -> list[tuple] | None:
        """:meth:`send_fields` of ``frames`` then :meth:`recv_fields_upto` of ``n``, in one call,
        where the host serves the frames from their fields and nothing is queued for the driver
        before: the same frames received (the answers of a run the device serves in one call
        taken without a pass through the queue; what follows the first ``n`` stays queued).
        Returns None, nothing sent, where frames are queued, a receive filter is set or a tap
        replaced this bus' ``send``/``send_fields``/``recv``/``recv_fields`` on the instance, or
        the host does not serve the frames from their fields (the caller sends them)."""
        rx = self._rx
        if self._is_shutdown or self._filters is not None or self._tx or rx or not _TAPS.isdisjoint(self.__dict__):
            return None
        end = self.device_end
        host = self.host
        if host is None or not end._open:
            return None
        got: list[tuple] = []
        if not host.serve_fields(frames, end, got):
            return None
        if rx:                          # answered one by one, or a timed event's frames first
            rx.extend(got)
            return self.recv_fields_upto(n)
        if len(got) > n:
            rx.extend(got[n:])
            del got[n:]
        elif len(got) < n:
            got += self.recv_fields_upto(n - len(got))      # an empty queue: the host's idle poll
        return got

    def serve_batch(self, arbs: tuple, payloads, out_arb, out) -> int | None:
        """Classic data frames with standard ids ``arbs`` and 8 data bytes (``payloads``, (m, 8)
        uint8), sent one after the other and served at once by the host in one call
        (:meth:`EmulatorHost.serve_batch`), the devices' answers written to ``out_arb`` / ``out``
        (arbitration ids; rows of the length, then the data) as if received, not queued.  Returns
        their number, or None, nothing sent, where the host cannot (no frame may be waiting, no
        receive filter set) or where this bus' ``send``/``send_fields``/``recv``/``recv_fields``
        were replaced on the instance (a tap that records or counts every frame): the caller
        sends the frames."""
        if self._is_shutdown or self._filters is not None or self._tx or not _TAPS.isdisjoint(self.__dict__):
            return None
        end = self.device_end
        host = self.host
        if host is None or not end._open:
            return None
        return host.serve_batch(end, arbs, payloads, out_arb, out)

    def _message_of(self, f: tuple) -> can.Message:
        """The message a device's frame queued as fields (:meth:`_InlineEnd.deliver`) is."""
        return can.Message(f[2], f[0], False, False, False, self.channel_name, None, f[1], False, True)

    def recv_fields(self, timeout: float | None = None) -> tuple | None:
        """:meth:`recv` as the fields :meth:`drivers.transport.CanTransport.recv_fields` gives,
        without a message for a frame queued as fields."""
        rx = self._rx
        if self._filters is None and not self._is_shutdown:
            if not rx and timeout == 0.0:
                host = self.host
                if host is not None:
                    host.pump()
            if rx:
                f = rx.popleft()
                return f if type(f) is tuple else message_fields(f)
            if timeout == 0.0:
                return None
        msg = self.recv(timeout)
        return None if msg is None else message_fields(msg)

    def recv_fields_upto(self, n: int) -> list[tuple]:
        """Up to ``n`` frames: :meth:`recv_fields` with no time called ``n`` times or until it
        returns ``None``, the frames queued as fields taken in one pass."""
        rx = self._rx
        out: list[tuple] = []
        if self._filters is None and not self._is_shutdown:
            while rx and len(out) < n:
                f = rx.popleft()
                out.append(f if type(f) is tuple else message_fields(f))
        recv = self.recv_fields
        while len(out) < n:
            f = recv(0.0)               # an empty queue: the host's idle poll first
            if f is None:
                break
            out.append(f)
        return out

    def recv(self, timeout: float | None = None) -> can.Message | None:
        # BusABC.recv without filters is "the next frame": take it without the detour; with
        # none queued and no time to wait (a drain), its one _recv_internal call: the host's
        # idle poll, then the frame it queued or None
        rx = self._rx
        if self._filters is None and not self._is_shutdown:
            if rx:
                f = rx.popleft()
                return self._message_of(f) if type(f) is tuple else f
            if timeout == 0.0:
                host = self.host
                if host is not None:
                    host.pump()
                if not rx:
                    return None
                f = rx.popleft()
                return self._message_of(f) if type(f) is tuple else f
            if timeout is not None:
                # BusABC.recv's loop over _recv_internal, ended by a wait the loop clock did not
                # move in: a lock-step clock does not move while its loop waits here, so no timed
                # event falls due and nothing comes; the rest of the time out would be slept in vain
                start = time.monotonic()
                left = timeout
                while True:
                    msg, _ = self._recv_internal(left)
                    if msg is not None or self._frozen:
                        return msg
                    left = timeout - (time.monotonic() - start)
                    if left <= 0:
                        return None
        return super().recv(timeout)

    def _recv_internal(self, timeout: float | None):
        self._check_open()
        rx = self._rx
        if not rx:
            host = self.host
            if host is not None:
                host.pump()
            if not rx:
                # only the devices' timed events (a broadcast, a watchdog) can put a frame on
                # the channel now: wait the time out, as on a bus where nobody answers, or
                # until the next event falls due (a wall clock moves meanwhile; a lock-step
                # clock does not, and the waits add up to the time out), and serve it then
                # (BusABC.recv calls again while time is left)
                self._frozen = False
                if self.wait_futile:
                    # a lock-step clock: nothing falls due and nothing comes while this waits
                    self._frozen = True
                    return None, False
                if timeout is None or timeout > 0:
                    wait = 0.005 if timeout is None else timeout
                    if host is not None:
                        wait = min(wait, max(host.next_event_delay_s(), _INLINE_WAIT_MIN_S))
                        t0 = host.now()
                    time.sleep(wait)
                    if host is not None:
                        host.pump()
                        if rx:
                            f = rx.popleft()
                            return (self._message_of(f) if type(f) is tuple else f), False
                        self._frozen = host.now() == t0 and host.running
                return None, False
        f = rx.popleft()
        return (self._message_of(f) if type(f) is tuple else f), False

    def _apply_filters(self, filters) -> None:
        return None     # BusABC.recv filters in software

    def flush_tx_buffer(self) -> None:
        return None

    def fileno(self) -> int:
        return -1

    def shutdown(self) -> None:
        super().shutdown()
