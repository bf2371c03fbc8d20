"""Serial transport (pyserial) with deadlines and a line framer for ASCII protocols.

:class:`SerialTransport` opens a port with :func:`serial.serial_for_url`, so
device paths (``/dev/ttyACM0``), pseudo-terminals (``os.ttyname(fd)``) and
pyserial URLs (``loop://``, ``socket://host:port``, ``rfc2217://...``) all
work.  Reads take a deadline; running out of time raises
:class:`~dynamics.errors.CommsTimeoutError` and keeps any partial data
buffered, so a late line is not lost or split.

:class:`LineFramer` is the pure part: it splits a byte stream into lines.
"""

from __future__ import annotations

import math
import time

from dynamics.errors import CommsError, CommsTimeoutError, DecodeError

__all__ = ["LineFramer", "SerialTransport", "encode_line", "decode_line", "check_timeout", "SERIAL_BAUD_MAX"]

try:  # POSIX: pyserial's port (re)configuration raises termios.error, which is no OSError
    import termios as _termios
    _TERMIOS_ERRORS: tuple = (_termios.error,)
except ImportError:  # pragma: no cover - Windows
    _TERMIOS_ERRORS = ()


def encode_line(text: str, terminator: bytes = b"\n", encoding: str = "ascii") -> bytes:
    """Encode one line of an ASCII protocol (the terminator is appended).

    Raises
    ------
    CommsError
        If ``text`` holds the terminator or cannot be encoded.
    """
    try:
        raw = text.encode(encoding)
    except UnicodeEncodeError as err:
        raise CommsError(f"cannot encode {text!r} as {encoding}") from err
    if terminator in raw:
        raise CommsError(f"line {text!r} contains the terminator {terminator!r}")
    return raw + terminator


def decode_line(line: bytes, encoding: str | None, url) -> str | bytes:
    """A received line (its terminator stripped) as ``str``, or ``bytes`` with ``encoding=None``.

    Raises
    ------
    DecodeError
        The line is not ``encoding`` (names the port ``url``).
    """
    if encoding is None:
        return line
    try:
        return line.decode(encoding)
    except UnicodeDecodeError as err:
        raise DecodeError(f"serial port {url!r}: line {line!r} is not {encoding}") from err


def check_timeout(value, name: str) -> float:
    """``value`` as a timeout [s]: a finite number >= 0 (not a bool).

    Raises
    ------
    CommsError
        Anything else (names ``name``).
    """
    if type(value) is float and 0.0 <= value < math.inf:      # the common case, at once
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
        raise CommsError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)


#: the fastest serial line a USB adapter runs [bit/s] (FTDI high-speed parts: 12 Mbaud)
SERIAL_BAUD_MAX = 12_000_000


