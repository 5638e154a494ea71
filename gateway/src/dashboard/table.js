// The projects table (tbody #projects): one row per running project, kept
// in natural name order and updated in place. Exposes the duration of the
// last render as window.__corralLastRenderMs (and window.__corralRenderStats)
// so tests and curious operators can see what a refresh costs.

import { $, el, setText, isNum, fmtDuration, fmtCount, fmtCost, fmtBytes, stateClass, describeExit } from "./util.js";

// New rows created per task; the rest follow in later tasks, so hundreds of
// projects appearing at once never block the page for long.
const BUILD_BATCH = 25;
// Natural order: p2 before p10.
const byName = new Intl.Collator("en", { numeric: true }).compare;

const tbody = $("projects");
// project name → { tr, cells: [td], texts: [string], badge, state, busy, data }
const rows = new Map();
// The newest list rendered, so a deferred batch of an older one is dropped.
let latestList = null;
let selected = null;
const renderStats = { count: 0, last: 0, max: 0 };
window.__corralRenderStats = renderStats;
window.__corralLastRenderMs = 0;

const COLUMNS = [
  { cls: "name", text: (p) => String(p.project) },
  { cls: "state", text: (p) => String(p.state || "–") },
  { cls: "busy", text: (p) => (p.busy ? "busy " + fmtDuration(p.busy_since_secs) : "idle") },
  { cls: "num", text: (p) => (isNum(p.clients) ? String(p.clients) : "–") },
  { cls: "num", text: (p) => fmtDuration(p.uptime_secs) },
  { cls: "num", text: (p) => (isNum(p.restarts) ? String(p.restarts) : "–") },
  { cls: "num", text: (p) => (p.usage ? fmtCount(p.usage.input) + " / " + fmtCount(p.usage.output) : "–") },
  { cls: "num", text: (p) => fmtCost(isNum(p.cost_usd) ? p.cost_usd : p.usage && p.usage.cost_usd) },
  { cls: "num", text: (p) => fmtBytes(p.rss_bytes) },
];

function makeRow(project) {
  const tr = document.createElement("tr");
  tr.dataset.project = project;
  tr.tabIndex = 0;
  const cells = COLUMNS.map((column) => tr.appendChild(el("td", column.cls)));
  cells[0].title = project;
  const badge = cells[1].appendChild(el("span", "badge"));
  return { tr, cells, texts: COLUMNS.map(() => ""), badge, state: null, busy: null, data: null };
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
  if (added.length) insertInOrder(added);
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

// Inserts the rows of `added` (new projects) among the existing, already
// ordered rows, walking the table once.
function insertInOrder(added) {
  const needle = filterNeedle();
  added.sort(byName);
  let next = tbody.firstElementChild;
  for (const project of added) {
    while (next && byName(next.dataset.project, project) < 0) next = next.nextElementSibling;
    const tr = rows.get(project).tr;
    tr.hidden = !matchesFilter(project, needle);
    tr.classList.toggle("selected", project === selected);
    tbody.insertBefore(tr, next);
  }
}

export function clearProjects() {
  latestList = null;
  for (const row of rows.values()) row.tr.remove();
  rows.clear();
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

// Wires the filter box and row selection (click, Enter or Space).
export function initTable(onSelect) {
  $("project-filter").addEventListener("input", applyFilter);
  tbody.addEventListener("click", (event) => {
    const tr = event.target.closest("tr[data-project]");
    if (tr) onSelect(tr.dataset.project);
  });
  tbody.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" && event.key !== " ") return;
    const tr = event.target.closest("tr[data-project]");
    if (!tr) return;
    event.preventDefault();
    onSelect(tr.dataset.project);
  });
}
