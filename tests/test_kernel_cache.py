"""The guard against numba's stale kernel caches (``dynamics/_kernel_cache.py``).

numba checks a cached function only against its own source file: a caller whose file did not
change keeps running the old code of a callee whose file did.  The first test reproduces that
on a two-file package in a temporary folder (and that the guard fixes it); the others pin the
guard's parts: the fingerprint, the places it looks in (numba's own locators), what it removes,
that nothing it meets makes it raise, that the kernel list is complete and that the guard has
run before any kernel module is imported.

The subprocesses load the guard's file by path (not ``import dynamics``, which would run it on
this tree too) and keep their numba caches in temporary folders.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dynamics import _kernel_cache as kc

ROOT = Path(__file__).resolve().parents[1]
GUARD_FILE = ROOT / "dynamics" / "_kernel_cache.py"
PACKAGES = ("dynamics", "drivers", "controller", "trajectories")

TINY_B = "from numba import njit\n\n\n@njit(cache=True)\ndef value():\n    return {value}\n"
TINY_A = ("from numba import njit\n\nfrom .b import value\n\n\n"
          "@njit(cache=True)\ndef outer():\n    return value()\n")
TINY_FILES = ("tinypkg/a.py", "tinypkg/b.py")

#: run in a subprocess: ``ROOT GUARD_FILE use_guard``; prints outer()'s value and how many cache
#: files the guard removed
RUNNER = """
import importlib.util, sys
root, guard_file, use_guard = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
removed = []
if use_guard:
    spec = importlib.util.spec_from_file_location("kernel_cache_under_test", guard_file)
    kc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kc)
    removed = kc.refresh_kernel_caches(root, %r)
sys.path.insert(0, root)
from tinypkg.a import outer
print(outer(), len(removed))
""" % (TINY_FILES,)


def _env(**over: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_") and k != "PYTHONPATH"}
    env.update({k: v for k, v in over.items() if v is not None})
    return env


def _write_b(root: Path, value: int) -> None:
    b = root / "tinypkg" / "b.py"
    old = b.stat().st_mtime if b.exists() else None
    b.write_text(TINY_B.format(value=value))
    if old is not None:  # a later mtime whatever the file system's clock resolution
        os.utime(b, (old + 10, old + 10))


def _tiny_package(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    (root / "tinypkg").mkdir(parents=True)
    (root / "tinypkg" / "__init__.py").write_text("")
    (root / "tinypkg" / "a.py").write_text(TINY_A)
    _write_b(root, 1)
    return root


def _run(root: Path, env: dict, use_guard: bool) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", RUNNER, str(root), str(GUARD_FILE), "1" if use_guard else "0"],
                         cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    value, removed = out.stdout.split()
    return int(value), int(removed)


@pytest.mark.parametrize("where", ["in_tree", "numba_cache_dir"])
def test_callee_change_reaches_cached_caller_only_with_guard(tmp_path, where):
    root = _tiny_package(tmp_path)
    cache_dir = tmp_path / "numba_cache"
    env = _env(NUMBA_CACHE_DIR=str(cache_dir) if where == "numba_cache_dir" else None,
               XDG_CACHE_HOME=str(tmp_path / "user_cache"))

    assert _run(root, env, use_guard=True) == (1, 0)        # compiled, cached, stamped
    caches = cache_dir if where == "numba_cache_dir" else root / "tinypkg" / "__pycache__"
    assert list(caches.rglob("a.outer-*.nbi")) and list(caches.rglob("b.value-*.nbi"))
    _write_b(root, 2)
    # numba alone: a.py did not change, so its cached machine code (with b's old value) is loaded
    assert _run(root, env, use_guard=False) == (1, 0)
    value, removed = _run(root, env, use_guard=True)
    assert value == 2 and removed >= 4                       # a's and b's index and data files
    assert _run(root, env, use_guard=True) == (2, 0)        # nothing changed: the caches stay
    assert not (tmp_path / "user_cache").exists()            # nothing created where numba does not cache
    # what a process sees when another one's guard removes the data files after it read an
    # index: a cache miss (a recompile), not an error
    for data in caches.rglob("*.nbc"):
        data.unlink()
    assert _run(root, env, use_guard=False) == (2, 0)


def test_processes_importing_at_once_after_a_change(tmp_path):
    """Worker processes starting together after a change (a tuning run): each guard may remove
    what another process is loading or has just written; all of them run the new code."""
    root = _tiny_package(tmp_path)
    env = _env(NUMBA_CACHE_DIR=str(tmp_path / "numba_cache"), XDG_CACHE_HOME=str(tmp_path / "user_cache"))
    assert _run(root, env, use_guard=True) == (1, 0)
    _write_b(root, 2)
    args = [sys.executable, "-c", RUNNER, str(root), str(GUARD_FILE), "1"]
    procs = [subprocess.Popen(args, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.split()[0] == "2", err
    assert _run(root, env, use_guard=True) == (2, 0)


TINY_C = ("from numba import njit\n\nfrom .b import value\n\n\n"
          "@njit(cache=True)\ndef outer2(x):\n    return value() + x\n")
LIVE_FILES = TINY_FILES + ("tinypkg/c.py",)

#: a process that stays: ``ROOT GUARD_FILE stamp``; guard (and with ``stamp`` "1" the kernel
#: files' stamp on numba's entries), then for each line of stdin prints outer2(the number)
LIVE_RUNNER = """
import importlib.util, sys
root, guard_file, stamp = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
spec = importlib.util.spec_from_file_location("kernel_cache_under_test", guard_file)
kc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kc)
fp = kc.fingerprint(root, %r)
kc.refresh_kernel_caches(root, %r, stamp=fp)
if stamp:
    kc.stamp_caches(root, %r, fp)
