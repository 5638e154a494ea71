// Why the console could not connect, in words. A browser's WebSocket never
// sees the HTTP status of a refused upgrade (it reports close code 1006),
// so before connecting, the console asks the same URL with a plain fetch
// and the client token as a bearer token: the gateway answers that fetch
// exactly as it would the upgrade (401 for a refused token, 429 when
// throttled, then — the token being valid — 404 for a missing project),
// and with 400/426 when all is well
// but the request is no upgrade. Refusals after the upgrade come as close
// codes, described by closeWords().

import { projectPath } from "./util.js";

const PREFLIGHT_TIMEOUT_MS = 5000;

const CLOSE_WORDS = {
  1000: "closed",
  1001: "the gateway is going away: it is shutting down, or the agent was stopped",
  1002: "protocol error",
  1006: "the connection failed",
  1008: "refused: authentication failed, or too many requests were left unread",
  1009: "a frame was larger than the gateway accepts",
  1011: "the agent could not start",
  1013: "try again later: no agent slot is free, the gateway is shutting down, or this address is throttled",
  4000: "this client fell behind and missed events; reconnect to catch up",
  4001: "the token was revoked or the credential expired; sign in again",
  4004: "no such project",
};

// "code: words (reason)" for a close event.
export function closeWords(code, reason) {
  const words = CLOSE_WORDS[code] || "closed";
  const why = reason && !words.includes(reason) ? " (" + reason + ")" : "";
  return code + ": " + words + why;
}

async function bodyText(res) {
  try {
    return (await res.text()).trim().slice(0, 300);
  } catch (_) {
    return "";
  }
}

// Resolves to null when the gateway would accept a WebSocket for
// `project` with `token`, else to a sentence saying why not.
export async function preflight(project, token) {
  let res;
  try {
    res = await fetch(projectPath(project, "/rpc"), {
      headers: { Authorization: "Bearer " + token },
      cache: "no-store",
      signal: AbortSignal.timeout ? AbortSignal.timeout(PREFLIGHT_TIMEOUT_MS) : undefined,
    });
  } catch (_) {
    return "The gateway is unreachable.";
  }
  // The project and token passed; only the upgrade headers were missing.
  if (res.status === 400 || res.status === 426) return null;
  const body = await bodyText(res);
  switch (res.status) {
    case 404:
      return "HTTP 404: " + (body || "project " + project + " not found") +
        ". Projects are directories directly under the gateway's projects root.";
    case 401:
      return "HTTP 401: the gateway refused the client token" + (body ? " (" + body + ")" : "") + ".";
    case 403:
      return "HTTP 403: " + (body || "refused") + ". This page's origin is not in --allowed-origins.";
    case 429:
      return "HTTP 429: too many failed attempts from this address; try again in " +
        (res.headers.get("Retry-After") || "a few") + " s.";
    default:
      return "HTTP " + res.status + (body ? ": " + body : "");
  }
}

// After a connection failed before it opened (1006): what the preflight
// says now, or, if it passes, the refusals a fetch cannot see.
export async function explainFailure(project, token) {
  const refusal = await preflight(project, token);
  if (refusal) return refusal;
  return (
    "The WebSocket upgrade was refused although the project and token are fine: the gateway " +
    "answers 403 when this page's origin is not in --allowed-origins, or a proxy in between refused it."
  );
}
