"""The control cycle for 3 MIT motors (read, control, safety, write, telemetry), without the emulator.

Issue 16's target: the cycle for 3 motors on the virtual bus, *excluding the emulator*,
<= 50 us median.  Measured here as the loop measures it (``RunResult.timing.cycle``:
from the cycle's start to its log row: trajectory sample, velocity handling,
``TaskComputedTorque.compute``, ``SafetySupervisor.check``, ``MitCanDriver.cycle`` --
encode the 3 commands, send them, receive and decode the 3 replies, follow check --
and ``TelemetryWriter.record``), on the shipped 3RRR circle
(``hil_configs/runs/3rrr_circle.toml``: task-space computed torque with the model of
``hil_configs/robots/3rrr_horizontal.toml``, its safety settings, lock-step clock, 1 kHz).

How the emulator is excluded: the motors' replies are *replayed*.  The run is first made
through the real emulated path (``sim_mit_can``, devices served inline) while the
driver's bus records every frame the emulated drives sent (their real codec output).
The measured run then uses the real :class:`~drivers.mit.MitCanDriver`, built by
:func:`drivers.registry.build_driver` (``type = "mit_can"``, the run's joint table) on a
minimal python-can bus (:class:`can.BusABC`) that answers every frame sent with the
next recorded reply (one new :class:`can.Message` per reply, as any interface
receives one; python-can's own ``BusABC.recv``).  The commands are the recorded run's
(same feedback, same law), so the replies are exactly what the emulator answered;
the benchmark checks that the log equals the emulated run's.  Controller, safety,
telemetry and :class:`~controller.loop.ControlLoop` are built as the run path builds
them.

Rows (median and p99 over the cycles of ``repeat`` runs, each after a warm-up run):

* ``3 MIT motors, replayed replies`` -- the target's cycle; ref: the same cycle on
  the in-process plant (``3rrr_circle_direct.toml``, ``DirectPlantDriver``, every
  cycle in the Python loop);
* ``3 MIT motors, emulated (inline)`` -- the shipped run as it is, emulator included
  (its real-time factor in the note), ref: the replayed cycle;
* ``python-can virtual bus, 3 frames out + 3 in`` -- the bus alone: python-can's
  ``virtual`` interface, send 3 then receive 3 (for scale), ref: the replayed cycle.
"""

from __future__ import annotations

import collections
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "hil_configs" / "runs"
MIT_RUN = RUNS / "3rrr_circle.toml"
DIRECT_RUN = RUNS / "3rrr_circle_direct.toml"


def _run_api():
    """The run path's builders (:mod:`controller.app.run`)."""
    from controller.app import run as api

    return api


def _replay_bus(replies):
    import can

    class ReplayBus(can.BusABC):
        """Answers the i-th frame sent with the i-th recorded reply (``(arbitration_id, data)``)."""

        def __init__(self):
            self._next = iter(replies)
            self._rx = collections.deque()
            self._can_protocol = can.CanProtocol.CAN_20
            super().__init__(channel="replay")

        def send(self, msg, timeout=None):
            nxt = next(self._next, None)
            if nxt is None:
                return                                  # more frames than recorded: no answer
            arb, data = nxt
            self._rx.append(can.Message(timestamp=time.time(), arbitration_id=arb, data=data,
                                        is_extended_id=False, is_rx=True, channel="replay", check=False))

        def _recv_internal(self, timeout):
            rx = self._rx
            return (rx.popleft() if rx else None), False

    return ReplayBus()


def _record_replies(spec, out: Path):
    """Run the shipped emulated path; return (result, log, replies the driver received in order)."""
    from controller.telemetry import read_log

    api = _run_api()
    run = api.build_run(spec, out_dir=out)
    bus = run.driver.transports[0].bus          # the driver's end of the emulated channel
    replies = []
    recv = bus.recv

    def recording_recv(timeout=None):
        m = recv(timeout)
        if m is not None:
            replies.append((m.arbitration_id, bytes(m.data)))
        return m

    bus.recv = recording_recv
    recv_fields = getattr(bus, "recv_fields", None)
    if recv_fields is not None:
        # the transport reads an inline channel's frames as fields (drivers.sim.emulators.InlineBus)

        def recording_recv_fields(timeout=None):
            f = recv_fields(timeout)
            if f is not None:
                replies.append((f[0], bytes(f[1])))
            return f

        bus.recv_fields = recording_recv_fields
    res = run.execute()
    return res, read_log(out), replies


def _replayed_run(spec, replies, out: Path):
    """The run's loop with the real MIT driver on the replaying bus (no emulator, no plant)."""
    from controller.clock import LockstepClock
    from controller.loop import ControlLoop
    from controller.telemetry import TelemetryWriter, read_log
    from drivers.registry import build_driver
    from drivers.transport import CanTransport
    from dynamics.config import Section

    api = _run_api()
    table = dict(spec.driver_section.data)
    table["type"] = "mit_can"                   # the hardware driver type, same joints
    for key in ("plant", "emulator", "faults", "bus", "buses"):
        table.pop(key, None)
    table["reply_timeout_s"] = api.LOCKSTEP_REPLY_TIMEOUT_S   # as the lock-step run sets it
    clock = LockstepClock()
    driver = build_driver(Section(table, spec.file, "driver"), now=clock.now,
                          transports={"default": CanTransport.from_bus(_replay_bus(replies), name="default")})
    X0 = np.asarray(spec.trajectory.sample(0.0).pos, dtype=float)
    law = api.make_controller(spec, pose0=X0)
    tel = TelemetryWriter(out, spec.model.dof, 3, buffer_rows=spec.telemetry_buffer_rows)
    loop = ControlLoop(driver, law, spec.trajectory, api.make_safety(spec, pose0=X0), clock,
                       period_s=spec.period_s, telemetry=tel, duration_s=spec.duration_s, handle_signals=False)
    try:
        res = loop.run()
    finally:
        driver.close()
    return res, read_log(out)


