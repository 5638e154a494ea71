//! [`DialectRules`]: everything a dialect means to the gateway, as one
//! trait each dialect implements in its own module, plus the capabilities
//! only some dialects have ([`Leave`], [`EventFilter`], [`OneSession`],
//! [`ChildAsks`]). No method has a default body: the compiler lists what a
//! new dialect must decide. Pure, no I/O.

use std::ffi::OsString;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::attach::{EndOfInput, Seen, StdinFrame};
use super::cost::ReportedCost;
use super::hub::{ChildGreeter, ClientRequests, ResponseNews};
use super::{Answer, Audited, ChildGreeting, Claim, ClientHello, Inbound, Open, Outbound};
use corral_protocol::ndjson::FrameError;

/// What one wire dialect means to the gateway: how its child is started
/// and greeted, what its clients' frames ask for, what its child's lines
/// are, how the frames the gateway makes up look, and what `corral
/// attach` answers itself. One implementation per dialect, in that
/// dialect's module; [`super::Dialect::rules`] selects it.
pub trait DialectRules: Sync {
    /// The dialect's name (`--dialect NAME`, the admin API, traces).
    fn name(&self) -> &'static str;

    // ---- The child ----

    /// Arguments that select the dialect in `corral-agent rpc`.
    fn child_args(&self) -> Vec<OsString>;
    /// Whether the child authenticates the gateway with a token hello
    /// (the token goes in its environment); otherwise it trusts its
    /// stdio pipes.
    fn child_token(&self) -> bool;
    /// How the gateway greets a new child.
    fn child_greeting(&self) -> ChildGreeting;
    /// The greeter of a child greeted with requests
    /// ([`ChildGreeting::Requests`]): `cwd` is the project directory,
    /// `kept` the session kept from an earlier child.
    fn greeter(&self, cwd: &str, kept: Option<String>) -> Option<Box<dyn ChildGreeter>>;
    /// Checks the child's `ready` line ([`ChildGreeting::Ready`]); the
    /// error says what the child speaks instead.
    fn check_ready(&self, ready: &Map<String, Value>) -> Result<(), String>;
    /// Whether a third-party agent (`--child-command`) may be run as the
    /// child: it speaks this dialect itself.
    fn runs_third_party_agents(&self) -> bool;
    /// The model the child's hello data names, for the admin API.
    fn model_of(&self, hello: &Map<String, Value>) -> Option<String>;
    /// The health request with id `id`: cheap, answered even during a run.
    fn ping_line(&self, id: &str) -> String;
    /// The request that aborts the active run, with id `id` (`hello` is
    /// the child's hello data).
    fn abort_line(&self, id: &str, hello: &Map<String, Value>) -> String;
    /// The request (with id `id`) for the state snapshot a new client's
    /// greeting carries; `None` when the greeting needs none.
    fn state_request(&self, id: &str) -> Option<String>;

    // ---- Client frames ----

