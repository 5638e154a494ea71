//! Agent events → letscode-rpc/1 domain events. Stateful: it assembles the
//! streamed assistant message for `message_update`, collects a turn's
//! message and tool results for `turn_end`, and a run's messages for
//! `agent_end`; it also writes the run's `ack` / `done` around it.

use corral_protocol::permission::{self, PermissionOption, PERMISSION_OPTIONS};
use corral_protocol::zut::Stop;
use serde_json::{json, Value};

use super::wire::{self, Private};
use crate::agent::{AgentEvent, Output};
use crate::rpc::{line_of, Encoder};
use crate::transcript::{now_rfc3339, Role};

/// Writes letscode lines in the order the outputs arrive.
#[derive(Debug, Default)]
pub struct LetscodeEncoder {
    /// The prompt run whose events are being written.
    run: Option<Run>,
}

/// What the encoder knows about the active run.
#[derive(Debug, Default)]
struct Run {
    /// The `prompt` command's id, answered with `done` after `agent_end`.
    reply: Option<Value>,
    /// Whether `agent_start` was written (at the run's first user message).
    started: bool,
    /// Messages the run added, in transcript order.
    messages: Vec<Value>,
    /// Why the run ended early (`agent_end.error`).
    error: Option<String>,
    turn: Option<Turn>,
    /// The last turn's number (the next `turn_start` replaces it).
    step: u32,
}

/// The turn in progress.
#[derive(Debug, Default)]
struct Turn {
    /// The assistant message being streamed (between `message_start` and
    /// `message_end`).
    draft: Option<Draft>,
    /// The turn's assistant message once `message_end` was written.
    message: Option<Value>,
    tool_results: Vec<Value>,
    usage: Option<Value>,
}

/// An assistant message assembled from stream deltas.
#[derive(Debug)]
struct Draft {
    timestamp: String,
    blocks: Vec<DraftBlock>,
}

#[derive(Debug)]
enum DraftBlock {
    Text(String),
    Thinking(String),
    ToolCall {
        id: String,
        name: String,
        /// The streamed JSON text of the arguments.
        args: String,
    },
}

impl Draft {
    fn new() -> Draft {
        Draft {
            timestamp: now_rfc3339(),
            blocks: Vec::new(),
        }
    }

    fn push_text(&mut self, delta: &str, thinking: bool) {
        match (self.blocks.last_mut(), thinking) {
            (Some(DraftBlock::Text(text)), false) | (Some(DraftBlock::Thinking(text)), true) => {
                text.push_str(delta)
            }
            (_, false) => self.blocks.push(DraftBlock::Text(delta.to_string())),
            (_, true) => self.blocks.push(DraftBlock::Thinking(delta.to_string())),
        }
    }

    fn has_text(&self) -> bool {
        self.blocks
            .iter()
            .any(|b| matches!(b, DraftBlock::Text(t) if !t.is_empty()))
    }

    /// Only the text (what the agent keeps of an aborted answer).
    fn text_only(&self) -> Value {
        let text: String = self
            .blocks
            .iter()
            .filter_map(|b| match b {
                DraftBlock::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        json!({"role": "assistant", "content": [{"type": "text", "text": text}],
               "timestamp": self.timestamp})
    }

    fn to_value(&self) -> Value {
        let content: Vec<Value> = self
            .blocks
            .iter()
            .map(|block| match block {
                DraftBlock::Text(text) => json!({"type": "text", "text": text}),
                DraftBlock::Thinking(text) => json!({"type": "thinking", "thinking": text}),
                DraftBlock::ToolCall { id, name, args } => {
                    let arguments = if args.trim().is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str(args).unwrap_or(Value::Null)
                    };
                    json!({"type": "tool_call", "id": id, "name": name, "arguments": arguments})
                }
            })
            .collect();
        json!({"role": "assistant", "content": content, "timestamp": self.timestamp})
    }
}

impl Encoder for LetscodeEncoder {
    fn encode(&mut self, output: Output, lines: &mut Vec<Vec<u8>>) {
        let frames = match output {
            Output::Event(event) => self.event(event),
            Output::Frame(frame) => match Private::from_frame(&frame) {
                Some(private) => self.private(private),
                None => vec![frame],
            },
        };
        lines.extend(frames.iter().filter_map(line_of));
    }
}

impl LetscodeEncoder {
    fn private(&mut self, private: Private) -> Vec<Value> {
        match private {
            Private::RunStart { reply } => {
                let frames = reply.iter().map(|r| wire::ack(&r.id)).collect();
                self.run = Some(Run {
                    reply: reply.map(|r| r.id),
                    ..Run::default()
                });
                frames
            }
            Private::Farewell { reply } => {
                let mut frames: Vec<Value> = reply.iter().map(|r| wire::done(&r.id)).collect();
                frames.push(wire::bye());
                frames
            }
        }
    }