def _direct_run(duration_s, out: Path):
    api = _run_api()
    run = api.build_run(api.load_run(DIRECT_RUN, duration_s=duration_s), out_dir=out)
    run.loop.compiled = False                  # every cycle in the Python loop
    return run.execute()


def _check_same(log_a, log_b):
    for name in log_a.dtype.names:
        if name in ("compute_s", "lateness_s"):
            continue
        if not np.array_equal(log_a[name], log_b[name], equal_nan=log_a[name].dtype.kind == "f"):
            raise RuntimeError(f"replayed run differs from the emulated run in column {name!r}")


def _bus_rows(repeat: int):
    import can

    from benchmarks._timing import time_call

    a = can.Bus(interface="virtual", channel="bench-cycle", receive_own_messages=False)
    b = can.Bus(interface="virtual", channel="bench-cycle", receive_own_messages=False)
    out = [can.Message(arbitration_id=i + 1, data=bytes(8), is_extended_id=False) for i in range(3)]
    back = [can.Message(arbitration_id=0, data=bytes([i + 1, 0, 0, 0, 0, 0]), is_extended_id=False)
            for i in range(3)]

    def exchange():
        for m in out:
            a.send(m)
        for _ in range(3):
            b.recv(0.0)
        for m in back:
            b.send(m)
        for _ in range(3):
            a.recv(0.0)

    try:
        return time_call(exchange, repeat=repeat, number=500)
    finally:
        a.shutdown()
        b.shutdown()


def run(quick: bool = False) -> list[dict]:
    api = _run_api()
    duration = 2.0 if quick else 6.0
    repeat = 2 if quick else 5
    spec = api.load_run(MIT_RUN, duration_s=duration)
    cyc = {"replay": [], "emulated": [], "direct": []}
    rtf = {"replay": [], "emulated": [], "direct": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        _record_replies(spec, tmp / "warm-emulated")          # numba caches, imports
        for r in range(repeat + 1):
            res_e, log_e, replies = _record_replies(spec, tmp / f"emulated-{r}")
            res_r, log_r = _replayed_run(spec, replies, tmp / f"replay-{r}")
            res_d = _direct_run(duration, tmp / f"direct-{r}")
            _check_same(log_e, log_r)
            if r == 0:
                continue                                     # warm-up round
            for key, res in (("emulated", res_e), ("replay", res_r), ("direct", res_d)):
                if res.status != "completed":
                    raise RuntimeError(f"benchmark run {key} ended with {res.status}: {res.faults[:1]}")
                cyc[key].append(np.asarray(res.timing.cycle["p50"]))
                rtf[key].append(res.n_cycles * spec.period_s / res.wall_time_s)
                cyc.setdefault(key + "_p99", []).append(res.timing.cycle["p99"])
    med = {k: float(np.median(v)) * 1e6 for k, v in cyc.items()}
    fac = {k: float(np.median(v)) for k, v in rtf.items()}
    n = res_r.n_cycles
    bus_med, bus_p99 = _bus_rows(10 if quick else 50)
    return [
        {"case": "3 MIT motors, replayed replies (no emulator)", "median_us": med["replay"],
         "p99_us": med["replay_p99"], "ref": "same cycle, in-process plant (sim_direct, Python loop)",
         "ref_median_us": med["direct"], "ratio": med["replay"] / med["direct"],
         "note": f"3rrr_circle.toml, {n} cycles x {repeat} runs (median of the runs' p50/p99): trajectory + "
                 f"velocity + TaskComputedTorque + SafetySupervisor.check + MitCanDriver.cycle (encode, send 3, "
                 f"recv + decode 3, follow check) + TelemetryWriter.record; replies recorded from the emulated "
                 f"run and replayed by a minimal can.BusABC (log equal to the emulated run's); target <= 50 us; "
                 f"whole run {fac['replay']:.1f}x real time"},
        {"case": "3 MIT motors, emulated (inline, shipped run)", "median_us": med["emulated"],
         "p99_us": med["emulated_p99"], "ref": "replayed replies (no emulator)", "ref_median_us": med["replay"],
         "ratio": med["emulated"] / med["replay"], "rtf": fac["emulated"],
         "note": f"same cycle with the MIT emulator and the plant served inline on an InlineBus; whole run "
                 f"{fac['emulated']:.2f}x real time (wall time of the cycle loop; target >= 15x); "
                 f"sim_direct {fac['direct']:.1f}x"},
        {"case": "python-can virtual bus, 3 frames out + 3 in", "median_us": bus_med, "p99_us": bus_p99,
         "ref": "replayed replies (no emulator)", "ref_median_us": med["replay"], "ratio": bus_med / med["replay"],
         "note": "can.Bus(interface='virtual') pair: send 3, recv 3, send 3 back, recv 3 (no codec, no driver)"},
    ]


if __name__ == "__main__":  # pragma: no cover - manual use: python -m benchmarks.bench_cycle [--quick] [--json FILE]
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main

    sys.exit(main(["--only", "bench_cycle", *sys.argv[1:]]))
