// A scripted ACP agent for the gateway's tests: one session whose answers
// carry `configOptions`, `models`, `modes` and a vendor field, and which
// reports a mode change only through `config_option_update` (as some
// agents do). No dependencies: JSON-RPC lines on stdio.
import { createInterface } from "node:readline";

const SESSION = "fake-session-1";
let mode = "ask";
let model = "small";

const options = () => [
  {
    id: "mode",
    name: "Mode",
    category: "mode",
    type: "select",
    currentValue: mode,
    options: [
      { value: "ask", name: "Ask" },
      { value: "code", name: "Code" },
    ],
  },
  {
    id: "model",
    name: "Model",
    category: "model",
    type: "select",
    currentValue: model,
    options: [
      { value: "small", name: "Small" },
      { value: "large", name: "Large" },
    ],
  },
];

const state = () => ({
  configOptions: options(),
  models: {
    currentModelId: model,
    availableModels: [
      { modelId: "small", name: "Small" },
      { modelId: "large", name: "Large" },
    ],
  },
  modes: {
    currentModeId: mode,
    availableModes: [
      { id: "ask", name: "Ask" },
      { id: "code", name: "Code" },
    ],
  },
  vendorExtra: { kept: true },
});

const send = (message) =>
  process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...message }) + "\n");
const answer = (id, result) => send({ id, result });
const update = (update) =>
  send({ method: "session/update", params: { sessionId: SESSION, update } });

createInterface({ input: process.stdin }).on("line", (line) => {
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    return;
  }
  const { id, method, params } = message;
  if (id === undefined || method === undefined) return;
  switch (method) {
    case "initialize":
      return answer(id, {
        protocolVersion: 1,
        agentCapabilities: {
          loadSession: true,
          promptCapabilities: { image: false, embeddedContext: true },
          sessionCapabilities: { fork: {}, list: {} },
        },
      });
    case "session/new":
      return answer(id, { sessionId: SESSION, ...state() });
    case "session/load":
      return answer(id, state());
    case "session/set_config_option":
      if (params.configId === "mode") mode = params.value;
      if (params.configId === "model") model = params.value;
      update({ sessionUpdate: "config_option_update", configOptions: options() });
      return answer(id, { configOptions: options() });
    case "session/prompt":
      update({
        sessionUpdate: "agent_message_chunk",
        content: { type: "text", text: `mode ${mode}, model ${model}` },
      });
      return answer(id, { stopReason: "end_turn" });
    default:
      return send({ id, error: { code: -32601, message: `no ${method}` } });
  }
});
