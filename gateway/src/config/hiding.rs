//! Where the gateway's own files may lie, decided once at start. Every
//! setting that names a file the gateway reads a secret from is declared
//! once, in [`SECRET_FILE_SETTINGS`]; with the sandbox on, each such file
//! (and each `--sandbox-hide` path that is not a directory) is hidden by
//! covering the whole directory that holds it, because a cover on a
//! directory survives the files in it being replaced (`mv`, `sed -i`, an
//! editor's save) while one on a file does not. A directory agents need
//! cannot be covered, so such a file is refused ([`cover_for`]). The state
//! directory and the projects root must not overlap ([`apart`]).

use std::path::{Component, Path, PathBuf};

use super::settings::{FileConfig, ServeArgs};

/// A setting that names a file the gateway reads a secret from.
pub struct SecretFileSetting {
    /// The flag, as in messages.
    pub flag: &'static str,
    /// The config file key (`None`: the setting exists only as a flag).
    pub key: Option<&'static str>,
    /// Its value on the command line.
    pub cli: fn(&ServeArgs) -> Option<&PathBuf>,
    /// Its value in the config file.
    pub file: fn(&FileConfig) -> Option<&PathBuf>,
}

/// Every setting that names a file the gateway reads a secret from (or
/// keeps a record in that agents must not see). A new one (a key file, an
/// MCP configuration, a provider key file) goes here, and is then hidden
/// from agents like the others; a unit test fails for a
/// `*_file` setting missing from this list.
pub const SECRET_FILE_SETTINGS: &[SecretFileSetting] = &[
    SecretFileSetting {
        flag: "--config",
        key: None,
        cli: |a| a.config.as_ref(),
        file: |_| None,
    },
    SecretFileSetting {
        flag: "--token-file",
        key: Some("token_file"),
        cli: |a| a.token_file.as_ref(),
        file: |f| f.token_file.as_ref(),
    },
    SecretFileSetting {
        flag: "--observer-token-file",
        key: Some("observer_token_file"),
        cli: |a| a.observer_token_file.as_ref(),
        file: |f| f.observer_token_file.as_ref(),
    },
    SecretFileSetting {
        flag: "--admin-token-file",
        key: Some("admin_token_file"),
        cli: |a| a.admin_token_file.as_ref(),
        file: |f| f.admin_token_file.as_ref(),
    },
    // The MCP servers' environment and headers: API tokens.
    SecretFileSetting {
        flag: "--mcp-servers",
        key: Some("mcp_servers"),
        cli: |a| a.mcp_servers.as_ref(),
        file: |f| f.mcp_servers.as_ref(),
    },
    // Holds no secret, but who did what on every project (and, with
    // --audit-prompts, every prompt): no agent may read or rewrite it.
    // Its rotated files lie beside it, hidden with the directory.
    SecretFileSetting {
        flag: "--audit-log",
        key: Some("audit_log"),
        cli: |a| a.audit_log.as_ref(),
        file: |f| f.audit_log.as_ref(),
    },
    SecretFileSetting {
        flag: "--jwt-secret-file",
        key: Some("jwt_secret_file"),
        cli: |a| a.jwt_secret_file.as_ref(),
        file: |f| f.jwt_secret_file.as_ref(),
    },
    // Public keys, but what the gateway trusts identities from: hidden
    // like the secrets, so that no agent learns or touches it.
    SecretFileSetting {
        flag: "--jwks-file",
        key: Some("jwks_file"),
        cli: |a| a.jwks_file.as_ref(),
        file: |f| f.jwks_file.as_ref(),
    },
];

/// Sockets and socket directories of host services hidden from every
/// sandboxed child, where they exist: a path-named Unix socket is reached
/// by `connect(2)`, which neither Landlock nor a network namespace stops.
/// D-Bus (the system bus answers `systemd-run`-style requests and name
/// lookups; a user bus runs commands outside the sandbox), the users'
/// runtime directories, the name-service caches and `systemd-resolved`'s
/// lookup sockets (a tool could resolve names, and so leak data, past the
/// egress proxy; the agent's own lookups fall back to DNS), the journal,
/// container engines (their sockets are root on the host) and local
/// databases (which may trust a local login). A socket
/// file is covered by itself, not by its directory (see `sandbox_hide`
/// for why files are otherwise covered by their directories): its
/// directory may hold what the agent needs (`/run` holds `resolv.conf`'s
/// target).
pub const HOST_SOCKETS: &[&str] = &[
    "/run/dbus",
    "/run/user",
    "/run/nscd",
    "/run/systemd/resolve/io.systemd.Resolve",
    "/run/systemd/resolve/io.systemd.Resolve.Monitor",
    "/run/systemd/userdb",
    "/run/systemd/journal",
    "/run/systemd/private",
    "/run/docker.sock",
    "/run/docker",
    "/run/containerd",
    "/run/podman",
    "/run/crio",
    "/run/libvirt",
    "/run/postgresql",
    "/run/mysqld",
    "/run/redis",
    "/run/memcached",
];

