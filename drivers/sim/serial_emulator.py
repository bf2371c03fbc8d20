"""What every emulated serial device shares: the pseudo-terminal and its serving thread, the inline
port, the UART's byte time and the reply queue.

A serial device emulator (:class:`~drivers.sim.dynamixel_emulator.DynamixelBusEmulator`,
:class:`~drivers.sim.odrive_ascii_emulator.OdriveAsciiEmulator`) is a
:class:`SerialDeviceEmulator` that adds its firmware: what it does with the bytes a host wrote
(:meth:`SerialDeviceEmulator._receive` inline, :meth:`SerialDeviceEmulator._serve_read` from the
thread), its timed events up to a loop time (:meth:`SerialDeviceEmulator._advance`) and the reply
bytes it queues on the wire (:meth:`SerialDeviceEmulator._push_reply`).  This module holds the
rest, written once:

* ``serve="thread"``: a pseudo-terminal pair (``os.openpty``, the slave in raw mode; a host opens
  :attr:`~SerialDeviceEmulator.port_path` like a serial device) answered by a thread; an error in
  the thread stops the serving (the thread's failure flag, re-raised by ``check()``), as it stops
  an inline emulator;
* ``serve="inline"``: no pseudo-terminal and no thread; the host's port is an
  :class:`InlineSerialPort` whose writes the firmware handles in the host's thread;
* the byte-time model: a byte takes ``SERIAL_BITS_PER_BYTE`` (10, 8N1) bit times at the baud
  rate; a reply is queued with the wall time its last byte is on the wire (``release``), and is
  read then: in wall-clock time (the thread, ``wire_time="wait"``) or on a bus time the inline
  port counts (``wire_time="count"``, for the lock-step clock).
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import select
import threading
import time
import tty
from typing import Callable

from dynamics.errors import CommsError, CommsTimeoutError, ConfigError, DriverError
from ..busload import SERIAL_BITS_PER_BYTE
from ..serial_port import check_timeout, decode_line, encode_line

__all__ = ["SerialDeviceEmulator", "InlineSerialPort", "SERVE_MODES", "WIRE_TIME_MODES", "TIME_EPS_S"]

#: how a device is served: from a thread on a pseudo-terminal, or inline in the host's thread
SERVE_MODES = ("thread", "inline")
#: how an inline port spends the wire time: waited in wall-clock time, or counted (InlineSerialPort)
WIRE_TIME_MODES = ("wait", "count")
#: loop times closer than this are the same instant [s]
TIME_EPS_S = 1e-9
#: a reply due this close is slept for rather than waited in select() [s] (the thread)
_SPIN_S = 0.0005


class SerialDeviceEmulator:
    """The serving machinery of an emulated serial device (see the module docstring).

    A subclass sets its firmware up, then calls :meth:`_serial_init` (the lock exists from
    :meth:`_serial_init` on: a subclass that needs it earlier makes ``self._lock`` itself) and,
    last, :meth:`_start` (the thread starts serving).  It implements :meth:`_receive`,
    :meth:`_advance`, and :meth:`_serve_read` when its thread handles reads otherwise than
    :meth:`_receive` does.

    Attributes
    ----------
    NAME : str
        The device in messages (``"Dynamixel"``).
    PORT : type
        The :class:`InlineSerialPort` subclass :meth:`inline_port` returns.
    baudrate : int
        The modelled UART speed [bit/s].
    serve : {"thread", "inline"}
    port_path : str or None
        The pseudo-terminal a host opens (None inline).
    replies_out : int
        Reply packets or lines taken off the wire (for tests).
    """

    NAME = "serial device"
    PORT: type = None       # set below: InlineSerialPort

    def _serial_init(self, now: Callable[[], float], baudrate: int, serve: str, poll_s: float) -> None:
        """Check ``baudrate`` and ``serve`` and set the serving state up (no thread yet)."""
        if isinstance(baudrate, bool) or not isinstance(baudrate, int) or baudrate <= 0:
            raise ConfigError(f"must be a positive integer, got {baudrate!r}", field="baudrate")
        if serve not in SERVE_MODES:
            raise ConfigError(f"must be one of {SERVE_MODES}, got {serve!r}", field="serve")
        if not hasattr(self, "_lock"):
            self._lock = threading.RLock()
        self._now = now
        self.baudrate = int(baudrate)
        self._byte_s = SERIAL_BITS_PER_BYTE / self.baudrate
        self._poll = float(poll_s)
        self._outq: list = []                 # (release wall time, seq, bytes): replies on the wire
        self._seq = itertools.count()
        self._corrupt = 0
        self.replies_out = 0
        self._error: BaseException | None = None
        self._failed = False                  # serving stopped by an error (the thread's, or inline)
        self._closed = False
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._idle_polls = 0                  # completed polls that found nothing to do
        self.serve = serve
        self._master = self._slave = -1
        self.port_path = None
        self._thread = None

    def _start(self, thread_name: str) -> None:
        """Served by a thread: open the pseudo-terminal pair and start the thread (inline: nothing)."""
        if self.serve == "inline":
            return
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        self.port_path = os.ttyname(self._slave)
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    # -- the firmware's part ------------------------------------------------------------------------
    def _receive(self, data: bytes, t_start: float) -> None:
        """Bytes a host wrote, their first on the wire at wall time ``t_start`` [s]: handled, their
        replies queued (:meth:`_push_reply`).  An error stops the serving: kept in ``_error``
        (re-raised by :meth:`check`), ``_failed`` set, later bytes unanswered."""
        raise NotImplementedError

    def _serve_read(self, data: bytes, t_read: float) -> None:
        """The thread: bytes read from the pseudo-terminal at wall time ``t_read`` [s]."""
        self._receive(data, t_read)

    def _advance(self, t: float) -> None:
        """The device's timed events due up to loop time ``t``, then the plant brought to ``t``
        (lock held)."""
        raise NotImplementedError

    # -- replies on the wire ----------------------------------------------------------------------
    def _push_reply(self, release: float, data: bytes) -> None:
        """Queue reply bytes complete on the wire at wall time ``release`` [s]; a reply to corrupt
        (:meth:`corrupt_replies`) gets one bit of its middle byte flipped."""
        if self._corrupt > 0:
            self._corrupt -= 1
            b = bytearray(data)
            b[len(b) // 2] ^= 0x10
            data = bytes(b)
        heapq.heappush(self._outq, (release, next(self._seq), data))

    def _pop_reply(self, until: float):
        """Inline: ``(t, bytes)`` of the next reply if it is complete on the wire by wall time
        ``until`` [s] (taken off the wire), else None."""
        q = self._outq
        if not q or q[0][0] > until:
            return None
        with self._lock:
            t, _, data = heapq.heappop(q)
            self.replies_out += 1
        return t, data

    def corrupt_replies(self, n: int = 1) -> None:
        """Flip one bit in each of the next ``n`` replies (the host sees a checksum/CRC error or
        a garbled line)."""
        with self._lock:
            self._corrupt += int(n)

    # -- serving --------------------------------------------------------------------------------
    def inline_port(self, timeout_s: float = 0.1, wire_time: str = "wait") -> "InlineSerialPort":
        """The host's end of the serial line when served inline (``serve="inline"``): a
        :attr:`PORT` (see :class:`InlineSerialPort`).

        Raises
        ------
        DriverError
            The device is served by its thread (open :attr:`port_path` instead).
        """
        if self._thread is not None or self.serve != "inline":
            raise DriverError(f"a threaded {self.NAME} emulator is reached through its pseudo-terminal (port_path)")
        return self.PORT(self, timeout_s=timeout_s, wire_time=wire_time)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                wait = self._poll
                if self._outq:
                    wait = max(0.0, min(wait, self._outq[0][0] - time.monotonic()))
                r, _, _ = select.select([self._master], [], [], wait)
                if r:
                    try:
                        data = os.read(self._master, 4096)
                    except OSError:
                        data = b""
                    if data:
                        self._serve_read(data, time.monotonic())
                        if self._failed:
                            return
                while self._outq and self._outq[0][0] <= time.monotonic():
                    _, _, out = heapq.heappop(self._outq)
                    os.write(self._master, out)
                    self.replies_out += 1
                if self._outq:
                    delay = self._outq[0][0] - time.monotonic()
                    if 0 < delay < _SPIN_S:
                        time.sleep(delay)
                elif not r:
                    with self._lock:           # the device's timers run without bytes too
                        self._advance(float(self._now()))
                    with self._idle:
                        self._idle_polls += 1
                        self._idle.notify_all()
        except BaseException as err:  # re-raised by check(); the thread must not die silently
            self._error = err
            self._failed = True         # serving stopped: later bytes go unanswered, as inline

    def disconnect(self) -> None:
        """The adapter disappears: the pseudo-terminal closes (reads on the port fail from now
        on; inline: the port's reads and writes fail)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        for fd in (self._master, self._slave):
            try:
                os.close(fd)
            except OSError:
                pass
        self._master = self._slave = -1

    def close(self) -> None:
        """Stop serving and close the pseudo-terminal; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.disconnect()

    def check(self) -> None:
        """Re-raise an error that stopped the serving."""
        err, self._error = self._error, None
        if err is not None:
            raise CommsError(f"{self.NAME} emulator stopped: {err}") from err

    def sync(self, timeout_s: float = 5.0) -> None:
        """Block until every byte written to the port before this call was handled.

        Waits for the serving thread to complete an idle poll (nothing to read, no reply
        pending) that started after the call, as :meth:`~drivers.sim.emulators.EmulatorHost.sync`
        does for the CAN emulators.  Inline, every byte was handled when it was written: the
        device's timers and the plant are brought up to ``now()``.

        Raises
        ------
        CommsError
            The serving stopped (with its error) or the port was disconnected.
        CommsTimeoutError
            Not synchronised within ``timeout_s`` (wall clock).
        """
        self.check()
        if self._stop.is_set():
            raise CommsError(f"{self.NAME} emulator is disconnected")
        if self._thread is None:              # inline: what an idle poll of the thread does
            if not self._failed:
                self.advance_to(self._now())
            return
        deadline = time.monotonic() + timeout_s
        with self._idle:
            target = self._idle_polls + 2      # the poll running now may have started before the call
            while self._idle_polls < target:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    break
                self._idle.wait(min(left, 0.05))
        self.check()
        if self._idle_polls < target:
            raise CommsTimeoutError(f"{self.NAME} emulator not idle within {timeout_s} s")

    def advance_to(self, t_s: float) -> None:
        """Run the device's timed events (its watchdogs) due up to loop time ``t_s`` [s], then
        advance the plant to ``t_s``, in the caller's thread.

        The serving thread does this on every request and idle poll; after :meth:`disconnect`
        there is no thread, but the device is still powered and its watchdogs still run: this
        is how loop time passes for it then.
        """
        with self._lock:
            self._advance(float(t_s))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class InlineSerialPort:
    """The host's serial port to a :class:`SerialDeviceEmulator` served inline (no pseudo-terminal,
    no thread): what :class:`~drivers.serial_port.SerialTransport` is to the emulator's pty, with
    the methods a driver uses (:meth:`write`, :meth:`read`, :meth:`write_line`,
    :meth:`read_line`, :meth:`reset_input`, :meth:`close`) and the same errors.

    :meth:`write` hands the bytes to the device at once: it handles them, in this thread, at the
    loop time ``now()``, as they complete on the modelled wire, and queues its replies with the
    wall time their last byte is on the wire.  A read gets a reply once its last byte is there.

    Parameters
    ----------
    emulator : SerialDeviceEmulator
        Made with ``serve="inline"`` (:meth:`SerialDeviceEmulator.inline_port`).
    timeout_s : float
        Default read deadline [s].
    wire_time : {"wait", "count"}
        ``"wait"``: reads wait for the wire in wall-clock time, as on the pty or a real bus: a
        cycle lasts its wire time, and a read nobody answers waits its timeout out (for the
        wall clock).  ``"count"``: the wire time is counted on a bus time the port keeps (its
        own time line, moved by the wire alone), not waited: a read gets a reply when the reply
        is complete on the wire before the read's deadline (the bus time plus the read's
        timeout: the driver's deadline less the wall time it already spent), the bus time then
        moves to the reply's end; a read nobody answers fails at once, the bus time moved by
        its timeout.  The same answers and the same timeouts, without spending the wall time:
        for the lock-step clock, on which no loop time passes while the driver waits.
    """

    #: the port's name in messages
    URL = "inline://serial"

    def __init__(self, emulator: SerialDeviceEmulator, *, timeout_s: float = 0.1, wire_time: str = "wait"):
        if wire_time not in WIRE_TIME_MODES:
            raise ConfigError(f"must be one of {WIRE_TIME_MODES}, got {wire_time!r}", field="wire_time")
        self.timeout_s = check_timeout(timeout_s, "timeout_s")
        self.url = self.URL
        self.wire_time = wire_time
        self._emu = emulator
        self._count = wire_time == "count"
        self._buf = bytearray()
        self._bus_t = 0.0                # "count": the bus time reached [s] (the wire's own time line)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise CommsError(f"serial port {self.url!r} is closed")
        if self._emu._stop.is_set():
            raise CommsError(f"serial port {self.url!r}: the adapter disappeared")

    def _wire_now(self) -> float:
        """The time on the wire now [s]: the monotonic clock ("wait"), or the bus time ("count")."""
        return self._bus_t if self._count else time.monotonic()

    def write(self, data: bytes) -> None:
        """Put ``data`` on the wire: the device handles it before this returns.

        Raises
        ------
        CommsError
            The port is closed or the adapter disappeared (:meth:`SerialDeviceEmulator.disconnect`).
        """
        self._check_open()
        self._emu._receive(bytes(data), self._wire_now())

    def write_line(self, text: str, encoding: str = "ascii") -> None:
        """Write ``text`` and ``\\n``."""
        self.write(encode_line(text, b"\n", encoding))

    def read(self, n: int, timeout_s: float | None = None) -> bytes:
        """Read exactly ``n`` bytes.

        Raises
        ------
        CommsTimeoutError
            Fewer than ``n`` bytes arrived before the deadline (they stay buffered).
        CommsError
            The port is closed or the adapter disappeared.
        """
        self._check_open()
        buf = self._buf
        if len(buf) < n:
            self._fill(n, self.timeout_s if timeout_s is None else check_timeout(timeout_s, "timeout_s"))
        out = bytes(buf[:n])
        del buf[:n]
        return out

    def read_line(self, timeout_s: float | None = None, encoding: str | None = "ascii"):
        """One line (``\\r\\n`` or ``\\n`` stripped), as ``str`` (``bytes`` with ``encoding=None``).

        Raises
        ------
        CommsTimeoutError
            No complete line in time (what arrived stays buffered).
        DecodeError
            The line is not ``encoding``.
        CommsError
            Closed, or the port disappeared.
        """
        self._check_open()
        buf = self._buf
        i = buf.find(b"\n")
        if i < 0:
            i = self._fill(None, self.timeout_s if timeout_s is None else check_timeout(timeout_s, "timeout_s"))
        line = bytes(buf[:i])
        del buf[:i + 1]
        if line.endswith(b"\r"):
            line = line[:-1]
        return line if encoding is None else decode_line(line, encoding, self.url)

    def _fill(self, n: int | None, timeout_s: float) -> int:
        """Take replies off the wire into the buffer until it holds ``n`` bytes (``n`` None: a
        complete line; the buffer holds none yet): ``n``, or the index of the line's end.

        Raises
        ------
        CommsTimeoutError
            Not in time (what arrived stays buffered).
        """
        buf = self._buf
        emu = self._emu
        pop = emu._pop_reply
        if self._count:
            deadline = self._bus_t + timeout_s
            while True:
                got = pop(deadline)
                if got is None:
                    self._bus_t = deadline           # the timeout passed on the wire
                    raise CommsTimeoutError(self._short(n))
                t, data = got
                n0 = len(buf)
                buf += data
                if t > self._bus_t:
                    self._bus_t = t
                if n is None:
                    i = buf.find(b"\n", n0)
                    if i >= 0:
                        return i
                elif len(buf) >= n:
                    return n
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            # past the deadline what already arrived is still read, without waiting
            if n is None:
                n0 = len(buf)
                while (got := pop(now)) is not None:
                    buf += got[1]
                i = buf.find(b"\n", n0)
                if i >= 0:
                    return i
            else:
                while len(buf) < n:
                    got = pop(now)
                    if got is None:
                        break
                    buf += got[1]
                if len(buf) >= n:
                    return n
            if now >= deadline:
                raise CommsTimeoutError(self._short(n))
            q = emu._outq
            due = q[0][0] if q else math.inf
            time.sleep(max(0.0, min(due, deadline) - now))
            self._check_open()

    def _short(self, n: int | None) -> str:
        if n is None:
            return f"serial port {self.url!r}: no complete line in time"
        return f"serial port {self.url!r}: got {len(self._buf)} of {n} bytes in time"

    def reset_input(self) -> None:
        """Discard everything received so far (replies still on the wire come later)."""
        self._check_open()
        self._buf.clear()
        pop = self._emu._pop_reply
        now = self._wire_now()
        while pop(now) is not None:
            pass

    def close(self) -> None:
        """Close the port; safe to call more than once."""
        self._closed = True

    def __enter__(self) -> "InlineSerialPort":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


SerialDeviceEmulator.PORT = InlineSerialPort


# ---------------------------------------------------------------------------
# the registry builders' common keys (sim_dynamixel, sim_odrive_ascii)
# ---------------------------------------------------------------------------
def serve_keys(emu_sec, device: str, what: str) -> tuple[str, str]:
    """``(serve, wire_time)`` of a ``[driver.emulator]`` table: ``serve`` (``"thread"`` or
    ``"inline"``), ``wire_time`` (inline only: ``"wait"`` or ``"count"``), documented for
    ``device`` (``"Dynamixel"``) whose emulated ``what`` (``"servos answer"``) is served.

    Raises
    ------
    ConfigError
        A value not allowed, or ``wire_time`` without ``serve = "inline"``.
    """
    serve_doc = (f"{device}: the emulated {what} on a pseudo-terminal from a thread of its own, or inline in "
                 f"the driver's thread on each write (no pty, no thread; the same bytes and firmware)")
    wire_doc = (f"{device}, serve = 'inline': the port's reads wait for the modelled wire in wall-clock time "
                f"(wait: for the wall clock) or count it without waiting (count: the same answers and timeouts, "
                f"for the lock-step clock)")
    serve = emu_sec.str("serve", "thread", choices=list(SERVE_MODES), doc=serve_doc)
    if emu_sec.has("wire_time", doc=wire_doc) and serve != "inline":
        raise emu_sec.error("wire_time", 'needs serve = "inline" (the thread waits for the wire)')
    return serve, emu_sec.str("wire_time", "wait", choices=list(WIRE_TIME_MODES), doc=wire_doc)


def driver_on_port(emu: SerialDeviceEmulator, section, build, *, baudrate: int, wire_time: str, **serial_kw):
    """The real driver ``build(section, now=..., transports={"port": port})`` on the emulator's
    port: its inline port (``serve="inline"``) or a :class:`~drivers.serial_port.SerialTransport`
    on its pseudo-terminal, with the ``[driver]`` table's ``reply_timeout_s`` (0.01 s) as the
    port's read deadline; the port is closed when the driver cannot be built."""
    from ..base import TIMEOUT_MAX_S
    from ..serial_port import SerialTransport
    rt = section.float("reply_timeout_s", 0.01, minimum=0.0, strict_min=True,
                       maximum=TIMEOUT_MAX_S["reply_timeout_s"]) if section.has("reply_timeout_s") else 0.01
    port = (emu.inline_port(timeout_s=rt, wire_time=wire_time) if emu.serve == "inline" else
            SerialTransport(emu.port_path, baudrate=baudrate, timeout_s=rt, **serial_kw))
    try:
        return build(section, transports={"port": port})
    except BaseException:
        port.close()
        raise
