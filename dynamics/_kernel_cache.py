"""Keep numba's cached machine code of the kernels from outliving a change of any kernel file.

numba's on-disk cache (``@njit(cache=True)``) checks a cached function only against ITS OWN
source file.  A function that calls a compiled function of another file keeps that callee's
machine code in its own cache entry, so when only the callee's file changes (a ``git pull`` on
the editable install), the caller's cache still loads and runs the callee's OLD code.

:func:`guard` closes that hole for the files of :data:`KERNEL_FILES` (every module of the
package with ``cache=True``; ``tests/test_kernel_cache.py`` fails when one is missing): it
hashes their bytes together (about 0.3 ms) and compares the result with a stamp file kept in
every folder where numba may keep the caches of those modules.  Where the stamp differs or is
missing, the ``*.nbi``/``*.nbc`` files of those modules (only those: never another file, never
another module's or package's cache) are removed and the new stamp written.  Each kernel
folder's caches are checked on their own, in every place numba looks for them, in numba's
order (``numba.core.caching``):

1. ``$NUMBA_CACHE_DIR/<folder name>_<sha1 of the folder's absolute path>``, when numba's
   ``CACHE_DIR`` is set (``UserProvidedCacheLocator``);
2. ``<folder>/__pycache__`` (``InTreeCacheLocator``);
3. ``<user cache dir>/numba/<folder name>_<sha1 ...>`` (``UserWideCacheLocator``, which numba
   takes when the two above are not writable: a read-only install).

numba uses the first of them it can write; the others may hold caches of earlier runs (with a
``NUMBA_CACHE_DIR`` unset since, from a time the folder was writable), so every one that exists
is checked.  Each folder has its own stamp: a ``NUMBA_CACHE_DIR`` that other runs use is brought
up to date by the first of them that imports the package.  A folder that cannot be written is
left alone: numba does not use it either.  A missing folder is created (with its stamp) only
where numba would put the caches, so that its first caches are not taken for stale ones by the
next process.

numba's own version is not in the stamp: numba already ignores an index written by another
version.  The guard runs once per process, when :mod:`dynamics` is imported (``controller``
and ``drivers`` call it first thing too, which imports :mod:`dynamics`), before any kernel
module is.  It never makes an import fail: see :func:`refresh_kernel_caches`.  It imports only
the standard library (not numba: importing ``dynamics`` does not import numba; only
:func:`stamp_caches`, which the kernel modules call, does).

What the stamp file alone cannot see: a process that imported the package BEFORE a kernel file
changed and compiles a new specialisation afterwards (a notebook, a long tuning run) saves the
old code, and numba stamps that entry with the function's own file, unchanged, while the
folder's stamp already says "current".  So numba's entries themselves carry the fingerprint:
each kernel module calls :func:`stamp_package_caches` before its first ``@njit(cache=True)``,
which puts a locator in front of numba's own (:func:`stamp_caches`; the same folders and file
names) whose source stamp is the fingerprint of ALL the kernel files as this process read them
when its guard ran.  numba loads an entry only when its stamp equals the loading process's
(``IndexDataCacheFile``), so such a process's entries are ignored (and overwritten) by every
process that imported the new files.  (``NUMBA_CACHE_LOCATOR_CLASSES``, when set, replaces
numba's list of locators and with it this one: the stamp files still apply.)
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Iterable

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no gate between processes
    fcntl = None

#: every module of the package with ``@njit(cache=True)``, relative to the folder that holds
#: the packages, '/'-separated (``tests/test_kernel_cache.py`` checks the list is complete).
#: The costliest to compile comes first and the modules importing it right after it: the test
#: suite warms the caches with one process going through the list from its start and another
#: from its end (``tests/conftest.py``), which must not meet at the first one's gate early
KERNEL_FILES: tuple[str, ...] = (
    "dynamics/_stewart_kernels.py",
    "drivers/sim/_stewart_plant_kernel.py",
    "controller/_fast_loop_stewart.py",
    "controller/_stewart_law_kernels.py",
    "dynamics/_mechanism_runtime.py",
    "dynamics/_planar3rrr_kernels.py",
    "dynamics/_serial_core.py",
    "dynamics/_serial_kernels.py",
    "drivers/_mit_kernels.py",
    "drivers/_odrive_kernels.py",
    "drivers/_follow_kernels.py",
    "drivers/_dxl_kernels.py",
    "drivers/_cia402_kernels.py",
    "drivers/sim/_dxl_kernel.py",
    "drivers/sim/_mit_kernel.py",
    "drivers/sim/_odrive_kernel.py",
    "drivers/sim/_cia402_kernel.py",
    "drivers/sim/_plant_kernels.py",
    "drivers/sim/_friction_kernel.py",
    "controller/telemetry.py",
    "controller/_fast_loop.py",
    "controller/laws.py",
    "controller/_safety_rules.py",
    "controller/safety.py",
    "controller/_law_kernels.py",
    "drivers/_follow_rule.py",
)

#: the files of :data:`KERNEL_FILES` with no ``cache=True`` of their own: plain Python that a
#: kernel module compiles (``njit(cache=True)(module.function)``), so that a change of theirs
#: must drop the callers' caches too (``drivers/_mit_kernels.py`` and ``drivers/_follow_kernels.py``
#: compile the follow rule)
COMPILED_SOURCES: tuple[str, ...] = ("drivers/_follow_rule.py",)

#: files with ``cache=True`` that are never imported and so are not in :data:`KERNEL_FILES`:
#: templates whose text would be copied into generated modules outside the package (none now:
#: the mechanism kernels, :mod:`dynamics._mechanism_runtime`, are a kernel module of their own,
#: which calls a generated module's functions through their addresses)
TEMPLATE_SOURCES: tuple[str, ...] = ()

#: name of the stamp file written next to the caches
STAMP_NAME = "torqueloop-kernels.stamp"

#: changes the fingerprint when the way it is computed changes
_FORMAT = b"torqueloop numba kernel caches 1\n"

#: the prefix of the source stamp of the kernels' cache entries (:func:`stamp_caches`)
STAMP_PREFIX = "torqueloop kernel files"

_guarded = False
_stamped = False
#: the fingerprint of the kernel files when this process's guard ran, i.e. of the sources its
#: kernels are compiled from (None before, or when a kernel file could not be read)
_fingerprint: str | None = None
#: the folder holding the packages (side by side: one install, or one checkout on sys.path)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def guard() -> None:
    """:func:`refresh_kernel_caches` for the package's own kernels, once per process."""
    global _guarded, _fingerprint
    if _guarded:
        return
    _guarded = True
    try:
        _fingerprint = fingerprint(_ROOT, KERNEL_FILES)
    except OSError:  # an unreadable kernel file: numba cannot use it either
        return
    refresh_kernel_caches(_ROOT, KERNEL_FILES, stamp=_fingerprint)