    /// The shape of the first message an unauthenticated client must
    /// send, for the refusal that names it.
    fn hello_shape(&self) -> &'static str;
    /// Whether a client authenticated by its upgrade request is greeted
    /// at once, rather than after its first frame.
    fn greets_first(&self) -> bool;
    /// Reads a client's first frame as this dialect's hello; `None` when
    /// it is not one; `Err` with a message when it is one but malformed.
    fn client_hello(&self, frame: &Map<String, Value>) -> Option<Result<ClientHello, String>>;
    /// What a client frame asks for; `observer` limits it to reading.
    fn inbound(&self, frame: &Map<String, Value>, observer: bool) -> Inbound;
    /// The per-client rules for a request before it is forwarded: `Err`
    /// holds the refusal.
    fn admit(
        &self,
        id: Option<&Value>,
        command: &str,
        requests: &dyn ClientRequests,
    ) -> Result<(), Bytes>;
    /// The metrics label of a request for `command` (few distinct values).
    fn command_label<'a>(&self, command: &'a str) -> &'a str;
    /// What a client frame for `command` (a request's or notification's
    /// name; for an answer to a request of the child, that request's
    /// method) is to the audit log: `None` for frames it does not record
    /// (reads, pings). `prompt_text`: the prompt's text is wanted
    /// (`--audit-prompts`); otherwise it is not extracted.
    fn audited(
        &self,
        command: &str,
        frame: &Map<String, Value>,
        prompt_text: bool,
    ) -> Option<Audited>;
    /// Puts a W3C `traceparent` into a run-starting request for the child,
    /// where the child reads it (or nowhere).
    fn put_trace_context(&self, frame: &mut Map<String, Value>, traceparent: String);

    // ---- Child lines ----

    /// Classifies a child line; `None` when the dialect cannot read it.
    fn outbound(&self, line: &[u8]) -> Option<Outbound>;
    /// A child's answer as its client should see it: the client's own id
    /// back, and the run it started or queued (`run`). `None` when the
    /// line is not a JSON object.
    fn restore_id(&self, line: &[u8], original: Option<Value>, run: Option<&str>) -> Option<Bytes>;
    /// A child event as it goes into the replay ring: with the project's
    /// `seq` and the id of the run it belongs to.
    fn event_bytes(&self, line: &[u8], seq: u64, run: Option<&str>) -> Option<Bytes>;
    /// Keeps the child's hello data current with an event it wrote (so a
    /// client that joins later is greeted with what is in force).
    fn hello_after(&self, hello: &mut Map<String, Value>, line: &[u8]);
    /// What the child's answer `line` to `command` tells the hub besides
    /// its client's reply.
    fn response_news(&self, command: &str, line: &[u8]) -> ResponseNews;

    // ---- Runs ----

    /// What a request for the child may do to runs.
    fn run_claim(&self, command: &str, frame: &Map<String, Value>) -> Claim;
    /// What the child's answer `line` to a `command` says of runs.
    fn run_answer(&self, command: &str, line: &[u8]) -> Answer;
    /// Whether a forwarded request keeps the project busy until its answer
    /// (a dialect whose runs have no start and end events).
    fn request_is_run(&self, command: &str) -> bool;
    /// The events that end a run its child cannot finish (it died or was
    /// stopped), as `(type, fields)` for [`DialectRules::gateway_event`].
    fn run_aborted(&self, error: &str) -> Vec<(&'static str, Value)>;
    /// The model spend the child's event `line` reports, if it reports
    /// any (see [`super::cost`] for which dialects do).
    fn reported_cost(&self, line: &[u8]) -> Option<ReportedCost>;
    /// What the child's event `line` says about its MCP servers: their
    /// states, or a tool call starting or ending (see
    /// [`super::mcp_news`]). `calls_open`: calls are being timed, so a
    /// call's end, which may not name its tool, is worth parsing.
    fn mcp_news(&self, line: &[u8], calls_open: bool) -> Option<crate::mcp::McpNews>;

    // ---- Frames the gateway makes up ----

    /// An event the gateway makes up (`child_started`, `child_exited`,
    /// `error`, the end of a run cut short), with its `seq` and its run.
    fn gateway_event(&self, kind: &str, fields: Value, seq: u64, run: Option<&str>) -> Bytes;
    /// The answer to a request the child will never answer. `acked`: the
    /// child had acknowledged it.
    fn request_failed(&self, id: Option<&Value>, command: &str, acked: bool, error: &str) -> Bytes;
    /// The reply to a client frame that could not be read.
    fn malformed(&self, error: &str) -> Bytes;
    /// The refusal of a client that cannot be attached, sent just before
    /// the socket closes (nothing else precedes it).
    fn refusal(&self, id: Option<&Value>, code: &str, error: &str) -> Bytes;
    /// A new client's first frames before any hello answer (`hello` is
    /// the child's hello data, `state` the snapshot of
    /// [`DialectRules::state_request`]).
    fn greeting(&self, hello: &Map<String, Value>, gateway: Value, state: Value) -> Vec<Bytes>;
    /// The gateway's answer to a client's hello (`id` is its id); `gap`
    /// when replay cannot be complete.
    fn hello_answer(
        &self,
        id: Option<&Value>,
        hello: &Map<String, Value>,
        gateway: Value,
        gap: bool,
    ) -> Vec<Bytes>;
    /// Whether each client's frames carry a connection-local number its
    /// feed stamps on the way out ([`DialectRules::stamp`]); the hub then
    /// stores frames unstamped.
    fn sequenced(&self) -> bool;
    /// A frame as one client gets it, numbered `sequence` (only called
    /// when [`DialectRules::sequenced`]).
    fn stamp(&self, frame: &[u8], sequence: u64) -> Bytes;

    // ---- Capabilities only some dialects have ----

    /// A client may say it leaves while the child stays
    /// ([`Inbound::Leave`]).
    fn leave(&self) -> Option<&dyn Leave>;
    /// A client may turn some events off ([`Inbound::SetFilter`]).
    fn event_filter(&self) -> Option<&dyn EventFilter>;
    /// The project has one session clients open or load
    /// ([`Inbound::OpenSession`]), kept across child restarts.
    fn one_session(&self) -> Option<&dyn OneSession>;
    /// The child asks its clients ([`Outbound::Ask`],
    /// [`Inbound::AnswerAsk`]).
    fn child_asks(&self) -> Option<&dyn ChildAsks>;

    // ---- `corral attach` ----

    /// Sorts one stdin line of `corral attach`. `hello` is the gateway's
    /// hello data; `sequence` the last connection number written to
    /// stdout.
    fn attach_stdin(
        &self,
        line: Result<Vec<u8>, FrameError>,
        hello: &Value,
        sequence: u64,
    ) -> StdinFrame;
    /// The hello `corral attach` sends after the upgrade; `None` when the
    /// gateway greets first.
    fn attach_hello(&self, token: &str) -> Option<String>;
    /// Whether `frame` answers the hello of [`DialectRules::attach_hello`]:
    /// `Some(Ok(data))` when it succeeded, `Some(Err(reason))` when it was
    /// refused, `None` for any other frame.
    fn attach_hello_answer(&self, frame: &Value) -> Option<Result<Value, String>>;
    /// Whether `corral attach` tracks requests and runs in flight, so that
    /// end of input waits for them.
    fn attach_tracks_work(&self) -> bool;
    /// What `corral attach` does when stdin closes.
    fn attach_end_of_input(&self) -> EndOfInput;
    /// What a frame from the gateway means to `corral attach`.
    fn attach_seen(&self, frame: &Value) -> Seen;
}

