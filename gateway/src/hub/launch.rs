//! How a project's real child starts: its command line (the dialect's
//! flags, the sandbox flags, the user's extra arguments), its environment
//! with a fresh token, and its confinement (the project directory checked
//! again and opened, the journal file owned by the child user, the
//! account and the limits); then the spawn, off the event loop, and the
//! greeting. Also how a failed start is classified. Everything under the
//! state directory (homes, journals, kept session ids) is made through
//! [`statefs`], which follows no symlink.
//!
//! The filesystem steps (the directory check and open, journal, home, the
//! kept session id read and written) run off the event loop, in
//! [`offload`]'s file lane, while the start holds its spawner start slot:
//! a start stuck on a slow filesystem holds up that start (and its slot)
//! only, and a thread of the lane's bounded few, even once abandoned. The
//! directory's descriptor opened there is what the child enters; no path
//! is looked up again.

use std::ffi::OsString;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::sys::signal::Signal;

use super::child::{BoxFuture, Launched, Launcher, StartError, StartFailure};
use super::HubSettings;
use crate::broker;
use crate::dialect::ChildGreeting;
use crate::offload::{self, Lane, WorkLost};
use crate::process::{handshake, spawner};
use crate::process::{ChildProcess, Confine, Credentials, SpawnError, SpawnSpec, Start, StderrLog};
use crate::projects;
use crate::statefs::{self, StateFsError};

/// The child's exit code when its session journal is held by another
/// agent process (`corral-agent` exits with `EX_TEMPFAIL` then).
pub(super) const SESSION_IN_USE_EXIT: i32 = 75;
/// The child's exit code when its sandbox cannot be set up on this host
/// (`EX_CONFIG`); its last stderr line says why.
pub(super) const SANDBOX_UNAVAILABLE_EXIT: i32 = 78;

/// The real [`Launcher`]: `corral-agent` (or the configured child) for
/// one project, spawned off the event loop and greeted.
pub(super) struct AgentLauncher {
    pub project: String,
    pub dir: PathBuf,
    pub settings: Arc<HubSettings>,
}

impl Launcher for AgentLauncher {
    fn launch(&mut self) -> BoxFuture<Result<Launched, StartError>> {
        let project = self.project.clone();
        let dir = self.dir.clone();
        let settings = self.settings.clone();
        Box::pin(async move { spawn_and_greet(&project, &dir, &settings).await })
    }
}

/// Runs `work` with the project's name and settings off the event loop.
async fn off_loop<T, F>(project: &str, settings: &Arc<HubSettings>, work: F) -> Result<T, WorkLost>
where
    T: Send + 'static,
    F: FnOnce(&str, &HubSettings) -> T + Send + 'static,
{
    let (project, settings) = (project.to_string(), settings.clone());
    offload::run(Lane::Files, move || work(&project, &settings)).await
}

/// A start whose filesystem step did not finish: not the agent's fault.
fn lost(lost: WorkLost) -> StartError {
    StartError {
        message: lost.to_string(),
        kind: StartFailure::Unavailable,
    }
}

/// Spawns the child and waits for its hello (or `ready`). A spare agent
/// that refused its assignment (what it prepared ahead does not fit the
/// project) is not the project's failure: spares rest for a while, and a
/// new agent is started for the project at once.
async fn spawn_and_greet(
    project: &str,
    dir: &Path,
    settings: &Arc<HubSettings>,
) -> Result<Launched, StartError> {
    match spawn_and_greet_once(project, dir, settings).await {
        Err(NotGreeted {
            error,
            spare_ended: true,
        }) => {
            crate::process::spares::assignment_failed(&error.message);
            tracing::warn!(project, error = %error.message, "the spare agent assigned this project refused it: starting a new one");
            spawn_and_greet_once(project, dir, settings)
                .await
                .map_err(|e| e.error)
        }
        other => other.map_err(|e| e.error),
    }
}

/// Why one start gave no greeted child.
struct NotGreeted {
    error: StartError,
    /// The child was a spare agent, and it refused its assignment.
    spare_ended: bool,
}

impl From<StartError> for NotGreeted {
    fn from(error: StartError) -> Self {
        NotGreeted {
            error,
            spare_ended: false,
        }
    }
}

