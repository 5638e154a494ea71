//! The text `corral serve --help` prints after the flags: an example, the
//! environment, how the sandbox is checked and the exit codes.

pub const SERVE_ENV_HELP: &str = "\
Required: --listen and --projects-root, on the command line or in --config.

Example: serve every directory under ~/projects, agents on the offline echo provider:
  corral serve --listen 127.0.0.1:7000 --projects-root ~/projects -- --provider echo
On a loopback address without tokens, a client and an admin token are
generated and printed; the dashboard is at http://127.0.0.1:7000/ and
clients connect to ws://127.0.0.1:7000/v1/projects/NAME/rpc.

Dialects (--dialect): zut (zut RPC v1, the default), letscode (letscode-rpc/1),
zi (Zi RPC v1), acp (Agent Client Protocol v1). Clients and children speak
the same one.

Durations: 250ms, 10s, 5m, 2h, or a number of seconds. Sizes: bytes, or KiB/MiB/GiB.
Precedence: command line > environment > config file > default.

Environment:
  CORRAL_LOG              log filter for stderr, e.g. debug or corral=debug [default: info]
  CORRAL_TOKENS           client tokens, comma-separated
  CORRAL_OBSERVER_TOKENS  observer tokens, comma-separated
  CORRAL_ADMIN_TOKEN      the admin token
  ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, OPENAI_API_KEY, OPENAI_BASE_URL,
  ZUT_HOME, CORRAL_HOME   passed to children (as are PATH, HOME, LANG and the
                          like, and --child-env names); nothing else is
  NOTIFY_SOCKET           set by systemd (Type=notify): READY=1 once listening
Tokens are at least 16 characters. Tokens given on the command line are
visible to other local users (ps); prefer files or the environment. The
gateway removes these variables from its environment once read.

With --sandbox on (the default) the gateway checks at start that the agent
can confine itself here (corral-agent sandbox-probe) and refuses to start if
not. Resource limits use cgroup v2 when the gateway's cgroup offers the
memory and pids controllers, else cgroup v1, else rlimits.

Exit codes:
  0  stopped by SIGTERM or SIGINT (children stopped, clients closed)
  1  the agent sandbox is unavailable on this host (see --sandbox)
  2  bad flags or config, or it cannot start serving (address in use,
     state directory not writable)";
