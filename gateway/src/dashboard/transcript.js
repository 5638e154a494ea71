// The console's transcript (#console-output): turns the reply stream into
// blocks as it arrives: prompts, assistant text (deltas appended), thinking,
// tool calls with their progress, tool results, errors and notices.

import { $, el, isNum } from "./util.js";

const MAX_BLOCKS = 1000;
const MAX_RESULT_CHARS = 4000;
// Events that carry nothing a person needs to see in the transcript.
const QUIET_EVENTS = new Set([
  "turn_start", "request_started", "cache_diagnostics", "assistant_start",
  "tool_use_start", "tool_use_args", "tool_use_end", "tool_execution_started",
  "assistant_message", "turn_recovery", "usage",
  "ext_alert", "ext_widget", "ext_widget_clear", "ext_chrome_clear",
]);

const output = $("console-output");
let text = null; // the <pre> assistant text deltas append to
let thinking = null; // the <pre> thinking deltas append to
const tools = new Map(); // tool-call id → { name, block, progress }
let scrollPending = false;

// Keeps the view pinned to the end while the reader is there.
function scrollSoon() {
  const atBottom = output.scrollHeight - output.scrollTop - output.clientHeight < 48;
  if (!atBottom || scrollPending) return;
  scrollPending = true;
  requestAnimationFrame(() => {
    scrollPending = false;
    output.scrollTop = output.scrollHeight;
  });
}

export function addBlock(kind, title, body) {
  scrollSoon();
  const block = el("div", "block " + kind);
  if (title) block.appendChild(el("div", "block-title", title));
  if (body !== undefined && body !== null) block.appendChild(el("pre", "block-body", body));
  output.appendChild(block);
  while (output.childElementCount > MAX_BLOCKS) output.firstElementChild.remove();
  return block;
}

export function notice(message) {
  endStream();
  addBlock("notice", null, null).appendChild(el("span", null, message));
}

// The next delta starts a new block.
function endStream() {
  text = null;
  thinking = null;
}

// A new connection: tool-call ids of the last one mean nothing now, and
// what was shown comes again from the history (or the replayed ring).
export function newSession() {
  endStream();
  tools.clear();
  output.replaceChildren();
}

function appendDelta(kind, delta) {
  let target = kind === "thinking" ? thinking : text;
  if (!target || !target.isConnected) {
    target = addBlock(kind, kind === "thinking" ? "thinking" : null, "").lastChild;
    if (kind === "thinking") thinking = target;
    else [text, thinking] = [target, null];
  }
  scrollSoon();
  target.appendChild(document.createTextNode(delta));
}

function clip(value) {
  if (value.length <= MAX_RESULT_CHARS) return value;
  return value.slice(0, MAX_RESULT_CHARS) + "\n… (" + (value.length - MAX_RESULT_CHARS) + " more characters)";
}

function contentText(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((c) => (c && c.type === "text" ? String(c.text ?? "") : c && c.type === "image" ? "[image]" : ""))
    .join("\n");
}

function planText(frame) {
  const plan = Array.isArray(frame.plan) ? frame.plan : [];
  const lines = plan.map((item) => {
    const step = item && typeof item === "object" ? item : {};
    const mark = step.status === "completed" ? "[x] " : step.status === "in_progress" ? "[~] " : "[ ] ";
    return mark + String(step.step ?? "");
  });
  return (frame.explanation ? String(frame.explanation) + "\n" : "") + lines.join("\n");
}