/// One start of the child.
async fn spawn_and_greet_once(
    project: &str,
    dir: &Path,
    settings: &Arc<HubSettings>,
) -> Result<Launched, NotGreeted> {
    let token = handshake::random_token();
    // Held until the greeting: a burst of starts queues here instead of
    // crowding the CPU, and each child's ready timeout starts once it is
    // its turn.
    let _slot = spawner::start_slot().await;
    // A ready spare agent is assigned the project in the same blocking
    // task that checks and opens its directory.
    let (start, started) = {
        let (dir, token) = (dir.to_path_buf(), token.clone());
        off_loop(project, settings, move |project, settings| {
            let spec = spawn_spec(project, &dir, settings, &token)?;
            // The spawn begins here, as `child_spawn_seconds` counts it.
            let began = std::time::Instant::now();
            Ok::<_, StartError>((Start::prepare(spec), began))
        })
        .await
        .map_err(lost)??
    };
    let (process, mut output) = ChildProcess::spawn(start).await.map_err(|e| match e {
        SpawnError::NoDescriptors { .. } => StartError {
            message: e.to_string(),
            kind: StartFailure::Unavailable,
        },
        _ => StartError::crash(e.to_string()),
    })?;
    settings.metrics.child_spawns.inc();
    let timeout = settings.ready_timeout;
    let dialect = settings.dialect.rules();
    let greeted = match dialect.child_greeting() {
        ChildGreeting::TokenHello => handshake::hello(&process, &mut output, &token, timeout).await,
        ChildGreeting::Ready => {
            handshake::ready(&process, &mut output, settings.dialect, timeout).await
        }
        ChildGreeting::Requests => {
            let kept = off_loop(project, settings, |project, settings| {
                kept_session(&settings.sessions_dir, project)
            })
            .await
            .unwrap_or(None);
            let cwd = dir.to_string_lossy();
            match dialect.greeter(&cwd, kept.clone()) {
                Some(mut greeter) => {
                    let hello =
                        handshake::requests(&process, &mut output, greeter.as_mut(), timeout).await;
                    if let Ok(hello) = &hello {
                        let session = dialect.one_session().and_then(|s| s.kept(hello));
                        if session.is_some() && session != kept {
                            let kept = off_loop(project, settings, move |project, settings| {
                                keep_session(&settings.sessions_dir, project, session.as_deref());
                            });
                            if let Err(e) = kept.await {
                                tracing::warn!(project, "cannot keep the agent's session id: {e}");
                            }
                        }
                    }
                    hello
                }
                None => Err(handshake::HandshakeError::Malformed(
                    "the dialect has no greeting".into(),
                )),
            }
        }
    };
    match greeted {
        Ok(hello) => {
            settings
                .metrics
                .child_spawn_seconds
                .observe(started.elapsed().as_secs_f64());
            Ok(Launched {
                control: Arc::new(process),
                output,
                hello,
            })
        }
        Err(error) => {
            process.signal_group(Signal::SIGKILL);
            let exit = process.wait().await;
            let line = process.last_stderr_line();
            let message = match (exit.code, line) {
                (Some(SANDBOX_UNAVAILABLE_EXIT), Some(line)) => {
                    format!("the agent sandbox is unavailable: {line}")
                }
                (_, Some(line)) => format!("{error}: {line}"),
                (_, None) => error.to_string(),
            };
            let kind = match exit.code {
                Some(SESSION_IN_USE_EXIT) => StartFailure::Elsewhere,
                _ => StartFailure::Crash,
            };
            Err(NotGreeted {
                error: StartError { message, kind },
                spare_ended: process.was_spare()
                    && exit.code == Some(corral_protocol::template::SPARE_REFUSED_EXIT),
            })
        }
    }
}

/// The name of the file (in the sessions directory) where the session a
/// project's child serves is kept between children (ACP: the agent's
/// session id, loaded again after a restart).
fn session_file(project: &str) -> String {
    format!("{project}.session-id")
}

/// Longest session id kept.
const MAX_SESSION_ID: usize = 512;

/// The directory `dir` (`STATE/NAME`), opened from the state directory
/// without following a link, made if missing.
fn state_subdir(dir: &Path, mode: u32) -> Result<statefs::Dir, StateFsError> {
    let (Some(state), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str())) else {
        return statefs::Dir::open_root(dir);
    };
    statefs::Dir::open_root(state)?.subdir(name, mode)
}

