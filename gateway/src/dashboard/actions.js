// Project actions for the table's row buttons and the detail pane: start,
// stop, restart and abort through the admin API. Stop and restart ask
// first, in a modal dialog (#confirm) that names the project and says what
// happens to its clients.

import { api, errorOf, Unauthorized } from "./api.js";
import { $, setText, projectPath } from "./util.js";

const ASK = {
  stop: {
    title: (p) => "Stop " + p + "?",
    text:
      "The agent is stopped gracefully: its clients are disconnected and a run in " +
      "progress ends. It starts again when a client connects or you press Start.",
    ok: "Stop",
  },
  restart: {
    title: (p) => "Restart " + p + "?",
    text:
      "The agent is stopped and started again: a run in progress ends with an error. " +
      "Clients stay attached and the conversation is kept.",
    ok: "Restart",
  },
};

let onUnauthorized = () => {};
// Resolves the open dialog's promise; null when no dialog is open.
let answer = null;

function settle(confirmed) {
  const dialog = $("confirm");
  if (dialog.open) dialog.close();
  const resolve = answer;
  answer = null;
  if (resolve) resolve(confirmed);
}

// Asks in the modal dialog: `title`, what happens (`text`), and the label
// of the button that goes ahead (`ok`). Resolves true to go ahead; Cancel,
// Escape or another question resolve false. Cancel has the focus, so an
// Enter pressed by habit does nothing harmful.
export function confirmWith(action, { title, text, ok }) {
  settle(false);
  setText($("confirm-title"), title);
  setText($("confirm-text"), text);
  setText($("confirm-ok"), ok);
  $("confirm").dataset.action = action;
  $("confirm").showModal();
  $("confirm-cancel").focus();
  return new Promise((resolve) => (answer = resolve));
}

// Asks before `action` on `project`; resolves true to go ahead. Actions
// that need no confirmation resolve true at once.
export function confirmAction(action, project) {
  const ask = ASK[action];
  if (!ask) return Promise.resolve(true);
  return confirmWith(action, { title: ask.title(project), text: ask.text, ok: ask.ok });
}

// Asks if needed, then POSTs the action. Resolves to { ok, text } for the
// caller to show, or null when the person cancelled.
export async function runAction(action, project) {
  if (!(await confirmAction(action, project))) return null;
  try {
    const res = await api("POST", projectPath(project, "/" + action));
    if (res.ok) {
      const verb = action === "start" ? "started" : "accepted";
      return { ok: true, text: action + " " + project + ": " + verb };
    }
    return { ok: false, text: action + " " + project + " failed: " + errorOf(res) };
  } catch (err) {
    if (err instanceof Unauthorized) {
      onUnauthorized();
      return null;
    }
    return { ok: false, text: action + " " + project + " failed: gateway unreachable" };
  }
}

// unauthorized(): the admin token was refused.
export function initActions(unauthorized) {
  onUnauthorized = unauthorized;
  $("confirm-ok").addEventListener("click", () => settle(true));
  $("confirm-cancel").addEventListener("click", () => settle(false));
  // Escape closes the dialog without an answer: that is a no.
  $("confirm").addEventListener("close", () => settle(false));
}
