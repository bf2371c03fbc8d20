"""CAN transport: a thin wrapper around a python-can bus with errors from the error tree.

:class:`CanTransport` opens a python-can bus by interface name
(``"virtual"``, ``"udp_multicast"``, ``"socketcan"``, ``"pcan"``, ``"slcan"``,
...).  python-can imports a backend only when it is chosen, so a missing
optional dependency (vendor library, ``msgpack`` for ``udp_multicast``...) or a
bad channel surfaces here as a :class:`~dynamics.errors.CommsError` naming the
interface and channel, chained ``from`` the original error.

A transport can also wrap an existing bus object (anything with the
:class:`BusLike` methods), which is how the simulation wraps a bus in a
fault-injecting proxy.

Frames are exchanged as :class:`Frame` records (id, payload bytes, time stamp,
flags), so the drivers never touch python-can types.
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

from dynamics.errors import CommsError, CommsTimeoutError, DriverError

__all__ = ["Frame", "BusLike", "CanTransport", "group_by_bus", "message_fields", "recv_any", "recv_any_fields", "recv_queued_fields",
           "rehearsal_address"]


@dataclass(frozen=True)
class Frame:
    """One CAN frame as seen by the drivers.

    Attributes
    ----------
    arbitration_id : int
        11-bit (or 29-bit if ``is_extended_id``) identifier.
    data : bytes
        Payload (empty for a remote frame).
    timestamp : float
        Receive time stamp from the bus backend [s] (backend clock, 0 for frames
        built locally).
    is_error_frame : bool
        True for a CAN error frame (payload meaningless).
    is_remote : bool
        True for a remote transmission request (RTR).
    is_extended_id : bool
        True for a 29-bit identifier.
    dlc : int or None
        Data length code of a remote frame (``None``: ``len(data)``).
    """

    arbitration_id: int
    data: bytes = b""
    timestamp: float = 0.0
    is_error_frame: bool = False
    is_remote: bool = False
    is_extended_id: bool = False
    dlc: int | None = None


@runtime_checkable
class BusLike(Protocol):
    """The part of :class:`can.BusABC` the transport uses."""

    def send(self, msg: Any, timeout: float | None = None) -> None: ...

    def recv(self, timeout: float | None = None) -> Any: ...

    def shutdown(self) -> None: ...


def _import_can():
    try:
        import can  # noqa: PLC0415 - optional at import time of the package
    except ImportError as err:  # pragma: no cover - python-can is a dependency
        raise CommsError("python-can is not installed") from err
    return can


class CanTransport:
    """A CAN bus for the drivers.

    Parameters
    ----------
    interface : str, optional
        python-can interface name (``"virtual"``, ``"udp_multicast"``,
        ``"socketcan"``, ``"pcan"``, ``"slcan"``...).  Required unless ``bus``
        is given.
    channel : str or int, optional
        Interface channel (``"can0"``, ``"PCAN_USBBUS1"``, a serial port, a
        virtual channel name, a multicast group...).
    bitrate : int, optional
        Nominal bit rate [bit/s] (ignored by virtual buses).
    bus : BusLike, optional
        An already-open bus to wrap instead of opening one.
    name : str, optional
        Name used in error messages (default ``"interface:channel"``).
    send_timeout_s : float
        Time a send may block when the TX queue is full.
    **kwargs
        Passed to :class:`can.Bus` (e.g. ``fd=True``, ``data_bitrate=...``,
        ``receive_own_messages=False``).

    Raises
    ------
    CommsError
        Unknown interface, missing backend dependency, bad channel, or any
        other failure opening the bus.
    """

    def __init__(self, interface: str | None = None, channel: str | int | None = None, *,
                 bitrate: int | None = None, bus: BusLike | None = None, name: str | None = None,
                 send_timeout_s: float = 0.01, **kwargs):
        if not (isinstance(send_timeout_s, (int, float)) and math.isfinite(send_timeout_s) and send_timeout_s >= 0):
            raise CommsError(f"send_timeout_s must be finite and >= 0, got {send_timeout_s!r}")
        self.send_timeout_s = float(send_timeout_s)
        self.interface = interface
        self.channel = channel
        #: nominal bit rate [bit/s] if known (used by the bus-load budget), else None
        self.bitrate = None if bitrate is None else int(bitrate)
        #: CAN FD data-phase bit rate [bit/s] if the bus was opened in FD mode, else None
        self.data_bitrate = kwargs.get("data_bitrate") if kwargs.get("fd") else None
        self._fd = bool(kwargs.get("fd", False))
        self.name = name or (f"{interface}:{channel}" if interface else "bus")
        self.frames_sent = 0
        self.frames_received = 0
        self.error_frames = 0
        self._closed = False
        self._can = _import_can()
        #: the bus' channel of frame fields (``send_fields`` / ``recv_fields``, no python-can
        #: message per frame: an in-process emulator's bus, ``fields_channel = True``), or None;
        #: decided here, once (a bus wrapped by another, e.g. a fault injector, has none)
        self._fields_bus = None
        #: the bus that says whether waiting is futile (:attr:`wait_is_futile`): the fields bus, or
        #: a wrapper with a ``wait_futile`` property (a fault injector around one); decided once
        self._futile_bus = None
        if bus is not None:
            if not isinstance(bus, BusLike):
                raise CommsError(f"{self.name}: object {bus!r} has no send/recv/shutdown")
            self._bus = bus
            if getattr(type(bus), "fields_channel", False) is True:
                self._fields_bus = bus
            if hasattr(type(bus), "wait_futile"):
                self._futile_bus = bus
            return
        if not interface or not isinstance(interface, str):
            raise CommsError("CanTransport needs an interface name or an open bus")
        opts = dict(kwargs)
        if bitrate is not None:
            opts["bitrate"] = int(bitrate)
        try:
            self._bus = self._can.Bus(interface=interface, channel=channel, **opts)
        except (self._can.CanError, OSError, ImportError, ValueError, TypeError, NotImplementedError,
                AttributeError) as err:
            raise CommsError(
                f"cannot open CAN interface {interface!r} channel {channel!r}: "
                f"{type(err).__name__}: {err}{_open_hint(interface, channel, bitrate, err)}") from err

    @classmethod
    def from_bus(cls, bus: BusLike, *, name: str = "bus", send_timeout_s: float = 0.01) -> "CanTransport":
        """Wrap an existing python-can bus (or a proxy with the :class:`BusLike` methods)."""
        return cls(bus=bus, name=name, send_timeout_s=send_timeout_s)

    # ------------------------------------------------------------------
    @property
    def bus(self) -> BusLike:
        """The wrapped bus object."""
        return self._bus

    @property
    def fields_channel(self) -> bool:
        """Whether frames are handed over as fields (an in-process emulator's bus), not as
        python-can messages."""
        return self._fields_bus is not None

    @property
    def wait_is_futile(self) -> bool:
        """Whether waiting for a frame cannot bring one: a fields channel whose devices are served
        in this thread on a clock that stands still while the driver waits (its ``wait_futile``,
        :class:`drivers.sim.emulators.InlineBus` on the lock-step clock), or a bus that says so
        itself (a fault injector around one).  False for any other bus."""
        fb = self._futile_bus
        return fb is not None and bool(fb.wait_futile)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise CommsError(f"{self.name}: transport is closed")

    def send(self, arbitration_id: int, data: bytes = b"", is_extended_id: bool = False, *,
             is_remote: bool = False, dlc: int | None = None) -> None:
        """Send one frame.

        Parameters
        ----------
        arbitration_id : int
            Identifier.
        data : bytes
            Payload, 0..8 bytes (64 on an FD bus).
        is_extended_id : bool
            29-bit identifier.
        is_remote : bool
            Send a remote (RTR) frame; ``dlc`` gives the requested length.
        dlc : int, optional
            Data length code for a remote frame.

        Raises
        ------
        CommsError
            The bus refused the frame (bus off, TX buffer full, closed...).
        CommsTimeoutError
            The frame could not be queued within ``send_timeout_s``.
        """
        if self._closed:
            raise CommsError(f"{self.name}: transport is closed")
        can = self._can
        try:
            self._bus.send(self._message(arbitration_id, data, is_extended_id,
                                         (0 if dlc is None else dlc) if is_remote else None),
                           timeout=self.send_timeout_s)
        except can.CanTimeoutError as err:
            raise CommsTimeoutError(f"{self.name}: send of id 0x{arbitration_id:X} timed out") from err
        except (can.CanError, OSError, ValueError, TypeError) as err:
            raise CommsError(f"{self.name}: send of id 0x{arbitration_id:X} failed: {err}") from err
        self.frames_sent += 1

    def _message(self, arbitration_id: int, data: bytes, is_extended_id: bool, remote_dlc: int | None):
        """The python-can message of a data frame (``remote_dlc`` None) or of a remote frame
        requesting ``remote_dlc`` bytes."""
        can = self._can
        if remote_dlc is not None:
            return can.Message(arbitration_id=arbitration_id, is_extended_id=is_extended_id,
                               is_remote_frame=True, dlc=remote_dlc)
        fd = self._fd or len(data) > 8
        # can.Message(arbitration_id=..., data=..., is_extended_id=..., is_fd=fd, bitrate_switch=...)
        # with every argument given by position (timestamp, arbitration_id, is_extended_id,
        # is_remote_frame, is_error_frame, channel, dlc, data, is_fd, is_rx, bitrate_switch; the
        # others at their defaults): the same message, made faster
        return can.Message(0.0, arbitration_id, is_extended_id, False, False, None, None, data, fd, True,
                           fd and self.data_bitrate is not None)

    def send_batch(self, frames: Sequence[tuple[int, bytes, int | None]]) -> None:
        """Send frames back to back, as :meth:`send` of each in turn (the same messages, the same
        errors), with one call: a driver's per-cycle frames on this bus.

        Parameters
        ----------
        frames : sequence of (arbitration_id, data, remote_dlc)
            Standard (11-bit) identifiers; ``remote_dlc`` None for a data frame carrying ``data``,
            else a remote frame requesting that many bytes (``data`` ignored).

        Raises
        ------
        CommsError, CommsTimeoutError
            As :meth:`send`, for the first frame refused (the frames before it were sent).
        """
        if self._closed:
            raise CommsError(f"{self.name}: transport is closed")
        can = self._can
        send = self._bus.send
        message = self._message
        timeout = self.send_timeout_s
        arb = 0
        fb = self._fields_bus
        try:
            if fb is not None and not self._fd:
                # the same frames handed over as fields, in one call (classic frames only; a loop,
                # not all() of a generator: a third of its time)
                for _, d, r in frames:
                    if r is None and len(d) > 8:
                        break
                else:
                    fb.send_fields(frames)
                    self.frames_sent += len(frames)
                    return
            for arb, data, remote_dlc in frames:
                send(message(arb, data, False, remote_dlc), timeout=timeout)
                self.frames_sent += 1
        except can.CanTimeoutError as err:
            raise CommsTimeoutError(f"{self.name}: send of id 0x{arb:X} timed out") from err
        except (can.CanError, OSError, ValueError, TypeError) as err:
            raise CommsError(f"{self.name}: send of id 0x{arb:X} failed: {err}") from err

    def exchange_fields(self, frames: Sequence[tuple[int, bytes, int | None]], n: int) -> list[tuple] | None:
        """:meth:`send_batch` of ``frames`` then :meth:`recv_fields_upto` of ``n``, in one call,
        where the bus does both at once (``exchange_fields`` of an
        :class:`~drivers.sim.emulators.InlineBus`: its devices' answers to a run they serve in one
        call handed over without a pass through its queue): the same frames sent and received,
        the same counters.  Returns None, nothing sent, for any other bus, classic frames of more
        than 8 bytes, an FD bus, or a transport whose ``send``/``send_batch``/``recv_fields``
        were replaced on the instance (a tap that must see every frame): the caller sends them.

        Raises
        ------
        CommsError
            The bus failed.
        """
        ex = getattr(self._fields_bus, "exchange_fields", None)
        if ex is None or self._closed or self._fd or "recv_fields" in self.__dict__ or "send" in self.__dict__ \
                or "send_batch" in self.__dict__ or not all(r is not None or len(d) <= 8 for _, d, r in frames):
            return None
        try:
            out = ex(frames, n)
        except (self._can.CanError, OSError, ValueError) as err:
            raise CommsError(f"{self.name}: exchange failed: {err}") from err
        if out is not None:
            self.frames_sent += len(frames)
            self.frames_received += len(out)
            for f in out:
                if f[3]:
                    self.error_frames += 1
        return out

    def serve_batch(self, arbs: tuple, payloads, out_arb, out) -> int | None:
        """Send classic data frames with standard ids ``arbs`` and 8 data bytes (``payloads``,
        (m, 8) uint8) back to back and receive the devices' answers at once, in one call, where the
        bus serves its devices in this thread on a clock that stands still meanwhile
        (``serve_batch`` of an :class:`~drivers.sim.emulators.InlineBus`): what :meth:`send_batch`
        then :meth:`recv_fields` until the queue is empty give, the answers written to ``out_arb``
        (arbitration ids) and ``out`` (rows of the length, then the data), counted as sent and
        received.  Returns their number, or None, nothing sent: any other bus, an FD bus, a
        transport whose ``send``/``recv_fields`` were replaced on the instance (a tap that must see
        every frame)."""
        serve = getattr(self._fields_bus, "serve_batch", None)
        if serve is None or self._closed or self._fd or "recv_fields" in self.__dict__ or "send" in self.__dict__ \
                or "send_batch" in self.__dict__:
            return None
        try:
            r = serve(arbs, payloads, out_arb, out)
        except (self._can.CanError, OSError, ValueError) as err:
            raise CommsError(f"{self.name}: exchange failed: {err}") from err
        if r is not None:
            self.frames_sent += len(arbs)
            self.frames_received += r
        return r

    def send_frame(self, frame: Frame) -> None:
        """Send a :class:`Frame`."""
        self.send(frame.arbitration_id, frame.data, frame.is_extended_id,
                  is_remote=frame.is_remote, dlc=frame.dlc)

    def send_many(self, frames: Iterable[Frame | tuple[int, bytes]]) -> None:
        """Send frames back to back (``Frame`` objects or ``(arbitration_id, data)`` pairs)."""
        for f in frames:
            if isinstance(f, Frame):
                self.send_frame(f)
            else:
                arb, data = f
                self.send(arb, data)

    def recv(self, timeout_s: float | None = 0.0) -> Frame | None:
        """Receive one frame, waiting at most ``timeout_s`` seconds (0: poll, None: block).

        Returns
        -------
        Frame or None
            ``None`` if nothing arrived in time.

        Raises
        ------
        CommsError
            The bus failed.
        """
        f = self.recv_fields(timeout_s)
        return None if f is None else Frame(*f)

    def recv_fields(self, timeout_s: float | None = 0.0) -> tuple | None:
        """:meth:`recv` without the record: the :class:`Frame`'s fields as a tuple, in its order.

        ``(arbitration_id, data, timestamp, is_error_frame, is_remote, is_extended_id, dlc)``,
        the same values (``Frame(*fields)`` is what :meth:`recv` returns), or ``None``;
        for the drivers' per-frame paths.

        Raises
        ------
        CommsError
            The bus failed.
        """
        if self._closed:
            raise CommsError(f"{self.name}: transport is closed")
        fb = self._fields_bus
        try:
            if fb is not None:
                f = fb.recv_fields(timeout_s)
                if f is None:
                    return None
                self.frames_received += 1
                if f[3]:
                    self.error_frames += 1
                return f
            msg = self._bus.recv(timeout=timeout_s)
        except (self._can.CanError, OSError, ValueError) as err:
            raise CommsError(f"{self.name}: receive failed: {err}") from err
        if msg is None:
            return None
        self.frames_received += 1
        if msg.is_error_frame:
            self.error_frames += 1
        return message_fields(msg)

    def recv_fields_upto(self, n: int) -> list[tuple]:
        """Up to ``n`` frames already queued, without waiting: what calling :meth:`recv_fields`
        with no time ``n`` times, or until it returns ``None``, gives (the same frames, counters
        and errors), in one call where the bus hands several over at once (a fields channel with
        its own ``recv_fields_upto``, :class:`drivers.sim.emulators.InlineBus`).

        Raises
        ------
        CommsError
            The bus failed.
        """
        fb = self._fields_bus
        take = getattr(fb, "recv_fields_upto", None)
        if take is None or self._closed or "recv_fields" in self.__dict__:
            # (a recv_fields set on this object, a fault injector's or a test's hook, sees each frame)
            out = []
            recv = self.recv_fields
            while len(out) < n:
                f = recv(0.0)
                if f is None:
                    break
                out.append(f)
            return out
        try:
            out = take(n)
        except (self._can.CanError, OSError, ValueError) as err:
            raise CommsError(f"{self.name}: receive failed: {err}") from err
        self.frames_received += len(out)
        for f in out:
            if f[3]:
                self.error_frames += 1
        return out

    def drain(self, max_frames: int = 100_000) -> int:
        """Discard every frame already queued; return how many were dropped."""
        n = 0
        recv = self.recv_fields
        while n < max_frames and recv(0.0) is not None:
            n += 1
        return n

    def close(self) -> None:
        """Shut the bus down; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        try:
            self._bus.shutdown()
        except (self._can.CanError, OSError) as err:
            raise CommsError(f"{self.name}: shutdown failed: {err}") from err

    def __enter__(self) -> "CanTransport":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def __repr__(self) -> str:
        return f"CanTransport({self.name!r}, closed={self._closed})"


def recv_any(transports: Sequence[CanTransport], timeout_s: float,
             slice_s: float = 0.0002) -> tuple[int, Frame] | None:
    """Receive the next frame from whichever of several transports has one.

    With one transport this is a plain blocking :meth:`CanTransport.recv`.
    With several, every transport is polled, then the first one is waited on
    for at most ``slice_s`` before polling again, until ``timeout_s`` passed.

    Returns
    -------
    (index, Frame) or None
        Index into ``transports`` and the frame, or ``None`` on timeout.
    """
    got = recv_any_fields(transports, timeout_s, slice_s)
    return None if got is None else (got[0], Frame(*got[1]))


def _open_hint(interface: str, channel, bitrate: int | None, err: BaseException) -> str:
    """What to do when a SocketCAN interface does not open, by the error the kernel gave."""
    if interface != "socketcan" or not isinstance(err, OSError):
        return ""
    up = f"`sudo ip link set {channel} up type can bitrate {bitrate or 1000000}`"
    if err.errno == errno.EAFNOSUPPORT:
        return ("; this kernel has no SocketCAN (AF_CAN): load it with `sudo modprobe can_raw` (and the "
                "adapter's driver), or rehearse without hardware (hil_configs/rehearsal/)")
    if err.errno == errno.ENODEV:
        return (f"; there is no interface {channel!r}: `ip -details link show` lists the CAN interfaces "
                f"(a USB adapter appears when plugged in; a serial-line one after `sudo slcand -o -s8 "
                f"/dev/ttyACM0 {channel}`), then bring it up with {up}")
    if err.errno == errno.ENETDOWN:
        return f"; the interface is down: bring it up with {up}"
    return ""


def recv_any_fields(transports: Sequence[CanTransport], timeout_s: float,
                    slice_s: float = 0.0002) -> tuple[int, tuple] | None:
    """:func:`recv_any` with the frame as :meth:`CanTransport.recv_fields` gives it (no record)."""
    if len(transports) == 1:
        f = transports[0].recv_fields(max(0.0, timeout_s))
        return None if f is None else (0, f)
    deadline = time.monotonic() + max(0.0, timeout_s)
    while True:
        for i, t in enumerate(transports):
            f = t.recv_fields(0.0)
            if f is not None:
                return i, f
        if all(t.wait_is_futile for t in transports):
            return None     # nothing can come while this waits (a lock-step clock, devices inline)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        f = transports[0].recv_fields(min(remaining, slice_s))
        if f is not None:
            return 0, f


def message_fields(msg) -> tuple:
    """A python-can message's fields as :meth:`CanTransport.recv_fields` gives them:
    ``(arbitration_id, data, timestamp, is_error_frame, is_remote, is_extended_id, dlc)``."""
    remote = bool(msg.is_remote_frame)
    data = msg.data
    return (msg.arbitration_id, bytes(data) if data is not None else b"", float(msg.timestamp or 0.0),
            bool(msg.is_error_frame), remote, bool(msg.is_extended_id), msg.dlc if remote else None)


def recv_queued_fields(transports: Sequence[CanTransport]) -> list[tuple[int, tuple]]:
    """Every frame already queued on any of ``transports``, without waiting, in one pass.

    The frames calling :func:`recv_any_fields` with no time until it returns ``None`` takes, each
    transport's in their order (a transport is read until it is empty, then the next), without
    scanning the earlier transports again for every frame of a later one; with several, the pass
    repeats until one finds nothing, so a frame that reached an earlier transport meanwhile is taken
    too (one transport is read until it is empty, once: what that polling takes).

    Returns
    -------
    list of (index, fields)
        Index into ``transports`` and the frame as :meth:`CanTransport.recv_fields` gives it.
    """
    out: list[tuple[int, tuple]] = []
    if len(transports) == 1:
        # one transport: read until it is empty (no earlier transport a frame may reach meanwhile)
        recv = transports[0].recv_fields
        f = recv(0.0)
        while f is not None:
            out.append((0, f))
            f = recv(0.0)
        return out
    while True:
        n = len(out)
        for i, t in enumerate(transports):
            recv = t.recv_fields
            f = recv(0.0)
            while f is not None:
                out.append((i, f))
                f = recv(0.0)
        if len(out) == n:
            return out


def group_by_bus(devices: Sequence[tuple[Any, int]], what: str,
                 id_name: str) -> tuple[list[CanTransport], list[int], list[dict[int, int]]]:
    """The buses of a driver's devices, and the rule that one id names one device per bus.

    Parameters
    ----------
    devices : sequence of (transport, device id), in joint order.
    what, id_name : the devices' and the id's names in the message (``"axes"``, ``"node id"``).

    Returns
    -------
    buses : the transports in order of first appearance;
    bus_of : per device, the index of its bus in ``buses``;
    by_id : per bus, each device id's joint index.

    Raises
    ------
    DriverError
        Two devices with one id on one bus.
    """
    buses: list[CanTransport] = []
    bus_of: list[int] = []
    by_id: list[dict[int, int]] = []
    for j, (transport, dev_id) in enumerate(devices):
        for b, t in enumerate(buses):
            if t is transport:
                break
        else:
            buses.append(transport)
            by_id.append({})
            b = len(buses) - 1
        if dev_id in by_id[b]:
            raise DriverError(f"{what} {by_id[b][dev_id]} and {j} share {id_name} {dev_id} on bus {transport.name}")
        by_id[b][dev_id] = j
        bus_of.append(b)
    return buses, bus_of, by_id


#: the ports :func:`rehearsal_address` chooses from (above the well-known and registered ranges
#: most services use, below the kernel's ephemeral ports)
REHEARSAL_PORTS = (20000, 32000)


def rehearsal_address(name: str, uid: int | None = None) -> tuple[str, int]:
    """The ``udp_multicast`` group and port of a rehearsal: derived from its name and the user.

    A rehearsal's server (``[server] rehearsal = NAME``) and controller (``[driver.bus]
    rehearsal = NAME``) name it alike and so meet on one bus; two rehearsals with other names,
    or run by other users, get other groups and ports (python-can binds the port on every
    interface, and Linux delivers a port's datagrams of every group joined on the host: the
    port must differ, not only the group).  SHA-256 of ``"<uid>:<name>"``: group
    ``239.a.b.c`` (administratively scoped) from its first three bytes, port in
    :data:`REHEARSAL_PORTS` from the next two.

    Parameters
    ----------
    name : non-empty string.
    uid : the user id (default: this process's, ``os.getuid()`` where it exists, else 0).

    Returns
    -------
    (group, port)
    """
    if not isinstance(name, str) or not name.strip():
        raise DriverError(f"a rehearsal name must be a non-empty string, got {name!r}")
    if uid is None:
        uid = os.getuid() if hasattr(os, "getuid") else 0
    h = hashlib.sha256(f"{uid}:{name}".encode()).digest()
    lo, hi = REHEARSAL_PORTS
    return f"239.{h[0]}.{h[1]}.{h[2]}", lo + int.from_bytes(h[3:5], "big") % (hi - lo)
