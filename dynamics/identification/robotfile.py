"""Robot files from standard parameters: the identified model in the format ``run`` reads.

:func:`robot_file_data` takes the nominal robot file's table and a standard
parameter vector (:mod:`.regressor` conventions) and returns the same table
with the inertial and drive entries replaced:

* serial (DH) files: per joint ``mass``, ``com`` and ``inertia`` (about the
  centre of mass, link-frame axes, converted from the joint-frame
  parameters), ``point_masses`` removed (they are lumped into the identified
  link), ``rotor_inertia = Ia`` with ``gear_ratio = 1`` (the armature), ``viscous``,
  ``coulomb``;
* mechanism files: per ``[[bodies]]`` table ``mass``, ``com`` and ``inertia``
  (about the centre of mass, body axes; planar files: ``Izz`` alone), and per
  actuated ``[[joints]]`` table ``rotor_inertia = Ia`` with ``gear_ratio = 1``,
  ``viscous``, ``coulomb``;
* 3RRR files: per-leg lists for ``[proximal]`` / ``[distal]`` ``mass``,
  ``com`` and ``inertia``, ``[platform]`` ``mass`` / ``inertia``, and the
  ``[drive]`` table.

Offsets have no place in a robot file and are dropped.  The result loads with
:func:`dynamics.load_model` (checked by :func:`write_robot_file`).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from ..base import Model
from ..errors import ConfigError
from .regressor import ParameterSet

__all__ = ["robot_file_data", "write_robot_file"]


def _serial_links(model: Model, pset: ParameterSet, pi: np.ndarray):
    q0 = np.zeros(model.dof)
    Jw = model.joint_poses(q0)
    Lw = model.link_poses(q0)
    out = []
    for j in range(model.dof):
        m, c, Ic = _com_inertia(pi[pset.body_slice(j)])
        S = np.linalg.inv(Jw[j]) @ Lw[j + 1]            # link frame in the joint frame
        R, t = S[:3, :3], S[:3, 3]
        cL = R.T @ (c - t)
        IL = R.T @ Ic @ R
        IL = 0.5 * (IL + IL.T)
        out.append((m, cL, IL))
    return out


def _com_inertia(p: np.ndarray):
    """(mass [kg], centre of mass (3,) [m], inertia about it (3, 3) [kg m^2]) of ten standard
    parameters (frame origin, :data:`~.regressor.INERTIAL_NAMES` order)."""
    m, h = float(p[0]), p[1:4]
    Io = np.array([[p[4], p[5], p[7]], [p[5], p[6], p[8]], [p[7], p[8], p[9]]])
    c = h / m if m > 0 else np.zeros(3)
    return m, c, Io - m * (c @ c * np.eye(3) - np.outer(c, c))


def _mechanism_data(data: dict, model: Model, pset: ParameterSet, pi: np.ndarray, drive: np.ndarray) -> dict:
    planar = bool(data.get("planar", False))
    by_name = {b["name"]: b for b in data["bodies"]}
    for k, name in enumerate(pset.bodies):
        m, c, Ic = _com_inertia(pi[pset.body_slice(k)])
        b = by_name[name]
        if m <= 1e-9 * max(1.0, float(np.max(pi[:pset.n_inertial:10]))):
            # no mass seen (a massless connector stays one)
            b.update(mass=0.0, com=[0.0, 0.0, 0.0], inertia=0.0 if planar else [0.0] * 6)
            continue
        Ic = 0.5 * (Ic + Ic.T)
        b["mass"] = m
        b["com"] = [float(v) for v in c]
        b["inertia"] = (float(max(Ic[2, 2], 0.0)) if planar else
                        [float(Ic[0, 0]), float(Ic[1, 1]), float(Ic[2, 2]), float(Ic[0, 1]), float(Ic[1, 2]),
                         float(Ic[2, 0])])
    act = {nm: j for j, nm in enumerate(model.joint_names)}
    for js in data["joints"]:
        j = act.get(js.get("name"))
        if j is None or not js.get("actuated", False):
            continue
        js["rotor_inertia"] = float(drive[j, 0])
        js["gear_ratio"] = 1.0
        js["viscous"] = float(drive[j, 1])
        js["coulomb"] = float(drive[j, 2])
    return data


def robot_file_data(model: Model, pset: ParameterSet, pi, nominal: dict, *, comment: str = "") -> dict:
    """The nominal robot-file dict with the parameters ``pi`` written in (module docstring)."""
    pi = np.asarray(pi, dtype=float)
    data = copy.deepcopy(nominal)
    drive = pi[pset.n_inertial:].reshape(pset.dof, pset.drive_size)
    if comment and pset.kind == "serial":     # the 3RRR and mechanism formats have no description field
        data["description"] = comment
    if pset.kind == "mechanism":
        return _mechanism_data(data, model, pset, pi, drive)
    if pset.kind == "serial":
        if "joints" not in data:
            raise ConfigError("identified serial parameters need a DH robot file (URDF output is not supported)",
                              model.source, "joints")
        for j, (m, c, I) in enumerate(_serial_links(model, pset, pi)):
            js = data["joints"][j]
            js.pop("point_masses", None)
            js["mass"] = float(max(m, 0.0))
            js["com"] = [float(v) for v in c]
            js["inertia"] = [float(I[0, 0]), float(I[1, 1]), float(I[2, 2]), float(I[0, 1]),
                             float(I[0, 2]), float(I[1, 2])]
            js["rotor_inertia"] = float(drive[j, 0])
            js["gear_ratio"] = 1.0
            js["viscous"] = float(drive[j, 1])
            js["coulomb"] = float(drive[j, 2])
        return data
    prox = {"mass": [], "com": [], "inertia": []}
    dist = {"mass": [], "com": [], "inertia": []}
    for i in range(3):
        for tab, body in ((prox, 2 * i), (dist, 2 * i + 1)):
            ZZ, MX, M = pi[pset.body_slice(body)]
            r = MX / M if M > 0 else 0.0
            tab["mass"].append(float(M))
            tab["com"].append(float(r))
            tab["inertia"].append(float(max(ZZ - M * r * r, 0.0)))
    for key, tab in (("proximal", prox), ("distal", dist)):
        data[key] = dict(data.get(key, {}))
        data[key].update(tab)
    ZZp, Mp = pi[pset.body_slice(6)]
    data["platform"] = {"mass": float(Mp), "inertia": float(ZZp)}
    data["drive"] = {"rotor_inertia": [float(v) for v in drive[:, 0]], "gear_ratio": 1.0,
                     "viscous": [float(v) for v in drive[:, 1]], "coulomb": [float(v) for v in drive[:, 2]]}
    return data


def write_robot_file(path, model: Model, pset: ParameterSet, pi, nominal: dict, *, comment: str = "",
                     header: str = "") -> Model:
    """Write :func:`robot_file_data` as TOML to ``path`` and return the model loaded back from it.

    Raises
    ------
    ConfigError
        If the written file does not load (naming the file).
    """
    import tomli_w

    from .. import load_model

    data = robot_file_data(model, pset, pi, nominal, comment=comment)
    path = Path(path)
    text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()) + tomli_w.dumps(data)
    path.write_text(text)
    return load_model(path)
