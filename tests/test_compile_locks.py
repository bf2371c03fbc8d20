"""The locks that let one process at a time compile the same kernels: a mechanism's
(:func:`dynamics._mechanism_derive.compile_lock`) and a kernel module's at its import
(:class:`dynamics._kernel_cache.CompileGate`).  Another process waits for them, a thread may take
a mechanism's again inside itself, and a wait that runs out goes on unlocked."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from dynamics import _kernel_cache, _mechanism_derive as md

pytestmark = pytest.mark.skipif(_kernel_cache.fcntl is None, reason="no fcntl: no lock between processes")

DG = "0123456789abcdef" * 4


def _holder(tmp_path, hold_s, gate_file=None):
    """A process holding the lock of DG (or the gate of ``gate_file``) for ``hold_s`` s; returns
    it once it holds it.  Before letting go it prints the instant (``time.monotonic()``, one clock
    for every process on Linux): a waiter that got the lock later waited for it, however the
    machine scheduled the two (a wait measured from this side can be short by a stall)."""
    if gate_file is None:
        code = textwrap.dedent(f"""
            import sys, time
            from dynamics import _mechanism_derive as md
            with md.compile_lock({DG!r}):
                print("held", flush=True)
                time.sleep({hold_s})
                print(time.monotonic(), flush=True)      # the lock is let go after this instant
        """)
    else:
        code = textwrap.dedent(f"""
            import sys, time
            from dynamics._kernel_cache import CompileGate
            g = CompileGate({str(gate_file)!r})
            assert g.held
            print("held", flush=True)
            time.sleep({hold_s})
            print(time.monotonic(), flush=True)          # the gate is let go after this instant
            g.release()
        """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env={**__import__("os").environ, "TORQUELOOP_MECHANISM_CACHE": str(tmp_path)})
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_process_waits_for_the_first(tmp_path, monkeypatch):
    monkeypatch.setenv("TORQUELOOP_MECHANISM_CACHE", str(tmp_path))
    p = _holder(tmp_path, 1.0)
    with md.compile_lock(DG):
        got = time.monotonic()
    released = float(p.stdout.readline())
    p.wait(10)
    assert got > released, (got, released)      # taken only once the holder let go
    assert (tmp_path / f"mechanism-{DG[:32]}.lock").exists()


def test_a_wait_that_runs_out_goes_on_unlocked(tmp_path, monkeypatch):
    monkeypatch.setenv("TORQUELOOP_MECHANISM_CACHE", str(tmp_path))
    monkeypatch.setattr(_kernel_cache, "COMPILE_WAIT_S", 0.2)
    p = _holder(tmp_path, 60.0)
    try:
        t0 = time.monotonic()
        with md.compile_lock(DG):
            waited = time.monotonic() - t0
            assert p.poll() is None             # the holder still holds it: the wait ran out
        assert waited >= 0.2, waited
    finally:
        p.kill()
        p.wait(10)


def test_reentrant_in_a_thread_and_queued_between_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("TORQUELOOP_MECHANISM_CACHE", str(tmp_path))
    order = []
    with md.compile_lock(DG):
        with md.compile_lock(DG):           # a nested build of the same mechanism: no deadlock
            order.append("nested")
        def other():
            with md.compile_lock(DG):
                order.append("thread")
        t = threading.Thread(target=other)
        t.start()
        time.sleep(0.2)
        order.append("outer ends")
    t.join(5)
    assert order == ["nested", "outer ends", "thread"]


def test_a_kernel_module_import_waits_for_the_process_compiling_it(tmp_path):
    module = tmp_path / "kernels.py"
    module.write_text("")
    (tmp_path / "__pycache__").mkdir()          # where numba would keep its caches
    p = _holder(tmp_path, 1.0, gate_file=module)
    g = _kernel_cache.CompileGate(str(module))
    got = time.monotonic()
    try:
        released = float(p.stdout.readline())
        assert g.held and got > released, (got, released)
        assert (tmp_path / "__pycache__" / "kernels.compile.lock").exists()
    finally:
        g.release()
        g.release()                              # idempotent
        p.wait(10)
    assert not g.held


def test_every_gated_kernel_module_releases_its_gate_at_its_end():
    root = Path(_kernel_cache.__file__).resolve().parents[1]
    gated = []
    for rel in _kernel_cache.KERNEL_FILES:
        text = (root / rel).read_text(encoding="utf-8")
        if "CompileGate(__file__)" in text:
            gated.append(rel)
            assert text.rstrip().splitlines()[-1] == "_gate.release()", rel
            assert text.index("stamp_package_caches()") < text.index("CompileGate(__file__)"), rel
    assert "dynamics/_stewart_kernels.py" in gated and len(gated) >= 6, gated


def test_a_kernel_module_whose_import_failed_does_not_keep_its_gate(tmp_path, monkeypatch):
    """A kernel module whose import raised (a typing error of a signature) never reaches its
    ``_gate.release()``; its globals outlive the failure (here the kept exception): its next
    import in this process must not wait for its own stale gate, nor another process for it."""
    monkeypatch.setattr(_kernel_cache, "COMPILE_WAIT_S", 5.0)
    pkg = tmp_path / "gatepkg"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "kbad.py").write_text(textwrap.dedent("""
        from dynamics._kernel_cache import CompileGate
        _gate = CompileGate(__file__)
        def kernel():                       # the module's globals in a cycle, as any module's
            return kernel
        raise RuntimeError("a signature that does not compile")
        _gate.release()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    kept = []
    for _ in range(2):
        t0 = time.monotonic()
        with pytest.raises(RuntimeError) as ei:
            __import__("gatepkg.kbad")
        kept.append(ei)                     # the failure's traceback keeps the module's globals
        assert time.monotonic() - t0 < 2.0
    # the last failure's gate is released by this process' next gate (its collection goes on
    # importing kernel modules): then another process gets it at once
    (pkg / "kgood.py").write_text("from dynamics._kernel_cache import CompileGate\n"
                                  "_gate = CompileGate(__file__)\n_gate.release()\n")
    __import__("gatepkg.kgood")
    code = textwrap.dedent(f"""
        import time
        from dynamics import _kernel_cache
        _kernel_cache.COMPILE_WAIT_S = 5.0
        t0 = time.monotonic()
        g = _kernel_cache.CompileGate({str(pkg / "kbad.py")!r})
        print(g.held, round(time.monotonic() - t0, 1))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    held, waited = out.stdout.split()
    assert held == "True" and float(waited) < 2.0, out