sys.path.insert(0, root)
from tinypkg.c import outer2
for line in sys.stdin:
    print(outer2(int(line) if line.strip().isdigit() else float(line)), flush=True)
""" % (LIVE_FILES, LIVE_FILES, LIVE_FILES)


@pytest.mark.parametrize("stamp", [True, False])
def test_a_process_older_than_a_change_saves_nothing_newer_ones_load(tmp_path, stamp):
    """A process that imported the kernels before a change (a notebook) and compiles a new
    specialisation afterwards saves the OLD code.  With numba's own stamp (the function's own
    file, unchanged) a process started later loads it; with the kernel files' fingerprint as the
    stamp it is ignored."""
    root = _tiny_package(tmp_path)
    (root / "tinypkg" / "c.py").write_text(TINY_C)
    env = _env(NUMBA_CACHE_DIR=str(tmp_path / "numba_cache"), XDG_CACHE_HOME=str(tmp_path / "user_cache"))
    args = [sys.executable, "-c", LIVE_RUNNER, str(root), str(GUARD_FILE), "1" if stamp else "0"]

    def once(line: str) -> str:
        out = subprocess.run(args, cwd=root, env=env, input=line + "\n", capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    old = subprocess.Popen(args, cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        old.stdin.write("0\n")
        old.stdin.flush()
        assert old.stdout.readline().strip() == "1"
        _write_b(root, 2)
        assert once("0") == "2"                  # a new process: the guard removed the old entries
        old.stdin.write("0.5\n")                # the old process compiles outer2(float) and saves it
        old.stdin.flush()
        assert old.stdout.readline().strip() == "1.5"
    finally:
        _, err = old.communicate(timeout=120)
    assert old.returncode == 0, err
    assert once("0.5") == ("2.5" if stamp else "1.5")


def test_every_kernel_module_stamps_before_its_first_cached_kernel():
    """numba picks a function's locator when it is decorated: each kernel module calls
    stamp_package_caches() at module level before its first ``cache=True`` (the compiled
    sources are compiled by one of them)."""
    for rel in set(kc.KERNEL_FILES) - set(kc.COMPILED_SOURCES):
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        stamp_line = next((node.lineno for node in tree.body if isinstance(node, ast.Expr)
                           and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "")
                           == "stamp_package_caches"), None)
        first_cached = min(node.lineno for node in ast.walk(tree) if isinstance(node, ast.keyword)
                           and node.arg == "cache" and getattr(node.value, "value", None) is True)
        assert stamp_line is not None and stamp_line < first_cached, rel


def test_kernel_cache_entries_carry_the_fingerprint_in_numbas_own_places():
    from numba.core import caching

    from controller import _fast_loop
    from drivers.sim import _friction_kernel
    from dynamics import _planar3rrr_kernels

    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl
    assert kc._fingerprint == kc.fingerprint(kc._ROOT, kc.KERNEL_FILES)
    for disp in (_planar3rrr_kernels.fk_newton_ws, _friction_kernel.coulomb_pgs_into,
                 _fast_loop.rrr_task_computed_torque_seg):
        locator = disp._cache._impl.locator
        assert locator.get_source_stamp() == (kc.STAMP_PREFIX, kc._fingerprint)
        own = next(loc for cls in impl._locator_classes if not getattr(cls, "stamps_kernel_files", False)
                   for loc in [cls.from_function(disp.py_func, disp.py_func.__code__.co_filename)]
                   if loc is not None)
        assert locator.get_cache_path() == own.get_cache_path()
        assert locator.get_disambiguator() == own.get_disambiguator()
    # a function of another file is numba's alone
    from numba import njit

    def f(x):
        return x

    assert not getattr(type(njit(cache=True)(f)._cache._impl.locator), "stamps_kernel_files", False)


def _copy_kernels(dest: Path) -> None:
    for rel in kc.KERNEL_FILES:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)


def test_fingerprint_changes_with_any_kernel_file_and_only_then(tmp_path):
    _copy_kernels(tmp_path)
    base = kc.fingerprint(str(tmp_path), kc.KERNEL_FILES)
    assert kc.fingerprint(str(tmp_path), kc.KERNEL_FILES) == base
    assert kc.fingerprint(str(tmp_path), reversed(kc.KERNEL_FILES)) == base
    seen = {base}
    for rel in kc.KERNEL_FILES:
        path = tmp_path / rel
        data = path.read_bytes()
        os.utime(path, (1, 1))                               # a new mtime alone changes nothing
        assert kc.fingerprint(str(tmp_path), kc.KERNEL_FILES) == base
        path.write_bytes(data.replace(b"(", b"( ", 1))
        changed = kc.fingerprint(str(tmp_path), kc.KERNEL_FILES)
        assert changed not in seen, rel
        seen.add(changed)
        path.write_bytes(data)
        assert kc.fingerprint(str(tmp_path), kc.KERNEL_FILES) == base
    (tmp_path / kc.KERNEL_FILES[0]).unlink()
    assert kc.fingerprint(str(tmp_path), kc.KERNEL_FILES) not in seen


def _fake_package(tmp_path: Path) -> tuple[Path, list[str]]:
    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    for m in ("mod_a", "mod_b", "other"):
        (root / "pkg" / f"{m}.py").write_text(f"# {m}\n")
    return root, ["pkg/mod_a.py", "pkg/mod_b.py"]


#: a cache folder's files: (name, whether the guard removes it when the stamp is stale)
CACHE_FILES = [
    ("mod_a.f-3.py311.nbi", True), ("mod_a.f-3.py311.1.nbc", True), ("mod_a.f-3.py311.2.nbc", True),
    ("mod_a.Cls.meth-9.py312.nbi", True), ("mod_b.g-1.py311.nbi", True), ("mod_b.g-1.py311.1.nbc", True),
    ("mod_a.cpython-311.pyc", False),        # Python's own
    ("mod_bx.h-1.py311.nbi", False),         # another module whose name starts alike
    ("other.f-1.py311.nbi", False),          # a module not in the list
    ("mod_a.f-3.py311.nbi.tmp.0123abcd", False),  # numba writing it in another process
    ("notes.txt", False),
]
EVERYTHING = {name for name, _ in CACHE_FILES}
STALE = {name for name, gone in CACHE_FILES if gone}


def _fill(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in EVERYTHING:
        (folder / name).write_bytes(b"x")


def _left(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


@pytest.fixture
def places(tmp_path, monkeypatch):
    """Point numba's user-wide cache and NUMBA_CACHE_DIR (as numba would read it, imported or
    not) into ``tmp_path``; returns a function setting NUMBA_CACHE_DIR (None: unset)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))

    def numba_cache_dir(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
        else:
            monkeypatch.setenv("NUMBA_CACHE_DIR", value)
        if "numba" in sys.modules:
            monkeypatch.setattr(sys.modules["numba"].config, "CACHE_DIR", value or "")

    numba_cache_dir(None)
    return numba_cache_dir


def test_removes_only_the_listed_modules_caches_in_every_place_numba_looks(tmp_path, places):
    root, files = _fake_package(tmp_path)
    folder = os.path.abspath(root / "pkg")
    places(str(tmp_path / "ncd"))
    sub = "pkg_" + hashlib.sha1(folder.encode()).hexdigest()
    dirs = [tmp_path / "ncd" / sub, root / "pkg" / "__pycache__", tmp_path / "xdg" / "numba" / sub]
    assert kc.cache_dirs(folder) == [str(p) for p in dirs]
    neighbour = tmp_path / "xdg" / "numba" / ("pkg_" + "0" * 40)   # the same names, another folder
    for p in dirs + [neighbour]:
        _fill(p)

    removed = kc.refresh_kernel_caches(str(root), files)

    assert sorted(removed) == sorted(str(p / name) for p in dirs for name in STALE)
    for p in dirs:
        assert _left(p) == (EVERYTHING - STALE) | {kc.STAMP_NAME}
    assert _left(neighbour) == EVERYTHING
    # the stamps are current now: caches written from here on are kept
    _fill(dirs[1])
    assert kc.refresh_kernel_caches(str(root), files) == []
    # a kernel file changes: its caches go again
    (root / "pkg" / "mod_b.py").write_text("# changed\n")
    assert len(kc.refresh_kernel_caches(str(root), files)) == len(STALE)


def test_cache_dirs_are_numba_locators_paths(tmp_path, places):
    numba_caching = pytest.importorskip("numba.core.caching")
    places(str(tmp_path / "ncd"))
    path = str(ROOT / kc.KERNEL_FILES[0])

    def func():
        pass

    expected = [cls(func, path).get_cache_path() for cls in (numba_caching.UserProvidedCacheLocator,
                                                              numba_caching.InTreeCacheLocator,
                                                              numba_caching.UserWideCacheLocator)]
    assert kc.cache_dirs(os.path.dirname(path)) == expected
    places(None)
    assert kc.cache_dirs(os.path.dirname(path)) == expected[1:]


def _assert_no_stale_cache_under_a_current_stamp(root: Path, files: list[str]) -> None:
    good = kc.fingerprint(str(root), files).encode()
    for d in kc.cache_dirs(str(root / "pkg")):
        stamp = Path(d) / kc.STAMP_NAME
        if stamp.is_file() and stamp.read_bytes() == good:
            assert not _left(Path(d)) & STALE, d


def test_missing_corrupt_or_odd_stamps_never_raise(tmp_path, places):
    root, files = _fake_package(tmp_path)
    pycache = root / "pkg" / "__pycache__"
    stamp = pycache / kc.STAMP_NAME
    good = kc.fingerprint(str(root), files).encode()
    for content in (None, b"", b"\xff\xfe garbage \x00", good[:-1], good + b"x", good * 1000):
        _fill(pycache)
        if content is None:
            stamp.unlink(missing_ok=True)
        else:
            stamp.write_bytes(content)
        assert len(kc.refresh_kernel_caches(str(root), files)) == len(STALE), content
        assert stamp.read_bytes() == good
    assert not (tmp_path / "xdg").exists()      # nothing created where numba would not cache
    # the stamp's name taken by a folder: the stale caches go each time, no stamp can be written
    stamp.unlink()
    stamp.mkdir()
    _fill(pycache)
    assert len(kc.refresh_kernel_caches(str(root), files)) == len(STALE)
    _assert_no_stale_cache_under_a_current_stamp(root, files)


def test_missing_places_never_raise(tmp_path, places):
    root, files = _fake_package(tmp_path)
    (tmp_path / "ncd").write_text("")            # NUMBA_CACHE_DIR is a file
    places(str(tmp_path / "ncd"))
    assert kc.refresh_kernel_caches(str(tmp_path / "nowhere"), files) == []
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "xdg").exists()
    _fill(root / "pkg" / "__pycache__")
    assert len(kc.refresh_kernel_caches(str(root), files)) == len(STALE)
    _assert_no_stale_cache_under_a_current_stamp(root, files)


