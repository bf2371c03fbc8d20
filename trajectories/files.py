"""Trajectories read from a file of time-stamped positions (a planner's output, a recording).

File formats
------------
CSV (``.csv``, ``.txt``)
    One row per sample: time [s] in the first column, then one column per coordinate
    (joint positions [rad or m], or task coordinates).  Comma, semicolon, tab or
    whitespace separated; an optional first row of column names (``t,q1,q2,...``: the
    names of the coordinates are kept); lines starting with ``#`` are comments.
NPY (``.npy``)
    A float array of shape (K, 1 + dim) laid out as the CSV, or a structured array
    with a time field ``t`` (or ``time``/``time_s``) and one scalar field per coordinate.

The samples must be finite, at least two, with strictly increasing times; the
trajectory starts at the first time (shifted to 0).  Between samples it is a spline
through every sample (:class:`~trajectories.splines.ViaPointSpline`, scipy
``make_interp_spline``/``CubicSpline``), so velocity and acceleration come from the
spline's derivatives, not from finite differences: ``"quintic"`` (default; C4, at rest
with zero acceleration at both ends) or ``"cubic"`` (C2; ``bc = "clamped"``: at rest at
both ends, ``"natural"``: zero acceleration at both ends, free end velocities).

Run config::

    [trajectory]
    type = "file"
    path = "plans/pick.csv"        # relative to the run config's folder
    kind = "quintic"               # or "cubic"
    bc = "clamped"                 # cubic only: or "natural"
    space = "joint"                # or "task" (mapped through the robot's inverse kinematics)
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from dynamics.errors import ConfigError

from .splines import ViaPointSpline

__all__ = ["read_samples", "FileTrajectory"]

_TIME_NAMES = ("t", "time", "time_s", "t_s")


def _fail(path: Path, message: str) -> ConfigError:
    return ConfigError(message, file=str(path))


def _read_csv(path: Path) -> tuple[np.ndarray, np.ndarray, tuple[str, ...] | None]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise _fail(path, f"not a CSV text file: byte 0x{err.object[err.start]:02x} at offset "
                          f"{err.start} is not UTF-8") from err
    except OSError as err:
        raise _fail(path, f"cannot read the file: {err}") from err
    lines = [(i + 1, ln) for i, ln in enumerate(text.splitlines())
             if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise _fail(path, "no samples (empty file)")
    sample = "\n".join(ln for _, ln in lines[:5])
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=",;\t ")
        delim = dialect.delimiter
    except csv.Error:
        delim = ","

    def split(ln: str) -> list[str]:
        if delim == " ":
            return ln.split()
        return [c.strip() for c in next(csv.reader(io.StringIO(ln), delimiter=delim))]

    names = None
    first = split(lines[0][1])
    try:
        [float(c) for c in first]
    except ValueError:
        names = tuple(first)
        lines = lines[1:]
    rows = []
    for lineno, ln in lines:
        cells = split(ln)
        try:
            rows.append([float(c) for c in cells])
        except ValueError as err:
            raise _fail(path, f"line {lineno}: not a number ({err})") from err
        if len(rows[-1]) != len(rows[0]):
            raise _fail(path, f"line {lineno}: {len(rows[-1])} columns, the first sample has "
                              f"{len(rows[0])}")
    if not rows:
        raise _fail(path, "no samples (only a header)")
    data = np.asarray(rows, dtype=float)
    if names is not None and len(names) != data.shape[1]:
        raise _fail(path, f"the header names {len(names)} columns, the samples have {data.shape[1]}")
    return data[:, 0], data[:, 1:], (None if names is None else names[1:])


def _read_npy(path: Path) -> tuple[np.ndarray, np.ndarray, tuple[str, ...] | None]:
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
        if magic != b"\x93NUMPY":
            raise _fail(path, "not a .npy file (numpy's format); save with numpy.save")
        arr = np.load(path, allow_pickle=False)
    except ConfigError:
        raise
    except ValueError as err:
        raise _fail(path, "cannot read the .npy file: it holds Python objects, not numbers "
                          "(save a float array)" if "pickle" in str(err) else
                          f"cannot read the .npy file: damaged or truncated ({err})") from err
    except (OSError, EOFError) as err:
        raise _fail(path, f"cannot read the .npy file: {type(err).__name__}: {err}") from err
    if arr.dtype.names:
        tname = next((n for n in _TIME_NAMES if n in arr.dtype.names), None)
        if tname is None:
            raise _fail(path, f"structured array without a time field (one of {list(_TIME_NAMES)}); "
                              f"fields: {list(arr.dtype.names)}")
        others = [n for n in arr.dtype.names if n != tname]
        if arr.ndim != 1 or not others or any(arr.dtype[n].shape for n in others):
            raise _fail(path, "expected a 1-D structured array of scalar fields (time + one per "
                              "coordinate)")
        try:
            cols = [np.asarray(arr[n], dtype=float) for n in others]
            t = np.asarray(arr[tname], dtype=float)
        except (TypeError, ValueError) as err:
            raise _fail(path, f"non-numeric field: {err}") from err
        return t, np.column_stack(cols), tuple(others)
    if arr.ndim != 2 or arr.shape[1] < 2 or not np.issubdtype(arr.dtype, np.number):
        raise _fail(path, f"expected a numeric array of shape (K, 1 + dim) (time, then one column "
                          f"per coordinate), got {arr.dtype} {arr.shape}")
    data = arr.astype(float)
    return data[:, 0], data[:, 1:], None


def read_samples(path: str | Path) -> tuple[np.ndarray, np.ndarray, tuple[str, ...] | None]:
    """Read and validate a trajectory file (see module docstring).

    Parameters
    ----------
    path : str or Path
        A ``.csv``/``.txt`` or ``.npy`` file.

    Returns
    -------
    t_s : ndarray, shape (K,)
        Strictly increasing sample times [s] (as in the file).
    positions : ndarray, shape (K, dim)
        Positions at those times.
    names : tuple of str or None
        Coordinate names from the header / structured fields.

    Raises
    ------
    ConfigError
        Naming the file (and line or sample): unreadable, unknown format, bad shape,
        non-finite values, times not strictly increasing, fewer than two samples.
    """
    p = Path(path)
    if not p.is_file():
        raise _fail(p, "trajectory file not found")
    suffix = p.suffix.lower()
    if suffix == ".npy":
        t, Q, names = _read_npy(p)
    elif suffix in (".csv", ".txt", ".tsv", ".dat"):
        t, Q, names = _read_csv(p)
    else:
        raise _fail(p, f"unknown trajectory file type {suffix!r} (use .csv or .npy)")
    if t.size < 2:
        raise _fail(p, f"at least 2 samples are needed, got {t.size}")
    if Q.shape[1] < 1:
        raise _fail(p, "no position columns after the time column")
    bad = ~np.isfinite(np.column_stack([t, Q])).all(axis=1)
    if bad.any():
        k = int(np.argmax(bad))
        raise _fail(p, f"sample {k} (t = {float(t[k]):g}) has a non-finite value")
    dt = np.diff(t)
    if np.any(dt <= 0):
        k = int(np.argmax(dt <= 0)) + 1
        raise _fail(p, f"times must be strictly increasing: sample {k} has t = {float(t[k]):g} after "
                       f"t = {float(t[k - 1]):g}")
    return t, Q, names


class FileTrajectory(ViaPointSpline):
    """A spline through the samples of a trajectory file (see module docstring).

    Parameters
    ----------
    path : str or Path
        ``.csv`` or ``.npy`` file of time [s] and positions, shape (K, 1 + dim).
    kind : {"quintic", "cubic"}
    bc : {"clamped", "natural"}
        End conditions (``natural``: cubic only).

    Attributes
    ----------
    path : Path
    times_s, points : ndarray
        The samples (times shifted to start at 0), shapes (K,) and (K, dim).

    Raises
    ------
    ConfigError
        A bad file (see :func:`read_samples`).
    TrajectoryError
        The spline cannot be built.
    """

    def __init__(self, path: str | Path, kind: str = "quintic", bc: str = "clamped"):
        t, Q, names = read_samples(path)
        self.path = Path(path)
        super().__init__(t, Q, kind=kind, bc=bc, names=names)
