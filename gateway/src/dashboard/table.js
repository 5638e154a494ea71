// The projects table (tbody #projects): one row per project directory,
// running or not, updated in place and kept sorted by the column whose
// header was clicked last (natural name order at first). Each row has its
// actions: Start for a project that does not run, Restart and Stop (which
// ask first) for one that does. Exposes the duration of the last render as
// window.__corralLastRenderMs (and window.__corralRenderStats) so tests and
// curious operators can see what a refresh costs.

import { runAction } from "./actions.js";
import { $, el, setText, isNum, fmtDuration, fmtCount, fmtCost, fmtBytes, stateClass, describeExit } from "./util.js";

// New rows created per task; the rest follow in later tasks, so hundreds of
// projects appearing at once never block the page for long.
const BUILD_BATCH = 25;
// Natural order: p2 before p10.
const byName = new Intl.Collator("en", { numeric: true }).compare;

const tbody = $("projects");
// project name → { tr, cells: [td], texts: [string], badge, buttons, state, busy, running, data }
const rows = new Map();
// The rows in the order they are in the table.
let order = [];
// The column sorted by (a key of SORT_VALUES) and its direction (1 or -1).
const sort = { key: "project", dir: 1 };
// The newest list rendered, so a deferred batch of an older one is dropped.
let latestList = null;
let selected = null;
const renderStats = { count: 0, last: 0, max: 0 };
window.__corralRenderStats = renderStats;
window.__corralLastRenderMs = 0;

const COLUMNS = [
  { cls: "name", text: (p) => String(p.project) },
  { cls: "state", text: (p) => String(p.state || "–") },
  { cls: "busy", text: (p) => (!isRunning(p) ? "–" : p.busy ? "busy " + fmtDuration(p.busy_since_secs) : "idle") },
  { cls: "num", text: (p) => (isNum(p.clients) ? String(p.clients) : "–") },
  { cls: "num", text: (p) => fmtDuration(p.uptime_secs) },
  { cls: "num", text: (p) => (isNum(p.restarts) ? String(p.restarts) : "–") },
  { cls: "num", text: (p) => (p.usage ? fmtCount(p.usage.input) + " / " + fmtCount(p.usage.output) : "–") },
  { cls: "num", text: (p) => fmtCost(isNum(p.cost_usd) ? p.cost_usd : p.usage && p.usage.cost_usd) },
  { cls: "num", text: (p) => fmtBytes(p.rss_bytes) },
];

// Where a child state sorts: trouble first, then running, then not running.
const STATE_RANK = { failed: 0, backoff: 1, starting: 2, stopping: 3, busy: 4, ready: 5, idle: 5, stopped: 9 };
const num = (n) => (isNum(n) ? n : null);
// Sort value of each sortable column; null sorts last either way.
const SORT_VALUES = {
  project: () => null,
  state: (p) => STATE_RANK[p.state] ?? 8,
  busy: (p) => (p.busy ? num(p.busy_since_secs) ?? 0 : isRunning(p) ? -1 : null),
  clients: (p) => num(p.clients),
  uptime: (p) => num(p.uptime_secs),
  restarts: (p) => num(p.restarts),
  tokens: (p) => (p.usage ? (num(p.usage.input) ?? 0) + (num(p.usage.output) ?? 0) : null),
  cost: (p) => num(p.cost_usd),
  memory: (p) => num(p.rss_bytes),
};

// Whether a listed project has a child (the admin API lists directories
// that do not as `running: false`).
function isRunning(p) {
  return p.running !== false;
}

function makeRow(project) {
  const tr = document.createElement("tr");
  tr.dataset.project = project;
  tr.tabIndex = 0;
  const cells = COLUMNS.map((column) => tr.appendChild(el("td", column.cls)));
  cells[0].title = project;
  const badge = cells[1].appendChild(el("span", "badge"));
  const actions = tr.appendChild(el("td", "row-actions"));
  const buttons = {};
  for (const action of ["start", "restart", "stop"]) {
    const button = actions.appendChild(el("button", "small", action[0].toUpperCase() + action.slice(1)));
    button.type = "button";
    button.dataset.action = action;
    buttons[action] = button;
  }
  return { tr, cells, texts: COLUMNS.map(() => ""), badge, buttons, state: null, busy: null, running: null, data: null };
}

function updateRow(row, p) {
  row.data = p;
  for (let i = 0; i < COLUMNS.length; i++) {
    const text = COLUMNS[i].text(p);
    if (row.texts[i] === text) continue;
    row.texts[i] = text;
    (i === 1 ? row.badge : row.cells[i]).textContent = text;
  }
  if (row.state !== p.state) {
    row.state = p.state;
    row.badge.className = "badge " + stateClass(p.state);
  }
  const exit = p.last_exit ? "last exit: " + describeExit(p.last_exit) : "";
  if (row.cells[1].title !== exit) row.cells[1].title = exit;
  const busy = !!p.busy;
  if (row.busy !== busy) {
    row.busy = busy;
    row.cells[2].classList.toggle("is-busy", busy);
  }
  const running = isRunning(p);
  if (row.running !== running) {
    row.running = running;
    row.tr.classList.toggle("not-running", !running);
    row.buttons.start.hidden = running;
    row.buttons.restart.hidden = !running;
    row.buttons.stop.hidden = !running;
  }
}

