//! A raw Zi connection for the per-point tests: any record in, every frame
//! out, with `version` and a gap-free `sequence` checked on each.

use serde_json::{json, Value};

use super::peer::Peer;

pub struct Conn {
    pub peer: Peer,
    sequence: u64,
}

impl Conn {
    pub async fn open(mut peer: Peer) -> Conn {
        let line = peer.line().await.expect("a ready frame");
        let ready: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(ready["type"], "ready", "{ready}");
        assert_eq!(ready["sequence"], 1, "{ready}");
        assert!(ready["state"].is_object(), "{ready}");
        Conn { peer, sequence: 1 }
    }

    pub async fn recv(&mut self) -> Value {
        let line = self.peer.line().await.expect("a frame");
        let frame: Value = serde_json::from_str(&line).unwrap();
        self.sequence += 1;
        assert_eq!(frame["version"], 1, "{frame}");
        assert_eq!(frame["sequence"], self.sequence, "gap-free: {frame}");
        frame
    }

    pub async fn send(&mut self, record: Value) {
        self.peer.send_raw(format!("{record}\n").as_bytes()).await;
    }

    /// Frames up to and including the answer (response or protocol error)
    /// to `id`.
    pub async fn until(&mut self, id: &str) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv().await;
            let last = frame["id"] == id && frame["type"] != "session_event";
            frames.push(frame);
            if last {
                return frames;
            }
        }
    }

    /// Frames until one satisfies `stop` (included).
    pub async fn until_frame(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv().await;
            let last = stop(&frame);
            frames.push(frame);
            if last {
                return frames;
            }
        }
    }

    /// Sends a request (`params` left out when `None`) and returns its
    /// answer.
    pub async fn call(&mut self, id: &str, method: &str, params: Option<Value>) -> Value {
        let mut request = json!({"version": 1, "id": id, "method": method});
        if let Some(params) = params {
            request["params"] = params;
        }
        self.send(request).await;
        self.until(id).await.pop().unwrap()
    }
}

/// The `type` of a session event frame.
pub fn event_type(frame: &Value) -> Option<&str> {
    (frame["type"] == "session_event")
        .then(|| frame["event"]["type"].as_str())
        .flatten()
}
