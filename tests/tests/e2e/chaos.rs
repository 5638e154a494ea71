//! Chaos: while one client per project prompts (dropping its socket
//! mid-run now and then and resuming with `resume_after`), agent children
//! are SIGKILLed at random and the gateway is restarted on the same state
//! dir, alternately by SIGTERM and SIGKILL. Afterwards: every journal line
//! parses, every journal prefix that was complete before a kill is still
//! there, every `assistant_message` a client saw is journaled, every started
//! prompt got exactly one `done` (or was cut off by a gateway restart, and
//! then got none twice), resumed streams have no gap or duplicate, and no
//! zombie or orphan process is left.
//!
//! `CORRAL_CHAOS_KILLS` (default 200) and `CORRAL_CHAOS_RESTARTS` (default
//! 20) set the counts (the defaults take under half a minute).

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral_e2e::gateway::{Gateway, GatewaySpawn, WsEvent, ADMIN_TOKEN, TOKEN};
use corral_e2e::mock_llm::{MockLlm, Turn};
use futures_util::SinkExt;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const PROJECTS: usize = 6;
/// The `sleep` some turns run through the bash tool; a unique duration so
/// that no other test's `sleep` is mistaken for one of ours.
const SLEEP: &str = "1.7331";
/// Longest wait for a frame while a run is active.
const STALL: Duration = Duration::from_secs(30);

fn count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the clients of one project observed, across gateway generations.
#[derive(Default)]
struct Observed {
    /// `(time, text)` of every `assistant_message`.
    assistant: Vec<(String, String)>,
    started: usize,
    /// Started prompts that ended with exactly one `done`.
    finished: usize,
    /// Started prompts whose client was cut off by a gateway restart.
    cut_off: usize,
    /// Runs ended by the gateway because their child died.
    interrupted: usize,
    /// Sockets dropped mid-run and resumed.
    resumed: usize,
    /// Every violation, described.
    faults: Vec<String>,
}

