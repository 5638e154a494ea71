//! The own-runs extension, as far as it is the same in every dialect:
//! how a client asks for it ([`OwnRuns`]), what a request may do to runs
//! ([`Claim`]) and what an answer says of them ([`Answer`]). Each
//! dialect's module reads and writes its own field names (`own_runs` /
//! `client_id` / `run_id` in zut and letscode, `ownRuns` / `clientId` /
//! `runId` in Zi). Pure, no I/O.

use serde_json::{Map, Value};

/// A client's wish to receive only its own runs' events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnRuns {
    /// `Some(true)`: only its own runs (plus events outside runs);
    /// `Some(false)`: everything; `None`: unchanged (everything at first).
    pub on: Option<bool>,
    /// The `client_id` the gateway gave an earlier connection of this
    /// client: runs that one started count as this one's (resuming).
    pub client_id: Option<u64>,
}

impl OwnRuns {
    /// Reads `own` (a boolean) and `id` (a client id: a string of digits
    /// or a number) from a hello or its parameters.
    pub fn read(fields: &Map<String, Value>, own: &str, id: &str) -> Result<OwnRuns, String> {
        let on = match fields.get(own) {
            None | Some(Value::Null) => None,
            Some(Value::Bool(on)) => Some(*on),
            Some(_) => return Err(format!("`{own}` must be a boolean")),
        };
        let client_id =
            match fields.get(id) {
                None | Some(Value::Null) => None,
                Some(value) => Some(client_id(value).ok_or_else(|| {
                    format!("`{id}` must be a client id the gateway gave (digits)")
                })?),
            };
        Ok(OwnRuns { on, client_id })
    }

    /// From the upgrade request's query: `own_runs=true|false|1|0` and
    /// `client_id=N`.
    pub fn from_query(own_runs: Option<&str>, client: Option<&str>) -> Result<OwnRuns, String> {
        let on = match own_runs {
            None => None,
            Some("true" | "1") => Some(true),
            Some("false" | "0") => Some(false),
            Some(other) => return Err(format!("own_runs must be true or false, not {other:?}")),
        };
        let client_id = match client {
            None => None,
            Some(text) => Some(
                text.parse::<u64>()
                    .map_err(|_| format!("client_id must be digits, not {text:?}"))?,
            ),
        };
        Ok(OwnRuns { on, client_id })
    }
}

fn client_id(value: &Value) -> Option<u64> {
    match value {
        Value::String(text) if !text.is_empty() => text.parse().ok(),
        other => other.as_u64(),
    }
}

/// What a forwarded request may do to runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Nothing.
    None,
    /// It may start a run (now or queued).
    May,
    /// It joins the run in progress (letscode `steer`, Zi `continue`);
    /// with none, like [`Claim::May`].
    Join,
    /// Input for the run in progress, or else for the next run to start
    /// (Zi `steer`, `follow_up`): its sender joins that run.
    Input,
    /// It interrupts: runs queued before it will not start.
    Interrupt,
}

/// What a child's answer to a claim says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Nothing new (a later answer, an unrelated one).
    Nothing,
    /// The run is in progress from here (zut `started:true`).
    Now,
    /// The next run-start event begins it (letscode `ack` of `prompt`).
    Next,
    /// Accepted: a run will start for it in turn, or it joined one.
    Queued,
    /// No run comes of it (refused, failed).
    NoRun,
    /// An interruption settled: claims before it were discarded.
    Interrupted,
}

/// Parses a child's answer line as an object, when it is one.
pub(super) fn object(line: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice(super::trim(line)) {
        Ok(Value::Object(frame)) => Some(frame),
        _ => None,
    }
}

/// Adds `"key":"run"` (before `"seq"`) to an event line built as
/// `{…,"seq":N}` by the caller; returns the field text to splice.
pub(super) fn field(key: &str, run: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + run.len() + 6);
    out.push(b'"');
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
    out.extend_from_slice(Value::String(run.to_string()).to_string().as_bytes());
    out.push(b',');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn reads_the_hello_fields_and_the_query() {
        let hello = map(json!({"own_runs": true, "client_id": "17"}));
        let read = OwnRuns::read(&hello, "own_runs", "client_id").unwrap();
        assert_eq!((read.on, read.client_id), (Some(true), Some(17)));
        assert_eq!(
            OwnRuns::read(&map(json!({})), "ownRuns", "clientId").unwrap(),
            OwnRuns::default()
        );
        let bad = map(json!({"ownRuns": "yes"}));
        assert!(OwnRuns::read(&bad, "ownRuns", "clientId").is_err());
        let bad = map(json!({"clientId": "seven"}));
        assert!(OwnRuns::read(&bad, "ownRuns", "clientId").is_err());
        let query = OwnRuns::from_query(Some("1"), Some("4")).unwrap();
        assert_eq!((query.on, query.client_id), (Some(true), Some(4)));
        assert!(OwnRuns::from_query(Some("maybe"), None).is_err());
        assert!(OwnRuns::from_query(None, Some("-1")).is_err());
    }

    #[test]
    fn the_run_field_is_valid_json() {
        assert_eq!(field("run_id", "run-3"), br#""run_id":"run-3","#.to_vec());
    }
}
