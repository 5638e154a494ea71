//! What a zut client still waits for, so `corral attach` can let it finish
//! after stdin closes: requests whose `response` has not arrived, and runs
//! (a `prompt`/`compact` answered `started:true`) not yet ended by `done`.
//! Pure logic, no I/O.
//!
//! Requests with an `id` are matched by it. Requests without one cannot be,
//! so the next id-less response naming the same command answers one. Runs
//! are counted, not matched: the agent runs one prompt or compact at a time
//! and sends `started` only when a run begins, so the next `done` ends the
//! run in progress; a `done` of another client's run while none of ours is
//! going is ignored.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Requests and runs of this client in flight.
#[derive(Debug, Default)]
pub struct InFlight {
    /// Requests with an `id` awaiting their response, by the id's JSON text
    /// (so `"1"` and `1` differ); a count because a tool may reuse an id.
    by_id: HashMap<String, usize>,
    /// Requests without an `id` awaiting a response, by command (`None`
    /// when the request had no string `type`).
    by_command: HashMap<Option<String>, usize>,
    /// Runs started for this client and not yet ended by a `done`.
    runs: usize,
}

impl InFlight {
    /// Notes a request forwarded to the gateway.
    pub fn sent(&mut self, request: &Map<String, Value>) {
        match id_key(request) {
            Some(id) => *self.by_id.entry(id).or_default() += 1,
            None => *self.by_command.entry(text(request, "type")).or_default() += 1,
        }
    }

    /// Notes a frame received from the gateway.
    pub fn received(&mut self, frame: &Value) {
        let Some(frame) = frame.as_object() else {
            return;
        };
        match frame.get("type").and_then(Value::as_str) {
            Some("response") => {
                match id_key(frame) {
                    Some(id) => take(&mut self.by_id, &id),
                    None => take(&mut self.by_command, &text(frame, "command")),
                }
                if starts_run(frame) {
                    self.runs += 1;
                }
            }
            Some("done") => self.runs = self.runs.saturating_sub(1),
            _ => {}
        }
    }

    /// Requests still awaiting a response.
    pub fn requests(&self) -> usize {
        self.by_id.values().chain(self.by_command.values()).sum()
    }

    /// Runs still in progress.
    pub fn runs(&self) -> usize {
        self.runs
    }

    /// Nothing left to wait for.
    pub fn is_idle(&self) -> bool {
        self.requests() == 0 && self.runs == 0
    }
}

/// A successful `prompt`/`compact` response with `data.started:true`.
fn starts_run(response: &Map<String, Value>) -> bool {
    let command = response.get("command").and_then(Value::as_str);
    matches!(command, Some("prompt" | "compact"))
        && response.get("success") == Some(&Value::Bool(true))
        && response.get("data").and_then(|d| d.get("started")) == Some(&Value::Bool(true))
}

/// The `id` as JSON text; absent or `null` is no id.
fn id_key(frame: &Map<String, Value>) -> Option<String> {
    frame
        .get("id")
        .filter(|id| !id.is_null())
        .map(Value::to_string)
}

fn text(frame: &Map<String, Value>, field: &str) -> Option<String> {
    frame.get(field).and_then(Value::as_str).map(str::to_string)
}

/// Counts one answer against `key`, if anything waits for it.
fn take<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(count) = counts.get_mut(key) {
        *count -= 1;
        if *count == 0 {
            counts.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sent(inflight: &mut InFlight, request: Value) {
        inflight.sent(request.as_object().unwrap());
    }

    #[test]
    fn a_prompt_is_in_flight_until_its_done() {
        let mut f = InFlight::default();
        assert!(f.is_idle());
        sent(&mut f, json!({"id":"1","type":"prompt","message":"hi"}));
        assert_eq!((f.requests(), f.runs()), (1, 0));
        f.received(&json!({"type":"text_delta","delta":"x"}));
        f.received(&json!({"type":"response","id":"1","command":"prompt","success":true,"data":{"started":true}}));
        assert_eq!((f.requests(), f.runs()), (0, 1));
        f.received(&json!({"type":"done","seq":4}));
        assert!(f.is_idle());
    }

    #[test]
    fn failed_or_plain_responses_start_no_run() {
        let mut f = InFlight::default();
        sent(&mut f, json!({"id":1,"type":"prompt","message":""}));
        sent(&mut f, json!({"id":"1","type":"get_state"}));
        f.received(
            &json!({"type":"response","id":1,"command":"prompt","success":false,"error":"empty"}),
        );
        assert_eq!(
            (f.requests(), f.runs()),
            (1, 0),
            "number 1 is not string \"1\""
        );
        f.received(&json!({"type":"response","id":"1","command":"get_state","success":true,"data":{"started":true}}));
        assert!(f.is_idle());
    }

    #[test]
    fn id_less_requests_are_answered_by_command() {
        let mut f = InFlight::default();
        sent(&mut f, json!({"type":"ping"}));
        sent(&mut f, json!({"id":null,"type":"compact"}));
        sent(&mut f, json!({"message":"no type"}));
        f.received(&json!({"type":"response","command":"get_state","success":true}));
        assert_eq!(
            f.requests(),
            3,
            "a response for another command answers nothing"
        );
        f.received(&json!({"type":"response","id":null,"command":"compact","success":true,"data":{"started":true}}));
        f.received(&json!({"type":"response","command":"ping","success":true}));
        f.received(&json!({"type":"response","success":false,"error":"missing field `type`"}));
        assert_eq!((f.requests(), f.runs()), (0, 1));
    }

    #[test]
    fn reused_ids_and_foreign_dones() {
        let mut f = InFlight::default();
        f.received(&json!({"type":"done"}));
        assert_eq!(f.runs(), 0, "another client's done is ignored");
        sent(&mut f, json!({"id":"x","type":"ping"}));
        sent(&mut f, json!({"id":"x","type":"ping"}));
        f.received(&json!({"type":"response","id":"x","command":"ping","success":true}));
        assert_eq!(f.requests(), 1);
        f.received(&json!({"type":"response","id":"x","command":"ping","success":true}));
        f.received(&json!({"type":"response","id":"x","command":"ping","success":true}));
        assert!(f.is_idle());
        f.received(&json!("not an object"));
        assert!(f.is_idle());
    }
}
