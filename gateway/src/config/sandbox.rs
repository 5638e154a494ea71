//! How children are confined: the agent sandbox (`--sandbox`,
//! `--sandbox-hide`, `--tool-network`), the user they run as
//! (`--child-user`) and their resource limits (`--child-memory-max`,
//! `--child-pids-max`). Validated here; the supervisor applies them.

use std::path::{Path, PathBuf};

pub(super) use super::values::{OnOff, ToolNetwork};
use super::ConfigError;
use nix::unistd::{Gid, Uid, User};

/// Smallest accepted `--child-memory-max`: an idle agent needs about 10 MiB.
pub const MIN_CHILD_MEMORY: u64 = 16 << 20;
/// Smallest accepted `--child-pids-max`: the sandboxed agent is three
/// processes plus the threads of its runtime.
pub const MIN_CHILD_PIDS: u64 = 16;

/// The account children run as (`--child-user`), looked up once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups of the account (its primary group included).
    pub groups: Vec<u32>,
    pub home: PathBuf,
}

/// The confinement of every child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    /// The agent confines itself (`corral-agent --sandbox`).
    pub sandbox: bool,
    /// Paths hidden from every child: the state directory, the projects
    /// root, the directory of each secret file (config, token files), then
    /// `--sandbox-hide` (a file replaced by its directory).
    /// See `config::hiding`.
    pub hide: Vec<PathBuf>,
    /// How tool commands reach the network (`--tool-network`).
    pub tool_network: ToolNetwork,
    /// The egress proxy's socket children connect through
    /// (`STATE/egress/proxy.sock`), with `--tool-network proxy`; set once
    /// the state directory exists.
    pub egress_socket: Option<PathBuf>,
    /// The model-key broker's socket (`STATE/egress/broker.sock`), with
    /// `--model-broker on`: agents reach their model only through it, and
    /// run without the host's network.
    pub model_socket: Option<PathBuf>,
    /// Children run as this account instead of the gateway's.
    pub child_user: Option<ChildUser>,
    /// Memory of one child and everything it runs, in bytes.
    pub memory_max: Option<u64>,
    /// Processes and threads of one child and everything it runs.
    pub pids_max: Option<u64>,
}

impl Confinement {
    /// Puts the gateway's own paths first in the hidden list.
    pub(super) fn hiding_first(mut self, paths: &[PathBuf]) -> Result<Self, ConfigError> {
        let mut hide = Vec::with_capacity(paths.len() + self.hide.len());
        for path in paths
            .iter()
            .map(|p| absolute(p))
            .chain(self.hide.into_iter().map(Ok))
        {
            let path = path?;
            if !hide.contains(&path) {
                hide.push(path);
            }
        }
        self.hide = hide;
        Ok(self)
    }

    /// Whether tool commands reach the host's network unfiltered.
    pub fn tools_on_host_network(&self) -> bool {
        !self.sandbox || self.tool_network == ToolNetwork::On
    }

    /// Whether children's tools go out through the egress proxy.
    pub fn egress_proxy(&self) -> bool {
        self.sandbox && self.tool_network == ToolNetwork::Proxy
    }

    /// Whether any resource limit is configured.
    pub fn has_limits(&self) -> bool {
        self.memory_max.is_some() || self.pids_max.is_some()
    }

    /// The agent flags that turn its sandbox on with these settings
    /// (empty with the sandbox off).
    pub fn agent_args(&self) -> Vec<std::ffi::OsString> {
        if !self.sandbox {
            return Vec::new();
        }
        let mut args = vec!["--sandbox".into()];
        args.extend(self.probe_args());
        args
    }

    /// The flags of `corral-agent sandbox-probe` for these settings: the
    /// hidden paths, the tool network and the model socket.
    pub fn probe_args(&self) -> Vec<std::ffi::OsString> {
        let mut args = Vec::new();
        for path in &self.hide {
            args.push("--sandbox-hide".into());
            args.push(path.clone().into_os_string());
        }
        match self.tool_network {
            ToolNetwork::On => {}
            ToolNetwork::Off => args.extend(["--tool-network".into(), "off".into()]),
            ToolNetwork::Proxy => {
                args.extend(["--tool-network".into(), "proxy".into()]);
                if let Some(socket) = &self.egress_socket {
                    args.push("--egress-socket".into());
                    args.push(socket.clone().into_os_string());
                }
            }
        }
        if let Some(socket) = &self.model_socket {
            args.push("--model-socket".into());
            args.push(socket.clone().into_os_string());
        }
        args
    }
}

