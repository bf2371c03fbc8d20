"""Config mutations for the property-based test and the probe (issue 12, "Low").

Every leaf of a shipped run config (and of the robot file it names) is a field a user
can get wrong.  :func:`mutate` replaces one leaf by a hostile value (huge, tiny, zero,
negative, non-finite, wrong type, wrong length, missing) and :func:`classify` runs the
same validation as ``torqueloop check`` on the result:

* ``"clean"``: a :class:`ConfigError` naming the file and the field;
* ``"accepted"``: the config is valid and the mutated value is not dangerous;
* ``"dangerous"``: the config is valid although the mutation put a field that guards
  something (:data:`GUARDS`) far on its unsafe side (:func:`dangerous`), or ``check``
  passed a hardware driver table that ``run`` refuses when it builds the driver
  (:func:`run_refuses`);
* ``"unnamed"``: a ConfigError without file or field;
* ``"traceback"``: any other exception (what the CLI would show as a traceback);
* ``"hang"``: no answer within :data:`HANG_S` (:func:`probe` runs each check in a worker
  process it can kill).

"Dangerous" is judged here, apart from the validation under test: against the value the
shipped file holds (or the field's documented default), not against the validator's ranges.

``python -m tests.config_mutations N [SEED]`` runs N seeded random mutations and prints the
counts (the figures of issue 37: ``python -m tests.config_mutations 2500``).
"""

from __future__ import annotations

import math
import sys
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

ROOT = Path(__file__).resolve().parents[1]
RUN_CONFIGS = sorted((ROOT / "hil_configs" / "runs").glob("*.toml"))
HARDWARE_CONFIGS = sorted((ROOT / "hil_configs" / "hardware").glob("*.toml"))

#: seconds a check may take before it counts as a hang
HANG_S = 60.0

#: fields that guard something (the last key of the mutated path) and their unsafe side:
#: ``"high"``: unsafe when much larger than the shipped value (a limit, a timeout, a
#: tolerance), ``"low"``: when much smaller, zero or negative (a gain of a stop reaction, a
#: margin), ``"both"``: either (a conversion factor, a watchdog where 0 means off)
GUARDS: dict[str, str] = {
    # [safety]
    "torque_max": "high", "velocity_max": "high", "position_max": "high", "position_min": "low",
    "tracking_error_max": "high", "startup_tolerance": "high", "stale_cycles": "high",
    "stale_fraction_max": "high", "stale_window_cycles": "high", "overrun_fraction_max": "high",
    "overrun_window_cycles": "high", "lateness_max_s": "high", "singularity_margin_min": "low",
    "singularity_every": "high", "brake_kd_nm_s_per_rad": "low", "soft_kd_nm_s_per_rad": "low",
    "hold_kp_nm_per_rad": "low", "hold_kd_nm_s_per_rad": "low", "stop_velocity_rad_s": "high",
    "position_margin_rad": "low",
    # drivers
    "tol_nm": "high", "tol_frac": "high", "cycles": "high", "reply_timeout_s": "high",
    "enable_timeout_s": "high", "temperature_max_c": "high", "heartbeat_period_s": "high",
    "encoder_period_s": "high", "bus_watchdog_ms": "both", "watchdog_s": "both", "watchdog_timeout_s": "both",
    "torque_constant_nm_per_a": "both", "gear_ratio": "both", "efficiency": "low",
    "t_max": "high", "v_max": "high", "i_max": "high", "current_max_a": "high", "max_torque_permille": "high",
    # robot files
    "force_max": "high", "length_max": "high", "length_min": "low", "singular_condition": "high",
    "singularity_tolerance": "low",
}

#: how far beyond the shipped value a guard is "far on its unsafe side" (a factor)
FAR = 1e3

#: hostile replacement values
VALUES: list[Any] = [1e300, -1e300, 1e-300, 0, 0.0, -1, -1.0, 1e9, 0.001, math.inf, -math.inf, math.nan,
                     "x", "", True, [], [1.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], {"a": 1}, "__delete__"]


