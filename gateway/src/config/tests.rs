//! Tests of `load_with_env`: merging, defaults and refusals.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::dialect::Dialect;

const TOKEN: &str = "client-token-0123456789";

/// A temp dir with `projects/`, an executable `bin/agent` and room for
/// `state/`, plus args that point at them.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("projects")).unwrap();
        fs::create_dir(dir.path().join("bin")).unwrap();
        let agent = dir.path().join("bin/agent");
        fs::write(&agent, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&agent, fs::Permissions::from_mode(0o755)).unwrap();
        Fixture { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn args(&self) -> ServeArgs {
        ServeArgs {
            listen: Some("127.0.0.1:7000".parse().unwrap()),
            projects_root: Some(self.path("projects")),
            state_dir: Some(self.path("state")),
            child_bin: Some(self.path("bin/agent")),
            ..ServeArgs::default()
        }
    }

    fn config_file(&self, text: &str) -> PathBuf {
        let path = self.path("corral.toml");
        fs::write(&path, text).unwrap();
        path
    }

    /// The config file in a directory of its own (`conf/`), away from the
    /// fixture's `bin/`, which a child command runs from.
    fn config_file_apart(&self, text: &str) -> PathBuf {
        fs::create_dir_all(self.path("conf")).unwrap();
        let path = self.path("conf/corral.toml");
        fs::write(&path, text).unwrap();
        path
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn defaults_and_generated_token_on_loopback() {
    let f = Fixture::new();
    let config = load_with_env(f.args(), &no_env).unwrap();
    let generated = config.generated_token.as_ref().expect("a generated token");
    assert_eq!(generated.expose().len(), 64);
    assert_eq!(
        config.tokens.role_of(generated.expose()),
        Some(Role::Client)
    );
    assert_eq!(
        config.projects_root,
        f.path("projects").canonicalize().unwrap()
    );
    assert_eq!(config.state_dir, f.path("state").canonicalize().unwrap());
    assert!(config.supervisor.sessions_dir.is_dir());
    assert_eq!(
        config.supervisor.session_file("alpha"),
        config.state_dir.join("sessions/alpha.jsonl")
    );
    assert_eq!(
        config.limits,
        Limits {
            max_children: 64,
            max_starting: None,
            spare_agents: 1,
            replay_events: 10_000,
            replay_bytes: 8 << 20,
            outbox_frames: 256,
            client_buffer_bytes: 64 << 20,
            total_client_buffer_bytes: 1 << 30,
            max_client_requests: 64,
            max_frame_bytes: 16 << 20,
            ws_buffer_bytes: 8 << 10,
            hello_timeout: Duration::from_secs(10),
            max_hello_bytes: 64 << 10,
            header_timeout: Duration::from_secs(10),
            max_connections: None,
            ops_connections: 8,
            max_connections_per_token: 256,
            max_prompts_per_minute: 60,
        }
    );
    let s = &config.supervisor;
    assert_eq!(s.idle_timeout, Some(Duration::from_secs(600)));
    assert_eq!(
        (s.ping_interval, s.ping_timeout),
        (Duration::from_secs(30), Duration::from_secs(10))
    );
    assert_eq!(
        (s.ready_timeout, s.stop_grace),
        (Duration::from_secs(15), Duration::from_secs(5))
    );
    assert_eq!(s.permission_timeout, Duration::from_secs(300));
    assert_eq!(s.crash_limit, 5);
    assert_eq!(
        (s.crash_window, s.crash_cooldown),
        (Duration::from_secs(60), Duration::from_secs(300))
    );
    assert_eq!(config.shutdown_grace, Duration::from_secs(10));
    assert!(config.allowed_origins.is_empty());
    assert!(!format!("{config:?}").contains(generated.expose()));
}

#[test]
fn ipv6_loopback_also_gets_a_token() {
    let f = Fixture::new();
    let args = ServeArgs {
        listen: Some("[::1]:7000".parse().unwrap()),
        ..f.args()
    };
    assert!(load_with_env(args, &no_env)
        .unwrap()
        .generated_token
        .is_some());
}

#[test]
fn non_loopback_without_client_token_is_refused() {
    for addr in ["0.0.0.0:7000", "[::]:7000", "192.168.1.5:7000"] {
        let f = Fixture::new();
        let args = ServeArgs {
            listen: Some(addr.parse().unwrap()),
            admin_token: Some(Secret::new(TOKEN)),
            ..f.args()
        };
        let err = load_with_env(args, &no_env).unwrap_err();
        assert!(matches!(err, ConfigError::NoClientToken { .. }), "{err}");
        assert!(err.to_string().starts_with(&format!(
            "refusing to listen on {addr} without a client token"
        )));
        assert!(
            !f.path("state").exists(),
            "a refused config creates nothing"
        );
    }
}

#[test]
fn non_loopback_with_env_token_is_accepted() {
    let f = Fixture::new();
    let args = ServeArgs {
        listen: Some("0.0.0.0:7000".parse().unwrap()),
        ..f.args()
    };
    let env = |var: &str| (var == "CORRAL_TOKENS").then(|| TOKEN.to_string());
    let config = load_with_env(args, &env).unwrap();
    assert!(config.generated_token.is_none());
    assert_eq!(config.tokens.role_of(TOKEN), Some(Role::Client));
}

#[test]
fn non_loopback_accepting_only_jwts_needs_no_client_token() {
    let f = Fixture::new();
    fs::create_dir(f.path("keys")).unwrap();
    let secret = f.path("keys/jwt-secret");
    fs::write(&secret, format!("{}\n", "k".repeat(32))).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let args = ServeArgs {
        listen: Some("0.0.0.0:7000".parse().unwrap()),
        jwt_secret_file: Some(secret),
        ..f.args()
    };
    let config = load_with_env(args, &no_env).unwrap();
    assert!(config.generated_token.is_none() && config.tokens.client.is_empty());
    assert!(config.jwt.secret.is_some());
}

#[test]
fn command_line_beats_env_beats_file_beats_default() {
    let f = Fixture::new();
    let file_token = "file-token-0123456789";
    let env_token = "env-token-0123456789";
    let path = f.config_file(&format!(
        r#"
        listen = "127.0.0.2:9000"
        tokens = ["{file_token}"]
        observer_tokens = ["{file_token}"]
        max_children = 8
        max_starting = 3
        idle_timeout = "1m"
        replay_bytes = "1MiB"
        allowed_origins = ["https://from-file.example"]
        child_args = ["--from-file"]
        dialect = "letscode"
        "#
    ));
    let env = |var: &str| (var == "CORRAL_TOKENS").then(|| env_token.to_string());
    let args = ServeArgs {
        config: Some(path.clone()),
        listen: None,
        max_children: Some(4),
        allowed_origins: vec!["HTTPS://From-Cli.example/".into()],
        ..f.args()
    };
    let config = load_with_env(args, &env).unwrap();
    assert_eq!(config.config_file, Some(path));
    assert_eq!(
        config.listen,
        "127.0.0.2:9000".parse().unwrap(),
        "file beats default"
    );
    assert_eq!(config.limits.max_children, 4, "command line beats file");
    assert_eq!(config.limits.max_starting, Some(3));
    assert_eq!(
        config.supervisor.idle_timeout,
        Some(Duration::from_secs(60))
    );
    assert_eq!(config.limits.replay_bytes, 1 << 20);
    assert_eq!(config.limits.outbox_frames, defaults::OUTBOX_FRAMES);
    assert_eq!(config.allowed_origins, ["https://from-cli.example"]);
    assert_eq!(config.supervisor.child_args, ["--from-file"]);
    assert_eq!(
        config.supervisor.dialect,
        Dialect::named("letscode").unwrap(),
        "from the file"
    );
    assert_eq!(
        config.tokens.role_of(env_token),
        Some(Role::Client),
        "env beats file"
    );
    assert_eq!(config.tokens.role_of(file_token), Some(Role::Observer));
    assert!(config.generated_token.is_none());
}

#[test]
fn relative_paths_in_the_file_follow_the_file() {
    let f = Fixture::new();
    fs::write(f.path("tokens.txt"), format!("# clients\n{TOKEN}\n")).unwrap();
    let path = f.config_file(
        "listen = \"127.0.0.1:7000\"\nprojects_root = \"projects\"\nstate_dir = \"state\"\n\
         token_file = \"tokens.txt\"\nchild_bin = \"bin/agent\"\n",
    );
    let args = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    };
    let config = load_with_env(args, &no_env).unwrap();
    assert_eq!(
        config.projects_root,
        f.path("projects").canonicalize().unwrap()
    );
    assert_eq!(
        config.supervisor.child_bin,
        f.path("bin/agent").canonicalize().unwrap()
    );
    assert_eq!(config.tokens.role_of(TOKEN), Some(Role::Client));
}

#[test]
fn unknown_key_in_file_is_named() {
    let f = Fixture::new();
    let args = ServeArgs {
        config: Some(f.config_file("max_childs = 3\n")),
        ..f.args()
    };
    let err = load_with_env(args, &no_env).unwrap_err();
    assert!(matches!(err, ConfigError::ParseFile { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("corral.toml") && msg.contains("unknown field `max_childs`"),
        "{msg}"
    );
}

#[test]
fn missing_config_file_is_an_error() {
    let f = Fixture::new();
    let args = ServeArgs {
        config: Some(f.path("nope.toml")),
        ..f.args()
    };
    let err = load_with_env(args, &no_env).unwrap_err();
    assert!(matches!(err, ConfigError::ReadFile { .. }), "{err}");
}

#[test]
fn required_settings_and_projects_root_checks() {
    let f = Fixture::new();
    let err = load_with_env(
        ServeArgs {
            listen: None,
            ..f.args()
        },
        &no_env,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "missing --listen ADDR (or `listen` in the config file)"
    );
    let err = load_with_env(
        ServeArgs {
            projects_root: None,
            ..f.args()
        },
        &no_env,
    )
    .unwrap_err();
    assert!(err.to_string().contains("--projects-root"), "{err}");
    let args = ServeArgs {
        projects_root: Some(f.path("missing")),
        ..f.args()
    };
    assert!(matches!(
        load_with_env(args, &no_env),
        Err(ConfigError::ProjectsRoot { .. })
    ));
    let args = ServeArgs {
        projects_root: Some(f.path("bin/agent")),
        ..f.args()
    };
    let err = load_with_env(args, &no_env).unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
}

#[test]
fn short_token_is_refused() {
    let f = Fixture::new();
    let args = ServeArgs {
        tokens: vec![Secret::new("hunter2")],
        ..f.args()
    };
    let err = load_with_env(args, &no_env).unwrap_err().to_string();
    assert!(
        err.contains("client token from --token (#1) is too short"),
        "{err}"
    );
    assert!(!err.contains("hunter2"));
}

#[test]
fn out_of_range_values_are_refused() {
    let f = Fixture::new();
    let cases: [(ServeArgs, &str); 11] = [
        (
            ServeArgs {
                max_starting: Some(0),
                ..f.args()
            },
            "--max-starting",
        ),
        (
            ServeArgs {
                spare_agents: Some(65),
                ..f.args()
            },
            "--spare-agents",
        ),
        (
            ServeArgs {
                outbox_frames: Some(0),
                ..f.args()
            },
            "--outbox-frames",
        ),
        (
            ServeArgs {
                max_frame_bytes: Some(100),
                ..f.args()
            },
            "--max-frame-bytes",
        ),
        (
            ServeArgs {
                hello_timeout: Some(Duration::ZERO),
                ..f.args()
            },
            "--hello-timeout",
        ),
        (
            ServeArgs {
                max_hello_bytes: Some(10),
                ..f.args()
            },
            "--max-hello-bytes",
        ),
        (
            ServeArgs {
                header_timeout: Some(Duration::ZERO),
                ..f.args()
            },
            "--header-timeout",
        ),
        (
            ServeArgs {
                max_connections: Some(0),
                ..f.args()
            },
            "--max-connections",
        ),
        (
            ServeArgs {
                ops_connections: Some(0),
                ..f.args()
            },
            "--ops-connections",
        ),
        (
            ServeArgs {
                crash_limit: Some(0),
                ..f.args()
            },
            "--crash-limit",
        ),
        (
            ServeArgs {
                allowed_origins: vec!["example.com".into()],
                ..f.args()
            },
            "--allowed-origin",
        ),
    ];
    for (args, flag) in cases {
        let err = load_with_env(args, &no_env).unwrap_err();
        assert!(matches!(err, ConfigError::Invalid { .. }), "{err}");
        assert!(err.to_string().contains(flag), "{err}");
    }
}

#[test]
fn client_buffers_follow_the_frame_limit_and_are_checked_against_it() {
    let f = Fixture::new();
    let limits = |args: ServeArgs| load_with_env(args, &no_env).map(|c| c.limits);
    // Derived: four frames per client; the total at least one client.
    let small = limits(ServeArgs {
        max_frame_bytes: Some(1 << 20),
        ..f.args()
    })
    .unwrap();
    assert_eq!(
        (small.client_buffer_bytes, small.total_client_buffer_bytes),
        (4 << 20, 1 << 30)
    );
    let big = limits(ServeArgs {
        max_frame_bytes: Some(512 << 20),
        ..f.args()
    })
    .unwrap();
    assert_eq!(
        (big.client_buffer_bytes, big.total_client_buffer_bytes),
        (2 << 30, 2 << 30)
    );
    // A client must take one big reply with one big event in hand.
    let err = limits(ServeArgs {
        client_buffer_bytes: Some((32 << 20) - 1),
        ..f.args()
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("--client-buffer-bytes"), "{err}");
    assert!(err.contains("two --max-frame-bytes"), "{err}");
    assert!(limits(ServeArgs {
        client_buffer_bytes: Some(32 << 20),
        ..f.args()
    })
    .is_ok());
    let err = limits(ServeArgs {
        client_buffer_bytes: Some(64 << 20),
        total_client_buffer_bytes: Some(63 << 20),
        ..f.args()
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("--total-client-buffer-bytes"), "{err}");
}

#[test]
fn zero_idle_timeout_means_never() {
    let f = Fixture::new();
    let args = ServeArgs {
        idle_timeout: Some(Duration::ZERO),
        allowed_origins: vec!["*".into()],
        child_env: vec!["HOME".into(), "RUST_LOG=info".into()],
        child_args: vec!["--model".into(), "m".into()],
        ..f.args()
    };
    let config = load_with_env(args, &no_env).unwrap();
    assert_eq!(config.supervisor.idle_timeout, None);
    assert_eq!(config.allowed_origins, ["*"]);
    assert_eq!(config.supervisor.child_env.pass, ["HOME"]);
    assert_eq!(
        config.supervisor.child_env.set,
        [("RUST_LOG".to_string(), "info".to_string())]
    );
    assert_eq!(config.supervisor.child_args, ["--model", "m"]);
}

#[test]
fn child_bin_errors() {
    let f = Fixture::new();
    let args = ServeArgs {
        child_bin: Some(f.path("bin/missing")),
        ..f.args()
    };
    let err = load_with_env(args, &no_env).unwrap_err();
    assert!(matches!(err, ConfigError::ChildBin { .. }), "{err}");
    assert!(err.to_string().contains("bin/missing"), "{err}");

    // Bare name: looked up on the injected PATH only.
    let args = ServeArgs {
        child_bin: Some(PathBuf::from("agent")),
        ..f.args()
    };
    let path = f.path("bin").display().to_string();
    let env = |var: &str| (var == "PATH").then(|| path.clone());
    let config = load_with_env(args.clone(), &env).unwrap();
    assert_eq!(
        config.supervisor.child_bin,
        f.path("bin/agent").canonicalize().unwrap()
    );
    assert!(matches!(
        load_with_env(args, &no_env),
        Err(ConfigError::ChildBin { .. })
    ));
}

#[test]
fn confinement_hides_the_gateway_files_and_merges_layers() {
    let f = Fixture::new();
    let tokens = f.path("client.tokens");
    fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    let file = f.config_file(
        "sandbox_hide = [\"keys\"]\ntool_network = \"off\"\nchild_pids_max = 32\nchild_memory_max = \"64MiB\"\n",
    );
    let args = ServeArgs {
        config: Some(file.clone()),
        token_file: Some(tokens.clone()),
        child_pids_max: Some(100),
        ..f.args()
    };
    let c = load_with_env(args, &no_env).unwrap().confinement;
    assert!(c.sandbox && c.tool_network == super::ToolNetwork::Off);
    assert_eq!((c.memory_max, c.pids_max), (Some(64 << 20), Some(100)));
    let canonical = |rel: &str| f.path(rel).canonicalize().unwrap();
    // The config and token files are hidden with the directory holding
    // both (the fixture's), once; then the host's service sockets.
    let sockets = super::hiding::host_sockets();
    assert_eq!(c.hide[c.hide.len() - sockets.len()..], sockets[..]);
    assert_eq!(
        c.hide[..c.hide.len() - sockets.len()],
        [
            canonical("state"),
            canonical("projects"),
            canonical(""),
            f.path("keys"),
        ]
    );
}

#[test]
fn a_file_hide_covers_its_directory_and_a_needed_one_is_refused() {
    let f = Fixture::new();
    fs::create_dir_all(f.path("keys")).unwrap();
    fs::write(f.path("keys/provider.key"), "k").unwrap();
    let args = ServeArgs {
        sandbox_hide: vec![f.path("keys/provider.key"), f.path("later")],
        ..f.args()
    };
    let c = load_with_env(args, &no_env).unwrap().confinement;
    let keys = f.path("keys").canonicalize().unwrap();
    // A path that does not exist yet is passed on as it is.
    let sockets = super::hiding::host_sockets().len();
    assert_eq!(c.hide[2..c.hide.len() - sockets], [keys, f.path("later")]);

    fs::create_dir_all(f.path("projects/alpha")).unwrap();
    let tokens = f.path("projects/alpha/client.tokens");
    fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    let args = ServeArgs {
        token_file: Some(tokens.clone()),
        ..f.args()
    };
    let err = load_with_env(args.clone(), &no_env)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("--token-file names "), "{err}");
    assert!(err.contains("inside a project"), "{err}");
    // Without the sandbox nothing is hidden, so nothing is refused.
    let args = ServeArgs {
        sandbox: Some(OnOff::Off),
        ..args
    };
    assert!(load_with_env(args, &no_env).is_ok());

    let path = f.path("bin").display().to_string();
    let env = |var: &str| (var == "PATH").then(|| path.clone());
    let args = ServeArgs {
        sandbox_hide: vec![f.path("bin/agent")],
        ..f.args()
    };
    let err = load_with_env(args, &env).unwrap_err().to_string();
    assert!(
        err.starts_with("--sandbox-hide / sandbox_hide names "),
        "{err}"
    );
    assert!(err.contains("where agents run programs from"), "{err}");
}

#[test]
fn a_linked_secret_file_is_hidden_where_the_link_lies_too() {
    // Kubernetes secret volumes: name -> ..data/name, ..data -> ..TIMESTAMP;
    // an update makes a new ..TIMESTAMP and swaps ..data.
    let f = Fixture::new();
    for dir in ["secrets", "keys"] {
        fs::create_dir_all(f.path(&format!("{dir}/..2024_a"))).unwrap();
        std::os::unix::fs::symlink("..2024_a", f.path(&format!("{dir}/..data"))).unwrap();
    }
    fs::write(f.path("secrets/..2024_a/tokens"), format!("{TOKEN}\n")).unwrap();
    std::os::unix::fs::symlink("..data/tokens", f.path("secrets/tokens")).unwrap();
    fs::write(f.path("keys/..2024_a/provider.key"), "k").unwrap();
    std::os::unix::fs::symlink("..data/provider.key", f.path("keys/provider.key")).unwrap();
    let args = ServeArgs {
        token_file: Some(f.path("secrets/tokens")),
        sandbox_hide: vec![f.path("keys/provider.key")],
        ..f.args()
    };
    let c = load_with_env(args, &no_env).unwrap().confinement;
    let canonical = |rel: &str| f.path(rel).canonicalize().unwrap();
    for dir in ["secrets", "secrets/..2024_a", "keys", "keys/..2024_a"] {
        assert!(c.hide.contains(&canonical(dir)), "{dir}: {:?}", c.hide);
    }
}

#[test]
fn the_state_directory_may_not_overlap_the_projects_root() {
    let f = Fixture::new();
    let args = ServeArgs {
        state_dir: Some(f.path("projects/corral-state")),
        ..f.args()
    };
    let err = load_with_env(args, &no_env).unwrap_err();
    assert!(
        matches!(err, ConfigError::Overlap(Overlap::StateInProjects { .. })),
        "{err}"
    );
    let text = err.to_string();
    let root = f.path("projects").canonicalize().unwrap();
    assert!(
        text.contains(&root.join("corral-state").display().to_string()),
        "{text}"
    );
    assert!(!f.path("projects/corral-state").exists(), "nothing created");
    let args = ServeArgs {
        state_dir: Some(f.path("")),
        ..f.args()
    };
    let err = load_with_env(args, &no_env).unwrap_err();
    assert!(
        matches!(err, ConfigError::Overlap(Overlap::ProjectsInState { .. })),
        "{err}"
    );
}

#[test]
fn a_linked_sessions_directory_is_refused() {
    let f = Fixture::new();
    fs::create_dir_all(f.path("state")).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), f.path("state/sessions")).unwrap();
    let err = load_with_env(f.args(), &no_env).unwrap_err().to_string();
    assert!(err.contains("symbolic link"), "{err}");
}

#[test]
fn confinement_errors_name_the_setting() {
    let f = Fixture::new();
    let args = ServeArgs {
        sandbox: Some(OnOff::Off),
        tool_network: Some(super::ToolNetwork::Off),
        ..f.args()
    };
    let err = load_with_env(args, &no_env).unwrap_err().to_string();
    assert!(err.contains("--tool-network"), "{err}");
    let args = ServeArgs {
        child_memory_max: Some(1024),
        ..f.args()
    };
    let err = load_with_env(args, &no_env).unwrap_err().to_string();
    assert!(err.contains("--child-memory-max"), "{err}");
    assert!(
        !f.path("state").exists(),
        "a refused config creates nothing"
    );
    let file = f.config_file("sandbox = \"sometimes\"\n");
    let args = ServeArgs {
        config: Some(file),
        ..f.args()
    };
    let err = load_with_env(args, &no_env).unwrap_err().to_string();
    assert!(err.contains("expected \"on\" or \"off\""), "{err}");
}

#[test]
fn child_command_from_the_flag_or_the_file_needs_acp() {
    let f = Fixture::new();
    let agent = f.path("bin/agent").display().to_string();
    let file = f.config_file_apart(&format!(
        "dialect = \"acp\"\nchild_command = \"{agent} --from file\"\n"
    ));
    let args = ServeArgs {
        config: Some(file.clone()),
        ..f.args()
    };
    let s = load_with_env(args, &no_env).unwrap().supervisor;
    assert_eq!(
        s.child_command,
        Some(vec![agent.clone(), "--from".into(), "file".into()])
    );
    assert_eq!(s.child_bin, f.path("bin/agent").canonicalize().unwrap());

    // The flag wins; a bare name is found on PATH.
    let path = f.path("bin").display().to_string();
    let env = |var: &str| (var == "PATH").then(|| path.clone());
    let args = ServeArgs {
        config: Some(file),
        child_command: Some("agent --name 'two words'".into()),
        ..f.args()
    };
    let s = load_with_env(args, &env).unwrap().supervisor;
    assert_eq!(
        s.child_command,
        Some(vec![agent, "--name".into(), "two words".into()])
    );

    let s = load_with_env(f.args(), &no_env).unwrap().supervisor;
    assert_eq!(s.child_command, None, "corral-agent by default");
}

#[test]
fn child_command_refusals_name_the_setting() {
    let f = Fixture::new();
    let agent = f.path("bin/agent").display().to_string();
    let acp = |command: &str| ServeArgs {
        dialect: Dialect::named("acp"),
        child_command: Some(command.into()),
        ..f.args()
    };
    for (args, needle) in [
        (acp(""), "the command is empty"),
        (acp("'unclosed"), "a quote is not closed"),
        (
            ServeArgs {
                dialect: None,
                ..acp(&agent)
            },
            "needs --dialect acp",
        ),
        (
            ServeArgs {
                tool_network: Some(super::ToolNetwork::Off),
                ..acp(&agent)
            },
            "use --tool-network proxy",
        ),
        (
            ServeArgs {
                child_args: vec!["--model".into()],
                ..acp(&agent)
            },
            "CHILD_ARGS",
        ),
    ] {
        let err = load_with_env(args, &no_env).unwrap_err().to_string();
        assert!(err.contains("--child-command / child_command"), "{err}");
        assert!(err.contains(needle), "{err}");
    }
    assert!(
        !f.path("state").exists(),
        "a refused config creates nothing"
    );
}

#[test]
fn throttle_and_proxy_listener_settings() {
    let f = Fixture::new();
    let config = load_with_env(f.args(), &no_env).unwrap();
    assert_eq!(config.throttle, crate::throttle::ThrottlePolicy::default());
    assert_eq!(config.proxy_listen, None);

    let file = f.config_file(
        "proxy_listen = \"127.0.0.1:7001\"\ntrusted_proxies = [\"203.0.113.0/24\", \"198.51.100.7\"]\nauth_failure_rate = 2\nauth_failure_burst = 4\nmax_auth_sources = 50\n",
    );
    let args = ServeArgs {
        config: Some(file.clone()),
        ..f.args()
    };
    let config = load_with_env(args, &no_env).unwrap();
    assert_eq!(config.proxy_listen, Some("127.0.0.1:7001".parse().unwrap()));
    assert_eq!(
        config.trusted_proxies,
        [
            "203.0.113.0/24".parse::<ipnet::IpNet>().unwrap(),
            "198.51.100.7/32".parse().unwrap()
        ]
    );
    assert_eq!(config.throttle.rate, 2.0);
    assert_eq!(config.throttle.burst, 4);
    assert_eq!(config.throttle.max_sources, 50);
    let args = ServeArgs {
        config: Some(file),
        auth_failure_rate: Some(0.5),
        ..f.args()
    };
    assert_eq!(load_with_env(args, &no_env).unwrap().throttle.rate, 0.5);

    for (args, flag) in [
        (
            ServeArgs {
                auth_failure_rate: Some(0.0),
                ..f.args()
            },
            "--auth-failure-rate",
        ),
        (
            ServeArgs {
                auth_failure_rate: Some(f64::NAN),
                ..f.args()
            },
            "--auth-failure-rate",
        ),
        (
            ServeArgs {
                auth_failure_burst: Some(0),
                ..f.args()
            },
            "--auth-failure-burst",
        ),
        (
            ServeArgs {
                max_auth_sources: Some(0),
                ..f.args()
            },
            "--max-auth-sources",
        ),
        (
            ServeArgs {
                proxy_listen: Some("127.0.0.1:7000".parse().unwrap()),
                trusted_proxy: vec!["192.0.2.1/32".parse().unwrap()],
                ..f.args()
            },
            "--proxy-listen",
        ),
        (
            ServeArgs {
                proxy_listen: Some("127.0.0.1:7001".parse().unwrap()),
                ..f.args()
            },
            "--trusted-proxy",
        ),
        (
            ServeArgs {
                trusted_proxy: vec!["192.0.2.1/32".parse().unwrap()],
                ..f.args()
            },
            "--proxy-listen",
        ),
        (
            ServeArgs {
                proxy_listen: Some("127.0.0.1:7001".parse().unwrap()),
                trusted_proxy: vec!["127.0.0.0/8".parse().unwrap()],
                tool_network: Some(super::ToolNetwork::On),
                ..f.args()
            },
            "--tool-network off",
        ),
    ] {
        let err = load_with_env(args, &no_env).unwrap_err();
        assert!(matches!(err, ConfigError::Invalid { .. }), "{err}");
        assert!(err.to_string().contains(flag), "{err}");
    }
}

#[test]
fn a_trusted_proxy_on_this_host_needs_tools_off_the_network() {
    let f = Fixture::new();
    let args = ServeArgs {
        proxy_listen: Some("127.0.0.1:7001".parse().unwrap()),
        trusted_proxy: vec!["127.0.0.1/32".parse().unwrap()],
        tool_network: Some(super::ToolNetwork::Off),
        ..f.args()
    };
    let config = load_with_env(args, &no_env).unwrap();
    assert_eq!(config.trusted_proxies.len(), 1);
}

#[test]
fn the_model_broker_reads_the_keys_and_needs_the_sandbox_and_tools_apart() {
    use super::BrokerMode;
    let f = Fixture::new();
    let keys = |name: &str| match name {
        "ANTHROPIC_API_KEY" => Some("sk-ant-config-test".to_string()),
        "ANTHROPIC_BASE_URL" => Some("http://127.0.0.1:9/".to_string()),
        _ => None,
    };
    // auto: on with a key, the sandbox and tools apart ...
    let config = load_with_env(f.args(), &keys).unwrap();
    assert!(config.model_broker.is_some());
    assert_eq!(config.model_broker_off, None);
    // ... off without a key, with an endpoint in CHILD_ARGS, or when off.
    let config = load_with_env(f.args(), &no_env).unwrap();
    assert!(config.model_broker.is_none());
    assert_eq!(config.confinement.model_socket, None);
    assert!(config.model_broker_off.unwrap().contains("no provider key"));
    let mut args = f.args();
    args.child_args = vec!["--base-url=http://127.0.0.1:9".into()];
    let config = load_with_env(args, &keys).unwrap();
    assert!(config.model_broker.is_none());
    assert!(config.model_broker_off.unwrap().contains("--base-url"));
    let mut args = f.args();
    args.model_broker = Some(BrokerMode::Off);
    assert!(load_with_env(args, &keys).unwrap().model_broker.is_none());

    let mut args = f.args();
    args.model_broker = Some(BrokerMode::On);
    let config = load_with_env(args.clone(), &keys).unwrap();
    let upstreams = config.model_broker.as_ref().unwrap();
    let anthropic = upstreams.get(crate::broker::Provider::Anthropic);
    assert_eq!(anthropic.base, "http://127.0.0.1:9");
    assert!(!format!("{config:?}").contains("sk-ant-config-test"));
    // A name of this gateway's own, apart from others on the state dir.
    let socket = config.confinement.model_socket.clone().unwrap();
    assert_eq!(
        socket.parent(),
        Some(config.state_dir.join("egress").as_path())
    );
    let name = socket.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("broker-") && name.ends_with(".sock"),
        "{name}"
    );
    let again = load_with_env(args.clone(), &keys).unwrap();
    assert_ne!(again.confinement.model_socket, Some(socket.clone()));
    let probe = config.confinement.probe_args();
    assert_eq!(
        &probe[probe.len() - 2..],
        ["--model-socket".into(), socket.into_os_string()]
    );
    args.tool_network = Some(ToolNetwork::Off);
    assert!(load_with_env(args, &keys).is_ok());

    let refused = |edit: &dyn Fn(&mut ServeArgs), env: &dyn Fn(&str) -> Option<String>| {
        let mut args = f.args();
        args.model_broker = Some(BrokerMode::On);
        edit(&mut args);
        load_with_env(args, env).unwrap_err().to_string()
    };
    let err = refused(&|a| a.sandbox = Some(OnOff::Off), &keys);
    assert!(
        err.contains("--model-broker") && err.contains("sandbox"),
        "{err}"
    );
    let err = refused(&|a| a.tool_network = Some(ToolNetwork::On), &keys);
    assert!(err.contains("--tool-network on"), "{err}");
    let err = refused(&|_| {}, &no_env);
    assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
}

#[test]
fn mcp_servers_are_read_checked_and_hidden_from_agents() {
    let f = Fixture::new();
    fs::create_dir(f.path("mcp")).unwrap();
    let servers = f.path("mcp/servers.json");
    fs::write(
        &servers,
        r#"{"mcpServers": {"docs": {"command": "docs-mcp", "env": {"TOKEN": "t0k-s3cret"}},
            "tracker": {"type": "http", "url": "https://mcp.example.com/mcp", "default": false}}}"#,
    )
    .unwrap();
    let file = f.config_file_apart("mcp_servers = \"../mcp/servers.json\"\nclient_mcp = \"off\"\n");
    let args = ServeArgs {
        config: Some(file),
        ..f.args()
    };
    let config = load_with_env(args, &no_env).unwrap();
    let names: Vec<_> = config.mcp.servers.iter().map(|s| s.name.clone()).collect();
    assert_eq!(names, ["docs", "tracker"]);
    assert_eq!(config.mcp.client, crate::mcp::ClientMcp::Off);
    let mcp_dir = f.path("mcp").canonicalize().unwrap();
    assert!(
        config.confinement.hide.contains(&mcp_dir),
        "the servers' directory is hidden: {:?}",
        config.confinement.hide
    );
    // The default is select; a broken file is refused naming the setting
    // and never showing a secret.
    fs::write(
        &servers,
        r#"{"mcpServers": {"docs": {"command": "docs-mcp", "env": {"TOKEN": ["t0k-s3cret"]}}}}"#,
    )
    .unwrap();
    let args = ServeArgs {
        mcp_servers: Some(servers.clone()),
        ..f.args()
    };
    let err = load_with_env(args, &no_env).unwrap_err().to_string();
    assert!(
        err.contains("--mcp-servers") && err.contains("docs"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
    fs::write(
        &servers,
        r#"{"mcpServers": {"docs": {"command": "docs-mcp"}}}"#,
    )
    .unwrap();
    let args = ServeArgs {
        mcp_servers: Some(servers.clone()),
        child_args: vec!["--mcp-config".into(), "/x.json".into()],
        ..f.args()
    };
    let err = load_with_env(args, &no_env).unwrap_err().to_string();
    assert!(err.contains("--mcp-config"), "{err}");
    let args = ServeArgs {
        mcp_servers: Some(servers),
        ..f.args()
    };
    assert_eq!(
        load_with_env(args, &no_env).unwrap().mcp.client,
        crate::mcp::ClientMcp::Select
    );
}