/// The raw settings, already merged (command line over file, defaults
/// applied).
pub(super) struct Raw {
    pub sandbox: OnOff,
    pub extra_hide: Vec<PathBuf>,
    /// As set by a layer; `None`: the default (proxy, or on without the
    /// sandbox).
    pub tool_network: Option<ToolNetwork>,
    pub child_user: Option<String>,
    pub memory_max: Option<usize>,
    pub pids_max: Option<u64>,
}

/// Validates the settings; the gateway's own paths are added to the hidden
/// list later ([`Confinement::hiding_first`]), once they exist.
pub(super) fn resolve(raw: Raw) -> Result<Confinement, ConfigError> {
    let sandbox = raw.sandbox.is_on();
    let tool_network = match (sandbox, raw.tool_network) {
        (true, chosen) => chosen.unwrap_or(ToolNetwork::Proxy),
        (false, None | Some(ToolNetwork::On)) => ToolNetwork::On,
        (false, Some(chosen)) => {
            return Err(ConfigError::Invalid {
                setting: format!("--tool-network {} / tool_network", chosen.name()),
                reason: "taking the host's network from tools needs the sandbox; drop --sandbox off, or use --tool-network on".into(),
            })
        }
    };
    let mut hide: Vec<PathBuf> = Vec::new();
    for path in &raw.extra_hide {
        // A link to a file is hidden where it points and where it lies
        // (its directory, later): a link swapped on the host stays hidden.
        let link = match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() && !path.is_dir() => Some(
                super::hiding::named(path).map_err(|e| ConfigError::Invalid {
                    setting: "--sandbox-hide / sandbox_hide".into(),
                    reason: format!("{}: {e}", path.display()),
                })?,
            ),
            _ => None,
        };
        for path in std::iter::once(absolute(path)?).chain(link) {
            if !hide.contains(&path) {
                hide.push(path);
            }
        }
    }
    let child_user = raw.child_user.as_deref().map(lookup_user).transpose()?;
    let memory_max = raw
        .memory_max
        .map(|bytes| {
            let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
            minimum(
                "--child-memory-max / child_memory_max",
                bytes,
                MIN_CHILD_MEMORY,
            )
        })
        .transpose()?;
    let pids_max = raw
        .pids_max
        .map(|n| minimum("--child-pids-max / child_pids_max", n, MIN_CHILD_PIDS))
        .transpose()?;
    Ok(Confinement {
        sandbox,
        hide,
        tool_network,
        egress_socket: None,
        model_socket: None,
        child_user,
        memory_max,
        pids_max,
    })
}

fn minimum(setting: &str, value: u64, min: u64) -> Result<u64, ConfigError> {
    if value < min {
        return Err(ConfigError::Invalid {
            setting: setting.into(),
            reason: format!("{value} is less than the minimum {min}"),
        });
    }
    Ok(value)
}

/// The canonical path when it exists (a hidden symlink would hide its
/// target anyway), else the absolute one.
fn absolute(path: &Path) -> Result<PathBuf, ConfigError> {
    if let Ok(real) = path.canonicalize() {
        return Ok(real);
    }
    std::path::absolute(path).map_err(|e| ConfigError::Invalid {
        setting: "--sandbox-hide / sandbox_hide".into(),
        reason: format!("{}: {e}", path.display()),
    })
}