type Shared = Arc<Mutex<Observed>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_killed_and_gateway_restarted_lose_nothing() {
    let kills = count("CORRAL_CHAOS_KILLS", 200);
    let restarts = count("CORRAL_CHAOS_RESTARTS", 20);
    let mock = MockLlm::start().await;
    mock.push_all((0..kills * 40 + 2000).map(|i| match i % 12 {
        // Now and then a tool process, which must die with its child.
        5 => Turn::tool_call("bash", json!({"command": format!("sleep {SLEEP}")})),
        _ => Turn::Slow {
            chunks: ["a", "b", "c", "d", "e"].map(String::from).to_vec(),
            delay: Duration::from_millis(15),
        },
    }));
    let dir = tempfile::tempdir().unwrap();
    let (root, state) = (dir.path().join("projects"), dir.path().join("state"));
    let projects: Vec<String> = (0..PROJECTS).map(|i| format!("p{i}")).collect();
    let observed: Vec<Shared> = projects.iter().map(|_| Shared::default()).collect();
    let mut snapshots: Vec<(usize, Vec<u8>)> = Vec::new();

    for generation in 0..=restarts {
        let names: Vec<&str> = projects.iter().map(String::as_str).collect();
        let gateway = GatewaySpawn::default()
            .mock(&mock.anthropic_base_url())
            .projects(&names)
            .projects_root(root.clone())
            .state_dir(state.clone())
            .arg("--crash-limit=1000000")
            .arg("--crash-window=1ms")
            .arg("--stop-grace=1s")
            .arg("--shutdown-grace=5s")
            .spawn()
            .await;
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = projects
            .iter()
            .zip(&observed)
            .map(|(project, seen)| {
                let url = gateway.url(project);
                let tag = format!("{project}-g{generation}");
                tokio::spawn(client(url, tag, stop.clone(), seen.clone()))
            })
            .collect();
        let share = kills / (restarts + 1) + usize::from(generation < kills % (restarts + 1));
        for _ in 0..share {
            snapshots.push(kill_one(&gateway, &projects, &state).await);
        }
        assert_no_zombies(&gateway).await;
        stop.store(true, Ordering::SeqCst);
        let pid = Pid::from_raw(gateway.child.id().unwrap() as i32);
        let last = generation == restarts;
        let signal = if generation % 2 == 1 && !last {
            Signal::SIGKILL
        } else {
            Signal::SIGTERM
        };
        kill(pid, signal).unwrap();
        let mut gateway = gateway;
        tokio::time::timeout(Duration::from_secs(30), gateway.child.wait())
            .await
            .expect("the gateway did not exit")
            .unwrap();
        for task in clients {
            task.await.unwrap();
        }
        assert_no_leftovers(dir.path()).await;
    }

    let (mut finished, mut interrupted, mut resumed, mut cut_off, mut messages) = (0, 0, 0, 0, 0);
    for (i, project) in projects.iter().enumerate() {
        let journal = std::fs::read(journal_path(&state, project)).unwrap_or_default();
        check_lines(project, &journal);
        for (_, before) in snapshots.iter().filter(|(p, _)| *p == i) {
            assert!(
                journal.starts_with(before),
                "{project}: the journal lost lines that were complete before a kill"
            );
        }
        let seen = observed[i].lock().unwrap();
        let journaled = assistant_messages(&journal);
        for message in &seen.assistant {
            assert!(
                journaled.contains(message),
                "{project}: a client saw {message:?}, the journal does not have it"
            );
        }
        assert!(seen.faults.is_empty(), "{project}: {}", brief(&seen.faults));
        assert_eq!(seen.started, seen.finished + seen.cut_off, "{project}");
        finished += seen.finished;
        interrupted += seen.interrupted;
        resumed += seen.resumed;
        cut_off += seen.cut_off;
        messages += seen.assistant.len();
    }
    eprintln!(
        "chaos: {kills} kills, {restarts} restarts; {finished} prompts finished \
         ({interrupted} by a dead child), {cut_off} cut off, {resumed} resumed mid-run, \
         {messages} assistant messages seen and journaled"
    );
    assert!(finished > 0, "no prompt ever finished");
    assert!(resumed > 0, "no client ever resumed");
}

/// SIGKILLs the agent of a random running project, returning the project
/// and its journal's complete lines just before.
async fn kill_one(gateway: &Gateway, projects: &[String], state: &Path) -> (usize, Vec<u8>) {
    loop {
        tokio::time::sleep(Duration::from_millis(20 + (jitter() % 120) as u64)).await;
        let (status, body) = gateway.http_get("/v1/projects", Some(ADMIN_TOKEN)).await;
        assert_eq!(status, 200, "{body}");
        let list: Value = serde_json::from_str(&body).unwrap();
        let running: Vec<(usize, i32)> = list["projects"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| matches!(p["state"].as_str(), Some("idle" | "busy" | "ready")))
            .filter_map(|p| {
                let index = projects.iter().position(|n| p["project"] == n.as_str())?;
                Some((index, i32::try_from(p["pid"].as_u64()?).ok()?))
            })
            .collect();
        if running.is_empty() {
            continue;
        }
        let (index, pid) = running[jitter() % running.len()];
        let journal = std::fs::read(journal_path(state, &projects[index])).unwrap_or_default();
        let complete = journal
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
            return (index, journal[..complete].to_vec());
        }
    }
}

/// One client of a project for one gateway generation: prompts until
/// `stop`, sometimes dropping its socket mid-run and resuming.
async fn client(url: String, tag: String, stop: Arc<AtomicBool>, seen: Shared) {
    let mut stream = Stream::default();
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let id = format!("{tag}-{n}");
        let Some(ws) = stream.ensure(&url, &seen).await else {
            return;
        };
        let prompt = json!({"id": id, "type": "prompt", "message": id});
        if ws
            .stream
            .send(Message::text(prompt.to_string()))
            .await
            .is_err()
        {
            stream.ws = None;
            continue;
        }
        let drop_after_delta = n % 4 == 0;
        if !run(&url, &id, &mut stream, drop_after_delta, &stop, &seen).await {
            return;
        }
    }
}

