"""MJCF (MuJoCo's XML model format) written from a robot model, for an independent plant.

Each model family writes its bodies, joints and loop closures here (text only: this module
imports nothing of MuJoCo, which reads the text in :mod:`drivers.sim.mujoco_plant`):

* a serial chain (:class:`~dynamics.serial.SerialModel`, from DH rows or a URDF): one body per
  joint, placed by the joint placement ``X_i`` in its parent, the joint about/along its z axis;
  the link's mass, centre of mass and full inertia tensor about it; ``armature`` the reflected
  rotor inertia, ``damping`` the viscous and ``frictionloss`` the Coulomb friction of the robot
  file's ``[drive]``; a joint stop (``range``) where the robot file gives finite position limits;
* the planar 3RRR (:class:`~dynamics.planar3rrr.Planar3RRR`): the three legs as hinge chains in
  the plane (actuated base joint, passive elbow), the platform hinged to the end of leg 1 and
  joined to the ends of legs 2 and 3 by ``connect`` equality constraints (two loop closures);
* the Gough-Stewart platform (:class:`~dynamics.stewart.StewartPlatform`): the platform on a free
  joint, each leg a lower body on a universal joint at the base (first axis the base-fixed
  ``a_i``, as in the model, so the legs do not spin about their axes) and an upper body on the
  prismatic actuator, its end joined to the platform joint by a ``connect`` constraint (a ball
  joint; six loop closures);
* a mechanism file (:class:`~dynamics.mechanism.MechanismModel`): its tree of bodies with their
  hinge and slide joints (a universal joint: two hinges in one body; a passive spherical joint:
  a ``ball`` joint, an actuated one three hinges in one body in its Euler order, each with its
  motor), each loop closure a ``connect`` constraint at its point (planar revolute and
  spatial spherical closures: the point is all they constrain).  A spatial revolute closure (the
  point and the axis alignment, 5 equations) is two ``connect`` constraints: ``closureK`` at
  ``point_a`` and ``closureK_axis`` at ``point_a + length_scale * axis_a`` (body_a's frame); two
  points of the common axis held together leave exactly the rotation about it.  MuJoCo has no
  hinge-like equality (a ``weld`` holds all three rotations; its ``torquescale`` only weighs
  them against the translation), so the pair is the standard construction.  Its 6 rows hold 5
  independent equations (the two points' distance along the axis is fixed by the rigid bodies):
  MuJoCo's soft constraints are a regularised convex problem whose solution stays unique with a
  redundant row.  Both take the closures' ``solref``/``solimp``; the angular stiffness hardly
  depends on the spacing ``d`` (a misalignment ``e`` [rad] is a gap ``d e`` [m], and MuJoCo's
  reference acceleration is linear in the gap; only ``solimp``'s 1 mm width is in metres).
  ``d = length_scale`` (the mechanism's size) makes the plant's closure error, the largest gap
  of a ``connect``'s two points [m], the gap at the far end of a pin as long as the mechanism.

Closed chains are written in an assembled pose (the configuration at the given actuated
positions, from the model's forward kinematics), which is the MJCF's reference configuration
``qpos0``: a ``connect`` constraint joins the two points that coincide there.  The actuated joints
are named as in the model and each has a ``motor`` (joint-side torque, gear 1); the plant
replaces the motors by its drives.  Angles are written in radians (``<compiler angle="radian">``).

Loop-closure softness (``solref``, ``solimp`` of the equality constraints): see
:data:`CLOSURE_SOLREF` and :data:`CLOSURE_SOLIMP`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from xml.sax.saxutils import quoteattr

import numpy as np

from ._mechanism_derive import COORDINATES
from .errors import ModelError

__all__ = ["MjcfRobot", "CLOSURE_SOLREF", "CLOSURE_SOLIMP", "model_mjcf", "quat_wxyz"]

#: ``solref`` of the loop closures: time constant [s] and damping ratio.  MuJoCo raises a time
#: constant below twice the timestep to twice the timestep (its ``refsafe`` rule), so 0.001 s is
#: the stiffest closure at the default 0.5 ms step (1 kHz, two substeps).  Measured on
#: ``3rrr_circle_direct.toml`` (8 s, README): closure error RMS 0.003 um, max 0.007 um with these
#: values; 13 um / 19 um with MuJoCo's defaults (0.02 s, solimp 0.9/0.95); 0.13 um / 0.27 um with
#: 0.002 s and 0.9/0.95; 1.2 um / 1.8 um with 0.02 s and 0.99/0.9999 (tracking unchanged).
CLOSURE_SOLREF = (0.001, 1.0)
#: ``solimp`` of the loop closures: impedance 0.99 at zero violation rising to 0.9999 at 1 mm,
#: (MuJoCo's default is 0.9/0.95: a softer closure that lets the loop open under load).
CLOSURE_SOLIMP = (0.99, 0.9999, 0.001, 0.5, 2.0)


@dataclass(frozen=True)
class MjcfRobot:
    """A robot written as MJCF, with the names a plant needs.

    Attributes
    ----------
    xml : str
        The MJCF document.
    joints : tuple of str, length n
        The actuated joints, in the model's joint order (MJCF joint names).
    tool_body : str
        The body a payload or an external wrench attaches to (the last link, the platform).
    tool_pos : tuple of float, length 3
        The tool frame's origin in ``tool_body`` [m] (where a wrench's moment is taken).
    closures : tuple of str
        The loop-closure equality constraints (empty for a serial chain).
    """

    xml: str
    joints: tuple
    tool_body: str
    tool_pos: tuple = (0.0, 0.0, 0.0)
    closures: tuple = ()


def model_mjcf(model, q0=None) -> MjcfRobot:
    """The MJCF of a robot model (see the module docstring), assembled at ``q0``.

    Parameters
    ----------
    model : dynamics.Model
        A serial chain, a 3RRR or a Stewart platform (``model.to_mjcf`` is the model's own
        writer; this function calls it).
    q0 : array_like, shape (n,), optional
        Actuated positions [rad | m] of the assembled pose of a closed chain (default: the
        home pose).  A serial chain ignores it (its reference configuration is q = 0).

    Raises
    ------
    ModelError
        The model family has no MJCF writer, or ``q0`` cannot be assembled.
    """
    return model.to_mjcf(q0)


# -- helpers -------------------------------------------------------------------------------------
def quat_wxyz(R) -> np.ndarray:
    """Unit quaternion (w, x, y, z) of a rotation matrix (3, 3) (Shepperd's method)."""
    R = np.asarray(R, dtype=float)
    tr = R[0, 0] + R[1, 1] + R[2, 2]
    if tr > 0:
        s = 2.0 * math.sqrt(1.0 + tr)
        q = (0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s)
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = 2.0 * math.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        q = ((R[2, 1] - R[1, 2]) / s, 0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s)
    elif R[1, 1] > R[2, 2]:
        s = 2.0 * math.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        q = ((R[0, 2] - R[2, 0]) / s, (R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s)
    else:
        s = 2.0 * math.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        q = ((R[1, 0] - R[0, 1]) / s, (R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s)
    q = np.array(q)
    return q / np.linalg.norm(q)


def _f(v) -> str:
    """Numbers as MJCF text (17 significant digits: the doubles round-trip)."""
    return " ".join(repr(float(x)) for x in np.ravel(v))


def _rz(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _inertial(mass: float, com, inertia) -> str:
    """``<inertial>`` of a body: mass [kg], centre of mass (3,) [m] and the inertia tensor (3, 3)
    about it [kg m^2] in the body frame.  A massless body gets MuJoCo's smallest values
    (``<compiler boundmass boundinertia>`` below) so that it compiles."""
    I = np.asarray(inertia, dtype=float)
    full = (I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[0, 2], I[1, 2])
    return (f'<inertial pos={quoteattr(_f(com))} mass="{float(mass)!r}" '
            f'fullinertia={quoteattr(_f(full))}/>')


def _joint(name: str, kind: str, axis, *, armature=0.0, damping=0.0, frictionloss=0.0,
           ref=0.0, rng=None, pos=(0.0, 0.0, 0.0)) -> str:
    attrs = [f"name={quoteattr(name)}", f'type="{kind}"', f"axis={quoteattr(_f(axis))}"]
    if any(pos):
        attrs.append(f"pos={quoteattr(_f(pos))}")
    if ref:
        attrs.append(f'ref="{float(ref)!r}"')
    for key, v in (("armature", armature), ("damping", damping), ("frictionloss", frictionloss)):
        if v:
            attrs.append(f'{key}="{float(v)!r}"')
    if rng is not None:
        attrs.append(f'limited="true" range={quoteattr(_f(rng))}')
    return "<joint " + " ".join(attrs) + "/>"


def _document(name: str, gravity, bodies: list[str], equality: list[str], motors: list[str]) -> str:
    eq = ""
    if equality:
        eq = "  <equality>\n" + "".join(f"    {e}\n" for e in equality) + "  </equality>\n"
    return (f'<mujoco model={quoteattr(name)}>\n'
            '  <compiler angle="radian" autolimits="true" boundmass="1e-9" boundinertia="1e-12"/>\n'
            f'  <option gravity={quoteattr(_f(gravity))} integrator="RK4" timestep="0.0005"/>\n'
            '  <worldbody>\n' + "".join(f"    {b}\n" for b in bodies) + '  </worldbody>\n'
            + eq
            + '  <actuator>\n' + "".join(f'    <motor name={quoteattr("drive_" + j)} joint={quoteattr(j)}/>\n'
                                         for j in motors)
            + '  </actuator>\n</mujoco>\n')


def _stop(lo: float, hi: float):
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def _connect(name: str, body1: str, body2: str, anchor) -> str:
    return (f"<connect name={quoteattr(name)} body1={quoteattr(body1)} body2={quoteattr(body2)} "
            f"anchor={quoteattr(_f(anchor))} solref={quoteattr(_f(CLOSURE_SOLREF))} "
            f"solimp={quoteattr(_f(CLOSURE_SOLIMP))}/>")


# -- serial chains -------------------------------------------------------------------------------
def serial_mjcf(model, q0=None) -> MjcfRobot:
    """MJCF of a :class:`~dynamics.serial.SerialModel` (reference configuration q = 0)."""
    X = model.placements
    mass, com, inertia = model.link_inertias
    drive, lim = model.drive, model.limits
    names = model.joint_names
    tool = model.tool_transform
    n = model.dof
    # nested bodies, innermost last
    opening, closing = [], []
    for i in range(n):
        kind = "hinge" if model.joint_types[i] == "revolute" else "slide"
        body = (f"<body name={quoteattr(f'link{i + 1}')} pos={quoteattr(_f(X[i][:3, 3]))} "
                f"quat={quoteattr(_f(quat_wxyz(X[i][:3, :3])))}>"
                + _inertial(mass[i], com[i], inertia[i])
                + _joint(names[i], kind, (0.0, 0.0, 1.0), armature=drive.armature[i],
                         damping=drive.viscous[i], frictionloss=drive.coulomb[i],
                         rng=_stop(lim.position_min[i], lim.position_max[i])))
        if i == n - 1:
            body += (f"<site name=\"tool\" pos={quoteattr(_f(tool[:3, 3]))} "
                     f"quat={quoteattr(_f(quat_wxyz(tool[:3, :3])))}/>")
        opening.append(body)
        closing.append("</body>")
    tree = "".join(opening) + "".join(closing)
    xml = _document(model.name, model.gravity_vector, [tree], [], list(names))
    return MjcfRobot(xml, tuple(names), f"link{n}", tuple(float(v) for v in tool[:3, 3]))


# -- planar 3RRR -----------------------------------------------------------------------------------
def rrr_mjcf(model, q0=None) -> MjcfRobot:
    """MJCF of a :class:`~dynamics.planar3rrr.Planar3RRR`, assembled at ``q0`` (default: home).

    Bodies in the plane z = 0, hinges about z.  The actuated joints' ``ref`` is their angle in
    the written pose, so that MuJoCo's joint position is the model's angle ``theta_i``; the
    out-of-plane inertias (which no hinge about z feels) are set to the in-plane one.
    """
    X0 = np.asarray(model.home_pose, dtype=float)
    if q0 is None:
        q0 = model.home_q
    q0 = np.asarray(q0, dtype=float)
    X0 = np.asarray(model.forward_kinematics_task(q0, guess=X0), dtype=float)
    psi = model.passive_angles_at(q0, X0)
    A = model.base_joints
    c = model.platform_joints
    P, D = model.proximal, model.distal
    drive, lim = model.drive, model.limits
    names = model.joint_names

    def izz(m, k):
        return np.diag([k, k, k])

    bodies, equality = [], []
    for i in range(3):
        th, ps = float(q0[i]), float(psi[i])
        a, b = float(P.length[i]), float(D.length[i])
        body = (f"<body name=\"leg{i + 1}_proximal\" pos={quoteattr(_f([A[i, 0], A[i, 1], 0.0]))} "
                f"quat={quoteattr(_f(quat_wxyz(_rz(th))))}>"
                + _inertial(P.mass[i], (P.com[i], 0.0, 0.0), izz(P.mass[i], P.inertia[i]))
                + _joint(names[i], "hinge", (0.0, 0.0, 1.0), armature=drive.armature[i],
                         damping=drive.viscous[i], frictionloss=drive.coulomb[i], ref=th,
                         rng=_stop(lim.position_min[i], lim.position_max[i]))
                + f"<body name=\"leg{i + 1}_distal\" pos={quoteattr(_f([a, 0.0, 0.0]))} "
                f"quat={quoteattr(_f(quat_wxyz(_rz(ps - th))))}>"
                + _inertial(D.mass[i], (D.com[i], 0.0, 0.0), izz(D.mass[i], D.inertia[i]))
                + _joint(f"leg{i + 1}_elbow", "hinge", (0.0, 0.0, 1.0)))
        if i == 0:
            # the platform: frame at P rotated by phi, hinged at its joint c_0 (= the end C_0)
            Bw = A[0] + a * np.array([math.cos(th), math.sin(th)])
            rel = _rz(-ps) @ np.array([X0[0] - Bw[0], X0[1] - Bw[1], 0.0])
            body += (f"<body name=\"platform\" pos={quoteattr(_f(rel))} "
                     f"quat={quoteattr(_f(quat_wxyz(_rz(X0[2] - ps))))}>"
                     + _inertial(model.platform_mass, (0.0, 0.0, 0.0),
                                 izz(model.platform_mass, model.platform_inertia))
                     + _joint("leg1_platform", "hinge", (0.0, 0.0, 1.0), pos=(c[0, 0], c[0, 1], 0.0))
                     + "<site name=\"platform\"/></body>")
        else:
            equality.append(_connect(f"closure_leg{i + 1}", f"leg{i + 1}_distal", "platform", (b, 0.0, 0.0)))
        body += "</body></body>"
        bodies.append(body)
    g = model.gravity_vector
    xml = _document(model.name, (g[0], g[1], 0.0), bodies, equality, list(names))
    return MjcfRobot(xml, tuple(names), "platform", (0.0, 0.0, 0.0),
                     tuple(f"closure_leg{i + 1}" for i in (1, 2)))


# -- Gough-Stewart platform ------------------------------------------------------------------------
def stewart_mjcf(model, q0=None, *, rotation_matrix) -> MjcfRobot:
    """MJCF of a :class:`~dynamics.stewart.StewartPlatform`, assembled at the leg lengths ``q0``
    (default: the home pose's); ``rotation_matrix`` is the model's Euler-angle map
    (:func:`dynamics.stewart.rotation_matrix`, passed in: this module imports no model family).

    The upper leg's slide joint has ``ref`` = its length in the written pose, so MuJoCo's joint
    position is the leg length ``L_i`` (base joint centre to platform joint centre).
    """
    X0 = np.asarray(model.home_pose, dtype=float)
    if q0 is not None:
        X0 = np.asarray(model.forward_kinematics_task(np.asarray(q0, dtype=float), guess=X0), dtype=float)
    legs, plat = model.packed_parameters
    from . import _stewart_kernels as K
    R0 = rotation_matrix(X0[3:])
    drive, lim = model.drive, model.limits
    names = model.joint_names
    bodies = [(f"<body name=\"platform\" pos={quoteattr(_f(X0[:3]))} quat={quoteattr(_f(quat_wxyz(R0)))}>"
               "<freejoint name=\"platform\"/>"
               + _inertial(plat[K.PL_M], plat[K.PL_C], plat[K.PL_I].reshape(3, 3))
               + "<site name=\"platform\"/></body>")]
    equality = []
    for i in range(6):
        b, p, a = legs[i, K.LEG_B], legs[i, K.LEG_P], legs[i, K.LEG_A]
        l = X0[:3] + R0 @ p - b
        L = float(np.linalg.norm(l))
        z = l / L
        x = np.cross(z, a)
        nx = np.linalg.norm(x)
        if nx < 1e-9:
            raise ModelError(f"leg {i + 1}: the universal joint's axis is along the leg in the pose to assemble")
        x /= nx
        y = np.cross(z, x)
        Rl = np.column_stack([x, y, z])
        a_local = Rl.T @ a
        body = (f"<body name=\"leg{i + 1}_lower\" pos={quoteattr(_f(b))} quat={quoteattr(_f(quat_wxyz(Rl)))}>"
                + _inertial(legs[i, K.LEG_M1], (0.0, 0.0, legs[i, K.LEG_S1]), legs[i, K.LEG_I1].reshape(3, 3))
                + _joint(f"leg{i + 1}_u1", "hinge", a_local)
                + _joint(f"leg{i + 1}_u2", "hinge", (1.0, 0.0, 0.0))
                + f"<body name=\"leg{i + 1}_upper\" pos={quoteattr(_f([0.0, 0.0, L]))}>"
                + _inertial(legs[i, K.LEG_M2], (0.0, 0.0, -legs[i, K.LEG_S2]), legs[i, K.LEG_I2].reshape(3, 3))
                + _joint(names[i], "slide", (0.0, 0.0, 1.0), armature=drive.armature[i],
                         damping=drive.viscous[i], frictionloss=drive.coulomb[i], ref=L,
                         rng=_stop(lim.position_min[i], lim.position_max[i]))
                + "</body></body>")
        bodies.append(body)
        equality.append(_connect(f"closure_leg{i + 1}", f"leg{i + 1}_upper", "platform", (0.0, 0.0, 0.0)))
    xml = _document(model.name, plat[K.PL_G], bodies, equality, list(names))
    return MjcfRobot(xml, tuple(names), "platform", (0.0, 0.0, 0.0),
                     tuple(f"closure_leg{i + 1}" for i in range(6)))


# -- mechanism files -------------------------------------------------------------------------------
def mechanism_mjcf(model, q0=None) -> MjcfRobot:
    """MJCF of a :class:`~dynamics.mechanism.MechanismModel`, assembled at ``q0`` (default: home).

    Each body's frame is written at its joint's value in the assembled configuration, and the
    joint's ``ref`` is that value, so MuJoCo's joint positions are the model's coordinates.  A
    planar body given only Izz gets Ixx = Iyy = Izz (no hinge about z feels them; MuJoCo needs
    the triangle inequality).
    """
    spec = model.spec
    sym = spec.symbolic
    z0 = model.configuration(model.home_q if q0 is None else np.asarray(q0, dtype=float))
    body_par = {b["name"]: spec.params[10 * k:10 * k + 10] for k, b in enumerate(sym["bodies"])}
    com = {b["name"]: b["com"] for b in sym["bodies"]}
    drive, lim = model.drive, model.limits
    act = list(spec.actuated)
    children: dict[str, list[int]] = {}
    for j, jt in enumerate(sym["joints"]):
        children.setdefault(jt["parent"], []).append(j)

    first = np.cumsum([0] + [COORDINATES.get(jt["type"], 1) for jt in sym["joints"]])

    def write(j) -> str:
        jt = sym["joints"][j]
        name = jt["child"]
        axis = np.asarray(jt.get("axis", (0.0, 0.0, 1.0)), dtype=float)
        p = body_par[name]
        Ixx, Iyy, Izz, Ixy, Iyz, Izx = p[4:10]
        if sym["planar"] and Ixx == 0.0 and Iyy == 0.0:
            Ixx = Iyy = Izz
        I = np.array([[Ixx, Ixy, Izx], [Ixy, Iyy, Iyz], [Izx, Iyz, Izz]])
        i = first[j]

        def drive_kw(c):
            """The drive's attributes of coordinate c (friction, armature, stop) when actuated."""
            if c not in act:
                return {}
            a = act.index(c)
            return dict(armature=drive.armature[a], damping=drive.viscous[a], frictionloss=drive.coulomb[a],
                        rng=_stop(lim.position_min[a], lim.position_max[a]))

        if jt["type"] in ("universal", "spherical"):
            # the body written at its joint's angles: R = Rot(a1, z1) Rot(a2, z2) (Rot(a3, z3)),
            # the axes in the parent frame (= the child frame at zero angles)
            ax = np.asarray(jt["axes"], dtype=float)
            Rs = [_axis_angle(a, z0[i + k]) for k, a in enumerate(ax)]
            R = Rs[0] @ Rs[1] @ (Rs[2] if len(Rs) > 2 else np.eye(3))
            pos = np.asarray(jt["origin"])
            if jt["type"] == "universal" or i in act:
                # one hinge per coordinate in one body, applied in order in the body's frame
                # (MuJoCo): hinge k about (R_k+1 ... R_last)^T a_k, so that R Rot(h1, d1) Rot(h2, d2)
                # ... = Rot(a1, z1 + d1) Rot(a2, z2 + d2) ...; with ref = z0 the hinges'
                # positions are the model's angles (an actuated spherical joint: its three
                # drives, one motor each, in the Euler order, not a ball)
                joint, tail = "", np.eye(3)
                for k in range(len(ax) - 1, -1, -1):
                    joint = _joint(spec.joint_names[i + k], "hinge", tail.T @ ax[k], ref=z0[i + k],
                                   **drive_kw(i + k)) + joint
                    tail = Rs[k] @ tail
            else:       # MuJoCo's ball joint (a quaternion; identity at the written pose)
                joint = f"<joint name={quoteattr(spec.joint_names[i][:-2])} type=\"ball\"/>"
        else:
            if jt["type"] == "revolute":
                pos, R, kind = np.asarray(jt["origin"]), _axis_angle(axis, z0[i]), "hinge"
            else:
                pos, R, kind = np.asarray(jt["origin"]) + z0[i] * axis, np.eye(3), "slide"
            # the joint axis in the child frame: R^T axis = axis (a rotation about it keeps it)
            joint = _joint(spec.joint_names[i], kind, axis, ref=z0[i], **drive_kw(i))
        body = (f"<body name={quoteattr(name)} pos={quoteattr(_f(pos))} quat={quoteattr(_f(quat_wxyz(R)))}>"
                + _inertial(p[0], com[name], I) + joint)
        if name == sym["task"]["body"]:
            body += f"<site name=\"tool\" pos={quoteattr(_f(sym['task']['point']))}/>"
        return body + "".join(write(k) for k in children.get(name, [])) + "</body>"

    equality, closures = [], []
    for i, lp in enumerate(sym["loops"]):
        if lp["body_a"] == "ground":
            raise ModelError(f"{model.name}: loops[{i}]: write the ground as body_b (MJCF anchors on body1)")
        b = "world" if lp["body_b"] == "ground" else lp["body_b"]
        anchors = [("", np.asarray(lp["point_a"], dtype=float))]
        if lp["type"] == "revolute" and not sym["planar"]:
            # the axis alignment: a second point on the common axis, length_scale along axis_a
            # (see the module docstring)
            axis = np.asarray(lp["axis_a"], dtype=float)
            anchors.append(("_axis", anchors[0][1] + spec.length_scale * axis))
        for suffix, anchor in anchors:
            equality.append(_connect(f"closure{i + 1}{suffix}", lp["body_a"], b, anchor))
            closures.append(f"closure{i + 1}{suffix}")
    bodies = [write(k) for k in children.get("ground", [])]
    xml = _document(model.name, model.gravity_vector, bodies, equality, list(model.joint_names))
    return MjcfRobot(xml, tuple(model.joint_names), sym["task"]["body"],
                     tuple(float(v) for v in sym["task"]["point"]), tuple(closures))


def _axis_angle(axis, angle: float) -> np.ndarray:
    """Rotation matrix (3, 3) of ``angle`` [rad] about the unit ``axis`` (Rodrigues)."""
    k = np.asarray(axis, dtype=float)
    K = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(angle) * K + (1.0 - math.cos(angle)) * (K @ K)
