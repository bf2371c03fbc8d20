// torqueloop live page: a Foxglove WebSocket client (protocol foxglove.websocket.v1, which
// foxglove-sdk's server names foxglove.sdk.v1) that decodes the ROS 2 CDR messages from the
// ros2msg schema text each channel advertises and draws them.  No dependencies.
// What it received is kept in window.torqueloopLive and as JSON in <pre id="received">.
"use strict";

// ---- ros2msg schemas ----------------------------------------------------------------------
const PRIMITIVES = {bool: 1, byte: 1, char: 1, int8: 1, uint8: 1, int16: 2, uint16: 2, int32: 4, uint32: 4,
                    int64: 8, uint64: 8, float32: 4, float64: 8, string: 0};

function normalize(name) {            // "pkg/msg/Type" -> "pkg/Type"
  const p = name.split("/");
  return p.length === 3 ? p[0] + "/" + p[2] : name;
}

// {type name: [{name, type, array: null | "seq" | length}]} of a schema and its dependencies
function parseSchema(rootName, text) {
  const types = {};
  let current = normalize(rootName);
  let fields = types[current] = [];
  for (const raw of text.split("\n")) {
    const line = raw.replace(/#.*$/, "").trim();
    if (!line) continue;
    if (/^={3,}$/.test(line)) continue;
    const msg = line.match(/^MSG:\s*(\S+)$/);
    if (msg) { current = normalize(msg[1]); fields = types[current] = []; continue; }
    const parts = line.split(/\s+/);
    if (parts.length < 2 || parts[1].includes("=") || (parts[2] || "").startsWith("=")) continue;  // constant
    const m = parts[0].match(/^([^\[]+?)(?:<=\d+)?(?:\[(<=)?(\d*)\])?$/);
    if (!m) throw new Error("cannot parse field type " + parts[0]);
    let base = m[1];
    if (!(base in PRIMITIVES)) {
      if (base.includes("/")) base = normalize(base);
      else if (base === "Header") base = "std_msgs/Header";
      else base = current.split("/")[0] + "/" + base;
    }
    const array = parts[0].includes("[") ? (m[3] && !m[2] ? Number(m[3]) : "seq") : null;
    fields.push({name: parts[1], type: base, array: array});
  }
  return {root: normalize(rootName), types: types};
}

// ---- CDR (XCDR1, as ROS 2 writes it) -------------------------------------------------------
class CdrReader {
  constructor(bytes) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const kind = this.view.getUint8(1);
    if (this.view.getUint8(0) !== 0 || kind > 1) throw new Error("not plain CDR (encapsulation " + kind + ")");
    this.little = kind === 1;
    this.offset = 4;                     // alignment counts from the end of the 4-byte header
  }
  align(n) { const r = (this.offset - 4) % n; if (r) this.offset += n - r; }
  primitive(type) {
    if (type === "string") return this.string();
    const size = PRIMITIVES[type];
    this.align(size);
    const v = this.view, o = this.offset, le = this.little;
    this.offset += size;
    switch (type) {
      case "bool": return v.getUint8(o) !== 0;
      case "byte": case "char": case "uint8": return v.getUint8(o);
      case "int8": return v.getInt8(o);
      case "int16": return v.getInt16(o, le);
      case "uint16": return v.getUint16(o, le);
      case "int32": return v.getInt32(o, le);
      case "uint32": return v.getUint32(o, le);
      case "int64": return Number(v.getBigInt64(o, le));
      case "uint64": return Number(v.getBigUint64(o, le));
      case "float32": return v.getFloat32(o, le);
      case "float64": return v.getFloat64(o, le);
    }
    throw new Error("unknown type " + type);
  }
  string() {
    const n = this.primitive("uint32");   // length with the terminating NUL
    const bytes = new Uint8Array(this.view.buffer, this.view.byteOffset + this.offset, n);
    this.offset += n;
    return new TextDecoder().decode(n > 0 ? bytes.subarray(0, n - 1) : bytes);
  }
}

function decodeType(reader, types, type) {
  if (type in PRIMITIVES) return reader.primitive(type);
  const fields = types[type];
  if (!fields) throw new Error("no definition of " + type);
  const out = {};
  for (const f of fields) {
    if (f.array === null) { out[f.name] = decodeType(reader, types, f.type); continue; }
    const n = f.array === "seq" ? reader.primitive("uint32") : f.array;
    const a = new Array(n);
    for (let i = 0; i < n; i++) a[i] = decodeType(reader, types, f.type);
    out[f.name] = a;
  }
  return out;
}

function decoderFor(channel) {
  if (channel.encoding !== "cdr" || channel.schemaEncoding !== "ros2msg") return null;
  const schema = parseSchema(channel.schemaName, channel.schema);
  return (bytes) => {
    const r = new CdrReader(bytes);
    const msg = decodeType(r, schema.types, schema.root);
    if (r.offset > bytes.byteLength) throw new Error("message shorter than its schema");
    return msg;
  };
}

// ---- state ---------------------------------------------------------------------------------
const HISTORY = 4000;                   // points kept per series
const live = window.torqueloopLive = {
  status: "connecting", server: null, counts: {}, errors: [], joint_states: null, cycle: null, rosout: null,
  tf: null, info: null,
};
const series = {};                      // name -> {t: [], v: []}
let t0 = null;                          // first stamp [s]

function push(name, t, v) {
  const s = series[name] || (series[name] = {t: [], v: []});
  s.t.push(t); s.v.push(v);
  if (s.t.length > HISTORY) { s.t.splice(0, s.t.length - HISTORY); s.v.splice(0, s.v.length - HISTORY); }
}

function stampS(stamp) {
  const t = stamp.sec + stamp.nanosec * 1e-9;
  if (t0 === null) t0 = t;
  return t - t0;
}

function onMessage(topic, msg) {
  live.counts[topic] = (live.counts[topic] || 0) + 1;
  if (topic === "/joint_states") {
    live.joint_states = {stamp: msg.header.stamp, name: msg.name, position: msg.position, velocity: msg.velocity,
                         effort: msg.effort};
    const t = stampS(msg.header.stamp);
    msg.position.forEach((q, i) => push("q" + i, t, q));
  } else if (topic === "/torqueloop/cycle") {
    live.cycle = {stamp: msg.stamp, t_s: msg.t_s, ref_pos: msg.ref_pos, err: msg.err, tau_cmd: msg.tau_cmd,
                  tau_meas: msg.tau_meas, tau_limit: msg.tau_limit, safety: msg.safety};
    const t = stampS(msg.stamp);
    msg.ref_pos.forEach((r, i) => { push("ref" + i, t, r); push("meas" + i, t, r - msg.err[i]); });
    msg.tau_cmd.forEach((u, i) => {
      push("cmd" + i, t, u); push("eff" + i, t, msg.tau_meas[i]); push("lim" + i, t, msg.tau_limit[i]);
      push("-lim" + i, t, -msg.tau_limit[i]);
    });
  } else if (topic === "/rosout") {
    live.rosout = {stamp: msg.stamp, level: msg.level, name: msg.name, msg: msg.msg};
  } else if (topic === "/tf") {
    live.tf = {stamp: msg.transforms.length ? msg.transforms[0].header.stamp : null,
               transforms: msg.transforms.map((x) => ({parent: x.header.frame_id, child: x.child_frame_id,
                 translation: x.transform.translation, rotation: x.transform.rotation}))};
  }
}

// ---- the connection ------------------------------------------------------------------------
function connect(address) {
  const ws = new WebSocket(address, ["foxglove.sdk.v1", "foxglove.websocket.v1"]);
  ws.binaryType = "arraybuffer";
  const subs = {};                       // subscription id -> {topic, decode}
  let nextId = 1;
  ws.onopen = () => { live.status = "connected"; };
  ws.onclose = () => { live.status = "closed"; draw(); };
  ws.onerror = () => { live.errors.push("WebSocket error (" + address + ")"); };
  ws.onmessage = (event) => {
    try {
      if (typeof event.data === "string") {
        const m = JSON.parse(event.data);
        if (m.op === "serverInfo") live.server = m.name;
        else if (m.op === "status" && m.level >= 2) live.errors.push("server: " + m.message);
        else if (m.op === "advertise") {
          const add = [];
          for (const ch of m.channels) {
            const decode = decoderFor(ch);
            if (!decode) continue;
            const id = nextId++;
            subs[id] = {topic: ch.topic, decode: decode};
            add.push({id: id, channelId: ch.id});
          }
          if (add.length) ws.send(JSON.stringify({op: "subscribe", subscriptions: add}));
        }
        return;
      }
      const view = new DataView(event.data);
      if (view.getUint8(0) !== 1) return;   // MessageData: opcode, uint32 subscription, uint64 time, payload
      const sub = subs[view.getUint32(1, true)];
      if (sub) onMessage(sub.topic, sub.decode(new Uint8Array(event.data, 13)));
    } catch (err) {
      if (live.errors.length < 20) live.errors.push(String(err));
    }
  };
}

// ---- drawing -------------------------------------------------------------------------------
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"];

function panel(id, title) {
  let div = document.getElementById(id);
  if (!div) {
    div = document.createElement("div");
    div.className = "panel";
    div.id = id;
    div.innerHTML = "<h3></h3><canvas width='560' height='180'></canvas>";
    div.querySelector("h3").textContent = title;
    document.getElementById("plots").appendChild(div);
  }
  return div.querySelector("canvas");
}

// lines: [{name (series), label, color, dash}]
function plot(canvas, lines) {
  const g = canvas.getContext("2d"), W = canvas.width, H = canvas.height, L = 62, R = 8, T = 18, B = 20;
  g.clearRect(0, 0, W, H);
  let tmin = Infinity, tmax = -Infinity, vmin = Infinity, vmax = -Infinity;
  for (const l of lines) {
    const s = series[l.name];
    if (!s) continue;
    for (let i = 0; i < s.t.length; i++) {
      if (!Number.isFinite(s.v[i])) continue;
      tmin = Math.min(tmin, s.t[i]); tmax = Math.max(tmax, s.t[i]);
      vmin = Math.min(vmin, s.v[i]); vmax = Math.max(vmax, s.v[i]);
    }
  }
  if (!(tmax >= tmin)) return;
  if (tmax === tmin) tmax = tmin + 1;
  if (vmax - vmin < 1e-12) { vmin -= 1; vmax += 1; }
  const pad = 0.05 * (vmax - vmin); vmin -= pad; vmax += pad;
  const x = (t) => L + (W - L - R) * (t - tmin) / (tmax - tmin);
  const y = (v) => T + (H - T - B) * (vmax - v) / (vmax - vmin);
  g.strokeStyle = "#bbb"; g.fillStyle = "#333"; g.font = "11px sans-serif"; g.lineWidth = 1; g.setLineDash([]);
  g.strokeRect(L, T, W - L - R, H - T - B);
  for (const v of [vmin + pad, (vmin + vmax) / 2, vmax - pad]) g.fillText(v.toPrecision(3), 2, y(v) + 4);
  g.fillText(tmin.toFixed(2) + " s", L, H - 5);
  g.fillText(tmax.toFixed(2) + " s", W - R - 50, H - 5);
  let lx = L + 8;
  for (const l of lines) {
    const s = series[l.name];
    if (!s) continue;
    g.strokeStyle = l.color; g.lineWidth = 1.5; g.setLineDash(l.dash || []);
    g.beginPath();
    let pen = false;
    for (let i = 0; i < s.t.length; i++) {
      if (!Number.isFinite(s.v[i])) { pen = false; continue; }
      if (pen) g.lineTo(x(s.t[i]), y(s.v[i])); else g.moveTo(x(s.t[i]), y(s.v[i]));
      pen = true;
    }
    g.stroke();
    if (l.label) { g.fillStyle = l.color; g.fillText(l.label, lx, 11); lx += g.measureText(l.label).width + 14; }
  }
}

function quatRotate(q, v) {             // q = {x, y, z, w} applied to v = [x, y, z]
  const ux = q.y * v[2] - q.z * v[1], uy = q.z * v[0] - q.x * v[2], uz = q.x * v[1] - q.y * v[0];
  const tx = 2 * ux, ty = 2 * uy, tz = 2 * uz;
  return [v[0] + q.w * tx + (q.y * tz - q.z * ty), v[1] + q.w * ty + (q.z * tx - q.x * tz),
          v[2] + q.w * tz + (q.x * ty - q.y * tx)];
}

function mulQuat(a, b) {
  return {w: a.w * b.w - a.x * b.x - a.y * b.y - a.z * b.z, x: a.w * b.x + a.x * b.w + a.y * b.z - a.z * b.y,
          y: a.w * b.y - a.x * b.z + a.y * b.w + a.z * b.x, z: a.w * b.z + a.x * b.y - a.y * b.x + a.z * b.w};
}

// the /tf frames seen from above (x right, y up).  A frame joins its parent with a solid line
// (a link of a chain) unless the parent has more than two children (a hub such as a parallel
// robot's base: dotted); each frame's x axis is drawn up to the next origin on it (the 3RRR's
// proximal links reach their elbows) or as a short red tick.
function drawFrames() {
  if (!live.tf) return;
  const canvas = panel("panel-tf", "/tf frames from above (x-y): links solid, x axes red");
  const g = canvas.getContext("2d"), W = canvas.width, H = canvas.height;
  const byChild = {}, children = {};
  for (const x of live.tf.transforms) {
    byChild[x.child] = x;
    children[x.parent] = (children[x.parent] || 0) + 1;
  }
  const world = {};
  const pose = (name, depth) => {
    if (world[name]) return world[name];
    const x = byChild[name];
    if (!x || depth > 64) return (world[name] = {p: [0, 0, 0], q: {x: 0, y: 0, z: 0, w: 1}});
    const parent = pose(x.parent, depth + 1), t = x.translation;
    const p = quatRotate(parent.q, [t.x, t.y, t.z]);
    return (world[name] = {p: [parent.p[0] + p[0], parent.p[1] + p[1], parent.p[2] + p[2]],
                           q: mulQuat(parent.q, x.rotation)});
  };
  Object.keys(byChild).forEach((c) => pose(c, 0));
  const pts = Object.values(world).map((f) => f.p);
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const span = Math.max(Math.max(...xs) - Math.min(...xs), Math.max(...ys) - Math.min(...ys), 1e-6);
  const s = 0.8 * Math.min(W, H) / span, cx = (Math.max(...xs) + Math.min(...xs)) / 2,
        cy = (Math.max(...ys) + Math.min(...ys)) / 2;
  const X = (p) => W / 2 + s * (p[0] - cx), Y = (p) => H / 2 - s * (p[1] - cy);
  const line = (a, b, color, width, dash) => {
    g.strokeStyle = color; g.lineWidth = width; g.setLineDash(dash);
    g.beginPath(); g.moveTo(X(a), Y(a)); g.lineTo(X(b), Y(b)); g.stroke();
  };
  g.clearRect(0, 0, W, H);
  for (const [child, x] of Object.entries(byChild)) {
    const hub = children[x.parent] > 2;
    line(world[x.parent].p, world[child].p, hub ? "#aaa" : "#444", hub ? 1 : 3, hub ? [2, 3] : []);
  }
  for (const [name, f] of Object.entries(world)) {
    const u = quatRotate(f.q, [1, 0, 0]);
    let reach = null;                   // the nearest other origin on the x axis (within 1 % of the view)
    for (const o of pts) {
      const d = [o[0] - f.p[0], o[1] - f.p[1], o[2] - f.p[2]];
      const along = d[0] * u[0] + d[1] * u[1] + d[2] * u[2];
      const off = Math.hypot(d[0] - along * u[0], d[1] - along * u[1], d[2] - along * u[2]);
      if (along > 1e-9 && off < 0.01 * span && (reach === null || along < reach)) reach = along;
    }
    const end = (r) => [f.p[0] + r * u[0], f.p[1] + r * u[1], f.p[2] + r * u[2]];
    if (reach !== null) line(f.p, end(reach), "#444", 3, []);
    line(f.p, end(0.08 * span), "#d62728", 1.5, []);
    g.fillStyle = "#222"; g.beginPath(); g.arc(X(f.p), Y(f.p), 3, 0, 2 * Math.PI); g.fill();
    g.font = "10px sans-serif"; g.fillText(name, X(f.p) + 4, Y(f.p) - 4);
  }
}

function draw() {
  const info = live.info || {};
  const cyc = live.cycle, js = live.joint_states;
  if (cyc) {
    cyc.ref_pos.forEach((_, i) => {
      const axis = (info.axis_names || [])[i] || "axis " + (i + 1);
      plot(panel("panel-axis" + i, axis + ": reference and measured (controller space, SI)"),
           [{name: "ref" + i, label: "reference", color: COLORS[0], dash: [5, 3]},
            {name: "meas" + i, label: "measured", color: COLORS[1]}]);
    });
    cyc.tau_cmd.forEach((_, i) => {
      const joint = (js && js.name[i]) || "joint " + (i + 1);
      plot(panel("panel-tau" + i, joint + ": torque against its limit [N m | N]"),
           [{name: "cmd" + i, label: "commanded", color: COLORS[0]},
            {name: "eff" + i, label: "measured", color: COLORS[2], dash: [3, 3]},
            {name: "lim" + i, label: "limit", color: COLORS[1], dash: [4, 4]},
            {name: "-lim" + i, label: "", color: COLORS[1], dash: [4, 4]}]);
    });
  }
  if (js) {
    plot(panel("panel-q", "joint positions [rad | m]"),
         js.name.map((n, i) => ({name: "q" + i, label: n, color: COLORS[i % COLORS.length]})));
  }
  drawFrames();
  const counts = Object.entries(live.counts).map(([k, v]) => k + " " + v).join(", ") || "no messages yet";
  document.getElementById("status").textContent = live.status + (live.server ? " to " + live.server : "") +
    ": " + counts + (live.errors.length ? "; ERRORS: " + live.errors.join("; ") : "");
  document.getElementById("safety").textContent = live.rosout ? live.rosout.name + ": " + live.rosout.msg : "";
  document.getElementById("received").textContent = JSON.stringify(live);
}

// ---- start: ?ws=ADDRESS, else the address the page's server tells (info.json) ------------------
async function start() {
  const given = new URLSearchParams(location.search).get("ws");
  if (!given) {
    try {
      live.info = await (await fetch("info.json", {cache: "no-store"})).json();
    } catch (err) {
      live.errors.push("no info.json (" + err + "): open the page as torqueloop prints it, or add ?ws=ws://HOST:PORT");
    }
  }
  const address = given || (live.info && live.info.ws);
  document.getElementById("address").textContent = address || "?";
  if (address) connect(address);
  setInterval(draw, 250);
  draw();
}

window.addEventListener("load", start);