def _refused(*args, **kwargs):
    raise PermissionError(13, "Permission denied")


@pytest.mark.parametrize("refused", ["unlink", "listdir", "replace", "makedirs", "open", "access"])
def test_refused_file_operations_never_raise(tmp_path, places, monkeypatch, refused):
    """Each file operation the guard uses refused in turn (``access`` answering "not writable":
    a read-only install): no exception, never a current stamp over a stale cache, and the next
    import after the refusal cleans up."""
    root, files = _fake_package(tmp_path)
    pycache = root / "pkg" / "__pycache__"
    _fill(pycache)
    with monkeypatch.context() as m:
        if refused == "open":
            m.setattr(kc, "open", _refused, raising=False)
        elif refused == "access":
            m.setattr(kc.os, "access", lambda path, mode: False)
        else:
            m.setattr(kc.os, refused, _refused)
        kc.refresh_kernel_caches(str(root), files)
    if refused in ("unlink", "listdir", "open", "access"):
        assert _left(pycache) == EVERYTHING
    _assert_no_stale_cache_under_a_current_stamp(root, files)
    kc.refresh_kernel_caches(str(root), files)
    assert _left(pycache) == (EVERYTHING - STALE) | {kc.STAMP_NAME}
    assert kc.refresh_kernel_caches(str(root), files) == []