// Renders one event frame (anything but a response).
export function renderEvent(frame) {
  switch (frame.type) {
    case "text_delta":
      appendDelta("assistant", String(frame.delta ?? ""));
      break;
    case "thinking_delta":
      appendDelta("thinking", String(frame.delta ?? ""));
      break;
    case "user_message":
      endStream();
      addBlock("user", "you", contentText(frame.content));
      break;
    case "tool_call": {
      endStream();
      const name = String(frame.name);
      const block = addBlock("tool", "tool call · " + name, JSON.stringify(frame.args ?? {}, null, 2));
      tools.set(String(frame.id), { name, block, progress: null });
      break;
    }
    case "tool_progress": {
      const tool = tools.get(String(frame.id));
      if (!tool) break;
      if (!tool.progress) tool.progress = tool.block.appendChild(el("pre", "block-progress", ""));
      tool.progress.appendChild(document.createTextNode(String(frame.text ?? "") + "\n"));
      scrollSoon();
      break;
    }
    case "tool_result": {
      endStream();
      const tool = tools.get(String(frame.id));
      const name = tool ? tool.name : "tool";
      const title = (frame.is_error ? "error · " : "result · ") + name;
      addBlock(frame.is_error ? "result err" : "result", title, clip(contentText(frame.content)) || "(no output)");
      break;
    }
    case "plan_update":
      endStream();
      addBlock("tool", "plan", planText(frame));
      break;
    case "turn_end":
      endStream();
      if (frame.stop === "error") addBlock("error", "turn failed", String(frame.error || "the model call failed"));
      else if (frame.stop === "aborted") notice("aborted");
      else if (frame.stop === "length") notice("stopped: output limit reached");
      break;
    case "retry_scheduled":
      notice("retrying in " + (isNum(frame.delay_ms) ? (frame.delay_ms / 1000).toFixed(1) + " s" : "a moment"));
      break;
    case "error":
      endStream();
      addBlock("error", "error", String(frame.message || "unknown error"));
      break;
    case "compact_done":
      notice("conversation compacted");
      break;
    case "done":
      endStream();
      break;
    case "child_started":
      notice("agent started" + (isNum(frame.pid) ? " (pid " + frame.pid + ")" : ""));
      break;
    case "child_exited":
      notice("agent exited" + (frame.reason ? " (" + String(frame.reason) + ")" : ""));
      break;
    default:
      if (!QUIET_EVENTS.has(frame.type)) notice("event: " + frame.type);
  }
}

// One message of a `get_messages` answer (zut's blocks, or Zi's with
// `toolCall` / `arguments` / role `toolResult`) as transcript blocks.
function renderMessage(m) {
  if (!m || typeof m !== "object") return;
  const blocks = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
  if (m.role === "toolResult" || m.role === "tool") {
    const title = (m.isError || m.is_error ? "error · " : "result · ") + String(m.toolName || "tool");
    addBlock(m.isError || m.is_error ? "result err" : "result", title, clip(contentText(blocks)) || "(no output)");
    return;
  }
  for (const b of Array.isArray(blocks) ? blocks : []) {
    if (!b || typeof b !== "object") continue;
    if (b.type === "text" && String(b.text ?? "").trim()) {
      if (m.role === "user") addBlock("user", "you", String(b.text));
      else addBlock("assistant", null, String(b.text));
    } else if (b.type === "thinking") {
      addBlock("thinking", "thinking", String(b.thinking ?? b.text ?? ""));
    } else if (b.type === "tool_call" || b.type === "toolCall") {
      const name = String(b.name);
      const block = addBlock("tool", "tool call · " + name, JSON.stringify(b.args ?? b.arguments ?? {}, null, 2));
      tools.set(String(b.id), { name, block, progress: null });
    } else if (b.type === "tool_result") {
      const tool = tools.get(String(b.call_id));
      const title = (b.is_error ? "error · " : "result · ") + (tool ? tool.name : "tool");
      addBlock(b.is_error ? "result err" : "result", title, clip(contentText(b.content)) || "(no output)");
    }
  }
  if (m.errorMessage) addBlock("error", "turn failed", String(m.errorMessage));
}

// The conversation so far (a `get_messages` answer), oldest first.
export function renderHistory(messages) {
  endStream();
  for (const m of messages) renderMessage(m);
  endStream();
}