/// The [`HOST_SOCKETS`] that exist on this host, canonical (so
/// `/var/run/...` links land on `/run/...`).
pub fn host_sockets() -> Vec<PathBuf> {
    HOST_SOCKETS
        .iter()
        .filter_map(|path| Path::new(path).canonicalize().ok())
        .collect()
}

/// Every secret file the configuration names, on either layer (whichever
/// wins, the gateway may have read both), with the setting that named it.
pub fn secret_files(args: &ServeArgs, file: &FileConfig) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for setting in SECRET_FILE_SETTINGS {
        if let Some(path) = (setting.cli)(args) {
            found.push((setting.flag.to_string(), path.clone()));
        }
        if let (Some(key), Some(path)) = (setting.key, (setting.file)(file)) {
            found.push((format!("`{key}` in the config file"), path.clone()));
        }
    }
    found
}

/// What agents need, which a cover must leave alone.
#[derive(Debug, Clone, Default)]
pub struct Needed {
    /// Directories agents run programs from (`PATH`, the child command's
    /// directory), canonical.
    pub program_dirs: Vec<PathBuf>,
    /// The projects root (canonical): a directory inside a project is
    /// bound back into its agent's view with the project.
    pub projects_root: PathBuf,
    /// `STATE/homes`: likewise for the private homes of third-party agents.
    pub homes_dir: PathBuf,
}

/// Why a file cannot be hidden by covering its directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{setting} names {}: the sandbox hides a file by hiding the whole directory that holds \
     it, and {reason}; keep corral's config and secret files in a directory of their own, \
     e.g. /etc/corral/ (or give --sandbox off)",
    file.display()
)]
pub struct CoverRefused {
    pub setting: String,
    pub file: PathBuf,
    pub reason: String,
}

/// The directory to hide so that `file` (absolute, canonical where it
/// exists) stays hidden whatever happens to it: the directory holding it,
/// unless agents need that directory. Refused: `/` and the directories
/// directly under it (except `/tmp`, which agents see as a private, empty
/// one anyway), those directly under `/usr` and `/var` (shared by every
/// program), one that holds a directory agents run programs from, and one
/// inside a project or a private home (bound back into the agent's view).
pub fn cover_for(setting: &str, file: &Path, needed: &Needed) -> Result<PathBuf, CoverRefused> {
    let refuse = |reason: String| CoverRefused {
        setting: setting.to_string(),
        file: file.to_path_buf(),
        reason,
    };
    let dir = file.parent().unwrap_or(Path::new("/"));
    let names: Vec<&std::ffi::OsStr> = dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    match names.as_slice() {
        [] => return Err(refuse("that directory is /, which agents need".into())),
        [top] if *top != "tmp" => {
            return Err(refuse(format!(
                "{} is a top-level directory of the system, which agents need",
                dir.display()
            )))
        }
        [top, _] if *top == "usr" || *top == "var" => {
            return Err(refuse(format!(
                "{} is a system directory shared by every program",
                dir.display()
            )))
        }
        _ => {}
    }
    if let Some(used) = needed.program_dirs.iter().find(|p| p.starts_with(dir)) {
        return Err(refuse(format!(
            "{} holds {}, where agents run programs from",
            dir.display(),
            used.display()
        )));
    }
    if dir.starts_with(&needed.projects_root) && dir != needed.projects_root {
        return Err(refuse(format!(
            "{} is inside a project, which its agent sees",
            dir.display()
        )));
    }
    if dir.starts_with(&needed.homes_dir) {
        return Err(refuse(format!(
            "{} is inside the private homes of agents",
            dir.display()
        )));
    }
    Ok(dir.to_path_buf())
}

/// Why the state directory and the projects root may not be used together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Overlap {
    #[error(
        "the state directory {} is inside the projects root {}: clients could open it as a \
         project, and its agent would read and write other projects' journals and homes; \
         put the state directory outside the projects root (e.g. /var/lib/corral)",
        state.display(), root.display()
    )]
    StateInProjects { state: PathBuf, root: PathBuf },
    #[error(
        "the projects root {} is inside the state directory {}: agents would be served \
         corral's own files; put the projects root outside the state directory",
        root.display(), state.display()
    )]
    ProjectsInState { state: PathBuf, root: PathBuf },
}

