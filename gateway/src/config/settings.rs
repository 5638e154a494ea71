//! Every `corral serve` setting, declared once: flag, value name, TOML key,
//! environment variable, default, check and help (see `declare` for the
//! grammar and what is generated). Adding a setting is one entry here plus
//! its use in `config::load`. The order here is the order of `--help`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::broker::BrokerMode;
use super::bytes::{format_bytes, parse_bytes, FileBytes};
use super::checks::{at_least, at_most, auth_failure_rate, positive};
use super::child::TemplateMode;
use super::declare::{any, declare_settings, enum_name, number, path_text};
use super::defaults;
use super::duration::{format_duration, parse_duration, FileDuration};
use super::jwt::{self, MaxRole};
use super::serve_help::SERVE_ENV_HELP;
use super::values::{parse_net, OnOff, TokenList, ToolNetwork};
use crate::auth::Secret;
use crate::dialect::Dialect;

/// The environment variables tokens are read from (client, observer,
/// admin), comma-separated; `corral serve` removes them from its
/// environment once read.
pub const TOKEN_ENV_VARS: [&str; 3] = [
    "CORRAL_TOKENS",
    "CORRAL_OBSERVER_TOKENS",
    "CORRAL_ADMIN_TOKEN",
];

declare_settings! {
    after_help: SERVE_ENV_HELP;
    tables: {
        /// `[[token]]`: named, scoped credentials kept as digests.
        token: Vec<super::token_table::TokenEntry>,
    }

    config: Option<PathBuf> = "--config" "FILE",
        default custom("none"),
        help "TOML config file (same settings, snake_case keys)";

    listen: Option<SocketAddr> = "--listen" "ADDR",
        key listen: Option<String>,
        default custom(required),
        help "Address to listen on, e.g. 127.0.0.1:7000";

    metrics_listen: Option<SocketAddr> = "--metrics-listen" "ADDR",
        key metrics_listen: Option<String>,
        default custom("none"),
        help "Serve /metrics without a token on this separate address (for a scraper)";

    proxy_listen: Option<SocketAddr> = "--proxy-listen" "ADDR",
        key proxy_listen: Option<String>,
        default custom("none"),
        help "A second address serving everything --listen does, for a trusted load balancer only: on it (and only on it) the client address is the right-most X-Forwarded-For entry";

    trusted_proxy: Vec<ipnet::IpNet> = "--trusted-proxy" "CIDR" [value_parser = parse_net],
        key trusted_proxies: Option<Vec<String>>,
        default custom("none"),
        help "The balancer's address or range (e.g. 10.0.0.5 or 10.0.0.0/24), repeatable; required with --proxy-listen: only connections from there may name the client in X-Forwarded-For. Refused when it covers an address of this host while agents' tools have the network";

    otlp_endpoint: Option<String> = "--otlp-endpoint" "URL",
        env "OTEL_EXPORTER_OTLP_ENDPOINT",
        default custom("off"),
        help "Export OpenTelemetry traces (one per prompt, the gateway's span linked to the agent's) over OTLP/HTTP to this base URL, e.g. http://127.0.0.1:4318; children export there too. With --audit-log, its entries go there too as log records";

    audit_log: Option<PathBuf> = "--audit-log" "FILE",
        key audit_log: Option<PathBuf>,
        default optional(PathBuf, "off"),
        help "Append the audit trail to this file: one JSON line per action (sessions opened and closed, prompts, aborts, permission answers, admin actions, tokens, budgets, refusals) saying who, from which address, on which project and run, and how it ended; never a secret. Written from a thread of its own and made durable per batch; its directory must exist and be writable, and a symbolic link is refused. Also sent as OpenTelemetry log records with --otlp-endpoint";

    audit_log_max_bytes: Option<usize> = "--audit-log-max-bytes" "SIZE" [value_parser = parse_bytes],
        key audit_log_max_bytes: Option<FileBytes>,
        default value(usize = defaults::AUDIT_LOG_MAX_BYTES, format_bytes,
            |s, v| at_least(s, v, defaults::MIN_AUDIT_LOG_BYTES)),
        help "Rotate the audit log before it would grow past this (at least 1MiB): FILE becomes FILE.1, FILE.1 becomes FILE.2, and so on";

    audit_log_keep: Option<usize> = "--audit-log-keep" "N",
        key audit_log_keep: Option<usize>,
        default value(usize = defaults::AUDIT_LOG_KEEP, number, |s, v| at_least(s, v, 1)),
        help "Rotated audit logs kept, FILE.1 (newest) to FILE.N; a rotation removes the oldest";

    audit_prompts: bool = "--audit-prompts" "" [action = clap::ArgAction::SetTrue],
        key audit_prompts: Option<bool>,
        default custom("off"),
        help "Also write each prompt's text into the audit log (at most 64KiB each); off, a prompt's entry has no text. Needs --audit-log";

    projects_root: Option<PathBuf> = "--projects-root" "DIR",
        key projects_root: Option<PathBuf>,
        default required(PathBuf),
        help "Directory whose subdirectories are the projects";

    state_dir: Option<PathBuf> = "--state-dir" "DIR",
        key state_dir: Option<PathBuf>,
        default value(PathBuf = PathBuf::from(defaults::STATE_DIR), path_text, any),
        help "Gateway state; sessions go to STATE/sessions/PROJECT.jsonl";

    tokens: Vec<Secret> = "--token" "T",
        key tokens: Option<TokenList>,
        reads TOKEN_ENV_VARS[0],
        default custom("generated on loopback"),
        help "A client token (repeatable)";

    token_file: Option<PathBuf> = "--token-file" "F",
        key token_file: Option<PathBuf>,
        default custom("none"),
        help "File of client tokens, one per line (`#` comments, blank lines ignored)";

    observer_tokens: Vec<Secret> = "--observer-token" "T",
        key observer_tokens: Option<TokenList>,
        reads TOKEN_ENV_VARS[1],
        default custom("none"),
        help "An observer (read-only) token (repeatable)";

    observer_token_file: Option<PathBuf> = "--observer-token-file" "F",
        key observer_token_file: Option<PathBuf>,
        default custom("none"),
        help "File of observer tokens, one per line";

    admin_token: Option<Secret> = "--admin-token" "T",
        key admin_token: Option<Secret>,
        reads TOKEN_ENV_VARS[2],
        default custom("generated on loopback"),
        help "The admin API token";

    admin_token_file: Option<PathBuf> = "--admin-token-file" "F",
        key admin_token_file: Option<PathBuf>,
        default custom("none"),
        help "File of admin tokens, one per line";

    jwt_secret_file: Option<PathBuf> = "--jwt-secret-file" "FILE",
        key jwt_secret_file: Option<PathBuf>,
        default optional(PathBuf, "none"),
        help "Accept JWTs signed with HS256 and the secret in this file: at least 32 bytes (one final newline is not part of it), readable by the gateway's user only";

    jwks_file: Option<PathBuf> = "--jwks-file" "FILE",
        key jwks_file: Option<PathBuf>,
        default optional(PathBuf, "none"),
        help "Accept JWTs signed with RS256, ES256 or EdDSA by a key of this JSON Web Key Set (a key of the matching type, and the `kid` if the token names one); re-read every --jwks-refresh";

    jwks_url: Option<String> = "--jwks-url" "URL",
        key jwks_url: Option<String>,
        default optional(String, "none"),
        help "Like --jwks-file, fetched from an identity provider instead: https:// (http:// only on loopback), no redirects, at most 1MiB within 10s; every --jwks-refresh and early (at most once per 10s) when a token names an unknown `kid`. A failed fetch keeps the previous keys";

    jwks_refresh: Option<Duration> = "--jwks-refresh" "DUR" [value_parser = parse_duration],
        key jwks_refresh: Option<FileDuration>,
        default value(Duration = crate::access::jwt::DEFAULT_REFRESH, format_duration, jwt::refresh),
        help "Time between reloads of --jwks-file or --jwks-url, at least 10s";

    jwt_issuer: Option<String> = "--jwt-issuer" "ISS",
        key jwt_issuer: Option<String>,
        default optional(String, "not checked"),
        help "A JWT's `iss` must be present and equal this";

    jwt_audience: Option<String> = "--jwt-audience" "AUD",
        key jwt_audience: Option<String>,
        default optional(String, "none: a JWT with an aud claim is refused"),
        help "A JWT's `aud` must be present and name this";

    jwt_max_role: Option<MaxRole> = "--jwt-max-role" "ROLE" [value_enum],
        key jwt_max_role: Option<MaxRole>,
        default value(MaxRole = MaxRole::Client, enum_name, any),
        help "The highest `corral_role` a JWT may claim (observer < client < admin); a JWT claiming more is refused, not given less";

    jwt_leeway: Option<Duration> = "--jwt-leeway" "DUR" [value_parser = parse_duration],
        key jwt_leeway: Option<FileDuration>,
        default value(Duration = crate::access::jwt::DEFAULT_LEEWAY, format_duration, jwt::leeway),
        help "Clock difference with a JWT's issuer tolerated for `exp` and `nbf`, at most 5m; a session opened with a JWT is closed at its `exp` plus this";

    allowed_origins: Vec<String> = "--allowed-origin" "O",
        key allowed_origins: Option<Vec<String>>,
        default list(String, "same origin only"),
        help "A browser origin allowed to connect, `scheme://host[:port]`, or `*` (repeatable)";

    idle_timeout: Option<Duration> = "--idle-timeout" "DUR" [value_parser = parse_duration],
        key idle_timeout: Option<FileDuration>,
        default value(Duration = defaults::IDLE_TIMEOUT, format_duration, any),
        help "Stop a child with no clients after this long; 0 = never";

    max_children: Option<usize> = "--max-children" "N",
        key max_children: Option<usize>,
        default value(usize = defaults::MAX_CHILDREN, number, |s, v| at_least(s, v, 1)),
        help "Most children running at once";

    max_starting: Option<usize> = "--max-starting" "N",
        key max_starting: Option<usize>,
        default optional(usize, "one per two cores, at least 1"),
        help "Children being started at once, each from its spawn until its answered hello; further starts wait their turn, so a burst of first connects does not crowd out the clients already attached";

    spare_agents: Option<usize> = "--spare-agents" "N",
        key spare_agents: Option<usize>,
        default value(usize = defaults::SPARE_AGENTS, number, |s, v| at_most(s, v, defaults::MAX_SPARE_AGENTS)),
        help "Sandboxed agents kept started ahead of any project, each taking the next cold start's project (with --sandbox on and the template); each holds what a child holds, on top of --max-children; 0 = none";

    dialect: Option<Dialect> = "--dialect" "DIALECT" [value_enum],
        key dialect: Option<Dialect>,
        default value(Dialect = Dialect::default(), enum_name, any),
        help "The wire protocol of every child and its clients";

    child_bin: Option<PathBuf> = "--child-bin" "PATH",
        key child_bin: Option<PathBuf>,
        default optional(PathBuf, "corral-agent next to corral, else on PATH"),
        help "The child binary";

    child_template: Option<TemplateMode> = "--child-template" "auto|on|off" [value_enum],
        key child_template: Option<TemplateMode>,
        default value(TemplateMode = TemplateMode::Auto, enum_name, any),
        help "Fork each child from one `CHILD_BIN template` process the gateway starts (no exec, no loader; the relocated binary stays shared between children) instead of executing it: on; off executes every child; auto is on when the child binary is named corral-agent. Third-party agents are always executed";

    child_command: Option<String> = "--child-command" "'CMD ARGS…'",
        key child_command: Option<String>,
        default optional(String, "none"),
        help "Run this ACP agent as every project's child instead of corral-agent, e.g. 'pi-acp' (split like shell words; a bare name is found on PATH); needs --dialect acp. With the sandbox on it runs under corral-agent sandbox-exec, with a private HOME under the state directory";

    mcp_servers: Option<PathBuf> = "--mcp-servers" "FILE",
        key mcp_servers: Option<PathBuf>,
        default optional(PathBuf, "none"),
        help "The MCP servers agents may use, in the common {\"mcpServers\": {NAME: {command, args, env} | {type: \"http\", url, headers}}} shape; \"default\": false makes a server selectable by clients instead of started for every project. Each corral-agent child gets them as a file only it reads (never on its command line); third-party agents get none. The file holds secrets: hidden from agents like the token files";

    client_mcp: Option<crate::mcp::ClientMcp> = "--client-mcp" "off|select" [value_enum],
        key client_mcp: Option<crate::mcp::ClientMcp>,
        default value(crate::mcp::ClientMcp = crate::mcp::ClientMcp::Select, enum_name, any),
        help "What clients may do about MCP servers: select = an ACP editor's mcpServers that match --mcp-servers entries by definition (command and arguments, or URL) are started for the project's session, anything else is refused and the editor told; off = the operator's defaults only";

    child_env: Vec<String> = "--child-env" "NAME[=VALUE]",
        key child_env: Option<Vec<String>>,
        default list(String, "none"),
        help "Pass NAME from the gateway's environment to children, or set NAME=VALUE (repeatable)";

    replay_events: Option<usize> = "--replay-events" "N",
        key replay_events: Option<usize>,
        default value(usize = defaults::REPLAY_EVENTS, number, |s, v| at_least(s, v, 1)),
        help "Events kept per project for clients that reconnect";

    replay_bytes: Option<usize> = "--replay-bytes" "BYTES" [value_parser = parse_bytes],
        key replay_bytes: Option<FileBytes>,
        default value(usize = defaults::REPLAY_BYTES, format_bytes, |s, v| at_least(s, v, 1)),
        help "Bytes kept per project for clients that reconnect, never below two --max-frame-bytes (so one big event cannot push out the one a client is still sending; 32MiB in effect with the defaults)";

    outbox_frames: Option<usize> = "--outbox-frames" "N",
        key outbox_frames: Option<usize>,
        default value(usize = defaults::OUTBOX_FRAMES, number, |s, v| at_least(s, v, 1)),
        help "Frames queued per client before it counts as too slow";

    client_buffer_bytes: Option<usize> = "--client-buffer-bytes" "BYTES" [value_parser = parse_bytes],
        key client_buffer_bytes: Option<FileBytes>,
        default optional(usize, {
            format!(
                "{} × --max-frame-bytes ({})",
                defaults::CLIENT_BUFFER_FRAMES,
                format_bytes(defaults::MAX_FRAME_BYTES * defaults::CLIENT_BUFFER_FRAMES)
            )
        }),
        help "Bytes queued for one client and not yet written to its socket; a client over it is closed with 4000. At least two --max-frame-bytes";

    total_client_buffer_bytes: Option<usize> = "--total-client-buffer-bytes" "BYTES" [value_parser = parse_bytes],
        key total_client_buffer_bytes: Option<FileBytes>,
        default optional(usize, { format_bytes(defaults::TOTAL_CLIENT_BUFFER_BYTES) }),
        help "Bytes queued for all clients together; over it, the clients holding the most are closed with 4000. At least --client-buffer-bytes";

    max_client_requests: Option<usize> = "--max-client-requests" "N",
        key max_client_requests: Option<usize>,
        default value(usize = defaults::MAX_CLIENT_REQUESTS, number, |s, v| at_least(s, v, 1)),
        help "Requests one client may have waiting for the agent's answer; more get an error";

    max_frame_bytes: Option<usize> = "--max-frame-bytes" "BYTES" [value_parser = parse_bytes],
        key max_frame_bytes: Option<FileBytes>,
        default value(usize = defaults::MAX_FRAME_BYTES, format_bytes,
            |s, v| at_least(s, v, defaults::MIN_FRAME_BYTES)),
        help "Largest frame accepted from a client or a child";

    ws_buffer_bytes: Option<usize> = "--ws-buffer-bytes" "BYTES" [value_parser = parse_bytes],
        key ws_buffer_bytes: Option<FileBytes>,
        default value(usize = defaults::WS_BUFFER_BYTES, format_bytes,
            |s, v| at_least(s, v, defaults::MIN_WS_BUFFER_BYTES)),
        help "Read and write buffer of each WebSocket connection; small keeps idle clients cheap, larger frames still pass";

    hello_timeout: Option<Duration> = "--hello-timeout" "DUR" [value_parser = parse_duration],
        key hello_timeout: Option<FileDuration>,
        default value(Duration = defaults::HELLO_TIMEOUT, format_duration, positive),
        help "Time a client has to send its hello";

    max_hello_bytes: Option<usize> = "--max-hello-bytes" "BYTES" [value_parser = parse_bytes],
        key max_hello_bytes: Option<FileBytes>,
        default value(usize = defaults::MAX_HELLO_BYTES, format_bytes,
            |s, v| at_least(s, v, defaults::MIN_HELLO_BYTES)),
        help "Bytes a WebSocket client may send before it is authenticated; more closes it with 1009";

    header_timeout: Option<Duration> = "--header-timeout" "DUR" [value_parser = parse_duration],
        key header_timeout: Option<FileDuration>,
        default value(Duration = defaults::HEADER_TIMEOUT, format_duration, positive),
        help "Time a connection has to send a request's headers; slower connections are closed";

    max_connections: Option<usize> = "--max-connections" "N",
        key max_connections: Option<usize>,
        default optional(usize, "the open-file limit minus headroom"),
        help "Most connections open at once; more are refused with 503 at accept. By default the open-file limit (raised to its hard limit at start) minus headroom for children and files";

    auth_failure_rate: Option<f64> = "--auth-failure-rate" "PER_SEC",
        key auth_failure_rate: Option<f64>,
        default value(f64 = crate::throttle::defaults::RATE, number, auth_failure_rate),
        help "Wrong tokens one source address may have checked per second, after --auth-failure-burst; more are refused unchecked (429, or close 1013)";

    auth_failure_burst: Option<u32> = "--auth-failure-burst" "N",
        key auth_failure_burst: Option<u32>,
        default value(u32 = crate::throttle::defaults::BURST, number, |s, v| at_least(s, v, 1)),
        help "Wrong tokens one source address may have checked at once before --auth-failure-rate applies";

    max_auth_sources: Option<usize> = "--max-auth-sources" "N",
        key max_auth_sources: Option<usize>,
        default value(usize = crate::throttle::defaults::MAX_SOURCES, number, |s, v| at_least(s, v, 1)),
        help "Source addresses whose failure budget the gateway remembers at once";

    ops_connections: Option<usize> = "--ops-connections" "N",
        key ops_connections: Option<usize>,
        default value(usize = defaults::OPS_CONNECTIONS, number, |s, v| at_least(s, v, 1)),
        help "Places beyond --max-connections for /healthz, /readyz and /metrics when every connection is authenticated: one answer each, then closed";

    max_connections_per_token: Option<usize> = "--max-connections-per-token" "N",
        key max_connections_per_token: Option<usize>,
        default value(usize = defaults::MAX_CONNECTIONS_PER_TOKEN, number, any),
        help "WebSocket sessions one identity (a token, or a JWT subject) may hold open at once; more are refused with close 1013 (0 = unlimited)";

    max_prompts_per_minute: Option<u32> = "--max-prompts-per-minute" "N",
        key max_prompts_per_minute: Option<u32>,
        default value(u32 = defaults::MAX_PROMPTS_PER_MINUTE, number, any),
        help "Prompts (requests that start a run) one identity may send per minute over all its connections and projects, evenly refilled; more are answered with an error in the client's dialect (0 = unlimited)";

    ping_interval: Option<Duration> = "--ping-interval" "DUR" [value_parser = parse_duration],
        key ping_interval: Option<FileDuration>,
        default value(Duration = defaults::PING_INTERVAL, format_duration, positive),
        help "Interval between health pings";

    ping_timeout: Option<Duration> = "--ping-timeout" "DUR" [value_parser = parse_duration],
        key ping_timeout: Option<FileDuration>,
        default value(Duration = defaults::PING_TIMEOUT, format_duration, positive),
        help "Time a ping has to be answered";

    ready_timeout: Option<Duration> = "--ready-timeout" "DUR" [value_parser = parse_duration],
        key ready_timeout: Option<FileDuration>,
        default value(Duration = defaults::READY_TIMEOUT, format_duration, positive),
        help "Time from spawning a child to its answered hello";

    stop_grace: Option<Duration> = "--stop-grace" "DUR" [value_parser = parse_duration],
        key stop_grace: Option<FileDuration>,
        default value(Duration = defaults::STOP_GRACE, format_duration, any),
        help "Grace between each step of stopping a child (close stdin, SIGTERM, SIGKILL)";

    permission_timeout: Option<Duration> = "--permission-timeout" "DUR" [value_parser = parse_duration],
        key permission_timeout: Option<FileDuration>,
        default value(Duration = defaults::PERMISSION_TIMEOUT, format_duration, any),
        help "Time a request of the agent for its clients (an ACP permission request) waits for an answer before the gateway answers it \"cancelled\"";

    shutdown_grace: Option<Duration> = "--shutdown-grace" "DUR" [value_parser = parse_duration],
        key shutdown_grace: Option<FileDuration>,
        default value(Duration = defaults::SHUTDOWN_GRACE, format_duration, any),
        help "Time the gateway waits for children and clients on shutdown";

    crash_limit: Option<u32> = "--crash-limit" "N",
        key crash_limit: Option<u32>,
        default value(u32 = defaults::CRASH_LIMIT, number, |s, v| at_least(s, v, 1)),
        help "Crashes within --crash-window that mark a child failed";

    crash_window: Option<Duration> = "--crash-window" "DUR" [value_parser = parse_duration],
        key crash_window: Option<FileDuration>,
        default value(Duration = defaults::CRASH_WINDOW, format_duration, positive),
        help "Window for counting crashes";

    crash_cooldown: Option<Duration> = "--crash-cooldown" "DUR" [value_parser = parse_duration],
        key crash_cooldown: Option<FileDuration>,
        default value(Duration = defaults::CRASH_COOLDOWN, format_duration, any),
        help "Time a failed project waits before it may be started again";

    sandbox: Option<OnOff> = "--sandbox" "on|off" [value_enum],
        key sandbox: Option<OnOff>,
        default value(OnOff = OnOff::On, enum_name, any),
        help "Confine every agent (namespaces and Landlock: only its project is writable; other projects, the state dir, config and token files are hidden); off runs agents unconfined";

    sandbox_hide: Vec<PathBuf> = "--sandbox-hide" "PATH",
        key sandbox_hide: Option<Vec<PathBuf>>,
        default list(PathBuf, "none"),
        help "Another path children must not see (repeatable); a file is hidden with the directory holding it. The state dir, projects root and the directories of the config and token files are always hidden";

    tool_network: Option<ToolNetwork> = "--tool-network" "on|off|proxy" [value_enum],
        key tool_network: Option<ToolNetwork>,
        default custom("proxy (on with --sandbox off)"),
        help "How commands run by the agent's tools reach the network: proxy = only through the gateway's egress proxy, as --egress-allow permits; off = not at all; on = the host's network unfiltered. proxy and off need the sandbox. The agent's own model calls are not affected";

    egress_allow: Vec<String> = "--egress-allow" "RULE",
        key egress_allow: Option<Vec<String>>,
        default list(String, "none: tools reach nothing"),
        help "What tools may reach through the egress proxy (repeatable): a host (registry.example.com), *.example.com (names below), **.example.com (the name and below), an address or network (203.0.113.7, 10.20.0.0/16), each with an optional :PORT. Loopback, link-local, private and multicast addresses stay refused unless a rule names the address or a network inside its range";

    egress_deny: Vec<String> = "--egress-deny" "RULE",
        key egress_deny: Option<Vec<String>>,
        default list(String, "none"),
        help "What tools may never reach (repeatable, same forms as --egress-allow); deny wins over allow";

    egress_methods: Vec<String> = "--egress-methods" "METHOD,…" [value_delimiter = ','],
        key egress_methods: Option<Vec<String>>,
        default list(String, "any"),
        help "The only methods plain-HTTP requests through the egress proxy may use, e.g. GET,HEAD; HTTPS (CONNECT) tunnels are decided by host and port alone";

    egress_max_connections: Option<usize> = "--egress-max-connections" "N",
        key egress_max_connections: Option<usize>,
        default value(usize = defaults::EGRESS_MAX_CONNECTIONS, number, |s, v| at_least(s, v, 1)),
        help "Tool connections open through the egress proxy at once, over all projects (each holds two of the gateway's descriptors); a project may hold a quarter of them";

    model_broker: Option<BrokerMode> = "--model-broker" "auto|on|off" [value_enum],
        key model_broker: Option<BrokerMode>,
        default value(BrokerMode = BrokerMode::Auto, enum_name, any),
        help "Keep the model API keys in the gateway: agents' model calls go through a broker on a Unix socket (STATE/egress/broker-ID.sock, ID naming this gateway process) that checks a per-spawn placeholder key, puts the real ANTHROPIC_API_KEY / OPENAI_API_KEY in (read from the gateway's environment, with ANTHROPIC_BASE_URL / OPENAI_BASE_URL) and forwards only to those endpoints; the agent then runs without the host's network. on needs the sandbox, --tool-network proxy or off, and a key; auto is on when those hold, the child is corral-agent and -- CHILD_ARGS name no --base-url or --api-key";

    project_budget_usd: Option<f64> = "--project-budget-usd" "USD",
        key project_budget_usd: Option<f64>,
        default optional(f64, "none: unlimited"),
        help "What each project may spend on models, in US dollars, until an admin raises or resets its budget (PUT /v1/projects/NAME/budget): counted from the providers' own usage at the model broker, else from the usage the agent reports, over every gateway on the state directory. A project at its budget gets its new prompts refused; 0 refuses every prompt";

    child_user: Option<String> = "--child-user" "USER",
        key child_user: Option<String>,
        default optional(String, "the gateway's user"),
        help "Run children as this user (name or uid) instead of the gateway's; the gateway must run as root";

    child_memory_max: Option<usize> = "--child-memory-max" "SIZE" [value_parser = parse_bytes],
        key child_memory_max: Option<FileBytes>,
        default optional(usize, "none"),
        help "Memory of one child and everything it runs, at least 16MiB; with a cgroup, exceeding it kills and restarts the child (exit reason memory_limit), else RLIMIT_AS caps each process";

    child_pids_max: Option<u64> = "--child-pids-max" "N",
        key child_pids_max: Option<u64>,
        default optional(u64, "none"),
        help "Processes and threads of one child and everything it runs, at least 16; with a cgroup, reaching it kills and restarts the child (exit reason pids_limit), else RLIMIT_NPROC applies";

    child_args: Vec<String> = "--" "CHILD_ARGS" [last = true],
        key child_args: Option<Vec<String>>,
        default list(String, "none"),
        help "Extra arguments for every child, after `--`";
}