/// The session kept for `project`, if any (a missing, unreadable, linked
/// or absurd file is none: the child then starts a new session).
pub(super) fn kept_session(sessions_dir: &Path, project: &str) -> Option<String> {
    let mut file = state_subdir(sessions_dir, 0o755)
        .and_then(|dir| dir.read_file(&session_file(project)))
        .ok()?;
    let mut text = String::new();
    file.by_ref()
        .take(MAX_SESSION_ID as u64 + 2)
        .read_to_string(&mut text)
        .ok()?;
    let id = text.trim();
    (!id.is_empty() && id.len() <= MAX_SESSION_ID && !id.contains(char::is_control))
        .then(|| id.to_string())
}

fn keep_session(sessions_dir: &Path, project: &str, session: Option<&str>) {
    let Some(session) = session.filter(|s| s.len() <= MAX_SESSION_ID) else {
        return;
    };
    let written = state_subdir(sessions_dir, 0o755)
        .and_then(|dir| dir.replace_file(&session_file(project), &format!("{session}\n")));
    if let Err(e) = written {
        tracing::warn!(project, "cannot keep the agent's session id: {e}");
    }
}

/// The spawn of `project`'s child with `token`, after checking its
/// directory again.
fn spawn_spec(
    project: &str,
    expected_dir: &Path,
    settings: &HubSettings,
    token: &str,
) -> Result<SpawnSpec, StartError> {
    let refused = |e: projects::ProjectError| StartError {
        message: e.to_string(),
        kind: StartFailure::Refused,
    };
    let (dir, dir_fd) = projects::open_dir(&settings.projects_root, project).map_err(refused)?;
    if dir != expected_dir {
        return Err(refused(projects::ProjectError::OutsideRoot {
            name: project.to_string(),
        }));
    }
    let session = settings.sessions_dir.join(format!("{project}.jsonl"));
    // Made here, on the file lane, for a child user to open after it
    // dropped to that user, and for corral-agent anyway: creating a file is
    // the slowest step of its start (a file made ahead is renamed into
    // place instead), and cheaper outside its namespaces.
    if settings.credentials.is_some() || settings.child_command.is_none() {
        prepare_journal(
            &settings.sessions_dir,
            project,
            settings.credentials.as_ref(),
        )
        .map_err(|e| {
            state_refused(
                format!("cannot prepare the session journal for the child: {e}"),
                &e,
            )
        })?;
    }
    let (program, args, mut env) = match &settings.child_command {
        Some(command) => third_party(project, &dir, settings, command)?,
        None => {
            let mut args: Vec<OsString> = vec!["rpc".into()];
            args.extend(settings.dialect.rules().child_args());
            args.extend(settings.sandbox_args.iter().cloned());
            args.extend([
                "--cwd".into(),
                dir.clone().into_os_string(),
                "--session".into(),
                session.into_os_string(),
            ]);
            if let Some(file) = mcp_config(project, settings)? {
                args.extend(["--mcp-config".into(), file.into_os_string()]);
            }
            args.extend(settings.child_args.iter().cloned());
            let mut env = settings.child_env.clone();
            if settings.dialect.rules().child_token() {
                env.push((crate::process::env::TOKEN_VAR.into(), token.into()));
            }
            (settings.child_bin.clone(), args, env)
        }
    };
    if let Some(egress) = &settings.egress {
        // A fresh secret per spawn: the previous child's stops working.
        let secret = egress.register(project).map_err(|e| {
            StartError::crash(format!("cannot make the child's egress secret: {e}"))
        })?;
        env.push((corral_protocol::egress::SECRET_ENV.into(), secret.into()));
    }
    let env = match &settings.model_broker {
        Some(keys) => {
            let secret = keys
                .register(project)
                .map_err(|e| StartError::crash(e.to_string()))?;
            let seat = match settings.child_command {
                Some(_) => broker::Seat::ThirdParty,
                None => broker::Seat::Agent,
            };
            broker::child_env(env, &secret, seat)
        }
        None => env,
    };
    Ok(SpawnSpec {
        program,
        args,
        cwd: dir,
        env,
        project: project.to_string(),
        max_line: settings.max_line,
        confine: Confine {
            cwd_dir: Some(Arc::new(dir_fd)),
            credentials: settings.credentials.clone(),
            limits: settings.limits.clone(),
            sandboxed: !settings.sandbox_args.is_empty(),
        },
        stderr_log: Some(StderrLog::new(&settings.state_dir, project)),
        // Only corral-agent has a template; a third-party agent is executed.
        template: settings.child_template && settings.child_command.is_none(),
    })
}

