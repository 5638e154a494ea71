// Gateway-wide numbers from /v1/stats: the summary chips in the top bar,
// the warning when the agent sandbox is off, and two hand-drawn canvas
// charts, frames per second (from deltas of frames_total) and total cost,
// over the last minutes.

import { $, el, setText, isNum, fmtDuration, fmtCount, fmtCost, fmtRate } from "./util.js";

const HISTORY_MS = 5 * 60 * 1000;
const MIN_SPAN_MS = 60 * 1000;

// { t, fps, cost } per poll, the last HISTORY_MS of them.
const samples = [];
// The previous poll's time and frame total, to turn the counter into a rate.
let previous = null;
// chip key → its value span
const chips = new Map();

function sumValues(obj) {
  let total = 0;
  if (obj && typeof obj === "object") {
    for (const v of Object.values(obj)) if (isNum(v)) total += v;
  }
  return total;
}

function chip(key, label) {
  let value = chips.get(key);
  if (!value || !value.isConnected) {
    const node = $("summary").appendChild(el("span", "chip"));
    node.appendChild(el("span", "chip-label", label));
    value = node.appendChild(el("span", "chip-value"));
    chips.set(key, value);
  }
  return value;
}

export function resetStats() {
  samples.length = 0;
  previous = null;
  $("summary").replaceChildren();
}

// Records one /v1/stats answer and redraws the chips and charts.
export function recordStats(s) {
  const now = performance.now();
  const frames = sumValues(s.frames_total);
  const cost = isNum(s.cost_usd_total) ? s.cost_usd_total : 0;
  if (previous) {
    const dt = (now - previous.t) / 1000;
    const delta = frames - previous.frames;
    // A negative delta means the gateway restarted and its counters reset.
    samples.push({ t: now, fps: dt > 0 && delta >= 0 ? delta / dt : 0, cost });
  }
  previous = { t: now, frames };
  while (samples.length && samples[0].t < now - HISTORY_MS) samples.shift();

  const c = s.children || {};
  const extra = ["starting", "stopping", "backoff", "failed"]
    .filter((state) => c[state])
    .map((state) => " · " + c[state] + " " + state)
    .join("");
  setText(chip("uptime", "up"), fmtDuration(s.uptime_secs));
  setText(chip("children", "children"), (c.idle || 0) + " idle · " + (c.busy || 0) + " busy" + extra);
  setText(chip("clients", "clients"), isNum(s.clients) ? String(s.clients) : "–");
  const t = s.tokens_total || {};
  setText(chip("tokens", "tokens"), fmtCount(t.input || 0) + " in · " + fmtCount(t.output || 0) + " out");
  setText(chip("cost", "cost"), fmtCost(cost));
  const sandbox = s.sandbox || {};
  const backend = (sandbox.limits || {}).backend;
  const off = sandbox.enabled === false;
  setText(
    chip("sandbox", "sandbox"),
    (off ? "OFF" : "on") + (backend && backend !== "none" ? " · limits: " + backend : ""),
  );
  chips.get("sandbox").classList.toggle("is-off", off);
  $("sandbox-off").hidden = !off;

  const latest = samples[samples.length - 1];
  setText($("frames-now"), latest ? fmtRate(latest.fps) + " /s" : "–");
  setText($("cost-now"), fmtCost(cost));
  drawCharts();
}

export function drawCharts() {
  drawChart($("chart-frames"), "fps", fmtRate, 5);
  drawChart($("chart-cost"), "cost", fmtCost, 0.01);
}

// The smallest of 1, 2, 2.5, 5 × 10^n at or above v.
function niceCeiling(v) {
  const exp = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * exp) return m * exp;
  return 10 * exp;
}

// A filled line chart of samples[*][key] from 0 to a round maximum (at
// least minTop); the time axis grows with the history from one minute to
// five. Colours come from the stylesheet's --chart-* variables.
function drawChart(canvas, key, fmt, minTop) {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(canvas.clientWidth * dpr));
  const h = Math.max(1, Math.round(canvas.clientHeight * dpr));
  if (canvas.width !== w || canvas.height !== h) {
    canvas.width = w;
    canvas.height = h;
  }
  const ctx = canvas.getContext("2d");
  const css = getComputedStyle(canvas);
  const color = (name) => css.getPropertyValue(name).trim();
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  const cw = w / dpr;
  const ch = h / dpr;
  ctx.clearRect(0, 0, cw, ch);

  let top = minTop;
  for (const p of samples) top = Math.max(top, p[key]);
  top = niceCeiling(top);
  const pad = 4;
  const plotH = ch - 14 - pad;
  const now = performance.now();
  const oldest = samples.length ? samples[0].t : now;
  const span = Math.min(HISTORY_MS, Math.max(MIN_SPAN_MS, now - oldest));
  const x = (t) => pad + ((t - (now - span)) / span) * (cw - pad * 2);
  const y = (v) => pad + plotH - (v / top) * plotH;

  ctx.strokeStyle = color("--chart-grid");
  ctx.lineWidth = 1;
  for (let i = 0; i <= 2; i++) {
    const gy = Math.round(pad + (plotH * i) / 2) + 0.5;
    ctx.beginPath();
    ctx.moveTo(pad, gy);
    ctx.lineTo(cw - pad, gy);
    ctx.stroke();
  }
  ctx.fillStyle = color("--chart-text");
  ctx.font = "10px system-ui, sans-serif";
  ctx.textBaseline = "top";
  ctx.textAlign = "left";
  ctx.fillText(fmt(top), pad + 2, 6);
  ctx.textBaseline = "bottom";
  ctx.fillText(Math.round(span / 60000) + " min ago", pad, ch);
  ctx.textAlign = "right";
  ctx.fillText("now", cw - pad, ch);

  if (samples.length < 2) return;
  ctx.beginPath();
  samples.forEach((p, i) => (i === 0 ? ctx.moveTo(x(p.t), y(p[key])) : ctx.lineTo(x(p.t), y(p[key]))));
  ctx.strokeStyle = color("--chart-line");
  ctx.lineWidth = 1.5;
  ctx.stroke();
  ctx.lineTo(x(samples[samples.length - 1].t), y(0));
  ctx.lineTo(x(samples[0].t), y(0));
  ctx.closePath();
  ctx.fillStyle = color("--chart-fill");
  ctx.fill();
}
