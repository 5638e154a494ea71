// The admin API: fetches with the admin token as a bearer token. The tokens
// live in this tab's sessionStorage only, never in a URL.

export const ADMIN_KEY = "corral.adminToken";
export const CLIENT_KEY = "corral.clientToken";
export const PROJECT_KEY = "corral.consoleProject";

const REQUEST_TIMEOUT_MS = 5000;

// The gateway refused the admin token (401: unknown, or expired). A 403 is
// not thrown: the token is valid but may not do this one thing (a scoped
// admin asking for gateway-wide stats), so each caller decides what it
// means.
export class Unauthorized extends Error {}

export function signedIn() {
  return !!sessionStorage.getItem(ADMIN_KEY);
}

// Calls the admin API; resolves to { status, ok, body } (body: parsed JSON
// or null), throws Unauthorized on 401 and a plain Error when the gateway
// cannot be reached in time.
export async function api(method, path) {
  const token = sessionStorage.getItem(ADMIN_KEY) || "";
  const res = await fetch(path, {
    method,
    headers: { Authorization: "Bearer " + token, Accept: "application/json" },
    cache: "no-store",
    signal: AbortSignal.timeout ? AbortSignal.timeout(REQUEST_TIMEOUT_MS) : undefined,
  });
  if (res.status === 401) {
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

// The error a failed answer gives in words: its JSON `error`, else its status.
export function errorOf(res) {
  return res.body && res.body.error ? String(res.body.error) : "HTTP " + res.status;
}