/// A socket and the last `seq` it saw, for resuming.
#[derive(Default)]
struct Stream {
    ws: Option<corral_e2e::gateway::Ws>,
    last_seq: Option<u64>,
}

impl Stream {
    /// The open socket, or a new one resumed after `last_seq`; `None` when
    /// the gateway is gone.
    async fn ensure(&mut self, url: &str, seen: &Shared) -> Option<&mut corral_e2e::gateway::Ws> {
        if self.ws.is_none() {
            let (ws, hello) = connect(url, self.last_seq).await?;
            let gateway = &hello["data"]["gateway"];
            if gateway["gap"] == true {
                fault(
                    seen,
                    format!("a resume after {:?} had a gap", self.last_seq),
                );
            }
            if self.last_seq.is_none() {
                self.last_seq = gateway["last_seq"].as_u64();
            }
            self.ws = Some(ws);
        }
        self.ws.as_mut()
    }

    /// Checks that `frame`'s seq follows the last one.
    fn follow(&mut self, frame: &Value, seen: &Shared) {
        let Some(seq) = frame["seq"].as_u64() else {
            return;
        };
        if let Some(last) = self.last_seq {
            if seq != last + 1 {
                fault(seen, format!("seq {seq} after {last}"));
            }
        }
        self.last_seq = Some(seq);
    }
}

