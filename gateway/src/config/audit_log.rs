//! `--audit-log FILE` and its rotation settings, resolved into
//! [`AuditSettings`]. Start-up refuses a file the gateway could not write:
//! its directory missing or not writable, or the file itself a symbolic
//! link, not a regular file, or not writable. The file is not created
//! here (a refused configuration leaves nothing behind).

use std::io;
use std::path::{Path, PathBuf};

use nix::unistd::AccessFlags;

use super::settings::Layers;
use super::ConfigError;
use crate::audit::AuditSettings;

const SETTING: &str = "--audit-log / audit_log";

/// The audit log's settings; `None` without `--audit-log`.
pub(super) fn resolve(layers: &Layers) -> Result<Option<AuditSettings>, ConfigError> {
    let prompts = layers.args.audit_prompts || layers.file.audit_prompts == Some(true);
    let max_bytes = layers.audit_log_max_bytes()?;
    let keep = layers.audit_log_keep()?;
    let Some(path) = layers.audit_log() else {
        if prompts {
            return Err(ConfigError::Invalid {
                setting: "--audit-prompts / audit_prompts".into(),
                reason: "there is no audit log to write prompts into: give --audit-log FILE too"
                    .into(),
            });
        }
        return Ok(None);
    };
    let path = writable_file(&path)?;
    Ok(Some(AuditSettings {
        path,
        max_bytes: max_bytes as u64,
        keep,
        prompts,
    }))
}

/// `path` made absolute, once its directory exists and is writable and
/// the file, if it exists, is a writable regular file (not a link).
fn writable_file(path: &Path) -> Result<PathBuf, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        setting: SETTING.into(),
        reason,
    };
    let path =
        std::path::absolute(path).map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    let (Some(dir), Some(_)) = (path.parent(), path.file_name()) else {
        return Err(invalid(format!("{} names no file", path.display())));
    };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(invalid(format!("{} is not a directory", dir.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(invalid(format!(
                "the directory {} does not exist: create it, owned by the gateway's user and \
                 private (e.g. mkdir -m 700 {}), or name a file in another",
                dir.display(),
                dir.display()
            )))
        }
        Err(e) => return Err(invalid(format!("{}: {e}", dir.display()))),
    }
    if nix::unistd::access(dir, AccessFlags::W_OK | AccessFlags::X_OK).is_err() {
        return Err(invalid(format!(
            "the gateway's user cannot create files in {} (it must also create FILE.1 … \
             there when rotating)",
            dir.display()
        )));
    }
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(invalid(format!(
            "{} is a symbolic link; the audit log is never opened through one (name the file itself)",
            path.display()
        ))),
        Ok(meta) if !meta.is_file() => {
            Err(invalid(format!("{} is not a regular file", path.display())))
        }
        Ok(_) if nix::unistd::access(&path, AccessFlags::W_OK).is_err() => Err(invalid(format!(
            "{} is not writable by the gateway's user",
            path.display()
        ))),
        Ok(_) => Ok(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(path),
        Err(e) => Err(invalid(format!("{}: {e}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::super::settings::{FileConfig, ServeArgs};
    use super::*;

    fn resolved(args: ServeArgs, file: FileConfig) -> Result<Option<AuditSettings>, String> {
        resolve(&Layers {
            args: &args,
            file: &file,
        })
        .map_err(|e| e.to_string())
    }

    fn with_log(path: &Path) -> ServeArgs {
        ServeArgs {
            audit_log: Some(path.to_path_buf()),
            ..ServeArgs::default()
        }
    }

    #[test]
    fn off_by_default_and_defaults_otherwise() {
        assert_eq!(
            resolved(ServeArgs::default(), FileConfig::default()),
            Ok(None)
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let got = resolved(with_log(&path), FileConfig::default()).unwrap();
        assert_eq!(
            got,
            Some(AuditSettings {
                path,
                max_bytes: 100 << 20,
                keep: 5,
                prompts: false,
            })
        );
        assert!(!dir.path().join("audit.jsonl").exists(), "nothing created");
    }

    #[test]
    fn the_file_layer_sets_everything_and_prompts_need_a_log() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "audit_log = \"{}\"\naudit_log_max_bytes = \"2MiB\"\naudit_log_keep = 2\naudit_prompts = true",
            dir.path().join("a.jsonl").display()
        );
        let file = super::super::file::parse(&text, Path::new("/")).unwrap();
        let got = resolved(ServeArgs::default(), file).unwrap().unwrap();
        assert_eq!((got.max_bytes, got.keep, got.prompts), (2 << 20, 2, true));
        let prompts_only = ServeArgs {
            audit_prompts: true,
            ..ServeArgs::default()
        };
        let err = resolved(prompts_only, FileConfig::default()).unwrap_err();
        assert!(
            err.contains("--audit-prompts") && err.contains("--audit-log"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_directory_is_refused_with_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no-such-dir/audit.jsonl");
        let err = resolved(with_log(&path), FileConfig::default()).unwrap_err();
        assert!(
            err.starts_with("invalid --audit-log / audit_log: the directory"),
            "{err}"
        );
        assert!(
            err.contains("does not exist") && err.contains("mkdir -m 700"),
            "{err}"
        );
    }

    #[test]
    fn a_link_or_a_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).unwrap();
        let err = resolved(with_log(&link), FileConfig::default()).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        let err = resolved(with_log(dir.path()), FileConfig::default()).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
    }

    #[test]
    fn an_unwritable_directory_is_refused() {
        if nix::unistd::geteuid().is_root() {
            return; // root writes anywhere
        }
        let dir = tempfile::tempdir().unwrap();
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        let err =
            resolved(with_log(&locked.join("audit.jsonl")), FileConfig::default()).unwrap_err();
        assert!(err.contains("cannot create files in"), "{err}");
    }

    #[test]
    fn too_small_a_bound_or_no_old_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let args = ServeArgs {
            audit_log_max_bytes: Some(1000),
            ..with_log(&dir.path().join("a"))
        };
        let err = resolved(args, FileConfig::default()).unwrap_err();
        assert!(err.contains("--audit-log-max-bytes"), "{err}");
        let args = ServeArgs {
            audit_log_keep: Some(0),
            ..with_log(&dir.path().join("a"))
        };
        assert!(resolved(args, FileConfig::default()).is_err());
    }
}
