// The detail pane (#detail) of one project: its fields, attached clients and
// stderr tail from /v1/projects/{p}, its charts (history.js), and the Start
// (when it does not run) or Restart / Stop / Abort buttons.

import { runAction } from "./actions.js";
import { api, signedIn, Unauthorized } from "./api.js";
import { showProjectCharts } from "./history.js";
import { rowData, markSelected } from "./table.js";
import {
  $, el, setText, isNum, fmtDuration, fmtCount, fmtCost, fmtBytes, stateClass, describeExit,
  projectPath, switchTab,
} from "./util.js";

let current = null; // the project shown, or null
let hooks = { onUnauthorized: () => {}, onOpenConsole: () => {} };

export function detailProject() {
  return current;
}

export function selectProject(project) {
  current = project;
  markSelected(project);
  $("detail-placeholder").hidden = true;
  $("detail-body").hidden = false;
  setText($("detail-name"), project);
  setText($("detail-result"), "");
  const known = rowData(project);
  if (known && known.running === false) renderGone(project);
  else if (known) renderDetail(known);
  switchTab("detail");
  showProjectCharts(project);
  refreshDetail().catch((err) => {
    if (err instanceof Unauthorized) hooks.onUnauthorized();
  });
}

export function closeDetail() {
  current = null;
  showProjectCharts(null);
  markSelected(null);
  $("detail-placeholder").hidden = false;
  $("detail-body").hidden = true;
}

// Fetches and shows the open project's detail. Throws Unauthorized (the poll
// loop handles it); other failures leave the last view in place.
export async function refreshDetail() {
  const project = current;
  if (!project || !signedIn()) return;
  let res;
  try {
    res = await api("GET", projectPath(project));
  } catch (err) {
    if (err instanceof Unauthorized) throw err;
    return;
  }
  if (current !== project) return;
  if (res.status === 404) renderGone(project);
  else if (res.ok && res.body) renderDetail(res.body);
}

function field(list, label, value) {
  list.appendChild(el("dt", null, label));
  list.appendChild(el("dd", null, value));
}

// Start for a project that does not run; the others for one that does.
function showActions(running) {
  document.querySelectorAll("#detail [data-action]").forEach((button) => {
    button.hidden = (button.dataset.action === "start") === running;
  });
}

function renderDetail(p) {
  showActions(true);
  const badge = $("detail-state");
  setText(badge, String(p.state || "–"));
  badge.className = "badge " + stateClass(p.state);
  const u = p.usage || {};
  const list = document.createDocumentFragment();
  field(list, "PID", isNum(p.pid) ? String(p.pid) : "–");
  field(list, "Busy", p.busy ? "yes, for " + fmtDuration(p.busy_since_secs) : "no");
  field(list, "Uptime", fmtDuration(p.uptime_secs));
  field(list, "Restarts", isNum(p.restarts) ? String(p.restarts) : "–");
  field(list, "Last exit", describeExit(p.last_exit));
  field(list, "Model", p.model ? String(p.model) : "–");
  field(list, "Tokens in / out", fmtCount(u.input) + " / " + fmtCount(u.output));
  field(list, "Reasoning", fmtCount(u.reasoning));
  field(list, "Cache read / write", fmtCount(u.cache_read) + " / " + fmtCount(u.cache_write));
  field(list, "Cost", fmtCost(isNum(p.cost_usd) ? p.cost_usd : u.cost_usd));
  field(list, "Memory", fmtBytes(p.rss_bytes));
  field(list, "CPU", isNum(p.cpu_seconds) ? p.cpu_seconds.toFixed(2) + " s" : "–");
  field(list, "Last seq", isNum(p.last_seq) ? String(p.last_seq) : "–");
  field(list, "MCP servers", describeMcp(p.mcp));
  $("detail-fields").replaceChildren(list);
  if (Array.isArray(p.clients_detail)) renderClients(p.clients_detail);
  if (Array.isArray(p.stderr_tail)) renderStderr(p.stderr_tail);
}

// "docs: connected, 4 tools; tracker: failed (timed out)", or "–" when
// the agent reported none. Text only: an error is the server's words.
function describeMcp(servers) {
  if (!Array.isArray(servers) || !servers.length) return "–";
  return servers
    .map((s) => {
      const tools = isNum(s && s.tools) ? ", " + s.tools + " tools" : "";
      const error = s && s.error ? " (" + String(s.error) + ")" : "";
      return String(s && s.name) + ": " + String(s && s.state) + tools + error;
    })
    .join("; ");
}

function renderClients(clients) {
  const body = document.createDocumentFragment();
  for (const c of clients) {
    const tr = body.appendChild(document.createElement("tr"));
    tr.appendChild(el("td", null, String(c && c.client_id)));
    tr.appendChild(el("td", null, String(c && c.role)));
    tr.appendChild(el("td", "num", c && isNum(c.lag) ? String(c.lag) : "–"));
  }
  if (!clients.length) {
    const td = body.appendChild(document.createElement("tr")).appendChild(el("td", "muted", "no clients attached"));
    td.colSpan = 3;
  }
  $("detail-clients").replaceChildren(body);
}

// Replaces the stderr text, staying scrolled to the end if it was there.
function renderStderr(lines) {
  const pre = $("detail-stderr");
  const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
  const text = lines.length ? lines.map(String).join("\n") : "(empty)";
  if (pre.textContent === text) return;
  pre.textContent = text;
  if (atBottom) pre.scrollTop = pre.scrollHeight;
}

// A 404: no child runs. The last stderr stays, as it may say why.
function renderGone(project) {
  showActions(false);
  const badge = $("detail-state");
  setText(badge, "stopped");
  badge.className = "badge state-stopped";
  const list = document.createDocumentFragment();
  field(list, "Project", project);
  field(list, "Status", "no agent runs; press Start, or connect a client");
  $("detail-fields").replaceChildren(list);
  $("detail-clients").replaceChildren();
}

// Runs start / restart / stop / abort (asking first where needed) and
// shows the outcome under the buttons.
async function projectAction(action) {
  const project = current;
  if (!project) return;
  const buttons = document.querySelectorAll("#detail [data-action]");
  buttons.forEach((b) => (b.disabled = true));
  const result = $("detail-result");
  result.className = "message";
  setText(result, action + " " + project + "…");
  try {
    const outcome = await runAction(action, project);
    if (current !== project) return;
    if (!outcome) {
      setText(result, "");
      return;
    }
    result.className = "message " + (outcome.ok ? "ok" : "err");
    setText(result, outcome.text);
    refreshDetail().catch(() => {});
  } finally {
    buttons.forEach((b) => (b.disabled = false));
  }
}

// onUnauthorized(): the admin token was refused; onOpenConsole(project):
// the "Open console" button.
export function initDetail(callbacks) {
  hooks = callbacks;
  document.querySelectorAll("#detail [data-action]").forEach((button) => {
    button.addEventListener("click", () => projectAction(button.dataset.action));
  });
  $("detail-console").addEventListener("click", () => {
    if (current) hooks.onOpenConsole(current);
  });
}
