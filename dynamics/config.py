"""Small helpers to read TOML configuration with errors that name the file and field.

Every loader in the package (robot files, run configs, driver files) reads its
dict through a :class:`Section`, so that an unknown key, a missing key, a wrong
type, a wrong length or a non-finite number is reported as a
:class:`~dynamics.errors.ConfigError` naming the file and the dotted field.

Examples
--------
>>> sec = Section({"mass": 1.0, "com": [0, 0, 0.1]}, file="arm.toml", path="links[0]")
>>> sec.float("mass", minimum=0.0)
1.0
>>> sec.vector("com", 3)
array([0. , 0. , 0.1])
>>> sec.finish()   # raises ConfigError if unread keys remain
"""

from __future__ import annotations

import copy
import math
import os
import stat
import tomllib
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from .errors import ConfigError

__all__ = ["Section", "RecordingSection", "KeyLog", "read_toml", "apply_overrides", "parse_sets"]

_MISSING = object()


#: the largest config file read [bytes]: a robot file with a thousand links is a few hundred kB
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def read_toml(path: str | Path) -> dict:
    """Read a TOML file, wrapping I/O and syntax errors in :class:`ConfigError`.

    Only a regular file of at most :data:`MAX_CONFIG_BYTES` is read: a device (``/dev/zero``
    would be read until memory runs out), a FIFO (whose ``open`` waits for a writer) or a
    directory is refused before it is opened; tables nested deeper than the parser's recursion
    allows are refused too."""
    p = Path(path)
    try:
        st = os.stat(p)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
            raise ConfigError(f"not a config file: {kind} (give a regular TOML file)", file=str(p))
        if st.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{st.st_size} bytes: larger than any config file ({MAX_CONFIG_BYTES} bytes at most)",
                              file=str(p))
        with open(p, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"larger than any config file ({MAX_CONFIG_BYTES} bytes at most)", file=str(p))
        return tomllib.loads(raw.decode("utf-8"))
    except FileNotFoundError as err:
        raise ConfigError("file not found", file=str(p)) from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"invalid TOML: {err}", file=str(p)) from err
    except RecursionError as err:
        raise ConfigError("invalid TOML: tables or arrays nested too deeply", file=str(p)) from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"not a TOML text file: byte 0x{err.object[err.start]:02x} at offset "
                          f"{err.start} is not UTF-8 (TOML files are UTF-8 text; is this a binary "
                          f"file, or one saved in another encoding?)", file=str(p)) from err
    except OSError as err:
        raise ConfigError(f"cannot read file: {err}", file=str(p)) from err


