//! Project names → project directories under the projects root.
//!
//! A name is `[A-Za-z0-9._-]{1,64}` other than `.` and `..`, so it can never
//! hold a path separator. `ROOT/NAME` must be a real directory: a symlink is
//! refused wherever it points, so one directory never has two names (an
//! `alias -> real` would run two agents on one directory) and no project
//! leads outside the root. The check runs when a client attaches
//! ([`resolve`]) and again before every spawn ([`open_dir`]), which opens
//! the directory without following a symlink, so that a project whose
//! directory was swapped for a link after it started cannot restart there.
//! Both touch the filesystem: the gateway calls them off its event loop
//! ([`lookup`], and the launch's own blocking step).

use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::offload::{self, Lane};

/// Longest accepted project name, in bytes (all name characters are ASCII).
pub const MAX_NAME_LEN: usize = 64;

/// Why a project name did not lead to a project directory. The messages name
/// the project, never a path, so they may be shown to clients as they are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectError {
    /// The name is not `[A-Za-z0-9._-]{1,64}`, or is `.`/`..` (HTTP 400).
    #[error("invalid project name {name:?}: {reason}")]
    InvalidName {
        /// The offending name, shortened to at most 80 characters.
        name: String,
        reason: &'static str,
    },
    /// Nothing at `ROOT/NAME`, or it cannot be read (HTTP 404).
    #[error("project {name:?} not found")]
    NotFound { name: String },
    /// `ROOT/NAME` is a file or another non-directory (HTTP 404).
    #[error("project {name:?} is not a directory")]
    NotADirectory { name: String },
    /// `ROOT/NAME` is a symbolic link (HTTP 404). The target is deliberately
    /// not part of the message.
    #[error("project {name:?} is a symbolic link; a project must be a real directory directly under the projects root")]
    Symlink { name: String },
    /// `ROOT/NAME` does not resolve to a directory directly under the root
    /// (HTTP 404).
    #[error("project {name:?} is not a directory directly under the projects root")]
    OutsideRoot { name: String },
    /// The gateway has no descriptor left to open the directory with
    /// (HTTP 503): it is at its open-file limit, the project is fine.
    #[error("the gateway is at its open-file limit and cannot open project {name:?}; try again once other projects stop")]
    NoDescriptors { name: String },
    /// The lookup did not finish: the gateway is shutting down (HTTP 503).
    #[error("the gateway cannot look up project {name:?} now; try again")]
    Unavailable { name: String },
}

impl ProjectError {
    /// The HTTP status to answer with: 400 for a malformed name, 503 when
    /// the gateway is out of descriptors, else 404.
    pub fn http_status(&self) -> u16 {
        match self {
            ProjectError::InvalidName { .. } => 400,
            ProjectError::NoDescriptors { .. } | ProjectError::Unavailable { .. } => 503,
            ProjectError::NotFound { .. }
            | ProjectError::NotADirectory { .. }
            | ProjectError::Symlink { .. }
            | ProjectError::OutsideRoot { .. } => 404,
        }
    }
}