/// Checks that `state` (absolute, resolved as far as it exists) and `root`
/// (canonical) do not overlap.
pub fn apart(state: &Path, root: &Path) -> Result<(), Overlap> {
    let (state, root) = (state.to_path_buf(), root.to_path_buf());
    if state.starts_with(&root) {
        return Err(Overlap::StateInProjects { state, root });
    }
    if root.starts_with(&state) {
        return Err(Overlap::ProjectsInState { state, root });
    }
    Ok(())
}

/// `path` made absolute with its directory resolved but its last
/// component not followed: where the file is *named*. For a link (a
/// Kubernetes secret volume's `tokens -> ..data/tokens`, a release
/// symlink) this differs from [`resolved`], and the directory holding the
/// link must be covered too: the operator may point the link at a new
/// target, which no cover on the old one's directory hides.
pub fn named(path: &Path) -> std::io::Result<PathBuf> {
    let path = std::path::absolute(path)?;
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok(resolved(parent)?.join(name)),
        _ => resolved(&path),
    }
}

/// `path` made absolute with its longest existing ancestor resolved (links
/// followed), for a directory that may not exist yet.
pub fn resolved(path: &Path) -> std::io::Result<PathBuf> {
    let path = std::path::absolute(path)?;
    let mut rest = Vec::new();
    let mut base = path.as_path();
    loop {
        if let Ok(real) = base.canonicalize() {
            return Ok(rest.iter().rev().fold(real, |p, name| p.join(name)));
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                base = parent;
            }
            _ => return Ok(path),
        }
    }
}