class LineFramer:
    """Split a byte stream into terminator-delimited lines.

    Parameters
    ----------
    terminator : bytes
        Line terminator (``b"\\n"``; a trailing ``b"\\r"`` is stripped too).
    max_line_bytes : int
        Longest accepted line; a longer one raises :class:`DecodeError` and is
        discarded up to the next terminator.
    """

    def __init__(self, terminator: bytes = b"\n", max_line_bytes: int = 4096):
        if not terminator:
            raise CommsError("line terminator must not be empty")
        self.terminator = bytes(terminator)
        self.max_line_bytes = int(max_line_bytes)
        self._buf = bytearray()
        self._discarding = False

    @property
    def pending(self) -> bytes:
        """Bytes received but not yet part of a complete line."""
        return bytes(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return the complete lines (without terminator) now available.

        Raises
        ------
        DecodeError
            If a line exceeds ``max_line_bytes`` (the rest of that line is
            dropped; later lines are returned by later calls).
        """
        self._buf += data
        lines = []
        term = self.terminator
        while True:
            i = self._buf.find(term)
            if i < 0:
                break
            line = bytes(self._buf[:i])
            del self._buf[:i + len(term)]
            if self._discarding:
                self._discarding = False
                continue
            if line.endswith(b"\r") and term != b"\r":
                line = line[:-1]
            lines.append(line)
        if len(self._buf) > self.max_line_bytes:
            self._buf.clear()
            self._discarding = True
            raise DecodeError(f"line longer than {self.max_line_bytes} bytes")
        return lines

    def clear(self) -> None:
        """Drop buffered partial data."""
        self._buf.clear()
        self._discarding = False


class SerialTransport:
    """A serial port with deadline-based reads.

    Parameters
    ----------
    url : str
        Device path or pyserial URL (``loop://`` for tests).
    baudrate : int
        Baud rate [bit/s].
    timeout_s : float
        Default read deadline [s].
    write_timeout_s : float
        Write timeout [s].
    terminator : bytes
        Line terminator used by :meth:`read_line` / :meth:`write_line`.
    port : object, optional
        An already-open pyserial-like port to wrap (``read``, ``write``,
        ``in_waiting``, ``timeout``, ``close``).

    Raises
    ------
    CommsError
        The port cannot be opened (names the URL).
    """

    def __init__(self, url: str | None = None, *, baudrate: int = 115200, timeout_s: float = 0.1,
                 write_timeout_s: float = 0.1, terminator: bytes = b"\n", max_line_bytes: int = 4096,
                 port=None):
        if isinstance(baudrate, bool) or not isinstance(baudrate, int) or not 1 <= baudrate <= SERIAL_BAUD_MAX:
            raise CommsError(f"baudrate must be an integer in 1..{SERIAL_BAUD_MAX} bit/s, got {baudrate!r}")
        self.url = url
        self.timeout_s = check_timeout(timeout_s, "timeout_s")
        write_timeout_s = check_timeout(write_timeout_s, "write_timeout_s")
        self._framer = LineFramer(terminator, max_line_bytes)
        self._lines: list[bytes] = []
        self._closed = False
        try:
            import serial  # noqa: PLC0415
        except ImportError as err:  # pragma: no cover - pyserial is a dependency
            raise CommsError("pyserial is not installed") from err
        self._serial_mod = serial
        if port is not None:
            self._port = port
            return
        if not url:
            raise CommsError("SerialTransport needs a url/device path or an open port")
        try:
            self._port = serial.serial_for_url(url, baudrate=baudrate, timeout=self.timeout_s,
                                               write_timeout=write_timeout_s)
        except (serial.SerialException, OSError, ValueError, OverflowError) as err:
            raise CommsError(f"cannot open serial port {url!r}: {err}") from err

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self):
        if self._closed:
            raise CommsError(f"serial port {self.url!r} is closed")

    def write(self, data: bytes) -> None:
        """Write all of ``data``.

        Raises
        ------
        CommsTimeoutError
            The write did not complete within the write timeout.
        CommsError
            Port error.
        """
        self._check_open()
        ser = self._serial_mod
        try:
            n = self._port.write(data)
            self._port.flush()
        except ser.SerialTimeoutException as err:
            raise CommsTimeoutError(f"serial port {self.url!r}: write timed out") from err
        except (ser.SerialException, OSError, *_TERMIOS_ERRORS) as err:
            raise CommsError(f"serial port {self.url!r}: write failed: {err}") from err
        if n is not None and n != len(data):
            raise CommsTimeoutError(f"serial port {self.url!r}: wrote {n} of {len(data)} bytes")

    def _read_some(self, deadline: float) -> bytes:
        remaining = deadline - time.monotonic()
        ser = self._serial_mod
        try:
            waiting = self._port.in_waiting
            if remaining <= 0:
                # past the deadline only what already arrived is read (a stalled process does
                # not lose bytes that came in time), without waiting
                if not waiting:
                    return b""
                remaining = 0
            self._port.timeout = remaining
            return self._port.read(max(1, waiting))
        except (ser.SerialException, OSError, ValueError, *_TERMIOS_ERRORS) as err:
            # pyserial re-applies the port settings when the timeout changes: a device that
            # vanished then fails in termios (termios.error is not an OSError)
            raise CommsError(f"serial port {self.url!r}: read failed: {err}") from err

    def _deadline(self, timeout_s: float | None) -> float:
        return time.monotonic() + (self.timeout_s if timeout_s is None else check_timeout(timeout_s, "timeout_s"))

    def read(self, n: int, timeout_s: float | None = None) -> bytes:
        """Read exactly ``n`` bytes (line-buffered data is consumed first).

        Raises
        ------
        CommsTimeoutError
            Fewer than ``n`` bytes arrived before the deadline (they stay buffered).
        """
        self._check_open()
        deadline = self._deadline(timeout_s)
        buf = bytearray(self._take_buffered())
        while len(buf) < n:
            chunk = self._read_some(deadline)
            if chunk:
                buf += chunk
            elif time.monotonic() >= deadline:
                self._unread(bytes(buf))  # keep partial data for the next read
                raise CommsTimeoutError(f"serial port {self.url!r}: got {len(buf)} of {n} bytes in time")
        self._unread(bytes(buf[n:]))
        return bytes(buf[:n])

    def _take_buffered(self) -> bytes:
        term = self._framer.terminator
        out = b"".join(line + term for line in self._lines) + self._framer.pending
        self._lines.clear()
        self._framer.clear()
        return out

    def _unread(self, data: bytes) -> None:
        if data:
            self._lines.extend(self._framer.feed(data))

    def read_line(self, timeout_s: float | None = None, encoding: str | None = "ascii"):
        """Read one line (terminator stripped), as ``str`` (or ``bytes`` if ``encoding`` is None).

        Raises
        ------
        CommsTimeoutError
            No complete line before the deadline (partial data stays buffered).
        DecodeError
            Line too long or not decodable.
        """
        self._check_open()
        deadline = self._deadline(timeout_s)
        while not self._lines:
            chunk = self._read_some(deadline)
            if chunk:
                self._lines.extend(self._framer.feed(chunk))
            elif time.monotonic() >= deadline:
                raise CommsTimeoutError(f"serial port {self.url!r}: no complete line in time")
        return decode_line(self._lines.pop(0), encoding, self.url)

    def write_line(self, text: str, encoding: str = "ascii") -> None:
        """Write ``text`` plus the terminator."""
        self.write(encode_line(text, self._framer.terminator, encoding))

    def request(self, text: str, timeout_s: float | None = None) -> str:
        """Write a line and return the next line received."""
        self.write_line(text)
        return self.read_line(timeout_s)

    def reset_input(self) -> None:
        """Discard everything received so far (port buffer and framer)."""
        self._check_open()
        self._framer.clear()
        self._lines.clear()
        try:
            self._port.reset_input_buffer()
        except (self._serial_mod.SerialException, OSError, *_TERMIOS_ERRORS) as err:
            raise CommsError(f"serial port {self.url!r}: reset failed: {err}") from err

    def close(self) -> None:
        """Close the port; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        try:
            self._port.close()
        except (self._serial_mod.SerialException, OSError, *_TERMIOS_ERRORS) as err:
            raise CommsError(f"serial port {self.url!r}: close failed: {err}") from err

    def __enter__(self) -> "SerialTransport":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False
