// The tokens card (#tokens): the credentials this admin may see, from
// GET /v1/tokens (name, kind, role, projects, expiry, sessions open on this
// gateway, last use and from where). Never a secret: the API shows one only
// to whoever creates the token. A managed token has a Revoke button, which
// asks first and then sends DELETE /v1/tokens/{name}; a configured one (the
// config file's [[token]] entries) is removed by editing that file. Polled
// every TOKENS_EVERY-th refresh, to keep the one-second loop light, and
// at once after a revocation.

import { confirmWith } from "./actions.js";
import { api, errorOf, Unauthorized } from "./api.js";
import { $, el, setText, isNum } from "./util.js";

// The list is fetched on one refresh in this many.
const TOKENS_EVERY = 5;

const tbody = $("tokens");
// token name → { tr, cells: [td], action: td, kind }
const rows = new Map();
// Refreshes since the last fetch of the list (0: fetch on the next one).
let ticks = 0;
let hooks = { onUnauthorized: () => {}, onChange: () => {} };

// A date and time in the browser's locale, from epoch seconds.
function localTime(secs) {
  return new Date(secs * 1000).toLocaleString([], {
    dateStyle: "medium",
    timeStyle: "short",
    hour12: false,
  });
}

function plural(n, one, many) {
  return n + " " + (n === 1 ? one : many);
}

function projectsText(t) {
  if (!Array.isArray(t.projects)) return "–";
  return t.projects.length ? t.projects.map(String).join(", ") : "none";
}

function expiresText(t) {
  if (!isNum(t.expires)) return "never";
  return localTime(t.expires) + (t.expired ? " · expired" : "");
}

// The last use on this gateway; configured tokens do not record it.
function lastUsedText(t) {
  if (t.kind !== "managed") return "–";
  const used = t.last_used;
  if (!used || !isNum(used.at)) return "never";
  return localTime(used.at) + (used.from ? " from " + String(used.from) : "");
}

const COLUMNS = [
  { cls: "name", text: (t) => String(t.name) },
  { cls: "kind", text: (t) => String(t.kind || "–") },
  { cls: "role", text: (t) => String(t.role || "–") },
  { cls: "projects", text: projectsText },
  { cls: "expires", text: expiresText },
  { cls: "num", text: (t) => (isNum(t.sessions) ? String(t.sessions) : "–") },
  { cls: "last-used", text: lastUsedText },
];

function makeRow(name) {
  const tr = document.createElement("tr");
  tr.dataset.token = name;
  const cells = COLUMNS.map((column) => tr.appendChild(el("td", column.cls)));
  const action = tr.appendChild(el("td", "row-actions"));
  return { tr, cells, action, kind: null };
}

// What the last cell holds: Revoke for a managed token, else where the
// token is defined (it cannot be revoked through the API).
function setAction(row, t) {
  if (row.kind === t.kind) return;
  row.kind = t.kind;
  if (t.kind === "managed") {
    const button = el("button", "small", "Revoke");
    button.type = "button";
    button.dataset.action = "revoke";
    button.addEventListener("click", () => revoke(String(t.name), button));
    row.action.replaceChildren(button);
  } else {
    const where = t.kind === "configured" ? "config file" : String(t.kind || "–");
    row.action.replaceChildren(el("span", "muted", where));
  }
}

function render(tokens) {
  const seen = new Set();
  let index = 0;
  for (const t of tokens) {
    if (!t || typeof t !== "object" || typeof t.name !== "string" || seen.has(t.name)) continue;
    seen.add(t.name);
    let row = rows.get(t.name);
    if (!row) {
      row = makeRow(t.name);
      rows.set(t.name, row);
    }
    COLUMNS.forEach((column, i) => setText(row.cells[i], column.text(t)));
    row.cells[0].title = t.name;
    row.cells[3].title = projectsText(t);
    row.tr.classList.toggle("expired", t.expired === true);
    setAction(row, t);
    // Moved only when out of place, so a focused button keeps its focus.
    if (tbody.children[index] !== row.tr) tbody.insertBefore(row.tr, tbody.children[index] || null);
    index += 1;
  }
  for (const [name, row] of rows) {
    if (!seen.has(name)) {
      row.tr.remove();
      rows.delete(name);
    }
  }
  setText($("tokens-count"), rows.size ? String(rows.size) : "");
  showNote(
    rows.size
      ? ""
      : "No token to list. Managed tokens (corral token create) and the config file's " +
          "[[token]] entries show here; the tokens given by flags or variables do not.",
  );
}

function showNote(text) {
  const note = $("tokens-note");
  setText(note, text);
  note.hidden = !text;
}

function showResult(text, kind) {
  const result = $("tokens-result");
  result.className = "message" + (kind ? " " + kind : "");
  setText(result, text);
}

// Asks, then revokes `name`; says what happened in the card's result line.
async function revoke(name, button) {
  const row = rows.get(name);
  const open = row ? Number(row.cells[5].textContent) || 0 : 0;
  const confirmed = await confirmWith("revoke", {
    title: "Revoke " + name + "?",
    text:
      (open === 1 ? "Its 1 open session is" : "Its " + open + " open sessions are") +
      " closed at once, on every gateway sharing the state directory, and it stops " +
      "working. This cannot be undone.",
    ok: "Revoke",
  });
  if (!confirmed) return;
  button.disabled = true;
  showResult("revoking " + name + "…", "");
  try {
    const res = await api("DELETE", "/v1/tokens/" + encodeURIComponent(name));
    if (res.ok) {
      const closed = res.body && isNum(res.body.sessions_closed) ? res.body.sessions_closed : 0;
      showResult("revoked " + name + ": " + plural(closed, "session", "sessions") + " closed", "ok");
      const gone = rows.get(name);
      if (gone) gone.tr.remove();
      rows.delete(name);
      setText($("tokens-count"), rows.size ? String(rows.size) : "");
    } else {
      showResult("revoke " + name + " failed: " + errorOf(res), "err");
    }
  } catch (err) {
    if (err instanceof Unauthorized) {
      hooks.onUnauthorized();
      return;
    }
    showResult("revoke " + name + " failed: gateway unreachable", "err");
  } finally {
    button.disabled = false;
  }
  ticks = 0;
  hooks.onChange();
}

// One refresh's share: fetches the list when it is due. Throws what api()
// throws (the poll loop handles it).
export async function pollTokens() {
  const due = ticks % TOKENS_EVERY === 0;
  ticks += 1;
  if (!due) return null;
  const res = await api("GET", "/v1/tokens");
  if (res.ok && res.body && Array.isArray(res.body.tokens)) render(res.body.tokens);
  else showNote("The token list is not available: " + errorOf(res));
  return res;
}

export function resetTokens() {
  ticks = 0;
  rows.clear();
  tbody.replaceChildren();
  setText($("tokens-count"), "");
  showResult("", "");
  showNote("");
}

// onUnauthorized(): the admin token was refused; onChange(): a token was
// revoked (its sessions are gone: refresh the page's numbers now).
export function initTokens(callbacks) {
  hooks = callbacks;
}
