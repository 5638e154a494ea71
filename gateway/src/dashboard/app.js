// corral dashboard: signs in with the admin token, polls the admin API once a
// second (projects table, summary and charts, the open project's detail) and
// wires the console. Plain ES modules, no dependencies, no build step:
//   util.js        DOM and formatting helpers
//   api.js         admin API fetches, token storage
//   table.js       the projects table, updated in place
//   stats.js       summary chips and charts from /v1/stats
//   detail.js      one project's detail and actions
//   console.js     the project WebSocket; transcript.js renders its stream,
//                  wire.js speaks the gateway's dialect

import { ADMIN_KEY, CLIENT_KEY, api, signedIn, Unauthorized } from "./api.js";
import { forgetClientToken, initConsole, openConsole } from "./console.js";
import { closeDetail, initDetail, refreshDetail, selectProject } from "./detail.js";
import { drawCharts, recordStats, resetStats } from "./stats.js";
import { clearProjects, initTable, renderProjects } from "./table.js";
import { $, setText, switchTab } from "./util.js";

const POLL_MS = 1000;
const REFUSED = "The gateway refused the admin token. Enter it again.";

// Bumped to cancel the running poll loop (sign out, refused token).
const poll = { timer: 0, generation: 0 };

// ---------------------------------------------------------------- session

function showSignIn(message) {
  stopPolling();
  sessionStorage.removeItem(ADMIN_KEY);
  $("signin").hidden = false;
  $("live").hidden = true;
  $("sign-out").hidden = !sessionStorage.getItem(CLIENT_KEY);
  setText($("token-message"), message || "");
  resetStats();
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

// One refresh: projects, stats and the open detail in parallel; then the
// next one, a second after this one started.
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
    if (projects.ok && stats.ok) setPollStatus("live", "ok");
    else setPollStatus("API error (HTTP " + (projects.ok ? stats.status : projects.status) + ")", "warn");
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
window.addEventListener("resize", drawCharts);

initTable(selectProject);
initDetail({ onUnauthorized: () => showSignIn(REFUSED), onOpenConsole: openConsole });
initConsole();
if (signedIn()) showLive();
else showSignIn("");
