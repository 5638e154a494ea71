// The tail of gateway events (#events): children started and exited (with
// the reason), crash loops, slow clients closed and tools' outbound
// requests refused by the egress proxy, from /v1/events, newest first. Each poll asks only for what came after the last event shown.

import { api } from "./api.js";
import { $, el, setText, isNum } from "./util.js";

const MAX_SHOWN = 100;

let after = 0;

function describe(e) {
  const pid = isNum(e.pid) ? " (pid " + e.pid + ")" : "";
  switch (e.kind) {
    case "child_started":
      return "agent started" + pid;
    case "child_exited": {
      const parts = [];
      if (e.reason) parts.push(String(e.reason));
      if (isNum(e.code)) parts.push("code " + e.code);
      if (isNum(e.signal)) parts.push("signal " + e.signal);
      const missed = isNum(e.missed) ? "; " + e.missed + " more exited between two looks" : "";
      return "agent exited" + pid + (parts.length ? ": " + parts.join(", ") : "") + missed;
    }
    case "crash_loop":
      return "agent keeps crashing: automatic restarts paused" + (e.reason ? " (" + e.reason + ")" : "");
    case "slow_client_closed":
      return "a client fell behind and was closed";
    case "egress_refused": {
      const missed = isNum(e.missed) ? "; " + e.missed + " more refused since" : "";
      return "outbound request to " + String(e.target) + " refused (" + String(e.rule) + ")" + missed;
    }
    default:
      return String(e.kind);
  }
}

function kindClass(kind) {
  if (kind === "child_started") return "ev-start";
  if (kind === "child_exited") return "ev-exit";
  return "ev-warn";
}

function timeOf(ms) {
  return isNum(ms) ? new Date(ms).toLocaleTimeString([], { hour12: false }) : "";
}

function render(events) {
  const list = $("events");
  for (const e of events) {
    if (!e || typeof e !== "object") continue;
    const li = el("li", kindClass(e.kind));
    li.appendChild(el("time", "muted", timeOf(e.time_ms)));
    li.appendChild(el("span", "ev-project", String(e.project)));
    li.appendChild(el("span", "ev-text", describe(e)));
    list.insertBefore(li, list.firstChild);
  }
  while (list.childElementCount > MAX_SHOWN) list.lastElementChild.remove();
  $("events-empty").hidden = list.childElementCount > 0;
}

// One poll of /v1/events; throws what api() throws.
export async function pollEvents() {
  const res = await api("GET", "/v1/events?after=" + after);
  if (!res.ok || !res.body || !Array.isArray(res.body.events)) return res;
  const last = res.body.last_seq;
  if (isNum(last) && last < after) {
    // A new gateway: its events start again from 1.
    after = 0;
    return res;
  }
  render(res.body.events);
  if (isNum(last)) after = last;
  setText($("events-count"), $("events").childElementCount ? String($("events").childElementCount) : "");
  return res;
}

export function resetEvents() {
  after = 0;
  $("events").replaceChildren();
  $("events-empty").hidden = false;
  setText($("events-count"), "");
}
