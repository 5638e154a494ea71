// Gateway-wide numbers from /v1/stats: the summary chips in the top bar,
// the warning when the agent sandbox is off, and two charts (chart.js),
// frames per second (from deltas of frames_total) and total cost, over the
// last minutes. A scoped admin may not see these gateway-wide numbers
// (/v1/stats and /metrics answer it 403 by design): one chip says so, and
// the charts and the /metrics link are hidden.

import { drawChart, trim } from "./chart.js";
import { $, el, setText, isNum, fmtDuration, fmtCount, fmtCost, fmtRate } from "./util.js";

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

// Whether the gateway-wide numbers are shown (false: a scoped admin).
let available = true;

function showGatewayWide(shown) {
  available = shown;
  $("charts").hidden = !shown;
  $("metrics-link").hidden = !shown;
}

export function resetStats() {
  samples.length = 0;
  previous = null;
  $("summary").replaceChildren();
  chips.clear();
  showGatewayWide(true);
}

// /v1/stats answered 403: this admin's credential covers some projects
// only, so gateway-wide numbers are not for it. Says so once and keeps
// quiet from then on.
export function statsUnavailable() {
  if (!available) return;
  resetStats();
  showGatewayWide(false);
  const value = chip("stats", "gateway-wide stats");
  value.parentElement.title =
    "Totals over every project (and /metrics) need an admin credential for all projects.";
  setText(value, "not available to a scoped admin");
}

// Records one /v1/stats answer and redraws the chips and charts.
export function recordStats(s) {
  if (!available) resetStats();
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
  trim(samples, now);

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
  drawChart($("chart-frames"), samples, "fps", fmtRate, 5);
  drawChart($("chart-cost"), samples, "cost", fmtCost, 0.01);
}