def stamp_package_caches() -> None:
    """:func:`stamp_caches` for the package's kernel files with this process's fingerprint, once
    per process (after :func:`guard`).  Every module of :data:`KERNEL_FILES` calls it before
    its first ``@njit(cache=True)`` (``tests/test_kernel_cache.py`` checks), since numba picks a
    function's locator when it is decorated.  Imports numba."""
    global _stamped
    if _stamped:
        return
    guard()
    _stamped = True
    if _fingerprint is not None:
        stamp_caches(_ROOT, KERNEL_FILES, _fingerprint)


#: seconds a process waits for another one compiling the same kernel module before it compiles
#: too (:class:`CompileGate`, and the mechanisms' :func:`dynamics._mechanism_derive.compile_lock`)
COMPILE_WAIT_S = 900.0


class CompileGate:
    """Held by the one process that imports (and so compiles) a kernel module at a time.

    A kernel module with signatures in its ``@njit(..., cache=True)`` compiles them when it is
    imported: up to a minute of CPU for the largest (:mod:`dynamics._stewart_kernels`), where
    loading them from numba's cache takes well under a second.  Processes importing it at the
    same time from a cold cache (the workers of a test run or a sweep) would each compile all of
    it; the module takes this gate after :func:`stamp_package_caches` and calls
    :meth:`release` at its end, so the others wait and then load the first one's caches.  The
    gate is an exclusive ``fcntl.flock`` on ``<module>.compile.lock`` in the folder numba keeps
    the module's caches in (the first writable one of :func:`cache_dirs`).  Without ``fcntl``
    or such a folder, or after :data:`COMPILE_WAIT_S` (a process stuck holding it), the import
    goes on ungated: the gate saves time, it never guards correctness (numba writes its cache
    files atomically).  Imports of one process are serialised by Python's own import lock.
    """

    def __init__(self, module_file: str):
        self._fd = None
        # the module taking it (the caller): while it is being imported it is in sys.modules
        name = sys._getframe(1).f_globals.get("__name__")
        self._module = (name, sys.modules.get(name))
        _release_failed()
        folder, base = os.path.split(os.path.abspath(module_file))
        for d in cache_dirs(folder):
            if os.path.isdir(d) and os.access(d, os.W_OK):
                self._fd = flock_wait(os.path.join(d, os.path.splitext(base)[0] + ".compile.lock"),
                                      COMPILE_WAIT_S)
                break
        if self._fd is not None:
            _held.add(self)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let the next process in (idempotent)."""
        fd, self._fd = self._fd, None
        _held.discard(self)
        if fd is not None:
            os.close(fd)        # releases the flock

    def __del__(self):
        self.release()


#: the gates this process holds.  A module whose import failed half-way never reaches its
#: ``release()``, and its globals (the gate) outlive the failure (the traceback, numba's
#: dispatchers): its gate would hold the other processes, and this one's next import of the
#: module (a flock of another descriptor of the same file), for COMPILE_WAIT_S.
_held: set = set()


def _release_failed() -> None:
    """Release the gates of modules whose import failed: Python took them out of sys.modules
    (a module being imported is in it)."""
    for g in list(_held):
        name, module = g._module
        if module is not None and sys.modules.get(name) is not module:
            g.release()


def flock_wait(path: str, wait_s: float) -> int | None:
    """An open descriptor of ``path`` (created when missing) holding its exclusive
    ``fcntl.flock``, waited for up to ``wait_s`` s; None without ``fcntl``, when the file cannot
    be opened, or when the wait runs out.  Closing the descriptor releases the lock."""
    if fcntl is None:
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                return None
            time.sleep(0.05)
        except OSError:
            os.close(fd)
            return None


def stamp_caches(root: str, files: Iterable[str], stamp: str) -> None:
    """Have numba stamp the cache entries of the functions defined in ``files`` (relative to
    ``root``) with ``(STAMP_PREFIX, stamp)`` instead of the hash of their own file.

    A locator class is put first in numba's list of locators (``numba.core.caching.CacheImpl``,
    ``_CacheImpl`` in older releases): for a function of one of ``files`` it takes the locator
    numba would take (the same folder, the same file names) and replaces its source stamp; any
    other function it leaves to numba.  Applies to the functions decorated from then on.
    """
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl
    paths = frozenset(os.path.normcase(os.path.abspath(os.path.join(root, rel))) for rel in files)
    source_stamp = (STAMP_PREFIX, stamp)

    class KernelFilesLocator(caching._CacheLocator):
        """numba's locator for a kernel file's function, with the fingerprint of all the
        kernel files as its source stamp."""

        stamps_kernel_files = True

        def __init__(self, inner):
            self._inner = inner

        def ensure_cache_path(self):
            self._inner.ensure_cache_path()

        def get_cache_path(self):
            return self._inner.get_cache_path()

        def get_source_stamp(self):
            return source_stamp

        def get_disambiguator(self):
            return self._inner.get_disambiguator()

        @classmethod
        def from_function(cls, py_func, py_file):
            if os.path.normcase(os.path.abspath(py_file)) not in paths:
                return None
            for other in impl._locator_classes:
                if getattr(other, "stamps_kernel_files", False):
                    continue
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
            return None

    impl._locator_classes.insert(0, KernelFilesLocator)


def refresh_kernel_caches(root: str, files: Iterable[str], *, stamp: str | None = None) -> list[str]:
    """Remove numba's caches of ``files`` wherever their stamp does not match their sources.

    ``root`` is the folder that ``files`` (paths relative to it) are in; ``stamp`` their
    :func:`fingerprint` when the caller has it.  Returns the paths of the removed cache files.
    Never raises OSError: an unreadable source, an unwritable or vanished folder, a file
    another process removed first all end the work on that file or folder silently, since a
    cleanup that could not run costs at most what numba does without this guard.  Where a
    stale cache file could not be removed, no stamp is written, so that the next import tries
    again.  Two processes doing this at once cost at most a recompile: numba
    treats a missing index as empty and a data file missing after its index was read as a
    cache miss (``IndexDataCacheFile.load``).
    """
    files = list(files)
    try:
        stamp_bytes = (fingerprint(root, files) if stamp is None else stamp).encode("ascii")
    except OSError:  # an unreadable kernel file: numba cannot use it either
        return []
    modules: dict[str, list[str]] = {}
    for rel in files:
        folder, name = os.path.split(os.path.abspath(os.path.join(root, rel)))
        modules.setdefault(folder, []).append(os.path.splitext(name)[0])
    removed: list[str] = []
    for folder, names in modules.items():
        if not os.path.isdir(folder):  # no module there to cache
            continue
        numba_would_use_one = False
        for cache_dir in cache_dirs(folder):
            try:
                usable = _refresh_dir(cache_dir, names, stamp_bytes, not numba_would_use_one, removed)
            except OSError:
                # swallowed on purpose (a failed cleanup costs at most what numba does without
                # the guard); OSError only: anything else would be a bug of ours, to be seen
                usable = False
            numba_would_use_one = numba_would_use_one or usable
    return removed


def fingerprint(root: str, files: Iterable[str]) -> str:
    """sha256 (hex) over the names and bytes of ``files`` (relative to ``root``).

    A missing file counts as such (it changes the fingerprint); any other OSError is raised.
    """
    h = hashlib.sha256(_FORMAT)
    for rel in sorted(files):
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        try:
            with open(os.path.join(root, rel), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            h.update(b"missing\0")
            continue
        h.update(b"%d\0" % len(data))
        h.update(data)
    return h.hexdigest()


def cache_dirs(folder: str) -> list[str]:
    """Every folder where numba may keep the caches of the modules in ``folder``, in numba's
    order of preference (see the module docstring)."""
    folder = os.path.abspath(folder)
    out = [os.path.join(folder, "__pycache__")]
    try:
        # numba.core.caching._CacheLocator.get_suitable_cache_subpath
        sub = os.path.basename(folder) + "_" + hashlib.sha1(folder.encode()).hexdigest()
    except UnicodeEncodeError:  # numba cannot cache there either (it encodes the same way)
        return out
    user_dir = _numba_cache_dir_setting()
    if user_dir:
        out.insert(0, os.path.join(user_dir, sub))
    out.append(os.path.join(_user_wide_cache_root(), sub))
    return out


def _refresh_dir(cache_dir: str, modules: list[str], stamp: bytes, may_create: bool,
                 removed: list[str]) -> bool:
    """Bring one cache folder up to ``stamp``; True when numba could use it (it is writable and
    its stamp is current).  OSError propagates."""
    try:
        with open(os.path.join(cache_dir, STAMP_NAME), "rb") as f:
            current = f.read(len(stamp) + 1) == stamp
    except OSError:  # missing (a folder numba does not use, or not yet), unreadable
        current = False
    if current:
        return os.access(cache_dir, os.W_OK)
    if not os.path.isdir(cache_dir):
        if not may_create:
            return False
        os.makedirs(cache_dir, exist_ok=True)
    elif not os.access(cache_dir, os.W_OK):
        return False
    elif not _remove_caches(cache_dir, modules, removed):
        return False
    _write_stamp(cache_dir, stamp)
    return True


def _remove_caches(cache_dir: str, modules: list[str], removed: list[str]) -> bool:
    """Remove numba's index and data files of ``modules`` from ``cache_dir``: the names numba
    gives them are ``<module>.<qualname>-<line>.py<version>.nbi`` and ``...<n>.nbc``.  Its
    files being written (``*.nbi.tmp.<id>``) are left alone.  False when one could not be
    removed."""
    prefixes = tuple(m + "." for m in modules)
    ok = True
    for name in os.listdir(cache_dir):
        if name.endswith((".nbi", ".nbc")) and name.startswith(prefixes):
            path = os.path.join(cache_dir, name)
            try:
                os.unlink(path)
            except FileNotFoundError:  # another process removed it first
                continue
            except OSError:
                ok = False
                continue
            removed.append(path)
    return ok


def _write_stamp(cache_dir: str, stamp: bytes) -> None:
    """Write the stamp whole or not at all (another process may read it meanwhile)."""
    write_atomic(os.path.join(cache_dir, STAMP_NAME), stamp)


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file beside it (named with
    this process's id), then ``os.replace``, so a reader in another process (a parallel test
    worker) sees the old file or the new one, never a part."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _numba_cache_dir_setting() -> str:
    """numba's ``config.CACHE_DIR`` without importing numba when it is not imported yet: the
    environment variable, unless a ``.numba_config.yaml`` in the working folder may set it."""
    config = getattr(sys.modules.get("numba"), "config", None)
    if config is None and os.path.isfile(".numba_config.yaml"):
        try:
            from numba.core import config
        except ImportError:
            config = None
    if config is not None:
        return getattr(config, "CACHE_DIR", "") or ""
    return os.environ.get("NUMBA_CACHE_DIR", "")


def _user_wide_cache_root() -> str:
    """``numba.misc.appdirs.AppDirs("numba", appauthor=False).user_cache_dir``, without numba."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser(r"~\AppData\Local")
        return os.path.join(os.path.normpath(base), "numba", "Cache")
    if sys.platform == "darwin":
        return os.path.join(os.path.expanduser("~/Library/Caches"), "numba")
    return os.path.join(os.getenv("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "numba")
