//! Requests from the agent to the client: the ones waiting for their
//! answer ([`Outgoing`]), and the client's files (`fs/read_text_file`,
//! `fs/write_text_file`) behind the tools' [`ClientFiles`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use corral_protocol::acp::{method, FileSystemCapabilities};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::rpc::{self, RpcError};
use crate::agent::Output;
use crate::tools::ClientFiles;

/// How long a file request may wait for the client's answer.
pub const FILE_TIMEOUT: Duration = Duration::from_secs(60);

type Answer = Result<Value, RpcError>;

/// The agent's requests that wait for an answer, by id (`fs-N`).
#[derive(Clone, Default)]
pub struct Outgoing {
    inner: Arc<Mutex<Waiting>>,
}

#[derive(Default)]
struct Waiting {
    sent: u64,
    answers: HashMap<String, oneshot::Sender<Answer>>,
}

impl Outgoing {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh id, and where its answer will come.
    fn open(&self) -> (String, oneshot::Receiver<Answer>) {
        let mut waiting = self.lock();
        waiting.sent += 1;
        let id = format!("fs-{}", waiting.sent);
        let (tx, rx) = oneshot::channel();
        waiting.answers.insert(id.clone(), tx);
        (id, rx)
    }

    /// Delivers an answer; false when no request `id` waits.
    pub fn settle(&self, id: &Value, answer: Answer) -> bool {
        let Some(id) = id.as_str() else {
            return false;
        };
        match self.lock().answers.remove(id) {
            Some(tx) => {
                let _ = tx.send(answer);
                true
            }
            None => false,
        }
    }

    /// Sends a request and waits (bounded) for its answer.
    async fn call(&self, out: &mpsc::Sender<Output>, method: &str, params: Value) -> Answer {
        let (id, answer) = self.open();
        let frame = rpc::request(&id, method, params);
        if out.send(Output::Frame(frame)).await.is_err() {
            self.lock().answers.remove(&id);
            return Err(RpcError::internal("the client is gone"));
        }
        match tokio::time::timeout(FILE_TIMEOUT, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(RpcError::internal("the client is gone")),
            Err(_) => {
                self.lock().answers.remove(&id);
                Err(RpcError::internal(format!(
                    "the editor did not answer {method} within {} s",
                    FILE_TIMEOUT.as_secs()
                )))
            }
        }
    }
}

/// The files of an editor that offers `fs/*`.
pub struct EditorFiles {
    pub out: mpsc::Sender<Output>,
    pub outgoing: Outgoing,
    pub session: String,
    pub offered: FileSystemCapabilities,
}

impl ClientFiles for EditorFiles {
    fn can_read(&self) -> bool {
        self.offered.read_text_file
    }

    fn can_write(&self) -> bool {
        self.offered.write_text_file
    }

    fn read(&self, path: PathBuf) -> BoxFuture<'static, Result<String, String>> {
        let (out, outgoing) = (self.out.clone(), self.outgoing.clone());
        let params = json!({"sessionId": self.session, "path": path.to_string_lossy()});
        Box::pin(async move {
            let result = outgoing
                .call(&out, method::FS_READ_TEXT_FILE, params)
                .await
                .map_err(|e| e.message)?;
            match result.get("content") {
                Some(Value::String(text)) => Ok(text.clone()),
                _ => Err("the editor's answer has no text `content`".into()),
            }
        })
    }

    fn write(&self, path: PathBuf, content: String) -> BoxFuture<'static, Result<(), String>> {
        let (out, outgoing) = (self.out.clone(), self.outgoing.clone());
        let params = json!({"sessionId": self.session, "path": path.to_string_lossy(),
                            "content": content});
        Box::pin(async move {
            outgoing
                .call(&out, method::FS_WRITE_TEXT_FILE, params)
                .await
                .map(|_| ())
                .map_err(|e| e.message)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(out: mpsc::Sender<Output>, outgoing: &Outgoing) -> EditorFiles {
        EditorFiles {
            out,
            outgoing: outgoing.clone(),
            session: "s".into(),
            offered: FileSystemCapabilities {
                read_text_file: true,
                write_text_file: false,
            },
        }
    }

    #[tokio::test]
    async fn a_read_is_a_request_whose_answer_comes_back() {
        let (out, mut frames) = mpsc::channel(4);
        let outgoing = Outgoing::default();
        let editor = files(out, &outgoing);
        assert!(editor.can_read() && !editor.can_write());
        let read = tokio::spawn(editor.read(PathBuf::from("/p/a.rs")));
        let Some(Output::Frame(request)) = frames.recv().await else {
            panic!("no request")
        };
        assert_eq!(request["method"], "fs/read_text_file");
        assert_eq!(
            request["params"],
            json!({"sessionId": "s", "path": "/p/a.rs"})
        );
        assert!(
            !outgoing.settle(&json!("fs-9"), Ok(json!({}))),
            "unknown id"
        );
        assert!(outgoing.settle(&request["id"], Ok(json!({"content": "unsaved"}))));
        assert_eq!(read.await.unwrap(), Ok("unsaved".to_string()));
        let write = tokio::spawn(editor.write(PathBuf::from("/p/b"), "x".into()));
        let Some(Output::Frame(request)) = frames.recv().await else {
            panic!("no request")
        };
        assert_eq!(request["params"]["content"], "x");
        outgoing.settle(&request["id"], Err(RpcError::internal("read-only buffer")));
        assert_eq!(write.await.unwrap(), Err("read-only buffer".to_string()));
    }
}
