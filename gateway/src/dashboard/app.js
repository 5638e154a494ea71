// corral dashboard: signs in with the admin token, polls the admin API once a
// second (projects table, detail, charts) and runs a console on a project's
// WebSocket. Plain DOM, no dependencies. Every piece of data is inserted as
// text (textContent / text nodes), never parsed as markup.
"use strict";

(() => {
  const POLL_MS = 1000;
  const REQUEST_TIMEOUT_MS = 5000;
  const HISTORY_MS = 5 * 60 * 1000;
  const ADMIN_KEY = "corral.adminToken";
  const CLIENT_KEY = "corral.clientToken";
  const PROJECT_KEY = "corral.consoleProject";
  const PROJECT_NAME = /^[A-Za-z0-9._-]{1,64}$/;
  const STATES = ["starting", "ready", "backoff", "failed", "stopping", "exited"];
  const MAX_BLOCKS = 1000;
  const MAX_RESULT_CHARS = 4000;

  const $ = (id) => document.getElementById(id);

  // ---------------------------------------------------------------- helpers

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  function isNum(n) {
    return typeof n === "number" && Number.isFinite(n);
  }

  function fmtDuration(secs) {
    if (!isNum(secs)) return "–";
    const s = Math.max(0, Math.floor(secs));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + String(s % 60).padStart(2, "0") + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + String(Math.floor(s / 60) % 60).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d " + (Math.floor(s / 3600) % 24) + "h";
  }

  function fmtCount(n) {
    if (!isNum(n)) return "–";
    if (n < 1000) return String(Math.round(n));
    if (n < 1e6) return (n / 1e3).toFixed(n < 1e4 ? 1 : 0) + "k";
    return (n / 1e6).toFixed(n < 1e7 ? 2 : 1) + "M";
  }

  function fmtCost(usd) {
    if (!isNum(usd)) return "–";
    if (usd === 0) return "$0";
    if (usd < 0.01) return "$" + usd.toFixed(4);
    if (usd < 100) return "$" + usd.toFixed(2);
    return "$" + Math.round(usd);
  }

  function fmtBytes(b) {
    if (!isNum(b)) return "–";
    if (b < 1024 * 1024) return (b / 1024).toFixed(0) + " KiB";
    if (b < 1024 * 1024 * 1024) return (b / 1048576).toFixed(1) + " MiB";
    return (b / 1073741824).toFixed(2) + " GiB";
  }

  function fmtRate(r) {
    if (!isNum(r)) return "–";
    return r < 10 ? r.toFixed(1) : fmtCount(r);
  }

  function stateClass(state) {
    return STATES.includes(state) ? "state-" + state : "state-unknown";
  }

  function describeExit(exit) {
    if (!exit || typeof exit !== "object") return "–";
    const parts = [String(exit.reason || "exited")];
    if (isNum(exit.code)) parts.push("code " + exit.code);
    if (isNum(exit.signal)) parts.push("signal " + exit.signal);
    return parts.join(" · ");
  }

  function projectPath(project, suffix) {
    return "/v1/projects/" + encodeURIComponent(project) + (suffix || "");
  }

  // ------------------------------------------------------------- admin API

  class Unauthorized extends Error {}

  function timeoutSignal() {
    if (typeof AbortSignal !== "undefined" && AbortSignal.timeout) {
      return AbortSignal.timeout(REQUEST_TIMEOUT_MS);
    }
    return undefined;
  }

  // Calls the admin API with the stored token; throws Unauthorized on
  // 401/403 and a plain Error when the gateway cannot be reached.
  async function api(method, path) {
    const token = sessionStorage.getItem(ADMIN_KEY) || "";
    const res = await fetch(path, {
      method,
      headers: { Authorization: "Bearer " + token, Accept: "application/json" },
      cache: "no-store",
      signal: timeoutSignal(),
    });
    if (res.status === 401 || res.status === 403) {
      throw new Unauthorized("HTTP " + res.status);
    }
    let body = null;
    try {
      body = await res.json();
    } catch (_) {
      body = null;
    }
    return { status: res.status, ok: res.ok, body };
  }

  // --------------------------------------------------------------- session

  function signedIn() {
    return !!sessionStorage.getItem(ADMIN_KEY);
  }

  function showSignIn(message) {
    stopPolling();
    sessionStorage.removeItem(ADMIN_KEY);
    $("signin").hidden = false;
    $("live").hidden = true;
    $("sign-out").hidden = !sessionStorage.getItem(CLIENT_KEY);
    setText($("token-message"), message || "");
    setText($("summary"), "");
    setPollStatus("", "");
    $("token-input").focus();
  }

  function showLive() {
    $("signin").hidden = true;
    $("live").hidden = false;
    $("sign-out").hidden = false;
    setText($("token-message"), "");
    // Lay the revealed view out now, so the first table render is measured
    // (and paid for) on its own.
    void $("live").offsetHeight;
    startPolling();
  }

  function signOut() {
    sessionStorage.removeItem(ADMIN_KEY);
    sessionStorage.removeItem(CLIENT_KEY);
    consoleDisconnect();
    $("console-token").value = "";
    clearProjects();
    closeDetail();
    samples.length = 0;
    lastStats = null;
    showSignIn("Signed out.");
    $("sign-out").hidden = true;
  }

  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token-input").value.trim();
    if (!token) {
      setText($("token-message"), "Enter the admin token.");
      return;
    }
    sessionStorage.setItem(ADMIN_KEY, token);
    $("token-input").value = "";
    showLive();
  });
  $("sign-out").addEventListener("click", signOut);

  // --------------------------------------------------------------- polling

  const poll = { timer: 0, generation: 0 };

  function setPollStatus(text, kind) {
    const node = $("poll-status");
    setText(node, text);
    node.className = "conn" + (kind ? " " + kind : "");
  }

  function startPolling() {
    stopPolling();
    tick(poll.generation);
  }

  function stopPolling() {
    poll.generation += 1;
    clearTimeout(poll.timer);
  }

  async function tick(generation) {
    const started = performance.now();
    try {
      const [projects, stats] = await Promise.all([
        api("GET", "/v1/projects"),
        api("GET", "/v1/stats"),
        refreshDetail(),
      ]);
      if (generation !== poll.generation) return;
      if (projects.ok && projects.body && Array.isArray(projects.body.projects)) {
        renderProjects(projects.body.projects);
      }
      if (stats.ok && stats.body) recordStats(stats.body);
      if (projects.ok && stats.ok) {
        setPollStatus("live", "ok");
      } else {
        setPollStatus("API error (HTTP " + (projects.ok ? stats.status : projects.status) + ")", "warn");
      }
    } catch (err) {
      if (generation !== poll.generation) return;
      if (err instanceof Unauthorized) {
        showSignIn("The gateway refused the admin token (" + err.message + "). Enter it again.");
        return;
      }
      setPollStatus("gateway unreachable, retrying", "warn");
    }
    if (generation !== poll.generation) return;
    const elapsed = performance.now() - started;
    poll.timer = setTimeout(() => tick(generation), Math.max(100, POLL_MS - elapsed));
  }

  // -------------------------------------------------------- projects table

  // project name → { tr, cells: [td], texts: [string], state, data }
  const rows = new Map();
  const tbody = $("projects");
  const BUILD_BATCH = 25;
  // Natural order: p2 before p10.
  const byName = new Intl.Collator("en", { numeric: true }).compare;
  let latestList = null; // the newest /v1/projects list, for deferred batches
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
    {
      cls: "num",
      text: (p) => (p.usage ? fmtCount(p.usage.input) + " / " + fmtCount(p.usage.output) : "–"),
    },
    { cls: "num", text: (p) => fmtCost(isNum(p.cost_usd) ? p.cost_usd : p.usage && p.usage.cost_usd) },
    { cls: "num", text: (p) => fmtBytes(p.rss_bytes) },
  ];

  function makeRow(project) {
    const tr = document.createElement("tr");
    tr.dataset.project = project;
    tr.tabIndex = 0;
    const cells = [];
    const texts = [];
    for (const column of COLUMNS) {
      const td = el("td", column.cls);
      tr.appendChild(td);
      cells.push(td);
      texts.push("");
    }
    cells[0].title = project;
    const badge = el("span", "badge");
    cells[1].appendChild(badge);
    return { tr, cells, texts, badge, state: null, busy: null, data: null };
  }

  function updateRow(row, p) {
    row.data = p;
    for (let i = 0; i < COLUMNS.length; i++) {
      const text = COLUMNS[i].text(p);
      if (row.texts[i] === text) continue;
      row.texts[i] = text;
      if (i === 1) row.badge.textContent = text;
      else row.cells[i].textContent = text;
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

  // Updates the table in place: only changed cells are written, new rows are
  // inserted at their place in name order without moving the others, and at most
  // BUILD_BATCH rows are created per task (the rest in follow-up tasks), so
  // no render blocks the page for long, even when hundreds of projects
  // appear at once.
  function renderProjects(list) {
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
    if (added.length) {
      const needle = filterNeedle();
      added.sort(byName);
      let next = tbody.firstElementChild;
      for (const project of added) {
        while (next && byName(next.dataset.project, project) < 0) next = next.nextElementSibling;
        const tr = rows.get(project).tr;
        tr.hidden = !matchesFilter(project, needle);
        tr.classList.toggle("selected", project === detail.project);
        tbody.insertBefore(tr, next);
      }
    }
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

  function clearProjects() {
    latestList = null;
    for (const row of rows.values()) row.tr.remove();
    rows.clear();
    setText($("project-count"), "");
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

  function markSelected() {
    for (const [project, row] of rows) {
      row.tr.classList.toggle("selected", project === detail.project);
    }
  }

  $("project-filter").addEventListener("input", applyFilter);
  tbody.addEventListener("click", (event) => {
    const tr = event.target.closest("tr[data-project]");
    if (tr) selectProject(tr.dataset.project);
  });
  tbody.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" && event.key !== " ") return;
    const tr = event.target.closest("tr[data-project]");
    if (!tr) return;
    event.preventDefault();
    selectProject(tr.dataset.project);
  });

  // ------------------------------------------------------ summary + charts

  const samples = []; // { t, fps, cost }, the last five minutes
  let lastStats = null; // { t, frames }
  const summaryChips = new Map(); // key → value span

  function sumValues(obj) {
    let total = 0;
    if (obj && typeof obj === "object") {
      for (const v of Object.values(obj)) if (isNum(v)) total += v;
    }
    return total;
  }

  function chip(key, label) {
    let value = summaryChips.get(key);
    if (!value || !value.isConnected) {
      const node = el("span", "chip");
      node.appendChild(el("span", "chip-label", label));
      value = el("span", "chip-value");
      node.appendChild(value);
      $("summary").appendChild(node);
      summaryChips.set(key, value);
    }
    return value;
  }

  function recordStats(s) {
    const now = performance.now();
    const frames = sumValues(s.frames_total);
    const cost = isNum(s.cost_usd_total) ? s.cost_usd_total : 0;
    if (lastStats) {
      const dt = (now - lastStats.t) / 1000;
      const delta = frames - lastStats.frames;
      // A negative delta means the gateway restarted and its counters reset.
      const fps = dt > 0 && delta >= 0 ? delta / dt : 0;
      samples.push({ t: now, fps, cost });
    }
    lastStats = { t: now, frames };
    while (samples.length && samples[0].t < now - HISTORY_MS) samples.shift();

    const c = s.children || {};
    setText(chip("uptime", "up"), fmtDuration(s.uptime_secs));
    setText(
      chip("children", "children"),
      (c.idle || 0) + " idle · " + (c.busy || 0) + " busy" +
        (c.starting ? " · " + c.starting + " starting" : "") +
        (c.backoff ? " · " + c.backoff + " backoff" : "") +
        (c.failed ? " · " + c.failed + " failed" : ""),
    );
    setText(chip("clients", "clients"), isNum(s.clients) ? String(s.clients) : "–");
    const t = s.tokens_total || {};
    setText(chip("tokens", "tokens"), fmtCount(t.input || 0) + " in · " + fmtCount(t.output || 0) + " out");
    setText(chip("cost", "cost"), fmtCost(cost));

    const latest = samples[samples.length - 1];
    setText($("frames-now"), latest ? fmtRate(latest.fps) + " /s" : "–");
    setText($("cost-now"), fmtCost(cost));
    drawChart($("chart-frames"), "fps", fmtRate, 5);
    drawChart($("chart-cost"), "cost", fmtCost, 0.01);
  }

  function niceCeiling(v) {
    const exp = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * exp) return m * exp;
    return 10 * exp;
  }

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
    const line = css.getPropertyValue("--chart-line").trim() || "#2563eb";
    const fill = css.getPropertyValue("--chart-fill").trim() || "rgba(37,99,235,0.12)";
    const grid = css.getPropertyValue("--chart-grid").trim() || "#e5e7eb";
    const muted = css.getPropertyValue("--chart-text").trim() || "#6b7280";
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const cw = w / dpr;
    const ch = h / dpr;
    ctx.clearRect(0, 0, cw, ch);

    let top = minTop;
    for (const p of samples) top = Math.max(top, p[key]);
    top = niceCeiling(top);
    const padL = 4;
    const padB = 14;
    const plotH = ch - padB - 4;
    const now = performance.now();
    // The window grows with the history, from one minute up to five.
    const oldest = samples.length ? samples[0].t : now;
    const span = Math.min(HISTORY_MS, Math.max(60000, now - oldest));
    const x = (t) => padL + ((t - (now - span)) / span) * (cw - padL * 2);
    const y = (v) => 4 + plotH - (v / top) * plotH;

    ctx.strokeStyle = grid;
    ctx.lineWidth = 1;
    for (let i = 0; i <= 2; i++) {
      const gy = Math.round(4 + (plotH * i) / 2) + 0.5;
      ctx.beginPath();
      ctx.moveTo(padL, gy);
      ctx.lineTo(cw - padL, gy);
      ctx.stroke();
    }
    ctx.fillStyle = muted;
    ctx.font = "10px system-ui, sans-serif";
    ctx.textBaseline = "top";
    ctx.textAlign = "left";
    ctx.fillText(fmt(top), padL + 2, 6);
    ctx.textBaseline = "bottom";
    ctx.fillText(Math.round(span / 60000) + " min ago", padL, ch);
    ctx.textAlign = "right";
    ctx.fillText("now", cw - padL, ch);

    if (samples.length < 2) return;
    ctx.beginPath();
    samples.forEach((p, i) => {
      if (i === 0) ctx.moveTo(x(p.t), y(p[key]));
      else ctx.lineTo(x(p.t), y(p[key]));
    });
    ctx.strokeStyle = line;
    ctx.lineWidth = 1.5;
    ctx.stroke();
    ctx.lineTo(x(samples[samples.length - 1].t), y(0));
    ctx.lineTo(x(samples[0].t), y(0));
    ctx.closePath();
    ctx.fillStyle = fill;
    ctx.fill();
  }

  // ---------------------------------------------------------------- detail

  const detail = { project: null };

  function switchTab(name) {
    for (const tab of ["detail", "console"]) {
      const active = tab === name;
      $("tab-" + tab).setAttribute("aria-selected", String(active));
      $("pane-" + tab).hidden = !active;
    }
  }

  $("tab-detail").addEventListener("click", () => switchTab("detail"));
  $("tab-console").addEventListener("click", () => switchTab("console"));

  function selectProject(project) {
    detail.project = project;
    markSelected();
    $("detail-placeholder").hidden = true;
    $("detail-body").hidden = false;
    setText($("detail-name"), project);
    setText($("detail-result"), "");
    const row = rows.get(project);
    if (row && row.data) renderDetail(row.data);
    switchTab("detail");
    refreshDetail().catch((err) => {
      if (err instanceof Unauthorized) showSignIn("The gateway refused the admin token. Enter it again.");
    });
  }

  function closeDetail() {
    detail.project = null;
    $("detail-placeholder").hidden = false;
    $("detail-body").hidden = true;
  }

  // Fetches the open project's detail; resolves to nothing (the caller is
  // the poll loop, which handles Unauthorized).
  async function refreshDetail() {
    const project = detail.project;
    if (!project || !signedIn()) return null;
    let res;
    try {
      res = await api("GET", projectPath(project));
    } catch (err) {
      if (err instanceof Unauthorized) throw err;
      return null;
    }
    if (detail.project !== project) return null;
    if (res.status === 404) renderDetailGone(project);
    else if (res.ok && res.body) renderDetail(res.body);
    return null;
  }

  function field(list, label, value) {
    list.appendChild(el("dt", null, label));
    list.appendChild(el("dd", null, value));
  }

  function renderDetail(p) {
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
    $("detail-fields").replaceChildren(list);

    if (Array.isArray(p.clients_detail)) {
      const clients = document.createDocumentFragment();
      for (const c of p.clients_detail) {
        const tr = document.createElement("tr");
        tr.appendChild(el("td", null, String(c.client_id)));
        tr.appendChild(el("td", null, String(c.role)));
        tr.appendChild(el("td", "num", isNum(c.lag) ? String(c.lag) : "–"));
        clients.appendChild(tr);
      }
      if (!p.clients_detail.length) {
        const tr = document.createElement("tr");
        const td = el("td", "muted", "no clients attached");
        td.colSpan = 3;
        tr.appendChild(td);
        clients.appendChild(tr);
      }
      $("detail-clients").replaceChildren(clients);
    }
    if (Array.isArray(p.stderr_tail)) {
      const pre = $("detail-stderr");
      const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
      const text = p.stderr_tail.length ? p.stderr_tail.map(String).join("\n") : "(empty)";
      if (pre.textContent !== text) {
        pre.textContent = text;
        if (atBottom) pre.scrollTop = pre.scrollHeight;
      }
    }
  }

  function renderDetailGone(project) {
    const badge = $("detail-state");
    setText(badge, "not running");
    badge.className = "badge state-exited";
    const list = document.createDocumentFragment();
    field(list, "Project", project);
    field(list, "Status", "no child runs; it starts when a client connects");
    $("detail-fields").replaceChildren(list);
    $("detail-clients").replaceChildren();
  }

  async function projectAction(action) {
    const project = detail.project;
    if (!project) return;
    const buttons = document.querySelectorAll("#detail [data-action]");
    buttons.forEach((b) => (b.disabled = true));
    const result = $("detail-result");
    result.className = "message";
    setText(result, action + " " + project + "…");
    try {
      const res = await api("POST", projectPath(project, "/" + action));
      const error = res.body && res.body.error ? String(res.body.error) : "HTTP " + res.status;
      result.className = "message " + (res.ok ? "ok" : "err");
      setText(
        result,
        res.ok ? action + " " + project + ": accepted" : action + " " + project + " failed: " + error,
      );
      refreshDetail().catch(() => {});
    } catch (err) {
      if (err instanceof Unauthorized) {
        showSignIn("The gateway refused the admin token. Enter it again.");
        return;
      }
      result.className = "message err";
      setText(result, action + " failed: gateway unreachable");
    } finally {
      buttons.forEach((b) => (b.disabled = false));
    }
  }

  document.querySelectorAll("#detail [data-action]").forEach((button) => {
    button.addEventListener("click", () => projectAction(button.dataset.action));
  });
  $("detail-console").addEventListener("click", () => {
    if (!detail.project) return;
    // Asking for another project's console ends the current session.
    if (con.ws && con.project !== detail.project) consoleDisconnect();
    $("console-project").value = detail.project;
    switchTab("console");
    if (!$("console-token").value) $("console-token").focus();
    else $("console-connect").focus();
  });

  // --------------------------------------------------------------- console

  const con = {
    ws: null,
    state: "disconnected", // connecting | authenticating | connected | running | disconnected
    project: null,
    nextId: 1,
    text: null, // the assistant text block deltas append to
    thinking: null,
    tools: new Map(), // tool-call id → { name, progress }
    scrollPending: false,
  };
  const output = $("console-output");
  const QUIET_EVENTS = new Set([
    "turn_start", "request_started", "cache_diagnostics", "assistant_start",
    "tool_use_start", "tool_use_args", "tool_use_end", "tool_execution_started",
    "assistant_message", "turn_recovery", "ext_alert", "ext_widget",
    "ext_widget_clear", "ext_chrome_clear",
  ]);

  function setConsoleState(state, text) {
    con.state = state;
    setText($("console-status"), text);
    $("console-dot").className = "dot " + state;
    const open = state === "connected" || state === "running";
    $("console-prompt").disabled = !open;
    $("console-send").disabled = !open;
    $("console-abort").disabled = !open;
    const idle = state === "disconnected";
    setText($("console-connect"), idle ? "Connect" : "Disconnect");
    $("console-project").disabled = !idle;
  }

  function scrollSoon() {
    const atBottom = output.scrollHeight - output.scrollTop - output.clientHeight < 48;
    if (!atBottom || con.scrollPending) return;
    con.scrollPending = true;
    requestAnimationFrame(() => {
      con.scrollPending = false;
      output.scrollTop = output.scrollHeight;
    });
  }

  function addBlock(kind, title, body) {
    scrollSoon();
    const block = el("div", "block " + kind);
    if (title) block.appendChild(el("div", "block-title", title));
    if (body !== undefined && body !== null) block.appendChild(el("pre", "block-body", body));
    output.appendChild(block);
    while (output.childElementCount > MAX_BLOCKS) output.firstElementChild.remove();
    return block;
  }

  function notice(text) {
    con.text = null;
    con.thinking = null;
    return addBlock("notice", null, null).appendChild(el("span", null, text));
  }

  function appendTo(kind, title, delta) {
    const key = kind === "thinking" ? "thinking" : "text";
    if (!con[key] || !con[key].isConnected) {
      const block = addBlock(kind, title, "");
      con[key] = block.lastChild;
      if (key === "text") con.thinking = null;
    }
    scrollSoon();
    con[key].appendChild(document.createTextNode(delta));
  }

  function clip(text) {
    if (text.length <= MAX_RESULT_CHARS) return text;
    return text.slice(0, MAX_RESULT_CHARS) + "\n… (" + (text.length - MAX_RESULT_CHARS) + " more characters)";
  }

  function contentText(content) {
    if (typeof content === "string") return content;
    if (!Array.isArray(content)) return "";
    return content
      .map((c) => (c && c.type === "text" ? String(c.text) : c && c.type === "image" ? "[image]" : ""))
      .join("\n");
  }

  function send(frame) {
    if (con.ws && con.ws.readyState === WebSocket.OPEN) con.ws.send(JSON.stringify(frame));
  }

  function consoleConnect() {
    const project = $("console-project").value.trim();
    const token = $("console-token").value;
    if (!PROJECT_NAME.test(project)) {
      addBlock("error", "Cannot connect", "Project names are 1–64 characters of A–Z, a–z, 0–9, '.', '_' and '-'.");
      return;
    }
    if (!token) {
      addBlock("error", "Cannot connect", "Enter a client token.");
      $("console-token").focus();
      return;
    }
    sessionStorage.setItem(CLIENT_KEY, token);
    sessionStorage.setItem(PROJECT_KEY, project);
    $("sign-out").hidden = false;
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + location.host + projectPath(project, "/rpc"));
    con.ws = ws;
    con.project = project;
    con.tools.clear();
    setConsoleState("connecting", "connecting to " + project + "…");
    ws.onopen = () => {
      if (con.ws !== ws) return;
      setConsoleState("authenticating", "saying hello…");
      ws.send(JSON.stringify({ id: "hello", type: "hello", token }));
    };
    ws.onmessage = (event) => {
      if (con.ws !== ws) return;
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch (_) {
        addBlock("error", "Unreadable frame", clip(String(event.data)));
        return;
      }
      if (frame && frame.type === "response") onResponse(frame);
      else if (frame && typeof frame.type === "string") onEvent(frame);
    };
    ws.onclose = (event) => {
      if (con.ws !== ws) return;
      con.ws = null;
      const why = event.code + (event.reason ? ": " + event.reason : "");
      notice("connection closed (" + why + ")");
      setConsoleState("disconnected", "disconnected (" + why + ")");
    };
  }

  function consoleDisconnect() {
    const ws = con.ws;
    if (!ws) return;
    con.ws = null;
    ws.close(1000, "bye");
    notice("disconnected");
    setConsoleState("disconnected", "disconnected");
  }

  function onResponse(frame) {
    if (frame.command === "hello" || frame.id === "hello") {
      if (frame.success) {
        const data = frame.data || {};
        const model = data.model ? " · " + data.model : "";
        notice("connected to " + con.project + model);
        setConsoleState("connected", "connected to " + con.project + model);
        $("console-prompt").focus();
      } else {
        addBlock("error", "Hello refused", String(frame.error || "the gateway refused the token"));
        setConsoleState("authenticating", "refused");
      }
      return;
    }
    if (!frame.success) {
      addBlock("error", (frame.command || "request") + " failed", String(frame.error || "unknown error"));
      if (frame.command === "prompt") setConsoleState("connected", "connected to " + con.project);
      return;
    }
    if (frame.command === "prompt") setConsoleState("running", "running…");
    else if (frame.command === "abort") notice("abort acknowledged");
  }

  function onEvent(frame) {
    switch (frame.type) {
      case "text_delta":
        appendTo("assistant", null, String(frame.delta ?? ""));
        break;
      case "thinking_delta":
        appendTo("thinking", "thinking", String(frame.delta ?? ""));
        break;
      case "user_message":
        con.text = null;
        addBlock("user", "you", contentText(frame.content));
        break;
      case "tool_call": {
        con.text = null;
        const block = addBlock("tool", "tool call · " + String(frame.name), JSON.stringify(frame.args ?? {}, null, 2));
        con.tools.set(String(frame.id), { name: String(frame.name), block, progress: null });
        break;
      }
      case "tool_progress": {
        const tool = con.tools.get(String(frame.id));
        if (!tool) break;
        if (!tool.progress) tool.progress = tool.block.appendChild(el("pre", "block-progress", ""));
        tool.progress.appendChild(document.createTextNode(String(frame.text ?? "") + "\n"));
        scrollSoon();
        break;
      }
      case "tool_result": {
        con.text = null;
        const tool = con.tools.get(String(frame.id));
        const name = tool ? tool.name : "tool";
        const kind = frame.is_error ? "result err" : "result";
        addBlock(kind, (frame.is_error ? "error · " : "result · ") + name, clip(contentText(frame.content)) || "(no output)");
        break;
      }
      case "plan_update": {
        const plan = Array.isArray(frame.plan) ? frame.plan : [];
        const lines = plan.map((s) => (s.status === "completed" ? "[x] " : s.status === "in_progress" ? "[~] " : "[ ] ") + String(s.step));
        addBlock("tool", "plan", (frame.explanation ? String(frame.explanation) + "\n" : "") + lines.join("\n"));
        break;
      }
      case "turn_end":
        con.text = null;
        con.thinking = null;
        if (frame.stop === "error") addBlock("error", "turn failed", String(frame.error || "the model call failed"));
        else if (frame.stop === "aborted") notice("aborted");
        else if (frame.stop === "length") notice("stopped: output limit reached");
        break;
      case "retry_scheduled":
        notice("retrying in " + (isNum(frame.delay_ms) ? (frame.delay_ms / 1000).toFixed(1) + " s" : "a moment"));
        break;
      case "error":
        addBlock("error", "error", String(frame.message || "unknown error"));
        break;
      case "compact_done":
        notice("conversation compacted");
        break;
      case "usage": {
        const u = frame.cumulative && typeof frame.cumulative === "object" ? frame.cumulative : frame;
        setText($("console-usage"), fmtCount(u.input) + " in · " + fmtCount(u.output) + " out · " + fmtCost(u.cost_usd));
        break;
      }
      case "done":
        con.text = null;
        con.thinking = null;
        if (con.state === "running") setConsoleState("connected", "connected to " + con.project);
        break;
      case "child_started":
        notice("agent started" + (isNum(frame.pid) ? " (pid " + frame.pid + ")" : ""));
        break;
      case "child_exited":
        notice("agent exited" + (frame.reason ? " (" + String(frame.reason) + ")" : ""));
        if (con.state === "running") setConsoleState("connected", "connected to " + con.project);
        break;
      default:
        if (!QUIET_EVENTS.has(frame.type)) notice("event: " + frame.type);
    }
  }

  function sendPrompt() {
    const prompt = $("console-prompt");
    const message = prompt.value;
    if (!message.trim() || (con.state !== "connected" && con.state !== "running")) return;
    send({ id: "p" + con.nextId++, type: "prompt", message });
    prompt.value = "";
    if (con.state === "connected") setConsoleState("connected", "sending…");
  }

  $("console-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (con.state === "disconnected") consoleConnect();
    else consoleDisconnect();
  });
  $("console-send").addEventListener("click", sendPrompt);
  $("console-abort").addEventListener("click", () => {
    send({ id: "a" + con.nextId++, type: "abort" });
    notice("abort requested");
  });
  $("console-prompt").addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    if (event.ctrlKey || event.altKey || event.metaKey) return;
    event.preventDefault();
    sendPrompt();
  });

  // ------------------------------------------------------------------ start

  $("console-token").value = sessionStorage.getItem(CLIENT_KEY) || "";
  $("console-project").value = sessionStorage.getItem(PROJECT_KEY) || "";
  setConsoleState("disconnected", "disconnected");
  window.addEventListener("resize", () => {
    drawChart($("chart-frames"), "fps", fmtRate, 5);
    drawChart($("chart-cost"), "cost", fmtCost, 0.01);
  });
  if (signedIn()) showLive();
  else showSignIn("");
})();
