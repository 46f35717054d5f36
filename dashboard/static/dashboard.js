// The dashboard page: one EventSource on /events; each message carries the viewer's view and the charts as SVG
// (drawn and escaped on the server). Text goes in with textContent only.
"use strict";

function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n.toFixed(0)} B` : `${n.toFixed(1)} ${units[i]}`;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function fillTable(id, rows, build) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows.map((r) => { const tr = document.createElement("tr"); build(tr, r); return tr; }));
}

function render(msg) {
  const v = msg.view;
  if (!v) return;
  for (const [id, svg] of Object.entries(msg.svg)) {
    const el = document.getElementById(id);
    if (el) el.innerHTML = svg;
  }
  document.getElementById("viewer").textContent = v.viewer.label;
  document.getElementById("summary").textContent =
    `up ${Math.round(v.uptime_s)} s · ${v.devices.length} device(s) · ${v.sessions.length} session(s) shown`;
  const err = document.getElementById("error");
  err.hidden = !v.error;
  err.textContent = v.error ? `the last poll failed: ${v.error}` : "";
  fillTable("device-table", v.devices, (tr, d) => {
    tr.dataset.device = d.device;
    cell(tr, d.device);
    cell(tr, d.name);
    cell(tr, d.health, `health-${d.health}`);
    cell(tr, d.heartbeat_age_s == null ? "-" : `${d.heartbeat_age_s.toFixed(1)} s ago`);
    cell(tr, String(d.queued), "num");
    cell(tr, String(d.sessions), "num");
    cell(tr, d.batches_per_s.toFixed(1), "num");
  });
  fillTable("session-table", v.sessions, (tr, s) => {
    tr.dataset.session = s.session;
    const td = cell(tr, s.session);
    const sw = document.createElement("span");
    sw.className = "swatch";
    sw.style.background = s.color;
    td.prepend(sw);
    cell(tr, bytes(s.bytes), "num");
    cell(tr, String(s.buffers), "num");
    cell(tr, String(s.queued), "num");
    cell(tr, String(s.running), "num");
    cell(tr, Object.keys(s.devices).join(", "));
    const l = cell(tr, "");
    if (s.link) {
      const a = document.createElement("a");
      a.href = s.link;
      a.textContent = "its view";
      l.appendChild(a);
    }
  });
  const hub = v.hub;
  document.getElementById("hub-status").textContent = hub ? `${hub.url}: ${hub.detail}` : "none configured";
  const live = document.getElementById("live");
  const n = Number(live.dataset.updates) + 1;
  live.dataset.updates = String(n);
  live.className = "live on";
  live.textContent = `live · ${new Date(v.at * 1000).toLocaleTimeString()}`;
}

function connect() {
  const es = new EventSource("/events");
  es.onmessage = (e) => render(JSON.parse(e.data));
  es.onerror = () => {
    const live = document.getElementById("live");
    live.className = "live off";
    live.textContent = "reconnecting…";
  };
}

connect();
