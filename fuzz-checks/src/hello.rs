//! The gateway's reading of a client's first message, in every dialect:
//! the text as the WebSocket layer hands it over (a trailing LF or CRLF is
//! tolerated), parsed as one object, then `Dialect::client_hello`.
//!
//! What must hold: no panic; a hello carries the frame's own `id`, and a
//! `token` or resume point only when the frame has one of the right type;
//! a zut or letscode hello accepted before authentication is also accepted
//! after it.

use corral::dialect::{Dialect, Inbound};
use serde_json::Value;

use crate::object;

pub fn check(data: &[u8]) {
    let text = data.strip_suffix(b"\n").unwrap_or(data);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let Some(frame) = object(text) else {
        return;
    };
    for dialect in [Dialect::Zut, Dialect::Letscode, Dialect::Zi] {
        let Some(hello) = dialect.rules().client_hello(&frame) else {
            continue;
        };
        let Ok(hello) = hello else {
            continue;
        };
        if dialect != Dialect::Zi {
            assert!(
                matches!(
                    dialect.rules().inbound(&frame, false),
                    Inbound::Hello { .. }
                ),
                "{dialect:?}: a hello accepted before authentication is refused after it"
            );
        }
        assert_eq!(hello.id, frame.get("id").cloned());
        let fields = match (dialect, frame.get("params")) {
            (Dialect::Zi, Some(Value::Object(params))) => params,
            _ => &frame,
        };
        assert_eq!(
            hello.token.as_deref(),
            fields.get("token").and_then(Value::as_str)
        );
        let resume = if dialect == Dialect::Zi {
            "resumeAfter"
        } else {
            "resume_after"
        };
        assert_eq!(
            hello.resume_after,
            fields.get(resume).and_then(Value::as_u64)
        );
    }
}