def toml_plain(x: Any) -> Any:
    """``x`` with numpy arrays/scalars made plain Python and ``None`` entries of tables dropped
    (TOML has no null), ready for ``tomli_w.dumps``."""
    if isinstance(x, Mapping):
        return {k: toml_plain(v) for k, v in x.items() if v is not None}
    if isinstance(x, (list, tuple)):
        return [toml_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    return x


def write_toml(path: str | Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` (plain or numpy values, see :func:`toml_plain`) as a TOML file."""
    import tomli_w

    Path(path).write_bytes(tomli_w.dumps(toml_plain(data)).encode())


class Section:
    """A view of one table of a config file that tracks which keys were read.

    Parameters
    ----------
    data : Mapping
        The table.
    file : str or None
        File name used in error messages.
    path : str
        Dotted path of this table inside the file ("" for the root).
    """

    def __init__(self, data: Mapping[str, Any], file: str | None = None, path: str = ""):
        if not isinstance(data, Mapping):
            raise ConfigError(f"expected a table, got {type(data).__name__}", file, path or None)
        self.data = data
        self.file = None if file is None else str(file)
        self.path = path
        self._read: set[str] = set()
        self._known: set[str] = set()   # optional keys looked up with has(): valid here too
        self._absent: set[str] = set()  # keys looked up and not found (a misspelt one's right name?)
        self._parent: Section | None = None     # the table this one is read from

    # -- helpers -------------------------------------------------------------
    def field(self, key: str) -> str:
        """Dotted name of ``key`` inside this section."""
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str | None, message: str) -> ConfigError:
        """Build a :class:`ConfigError` for ``key`` (or this section if None).

        Unknown keys are refused by :meth:`finish`, after the known ones are read: an error
        found before (a required key missing, a default that does not fit the others) also
        names a key of the table (or of a table it is read from) never read that is a near
        spelling of one looked up there and not found (``duraton_s`` beside a missing
        ``duration_s``)."""
        return ConfigError(message + self._typo_note(key), self.file,
                           self.field(key) if key else (self.path or None))

    def _typo_note(self, key: str | None) -> str:
        """`` (the table has 'duraton_s': a misspelling of 'duration_s'?)``, or ""."""
        sec: Section | None = self
        while sec is not None:
            wanted = sorted(sec._absent | ({key} if sec is self and key and key not in self.data else set()))
            for k in sorted(k for k in sec.data if isinstance(k, str)):
                if k in sec._read or k in sec._known:
                    continue
                near = near_match(k, wanted)
                if near:
                    where = "the table" if sec is self else f"[{sec.path}]" if sec.path else "the file"
                    return f" ({where} has '{k}': a misspelling of {near}?)"
            sec = sec._parent
        return ""

    def has(self, key: str, *, doc: str | None = None) -> bool:
        """Whether ``key`` is present (it is then listed among the keys allowed here).

        ``doc`` (here and in every getter): the key's one-line meaning with its unit, the
        text ``torqueloop check --explain`` prints for it (:class:`RecordingSection`)."""
        self._known.add(key)
        if key not in self.data:
            self._absent.add(key)
            return False
        return True

    def raw(self, key: str, default: Any = _MISSING, *, doc: str | None = None) -> Any:
        """Return the raw value, marking the key as read.

        A missing required key is reported with the table's key that may be its misspelling
        (:meth:`error`)."""
        self._read.add(key)
        if key not in self.data:
            self._absent.add(key)
            if default is _MISSING:
                raise self.error(key, "required field is missing")
            return default
        return self.data[key]

    # -- typed getters -------------------------------------------------------
    def float(self, key: str, default: Any = _MISSING, *, minimum: float | None = None,
              maximum: float | None = None, strict_min: bool = False, doc: str | None = None) -> float:
        """Read a finite real number, optionally bounded."""
        v = self.raw(key, default)
        if v is None:
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.error(key, f"expected a number, got {v!r}")
        v = float(v)
        if not math.isfinite(v):
            raise self.error(key, f"must be finite, got {v!r}")
        if minimum is not None and (v < minimum or (strict_min and v == minimum)):
            op = ">" if strict_min else ">="
            raise self.error(key, f"must be {op} {minimum}, got {v!r}")
        if maximum is not None and v > maximum:
            raise self.error(key, f"must be <= {maximum}, got {v!r}")
        return v

    def int(self, key: str, default: Any = _MISSING, *, minimum: int | None = None,
            maximum: int | None = None, doc: str | None = None) -> int:
        """Read an integer, optionally bounded."""
        v = self.raw(key, default)
        if v is None:
            return v
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(key, f"expected an integer, got {v!r}")
        if minimum is not None and v < minimum:
            raise self.error(key, f"must be >= {minimum}, got {v!r}")
        if maximum is not None and v > maximum:
            raise self.error(key, f"must be <= {maximum}, got {v!r}")
        return v

    def bool(self, key: str, default: Any = _MISSING, *, doc: str | None = None) -> bool:
        v = self.raw(key, default)
        if not isinstance(v, bool):
            raise self.error(key, f"expected true or false, got {v!r}")
        return v

    def str(self, key: str, default: Any = _MISSING, *, choices: Iterable[str] | None = None,
            doc: str | None = None) -> str:
        """Read a string, optionally one of ``choices``."""
        v = self.raw(key, default)
        if v is None:
            return v
        if not isinstance(v, str):
            raise self.error(key, f"expected a string, got {v!r}")
        if choices is not None:
            choices = list(choices)
            if v not in choices:
                raise self.error(key, f"must be one of {choices}, got {v!r}")
        return v

    def vector(self, key: str, length: int | None = None, default: Any = _MISSING, *,
               minimum: float | None = None, doc: str | None = None) -> np.ndarray:
        """Read a list of finite numbers as a float array of shape (length,)."""
        v = self.raw(key, default)
        if v is None:
            return v
        return self.as_array(key, v, (length,) if length is not None else None, minimum=minimum)

    def numbers(self, key: str, n: int, default: Any = _MISSING, *, minimum: float | None = None,
                maximum: float | None = None, strict_min: bool = False, doc: str | None = None) -> np.ndarray:
        """Read a number (shared by all ``n`` items: the legs, a joint's coordinates) or a list of
        ``n`` numbers as a float array (n,), each >= ``minimum`` (> with ``strict_min``) and <=
        ``maximum`` when given; a list of another length is refused naming the field."""
        v = self.raw(key, default)
        if isinstance(v, list):
            arr = self.as_array(key, v, (n,))
        else:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise self.error(key, f"expected a number or a list of {n} numbers, got {v!r}")
            arr = self.as_array(key, [v] * n, (n,))
        if minimum is not None:
            bad = (arr <= minimum) if strict_min else (arr < minimum)
            if np.any(bad):
                op = ">" if strict_min else ">="
                raise self.error(key, f"must be {op} {minimum}, got {v!r}")
        if maximum is not None and np.any(arr > maximum):
            raise self.error(key, f"must be <= {maximum:g}, got {v!r}")
        return arr

    def matrix(self, key: str, shape: tuple[int, int] | None = None, default: Any = _MISSING, *,
               doc: str | None = None) -> np.ndarray:
        """Read a list of lists as a float array of the given shape."""
        v = self.raw(key, default)
        if v is None:
            return v
        return self.as_array(key, v, shape)

    def as_array(self, key: str, v: Any, shape: tuple | None, *, minimum: float | None = None) -> np.ndarray:
        try:
            arr = np.asarray(v, dtype=float)
        except (TypeError, ValueError) as err:
            raise self.error(key, f"expected numbers, got {v!r}") from err
        if arr.dtype == object:
            raise self.error(key, f"expected numbers, got {v!r}")
        if shape is not None:
            if arr.ndim != len(shape) or any(s is not None and a != s for a, s in zip(arr.shape, shape)):
                want = "x".join("?" if s is None else str(s) for s in shape)
                raise self.error(key, f"expected shape {want}, got {arr.shape} ({v!r})")
        if not np.all(np.isfinite(arr)):
            raise self.error(key, f"all values must be finite, got {v!r}")
        if minimum is not None and np.any(arr < minimum):
            raise self.error(key, f"all values must be >= {minimum}, got {v!r}")
        return arr

    def section(self, key: str, default: Any = _MISSING, *, doc: str | None = None) -> "Section":
        """Read a sub-table as a :class:`Section` (``default`` may be ``{}``)."""
        v = self.raw(key, default)
        if v is None:
            return v
        if not isinstance(v, Mapping):
            raise self.error(key, f"expected a table, got {type(v).__name__}")
        out = self._child(v, self.field(key))
        out._parent = self
        return out

    def sections(self, key: str, default: Any = _MISSING, *, doc: str | None = None) -> list["Section"]:
        """Read an array of tables as a list of :class:`Section`."""
        v = self.raw(key, default)
        if not isinstance(v, list):
            raise self.error(key, f"expected an array of tables, got {type(v).__name__}")
        out = []
        for i, item in enumerate(v):
            if not isinstance(item, Mapping):
                raise ConfigError(f"expected a table, got {item!r}", self.file, f"{self.field(key)}[{i}]")
            out.append(self._child(item, f"{self.field(key)}[{i}]"))
            out[-1]._parent = self
        return out

    def _child(self, data: Mapping[str, Any], path: str) -> "Section":
        """A sub-table of this one (subclasses keep their kind)."""
        return Section(data, self.file, path)

    def finish(self) -> None:
        """Raise :class:`ConfigError` if the table holds keys that were never read."""
        unknown = sorted(set(self.data) - self._read)
        if unknown:
            raise ConfigError(unknown_field_message(unknown[0], self._read | self._known), self.file,
                              self.field(unknown[0]))


#: how close (:func:`difflib.get_close_matches` ratio) an unknown key must be to an allowed one
#: to be named as its likely misspelling
NEAR_MATCH_CUTOFF = 0.8


def _one_slip(a: str, b: str) -> bool:
    """Whether ``a`` is ``b`` with one typing slip: a character dropped, added, changed, or two
    neighbours swapped (Damerau-Levenshtein distance 1)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                   and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def near_match(key: Any, candidates: Iterable[str]) -> str | None:
    """The candidates ``key`` is most likely a misspelling of, as text (``'bus' or 'buses'``):
    those one typing slip away (:func:`_one_slip`, keys of 3 characters or more), else the
    closest by :func:`difflib.get_close_matches` at :data:`NEAR_MATCH_CUTOFF`; None when none is
    near."""
    import difflib

    key, candidates = str(key), sorted(c for c in candidates if isinstance(c, str))
    near = [c for c in candidates if len(key) >= 3 and _one_slip(key, c)] or \
        difflib.get_close_matches(key, candidates, n=1, cutoff=NEAR_MATCH_CUTOFF)
    return " or ".join(f"'{c}'" for c in near) if near else None


def unknown_field_message(key: Any, allowed: Iterable[str]) -> str:
    """The message refusing unknown ``key``: the allowed keys and the nearest of them."""
    allowed = sorted(allowed)
    near = near_match(key, allowed)
    hint = f"did you mean {near}? " if near else ""
    return f"unknown field ({hint}allowed here: {allowed})"


class KeyLog:
    """What a parser asked of its tables, collected by :class:`RecordingSection`.

    ``tables`` maps a table path (array indices dropped: ``driver.joints``) to
    ``{key: info}``, ``info`` holding ``kind`` (``number``, ``integer``, ``bool``,
    ``string``, ``list``, ``number or list``, ``table``, ``tables`` or ``any``), ``required`` and, where
    the parser gave them, ``default``, ``minimum``/``maximum`` (``strict_min``),
    ``choices`` and ``length``.
    """

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, dict]] = {}

    @staticmethod
    def table_name(path: str) -> str:
        import re
        return re.sub(r"\[\d+\]", "", path)

    def note(self, path: str, key: str, *, first: bool = False, **info) -> None:
        entry = self.tables.setdefault(self.table_name(path), {}).setdefault(key, {})
        for k, v in info.items():
            if first and k in entry:
                continue
            entry[k] = v


class RecordingSection(Section):
    """A :class:`Section` that also records every key its parser reads or looks up.

    Run a loader on an example table through it and :attr:`log` holds the keys that
    loader accepts, with their types, defaults, bounds and choices, taken from the
    very calls that validate them (``torqueloop check --explain`` prints them).
    """

    def __init__(self, data: Mapping[str, Any], file: str | None = None, path: str = "",
                 log: KeyLog | None = None):
        super().__init__(data, file, path)
        self.log = log if log is not None else KeyLog()

    def _child(self, data, path):
        return RecordingSection(data, self.file, path, self.log)

    def _note(self, key, kind, default, doc=None, **info):
        info = {k: v for k, v in info.items() if v is not None and v is not False}
        if default is not _MISSING:
            info["default"] = default
        if doc:
            info["doc"] = doc
        # a key read only after has() said it is there is optional (or one of alternatives)
        looked_up = key in self._known
        self.log.note(self.path, key, kind=kind, required=default is _MISSING and not looked_up,
                      **info)

    def has(self, key: str, *, doc: str | None = None) -> bool:
        self.log.note(self.path, key, first=True, kind="any", required=False, **({"doc": doc} if doc else {}))
        return super().has(key)

    def raw(self, key: str, default: Any = _MISSING, *, doc: str | None = None) -> Any:
        self.log.note(self.path, key, first=True, kind="any",
                      required=default is _MISSING and key not in self._known,
                      **({} if default is _MISSING else {"default": default}))
        if doc:
            self.log.note(self.path, key, doc=doc)
        return super().raw(key, default)

    def float(self, key, default=_MISSING, *, minimum=None, maximum=None, strict_min=False, doc=None):
        self._note(key, "number", default, doc, minimum=minimum, maximum=maximum, strict_min=strict_min)
        return super().float(key, default, minimum=minimum, maximum=maximum, strict_min=strict_min)

    def int(self, key, default=_MISSING, *, minimum=None, maximum=None, doc=None):
        self._note(key, "integer", default, doc, minimum=minimum, maximum=maximum)
        return super().int(key, default, minimum=minimum, maximum=maximum)

    def bool(self, key, default=_MISSING, *, doc=None):
        self._note(key, "bool", default, doc)
        return super().bool(key, default)

    def str(self, key, default=_MISSING, *, choices=None, doc=None):
        self._note(key, "string", default, doc, choices=None if choices is None else list(choices))
        return super().str(key, default, choices=choices)

    def vector(self, key, length=None, default=_MISSING, *, minimum=None, doc=None):
        self._note(key, "list", default, doc, length=length, minimum=minimum)
        return super().vector(key, length, default, minimum=minimum)

    def numbers(self, key, n, default=_MISSING, *, minimum=None, maximum=None, strict_min=False, doc=None):
        self._note(key, "number or list", default, doc, length=n, minimum=minimum, maximum=maximum,
                   strict_min=strict_min)
        return super().numbers(key, n, default, minimum=minimum, maximum=maximum, strict_min=strict_min)

    def matrix(self, key, shape=None, default=_MISSING, *, doc=None):
        self._note(key, "list", default, doc)
        return super().matrix(key, shape, default)

    def section(self, key, default=_MISSING, *, doc=None):
        self._note(key, "table", _MISSING if default is _MISSING else None, doc)
        return super().section(key, default)

    def sections(self, key, default=_MISSING, *, doc=None):
        self._note(key, "tables", _MISSING if default is _MISSING else None, doc)
        return super().sections(key, default)


def parse_sets(items: list[str]) -> dict[str, Any]:
    """Command-line ``--set`` items -> dotted keys and values for :func:`apply_overrides`:
    ``["controller.kind=pd_gravity", "plant.mass_scale=1.2"]`` -> dict (values parsed as TOML, a
    value that is not TOML taken as a bare string)."""
    import tomllib

    out = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set needs KEY=VALUE, got {item!r}")
        key, _, val = item.partition("=")
        key = key.strip()
        try:
            out[key] = tomllib.loads(f"v = {val}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = val  # bare string
        except RecursionError as err:
            raise ConfigError(f"--set {key}: value nested too deeply") from err
    return out


def apply_overrides(data: dict, overrides: dict[str, Any], *, file: str | None = None) -> dict:
    """A deep copy of a config dict with dotted keys set (``"controller.wn_rad_s": 40``).

    Keys ending in ``_scale`` multiply an existing value when one is present
    (e.g. ``"driver.plant.coulomb_scale"`` is not special: only existing ``*_scale``
    numbers are multiplied).
    """
    out = copy.deepcopy(data)
    for key, value in overrides.items():
        parts = key.split(".")
        node = out
        for p in parts[:-1]:
            if p not in node or not isinstance(node[p], dict):
                if p in node:
                    raise ConfigError(f"cannot set '{key}': '{p}' is not a table", file, key)
                node[p] = {}
            node = node[p]
        leaf = parts[-1]
        if leaf.endswith("_scale") and isinstance(node.get(leaf), (int, float)) and not isinstance(node.get(leaf), bool):
            node[leaf] = float(node[leaf]) * float(value)
        else:
            node[leaf] = value
    return out