#: run as another user: refresh the package ARGV[2] with the guard file ARGV[1]; print what was removed
AS_USER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("kernel_cache_under_test", sys.argv[1])
kc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kc)
print(len(kc.refresh_kernel_caches(sys.argv[2], ["pkg/mod_a.py", "pkg/mod_b.py"])))
"""


def _python_for(uid: int) -> str:
    """A Python interpreter the user ``uid`` may run (this one may live in root's home)."""
    for python in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            if subprocess.run([python, "-c", "pass"], user=uid, capture_output=True, timeout=30).returncode == 0:
                return python
        except OSError:
            continue
    pytest.skip(f"no Python interpreter that uid {uid} may run")


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_read_only_install_for_real(tmp_path):
    """A package folder and caches owned by someone else (root's install, a user's run): the
    guard leaves them alone silently and stamps the user-wide folder numba falls back to."""
    if os.geteuid() == 0:
        import pwd

        try:
            nobody = pwd.getpwnam("nobody").pw_uid
        except KeyError:
            pytest.skip("no user 'nobody' to run as")
        python = _python_for(nobody)   # the guard needs the standard library only
        base = Path(tempfile.mkdtemp(prefix="kernel_cache_ro_"))    # tmp_path is root's alone
    else:
        nobody, python, base = None, sys.executable, tmp_path
    try:
        base.chmod(0o755)
        root, files = _fake_package(base)
        pycache = root / "pkg" / "__pycache__"
        _fill(pycache)
        xdg = base / "xdg"
        xdg.mkdir(mode=0o777)
        xdg.chmod(0o777)
        for p in (root, root / "pkg", pycache):
            p.chmod(0o555)
        # the guard as a file the other user can read (a checkout may sit in a folder only its
        # owner can enter, as `mktemp -d` makes it)
        guard = base / GUARD_FILE.name
        shutil.copyfile(GUARD_FILE, guard)
        guard.chmod(0o644)
        out = subprocess.run([python, "-c", AS_USER, str(guard), str(root)], cwd=base,
                             env=_env(XDG_CACHE_HOME=str(xdg)), capture_output=True, text=True,
                             timeout=60, user=nobody)
        assert (out.returncode, out.stdout, out.stderr) == (0, "0\n", "")
        assert _left(pycache) == EVERYTHING
        stamps = list(xdg.rglob(kc.STAMP_NAME))
        assert [p.parent.parent for p in stamps] == [xdg / "numba"]
    finally:
        for p in base.rglob("*"):
            if p.is_dir():
                p.chmod(0o755)
        if nobody is not None:
            shutil.rmtree(base, ignore_errors=True)


def _has_cache_true(path: Path) -> bool:
    """Whether a call in ``path`` passes ``cache=True`` (``@njit(..., cache=True)``, ``numba.jit``, ...)."""
    return any(isinstance(node, ast.keyword) and node.arg == "cache"
               and isinstance(node.value, ast.Constant) and node.value.value is True
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))


