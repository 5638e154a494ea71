// Drives `corral-agent rpc --dialect acp` with the official SDK's
// ClientSideConnection, as an editor would, and prints one JSON report on
// stdout for tests/tests/e2e/acp_agent.rs to check.
//
// Environment: ACP_AGENT (the corral-agent binary), ACP_AGENT_ARGS (a JSON
// array of its arguments), ACP_CWD (the project directory).
//
// Steps: initialize (offering the editor's files), session/new, a plain
// prompt, an edit of a file with unsaved changes, a bash call the client
// allows, one it rejects, a cancel during a slow reply; then a second
// process on the same journal loads the session.

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";

import * as acp from "@agentclientprotocol/sdk";

const agentBin = process.env.ACP_AGENT;
const agentArgs = JSON.parse(process.env.ACP_AGENT_ARGS ?? "[]");
const cwd = process.env.ACP_CWD;

/** One agent process and the client's view of it. */
function connect(label) {
  const child = spawn(agentBin, agentArgs, { cwd, stdio: ["pipe", "pipe", "inherit"] });
  const seen = { updates: [], permissions: [], reads: [], writes: [] };
  const client = {
    async requestPermission(params) {
      seen.permissions.push(params);
      const command = params.toolCall?.rawInput?.command ?? "";
      const allow = params.toolCall?.kind === "edit" || command.includes("allowed");
      const optionId = allow ? "allow_once" : "reject_once";
      return { outcome: { outcome: "selected", optionId } };
    },
    // The editor's buffers: notes.txt has unsaved changes.
    async readTextFile(params) {
      seen.reads.push(params);
      return { content: "the buffer text\n" };
    },
    async writeTextFile(params) {
      seen.writes.push(params);
      return {};
    },
    async sessionUpdate(params) {
      seen.updates.push(params);
      seen.onUpdate?.(params);
    },
  };
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const connection = new acp.ClientSideConnection(() => client, stream);
  const done = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  return { label, child, connection, seen, done };
}

/** The text of the agent_message_chunk updates from `start` on. */
function replyText(updates, start = 0) {
  return updates
    .slice(start)
    .filter((n) => n.update.sessionUpdate === "agent_message_chunk")
    .map((n) => n.update.content.text)
    .join("");
}

async function prompt(agent, sessionId, text) {
  const start = agent.seen.updates.length;
  const response = await agent.connection.prompt({
    sessionId,
    prompt: [{ type: "text", text }],
  });
  const updates = agent.seen.updates.slice(start).map((n) => n.update);
  return { stopReason: response.stopReason, text: replyText(agent.seen.updates, start), updates };
}

async function main() {
  const report = {};
  const first = connect("first");
  report.initialize = await first.connection.initialize({
    protocolVersion: acp.PROTOCOL_VERSION + 1,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
  });
  const session = await first.connection.newSession({ cwd, mcpServers: [] });
  report.newSession = session;
  const sessionId = session.sessionId;

  report.hello = await prompt(first, sessionId, "hello");
  report.edited = await prompt(first, sessionId, "edit the notes");
  report.reads = first.seen.reads;
  report.writes = first.seen.writes;
  report.allowed = await prompt(first, sessionId, "run the allowed command");
  report.rejected = await prompt(first, sessionId, "run the other command");
  report.permissions = first.seen.permissions;

  // Cancel as soon as the slow reply has started streaming.
  const started = new Promise((resolve) => {
    first.seen.onUpdate = (n) => {
      if (n.update.sessionUpdate === "agent_message_chunk") resolve();
    };
  });
  const slow = prompt(first, sessionId, "tell me a long story");
  await started;
  await first.connection.cancel({ sessionId });
  report.cancelled = await slow;
  first.seen.onUpdate = undefined;

  first.child.stdin.end();
  report.firstExit = await first.done;

  const second = connect("second");
  await second.connection.initialize({
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: {},
  });
  report.load = await second.connection.loadSession({ sessionId, cwd, mcpServers: [] });
  report.replayed = second.seen.updates.map((n) => ({ sessionId: n.sessionId, ...n.update }));
  second.child.stdin.end();
  report.secondExit = await second.done;

  process.stdout.write(JSON.stringify(report) + "\n");
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`acp client failed: ${error?.stack ?? JSON.stringify(error)}\n`);
    process.exit(1);
  },
);
