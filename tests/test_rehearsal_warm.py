"""A rehearsal never waits for a compile: the emulator server loads every compiled kernel it
serves with before it prints READY, and the hardware run before its clock starts.

A kernel compiled (or only loaded from numba's cache, 2-3 ms each) after that point stalls the
devices' replies or the loop's first cycles: on a fresh clone the suite's rehearsal failed that
way.  Each case runs in a new process (nothing loaded yet): the shipped rehearsal pair with its
bus moved to a private python-can virtual channel, server and run in the one process, and
counts the compiled specialisations of every numba function of the package at READY, at the
clock's start and at the end.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import re, sys, tempfile, uuid
from pathlib import Path
from numba.core.dispatcher import Dispatcher

ROOT, stem, robot = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
from drivers.sim.serve import build_server
from controller.app.run import build_run, load_run
from tests.test_bringup import write_clean_calibration
from tests.serve_process import loosest_timing
from drivers.base import TIMEOUT_MAX_S

def overloads():
    out = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or name.split(".")[0] not in ("controller", "drivers", "dynamics", "trajectories"):
            continue
        for attr, obj in list(vars(mod).items()):
            if isinstance(obj, Dispatcher):
                out[f"{name}.{attr}"] = len(obj.overloads)
    return out

def new(since, now):
    return {k: (since.get(k, 0), n) for k, n in now.items() if n != since.get(k, 0)}

channel = f"warm-{uuid.uuid4().hex}"
virtual = f'interface = "virtual"\nchannel = "{channel}"\n'
rob = (ROOT / "hil_configs" / "robots" / robot).as_posix()
reh = ROOT / "hil_configs" / "rehearsal"
with tempfile.TemporaryDirectory() as d:
    d = Path(d)
    srv = (reh / f"{stem}_server.toml").read_text().replace(f'robot = "../robots/{robot}"', f'robot = "{rob}"')
    srv = re.sub(r'\[server\]\n(.*?\n)*?(?=robot)', '[server]\n' + virtual, srv)
    # the drives' watchdog at its longest: the two ends share the GIL of one process, and on a
    # loaded machine a stall of 50-100 ms (the shipped timeouts) trips the drives mid-run, which
    # the run rightly stops for; this test is about what is loaded when
    srv, found = re.subn(r'(?m)^watchdog_timeout_s *= *[^\n#]*', 'watchdog_timeout_s = 1.0 ', srv)
    assert found == 1, "the server config's watchdog_timeout_s line moved"
    (d / "srv.toml").write_text(srv)
    run = (reh / f"{stem}_run.toml").read_text().replace(f'file = "../robots/{robot}"', f'file = "{rob}"')
    run = re.sub(r'\[driver\.bus\]\n(.*?\n)*?(?=\[\[driver\.joints\]\])', '[driver.bus]\n' + virtual + '\n', run)
    # both ends share this process: no [loop.realtime] (a SCHED_FIFO loop thread would starve the
    # serving thread of the interpreter; across processes each has its own CPU and priority)
    run = re.sub(r'\[loop\.realtime\][^\n]*\n(?:[a-z_]+ *= *[^\n]*\n)*', '', run)
    (d / "run.toml").write_text(run)
    host = build_server(str(d / "srv.toml")).host
    at_ready = overloads()
    # the wall clock (a hardware run), with room for the two ends sharing one process: this is
    # about what is loaded when, not about timing
    # (the loosest timing protections accepted, and the longest reply wait: a run beside a busy
    # machine stopped on its late cycles, 2026-11-30)
    spec = load_run(str(d / "run.toml"), overrides={
        "loop.duration_s": 0.2, "driver.reply_timeout_s": TIMEOUT_MAX_S["reply_timeout_s"],
        "safety.tracking_error_max": 1.0, **{f"safety.{k}": v for k, v in loosest_timing().items()}})
    write_clean_calibration(spec)       # a hardware run needs one (bring-up: tests/test_bringup.py)
    r = build_run(spec, out_dir=d / "out")
    start = r.loop.clock.start
    at_start = {}
    def started():
        at_start.update(overloads())
        return start()
    r.loop.clock.start = started
    res = r.execute()
    host.close()
    end = overloads()
    served_late = {k: v for k, v in new(at_ready, end).items() if k.startswith("drivers.sim.")}
    print("RESULT", res.status, res.n_cycles, [str(f) for f in res.faults[:2]])
    print("AFTER_START", new(at_start, end))
    print("SERVER_AFTER_READY", served_late)
'''


@pytest.mark.parametrize("stem, robot", [("3rrr_mit_udp", "3rrr_horizontal.toml"),
                                         ("stewart_odrive_udp", "stewart.toml")])
def test_no_kernel_is_loaded_after_ready_or_after_the_clock_starts(stem, robot):
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT), stem, robot], cwd=ROOT, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = dict(ln.split(" ", 1) for ln in r.stdout.splitlines() if ln.split(" ", 1)[0] in
                 ("RESULT", "AFTER_START", "SERVER_AFTER_READY"))
    assert lines["RESULT"].split()[0] == "completed", r.stdout
    assert lines["AFTER_START"] == "{}", f"loaded after the clock started: {lines['AFTER_START']}"
    assert lines["SERVER_AFTER_READY"] == "{}", f"the server loaded after READY: {lines['SERVER_AFTER_READY']}"
