"""One long fuzz run of the MIT emulator: ``python -m benchmarks.bench_mit_emulator_fuzz [n] [seed]``.

Feeds ``n`` (default 1,000,000) random frames to the MIT emulator through
:func:`drivers.sim.mit_fuzz.fuzz_mit_emulator` (which asserts after every frame that
nothing raised, replies are well formed and only to valid frames, the plant stays finite
and within the torque ranges) and prints the counters and the throughput.  The suite runs
the same check on 20,000 frames (``tests/test_mit_emulator.py``).

``run(quick) -> list[dict]`` follows the protocol of ``benchmarks/run.py`` (20,000 frames
when quick, else 200,000).
"""

from __future__ import annotations

import sys
import time

from drivers.sim.mit_fuzz import fuzz_mit_emulator


def run(quick: bool = True) -> list[dict]:
    n = 20_000 if quick else 200_000
    t0 = time.perf_counter()
    c = fuzz_mit_emulator(n, seed=0)
    dt = time.perf_counter() - t0
    return [{"case": f"mit emulator fuzz, {n} frames", "median_us": dt / n * 1e6, "p99_us": float("nan"),
             "note": f"{c['replies']} replies, {c['commands_applied']} commands applied, no exception"}]


def main(argv: list[str]) -> int:
    n = int(float(argv[0])) if argv else 1_000_000
    seed = int(argv[1]) if len(argv) > 1 else 0
    t0 = time.perf_counter()
    c = fuzz_mit_emulator(n, seed=seed)
    dt = time.perf_counter() - t0
    print(f"MIT emulator fuzz: {c['frames']} frames (seed {seed}), {c['replies']} replies, "
          f"{c['commands_applied']} commands applied, {c['t_end_s']:.1f} s of plant time; "
          f"no exception, no invalid reply, plant finite and within limits; "
          f"{dt:.1f} s wall ({dt / n * 1e6:.1f} us/frame)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
