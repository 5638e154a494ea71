// Small DOM and formatting helpers shared by the dashboard's modules. Every
// piece of data reaches the page through el()/setText() as text, never as
// markup.

export const PROJECT_NAME = /^[A-Za-z0-9._-]{1,64}$/;
const STATES = ["starting", "ready", "backoff", "failed", "stopping", "exited", "stopped"];

export const $ = (id) => document.getElementById(id);

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// Writes only when the text changed, so unchanged cells cost no layout.
export function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

export function isNum(n) {
  return typeof n === "number" && Number.isFinite(n);
}

export function fmtDuration(secs) {
  if (!isNum(secs)) return "–";
  const s = Math.max(0, Math.floor(secs));
  const pad = (n) => String(n).padStart(2, "0");
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + pad(s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h " + pad(Math.floor(s / 60) % 60) + "m";
  return Math.floor(s / 86400) + "d " + (Math.floor(s / 3600) % 24) + "h";
}

export function fmtCount(n) {
  if (!isNum(n)) return "–";
  if (n < 1000) return String(Math.round(n));
  if (n < 1e6) return (n / 1e3).toFixed(n < 1e4 ? 1 : 0) + "k";
  return (n / 1e6).toFixed(n < 1e7 ? 2 : 1) + "M";
}

export function fmtCost(usd) {
  if (!isNum(usd)) return "–";
  if (usd === 0) return "$0";
  if (usd < 0.01) return "$" + usd.toFixed(4);
  if (usd < 100) return "$" + usd.toFixed(2);
  return "$" + Math.round(usd);
}

export function fmtBytes(b) {
  if (!isNum(b)) return "–";
  if (b < 1024 * 1024) return (b / 1024).toFixed(0) + " KiB";
  if (b < 1024 * 1024 * 1024) return (b / 1048576).toFixed(1) + " MiB";
  return (b / 1073741824).toFixed(2) + " GiB";
}

export function fmtRate(r) {
  if (!isNum(r)) return "–";
  return r < 10 ? r.toFixed(1) : fmtCount(r);
}

// The CSS class of a child state; unknown states get a neutral one.
export function stateClass(state) {
  return STATES.includes(state) ? "state-" + state : "state-unknown";
}

export function describeExit(exit) {
  if (!exit || typeof exit !== "object") return "–";
  const parts = [String(exit.reason || "exited")];
  if (isNum(exit.code)) parts.push("code " + exit.code);
  if (isNum(exit.signal)) parts.push("signal " + exit.signal);
  return parts.join(" · ");
}

export function projectPath(project, suffix) {
  return "/v1/projects/" + encodeURIComponent(project) + (suffix || "");
}

// Shows one of the side panel's tabs ("detail" or "console").
export function switchTab(name) {
  for (const tab of ["detail", "console"]) {
    const active = tab === name;
    $("tab-" + tab).setAttribute("aria-selected", String(active));
    $("pane-" + tab).hidden = !active;
  }
}