impl dyn DialectRules {
    /// What an unauthenticated client must send first, as a refusal
    /// message.
    pub fn hello_required(&self) -> String {
        format!(
            "authentication required: the first message must be {}",
            self.hello_shape()
        )
    }
}

/// A client may leave while the child stays: it is answered at once,
/// refused anything more, and let go with a farewell once no run is
/// active and its own requests are answered.
pub trait Leave: Sync {
    /// The answer to the client's leave request.
    fn ack(&self, id: Option<&Value>) -> Bytes;
    /// The reply to a request from a client that said it leaves.
    fn after_leave(&self, id: Option<&Value>) -> Bytes;
    /// The last frames of a client that said it leaves, before its close.
    fn farewell(&self, id: Option<&Value>) -> Vec<Bytes>;
}

/// A client may turn off the events it does not want.
pub trait EventFilter: Sync {
    /// The reply to a client's choice (`all`: every event).
    fn filter_set(&self, id: &Value, all: bool) -> Bytes;
    /// Whether a stored frame is an event a client may turn off.
    fn is_optional_event(&self, frame: &[u8]) -> bool;
}

/// The project has one session, named in the child's hello data, which
/// the gateway owns for its clients: they open it (`new`, `load` with the
/// whole conversation first, `resume` after what they saw), close it for
/// themselves only, list the sessions (projects) they may open, and one
/// allowed to prompt may reset it for everyone. The gateway keeps it to
/// load again after a restart.
pub trait OneSession: Sync {
    /// The session a child's hello names.
    fn kept(&self, hello: &Map<String, Value>) -> Option<String>;
    /// Whether `asked` names the session of `project` (its id, or the id
    /// it is listed under before it ever ran).
    fn names_session(&self, hello: &Map<String, Value>, project: &str, asked: &str) -> bool;
    /// The answer to a client opening the session; `meta` is what the
    /// gateway says of it (epoch, gap).
    fn opened(&self, id: &Value, hello: &Map<String, Value>, open: Open, meta: Value) -> Bytes;
    /// The refusal of a load or resume of a session that is not this
    /// project's.
    fn unknown(&self, id: &Value, hello: &Map<String, Value>, asked: Option<&str>) -> Bytes;
    /// The answer to a client closing the session for itself.
    fn closed(&self, id: &Value) -> Bytes;
    /// The request (id `gid`) for a page of the conversation after
    /// `cursor`, as the child renders it on a load.
    fn history_request(
        &self,
        hello: &Map<String, Value>,
        gid: &str,
        cursor: Option<&str>,
    ) -> String;
    /// The child's answer to a history request.
    fn history_page(&self, line: &[u8]) -> HistoryPage;
    /// A page of `session/list`: `sessions`, and the cursor of the next.
    fn listed(&self, id: &Value, sessions: &[ListedSession], next: Option<&str>) -> Bytes;
    /// The request (without id) that starts a fresh conversation in the
    /// child.
    fn reset(&self, hello: &Map<String, Value>) -> Map<String, Value>;
    /// Takes the child's answer to the reset into its hello data; `false`
    /// when the reset failed.
    fn reset_done(&self, hello: &mut Map<String, Value>, line: &[u8]) -> bool;
    /// The request that has the agent start the MCP servers named
    /// (operator names) for the session.
    fn mcp_select(&self, gid: &str, servers: &[String]) -> String;
    /// The servers' states in the agent's answer to it, or its error.
    fn mcp_selected(&self, line: &[u8]) -> Result<Vec<Value>, String>;
    /// Makes the hello data advertise the MCP transports the gateway
    /// honours from clients (`http`), whatever the agent offers.
    fn honour_mcp(&self, hello: &mut Map<String, Value>, http: bool);
}

