//! The little the gateway reads and writes of zut frames: the envelope
//! (`type`, `id`), the `seq` stamp on events, id restoration on responses,
//! and the frames it makes up itself.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The only fields the gateway interprets on a child line.
#[derive(Debug, Deserialize)]
pub struct Envelope {
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub id: Option<Value>,
}

/// Reads the envelope; `None` when the line is not a JSON object.
pub fn envelope(line: &[u8]) -> Option<Envelope> {
    let trimmed = trim(line);
    if trimmed.first() != Some(&b'{') {
        return None;
    }
    serde_json::from_slice(trimmed).ok()
}

/// Adds `"seq":N` as the last field of a JSON object line, leaving every
/// other byte as the child wrote it.
pub fn stamp_seq(line: &[u8], seq: u64) -> Option<Bytes> {
    let trimmed = trim(line);
    if trimmed.len() < 2 || trimmed[0] != b'{' || trimmed[trimmed.len() - 1] != b'}' {
        return None;
    }
    let body = &trimmed[..trimmed.len() - 1];
    let empty = body[1..].iter().all(u8::is_ascii_whitespace);
    let mut out = Vec::with_capacity(trimmed.len() + 24);
    out.extend_from_slice(body);
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(b"\"seq\":");
    out.extend_from_slice(seq.to_string().as_bytes());
    out.push(b'}');
    Some(Bytes::from(out))
}

/// A response of the child for a client: its own id back (or none).
pub fn restore_id(mut response: Map<String, Value>, original: Option<Value>) -> Bytes {
    match original {
        Some(id) => {
            response.insert("id".into(), id);
        }
        None => {
            response.remove("id");
        }
    }
    to_bytes(&Value::Object(response))
}

/// A `response` frame the gateway answers itself.
pub fn response(
    id: Option<&Value>,
    command: Option<&str>,
    result: Result<Option<Value>, String>,
) -> Bytes {
    let mut map = Map::new();
    map.insert("type".into(), json!("response"));
    if let Some(id) = id {
        map.insert("id".into(), id.clone());
    }
    if let Some(command) = command {
        map.insert("command".into(), json!(command));
    }
    match result {
        Ok(data) => {
            map.insert("success".into(), json!(true));
            if let Some(data) = data {
                map.insert("data".into(), data);
            }
        }
        Err(error) => {
            map.insert("success".into(), json!(false));
            map.insert("error".into(), json!(error));
        }
    }
    to_bytes(&Value::Object(map))
}

/// A gateway event (`child_started`, `turn_end`, ...) with its `seq`.
pub fn event(kind: &str, fields: Value, seq: u64) -> Bytes {
    let mut map = Map::new();
    map.insert("type".into(), json!(kind));
    if let Value::Object(fields) = fields {
        map.extend(fields);
    }
    map.insert("seq".into(), json!(seq));
    to_bytes(&Value::Object(map))
}

/// Serialises a value as a line body (no LF), with U+2028/U+2029 escaped.
pub fn to_bytes(value: &Value) -> Bytes {
    let mut out = serde_json::to_vec(value).unwrap_or_default();
    corral_protocol::ndjson::escape_line_separators(&mut out);
    Bytes::from(out)
}

fn trim(line: &[u8]) -> &[u8] {
    let start = line
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(line.len());
    let end = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &line[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_seq_without_touching_other_bytes() {
        let line = br#"{"type":"text_delta","delta":"a\u2028b","future":{"x":[1, 2]}}"#;
        let stamped = stamp_seq(line, 7).unwrap();
        assert_eq!(
            &stamped[..],
            br#"{"type":"text_delta","delta":"a\u2028b","future":{"x":[1, 2]},"seq":7}"#
        );
        assert_eq!(&stamp_seq(b" { } ", 1).unwrap()[..], br#"{ "seq":1}"#);
        assert!(stamp_seq(b"[1]", 1).is_none());
    }

    #[test]
    fn reads_only_the_envelope() {
        let env =
            envelope(br#"{"type":"response","id":"corral-3","data":{"big":[1,2,3]}}"#).unwrap();
        assert_eq!(env.kind.as_deref(), Some("response"));
        assert_eq!(env.id, Some(json!("corral-3")));
        assert!(envelope(b"not json").is_none());
        assert!(envelope(b"[]").is_none());
    }

    #[test]
    fn restores_or_removes_the_client_id() {
        let mut map = Map::new();
        map.insert("type".into(), json!("response"));
        map.insert("id".into(), json!("corral-9"));
        map.insert("success".into(), json!(true));
        let with = restore_id(map.clone(), Some(json!(5)));
        assert_eq!(&with[..], br#"{"type":"response","id":5,"success":true}"#);
        let without = restore_id(map, None);
        assert_eq!(&without[..], br#"{"type":"response","success":true}"#);
    }

    #[test]
    fn made_up_frames() {
        let r = response(
            Some(&json!("1")),
            Some("prompt"),
            Err("observers may not prompt".into()),
        );
        assert_eq!(
            &r[..],
            br#"{"type":"response","id":"1","command":"prompt","success":false,"error":"observers may not prompt"}"#
        );
        let e = event("child_started", json!({"pid": 42, "restarts": 0}), 3);
        assert_eq!(
            &e[..],
            br#"{"type":"child_started","pid":42,"restarts":0,"seq":3}"#
        );
    }
}
