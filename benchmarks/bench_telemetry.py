"""What recording costs the control thread: telemetry off, ``log.npy`` only, ``log.npy`` + ``log.mcap``,
``log.npy`` + the live view.

``run(quick) -> list[dict]`` rows (protocol of ``benchmarks/run.py``); every ratio is against
the ``log.npy``-only reference measured in the same process, its samples interleaved with the
others'.  Cases:

* one row recorded by :meth:`controller.telemetry.TelemetryWriter.record` (3 and 6 joints),
  a sample being 200 rows (one flush; with MCAP, the copy of the block into the shared-memory
  ring) while the MCAP writer process drains the ring;
* the control thread's CPU time per cycle (``time.thread_time``) of whole lock-step runs built as
  ``torqueloop run`` builds them (their elapsed time per cycle beside it):
  ``3rrr_circle_direct.toml`` (the compiled offline loop, plant in process) and
  ``3rrr_circle.toml`` (the Python loop through the MIT CAN driver and emulated drives),
  telemetry off / npy / npy + MCAP / npy + live (the Foxglove WebSocket server in the writer
  process at its default 50 Hz, a client in a process of its own subscribed and reading
  everything), median of interleaved runs; the added cost per cycle is the MCAP (live) median
  minus the npy median (target: at most 2 us).  A lock-step run goes faster
  than the writer, which is busy beside the loop for the whole run; the same run with the
  writer process stopped (SIGSTOP) until the log closes separates the control thread's own
  work (copies into the ring) from the slowdown a busy process on the other core causes
  (shared caches, a loaded VM);
* the wall-clock 1 kHz run of ``3rrr_circle_direct.toml`` (``loop.clock = "wall"``) with the
  live view on (a client reading, ``/tf`` included) and off (``log.npy`` only), interleaved in one
  process: the cycles' lateness (p50, p99, p99.9, max, from ``log.npy``) and the deadline misses
  (lateness above half a period, the run's own count); on a shared machine the figures carry
  its load (reported).  Twice: with the loop's default settings, and with the real-time settings
  a wall-clock run documents (``[loop.realtime]``: SCHED_FIFO 80, the loop pinned to CPU 1,
  the garbage collector frozen; the telemetry writer process then stays off CPU 1), where the
  live view's work and the client have the other core;
* the writer's own work per row (encode the two messages, ``mcap`` ``add_message``,
  compression), from which the rate it sustains; the live server's per row (decimated to 50 Hz,
  and every row).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"
#: the MCAP run whose writer process is stopped during the loop
PAUSED = "npy+mcap, writer paused"
#: the live view with a client reading
LIVE = "npy+live, client reading"

#: a Foxglove WebSocket client in a process of its own: subscribes to every channel, reads
#: until the server closes, prints the messages it got
_CLIENT = """
import json, sys
from websockets.sync.client import connect
from websockets.exceptions import ConnectionClosed
n = 0
with connect(sys.argv[1], subprotocols=["foxglove.sdk.v1"], proxy=None, compression=None) as ws:
    chans = {}
    while len(chans) < 4:                       # /joint_states, /torqueloop/cycle, /rosout, /tf
        m = ws.recv(timeout=60)
        if isinstance(m, str) and json.loads(m)["op"] == "advertise":
            chans.update({c["topic"]: c["id"] for c in json.loads(m)["channels"]})
    ws.send(json.dumps({"op": "subscribe", "subscriptions": [{"id": i, "channelId": c} for i, c in
                                                             enumerate(chans.values())]}))
    try:
        while True:
            ws.recv(timeout=600)
            n += 1
    except ConnectionClosed:
        pass