/// Looks up `--child-user` (a name or a numeric uid); the gateway must
/// run as root to switch to it.
fn lookup_user(name: &str) -> Result<ChildUser, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        setting: "--child-user / child_user".into(),
        reason,
    };
    let euid = Uid::effective();
    if !euid.is_root() {
        return Err(invalid(format!(
            "running children as another user needs the gateway to run as root (it runs as uid {euid})"
        )));
    }
    let found = match name.parse::<u32>() {
        Ok(uid) => User::from_uid(Uid::from_raw(uid)),
        Err(_) => User::from_name(name),
    }
    .map_err(|e| invalid(format!("cannot look up user {name:?}: {e}")))?;
    let user = found.ok_or_else(|| invalid(format!("no such user {name:?}")))?;
    let groups = std::ffi::CString::new(user.name.as_str())
        .ok()
        .and_then(|cname| nix::unistd::getgrouplist(&cname, user.gid).ok())
        .unwrap_or_else(|| vec![user.gid]);
    Ok(ChildUser {
        name: user.name,
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        groups: groups.into_iter().map(Gid::as_raw).collect(),
        home: user.dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> Raw {
        Raw {
            sandbox: OnOff::On,
            extra_hide: Vec::new(),
            tool_network: None,
            child_user: None,
            memory_max: None,
            pids_max: None,
        }
    }

    #[test]
    fn defaults_sandbox_on_tools_through_the_proxy_no_limits() {
        let mut c = resolve(raw())
            .unwrap()
            .hiding_first(&[PathBuf::from("/state")])
            .unwrap();
        assert!(c.sandbox && c.egress_proxy() && !c.tools_on_host_network() && !c.has_limits());
        assert_eq!(c.child_user, None);
        c.egress_socket = Some("/state/egress/proxy.sock".into());
        assert_eq!(
            c.agent_args(),
            [
                "--sandbox",
                "--sandbox-hide",
                "/state",
                "--tool-network",
                "proxy",
                "--egress-socket",
                "/state/egress/proxy.sock"
            ]
            .map(std::ffi::OsString::from)
        );
        let mut r = raw();
        r.tool_network = Some(ToolNetwork::On);
        let c = resolve(r).unwrap();
        assert!(c.tools_on_host_network() && !c.egress_proxy());
        assert_eq!(c.agent_args(), ["--sandbox"].map(std::ffi::OsString::from));
    }

    #[test]
    fn hides_are_absolute_and_deduplicated() {
        let mut r = raw();
        r.extra_hide = vec!["/srv/secret".into(), "/state".into(), "rel".into()];
        r.tool_network = Some(ToolNetwork::Off);
        let c = resolve(r)
            .unwrap()
            .hiding_first(&["/state".into()])
            .unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(c.hide.len(), 3);
        assert_eq!(c.hide[2], cwd.join("rel"));
        let args = c.agent_args();
        assert_eq!(
            &args[args.len() - 2..],
            ["--tool-network", "off"].map(std::ffi::OsString::from)
        );
    }

    #[test]
    fn sandbox_off_passes_no_flags_and_refuses_tool_network_off_or_proxy() {
        for chosen in [None, Some(ToolNetwork::On)] {
            let mut r = raw();
            r.sandbox = OnOff::Off;
            r.tool_network = chosen;
            let c = resolve(r).unwrap();
            assert!(c.agent_args().is_empty());
            assert_eq!(c.tool_network, ToolNetwork::On);
            assert!(c.tools_on_host_network());
        }
        for chosen in [ToolNetwork::Off, ToolNetwork::Proxy] {
            let mut r = raw();
            r.sandbox = OnOff::Off;
            r.tool_network = Some(chosen);
            let err = resolve(r).unwrap_err().to_string();
            assert!(
                err.contains(&format!("--tool-network {}", chosen.name())),
                "{err}"
            );
        }
    }

    #[test]
    fn limits_have_minimums() {
        let mut r = raw();
        r.memory_max = Some(1 << 20);
        let err = resolve(r).unwrap_err().to_string();
        assert!(err.contains("--child-memory-max"), "{err}");
        let mut r = raw();
        r.pids_max = Some(3);
        let err = resolve(r).unwrap_err().to_string();
        assert!(err.contains("--child-pids-max"), "{err}");
        let mut r = raw();
        r.memory_max = Some(64 << 20);
        r.pids_max = Some(64);
        let c = resolve(r).unwrap();
        assert_eq!((c.memory_max, c.pids_max), (Some(64 << 20), Some(64)));
    }

    #[test]
    fn child_user_is_looked_up() {
        let mut r = raw();
        r.child_user = Some("no-such-user-corral-test".into());
        let err = resolve(r).unwrap_err().to_string();
        if Uid::effective().is_root() {
            assert!(err.contains("no such user"), "{err}");
            let mut r = raw();
            r.child_user = Some("nobody".into());
            let user = resolve(r).unwrap().child_user.unwrap();
            assert_eq!(user.name, "nobody");
            assert_ne!(user.uid, 0);
            let mut r = raw();
            r.child_user = Some("0".into());
            assert_eq!(resolve(r).unwrap().child_user.unwrap().uid, 0);
        } else {
            assert!(err.contains("needs the gateway to run as root"), "{err}");
        }
    }
}