    /// The frames for one agent event.
    fn event(&mut self, event: AgentEvent) -> Vec<Value> {
        let run = self.run.get_or_insert_with(Run::default);
        let mut out = Vec::new();
        match event {
            AgentEvent::UserMessage(m) => {
                let message = wire::message(&m);
                run.messages.push(message.clone());
                if run.started {
                    out.push(json!({"type": "message_start", "message": message}));
                    out.push(json!({"type": "message_end", "message": message}));
                } else {
                    run.started = true;
                    out.push(json!({"type": "agent_start", "messages": [message]}));
                }
            }
            AgentEvent::TurnStart { step } => {
                run.step = step;
                run.turn = Some(Turn::default());
                out.push(json!({"type": "turn_start", "turn": step}));
            }
            AgentEvent::RetryScheduled {
                attempt,
                max_attempts,
                delay,
            } => out.push(json!({
                "type": "retry", "attempt": attempt, "max_attempts": max_attempts,
                "delay_ms": u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            })),
            AgentEvent::AssistantStart => {
                let turn = run.turn.get_or_insert_with(Turn::default);
                // A retried request opens no second message.
                if turn.draft.is_none() && turn.message.is_none() {
                    let draft = Draft::new();
                    out.push(json!({"type": "message_start", "message": draft.to_value()}));
                    turn.draft = Some(draft);
                }
            }
            AgentEvent::TextDelta(delta) => run.update(
                &mut out,
                json!({"type": "text_delta", "delta": delta}),
                |d| d.push_text(&delta, false),
            ),
            AgentEvent::ThinkingDelta(delta) => run.update(
                &mut out,
                json!({"type": "thinking_delta", "delta": delta}),
                |d| d.push_text(&delta, true),
            ),
            AgentEvent::ToolUseStart { id, name } => run.update(
                &mut out,
                json!({"type": "tool_call_start", "tool_call_id": id, "name": name}),
                |d| {
                    d.blocks.push(DraftBlock::ToolCall {
                        id: id.clone(),
                        name: name.clone(),
                        args: String::new(),
                    })
                },
            ),
            AgentEvent::ToolUseArgs { id, delta } => run.update(
                &mut out,
                json!({"type": "tool_call_delta", "tool_call_id": id, "delta": delta}),
                |d| {
                    let block = d.blocks.iter_mut().rev().find_map(|b| match b {
                        DraftBlock::ToolCall { id: i, args, .. } if *i == id => Some(args),
                        _ => None,
                    });
                    if let Some(args) = block {
                        args.push_str(&delta);
                    }
                },
            ),
            AgentEvent::ToolUseEnd { id } => run.update(
                &mut out,
                json!({"type": "tool_call_end", "tool_call_id": id}),
                |_| {},
            ),
            AgentEvent::ToolCall { id, name, args } => {
                // Tools run before the agent reports the message: end it now.
                run.end_draft(&mut out);
                out.push(json!({"type": "tool_execution_start", "tool_call_id": id,
                                "tool_name": name, "arguments": args}));
            }
            AgentEvent::ToolProgress { id, text } => {
                out.push(json!({"type": "tool_execution_update", "tool_call_id": id, "text": text}))
            }
            AgentEvent::PlanUpdate { id, update } => {
                let plan: Vec<Value> = update
                    .plan
                    .iter()
                    .map(|item| json!({"step": item.step, "status": item.status}))
                    .collect();
                out.push(json!({"type": "tool_execution_update", "tool_call_id": id,
                                "plan": {"explanation": update.explanation, "plan": plan}}));
            }
            AgentEvent::ToolResult {
                id,
                is_error,
                content,
            } => {
                let result = wire::tool_result(&id, is_error, &content);
                out.push(json!({"type": "tool_execution_end", "tool_call_id": id,
                                "result": result, "is_error": is_error}));
                run.turn
                    .get_or_insert_with(Turn::default)
                    .tool_results
                    .push(result);
            }
            AgentEvent::AssistantMessage(m) => {
                let message = wire::message(&m);
                let turn = run.turn.get_or_insert_with(Turn::default);
                if turn.message.is_none() {
                    if turn.draft.take().is_none() {
                        out.push(json!({"type": "message_start", "message": message}));
                    }
                    out.push(json!({"type": "message_end", "message": message}));
                }
                turn.message = Some(message.clone());
                run.messages.push(message);
                if !turn.tool_results.is_empty() {
                    run.messages.push(json!({"role": wire::role(Role::Tool),
                        "content": turn.tool_results, "timestamp": now_rfc3339()}));
                }
            }
            AgentEvent::Usage { turn: usage, .. } => {
                if let Some(turn) = run.turn.as_mut() {
                    turn.usage = serde_json::to_value(usage).ok();
                }
            }
            AgentEvent::TurnEnd { stop, error } => {
                let turn = run.turn.take().unwrap_or_default();
                let mut message = turn.message;
                if let Some(draft) = turn.draft {
                    let value = draft.to_value();
                    out.push(json!({"type": "message_end", "message": value}));
                    if stop == Stop::Aborted && draft.has_text() {
                        run.messages.push(draft.text_only());
                    }
                    message = Some(value);
                }
                match (stop, error) {
                    (_, Some(error)) => run.error = Some(error),
                    (Stop::Aborted, None) => run.error = Some("aborted".into()),
                    _ => {}
                }
                out.push(
                    json!({"type": "turn_end", "turn": run.step, "message": message,
                    "tool_results": turn.tool_results, "stop": stop, "usage": turn.usage}),
                );
            }
            AgentEvent::Error(message) => {
                // Outside a turn an error ends the run (the step limit).
                if run.turn.is_none() && run.step > 0 && run.error.is_none() {
                    run.error = Some(message.clone());
                }
                out.push(json!({"type": "error", "error": message}));
            }
            AgentEvent::Done => {
                let run = self.run.take().unwrap_or_default();
                out.push(json!({"type": "agent_end", "messages": run.messages,
                                "error": run.error}));
                out.extend(run.reply.as_ref().map(wire::done));
            }
            AgentEvent::PermissionRequest(ask) => out.push(json!({
                "type": permission::REQUEST_EVENT,
                "request_id": ask.id,
                "tool_call_id": ask.call_id,
                "tool_name": ask.tool,
                "arguments": ask.args,
                "kind": ask.risk.as_str(),
                "options": PERMISSION_OPTIONS.map(PermissionOption::as_str),
            })),
            AgentEvent::PermissionResolved {
                id,
                call_id,
                outcome,
            } => out.push(json!({
                "type": permission::RESOLVED_EVENT,
                "request_id": id,
                "tool_call_id": call_id,
                "outcome": outcome.as_str(),
            })),
            AgentEvent::Refused
            | AgentEvent::RequestStarted { .. }
            | AgentEvent::CacheDiagnostics { .. }
            | AgentEvent::ToolExecutionStarted { .. }
            | AgentEvent::TurnRecovery { .. }
            | AgentEvent::CompactDone { .. } => {}
        }
        out
    }
}

impl Run {
    /// Applies a stream delta to the draft and writes `message_update`.
    fn update(
        &mut self,
        out: &mut Vec<Value>,
        stream_event: Value,
        apply: impl FnOnce(&mut Draft),
    ) {
        let turn = self.turn.get_or_insert_with(Turn::default);
        let draft = turn.draft.get_or_insert_with(|| {
            let draft = Draft::new();
            out.push(json!({"type": "message_start", "message": draft.to_value()}));
            draft
        });
        apply(draft);
        out.push(
            json!({"type": "message_update", "message": draft.to_value(),
                        "stream_event": stream_event}),
        );
    }

