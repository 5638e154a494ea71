// corral dashboard: signs in with the admin token, polls the admin API once a
// second (projects table, summary and charts, gateway events, tokens, the
// open project's detail), greys everything out while the gateway cannot be
// reached, and wires the console. A 401 signs out; a 403 on the project
// list means the token is not an admin's, while a 403 on /v1/stats only
// means a scoped admin (the page goes on without gateway-wide numbers). Plain ES modules, no dependencies, no
// build step:
//   util.js        DOM and formatting helpers
//   api.js         admin API fetches, token storage
//   table.js       the projects table (every project directory), sortable
//   actions.js     start / stop / restart / abort, with a confirmation
//   stats.js       summary chips and charts from /v1/stats (chart.js draws)
//   history.js     per-project charts from successive polls
//   events.js      the tail of gateway events
//   tokens.js      the tokens panel: list, and revoke with a confirmation
//   detail.js      one project's detail and actions
//   console.js     the project WebSocket; transcript.js renders its stream,
//                  wire.js speaks the gateway's dialect

import { initActions } from "./actions.js";
import { ADMIN_KEY, CLIENT_KEY, api, errorOf, signedIn, Unauthorized } from "./api.js";
import { forgetClientToken, initConsole, openConsole } from "./console.js";
import { closeDetail, initDetail, refreshDetail, selectProject } from "./detail.js";
import { pollEvents, resetEvents } from "./events.js";
import { drawProjectCharts, recordProjects, resetHistory } from "./history.js";
import { drawCharts, recordStats, resetStats, statsUnavailable } from "./stats.js";
import { clearProjects, initTable, renderProjects } from "./table.js";
import { initTokens, pollTokens, resetTokens } from "./tokens.js";
import { $, setText, switchTab } from "./util.js";

const POLL_MS = 1000;
const REFUSED = "The gateway refused the admin token. Enter it again.";
const NOT_ADMIN = (error) =>
  "The gateway knows this token, but it is not an admin token (" + error + "). Enter an admin token.";

// Whether /v1/stats is asked. Its 403 (a scoped admin) stops that until the
// next sign-in: the answer will not change, and an open page would
// otherwise have every second logged and counted as a refused request.
let askStats = true;

// Bumped to cancel the running poll loop (sign out, refused token).
// `inFlight`: a refresh is under way; `soon`: the next one starts at once.
const poll = { timer: 0, generation: 0, inFlight: false, soon: false };

// ---------------------------------------------------------------- session

function showSignIn(message) {
  stopPolling();
  sessionStorage.removeItem(ADMIN_KEY);
  $("signin").hidden = false;
  $("live").hidden = true;
  $("sign-out").hidden = !sessionStorage.getItem(CLIENT_KEY);
  setText($("token-message"), message || "");
  resetStats();
  resetHistory();
  resetEvents();
  resetTokens();
  askStats = true;
  setStale(false);
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
  forgetClientToken();
  clearProjects();
  closeDetail();
  showSignIn("Signed out.");
}

// ---------------------------------------------------------------- polling

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

// Since when the gateway could not be reached (null: it answers). While
// it cannot, the page keeps the last numbers, greyed, under a banner.
let unreachableSince = null;

function setStale(stale) {
  if (stale && unreachableSince === null) unreachableSince = new Date();
  if (!stale) unreachableSince = null;
  document.body.classList.toggle("stale", stale);
  const banner = $("stale-banner");
  banner.hidden = !stale;
  if (stale) {
    const since = unreachableSince.toLocaleTimeString([], { hour12: false });
    setText(
      banner,
      "Gateway unreachable since " + since + ". Everything below is as it was then and may be " +
        "out of date; retrying every second.",
    );
  }
}

// One refresh: projects (every directory), stats, events, tokens (every
// few refreshes) and the open detail in parallel; then the next one, a
// second after this one started.
async function tick(generation) {
  const started = performance.now();
  poll.inFlight = true;
  try {
    const [projects, stats] = await Promise.all([
      api("GET", "/v1/projects?all=true"),
      askStats ? api("GET", "/v1/stats") : null,
      pollEvents(),
      pollTokens(),
      refreshDetail(),
    ]);
    if (generation !== poll.generation) return;
    if (projects.status === 403) {
      showSignIn(NOT_ADMIN(errorOf(projects)));
      return;
    }
    if (projects.ok && projects.body && Array.isArray(projects.body.projects)) {
      renderProjects(projects.body.projects);
      recordProjects(projects.body.projects);
    }
    if (stats && stats.ok && stats.body) recordStats(stats.body);
    else if (stats && stats.status === 403) {
      askStats = false;
      statsUnavailable();
    }
    // A proxy in front answers 502-504 when the gateway behind it is down.
    setStale(projects.status >= 502 && projects.status <= 504);
    const statsFine = !stats || stats.ok || stats.status === 403;
    if (projects.ok && statsFine) setPollStatus("live", "ok");
    else setPollStatus("API error (HTTP " + (projects.ok ? stats.status : projects.status) + ")", "warn");
  } catch (err) {
    if (generation !== poll.generation) return;
    if (err instanceof Unauthorized) {
      showSignIn("The gateway refused the admin token (" + err.message + "). Enter it again.");
      return;
    }
    setStale(true);
    setPollStatus("gateway unreachable, retrying", "warn");
  }
  if (generation !== poll.generation) return;
  poll.inFlight = false;
  const elapsed = performance.now() - started;
  const delay = poll.soon ? 0 : Math.max(100, POLL_MS - elapsed);
  poll.soon = false;
  poll.timer = setTimeout(() => tick(generation), delay);
}

// The next refresh now (after an action), or as soon as the one under way
// has finished.
function refreshSoon() {
  poll.soon = true;
  if (poll.inFlight || !signedIn()) return;
  clearTimeout(poll.timer);
  poll.timer = setTimeout(() => tick(poll.generation), 0);
}

// /metrics needs the admin token, which a plain link cannot send: fetch it
// and show the text in a new tab.
async function openMetrics(event) {
  event.preventDefault();
  try {
    const token = sessionStorage.getItem(ADMIN_KEY) || "";
    const res = await fetch("/metrics", { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
    const text = res.ok ? await res.text() : "GET /metrics answered HTTP " + res.status + "\n" + (await res.text());
    const url = URL.createObjectURL(new Blob([text], { type: "text/plain; charset=utf-8" }));
    const link = Object.assign(document.createElement("a"), { href: url, target: "_blank", rel: "noopener" });
    link.click();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (_) {
    setPollStatus("cannot fetch /metrics: gateway unreachable", "warn");
  }
}

// ------------------------------------------------------------------ start

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
$("tab-detail").addEventListener("click", () => switchTab("detail"));
$("tab-console").addEventListener("click", () => switchTab("console"));
window.addEventListener("resize", () => {
  drawCharts();
  drawProjectCharts();
});
$("tab-detail").addEventListener("click", drawProjectCharts);
$("metrics-link").addEventListener("click", openMetrics);

initActions(() => showSignIn(REFUSED));
initTable(selectProject, refreshSoon);
initDetail({ onUnauthorized: () => showSignIn(REFUSED), onOpenConsole: openConsole });
initTokens({ onUnauthorized: () => showSignIn(REFUSED), onChange: refreshSoon });
initConsole();
if (signedIn()) showLive();
else showSignIn("");
