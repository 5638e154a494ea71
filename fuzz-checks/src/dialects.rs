//! One line from a client, read by both sides of a dialect: the gateway's
//! `Dialect::inbound` (and `client_hello`) and the child front-end's own
//! parser. Besides not panicking, the two sides must agree where their
//! jobs overlap: a request the child accepts is never refused by the
//! gateway on the way (a client's hello aside: the gateway answers it
//! itself), both sides read the same `id`, and the letscode protocol check
//! gives the same verdict on both sides.

use corral::dialect::{Dialect, Inbound};
use corral_agent::rpc::letscode::command::{self, Kind};
use corral_agent::rpc::zi::request;
use corral_protocol::zut::Request;
use serde_json::{Map, Value};

use crate::{object, produced};

pub fn zut(line: &[u8]) {
    let Some(frame) = object(line) else {
        return;
    };
    let gateway = gateway_side(Dialect::Zut, &frame);
    let Ok(request) = Request::from_object(frame.clone()) else {
        return;
    };
    let Value::Object(again) = request.to_value() else {
        panic!("a request does not serialise as an object");
    };
    match Request::from_object(again) {
        Ok(back) => crate::assert_same(&back.to_value(), &request.to_value(), "a round trip"),
        Err(e) => panic!("an accepted request does not survive a round trip: {e}"),
    }
    match gateway {
        Inbound::Forward { id, command } => {
            assert_eq!(id, frame.get("id").cloned());
            assert_eq!(command, request.command.name());
        }
        Inbound::Hello { .. } => assert_eq!(request.command.name(), "hello"),
        // The gateway answers a client's hello itself, with rules of its
        // own (`own_runs`); the child never sees it.
        Inbound::Reject(_) if request.command.name() == "hello" => {}
        other => panic!("the gateway stops a request the child accepts: {other:?}"),
    }
}

pub fn letscode(line: &[u8]) {
    let Some(frame) = object(line) else {
        return;
    };
    let gateway = gateway_side(Dialect::Letscode, &frame);
    let Ok(parsed) = command::parse(frame.clone()) else {
        return;
    };
    assert_eq!(&parsed.id, frame.get("id").unwrap_or(&Value::Null));
    match (&parsed.kind, gateway) {
        // Both sides check the protocol of a hello and must agree on it.
        (Kind::Hello { protocol }, Inbound::Hello { refusal, .. }) => {
            let child_refuses = command::check_protocol(protocol).is_err();
            assert_eq!(refusal.is_some(), child_refuses, "protocol {protocol:?}");
        }
        (Kind::Hello { .. }, Inbound::Reject(_)) => {}
        (Kind::Bye, Inbound::Leave { .. }) => {}
        (_, Inbound::Forward { id, .. }) => assert_eq!(id, frame.get("id").cloned()),
        (kind, other) => panic!("the gateway reads {kind:?} as {other:?}"),
    }
}

pub fn zi(line: &[u8]) {
    let Some(frame) = object(line) else {
        return;
    };
    let gateway = gateway_side(Dialect::Zi, &frame);
    let Ok(parsed) = request::parse(frame.clone()) else {
        return;
    };
    assert!(request::METHODS.contains(&parsed.method));
    assert!(!parsed.id.is_empty() && parsed.id.len() <= request::MAX_ID_BYTES);
    for name in ["text", "mode", "model", "name", "level"] {
        let _ = parsed.str_param(name, 64);
        let _ = parsed.required_str(name, 1 << 20);
    }
    for name in ["start", "limit", "afterSequence", "timeoutMs"] {
        let _ = parsed.u64_param(name);
    }
    let id = Some(Value::String(parsed.id.clone()));
    match gateway {
        Inbound::Forward { id: given, command } => {
            assert_eq!(given, id);
            assert_eq!(command, parsed.method);
        }
        Inbound::Hello { id: given, .. } => assert_eq!(given, id),
        Inbound::SetFilter { id: given, .. } => assert_eq!(Some(given), id),
        // The gateway answers `connection.set_events` itself and checks its
        // mode; the child checks it only when the request is dispatched.
        Inbound::Reject(_) if parsed.method == "connection.set_events" => {}
        other => panic!("the gateway stops a request the child accepts: {other:?}"),
    }
}

/// The gateway's reading of a client frame, for both roles, with the
/// checks that hold in every dialect; the client role's answer.
fn gateway_side(dialect: Dialect, frame: &Map<String, Value>) -> Inbound {
    if let Some(Ok(hello)) = dialect.rules().client_hello(frame) {
        assert_eq!(hello.id, frame.get("id").cloned());
    }
    let client = dialect.rules().inbound(frame, false);
    let observer = dialect.rules().inbound(frame, true);
    for inbound in [&client, &observer] {
        match inbound {
            Inbound::Reject(reply) => {
                produced(reply, "a rejection");
            }
            Inbound::Hello {
                refusal: Some(reply),
                ..
            } => {
                produced(reply, "a hello refusal");
            }
            _ => {}
        }
    }
    // The observer role only ever narrows what the client role may do.
    if !matches!(observer, Inbound::Reject(_)) {
        assert_eq!(
            observer, client,
            "the observer may do what a client may not"
        );
    }
    client
}
