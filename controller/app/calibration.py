"""The ``[bringup]`` table and the calibration file that ``torqueloop bringup`` writes
(:mod:`controller.app.bringup`) and ``run`` applies: where it is, what it depends on (a digest of the hardware-relevant config), the
check that refuses a missing, stale or unfinished one for a hardware run, and the driver wrapper
that applies its offset corrections."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from drivers.base import Command, Driver, Feedback
from dynamics.config import Section, read_toml
from dynamics.errors import ConfigError, SafetyError, TorqueloopError

__all__ = ["BringupSpec", "CAP_FRACTION_DEFAULT", "CAP_FRACTION_MAX", "Calibration", "CalibratedDriver", "calibration_path", "check_calibration", "hardware_digest",
           "hardware_tables", "SIM_ONLY_TABLES", "CALIBRATION_VERSION", "HOLD_FRACTION_MAX", "reference_pose_refusal"]

#: sub-tables of ``[driver]`` that only the simulation reads (not part of the hardware digest)
SIM_ONLY_TABLES = ("plant", "emulator", "faults")
#: calibration file format
CALIBRATION_VERSION = 1


#: default torque cap as a fraction of the effective torque limit
CAP_FRACTION_DEFAULT = 0.05
#: the largest torque cap accepted, as a fraction of the effective torque limit
CAP_FRACTION_MAX = 0.2
#: the largest gravity torque at the reference pose, as a fraction of the bring-up cap (the rest
#: moves the joint): a pose needing more is refused before anything is enabled
HOLD_FRACTION_MAX = 0.5


@dataclass
class BringupSpec:
    """The ``[bringup]`` table of a run config (see :mod:`controller.app.bringup`); arrays shape (n,)."""

    torque_cap_nm: np.ndarray
    home_rad: np.ndarray
    pulse_rad: float = 0.05
    pulse_max_s: float = 1.0
    velocity_max_rad_s: float = 2.0
    travel_max_rad: float = 0.5
    zero_tolerance_rad: float = 0.01
    torque_factor_tolerance: float = 0.3
    motion_rad: float = 0.002
    ramp_s: float = 2.0
    calibration_file: Path | None = None

    @staticmethod
    def from_spec(spec, q0) -> "BringupSpec":
        """Read ``spec.data["bringup"]`` (absent: every default) for a parsed run spec whose
        trajectory starts at joint position ``q0`` (n,) (the default ``home_rad``).

        Raises
        ------
        ConfigError
            A bad value, naming the file and ``bringup.<key>``; a torque cap above
            :data:`CAP_FRACTION_MAX` of the effective limit, or a limit that is not finite.
        """
        from .report import effective_torque_limit

        n = spec.model.dof
        sec = Section(spec.data.get("bringup", {}), spec.file, "bringup")
        limit = effective_torque_limit(spec)
        if not np.all(np.isfinite(limit)) or np.any(limit <= 0):
            raise sec.error("torque_cap_nm", f"the bring-up cap is a fraction of the torque limit, and the "
                                             f"limit is not finite and positive on every joint: {limit.tolist()} "
                                             f"(set safety.torque_max)")
        if sec.has("torque_cap_nm"):
            raw = sec.raw("torque_cap_nm")
            cap = (sec.vector("torque_cap_nm", n, minimum=0.0) if isinstance(raw, list)
                   else np.full(n, sec.float("torque_cap_nm", minimum=0.0, strict_min=True)))
            if np.any(cap <= 0):
                raise sec.error("torque_cap_nm", f"must be > 0 on every joint, got {cap.tolist()}")
            over = np.flatnonzero(cap > CAP_FRACTION_MAX * limit)
            if over.size:
                j = int(over[0])
                raise sec.error("torque_cap_nm", f"{cap[j]:g} on joint {j} is over {CAP_FRACTION_MAX:.0%} of its "
                                                 f"torque limit {limit[j]:g}: a bring-up runs under a low cap "
                                                 f"(at most {CAP_FRACTION_MAX * limit[j]:g})")
        else:
            cap = CAP_FRACTION_DEFAULT * limit
        home = sec.vector("home_rad", n) if sec.has("home_rad") else np.asarray(q0, dtype=float)
        out = BringupSpec(
            torque_cap_nm=np.asarray(cap, dtype=float), home_rad=np.asarray(home, dtype=float),
            pulse_rad=sec.float("pulse_rad", 0.05, minimum=1e-4, maximum=1.0),
            pulse_max_s=sec.float("pulse_max_s", 1.0, minimum=0.005, maximum=10.0),
            velocity_max_rad_s=sec.float("velocity_max_rad_s", 2.0, minimum=0.0, strict_min=True, maximum=50.0),
            travel_max_rad=sec.float("travel_max_rad", 0.5, minimum=0.0, strict_min=True, maximum=10.0),
            zero_tolerance_rad=sec.float("zero_tolerance_rad", 0.01, minimum=0.0, strict_min=True, maximum=1.0),
            torque_factor_tolerance=sec.float("torque_factor_tolerance", 0.3, minimum=0.01, maximum=0.9),
            motion_rad=sec.float("motion_rad", 0.002, minimum=1e-6, maximum=0.5),
            ramp_s=sec.float("ramp_s", 2.0, minimum=0.01, maximum=60.0),
        )
        if out.pulse_rad * 4 > out.travel_max_rad:
            raise sec.error("pulse_rad", f"a doublet of {out.pulse_rad:g} needs travel_max_rad >= "
                                         f"{4 * out.pulse_rad:g} (it is {out.travel_max_rad:g})")
        out.calibration_file = calibration_path(spec, sec)
        sec.finish()
        return out


# ---------------------------------------------------------------------------
# the bring-up itself
# ---------------------------------------------------------------------------
def calibration_path(spec, sec: Section | None = None) -> Path:
    """The calibration file of a run spec: ``bringup.calibration_file`` (relative to the config's
    folder), else ``<config stem>.calibration.toml`` beside the config."""
    if sec is None:
        sec = Section(spec.data.get("bringup", {}), spec.file, "bringup")
    base = Path(spec.file).parent if spec.file else Path.cwd()
    if sec.has("calibration_file"):
        p = Path(sec.str("calibration_file"))
        return p if p.is_absolute() else base / p
    stem = Path(spec.file).stem if spec.file else spec.name
    return base / f"{stem}.calibration.toml"


def hardware_tables(spec) -> dict:
    """What the calibration depends on: ``{"driver": the [driver] table without the simulation's
    tables, "robot_file_sha256": the robot file's digest}`` (plain JSON values)."""
    drv = {k: v for k, v in dict(spec.driver_section.data).items() if k not in SIM_ONLY_TABLES}
    src = getattr(spec.model, "source", None)
    try:
        robot = hashlib.sha256(Path(src).read_bytes()).hexdigest() if src else None
    except OSError:
        robot = None
    return json.loads(json.dumps({"driver": drv, "robot_file_sha256": robot}, sort_keys=True, default=str))


def hardware_digest(tables: Mapping[str, Any]) -> str:
    """SHA-256 of :func:`hardware_tables` (canonical JSON)."""
    return hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()


def _diff(old, new, path="") -> list[str]:
    """The dotted keys whose values differ between two JSON trees."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            p = f"{path}.{k}" if path else str(k)
            if k not in old:
                out.append(f"{p} added")
            elif k not in new:
                out.append(f"{p} removed")
            else:
                out += _diff(old[k], new[k], p)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new)):
            out += _diff(a, b, f"{path}[{i}]")
        return out
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]


@dataclass
class Calibration:
    """A calibration file read back (see :func:`check_calibration`)."""

    path: Path
    created_utc: str
    offset_correction_rad: np.ndarray
    data: dict


def check_calibration(spec, *, required: bool | None = None) -> Calibration | None:
    """The run's calibration when it is present, fresh and without open findings.

    Parameters
    ----------
    spec : RunSpec
    required : bool, optional
        Refuse a missing one (default: for hardware runs).  A stale one, or one with open
        findings, is refused whenever ``required``; otherwise it is ignored (``None``).

    Raises
    ------
    ConfigError
        Naming the calibration file: missing (run ``torqueloop bringup``), stale (the keys
        that changed since), unreadable, for another robot size, or with open findings.
    """
    required = spec.hardware if required is None else required
    path = calibration_path(spec)
    what = f"calibration {path}"
    if not path.exists():
        if required:
            raise ConfigError(f"no calibration for this hardware run: run `torqueloop bringup {spec.file}` "
                              f"first (it writes {path})", str(path), "calibration")
        return None
    try:
        data = read_toml(path)
        cal = data["calibration"]
        digest, created = str(cal["hardware_digest"]), str(cal["created_utc"])
        old = json.loads(cal["hardware_json"])
        corr = np.asarray([float(j["offset_correction_rad"]) for j in data["joints"]], dtype=float)
    except (KeyError, TypeError, ValueError, TorqueloopError) as err:
        raise ConfigError(f"{what} is not a calibration file of this version ({type(err).__name__}: {err}); "
                          f"run `torqueloop bringup` again", str(path), "calibration") from err
    now = hardware_tables(spec)
    if digest != hardware_digest(now) or corr.shape != (spec.model.dof,):
        if not required:
            return None
        changed = _diff(old, now) or ["(digest differs)"]
        raise ConfigError(f"{what} (written {created}) is stale: the hardware config changed since: "
                          f"{'; '.join(changed[:6])}{' ...' if len(changed) > 6 else ''}; run `torqueloop "
                          f"bringup` again", str(path), "calibration")
    open_ = [f for f in data.get("findings", []) if f.get("blocking", True)]
    if open_:
        if not required:
            return None
        raise ConfigError(f"{what} (written {created}) has open findings: " + "; ".join(
            f"{f.get('joint_name', f.get('joint'))}: {f.get('check')}: fix {f.get('fix')}" for f in open_)
            + "; fix them and run `torqueloop bringup` again", str(path), "calibration")
    return Calibration(path, created, corr, data)


class CalibratedDriver(Driver):
    """A driver whose joint positions carry the calibration's offset corrections.

    ``position = inner position + offset_correction_rad`` in the feedback, and
    ``position set-point - offset_correction_rad`` in the commands (drive-side PD); torques
    and velocities pass unchanged.  At :meth:`enable` a position outside the robot's limits
    (``q_min``/``q_max``, after the correction) is refused as a lost zero (a power cycle that
    reset a drive's zero), naming the calibration file.

    Parameters
    ----------
    inner : Driver
    offset_correction_rad : array_like, shape (n,)
    q_min, q_max : array_like, shape (n,)
        The robot's position limits [rad | m] (``-inf``/``inf`` where there are none).
    source : str
        The calibration file (named in errors).
    """

    def __init__(self, inner: Driver, offset_correction_rad, q_min, q_max, source: str):
        self.inner = inner
        n = inner.n_joints
        self.offset_correction_rad = np.broadcast_to(np.asarray(offset_correction_rad, dtype=float), (n,)).copy()
        self.q_min = np.broadcast_to(np.asarray(q_min, dtype=float), (n,))
        self.q_max = np.broadcast_to(np.asarray(q_max, dtype=float), (n,))
        self.source = source

    @property
    def n_joints(self) -> int:
        return self.inner.n_joints

    def _fb(self, fb: Feedback) -> Feedback:
        fb.position_rad = np.asarray(fb.position_rad, dtype=float) + self.offset_correction_rad
        return fb

    def enable(self) -> Feedback:
        fb = self._fb(self.inner.enable())
        q = fb.position_rad
        out = np.flatnonzero(np.isfinite(q) & ((q < self.q_min) | (q > self.q_max)))
        if out.size:
            self.inner.disable()
            raise SafetyError(f"zero lost? joint(s) {out.tolist()} read {q[out].tolist()} at enable, outside the "
                              f"robot's limits with the calibration {self.source}: a drive lost its zero (a "
                              f"power cycle) or the robot was moved; run `torqueloop bringup` again")
        return fb

    def disable(self) -> None:
        self.inner.disable()

    def clear_faults(self) -> None:
        self.inner.clear_faults()

    def cycle(self, command: Command) -> Feedback:
        if command.position_rad is not None:
            command = Command(command.torque_nm, np.asarray(command.position_rad, dtype=float)
                              - self.offset_correction_rad, command.velocity_rad_s,
                              command.kp_nm_per_rad, command.kd_nm_s_per_rad)
        return self._fb(self.inner.cycle(command))

    def close(self) -> None:
        self.inner.close()

    @property
    def watchdog_s(self) -> float | None:
        """The inner driver's :attr:`~drivers.base.Driver.watchdog_s` (the drives' command
        timeout, which the loop's overrun rule compares a late cycle with): the base class's
        ``None`` would otherwise hide it, and a calibrated run would lose that check."""
        return self.inner.watchdog_s

    @watchdog_s.setter
    def watchdog_s(self, value) -> None:
        self.inner.watchdog_s = value

    def __getattr__(self, name):
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _ceil3(x: float) -> float:
    """``x`` > 0 rounded up to three significant digits (a cap asked for must pass the check it
    is asked for: 121.4 is printed 122, not 121)."""
    e = math.floor(math.log10(x)) - 2
    return math.ceil(round(x / 10.0 ** e, 9)) * 10.0 ** e if e < 0 else float(math.ceil(x / 10 ** e) * 10 ** e)


def reference_pose_refusal(spec, bs: BringupSpec) -> ConfigError | None:
    """Why a bring-up of run spec ``spec`` with ``[bringup]`` settings ``bs`` is refused before
    anything is enabled, or None: a joint needing more than :data:`HOLD_FRACTION_MAX` of its cap to
    hold against gravity at the reference pose.  The error names the cap that holds every joint, or
    says that no accepted cap can and what sets the limit.  :func:`controller.app.bringup.bringup`
    raises it; ``torqueloop check`` reports it as a warning."""
    names = [str(x) for x in spec.model.joint_names]
    g_home = np.asarray(spec.model.gravity(bs.home_rad), dtype=float)
    heavy = np.flatnonzero(np.abs(g_home) > HOLD_FRACTION_MAX * bs.torque_cap_nm)
    if not heavy.size:
        return None
    from .report import torque_limit_sources

    limit, source = torque_limit_sources(spec)
    need = np.abs(g_home)
    top = CAP_FRACTION_MAX * np.asarray(limit, dtype=float)
    # the joint named: one that no accepted cap holds (the worst), else the heaviest; the cap
    # asked for holds every joint (a bring-up stopped at the next joint helps nobody)
    short = [int(i) for i in heavy if need[i] > HOLD_FRACTION_MAX * top[i]]
    j = max(short or heavy.tolist(), key=lambda i: need[i] / top[i] if short else need[i])
    others = [f"{names[i]} {need[i]:.3g}" for i in heavy if i != j]
    also = f" (also over half their caps: {', '.join(others)})" if others else ""
    if short:
        # raising the cap cannot help: say so, and what sets the limit the cap is a fraction of
        whence = {"drive": f"what its drive delivers: driver.joints[{j}].current_limit_a x torque constant x "
                           f"gear ratio", "[safety] torque_max": "safety.torque_max"}.get(source[j],
                                                                                          "the robot file's limit")
        how = (f"the largest cap accepted, {top[j]:.3g} ({CAP_FRACTION_MAX:.0%} of its torque limit "
               f"{limit[j]:.3g}, {whence}), holds at most {HOLD_FRACTION_MAX * top[j]:.3g}: choose a reference "
               f"pose with less gravity load (bringup.home_rad), or a higher limit where the hardware allows it")
    else:
        how = (f"raise bringup.torque_cap_nm to at least {_ceil3(max(need[heavy]) / HOLD_FRACTION_MAX):g} (at most "
               f"{min(top[heavy]):.3g}, {CAP_FRACTION_MAX:.0%} of the torque limit), or choose a reference pose "
               f"with less gravity load (bringup.home_rad)")
    return ConfigError(f"{names[j]} needs {need[j]:.3g} to hold against gravity at the reference pose{also}, "
                       f"over {HOLD_FRACTION_MAX:.0%} of its bring-up cap {bs.torque_cap_nm[j]:.3g}: {how}",
                       spec.file, "bringup.torque_cap_nm")