print(n)
"""


def _row_args(n: int, dim: int):
    z, zd = np.zeros(n), np.zeros(dim)
    return (0.0, z + 0.1, z + 0.2, zd + 0.3, zd, zd, zd + 1e-4, z + 1.0, z + 1.0, z + 0.9, 0, np.zeros(n, bool),
            1e-6, 5e-5, np.ones(n, bool), np.zeros(n, np.int64), np.ones(n, bool))


def _record_rows(tmp: Path, repeat: int) -> list[dict]:
    from controller.telemetry import TelemetryWriter

    rows = []
    for n in (3, 6):
        args = _row_args(n, n)
        writers = {"npy": TelemetryWriter(tmp / f"npy{n}", n, n, buffer_rows=200),
                   "npy+mcap": TelemetryWriter(tmp / f"mcap{n}", n, n, buffer_rows=200,
                                               mcap_ring_rows=65536)}
        samples: dict[str, list[float]] = {k: [] for k in writers}
        for _ in range(repeat):
            for key, w in writers.items():
                t0 = time.perf_counter()
                for _ in range(200):
                    w.record(*args)
                samples[key].append((time.perf_counter() - t0) / 200 * 1e6)
        for w in writers.values():
            w.close()
        st = writers["npy+mcap"].meta["mcap"]
        ref = float(np.median(samples["npy"]))
        for key in writers:
            med = float(np.median(samples[key]))
            rows.append({"case": f"record() per row, {key} ({n} joints)", "median_us": med,
                         "p99_us": float(np.percentile(samples[key], 99)), "ref": "npy", "ref_median_us": ref,
                         "ratio": med / ref, "added_us": med - ref,
                         "note": ("flush every 200 rows amortised" if key == "npy" else
                                  f"+ block copied into the ring; writer process draining meanwhile "
                                  f"({st['rows_written']} rows written, {st['rows_dropped']} dropped of "
                                  f"{repeat * 200})")})
    return rows


def _run(fname: str, tmp: Path | None, mode: str, duration_s: float, overrides: dict | None = None,
         strict: bool = True):
    """One run as ``torqueloop run`` builds it; returns (result, CPU time of the control thread
    in the loop's ``run()`` apart from the closing of the log [s], CPU time of that closing [s])."""
    from controller.app.run import build_run, load_run

    spec = load_run(RUNS / fname, overrides={"telemetry.mcap": mode.startswith("npy+mcap"),
                                             "telemetry.live": mode == LIVE, **(overrides or {})},
                     duration_s=duration_s)
    run = build_run(spec, out_dir=tmp)
    cpu = {"run": 0.0, "close": 0.0}
    client = None
    if mode == LIVE:
        rec = run.loop.telemetry.recorder
        client = subprocess.Popen([sys.executable, "-c", _CLIENT, rec.live_address], stdout=subprocess.PIPE,
                                  text=True)
        if not rec.wait_viewer(120):
            raise RuntimeError("benchmark: the live client did not subscribe")
    if mode == PAUSED:
        # the writer process stopped until the log closes: what remains is the control
        # thread's own work (the copies into the ring), without a busy process beside it
        rec = run.loop.telemetry.recorder
        os.kill(rec.pid, signal.SIGSTOP)
        close = rec.close

        def resume_then_close(*args, **kwargs):
            os.kill(rec.pid, signal.SIGCONT)
            return close(*args, **kwargs)

        rec.close = resume_then_close

    def timed(fn, key):
        def call(*args, **kwargs):
            c0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                cpu[key] += time.thread_time() - c0
        return call

    run.loop.run = timed(run.loop.run, "run")
    if run.loop.telemetry is not None:
        run.loop.telemetry.close = timed(run.loop.telemetry.close, "close")
    res = run.execute()
    if client is not None:
        got = int(client.communicate(timeout=120)[0] or 0)
        if got < res.n_cycles * spec.period_s * 50 * 2 * 0.8:
            raise RuntimeError(f"benchmark: the live client got {got} messages")
    if res.status != "completed" and strict:
        raise RuntimeError(f"benchmark run {fname} ({mode}) ended with {res.status}: {res.faults[:1]}")
    return res, cpu["run"] - cpu["close"], cpu["close"]


def _loop_rows(tmp: Path, quick: bool) -> list[dict]:
    rows = []
    # --quick (the suite's check that the module runs): one short run of each case
    repeat = 1 if quick else 7
    dur = 0.5 if quick else 4.0
    for fname, what in (("3rrr_circle_direct.toml", "compiled offline loop, plant in process"),
                        ("3rrr_circle.toml", "Python loop, MIT CAN driver, emulated drives inline")):
        _run(fname, tmp / "warm", "npy", dur)          # numba caches loaded, buses warm
        cpu: dict[str, list[float]] = {"off": [], "npy": [], "npy+mcap": [], PAUSED: [], LIVE: []}
        wall: dict[str, list[float]] = {k: [] for k in cpu}
        close: dict[str, list[float]] = {k: [] for k in cpu}
        drops: dict[str, list[int]] = {"npy+mcap": [], PAUSED: []}
        for r in range(repeat):
            for mode in cpu:
                out = None if mode == "off" else tmp / f"{fname}-{mode}-{r}"
                res, c, end = _run(fname, out, mode, dur)
                cpu[mode].append(c / res.n_cycles * 1e6)
                close[mode].append(end * 1e3)
                wall[mode].append(res.wall_time_s / res.n_cycles * 1e6)
                if mode.startswith("npy+mcap"):
                    import json
                    drops[mode].append(json.loads((out / "meta.json").read_text())["mcap"]["rows_dropped"])
        ref = float(np.median(cpu["npy"]))
        for mode in cpu:
            med = float(np.median(cpu[mode]))
            note = (f"{what}; CPU time of the control thread per cycle (time.thread_time over the loop's run() "
                    f"but the log's closing at the end: {np.median(close[mode]):.2f} ms once), median of {repeat} "
                    f"runs of {dur:g} s")
            if mode in drops:
                note += f"; rows dropped per run {drops[mode]}"
            rows.append({"case": f"{fname}, telemetry {mode}", "median_us": med,
                         "p99_us": float(np.max(cpu[mode])), "ref": "npy", "ref_median_us": ref, "ratio": med / ref,
                         "added_us": med - ref, "wall_us": float(np.median(wall[mode])),
                         "note": note + " (p99 column: the slowest run; wall_us: elapsed per cycle, other "
                                        "processes' share of the CPUs included)"})
    return rows


#: the wall-clock run's real-time settings (as in benchmarks/bench_loop.py and controller/app/run.py)
REALTIME = {"loop.realtime.sched_fifo_priority": 80, "loop.realtime.cpu": 1, "loop.realtime.freeze_gc": True}


def _wall_rows(tmp: Path, quick: bool, realtime: bool = False) -> list[dict]:
    """1 kHz wall-clock lateness of the 3RRR direct run, live view off and on, interleaved
    (``realtime``: with :data:`REALTIME`)."""
    from controller.telemetry import read_log

    fname = "3rrr_circle_direct.toml"
    repeat = 1 if quick else 5
    dur = 0.5 if quick else 8.0
    modes = ("npy", LIVE)
    late: dict[str, list[np.ndarray]] = {m: [] for m in modes}
    misses: dict[str, list[int]] = {m: [] for m in modes}
    load = []
    # the simulated plant in process, no motor: the overrun protections loosened (within their
    # accepted ranges), so that a loaded machine's late cycles are measured rather than stopping
    # the run; a run that stops all the same is counted, its cycles up to then measured
    more = {"loop.clock": "wall", "safety.overrun_fraction_max": 0.9, "safety.lateness_max_s": 1.0,
            **(REALTIME if realtime else {})}
    settings = "; [loop.realtime] as documented" if realtime else ""
    unapplied: set[str] = set()
    status: dict[str, list[str]] = {m: [] for m in modes}
    tag = "-rt" if realtime else ""
    _run(fname, tmp / f"wall-warm{tag}", "npy", dur, more, strict=False)
    for r in range(repeat):
        for mode in modes:
            out = tmp / f"wall-{mode}-{r}{tag}"
            load.append(os.getloadavg()[0])
            res, _, _ = _run(fname, out, mode, dur, more, strict=False)
            status[mode].append(res.status if res.status == "completed" else
                                f"{res.status} at {res.faults[0].t_s:g} s ({res.faults[0].cause})" if res.faults
                                else res.status)
            late[mode].append(read_log(out)["lateness_s"] * 1e6)
            misses[mode].append(int(res.metrics["deadline_misses"]))
            unapplied.update(m for m in res.messages if "not applied" in m or "not supported" in m)
    rows = []
    ref = float(np.percentile(np.concatenate(late["npy"]), 99.9))
    for mode in modes:
        a = np.concatenate(late[mode])
        p50, p99, p999 = (float(np.percentile(a, p)) for p in (50, 99, 99.9))
        rows.append({"case": f"{fname} wall clock 1 kHz{settings}, lateness, telemetry {mode}", "median_us": p50,
                     "p99_us": p99, "p999_us": p999, "max_us": float(a.max()), "ref": "npy",
                     "ref_median_us": ref, "ratio": p999 / ref, "added_us": p999 - ref,
                     "misses": misses[mode],
                     "note": f"lateness of {a.size} cycles in {repeat} interleaved runs of {dur:g} s "
                             "(safety.overrun_fraction_max = 0.9, lateness_max_s = 1 s; runs: "
                             f"{', '.join(status[mode])}); deadline "
                             f"misses (> 0.5 ms) per run {misses[mode]}; per run p99.9 "
                             f"{[round(float(np.percentile(x, 99.9))) for x in late[mode]]} us, max "
                             f"{[round(float(x.max())) for x in late[mode]]} us; 1-min load average "
                             f"{min(load):.2f}-{max(load):.2f} (ratio and added_us: p99.9 against npy)"
                             + (f"; not applied: {sorted(unapplied)}" if unapplied else "")})
    return rows


def _writer_rows(tmp: Path, repeat: int) -> list[dict]:
    from controller.telemetry import log_dtype
    from controller.telemetry_mcap import McapFile

    rows = []
    for n in (3, 6):
        block = np.zeros(1000, dtype=log_dtype(n, n))
        block["t"] = np.arange(1000) * 1e-3
        samples = []
        for r in range(repeat):
            f = McapFile(tmp / f"w{n}-{r}.mcap", block.dtype, [f"j{j}" for j in range(n)],
                         [f"a{j}" for j in range(n)], start_ns=0)
            t0 = time.perf_counter()
            f.write_rows(block)
            samples.append((time.perf_counter() - t0) / block.shape[0] * 1e6)
            f.finish({})
        med = float(np.median(samples))
        rows.append({"case": f"MCAP writer (its process), per row ({n} joints)", "median_us": med,
                     "p99_us": float(np.percentile(samples, 99)),
                     "note": f"2 messages (JointState + ControlCycle), zstd chunks; sustains "
                             f"{1e6 / med:.0f} rows/s on one core (1 kHz needs {med / 10:.1f} % of it)"})
    return rows


def _live_rows(repeat: int) -> list[dict]:
    from controller.telemetry import log_dtype
    from controller.telemetry_live import LiveServer

    rows = []
    n = 3
    block = np.zeros(1000, dtype=log_dtype(n, n))
    block["t"] = np.arange(1000) * 1e-3
    for rate in (50.0, 1000.0):
        samples = []
        for _ in range(repeat):
            srv = LiveServer(block.dtype, [f"j{j}" for j in range(n)], [f"a{j}" for j in range(n)], start_ns=0,
                             rate_hz=rate)
            t0 = time.perf_counter()
            srv.publish(block)
            samples.append((time.perf_counter() - t0) / block.shape[0] * 1e6)
            srv.close(linger_s=0.0)
        med = float(np.median(samples))
        rows.append({"case": f"live server (writer process), per row at {rate:g} Hz ({n} joints, 1 kHz loop)",
                     "median_us": med, "p99_us": float(np.percentile(samples, 99)),
                     "note": "decimation, CDR encoding of the rows sent, foxglove-sdk Channel.log (no client)"})
    return rows


def run(quick: bool = False) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows += _record_rows(tmp, 20 if quick else 100)
        rows += _writer_rows(tmp, 3 if quick else 7)
        rows += _live_rows(3 if quick else 7)
        rows += _loop_rows(tmp, quick)
        rows += _wall_rows(tmp, quick)
        rows += _wall_rows(tmp, quick, realtime=True)
    return rows


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_telemetry [--quick]
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_telemetry", *sys.argv[1:]]))