def leaves(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Paths (tuples of keys / list indices) of every scalar or list-of-scalars leaf."""
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            out += leaves(v, prefix + (k,))
    elif isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        for i, v in enumerate(data):
            out += leaves(v, prefix + (i,))
    else:
        out.append(prefix)
    return out


def _set(data, path, value):
    d = data
    for k in path[:-1]:
        d = d[k]
    if value == "__delete__":
        del d[path[-1]]
    else:
        d[path[-1]] = value


def _clean_for_toml(x):
    if isinstance(x, dict):
        return {k: _clean_for_toml(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean_for_toml(v) for v in x]
    return x


def _get(data, path):
    d = data
    for k in path:
        d = d[k]
    return d


def mutate(config: Path, tmp: Path, leaf_index: int, value_index: int, *, robot: bool = False,
           info: dict | None = None) -> Path:
    """Write a mutated copy of ``config`` (or of its robot file, ``robot=True``) into ``tmp``; return the run
    config path to check.  ``info`` (a dict, optional) receives the mutated ``path``, the shipped value
    ``old`` and the new ``value``."""
    data = tomllib.loads(config.read_text())
    robot_path = (config.parent / data["robot"]["file"]).resolve()
    if robot:
        rdata = tomllib.loads(robot_path.read_text())
        paths = leaves(rdata)
        path = paths[leaf_index % len(paths)]
        old = _get(rdata, path)
        _set(rdata, path, VALUES[value_index % len(VALUES)])
        rfile = tmp / "robot.toml"
        rfile.write_bytes(tomli_w.dumps(_clean_for_toml(rdata)).encode())
        data["robot"]["file"] = str(rfile)
    else:
        data["robot"]["file"] = str(robot_path)
        plant = data.get("driver", {}).get("plant", {})
        if isinstance(plant.get("robot"), str):
            plant["robot"] = str((config.parent / plant["robot"]).resolve())
        paths = leaves(data)
        path = paths[leaf_index % len(paths)]
        if path[:2] == ("robot", "file"):
            path = ("name",)
        old = _get(data, path)
        _set(data, path, VALUES[value_index % len(VALUES)])
    out = tmp / config.name
    out.write_bytes(tomli_w.dumps(_clean_for_toml(data)).encode())
    if info is not None:
        info.update(path=path, old=old, value=VALUES[value_index % len(VALUES)], robot=robot)
    return out


def _numbers(v) -> list[float] | None:
    """The numbers of a scalar or a list of numbers (None for anything else)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return [float(v)]
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return [float(x) for x in v]
    return None


def dangerous(path: tuple, old, new) -> bool:
    """Whether replacing ``old`` by ``new`` at ``path`` puts a guard (:data:`GUARDS`) far on its unsafe
    side: beyond :data:`FAR` times the shipped value, non-finite, or zero or negative where the
    shipped value is positive (for ``"low"`` and ``"both"`` guards)."""
    side = GUARDS.get(str(path[-1]) if path else "")
    o, v = _numbers(old), _numbers(new)
    if side is None or o is None or v is None:
        return False
    ref = max(abs(x) for x in o)
    if ref == 0.0:
        return False
    for x in v:
        if math.isnan(x):
            return True
        if side in ("high", "both") and (math.isinf(x) or abs(x) > FAR * ref):
            return True
        if side in ("low", "both") and min(o) > 0 and (x <= 0.0 or x < min(o) / FAR):
            return True
    return False


def run_refuses(path: Path) -> str | None:
    """What ``run`` does with a hardware config's driver table before it enables anything,
    without hardware: the driver built on a private virtual CAN bus (or a ``loop://`` serial
    port) and closed again.  Returns the refusal's text, or None when it builds (and for
    simulated drivers)."""
    import uuid

    from controller.app.run import load_run
    from drivers.registry import build_driver
    from drivers.serial_port import SerialTransport
    from drivers.transport import CanTransport

    spec = load_run(path)
    if not spec.hardware:
        return None
    sec = spec.driver_section
    kind = sec.data.get("type")
    if kind in ("odrive_ascii", "dynamixel"):
        transports = {"port": SerialTransport("loop://")}
    else:
        names = list(sec.data.get("buses", {}) or {}) or ["default"]
        transports = {n: CanTransport("virtual", f"probe-{uuid.uuid4().hex}", name=n) for n in names}
    from dynamics.config import Section
    fresh = Section(sec.data, sec.file, sec.path)
    try:
        drv = build_driver(fresh, now=lambda: 0.0, transports=transports)
    except Exception as err:  # noqa: BLE001 - what run would report
        for t in transports.values():
            t.close()
        return f"{type(err).__name__}: {err}"
    drv.close()
    return None


def classify(path: Path, info: dict | None = None) -> tuple[str, str]:
    """Run ``torqueloop check``'s validation on ``path``; return (outcome, detail).  With ``info``
    (from :func:`mutate`) an accepted mutation is judged ``"dangerous"`` or not."""
    from controller.app.commands import check
    from dynamics.errors import ConfigError

    try:
        check(str(path))
    except ConfigError as err:
        if err.file and (err.field or "file" in str(err).lower() or err.file.endswith(".urdf")):
            return "clean", str(err)
        return "unnamed", str(err)
    except Exception as err:  # noqa: BLE001 - that is what is being counted
        import traceback
        return "traceback", "".join(traceback.format_exception(err))[-2000:]
    if info is not None and dangerous(info["path"], info["old"], info["value"]):
        return "dangerous", f"{'robot file ' if info['robot'] else ''}{'.'.join(map(str, info['path']))} = {info['value']!r} (shipped {info['old']!r}) accepted"
    try:
        refused = run_refuses(path)
    except Exception as err:  # noqa: BLE001 - the probe itself must not stop
        refused = f"{type(err).__name__}: {err}"
    if refused is not None:
        return "dangerous", f"check passed, run refuses: {refused}"
    return "accepted", ""


def _worker(conn) -> None:  # pragma: no cover - runs in the probe's worker process
    import warnings
    warnings.simplefilter("ignore")
    while True:
        job = conn.recv()
        if job is None:
            return
        cfg, leaf, value, robot = job
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            info: dict = {}
            try:
                p = mutate(Path(cfg), Path(d), leaf, value, robot=robot, info=info)
                outcome, detail = classify(p, info)
            except Exception as err:  # noqa: BLE001 - counted
                outcome, detail = "traceback", f"probe: {type(err).__name__}: {err}"
            conn.send((outcome, detail, ".".join(map(str, info.get("path", ()))), repr(info.get("value"))))


def probe(n: int, seed: int = 0, *, hang_s: float = HANG_S, progress: bool = False) -> dict:
    """``n`` seeded random mutations of the shipped run and hardware configs (a quarter of them of
    the robot file), each classified in a worker process (killed and replaced after ``hang_s``
    [s]: a hang; ``progress``: the counts so far on stderr every 100).  Returns the counts per outcome, up to 8 examples of every outcome but
    ``clean`` and ``accepted``, and the fields of the dangerous ones."""
    import multiprocessing as mp

    import numpy as np

    rng = np.random.default_rng(seed)
    counts = {"clean": 0, "accepted": 0, "dangerous": 0, "unnamed": 0, "traceback": 0, "hang": 0}
    examples: dict[str, list] = {"dangerous": [], "unnamed": [], "traceback": [], "hang": []}
    dangerous_fields: dict[str, int] = {}
    configs = RUN_CONFIGS + HARDWARE_CONFIGS
    ctx = mp.get_context("spawn")

    def start():
        a, b = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(b,), daemon=True)
        p.start()
        return p, a

    proc, conn = start()
    try:
        for _ in range(n):
            cfg = configs[int(rng.integers(len(configs)))]
            robot = bool(rng.random() < 0.25)
            job = (str(cfg), int(rng.integers(10_000)), int(rng.integers(len(VALUES))), robot)
            conn.send(job)
            if conn.poll(hang_s):
                outcome, detail, field, value = conn.recv()
            else:
                proc.kill()
                proc.join()
                proc, conn = start()
                outcome, detail, field, value = "hang", f"no answer in {hang_s:g} s", "?", "?"
            counts[outcome] += 1
            if outcome == "dangerous":
                key = detail if detail.startswith("check passed") else field
                dangerous_fields[key[:120]] = dangerous_fields.get(key[:120], 0) + 1
            if outcome in examples and len(examples[outcome]) < 8:
                examples[outcome].append((cfg.name, field, value, detail[-400:]))
            done = sum(counts.values())
            if progress and done % 100 == 0:
                print(f"{done}/{n} {counts}", file=sys.stderr, flush=True)
    finally:
        conn.send(None)
        proc.join(5)
        if proc.is_alive():
            proc.kill()
    return {"n": n, "seed": seed, "counts": counts, "dangerous_fields": dangerous_fields, "examples": examples}


