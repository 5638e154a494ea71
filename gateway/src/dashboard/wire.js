// The console's side of the gateway's dialect (zut, letscode or zi, from
// /v1/stats): the frames it sends (hello with an optional resume point,
// prompt, abort, the history request), and what it receives turned into
// the zut-shaped frames the console and transcript handle:
// `response {id, command, success, error, data}` and zut events
// (`text_delta`, `tool_call`, `turn_end`, `done`, ...). `history(start)`
// asks for the conversation (answered as a `get_messages` response with
// `data.messages` and, for a paged answer, `data.next`); a dialect without
// one has `history: null` and replays the gateway's event ring instead.

// A wire for `dialect`; unknown names speak zut.
export function createWire(dialect) {
  const make = WIRES[dialect] || WIRES.zut;
  return make();
}

const WIRES = { zut: zutWire, letscode: letscodeWire, zi: ziWire };

// Request ids this console sent, with their command, for the answers.
function pendingRequests() {
  const pending = new Map();
  return {
    note(id, command) {
      pending.set(id, command);
      return id;
    },
    // The command of an answer to `id` (`last`: no more answers follow).
    command(id, last) {
      const command = pending.get(id);
      if (last) pending.delete(id);
      return command;
    },
  };
}

function response(id, command, success, extra) {
  return Object.assign({ type: "response", id, command, success }, extra);
}

// `frame` with `key: seq` when `seq` is a resume point.
function resumeAt(frame, key, seq) {
  return Number.isInteger(seq) && seq >= 0 ? Object.assign(frame, { [key]: seq }) : frame;
}

function zutWire() {
  return {
    hello: (token, seq) => resumeAt({ id: "hello", type: "hello", token }, "resume_after", seq),
    history: () => ({ id: "history", type: "get_messages" }),
    prompt: (id, text) => ({ id, type: "prompt", message: text }),
    abort: (id) => ({ id, type: "abort" }),
    inbound: (frame) => [frame],
  };
}

function letscodeWire() {
  const pending = pendingRequests();
  return {
    hello: (token, seq) => resumeAt({ cmd: "hello", id: pending.note("hello", "hello"), token }, "resume_after", seq),
    history: null,
    prompt: (id, text) => ({ cmd: "prompt", id: pending.note(id, "prompt"), text }),
    abort: (id) => ({ cmd: "abort", id: pending.note(id, "abort") }),
    inbound(frame) {
      switch (frame.type) {
        case "ready":
          return [];
        case "ack": {
          // `hello` is answered by its `done`; a prompt runs from its ack.
          const command = pending.command(frame.id, false);
          return command === "hello" ? [] : [response(frame.id, command, true)];
        }
        case "done": {
          const command = pending.command(frame.id, true);
          return command === "hello" ? [response("hello", "hello", true, { data: {} })] : [];
        }
        case "error":
          if (!("id" in frame)) return [{ type: "error", message: frame.error }];
          return [response(frame.id, pending.command(frame.id, true), false, { error: frame.error })];
        case "agent_start":
          return userMessages(frame.messages);
        case "message_end":
          return userMessages([frame.message]);
        case "message_update":
          return delta(frame.stream_event);
        case "tool_execution_start":
          return [{ type: "tool_call", id: frame.tool_call_id, name: frame.tool_name, args: frame.arguments }];
        case "tool_execution_update":
          return frame.plan
            ? [Object.assign({ type: "plan_update" }, frame.plan)]
            : [{ type: "tool_progress", id: frame.tool_call_id, text: frame.text }];
        case "tool_execution_end": {
          const result = frame.result || {};
          return [{ type: "tool_result", id: frame.tool_call_id, is_error: frame.is_error, content: result.content }];
        }
        case "turn_end":
          // A failed turn's error comes with `agent_end`; show it once.
          return frame.stop === "error" ? [] : [{ type: "turn_end", stop: frame.stop }];
        case "retry":
          return [{ type: "retry_scheduled", delay_ms: frame.delay_ms }];
        case "agent_end":
          return frame.error && frame.error !== "aborted"
            ? [{ type: "error", message: frame.error }, { type: "done" }]
            : [{ type: "done" }];
        default:
          return [frame];
      }
    },
  };
}