/// Follows prompt `id` to its end. `false` when the gateway went away.
async fn run(
    url: &str,
    id: &str,
    stream: &mut Stream,
    mut drop_after_delta: bool,
    stop: &AtomicBool,
    seen: &Shared,
) -> bool {
    let mut started = false;
    let mut answered = false;
    loop {
        let Some(ws) = stream.ensure(url, seen).await else {
            if started {
                seen.lock().unwrap().cut_off += 1;
            }
            return false;
        };
        let event = ws.next_event_within(STALL).await;
        let frame = match event {
            Some(WsEvent::Frame(frame)) => frame,
            Some(WsEvent::Closed(_)) => {
                stream.ws = None;
                if stop.load(Ordering::SeqCst) {
                    if started {
                        seen.lock().unwrap().cut_off += 1;
                    }
                    return false;
                }
                continue;
            }
            None => {
                fault(seen, format!("{id}: nothing for {STALL:?}"));
                return false;
            }
        };
        stream.follow(&frame, seen);
        match frame["type"].as_str() {
            Some("response") if frame["id"] == id => {
                answered = true;
                started = frame["success"] == true;
                if started {
                    seen.lock().unwrap().started += 1;
                } else {
                    return true;
                }
            }
            Some("assistant_message") => {
                let text: String = frame["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|b| b["text"].as_str())
                    .collect();
                let time = frame["time"].as_str().unwrap_or_default().to_string();
                seen.lock().unwrap().assistant.push((time, text));
            }
            Some("text_delta") if drop_after_delta => {
                drop_after_delta = false;
                stream.ws = None;
                seen.lock().unwrap().resumed += 1;
            }
            Some("turn_end") if frame["stop"] == "error" => {
                seen.lock().unwrap().interrupted += 1;
            }
            Some("done") if !answered => fault(seen, format!("{id}: a done before its response")),
            Some("done") => {
                seen.lock().unwrap().finished += 1;
                return true;
            }
            _ => {}
        }
    }
}

/// Opens a socket and says hello; `None` when the gateway does not answer.
async fn connect(url: &str, resume_after: Option<u64>) -> Option<(corral_e2e::gateway::Ws, Value)> {
    for _ in 0..20 {
        let attempt = tokio::time::timeout(STALL, tokio_tungstenite::connect_async(url)).await;
        let Ok(Ok((stream, _))) = attempt else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let mut ws = corral_e2e::gateway::Ws { stream };
        let mut hello = json!({"id": "hello", "type": "hello", "token": TOKEN});
        if let Some(seq) = resume_after {
            hello["resume_after"] = json!(seq);
        }
        if ws
            .stream
            .send(Message::text(hello.to_string()))
            .await
            .is_err()
        {
            continue;
        }
        match ws.next_event_within(STALL).await {
            Some(WsEvent::Frame(reply)) if reply["success"] == true => return Some((ws, reply)),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    None
}

fn fault(seen: &Shared, what: String) {
    seen.lock().unwrap().faults.push(what);
}

fn journal_path(state: &Path, project: &str) -> PathBuf {
    state.join("sessions").join(format!("{project}.jsonl"))
}

/// Every line ends in LF and is a journal entry.
fn check_lines(project: &str, journal: &[u8]) {
    assert!(
        journal.is_empty() || journal.ends_with(b"\n"),
        "{project}: torn last line"
    );
    for (n, line) in journal.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let entry: Value = serde_json::from_slice(line)
            .unwrap_or_else(|e| panic!("{project}: line {} does not parse: {e}", n + 1));
        let kind = entry["kind"].as_str().unwrap_or_default();
        assert!(
            ["message", "tool_result", "clear", "compact"].contains(&kind),
            "{project}: line {} is not an entry: {entry}",
            n + 1
        );
        if kind == "message" {
            let message = &entry["message"];
            assert!(message["role"].is_string() && message["content"].is_array());
        }
    }
}

/// `(time, text)` of every journaled assistant message.
fn assistant_messages(journal: &[u8]) -> Vec<(String, String)> {
    journal
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "assistant")
        .map(|e| {
            let message = &e["message"];
            let text = message["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect();
            (
                message["time"].as_str().unwrap_or_default().to_string(),
                text,
            )
        })
        .collect()
}

/// No child of the gateway stays a zombie (one being reaped right now may
/// be seen once).
async fn assert_no_zombies(gateway: &Gateway) {
    let gateway_pid = gateway.child.id().unwrap();
    let mut zombies = Vec::new();
    for _ in 0..50 {
        zombies = processes()
            .into_iter()
            .filter(|p| p.ppid == gateway_pid && p.state == 'Z')
            .collect::<Vec<_>>();
        if zombies.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("zombies: {zombies:?}");
}

/// After the gateway exits, no agent or tool process of this test remains.
async fn assert_no_leftovers(dir: &Path) {
    let dir = dir.to_string_lossy().into_owned();
    let mut left = Vec::new();
    for _ in 0..50 {
        left = processes()
            .into_iter()
            .filter(|p| p.state != 'Z')
            .filter(|p| {
                (p.comm == "corral-agent" && p.cmdline.contains(&dir))
                    || (p.comm == "sleep" && p.cmdline.contains(SLEEP))
            })
            .collect();
        if left.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("processes outlived the gateway: {}", brief(&left));
}

#[derive(Debug)]
#[allow(dead_code)] // Read through `Debug` in failure messages.
struct Process {
    pid: u32,
    ppid: u32,
    state: char,
    comm: String,
    cmdline: String,
}

impl corral_e2e::brief::Line for Process {
    fn line(&self) -> String {
        format!("{self:?}")
    }
}

fn processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let comm = head.split_once('(')?.1.to_string();
            let mut fields = rest.split_whitespace();
            let state = fields.next()?.chars().next()?;
            let ppid = fields.next()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            Some(Process {
                pid,
                ppid,
                state,
                comm,
                cmdline,
            })
        })
        .collect()
}

/// A cheap pseudo-random number (the test needs spread, not quality).
fn jitter() -> usize {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    hasher.finish() as usize
}
