"""Seeded bus-level fault injection for python-can buses.

:class:`FaultInjectingBus` wraps any object with python-can's bus interface
(``send(msg, timeout=None)``, ``recv(timeout=None)``, ``shutdown()``) and
perturbs the frames that pass through it: drop, delay, duplicate, reorder,
corrupt, silence given arbitration ids, and fail the whole bus after a number
of frames.  It is meant to sit between a driver (or its transport) and a
virtual bus on which emulated devices answer, so that driver robustness can be
tested deterministically: every random decision comes from the
``numpy.random.Generator`` passed in, in frame order.

Corruption
----------
Classic CAN frames carry a 15-bit CRC, so payload bit errors on the wire are
discarded by the controller hardware and never reach software.  What does
reach software from a faulty device or gateway is a frame of the wrong
length, so the default ``corrupt_mode="truncate"`` shortens the payload by
1..len bytes (decoders must reject it).  ``corrupt_mode="bitflip"`` flips one
random payload bit instead; it models a broken gateway and is only useful to
test decoders' content checks (an MIT command with a flipped bit is still a
valid command).

Device-side faults (a device that stops answering, a fault flag in its
replies) live on the emulators, see :mod:`drivers.sim.emulators`.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Callable, Iterable

import can
import numpy as np

from dynamics.errors import ConfigError

__all__ = ["FaultInjectingBus", "FaultStats"]

_SIDES = ("send", "recv", "both")
_CORRUPT_MODES = ("truncate", "bitflip")


class FaultStats:
    """Counters of what the fault injector did (plain attributes, ints)."""

    __slots__ = ("passed", "dropped", "silenced", "duplicated", "reordered", "delayed",
                 "corrupted")

    def __init__(self):
        for k in self.__slots__:
            setattr(self, k, 0)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"FaultStats({self.as_dict()})"


def _prob(name, v) -> float:
    try:
        p = float(v)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"expected a probability, got {v!r}", field=name) from err
    if not (0.0 <= p <= 1.0):
        raise ConfigError(f"must be in [0, 1], got {v!r}", field=name)
    return p


def _copy_msg(msg: can.Message, data: bytes | None = None) -> can.Message:
    d = bytes(msg.data) if data is None else data
    return can.Message(timestamp=msg.timestamp, arbitration_id=msg.arbitration_id,
                       is_extended_id=msg.is_extended_id, is_remote_frame=msg.is_remote_frame,
                       is_error_frame=msg.is_error_frame, channel=msg.channel,
                       dlc=len(d) if not msg.is_remote_frame else msg.dlc, data=d,
                       is_fd=msg.is_fd, is_rx=msg.is_rx, check=False)


class _Lane:
    """Fault pipeline for one direction (send or receive)."""

    def __init__(self, owner: "FaultInjectingBus"):
        self.o = owner
        self.pending: deque = deque()       # (release_time, msg), in release order
        self.held: can.Message | None = None  # reorder: held until the next frame passes

    def process(self, msg: can.Message) -> list[can.Message]:
        """Apply the random faults to one frame; return frames now in the pipeline."""
        o = self.o
        st = o.stats
        if msg.arbitration_id in o._silent:
            st.silenced += 1
            return []
        rng = o._rng
        if o._drop and rng.random() < o._drop:
            st.dropped += 1
            return []
        if o._corrupt and rng.random() < o._corrupt:
            msg = o._corrupt_frame(msg)
            st.corrupted += 1
        out = [msg]
        if o._dup and rng.random() < o._dup:
            out.append(_copy_msg(msg))
            st.duplicated += 1
        if o._reorder and self.held is None and rng.random() < o._reorder:
            # hold this frame; it leaves behind the next one
            self.held = out.pop(0)
            st.reordered += 1
        elif self.held is not None:
            out.append(self.held)
            self.held = None
        st.passed += len(out)
        return out

    def enqueue(self, msgs: list[can.Message]) -> None:
        o = self.o
        release = o._now() + o._delay if o._delay > 0 else -math.inf
        for m in msgs:
            if o._delay > 0:
                o.stats.delayed += 1
            self.pending.append((release, m))

    def pop_due(self) -> can.Message | None:
        if self.pending and self.pending[0][0] <= self.o._now():
            m = self.pending.popleft()[1]
            if self.o._delay > 0 and m.timestamp and self is self.o._rx:
                # it reaches the other end now: a receiver that handles a frame at its arrival
                # (drivers.sim.emulators.EmulatorHost's serving thread) sees the added latency
                m.timestamp = time.time()
            return m
        return None


class FaultInjectingBus:
    """Wrap a python-can bus and inject seeded faults on send and/or receive.

    Parameters
    ----------
    inner_bus : python-can bus (BusLike)
        The bus to wrap (``send``, ``recv``, ``shutdown``).
    rng : numpy.random.Generator
        Source of every random decision (deterministic for a fixed frame
        sequence).
    drop_prob : float
        Probability that a frame is lost.
    delay_s : float
        Fixed latency [s] added to every frame, on the ``now`` clock.  Delayed
        frames on the send side leave at the next ``send``/``recv`` call after
        they are due (there is no background thread).
    duplicate_prob : float
        Probability that a frame is delivered twice.
    reorder_prob : float
        Probability that a frame is held back and delivered after the next one.
    corrupt_prob : float
        Probability that a frame is corrupted (see ``corrupt_mode``).
    silent_ids : iterable of int
        Arbitration ids that never pass (a silent device, a missing node).
    bus_error_after : int, optional
        After this many frames (sent + received, counted before faults) every
        ``send``/``recv`` raises :class:`can.CanOperationError`, as a python-can
        bus does when the interface goes bus-off or is unplugged.
    bus_restart_s : float, optional
        The adapter restarts this long (on the ``now`` clock) after it went bus-off
        (SocketCAN's ``restart-ms``): frames pass again (:meth:`restore`).  Default:
        never (``ip link set can0 type can restart`` is :meth:`restore`).
    side : {"both", "send", "recv"}
        Which direction is perturbed (``bus_error_after`` and ``silent_ids``
        apply to the chosen sides too).
    corrupt_mode : {"truncate", "bitflip"}
        How a frame is corrupted (module docstring).
    now : callable () -> float
        Clock for ``delay_s`` (default ``time.monotonic``; pass the loop's
        clock for deterministic delays).

    Attributes
    ----------
    stats : FaultStats
        What was done so far.
    """

    def __init__(self, inner_bus, *, rng: np.random.Generator, drop_prob: float = 0.0,
                 delay_s: float = 0.0, duplicate_prob: float = 0.0, reorder_prob: float = 0.0,
                 corrupt_prob: float = 0.0, silent_ids: Iterable[int] = (),
                 bus_error_after: int | None = None, side: str = "both",
                 corrupt_mode: str = "truncate", now: Callable[[], float] = time.monotonic,
                 bus_restart_s: float | None = None):
        for attr in ("send", "recv", "shutdown"):
            if not callable(getattr(inner_bus, attr, None)):
                raise ConfigError(f"inner bus has no {attr}() method", field="inner_bus")
        if not isinstance(rng, np.random.Generator):
            raise ConfigError("a numpy.random.Generator is required", field="rng")
        self._inner = inner_bus
        self._rng = rng
        self._drop = _prob("drop_prob", drop_prob)
        self._dup = _prob("duplicate_prob", duplicate_prob)
        self._reorder = _prob("reorder_prob", reorder_prob)
        self._corrupt = _prob("corrupt_prob", corrupt_prob)
        d = float(delay_s)
        if not math.isfinite(d) or d < 0:
            raise ConfigError(f"must be finite and >= 0, got {delay_s!r}", field="delay_s")
        self._delay = d
        try:
            self._silent = frozenset(int(i) for i in silent_ids)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"expected integer ids, got {silent_ids!r}", field="silent_ids") from err
        if bus_error_after is not None and (isinstance(bus_error_after, bool)
                                            or not isinstance(bus_error_after, int)
                                            or bus_error_after < 0):
            raise ConfigError(f"must be an integer >= 0, got {bus_error_after!r}",
                              field="bus_error_after")
        self._error_after = bus_error_after
        if bus_restart_s is not None:
            r = float(bus_restart_s)
            if not math.isfinite(r) or r < 0:
                raise ConfigError(f"must be finite and >= 0, got {bus_restart_s!r}", field="bus_restart_s")
            bus_restart_s = r
        self._restart_s = bus_restart_s
        self._off_since: float | None = None     # clock time the bus went off (restart pending)
        if side not in _SIDES:
            raise ConfigError(f"must be one of {list(_SIDES)}, got {side!r}", field="side")
        if corrupt_mode not in _CORRUPT_MODES:
            raise ConfigError(f"must be one of {list(_CORRUPT_MODES)}, got {corrupt_mode!r}",
                              field="corrupt_mode")
        self._corrupt_mode = corrupt_mode
        if not callable(now):
            raise ConfigError("now must be callable", field="now")
        self._now = now
        self._on_send = side in ("send", "both")
        self._on_recv = side in ("recv", "both")
        self._tx = _Lane(self)
        self._rx = _Lane(self)
        self._frames = 0
        self._lock = threading.RLock()
        self._closed = False
        self._active = True
        self.stats = FaultStats()

    @property
    def active(self) -> bool:
        """Whether faults are injected (``False``: frames pass unchanged, no random draws)."""
        return self._active

    @active.setter
    def active(self, value: bool) -> None:
        with self._lock:
            self._active = bool(value)

    # -- python-can-like attributes --------------------------------------------
    @property
    def inner(self):
        """The wrapped bus."""
        return self._inner

    @property
    def wait_futile(self) -> bool:
        """Whether waiting for a frame cannot bring one: the wrapped bus serves its devices in
        this thread on a clock that stands still while the driver waits (an
        :class:`~drivers.sim.emulators.InlineBus` on the lock-step clock: its own ``recv`` returns
        at once) and no delayed frame is in the pipeline (read by
        :attr:`drivers.transport.CanTransport.wait_is_futile`)."""
        return bool(getattr(self._inner, "wait_futile", False)) and not (self._rx.pending or self._tx.pending)

    @property
    def channel_info(self) -> str:
        return f"faults({getattr(self._inner, 'channel_info', '?')})"

    @property
    def protocol(self):
        return getattr(self._inner, "protocol", None)

    def fileno(self) -> int:
        return -1

    def set_filters(self, filters=None) -> None:
        self._inner.set_filters(filters)

    def flush_tx_buffer(self) -> None:
        with self._lock:
            self._tx.pending.clear()
            self._tx.held = None

    # -- internals ---------------------------------------------------------------
    def _corrupt_frame(self, msg: can.Message) -> can.Message:
        data = bytes(msg.data)
        if not data or msg.is_remote_frame:
            return msg
        if self._corrupt_mode == "truncate":
            cut = int(self._rng.integers(1, len(data) + 1))
            return _copy_msg(msg, data[:len(data) - cut])
        bit = int(self._rng.integers(0, 8 * len(data)))
        b = bytearray(data)
        b[bit // 8] ^= 1 << (bit % 8)
        return _copy_msg(msg, bytes(b))

    def fail_now(self) -> None:
        """The adapter goes bus-off now: every later send and receive raises ``CanOperationError``."""
        with self._lock:
            self._error_after = self._frames

    def restore(self) -> None:
        """The adapter is back after a bus-off (SocketCAN's ``restart-ms`` or ``ip link set can0
        type can restart``): frames pass again, counted afresh (``bus_error_after`` counts
        from here again)."""
        with self._lock:
            if self._error_after is not None and self._frames >= self._error_after:
                self._error_after = None
            self._frames = 0

    def _off(self) -> bool:
        """Whether the bus is off now (restarting it when ``bus_restart_s`` has passed)."""
        if self._error_after is None or self._frames < self._error_after:
            return False
        if self._restart_s is not None:
            t = self._now()
            if self._off_since is None:
                self._off_since = t
            elif t - self._off_since >= self._restart_s:
                self._off_since = None
                self.restore()
                return False
        return True

    def _count(self) -> None:
        if self._error_after is not None:
            if self._off():
                raise can.CanOperationError(
                    f"injected bus error after {self._error_after} frames")
            self._frames += 1

    def _check(self) -> None:
        if self._closed:
            raise can.CanOperationError("bus is shut down")
        if self._off():
            raise can.CanOperationError(f"injected bus error after {self._error_after} frames")

    def _flush_tx(self, timeout) -> None:
        while True:
            m = self._tx.pop_due()
            if m is None:
                return
            self._inner.send(m, timeout)

    # -- bus interface --------------------------------------------------------------
    def send(self, msg: can.Message, timeout: float | None = None) -> None:
        """Send ``msg`` through the send-side faults."""
        with self._lock:
            self._check()
            self._count()
            if not (self._on_send and self._active):
                self._inner.send(msg, timeout)
                return
            self._tx.enqueue(self._tx.process(msg))
            self._flush_tx(timeout)

    def recv(self, timeout: float | None = None) -> can.Message | None:
        """Receive the next frame that survives the receive-side faults.

        ``timeout`` [s] of wall time (``None`` blocks); returns ``None`` when
        nothing arrives in time.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                self._check()
                self._flush_tx(0.0)
                if self._on_recv:
                    m = self._rx.pop_due()
                    if m is not None:
                        return m
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            # poll in short slices so delayed frames and the send queue keep moving
            wait = 0.005 if remaining is None else min(remaining, 0.005)
            msg = self._inner.recv(wait)
            if msg is not None:
                with self._lock:
                    self._count()
                    if not (self._on_recv and self._active):
                        return msg
                    self._rx.enqueue(self._rx.process(msg))
                    m = self._rx.pop_due()
                    if m is not None:
                        return m
                continue
            if deadline is not None and time.monotonic() >= deadline:
                return None
            if self.wait_futile:
                return None     # nothing can arrive: the rest of the time out would be spent in vain

    def shutdown(self) -> None:
        """Shut the wrapped bus down (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._inner.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
        return False
