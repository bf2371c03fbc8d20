"""The lock that lets one process at a time derive and compile a mechanism
(:func:`dynamics._mechanism_derive.compile_lock`): another process waits for it, a thread may
take it again inside itself, and a wait that runs out goes on unlocked."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from dynamics import _mechanism_derive as md

pytestmark = pytest.mark.skipif(md.fcntl is None, reason="no fcntl: no lock between processes")

DG = "0123456789abcdef" * 4


def _holder(tmp_path, hold_s):
    """A process holding the lock of DG for ``hold_s`` s; returns it once it holds the lock."""
    code = textwrap.dedent(f"""
        import sys, time
        from dynamics import _mechanism_derive as md
        with md.compile_lock({DG!r}):
            print("held", flush=True)
            time.sleep({hold_s})
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env={**__import__("os").environ, "TORQUELOOP_MECHANISM_CACHE": str(tmp_path)})
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_process_waits_for_the_first(tmp_path, monkeypatch):
    monkeypatch.setenv("TORQUELOOP_MECHANISM_CACHE", str(tmp_path))
    p = _holder(tmp_path, 1.0)
    t0 = time.monotonic()
    with md.compile_lock(DG):
        waited = time.monotonic() - t0
        assert p.poll() is not None or waited > 0.5      # taken only once the holder let go
    p.wait(10)
    assert waited > 0.5, waited
    assert (tmp_path / f"mechanism-{DG[:32]}.lock").exists()


def test_a_wait_that_runs_out_goes_on_unlocked(tmp_path, monkeypatch):
    monkeypatch.setenv("TORQUELOOP_MECHANISM_CACHE", str(tmp_path))
    monkeypatch.setattr(md, "COMPILE_LOCK_WAIT_S", 0.2)
    p = _holder(tmp_path, 5.0)
    try:
        t0 = time.monotonic()
        with md.compile_lock(DG):
            waited = time.monotonic() - t0
        assert 0.2 <= waited < 3.0, waited
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