/// One session of a `session/list` page: a project the client may open.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedSession {
    pub project: String,
    /// The session id kept for it, if it ever ran.
    pub session: Option<String>,
    /// When its conversation last changed.
    pub updated: Option<std::time::SystemTime>,
}

/// A child's answer to a history request.
#[derive(Debug, PartialEq)]
pub enum HistoryPage {
    /// Frames for the client (each marked as history), and the cursor of
    /// the next page.
    Updates {
        frames: Vec<Bytes>,
        next: Option<String>,
    },
    /// The child does not know the request: it has no history to give.
    Unsupported,
    /// The child failed it (the message).
    Failed(String),
}

/// The child sends requests for its clients: each goes to every client
/// under a gateway id, the first answer goes back to the child.
pub trait ChildAsks: Sync {
    /// A child request as clients get it, under the gateway id `gid`.
    fn for_clients(&self, line: &[u8], gid: &str) -> Option<Bytes>;
    /// A client's answer to a child request, under the child's id.
    fn answer_for_child(&self, frame: &Map<String, Value>, child_id: &Value) -> String;
    /// What the outcome of a client's answer is, for the other clients.
    fn outcome(&self, frame: &Map<String, Value>) -> Value;
    /// The outcome of a request nobody answered (timed out, child gone).
    fn no_outcome(&self) -> Value;
    /// What clients that did not answer request `gid` hear once it is
    /// settled with `outcome`.
    fn resolved(&self, gid: &str, outcome: &Value) -> Vec<Bytes>;
    /// The answer the child gets when nobody answered its request.
    fn unanswered(&self, child_id: &Value, method: &str) -> String;
}