// A streamed text or thinking delta as the zut event; nothing for others.
function delta(event) {
  const e = event || {};
  return e.type === "text_delta" || e.type === "thinking_delta" ? [{ type: e.type, delta: e.delta }] : [];
}

// The user messages among `messages` as `user_message` events.
function userMessages(messages) {
  return (Array.isArray(messages) ? messages : [])
    .filter((m) => m && m.role === "user")
    .map((m) => ({ type: "user_message", content: m.content }));
}

function ziWire() {
  const pending = pendingRequests();
  let model = null;
  const request = (id, method, params) => ({ version: 1, id: pending.note(id, method), method, params });
  const NAMES = { "session.prompt": "prompt", "session.interrupt": "abort", "session.get_messages": "get_messages" };
  const commandName = (method) => NAMES[method] || method;
  return {
    hello: (token, seq) => request("hello", "connection.hello", resumeAt({ token }, "resumeAfter", seq)),
    history: (start) => request("history", "session.get_messages", { start: start || 0, limit: 100 }),
    prompt: (id, text) => request(id, "session.prompt", { delivery: "direct", text }),
    // Methods without parameters refuse even an empty `params`.
    abort: (id) => ({ version: 1, id: pending.note(id, "session.interrupt"), method: "session.interrupt" }),
    inbound(frame) {
      switch (frame.type) {
        case "ready": {
          const selected = frame.state && frame.state.model && frame.state.model.model;
          model = selected ? selected.id : null;
          return [];
        }
        case "response": {
          const method = pending.command(frame.id, true);
          if (method === "connection.hello") {
            return [response("hello", "hello", frame.ok === true, { data: { model }, error: errorText(frame) })];
          }
          if (method === "session.get_messages") {
            const result = frame.result || {};
            const data = { messages: result.messages, next: result.nextStart };
            return [response(frame.id, "get_messages", frame.ok === true, { data, error: errorText(frame) })];
          }
          return [response(frame.id, commandName(method), frame.ok === true, { error: errorText(frame) })];
        }
        case "protocol_error": {
          const method = frame.id === undefined ? undefined : pending.command(frame.id, true);
          if (method === undefined) return [{ type: "error", message: errorText(frame) }];
          return [response(frame.id, commandName(method), false, { error: errorText(frame) })];
        }
        case "session_event":
          return ziEvent(frame.event || {});
        default:
          return [frame];
      }
    },
  };
}

// A failed response's `error.message`, or a protocol error's top-level
// `message`.
function errorText(frame) {
  if (frame.type === "protocol_error") return String(frame.message || frame.code || "failed");
  return frame.error ? String(frame.error.message || frame.error.code || "failed") : undefined;
}

function ziEvent(event) {
  switch (event.type) {
    case "message_update":
      return delta(event.assistantMessageEvent);
    case "message_end":
      return userMessages([event.message]);
    case "tool_execution_start":
      return [{ type: "tool_call", id: event.toolCallId, name: event.toolName, args: event.args }];
    case "tool_execution_update":
      return [{ type: "tool_progress", id: event.toolCallId, text: (event.partialResult || {}).text }];
    case "tool_execution_end":
      return [{ type: "tool_result", id: event.toolCallId, is_error: event.isError, content: (event.result || {}).content }];
    case "work_plan_changed":
      return [{ type: "plan_update", explanation: event.explanation, plan: event.plan }];
    case "turn_end":
      return [{ type: "turn_end", stop: event.stopReason, error: event.errorMessage }];
    case "auto_retry_start":
      return [{ type: "retry_scheduled", delay_ms: event.delayMs }];
    case "compaction_end":
      return [{ type: "compact_done" }];
    case "agent_end":
      return event.errorMessage ? [{ type: "error", message: event.errorMessage }, { type: "done" }] : [{ type: "done" }];
    case "usage":
      return [{ type: "usage", cumulative: event.cumulative }];
    case "agent_start":
    case "message_start":
    case "turn_start":
    case "request_start":
      return [];
    default:
      return [event];
  }
}
