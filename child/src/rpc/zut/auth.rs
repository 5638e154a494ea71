//! `ZUTCORE_RPC_TOKEN` auth, decided as zut decides it: until a hello with
//! the right token, every other line is refused and reading goes on; a
//! hello with a wrong or missing token ends the process.

use corral_protocol::zut::{Command, Request, RequestId, Response};
use subtle::ConstantTimeEq;

/// What an unauthenticated server does with a command other than `hello`.
pub const AUTH_REQUIRED: &str = "auth required: send hello with token first";
/// The answer to a hello whose token does not match.
pub const INVALID_TOKEN: &str = "invalid token";

/// A line as the front-end understood it: a request, or what is known of
/// a request that could not be read.
pub type Parsed = Result<Request, Unreadable>;

/// A line that is no request: its `id` and `type` when it had them, and
/// whether it was valid JSON at all.
#[derive(Debug)]
pub struct Unreadable {
    pub id: Option<RequestId>,
    pub command: Option<String>,
    pub message: String,
    /// The line was not a JSON object (bad JSON, too long, not UTF-8).
    pub framing: bool,
}

/// The verdict on one line read before authentication.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// The right token: answer the hello and serve from now on.
    Welcome(Option<RequestId>),
    /// Answer with this and keep reading, still unauthenticated.
    Refuse(Response),
    /// Answer with this and exit 1.
    Reject(Response),
}

/// Judges a line read while the token has not been presented yet.
pub fn judge(expected: &str, parsed: Parsed) -> Verdict {
    let hello = |id: Option<RequestId>, token: Option<&str>| {
        let given = token.unwrap_or_default();
        if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
            Verdict::Welcome(id)
        } else {
            Verdict::Reject(Response::error(id, Some("hello"), INVALID_TOKEN))
        }
    };
    match parsed {
        Ok(Request {
            id,
            command: Command::Hello { token },
        }) => hello(id, token.as_deref()),
        Ok(Request { id, command }) => {
            Verdict::Refuse(Response::error(id, Some(command.name()), AUTH_REQUIRED))
        }
        Err(line) if line.framing => Verdict::Refuse(Response::error(
            line.id,
            line.command.as_deref(),
            line.message,
        )),
        // A hello that does not parse (a token that is no string) carries
        // no usable token.
        Err(line) if line.command.as_deref() == Some("hello") => hello(line.id, None),
        Err(line) => Verdict::Refuse(Response::error(
            line.id,
            line.command.as_deref(),
            AUTH_REQUIRED,
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn line(value: Value) -> Parsed {
        let Value::Object(object) = value else {
            panic!("not an object")
        };
        Request::from_object(object).map_err(|e| Unreadable {
            id: e.id,
            command: e.command,
            message: e.message,
            framing: false,
        })
    }

    fn refusal(verdict: Verdict) -> Value {
        match verdict {
            Verdict::Refuse(response) => serde_json::to_value(response).expect("serialises"),
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn the_right_token_is_welcome() {
        let verdict = judge("s", line(json!({"id":"0","type":"hello","token":"s"})));
        assert_eq!(verdict, Verdict::Welcome(Some(RequestId::from("0"))));
    }

    #[test]
    fn a_wrong_or_missing_token_is_rejected() {
        for hello in [
            json!({"id":"0","type":"hello","token":"guess"}),
            json!({"id":"0","type":"hello"}),
            json!({"id":"0","type":"hello","token":7}),
        ] {
            let Verdict::Reject(response) = judge("s", line(hello.clone())) else {
                panic!("{hello} not rejected")
            };
            let response = serde_json::to_value(response).expect("serialises");
            assert_eq!(
                response,
                json!({"type":"response","id":"0","command":"hello","success":false,"error":INVALID_TOKEN})
            );
        }
    }

    #[test]
    fn other_commands_are_refused_with_their_own_id_and_name() {
        let response = refusal(judge(
            "s",
            line(json!({"id":"1","type":"prompt","message":"hi"})),
        ));
        assert_eq!(
            response,
            json!({"type":"response","id":"1","command":"prompt","success":false,"error":AUTH_REQUIRED})
        );
        let response = refusal(judge("s", line(json!({"id":"2","type":"nope"}))));
        assert_eq!(response["command"], "nope");
        assert_eq!(response["error"], AUTH_REQUIRED);
    }

    #[test]
    fn bad_json_gets_its_own_error() {
        let bad = Unreadable {
            id: None,
            command: None,
            message: "invalid JSON".into(),
            framing: true,
        };
        let response = refusal(judge("s", Err(bad)));
        assert_eq!(response["error"], "invalid JSON");
        assert_eq!(response["success"], false);
    }
}