/// Writes the operator's MCP servers for `project`'s `corral-agent`
/// child: `MCP_DIR/PROJECT.json`, mode 0600, owned by the child user when
/// there is one, following no link; `None` when the operator defined no
/// servers. The agent reads it before its sandbox hides the state
/// directory; the secrets in it are never on a command line.
fn mcp_config(project: &str, settings: &HubSettings) -> Result<Option<PathBuf>, StartError> {
    if settings.mcp.servers.is_empty() {
        return Ok(None);
    }
    let name = format!("{project}.json");
    let written = state_subdir(&settings.mcp_dir, 0o711).and_then(|dir| {
        dir.replace_file(&name, &settings.mcp.servers.child_file())?;
        if let Some(user) = &settings.credentials {
            let file = dir.read_file(&name)?;
            std::os::unix::fs::fchown(&file, Some(user.uid), Some(user.gid))
                .map_err(|e| statefs::io_error(dir.path().join(&name), &e))?;
        }
        Ok(dir.path().join(&name))
    });
    match written {
        Ok(path) => Ok(Some(path)),
        Err(e) => Err(state_refused(
            format!("cannot write the agent's MCP servers: {e}"),
            &e,
        )),
    }
}

/// A program, its arguments and its environment.
type Command = (PathBuf, Vec<OsString>, Vec<(OsString, OsString)>);

/// The program, arguments and environment of a third-party agent
/// (`command`): in `dir`, with `HOMES/PROJECT` as its home, under
/// `corral-agent sandbox-exec` when the sandbox is on.
fn third_party(
    project: &str,
    dir: &Path,
    settings: &HubSettings,
    command: &[OsString],
) -> Result<Command, StartError> {
    let home = settings.homes_dir.join(project);
    prepare_home(&settings.homes_dir, project, settings.credentials.as_ref())
        .map_err(|e| state_refused(format!("cannot prepare the agent's home: {e}"), &e))?;
    let mut env = settings.child_env.clone();
    env.retain(|(name, _)| name != "HOME" && name != "TMPDIR");
    env.push(("HOME".into(), home.clone().into_os_string()));
    let Some((program, rest)) = command.split_first() else {
        return Err(StartError::crash("the child command is empty"));
    };
    if settings.sandbox_args.is_empty() {
        return Ok((PathBuf::from(program), rest.to_vec(), env));
    }
    let mut args: Vec<OsString> = vec!["sandbox-exec".into()];
    args.extend(settings.sandbox_args.iter().cloned());
    args.extend([
        "--cwd".into(),
        dir.as_os_str().to_owned(),
        "--home".into(),
        home.into_os_string(),
        "--".into(),
    ]);
    args.extend(command.iter().cloned());
    Ok((settings.child_bin.clone(), args, env))
}

/// A start that failed on a path under the state directory: refused
/// (clients told, no retries) when the path is a link, else a crash.
fn state_refused(message: String, error: &StateFsError) -> StartError {
    StartError {
        message,
        kind: match error.is_link() {
            true => StartFailure::Refused,
            false => StartFailure::Crash,
        },
    }
}

/// Creates a third-party agent's home `HOMES/PROJECT` (mode 0700, owned by
/// the child user when there is one), following no link.
fn prepare_home(
    homes_dir: &Path,
    project: &str,
    user: Option<&Credentials>,
) -> Result<(), StateFsError> {
    let home = state_subdir(homes_dir, 0o755)?.subdir(project, 0o700)?;
    home.set_owner_and_mode(user.map(|u| (u.uid, u.gid)), 0o700)
}

/// Creates the journal `SESSIONS/PROJECT.jsonl` if missing (from a file
/// made ahead, see [`statefs::ahead`]), with mode 0600 and owned by the
/// child user when there is one (so the child can open it after dropping
/// to that user); follows no link.
fn prepare_journal(
    sessions_dir: &Path,
    project: &str,
    user: Option<&Credentials>,
) -> Result<(), StateFsError> {
    let dir = state_subdir(sessions_dir, 0o755)?;
    let name = format!("{project}.jsonl");
    let file = dir.append_file_made_ahead(&name, 0o600)?;
    let failed = |e: std::io::Error| {
        let path = dir.path().join(&name);
        statefs::io_error(path, &e)
    };
    if let Some(user) = user {
        std::os::unix::fs::fchown(&file, Some(user.uid), Some(user.gid)).map_err(failed)?;
    }
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(failed)
}
