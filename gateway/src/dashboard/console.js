// The console: one WebSocket to ws(s)://HOST/v1/projects/{p}/rpc, opened
// with a client token (kept in sessionStorage), a prompt box (Enter sends,
// Shift+Enter adds a line) and Abort. It speaks the gateway's dialect (the
// wire module); the transcript module renders what arrives; this one owns
// the connection and its state.

import { api, CLIENT_KEY, PROJECT_KEY } from "./api.js";
import { createWire } from "./wire.js";
import { addBlock, newSession, notice, renderEvent } from "./transcript.js";
import { $, setText, fmtCount, fmtCost, projectPath, PROJECT_NAME, switchTab } from "./util.js";

const con = {
  ws: null,
  // disconnected | connecting | authenticating | connected | running
  state: "disconnected",
  project: null,
  nextId: 1,
  wire: createWire("zut"),
};

// The gateway's dialect; zut when /v1/stats cannot say.
async function gatewayDialect() {
  try {
    const stats = await api("GET", "/v1/stats");
    return (stats.ok && stats.body && stats.body.dialect) || "zut";
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

async function connect() {
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
  const wire = createWire(await gatewayDialect());
  if (con.state !== "connecting" || con.ws) return; // cancelled meanwhile
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(scheme + location.host + projectPath(project, "/rpc"));
  con.ws = ws;
  con.wire = wire;
  con.project = project;
  newSession();
  setState("connecting", "connecting to " + project + "…");
  ws.onopen = () => {
    if (con.ws !== ws) return;
    setState("authenticating", "saying hello…");
    ws.send(JSON.stringify(wire.hello(token)));
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
    for (const f of wire.inbound(frame)) {
      if (f && f.type === "response") onResponse(f);
      else if (f && typeof f.type === "string") onEvent(f);
    }
  };
  ws.onclose = (event) => {
    if (con.ws !== ws) return;
    con.ws = null;
    const why = event.code + (event.reason ? ": " + event.reason : "");
    notice("connection closed (" + why + ")");
    setState("disconnected", "disconnected (" + why + ")");
  };
}

export function disconnect() {
  const ws = con.ws;
  if (!ws) {
    if (con.state !== "disconnected") setState("disconnected", "disconnected");
    return;
  }
  con.ws = null;
  ws.close(1000, "bye");
  notice("disconnected");
  setState("disconnected", "disconnected");
}

function onResponse(frame) {
  if (frame.id === "hello") {
    if (frame.success) {
      const model = frame.data && frame.data.model ? " · " + frame.data.model : "";
      notice("connected to " + con.project + model);
      setState("connected", "connected to " + con.project + model);
      $("console-prompt").focus();
    } else {
      addBlock("error", "Hello refused", String(frame.error || "the gateway refused the token"));
      setState("authenticating", "refused");
    }
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
    if (con.state === "disconnected") connect();
    else disconnect();
  });
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