def _imports(path: Path, mod: str) -> bool:
    """Whether ``path`` imports module ``mod`` (``a.b.c``: ``import a.b.c``, ``from a.b import c``,
    ``from .c import x``...)."""
    name = mod.rsplit(".", 1)[1]
    return any((isinstance(n, ast.ImportFrom) and ((n.module or "") in (mod, name)
                                                   or (n.module or "").endswith("." + name)
                                                   or any(a.name == name for a in n.names)))
               or (isinstance(n, ast.Import) and any(a.name == mod for a in n.names))
               for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))


def test_kernel_list_is_complete():
    found = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if _has_cache_true(path):
                found.add(path.relative_to(ROOT).as_posix())
    assert found, "no kernel file found: the scan is broken"
    # templates copied into generated modules: never imported by the package, read as text
    # by the generator whose digest (the generated file's name) hashes them
    for rel in kc.TEMPLATE_SOURCES:
        assert rel in found, f"{rel} is listed as a template but has no cache=True: not a template"
        mod = rel[:-3].replace("/", ".")
        importers = [path.relative_to(ROOT).as_posix() for pkg in PACKAGES
                     for path in (ROOT / pkg).rglob("*.py") if _imports(path, mod)]
        assert not importers, f"{rel} is a template (copied, never imported), but {importers} import it"
        readers = [path.relative_to(ROOT).as_posix() for pkg in PACKAGES
                   for path in (ROOT / pkg).rglob("*.py")
                   if path.name != Path(rel).name and f'"{Path(rel).name}"' in path.read_text(encoding="utf-8")]
        assert readers, f"{rel} is listed as a template, but no module reads it by name"
        found.discard(rel)
    # plain Python compiled by a kernel module: listed, and imported by one that caches
    for rel in kc.COMPILED_SOURCES:
        assert not _has_cache_true(ROOT / rel), f"{rel} has cache=True: not a compiled source"
        mod = rel[:-3].replace("/", ".")
        users = [f for f in found if _imports(ROOT / f, mod)]
        assert users, f"{rel} is listed as compiled by a kernel module, but no kernel module imports it"
        found.add(rel)
    listed = set(kc.KERNEL_FILES)
    assert not found - listed, f"add to dynamics._kernel_cache.KERNEL_FILES: {sorted(found - listed)}"
    assert not listed - found, f"not (or no more) kernel files: {sorted(listed - found)}"
    assert len(listed) == len(kc.KERNEL_FILES)


