// A small MCP server over stdio for the agent's fault tests
// (tests/tests/e2e/agent_mcp*.rs), with no dependencies: newline-delimited
// JSON-RPC on stdin/stdout. Tools:
//   read_path {path}  the file's text, or an error naming why not
//   env {name}        the value of an environment variable ("" if unset)
//   pid {}            this process's pid
//   hang {}           never answers; a notifications/cancelled for it is
//                     appended to the file $CANCEL_LOG
//   crash {}          exits with status 3 before answering
//   grow {}           adds the tool `grown` and sends
//                     notifications/tools/list_changed
import { appendFileSync, readFileSync } from "node:fs";
import { createInterface } from "node:readline";

const object = (properties = {}, required = []) => ({ type: "object", properties, required });
const tools = [
  { name: "read_path", description: "Read a file", inputSchema: object({ path: { type: "string" } }, ["path"]), annotations: { readOnlyHint: true } },
  { name: "env", description: "An environment variable", inputSchema: object({ name: { type: "string" } }, ["name"]) },
  { name: "pid", description: "The server's pid", inputSchema: object() },
  { name: "hang", description: "Never answers", inputSchema: object() },
  { name: "crash", description: "Exits", inputSchema: object() },
  { name: "grow", description: "Adds a tool", inputSchema: object() },
];

const send = (message) => process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...message }) + "\n");
const text = (id, value, isError = false) => send({ id, result: { content: [{ type: "text", text: String(value) }], isError } });

function call(id, name, args) {
  switch (name) {
    case "read_path":
      try {
        return text(id, readFileSync(args.path, "utf8"));
      } catch (e) {
        return text(id, `cannot read ${args.path}: ${e.code || e.message}`, true);
      }
    case "env":
      return text(id, process.env[args.name] ?? "");
    case "pid":
      return text(id, process.pid);
    case "hang":
      return;
    case "crash":
      process.exit(3);
    case "grow":
      if (!tools.some((t) => t.name === "grown")) {
        tools.push({ name: "grown", description: "Added at run time", inputSchema: object() });
      }
      send({ method: "notifications/tools/list_changed" });
      return text(id, "grown");
    case "grown":
      return text(id, "I was added later");
    default:
      return send({ id, error: { code: -32602, message: `unknown tool ${name}` } });
  }
}

createInterface({ input: process.stdin }).on("line", (line) => {
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    return;
  }
  const { id, method, params = {} } = message;
  switch (method) {
    case "initialize":
      return send({
        id,
        result: {
          protocolVersion: params.protocolVersion,
          capabilities: { tools: { listChanged: true } },
          serverInfo: { name: "corral-fixture", version: "1.0.0" },
        },
      });
    case "tools/list":
      return send({ id, result: { tools } });
    case "tools/call":
      return call(id, params.name, params.arguments ?? {});
    case "ping":
      return send({ id, result: {} });
    case "notifications/cancelled":
      if (process.env.CANCEL_LOG) {
        appendFileSync(process.env.CANCEL_LOG, JSON.stringify(params) + "\n");
      }
      return;
    default:
      if (id !== undefined) {
        send({ id, error: { code: -32601, message: `no method ${method}` } });
      }
  }
});
