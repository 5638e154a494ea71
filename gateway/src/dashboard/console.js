// The console: one WebSocket to ws(s)://HOST/v1/projects/{p}/rpc, opened
// with a client token (kept in sessionStorage), a prompt box (Enter sends,
// Shift+Enter adds a line) and Abort. It speaks the gateway's dialect (the
// wire module); the transcript module renders what arrives; this one owns
// the connection and its state.
//
// On connect it loads the conversation so far (the dialect's get_messages;
// letscode, which has none, replays the gateway's event ring from the
// start). It keeps the last event `seq` in sessionStorage, and after a
// reload of the page reconnects by itself with `resume_after` that seq.
// Refusals are said in words (refusal.js), HTTP ones included.

import { api, CLIENT_KEY, PROJECT_KEY } from "./api.js";
import { closeWords, explainFailure, preflight } from "./refusal.js";
import { createWire } from "./wire.js";
import { addBlock, newSession, notice, renderEvent, renderHistory } from "./transcript.js";
import { $, setText, fmtCount, fmtCost, projectPath, PROJECT_NAME, switchTab } from "./util.js";

// { project, seq, live }: the last event seen, and whether the console was
// connected (so a reload reconnects).
const SESSION_KEY = "corral.consoleSession";
// Pages of history followed at most (Zi answers 100 messages a page).
const MAX_HISTORY_PAGES = 20;

const con = {
  ws: null,
  // disconnected | connecting | authenticating | connected | running
  state: "disconnected",
  project: null,
  nextId: 1,
  wire: createWire("zut"),
  // Events held back until the history has been shown; null when none is
  // awaited.
  held: null,
  historyPages: 0,
  // The last event seq seen, and the timer that saves it.
  seq: null,
  seqTimer: 0,
};

function savedSession() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(SESSION_KEY) || "null");
    return saved && typeof saved === "object" ? saved : null;
  } catch (_) {
    return null;
  }
}

// Remembers the last event seen; written to sessionStorage a little later
// (or when the page goes away), not once per streamed delta.
function noteSeq(seq) {
  con.seq = seq;
  if (con.seqTimer) return;
  con.seqTimer = setTimeout(flushSeq, 300);
}

function flushSeq() {
  clearTimeout(con.seqTimer);
  con.seqTimer = 0;
  if (con.seq !== null && con.project) saveSession({ seq: con.seq });
}

function saveSession(changes) {
  const saved = savedSession();
  const base = saved && saved.project === con.project ? saved : { project: con.project, seq: null, live: false };
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(Object.assign(base, changes)));
}

// The gateway's dialect; zut when /v1/stats cannot say.
async function gatewayDialect() {
  try {
    // Any admin may list projects (a scoped admin may not read /v1/stats).
    const list = await api("GET", "/v1/projects");
    return (list.ok && list.body && list.body.dialect) || "zut";
  } catch (_) {
    return "zut";
  }
}