#: run in a subprocess: import ARGV[1]; fail if a kernel module is looked up before the guard ran
ORDER_CHECK = """
import sys
kernels = set(sys.argv[2:])

class Stop(Exception):
    pass

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in kernels:
            kc = sys.modules.get("dynamics._kernel_cache")
            print(name, bool(kc is not None and kc._guarded))
            raise Stop   # enough: the kernel module itself need not load
        return None

sys.meta_path.insert(0, Watch())
try:
    __import__(sys.argv[1])
except Stop:
    pass
"""


def test_guard_runs_before_any_kernel_module_is_imported(tmp_path):
    kernels = [rel[:-3].replace("/", ".") for rel in kc.KERNEL_FILES]
    firsts = {pkg: next(m for m in kernels if m.startswith(pkg + ".")) for pkg in ("dynamics", "drivers", "controller")}
    env = _env(NUMBA_CACHE_DIR=str(tmp_path / "numba_cache"), PYTHONPATH=str(ROOT))
    procs = {pkg: subprocess.Popen([sys.executable, "-c", ORDER_CHECK, first, *kernels], cwd=ROOT, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for pkg, first in firsts.items()}
    for pkg, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        name, guarded = out.split()
        assert name.startswith(pkg + ".") and guarded == "True", (firsts[pkg], out)


def test_import_is_silent_with_jit_disabled_and_a_stale_stamp(tmp_path):
    """NUMBA_DISABLE_JIT=1, warnings as errors, a stale stamp where the caches are: no output."""
    cache_dir = tmp_path / "numba_cache"
    folder = os.path.abspath(ROOT / "controller")
    stale = cache_dir / ("controller_" + hashlib.sha1(folder.encode()).hexdigest())
    stale.mkdir(parents=True)
    (stale / kc.STAMP_NAME).write_text("stale")
    (stale / "_safety_rules.f-1.py311.nbi").write_text("")
    code = ("import controller._safety_rules as r, math; "
            "assert r.predicted_margin is not None and 'numba' in __import__('sys').modules")
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env=_env(NUMBA_DISABLE_JIT="1", NUMBA_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT)),
                         timeout=120)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
    assert sorted(p.name for p in stale.iterdir()) == [kc.STAMP_NAME]


def test_dynamics_import_ran_the_guard():
    import dynamics

    assert dynamics._guard_kernel_caches is kc.guard and kc._guarded


def test_guard_module_loads_without_the_package():
    """The subprocesses above load the guard by path: it must need nothing but the standard library."""
    spec = importlib.util.spec_from_file_location("kernel_cache_alone", GUARD_FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.KERNEL_FILES == kc.KERNEL_FILES and not mod._guarded