    /// Writes `message_end` for the streamed message, if one is open.
    fn end_draft(&mut self, out: &mut Vec<Value>) {
        if let Some(turn) = self.turn.as_mut() {
            if let Some(draft) = turn.draft.take() {
                let message = draft.to_value();
                out.push(json!({"type": "message_end", "message": message}));
                turn.message = Some(message);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{Block, Message};

    fn run(events: Vec<Output>) -> Vec<Value> {
        let mut encoder = LetscodeEncoder::default();
        let mut lines = Vec::new();
        for output in events {
            encoder.encode(output, &mut lines);
        }
        lines
            .iter()
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    fn types(frames: &[Value]) -> Vec<&str> {
        frames.iter().map(|f| f["type"].as_str().unwrap()).collect()
    }

    fn start(id: &str) -> Output {
        Output::Frame(
            Private::RunStart {
                reply: Some(wire::Reply { id: json!(id) }),
            }
            .to_frame(),
        )
    }

    #[test]
    fn tool_step_ends_the_message_before_tools_run() {
        use AgentEvent as E;
        let call = Block::ToolCall {
            id: "c1".into(),
            name: "ls".into(),
            args: json!({}),
        };
        let frames = run(vec![
            start("r1"),
            Output::Event(E::UserMessage(Message::new(
                Role::User,
                vec![Block::text("go")],
            ))),
            Output::Event(E::TurnStart { step: 1 }),
            Output::Event(E::AssistantStart),
            Output::Event(E::ToolUseStart {
                id: "c1".into(),
                name: "ls".into(),
            }),
            Output::Event(E::ToolUseArgs {
                id: "c1".into(),
                delta: "{\"a\":".into(),
            }),
            Output::Event(E::ToolUseArgs {
                id: "c1".into(),
                delta: "1}".into(),
            }),
            Output::Event(E::ToolCall {
                id: "c1".into(),
                name: "ls".into(),
                args: json!({"a": 1}),
            }),
            Output::Event(E::ToolResult {
                id: "c1".into(),
                is_error: false,
                content: vec![Block::text("x")],
            }),
            Output::Event(E::AssistantMessage(Message::new(
                Role::Assistant,
                vec![call],
            ))),
            Output::Event(E::TurnEnd {
                stop: Stop::ToolUse,
                error: None,
            }),
            Output::Event(E::Done),
        ]);
        assert_eq!(
            types(&frames),
            [
                "ack",
                "agent_start",
                "turn_start",
                "message_start",
                "message_update",
                "message_update",
                "message_update",
                "message_end",
                "tool_execution_start",
                "tool_execution_end",
                "turn_end",
                "agent_end",
                "done"
            ]
        );
        assert_eq!(
            frames[7]["message"]["content"][0]["arguments"],
            json!({"a": 1})
        );
        assert_eq!(frames[10]["tool_results"][0]["tool_call_id"], "c1");
        let roles: Vec<&Value> = frames[11]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| &m["role"])
            .collect();
        assert_eq!(roles, ["user", "assistant", "tool"]);
        assert_eq!(frames[12], json!({"type": "done", "id": "r1"}));
    }

    #[test]
    fn an_aborted_stream_keeps_its_text_and_reports_the_abort() {
        use AgentEvent as E;
        let frames = run(vec![
            start("r1"),
            Output::Event(E::UserMessage(Message::new(
                Role::User,
                vec![Block::text("go")],
            ))),
            Output::Event(E::TurnStart { step: 1 }),
            Output::Event(E::AssistantStart),
            Output::Event(E::TextDelta("par".into())),
            Output::Event(E::TurnEnd {
                stop: Stop::Aborted,
                error: None,
            }),
            Output::Event(E::Done),
        ]);
        let end = &frames[frames.len() - 2];
        assert_eq!(end["error"], "aborted");
        assert_eq!(end["messages"][1]["content"][0]["text"], "par");
        assert_eq!(frames[5]["type"], "message_end");
    }

    #[test]
    fn queued_runs_have_no_ack_or_done_and_errors_have_no_id() {
        use AgentEvent as E;
        let frames = run(vec![
            Output::Frame(Private::RunStart { reply: None }.to_frame()),
            Output::Event(E::UserMessage(Message::new(
                Role::User,
                vec![Block::text("go")],
            ))),
            Output::Event(E::Error("oops".into())),
            Output::Event(E::Done),
        ]);
        assert_eq!(types(&frames), ["agent_start", "error", "agent_end"]);
        assert_eq!(frames[1], json!({"type": "error", "error": "oops"}));
    }
}
