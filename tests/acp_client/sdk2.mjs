// Drives an ACP agent with the official SDK 2.x client app (imported as
// `acp-sdk-2`, the 2.x release pinned next to 1.x in package.json), as an
// editor on the current SDK would, and prints one JSON report on stdout
// for tests/tests/e2e/acp_sdk2.rs to check.
//
// Environment: ACP_AGENT (the program: corral-agent, or corral for
// `corral attach`), ACP_AGENT_ARGS (a JSON array of its arguments),
// ACP_CWD (the project directory), ACP_STEPS (`full`, or `core` for
// initialize, new, prompts, cancel and load only).
//
// Steps: initialize, session/list, session/new, a plain prompt, a bash
// call the client allows, the model changed with
// session/set_config_option, a cancel during a slow reply, session/list
// again, session/close, a prompt on the closed session, session/resume
// and a prompt after it; then a second process loads the session.

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";

import * as acp from "acp-sdk-2";

const agentBin = process.env.ACP_AGENT;
const agentArgs = JSON.parse(process.env.ACP_AGENT_ARGS ?? "[]");
const cwd = process.env.ACP_CWD;
const full = (process.env.ACP_STEPS ?? "full") === "full";
const { methods } = acp;

/** One agent process and the client's view of it. */
function connect(label) {
  const child = spawn(agentBin, agentArgs, { cwd, stdio: ["pipe", "pipe", "inherit"] });
  const seen = { updates: [], permissions: [] };
  const app = acp
    .client({ name: "corral-e2e" })
    .onRequest(methods.client.session.requestPermission, ({ params }) => {
      seen.permissions.push(params);
      const command = params.toolCall?.rawInput?.command ?? "";
      const optionId = command.includes("allowed") ? "allow_once" : "reject_once";
      return { outcome: { outcome: "selected", optionId } };
    })
    .onNotification(methods.client.session.update, ({ params }) => {
      seen.updates.push(params);
      seen.onUpdate?.(params);
    });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const connection = app.connect(stream);
  const done = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  return { label, child, agent: connection.agent, seen, done };
}

/** Updates as `{sessionId, ...update}`, from `start` on. */
function flat(updates, start = 0) {
  return updates.slice(start).map((n) => ({ sessionId: n.sessionId, ...n.update }));
}

async function prompt(peer, sessionId, text) {
  const start = peer.seen.updates.length;
  const response = await peer.agent.request(methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text }],
  });
  const updates = flat(peer.seen.updates, start);
  const reply = updates
    .filter((u) => u.sessionUpdate === "agent_message_chunk")
    .map((u) => u.content.text)
    .join("");
  return { stopReason: response.stopReason, text: reply, updates };
}

/** The error of a request that should fail, as `{code, message}`. */
async function failure(request) {
  try {
    return { unexpected: await request };
  } catch (error) {
    return { code: error?.code, message: error?.message };
  }
}

async function main() {
  const report = {};
  const first = connect("first");
  report.initialize = await first.agent.request(methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: {},
  });
  if (full) {
    report.listBefore = await first.agent.request(methods.agent.session.list, {});
  }
  report.newSession = await first.agent.request(methods.agent.session.new, {
    cwd,
    mcpServers: [],
  });
  const sessionId = report.newSession.sessionId;
  report.hello = await prompt(first, sessionId, "hello");
  report.allowed = await prompt(first, sessionId, "run the allowed command");
  report.permissions = first.seen.permissions;
  if (full) {
    report.setModel = await first.agent.request(methods.agent.session.setConfigOption, {
      sessionId,
      configId: "model",
      value: "claude-haiku-4-5",
    });
  }

  // Cancel as soon as the slow reply has started streaming.
  const started = new Promise((resolve) => {
    first.seen.onUpdate = (n) => {
      if (n.update.sessionUpdate === "agent_message_chunk") resolve();
    };
  });
  const slow = prompt(first, sessionId, "tell me a long story");
  await started;
  await first.agent.notify(methods.agent.session.cancel, { sessionId });
  report.cancelled = await slow;
  first.seen.onUpdate = undefined;

  if (full) {
    report.listAfter = await first.agent.request(methods.agent.session.list, {});
    report.close = await first.agent.request(methods.agent.session.close, { sessionId });
    report.closedPrompt = await failure(
      first.agent.request(methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: "text", text: "anyone there?" }],
      }),
    );
    const before = first.seen.updates.length;
    report.resume = await first.agent.request(methods.agent.session.resume, {
      sessionId,
      cwd,
      mcpServers: [],
    });
    report.resumeReplayed = flat(first.seen.updates, before).filter(
      (u) => u.sessionUpdate === "user_message_chunk",
    ).length;
    report.afterResume = await prompt(first, sessionId, "still there?");
  }
  report.firstUpdates = flat(first.seen.updates).map((u) => u.sessionUpdate);
  report.commands = flat(first.seen.updates).find(
    (u) => u.sessionUpdate === "available_commands_update",
  );
  report.usage = flat(first.seen.updates).filter((u) => u.sessionUpdate === "usage_update");

  first.child.stdin.end();
  report.firstExit = await first.done;

  const second = connect("second");
  await second.agent.request(methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: {},
  });
  report.load = await second.agent.request(methods.agent.session.load, {
    sessionId,
    cwd,
    mcpServers: [],
  });
  report.replayed = flat(second.seen.updates);
  second.child.stdin.end();
  report.secondExit = await second.done;

  process.stdout.write(JSON.stringify(report) + "\n");
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`acp sdk2 client failed: ${error?.stack ?? JSON.stringify(error)}\n`);
    process.exit(1);
  },
);