if __name__ == "__main__":  # pragma: no cover - the probe
    import json
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    print(json.dumps(probe(n, seed, progress=True), indent=1))


#: tables whose keys are names the user chooses, not fixed keys (dotted config keys of the sweeps,
#: python-can keyword arguments, bus names): a misspelling there is not a wrong key
FREE_KEY_TABLES = ("params", "uncertainty", "tolerance", "options", "buses")


def table_keys(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Paths of every key of every table (the tables' own names too), free-key tables left out."""
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append(prefix + (k,))
            if k not in FREE_KEY_TABLES:
                out += table_keys(v, prefix + (k,))
    elif isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        for i, v in enumerate(data):
            out += table_keys(v, prefix + (i,))
    return out


def misspell(key: str, edit: int, where: int) -> str:
    """``key`` with one typing slip: a letter dropped (``edit`` 0), two swapped (1) or doubled (2),
    at position ``where`` (modulo the key's length)."""
    i = where % len(key)
    if edit == 0:
        return key[:i] + key[i + 1:]
    if edit == 1:
        i = min(i, len(key) - 2)
        return key[:i] + key[i + 1] + key[i] + key[i + 2:]
    return key[:i] + key[i] + key[i:]


def misspelt_config(config: Path, tmp: Path, key_index: int, edit: int, where: int) -> tuple[Path, str, str]:
    """A copy of ``config`` in ``tmp`` with one key misspelt (:func:`misspell`); returns the path,
    the key and its misspelling (``("", "")`` when that slip leaves the key as it was or gives a
    key of the same table)."""
    data = tomllib.loads(config.read_text())
    data["robot"]["file"] = str((config.parent / data["robot"]["file"]).resolve())
    plant = data.get("driver", {}).get("plant", {})
    for k in ("robot", "mjcf"):         # files named relative to the config
        if isinstance(plant.get(k), str):
            plant[k] = str((config.parent / plant[k]).resolve())
    paths = [p for p in table_keys(data) if p[:2] != ("robot", "file") or len(p) != 2]
    path = paths[key_index % len(paths)]
    parent = _get(data, path[:-1])
    key = path[-1]
    typo = misspell(key, edit, where) if len(key) >= 4 else key
    out = tmp / config.name
    if typo == key or typo in parent:
        out.write_bytes(tomli_w.dumps(_clean_for_toml(data)).encode())
        return out, "", ""
    new = {typo if k == key else k: v for k, v in parent.items()}
    if path[:-1]:
        _set(data, path[:-1], new)
    else:
        data = new
    out.write_bytes(tomli_w.dumps(_clean_for_toml(data)).encode())
    return out, key, typo
