//! OpenTelemetry traces over OTLP/HTTP: a prompt sent through the gateway
//! makes one trace, whose gateway span (service `corral`) is the parent of
//! the agent's spans (service `corral-agent`: the prompt, its wait in the
//! queue, each model call with its tokens, each tool call and its wait for
//! permission), received by a small OTLP receiver. Without a gateway the agent starts its own trace
//! and sends its spans before it exits.

use corral_e2e::brief;
use std::time::Duration;

use corral_e2e::gateway::GatewaySpawn;
use corral_e2e::harness::{workspace_bin, READ_TIMEOUT};
use corral_e2e::mock_llm::{MockLlm, Turn};
use corral_e2e::otlp::{OtlpReceiver, ReceivedSpan};
use serde_json::json;

/// Bound on the wait for spans: the exporters send every second.
const SPANS_WAIT: Duration = Duration::from_secs(30);
const PROMPT: &str = "run the checks";

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// Everything the trace of the prompt should hold has arrived.
fn complete(spans: &[ReceivedSpan]) -> bool {
    !named(spans, "forward").is_empty()
        && !named(spans, "prompt").is_empty()
        && !named(spans, "tool_call").is_empty()
        && !named(spans, "permission_wait").is_empty()
        && named(spans, "model_call").len() >= 2
}

#[tokio::test]
async fn a_prompt_is_one_trace_across_the_gateway_and_the_agent() {
    let receiver = OtlpReceiver::start().await;
    let mock = MockLlm::start().await;
    mock.push(Turn::tool_call("bash", json!({"command": "true"})));
    mock.push(Turn::text("done it"));
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .child_arg("--permission-mode")
        .child_arg("ask")
        .arg("--otlp-endpoint")
        .arg(receiver.endpoint())
        .spawn()
        .await;
    let mut client = gateway.client("alpha").await;
    client
        .send(json!({"id": "p", "type": "prompt", "message": PROMPT}))
        .await;
    let asked = client
        .recv_until(|f| f["type"] == "permission_request")
        .await;
    let request_id = asked.last().expect("a permission request")["request_id"].clone();
    client
        .send(json!({"id": "a", "type": "permission_reply", "request_id": request_id, "option": "allow_once"}))
        .await;
    let frames = client.recv_until(|f| f["type"] == "done").await;
    assert!(
        frames.iter().any(|f| f["type"] == "tool_result"),
        "the scripted tool call ran: {}",
        brief(&frames)
    );

    let spans = receiver.wait_for(SPANS_WAIT, complete).await;
    assert!(complete(&spans), "spans received: {}", brief(&spans));

    let forward = named(&spans, "forward");
    assert_eq!(forward.len(), 1, "one gateway span: {}", brief(&forward));
    let forward = forward[0];
    assert_eq!(forward.service, "corral");
    assert_eq!(forward.string("corral.command"), Some("prompt"));
    assert_eq!(forward.string("corral.project"), Some("alpha"));

    let traces: std::collections::BTreeSet<&str> =
        spans.iter().map(|s| s.trace_id.as_str()).collect();
    assert_eq!(
        traces.len(),
        1,
        "one trace for the prompt: {}",
        brief(&spans)
    );

    // The child's root span continues the gateway's.
    let prompt = named(&spans, "prompt");
    assert_eq!(prompt.len(), 1, "{}", brief(&prompt));
    let prompt = prompt[0];
    assert_eq!(prompt.service, "corral-agent");
    assert_eq!(prompt.parent_span_id, forward.span_id);

    let children_of_prompt = |name: &str| -> Vec<&ReceivedSpan> {
        named(&spans, name)
            .into_iter()
            .filter(|s| s.parent_span_id == prompt.span_id && s.service == "corral-agent")
            .collect()
    };
    assert_eq!(children_of_prompt("queued").len(), 1);
    let calls = children_of_prompt("model_call");
    assert_eq!(
        calls.len(),
        2,
        "a tool turn, then the answer: {}",
        brief(&calls)
    );
    for call in &calls {
        assert!(call.int("gen_ai.usage.input_tokens").is_some(), "{call:?}");
        assert!(call.int("gen_ai.usage.output_tokens").is_some(), "{call:?}");
        assert_eq!(call.int("corral.attempts"), Some(1), "{call:?}");
        assert!(call.attributes.contains_key("corral.cost_usd"), "{call:?}");
    }
    let tools = children_of_prompt("tool_call");
    assert_eq!(tools.len(), 1, "{}", brief(&tools));
    assert_eq!(tools[0].string("corral.tool"), Some("bash"));
    let waits = named(&spans, "permission_wait");
    assert_eq!(waits.len(), 1, "{}", brief(&waits));
    assert_eq!(waits[0].parent_span_id, tools[0].span_id);
    assert_eq!(waits[0].string("corral.outcome"), Some("allowed"));

    // Names, counts and status only: the prompt's text is in no span.
    let text = format!("{spans:?}");
    assert!(!text.contains(PROMPT), "the prompt leaked into a span");
}

#[tokio::test]
async fn the_agent_alone_starts_its_own_trace_and_sends_it_before_exiting() {
    let receiver = OtlpReceiver::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut command = tokio::process::Command::new(workspace_bin("corral-agent"));
    command
        .args(["run", "--provider", "echo", "--otlp-endpoint"])
        .arg(receiver.endpoint())
        .arg("--cwd")
        .arg(dir.path())
        .arg("hello")
        .env("ZUT_HOME", dir.path())
        .env_remove("ZUTCORE_RPC_TOKEN")
        .kill_on_drop(true);
    let output = tokio::time::timeout(READ_TIMEOUT, command.output())
        .await
        .expect("corral-agent run finishes")
        .expect("run corral-agent");
    assert!(output.status.success(), "{output:?}");

    // Sent at exit: the spans are there once the process is gone.
    let spans = receiver.spans();
    let prompt = named(&spans, "prompt");
    assert_eq!(prompt.len(), 1, "{}", brief(&spans));
    assert_eq!(prompt[0].service, "corral-agent");
    assert_eq!(
        prompt[0].parent_span_id,
        "",
        "a root span: {}",
        brief(&spans)
    );
    let calls = named(&spans, "model_call");
    assert_eq!(calls.len(), 1, "{}", brief(&spans));
    assert_eq!(calls[0].trace_id, prompt[0].trace_id);
}
