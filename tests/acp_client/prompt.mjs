// The smallest editor session with any ACP agent, through the official
// SDK's ClientSideConnection: initialize, session/new, one prompt. Prints
// one JSON report on stdout: {initialize, newSession, stopReason, text,
// kinds, exit}. Used by tests/tests/e2e/acp_third_party.rs; the agent may be a
// third-party one, or `corral attach --dialect acp URL` to go through a
// gateway.
//
// Environment: ACP_AGENT (the program), ACP_AGENT_ARGS (a JSON array of its
// arguments), ACP_CWD (the project directory), ACP_PROMPT (the prompt text,
// default "hello"). The agent inherits the rest of this environment.

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";

import * as acp from "@agentclientprotocol/sdk";

const agentBin = process.env.ACP_AGENT;
const agentArgs = JSON.parse(process.env.ACP_AGENT_ARGS ?? "[]");
const cwd = process.env.ACP_CWD;
const promptText = process.env.ACP_PROMPT ?? "hello";

async function main() {
  const child = spawn(agentBin, agentArgs, { cwd, stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal)));
  const updates = [];
  const client = {
    async requestPermission(params) {
      const allow = params.options.find((o) => o.kind === "allow_once");
      return allow
        ? { outcome: { outcome: "selected", optionId: allow.optionId } }
        : { outcome: { outcome: "cancelled" } };
    },
    async sessionUpdate(params) {
      updates.push(params.update);
    },
  };
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const connection = new acp.ClientSideConnection(() => client, stream);
  // An agent that dies before answering fails the run instead of hanging it.
  const died = exited.then((code) => {
    throw new Error(`the agent exited (${code}) before answering`);
  });
  const ask = (promise) => Promise.race([promise, died]);

  const report = {};
  report.initialize = await ask(
    connection.initialize({ protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} }),
  );
  report.newSession = await ask(connection.newSession({ cwd, mcpServers: [] }));
  const response = await ask(
    connection.prompt({
      sessionId: report.newSession.sessionId,
      prompt: [{ type: "text", text: promptText }],
    }),
  );
  report.stopReason = response.stopReason;
  report.text = updates
    .filter((u) => u.sessionUpdate === "agent_message_chunk" && u.content?.type === "text")
    .map((u) => u.content.text)
    .join("");
  report.kinds = [...new Set(updates.map((u) => u.sessionUpdate))];
  child.stdin.end();
  const timer = setTimeout(() => child.kill("SIGTERM"), 5000);
  report.exit = await exited;
  clearTimeout(timer);
  process.stdout.write(JSON.stringify(report) + "\n");
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`acp prompt client failed: ${error?.stack ?? JSON.stringify(error)}\n`);
    process.exit(1);
  },
);