/// The directories agents run programs from: the entries of `path_var`
/// and the directory of each program in `programs`, canonical (entries
/// that do not exist are left out).
pub fn program_dirs(path_var: Option<&str>, programs: &[&Path]) -> Vec<PathBuf> {
    let entries = path_var
        .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
        .unwrap_or_default();
    let dirs = programs
        .iter()
        .filter_map(|p| p.parent().map(Path::to_path_buf));
    entries
        .into_iter()
        .chain(dirs)
        .filter(|p| p.is_absolute())
        .filter_map(|p| p.canonicalize().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn needed() -> Needed {
        Needed {
            program_dirs: vec!["/usr/bin".into(), "/opt/pi/bin".into()],
            projects_root: "/srv/projects".into(),
            homes_dir: "/var/lib/corral/homes".into(),
        }
    }

    fn cover(file: &str) -> Result<PathBuf, String> {
        cover_for("--token-file", Path::new(file), &needed()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_file_of_its_own_directory_is_hidden_with_the_directory() {
        for (file, dir) in [
            ("/etc/corral/tokens", "/etc/corral"),
            ("/var/lib/corral/secrets/t", "/var/lib/corral/secrets"),
            ("/home/ops/corral.toml", "/home/ops"),
            ("/tmp/corral.toml", "/tmp"),
            ("/tmp/x/corral.toml", "/tmp/x"),
            ("/srv/projects/tokens", "/srv/projects"),
            ("/usr/local/etc/corral/t", "/usr/local/etc/corral"),
        ] {
            assert_eq!(cover(file), Ok(PathBuf::from(dir)), "{file}");
        }
    }

    #[test]
    fn directories_agents_need_are_refused_with_the_way_out() {
        for (file, why) in [
            ("/tokens", "that directory is /"),
            ("/etc/tokens", "/etc is a top-level directory"),
            ("/root/corral.toml", "/root is a top-level directory"),
            ("/srv/corral.toml", "/srv is a top-level directory"),
            ("/var/tmp/tokens", "/var/tmp is a system directory shared"),
            (
                "/usr/share/tokens",
                "/usr/share is a system directory shared",
            ),
            ("/opt/pi/corral.toml", "/opt/pi holds /opt/pi/bin"),
            ("/srv/projects/a/tokens", "inside a project"),
            ("/var/lib/corral/homes/a/t", "inside the private homes"),
            ("/var/lib/corral/homes/t", "inside the private homes"),
        ] {
            let err = cover(file).unwrap_err();
            assert!(err.contains(why), "{file}: {err}");
            assert!(
                err.starts_with(&format!("--token-file names {file}")),
                "{err}"
            );
            assert!(
                err.contains("a directory of their own, e.g. /etc/corral/"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_state_directory_and_the_projects_root_stay_apart() {
        let root = Path::new("/srv/projects");
        assert_eq!(apart(Path::new("/var/lib/corral"), root), Ok(()));
        assert_eq!(apart(Path::new("/srv/projects-state"), root), Ok(()));
        let err = apart(Path::new("/srv/projects/corral-state"), root).unwrap_err();
        assert!(matches!(err, Overlap::StateInProjects { .. }));
        let text = err.to_string();
        assert!(text.contains("/srv/projects/corral-state") && text.contains("/srv/projects:"));
        let err = apart(Path::new("/srv"), root).unwrap_err();
        assert!(matches!(err, Overlap::ProjectsInState { .. }), "{err}");
        assert!(apart(root, root).is_err());
    }

    #[test]
    fn a_path_not_yet_made_resolves_through_its_existing_ancestors() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let got = resolved(&dir.path().join("link/new/state")).unwrap();
        assert_eq!(got, real.canonicalize().unwrap().join("new/state"));
    }

    #[test]
    fn a_link_is_named_where_it_lies_and_resolved_where_it_points() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        // A Kubernetes secret volume: tokens -> ..data/tokens, ..data -> ..2024_a.
        std::fs::create_dir(base.join("..2024_a")).unwrap();
        std::fs::write(base.join("..2024_a/tokens"), "t").unwrap();
        std::os::unix::fs::symlink("..2024_a", base.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/tokens", base.join("tokens")).unwrap();
        let file = base.join("tokens");
        assert_eq!(named(&file).unwrap(), file);
        assert_eq!(resolved(&file).unwrap(), base.join("..2024_a/tokens"));
        // A link among the directories is resolved either way.
        std::os::unix::fs::symlink(&base, base.join("..2024_a/up")).unwrap();
        let through = base.join("..data/up/tokens");
        assert_eq!(named(&through).unwrap(), file);
    }

    #[test]
    fn program_dirs_are_canonical_and_existing() {
        let dirs = program_dirs(
            Some("/usr/bin:relative:/no/such/dir"),
            &[Path::new("/bin/sh")],
        );
        assert!(dirs.contains(&Path::new("/usr/bin").canonicalize().unwrap()));
        assert!(dirs.iter().all(|d| d.is_absolute() && d.exists()));
        assert_eq!(dirs.len(), 2, "{dirs:?}");
    }

    /// The long names of `corral serve` flags whose value is a file.
    fn file_flags() -> Vec<String> {
        let mut command = super::super::Cli::command();
        let serve = command.find_subcommand_mut("serve").unwrap().clone();
        serve
            .get_arguments()
            .filter(|arg| {
                let id = arg.get_id().as_str();
                let value = arg
                    .get_value_names()
                    .map(|v| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" "))
                    .unwrap_or_default();
                id.ends_with("_file") || id == "config" || value == "F" || value == "FILE"
            })
            .filter_map(|arg| arg.get_long().map(|l| format!("--{l}")))
            .collect()
    }

    /// The config file's keys, as the parser lists them for an unknown one.
    fn file_keys() -> Vec<String> {
        let err = toml::from_str::<FileConfig>("corral_no_such_key = 1")
            .unwrap_err()
            .to_string();
        let list = err.split("expected one of").nth(1).unwrap_or_default();
        list.split(',')
            .map(|k| k.trim().trim_matches('`').to_string())
            .filter(|k| !k.is_empty())
            .collect()
    }

    #[test]
    fn every_file_setting_is_declared_a_secret_file() {
        let flags = file_flags();
        assert!(flags.contains(&"--token-file".to_string()), "{flags:?}");
        for flag in &flags {
            assert!(
                SECRET_FILE_SETTINGS.iter().any(|s| s.flag == flag),
                "{flag} names a file: declare it in SECRET_FILE_SETTINGS (or give it a value \
                 name other than F/FILE if the gateway reads no secret from it)"
            );
        }
        let keys = file_keys();
        assert!(keys.contains(&"listen".to_string()), "{keys:?}");
        for key in keys.iter().filter(|k| k.ends_with("_file")) {
            assert!(
                SECRET_FILE_SETTINGS
                    .iter()
                    .any(|s| s.key == Some(key.as_str())),
                "`{key}` names a file: declare it in SECRET_FILE_SETTINGS"
            );
        }
    }

    #[test]
    fn both_layers_are_collected() {
        let args = ServeArgs {
            config: Some("/etc/corral/corral.toml".into()),
            admin_token_file: Some("/etc/corral/admin".into()),
            ..ServeArgs::default()
        };
        let file = FileConfig {
            token_file: Some("/etc/corral/tokens".into()),
            ..FileConfig::default()
        };
        let found = secret_files(&args, &file);
        let paths: Vec<&Path> = found.iter().map(|(_, p)| p.as_path()).collect();
        assert_eq!(
            paths,
            [
                Path::new("/etc/corral/corral.toml"),
                Path::new("/etc/corral/tokens"),
                Path::new("/etc/corral/admin"),
            ]
        );
        assert_eq!(found[1].0, "`token_file` in the config file");
    }
}