function setState(state, text) {
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

function ready() {
  setState("connected", "connected to " + con.project);
}

function send(frame) {
  if (con.ws && con.ws.readyState === WebSocket.OPEN) con.ws.send(JSON.stringify(frame));
}

// `resume`: reconnecting after a reload, from the seq saved then.
async function connect(resume) {
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
  setState("connecting", "connecting to " + project + "…");
  const [dialect, refusal] = await Promise.all([gatewayDialect(), preflight(project, token)]);
  if (con.state !== "connecting" || con.ws) return; // cancelled meanwhile
  if (refusal) {
    addBlock("error", "Cannot connect to " + project, refusal);
    setState("disconnected", "refused: " + refusal.split(/[.:]/)[0]);
    return;
  }
  const wire = createWire(dialect);
  const saved = savedSession();
  const seq = resume && saved && saved.project === project && Number.isInteger(saved.seq) ? saved.seq : null;
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(scheme + location.host + projectPath(project, "/rpc"));
  con.ws = ws;
  con.wire = wire;
  con.project = project;
  // Events wait for the history; the ring's replay is the history itself.
  con.held = wire.history ? [] : null;
  con.seq = null;
  con.historyPages = 0;
  newSession();
  setState("connecting", "connecting to " + project + "…");
  let opened = false;
  ws.onopen = () => {
    if (con.ws !== ws) return;
    opened = true;
    setState("authenticating", "saying hello…");
    // Without a history command, the ring replayed from its start is one.
    const from = wire.history ? seq : 0;
    if (seq !== null) notice("resuming after event " + seq);
    ws.send(JSON.stringify(wire.hello(token, from)));
  };
  ws.onmessage = (event) => {
    if (con.ws !== ws) return;
    let frame;
    try {
      frame = JSON.parse(event.data);
    } catch (_) {
      addBlock("error", "Unreadable frame", String(event.data).slice(0, 2000));
      return;
    }
    if (!frame || typeof frame !== "object") return;
    if (Number.isInteger(frame.seq)) noteSeq(frame.seq);
    for (const f of wire.inbound(frame)) {
      if (f && f.type === "response") onResponse(f);
      else if (f && typeof f.type === "string") onEvent(f);
    }
  };
  ws.onclose = async (event) => {
    if (con.ws !== ws) return;
    con.ws = null;
    flushHeld();
    const why = closeWords(event.code, event.reason);
    setState("disconnected", "disconnected (" + why + ")");
    if (!opened) {
      // The upgrade itself failed: ask the gateway why, in words.
      const explained = await explainFailure(project, token);
      addBlock("error", "Cannot connect to " + project, explained);
      if (con.state === "disconnected" && !con.ws) setState("disconnected", "refused: " + explained.split(/[.:]/)[0]);
      return;
    }
    notice("connection closed (" + why + ")");
  };
}

export function disconnect() {
  const ws = con.ws;
  if (!ws) {
    if (con.state !== "disconnected") setState("disconnected", "disconnected");
    return;
  }
  con.ws = null;
  con.held = null;
  saveSession({ live: false });
  ws.close(1000, "bye");
  notice("disconnected");
  setState("disconnected", "disconnected");
}

// Shows the events held back while the history loaded. Runs that ended
// before the history was taken are in it already; what follows the last
// `done` belongs to a run still going, and is shown (but for its prompt,
// also in the history).
function flushHeld() {
  const held = con.held;
  con.held = null;
  if (!held) return;
  let last = -1;
  held.forEach((f, i) => {
    if (f.type === "done") last = i;
  });
  for (const f of held.slice(last + 1)) if (f.type !== "user_message") onEvent(f);
}

function onHistory(frame) {
  const data = frame.data || {};
  if (!frame.success) {
    addBlock("error", "Cannot load the conversation", String(frame.error || "get_messages failed"));
  } else if (Array.isArray(data.messages)) {
    if (con.historyPages === 0 && data.messages.length) notice("the conversation so far");
    renderHistory(data.messages);
    con.historyPages += 1;
    // A paged answer: ask for the next page before showing what is new.
    if (Number.isInteger(data.next) && con.historyPages < MAX_HISTORY_PAGES) {
      send(con.wire.history(data.next));
      return;
    }
  }
  flushHeld();
}

function onResponse(frame) {
  if (frame.id === "hello") {
    if (frame.success) {
      const model = frame.data && frame.data.model ? " · " + frame.data.model : "";
      notice("connected to " + con.project + model);
      setState("connected", "connected to " + con.project + model);
      saveSession({ live: true });
      const gateway = (frame.data && frame.data.gateway) || {};
      if (frame.data && (frame.data.gap || gateway.gap)) notice("some events were missed while away");
      if (con.wire.history) send(con.wire.history(0));
      else flushHeld();
      $("console-prompt").focus();
    } else {
      addBlock("error", "Hello refused", String(frame.error || "the gateway refused the token"));
      setState("authenticating", "refused");
    }
    return;
  }
  if (frame.id === "history" && frame.command === "get_messages") {
    onHistory(frame);
    return;
  }
  if (!frame.success) {
    addBlock("error", (frame.command || "request") + " failed", String(frame.error || "unknown error"));
    if (frame.command === "prompt" && con.state !== "running") ready();
    return;
  }
  if (frame.command === "prompt") setState("running", "running…");
  else if (frame.command === "abort") notice("abort acknowledged");
}

function onEvent(frame) {
  if (con.held) {
    con.held.push(frame);
    return;
  }
  if (frame.type === "usage") {
    const u = frame.cumulative && typeof frame.cumulative === "object" ? frame.cumulative : frame;
    setText($("console-usage"), fmtCount(u.input) + " in · " + fmtCount(u.output) + " out · " + fmtCost(u.cost_usd));
  }
  if ((frame.type === "done" || frame.type === "child_exited") && con.state === "running") ready();
  renderEvent(frame);
}

function sendPrompt() {
  const prompt = $("console-prompt");
  const message = prompt.value;
  if (!message.trim() || (con.state !== "connected" && con.state !== "running")) return;
  send(con.wire.prompt("p" + con.nextId++, message));
  prompt.value = "";
  if (con.state === "connected") setState("connected", "sending…");
}

// Shows the console for `project` (from a project's detail); a session with
// another project ends, since the console talks to one project at a time.
export function openConsole(project) {
  if (con.ws && con.project !== project) disconnect();
  $("console-project").value = project;
  switchTab("console");
  $(!$("console-token").value ? "console-token" : "console-connect").focus();
}

// Forgets the client token (sign out).
export function forgetClientToken() {
  disconnect();
  sessionStorage.removeItem(CLIENT_KEY);
  $("console-token").value = "";
}

export function initConsole() {
  $("console-token").value = sessionStorage.getItem(CLIENT_KEY) || "";
  $("console-project").value = sessionStorage.getItem(PROJECT_KEY) || "";
  setState("disconnected", "disconnected");
  $("console-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (con.state === "disconnected") connect(false);
    else disconnect();
  });
  window.addEventListener("pagehide", flushSeq);
  // Connected before this page was (re)loaded: pick up where it left off.
  const saved = savedSession();
  if (saved && saved.live && saved.project === $("console-project").value && $("console-token").value) {
    switchTab("console");
    connect(true);
  }
  $("console-send").addEventListener("click", sendPrompt);
  $("console-abort").addEventListener("click", () => {
    send(con.wire.abort("a" + con.nextId++));
    notice("abort requested");
  });
  $("console-prompt").addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    if (event.ctrlKey || event.altKey || event.metaKey) return;
    event.preventDefault();
    sendPrompt();
  });
}