/// Checks that `name` is a well-formed project name.
pub fn validate_name(name: &str) -> Result<(), ProjectError> {
    let invalid = |reason| ProjectError::InvalidName {
        name: shorten(name),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("the name is empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(invalid("the name is longer than 64 characters"));
    }
    if name == "." || name == ".." {
        return Err(invalid("`.` and `..` are not project names"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(invalid(
            "only ASCII letters, digits, `.`, `_` and `-` are allowed",
        ));
    }
    Ok(())
}

/// The directory of project `name` under `root`, which must already be
/// canonical (as `config` makes it): a real directory, not a symlink.
pub fn resolve(root: &Path, name: &str) -> Result<PathBuf, ProjectError> {
    validate_name(name)?;
    let name_owned = || name.to_string();
    let dir = root.join(name);
    let meta =
        fs::symlink_metadata(&dir).map_err(|_| ProjectError::NotFound { name: name_owned() })?;
    if meta.file_type().is_symlink() {
        return Err(ProjectError::Symlink { name: name_owned() });
    }
    if !meta.is_dir() {
        return Err(ProjectError::NotADirectory { name: name_owned() });
    }
    // The root is canonical and the name one plain component, so this only
    // fails if the root itself changed underneath.
    match dir.canonicalize() {
        Ok(real) if real == dir => Ok(dir),
        _ => Err(ProjectError::OutsideRoot { name: name_owned() }),
    }
}

/// [`resolve`] off the event loop (the [`offload::Lane::Files`] lane), for
/// a client's attach or an admin start: a slow filesystem holds up this
/// lookup, not the gateway.
pub async fn lookup(root: &Path, name: &str) -> Result<PathBuf, ProjectError> {
    let (root, owned) = (root.to_path_buf(), name.to_string());
    offload::run(Lane::Files, move || resolve(&root, &owned))
        .await
        .unwrap_or_else(|_| {
            Err(ProjectError::Unavailable {
                name: shorten(name),
            })
        })
}

/// [`resolve`], then opens the directory without following a symlink, so
/// that what the child enters is what was checked.
pub fn open_dir(root: &Path, name: &str) -> Result<(PathBuf, OwnedFd), ProjectError> {
    let dir = resolve(root, name)?;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW)
        .open(&dir)
        .map_err(|e| match e.raw_os_error() {
            _ if crate::fdlimit::exhausted(&e) => ProjectError::NoDescriptors {
                name: name.to_string(),
            },
            Some(nix::libc::ELOOP) => ProjectError::Symlink {
                name: name.to_string(),
            },
            Some(nix::libc::ENOTDIR) => ProjectError::NotADirectory {
                name: name.to_string(),
            },
            _ => ProjectError::NotFound {
                name: name.to_string(),
            },
        })?;
    Ok((dir, OwnedFd::from(file)))
}

/// The names of the project directories under `root`, sorted: every entry
/// [`resolve`] would accept (a valid name, a real directory, not a symlink),
/// at most `max` of them. The second value says whether more were left out.
pub fn list(root: &Path, max: usize) -> std::io::Result<(Vec<String>, bool)> {
    let mut names = Vec::new();
    let mut more = false;
    for entry in fs::read_dir(root)? {
        let Ok(entry) = entry else { continue };
        // The entry's own type: a symlink is a symlink, wherever it points.
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !is_dir || validate_name(&name).is_err() {
            continue;
        }
        if names.len() == max {
            more = true;
            break;
        }
        names.push(name);
    }
    names.sort();
    Ok((names, more))
}

/// At most 80 characters of `name`, for error messages.
fn shorten(name: &str) -> String {
    const MAX: usize = 80;
    match name.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &name[..cut]),
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A canonical projects root inside a fresh temp dir, with a sibling
    /// directory `outside` next to the root.
    struct Fixture {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let root = base.join("root");
        let outside = base.join("outside");
        fs::create_dir_all(root.join("alpha/nested")).unwrap();
        fs::create_dir(&outside).unwrap();
        Fixture {
            _tmp: tmp,
            root,
            outside,
        }
    }

    fn status(result: Result<PathBuf, ProjectError>) -> u16 {
        result.unwrap_err().http_status()
    }

    #[tokio::test]
    async fn lookup_off_the_loop_answers_as_resolve_does() {
        let f = fixture();
        for name in ["alpha", "missing", "..", "alpha/nested"] {
            assert_eq!(
                lookup(&f.root, name).await,
                resolve(&f.root, name),
                "{name}"
            );
        }
        let lost = ProjectError::Unavailable {
            name: "alpha".into(),
        };
        assert_eq!(
            lost.http_status(),
            503,
            "try again, like a full descriptor table"
        );
    }

    #[test]
    fn valid_names() {
        for ok in [
            "a",
            "alpha",
            "my-proj_1.2",
            ".hidden",
            "...",
            "A".repeat(64).as_str(),
        ] {
            assert_eq!(validate_name(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn invalid_names_are_400() {
        let f = fixture();
        let long = "a".repeat(65);
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "../x",
            "a\\b",
            "a b",
            "é",
            "проект",
            "a\0",
            &long,
        ] {
            let err = validate_name(bad).unwrap_err();
            assert!(matches!(err, ProjectError::InvalidName { .. }), "{bad}");
            assert_eq!(err.http_status(), 400);
            assert_eq!(status(resolve(&f.root, bad)), 400, "{bad}");
        }
    }

    #[test]
    fn invalid_name_message_is_short() {
        let huge = "x/".repeat(1000);
        let msg = validate_name(&huge).unwrap_err().to_string();
        assert!(msg.len() < 200, "{msg}");
    }

    #[test]
    fn existing_directory_resolves() {
        let f = fixture();
        assert_eq!(resolve(&f.root, "alpha").unwrap(), f.root.join("alpha"));
    }

    #[test]
    fn missing_directory_is_404() {
        let f = fixture();
        let err = resolve(&f.root, "missing").unwrap_err();
        assert_eq!(
            err,
            ProjectError::NotFound {
                name: "missing".into()
            }
        );
        assert_eq!(err.http_status(), 404);
    }

    #[test]
    fn file_is_not_a_directory() {
        let f = fixture();
        fs::write(f.root.join("notes.txt"), "hi").unwrap();
        let err = resolve(&f.root, "notes.txt").unwrap_err();
        assert!(matches!(err, ProjectError::NotADirectory { .. }));
        assert_eq!(err.http_status(), 404);
    }

    #[test]
    fn symlink_outside_root_is_refused_without_leaking_target() {
        let f = fixture();
        symlink(&f.outside, f.root.join("escape")).unwrap();
        let err = resolve(&f.root, "escape").unwrap_err();
        assert_eq!(
            err,
            ProjectError::Symlink {
                name: "escape".into()
            }
        );
        assert_eq!(err.http_status(), 404);
        let message = err.to_string();
        assert!(!message.contains(f.outside.to_str().unwrap()), "{message}");
        assert!(
            message.contains("\"escape\" is a symbolic link"),
            "{message}"
        );
    }

    #[test]
    fn every_symlink_is_refused_even_to_a_sibling_project() {
        let f = fixture();
        symlink(f.root.join("alpha/nested"), f.root.join("deep")).unwrap();
        symlink(&f.root, f.root.join("self")).unwrap();
        symlink("..", f.root.join("up")).unwrap();
        symlink(f.root.join("alpha"), f.root.join("alias")).unwrap();
        symlink("alpha", f.root.join("relative-alias")).unwrap();
        for name in ["deep", "self", "up", "alias", "relative-alias"] {
            let err = resolve(&f.root, name).unwrap_err();
            assert!(
                matches!(err, ProjectError::Symlink { .. }),
                "{name}: {err:?}"
            );
            assert!(open_dir(&f.root, name).is_err(), "{name}");
        }
        assert_eq!(resolve(&f.root, "alpha").unwrap(), f.root.join("alpha"));
    }

    #[test]
    fn open_dir_refuses_a_directory_swapped_for_a_symlink() {
        let f = fixture();
        let (dir, _fd) = open_dir(&f.root, "alpha").unwrap();
        assert_eq!(dir, f.root.join("alpha"));
        fs::rename(f.root.join("alpha"), f.outside.join("alpha")).unwrap();
        symlink(f.outside.join("alpha"), f.root.join("alpha")).unwrap();
        let err = open_dir(&f.root, "alpha").unwrap_err();
        assert!(matches!(err, ProjectError::Symlink { .. }), "{err:?}");
    }

    #[test]
    fn list_names_only_what_resolve_accepts() {
        let f = fixture();
        fs::create_dir(f.root.join("beta")).unwrap();
        fs::create_dir(f.root.join("has space")).unwrap();
        fs::write(f.root.join("notes.txt"), "hi").unwrap();
        symlink(f.root.join("alpha"), f.root.join("alias")).unwrap();
        symlink(&f.outside, f.root.join("escape")).unwrap();
        let (names, more) = list(&f.root, 100).unwrap();
        assert_eq!(names, ["alpha", "beta"]);
        assert!(!more);
        for name in &names {
            assert!(resolve(&f.root, name).is_ok(), "{name}");
        }
        let (names, more) = list(&f.root, 1).unwrap();
        assert_eq!(names.len(), 1);
        assert!(more);
    }

    #[test]
    fn dangling_symlink_and_symlinked_file_are_refused() {
        let f = fixture();
        symlink(f.root.join("gone"), f.root.join("dangling")).unwrap();
        fs::write(f.root.join("file"), "x").unwrap();
        symlink(f.root.join("file"), f.root.join("file-link")).unwrap();
        assert!(matches!(
            resolve(&f.root, "dangling").unwrap_err(),
            ProjectError::Symlink { .. }
        ));
        assert!(matches!(
            resolve(&f.root, "file-link").unwrap_err(),
            ProjectError::Symlink { .. }
        ));
        assert!(matches!(
            resolve(&f.root, "file").unwrap_err(),
            ProjectError::NotADirectory { .. }
        ));
    }
}
