"""Run every benchmark module and print one table per module.

Usage::

    python benchmarks/run.py [--quick] [--json FILE] [--only NAME ...]

Each ``benchmarks/bench_*.py`` module provides ``run(quick: bool) -> list[dict]``;
rows carry at least ``case`` and ``median_us`` and optionally ``p99_us``, ``ref``,
``ref_median_us``, ``ratio``, ``note`` (plus any extra columns).  ``--json``
writes ``{module: rows}`` with an environment header.  The exit status is 1 if
any module failed (its traceback is printed and recorded in the JSON).
The environment is used as it is (nothing is unset).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

FIRST = ["case", "median_us", "p99_us", "ref", "ref_median_us", "ratio"]


def discover() -> list[str]:
    """Names of the ``bench_*`` modules, sorted."""
    return sorted(p.stem for p in HERE.glob("bench_*.py"))


def _fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        a = abs(v)
        if a == 0:
            return "0"
        if a >= 1e6 or a < 1e-3:
            return f"{v:.3e}"
        if a >= 100:
            return f"{v:.1f}"
        return f"{v:.3f}"
    return str(v)


def format_table(rows: list[dict]) -> str:
    """Plain-text table of benchmark rows (columns: FIRST, extras, note last)."""
    if not rows:
        return "  (no rows)"
    cols = [c for c in FIRST if any(c in r for r in rows)]
    extra = sorted({k for r in rows for k in r} - set(FIRST) - {"note"})
    cols += extra + (["note"] if any("note" in r for r in rows) else [])
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    num = {c for c in cols if c not in ("case", "ref", "note")}
    def line(vals):
        return "  ".join((v.rjust(w) if c in num else v.ljust(w))
                         for v, w, c in zip(vals, widths, cols)).rstrip()
    out = [line(cols), line(["-" * w for w in widths])]
    out += [line(row) for row in cells]
    return "\n".join(out)


def environment() -> dict:
    env = {"python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for mod in ("numpy", "numba", "pinocchio"):
        try:
            env[mod] = importlib.import_module(mod).__version__
        except ImportError:
            env[mod] = None
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "NUMBA_NUM_THREADS"):
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--only", nargs="+", metavar="NAME",
                    help="run only these modules (e.g. bench_serial or serial)")
    args = ap.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    names = discover()
    if args.only:
        want = {w if w.startswith("bench_") else f"bench_{w}" for w in args.only}
        unknown = want - set(names)
        if unknown:
            ap.error(f"no such benchmark module(s): {sorted(unknown)}; have {names}")
        names = [n for n in names if n in want]
    env = environment()
    print("torqueloop benchmarks  " + "  ".join(f"{k}={v}" for k, v in env.items()))
    results: dict[str, object] = {"environment": env, "quick": args.quick, "modules": {}}
    failed = []
    for name in names:
        print(f"\n== {name} ==")
        t0 = time.perf_counter()
        try:
            mod = importlib.import_module(f"benchmarks.{name}")
            rows = mod.run(quick=args.quick)
        except Exception:   # report every module's failure, keep running the others
            tb = traceback.format_exc()
            print(tb, end="")
            results["modules"][name] = {"error": tb}
            failed.append(name)
            continue
        print(format_table(rows))
        print(f"  ({time.perf_counter() - t0:.1f} s)")
        results["modules"][name] = rows
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=float))
        print(f"\nwrote {args.json}")
    if failed:
        print(f"\nFAILED modules: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