// Renders one /v1/projects list: only changed cells are written, rows of
// projects that stopped are removed, new rows are inserted at their place
// without moving the others (at most BUILD_BATCH per call).
export function renderProjects(list) {
  const t0 = performance.now();
  latestList = list;
  const seen = new Set();
  const added = [];
  let deferred = false;
  for (const p of list) {
    if (!p || typeof p.project !== "string") continue;
    seen.add(p.project);
    let row = rows.get(p.project);
    if (!row) {
      if (added.length >= BUILD_BATCH) {
        deferred = true;
        continue;
      }
      row = makeRow(p.project);
      rows.set(p.project, row);
      added.push(p.project);
    }
    updateRow(row, p);
  }
  let removed = false;
  for (const [project, row] of rows) {
    if (!seen.has(project)) {
      row.tr.remove();
      rows.delete(project);
      removed = true;
    }
  }
  if (added.length) prepareNew(added);
  applyOrder();
  if (added.length || removed) {
    setText($("project-count"), String(rows.size));
    $("projects-empty").hidden = rows.size > 0;
  }
  if (deferred) {
    setTimeout(() => {
      if (latestList === list) renderProjects(list);
    }, 0);
  }
  // Reading a layout property makes the measurement include the style and
  // layout work the update caused, not just the script.
  if (!document.hidden) void tbody.offsetHeight;
  const ms = performance.now() - t0;
  renderStats.count += 1;
  renderStats.last = ms;
  renderStats.max = Math.max(renderStats.max, ms);
  window.__corralLastRenderMs = ms;
}

// New rows get the filter and the selection before they are shown.
function prepareNew(added) {
  const needle = filterNeedle();
  for (const project of added) {
    const tr = rows.get(project).tr;
    tr.hidden = !matchesFilter(project, needle);
    tr.classList.toggle("selected", project === selected);
  }
}

function compareRows(a, b) {
  const va = SORT_VALUES[sort.key](a.data);
  const vb = SORT_VALUES[sort.key](b.data);
  if (va !== vb) {
    if (va === null) return 1;
    if (vb === null) return -1;
    return va < vb ? -sort.dir : sort.dir;
  }
  const byProject = byName(a.tr.dataset.project, b.tr.dataset.project);
  return sort.key === "project" ? byProject * sort.dir : byProject;
}

// Puts the rows in the sorted order, moving rows only when it changed.
function applyOrder() {
  const sorted = [...rows.values()].sort(compareRows);
  const same = sorted.length === order.length && sorted.every((row, i) => row === order[i]);
  if (same) return;
  let next = tbody.firstElementChild;
  for (const row of sorted) {
    if (row.tr === next) next = next.nextElementSibling;
    else tbody.insertBefore(row.tr, next);
  }
  order = sorted;
}

function sortBy(key) {
  if (sort.key === key) sort.dir = -sort.dir;
  else Object.assign(sort, { key, dir: 1 });
  for (const th of document.querySelectorAll("table.projects th[data-sort]")) {
    if (th.dataset.sort === key) th.setAttribute("aria-sort", sort.dir > 0 ? "ascending" : "descending");
    else th.removeAttribute("aria-sort");
  }
  applyOrder();
}

export function clearProjects() {
  latestList = null;
  for (const row of rows.values()) row.tr.remove();
  rows.clear();
  order = [];
  setText($("project-count"), "");
}

// The last data rendered for `project`, if it has a row.
export function rowData(project) {
  const row = rows.get(project);
  return row ? row.data : null;
}

export function markSelected(project) {
  selected = project;
  for (const [name, row] of rows) row.tr.classList.toggle("selected", name === project);
}

function filterNeedle() {
  return $("project-filter").value.trim().toLowerCase();
}

function matchesFilter(project, needle) {
  return needle === "" || project.toLowerCase().includes(needle);
}

function applyFilter() {
  const needle = filterNeedle();
  for (const [project, row] of rows) {
    const hide = !matchesFilter(project, needle);
    if (row.tr.hidden !== hide) row.tr.hidden = hide;
  }
}

// A row's action button: runs it and says how it went above the table;
// `onDone(project)` refreshes what shows the project.
async function rowAction(button, project, onDone) {
  const result = $("table-result");
  button.disabled = true;
  result.className = "message";
  setText(result, button.dataset.action + " " + project + "…");
  try {
    const outcome = await runAction(button.dataset.action, project);
    if (!outcome) {
      setText(result, "");
      return;
    }
    result.className = "message " + (outcome.ok ? "ok" : "err");
    setText(result, outcome.text);
    onDone(project);
  } finally {
    button.disabled = false;
  }
}

// Wires the filter box, the sortable headers, the row buttons and row
// selection (click, Enter or Space). onAction(project): an action ran.
export function initTable(onSelect, onAction) {
  $("project-filter").addEventListener("input", applyFilter);
  for (const th of document.querySelectorAll("table.projects th[data-sort]")) {
    th.querySelector("button").addEventListener("click", () => sortBy(th.dataset.sort));
  }
  tbody.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    const tr = event.target.closest("tr[data-project]");
    if (button && tr) rowAction(button, tr.dataset.project, onAction);
    else if (tr) onSelect(tr.dataset.project);
  });
  tbody.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" && event.key !== " ") return;
    if (event.target.closest("button")) return;
    const tr = event.target.closest("tr[data-project]");
    if (!tr) return;
    event.preventDefault();
    onSelect(tr.dataset.project);
  });
}
