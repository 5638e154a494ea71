//! Where the per-project overrides live between runs:
//! `STATE/egress/overrides.json`, replaced atomically on each change and
//! read at start. A file that cannot be read refuses the start, since an
//! override may narrow what a project reaches.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Override, Registry};
use crate::projects;
use crate::statefs;

/// The file the overrides are kept in, under `STATE/egress`.
const FILE: &str = "overrides.json";

/// The egress proxy's registry and where its overrides are kept.
#[derive(Debug, Clone)]
pub struct EgressAdmin {
    pub registry: Arc<Registry>,
    /// `STATE/egress`.
    pub dir: PathBuf,
}

/// Reads the kept overrides into `registry` (none kept: nothing to do).
pub fn load(registry: &Registry, dir: &Path) -> Result<usize, String> {
    let text = match statefs::Dir::open_root(dir).and_then(|d| d.read_file(FILE)) {
        Ok(mut file) => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut file, &mut text)
                .map_err(|e| format!("{}: {e}", dir.join(FILE).display()))?;
            text
        }
        Err(e) if e.is_not_found() => return Ok(0),
        Err(e) => return Err(format!("{}: {e}", dir.join(FILE).display())),
    };
    let kept: BTreeMap<String, Override> =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", dir.join(FILE).display()))?;
    for (project, change) in &kept {
        projects::validate_name(project)
            .map_err(|e| format!("{}: {e}", dir.join(FILE).display()))?;
        registry.set_override(project, Some(change.clone()));
    }
    Ok(kept.len())
}

/// Writes every override to the file (replaced atomically).
pub fn save(registry: &Registry, dir: &Path) -> Result<(), String> {
    let all = registry.overrides();
    let text = serde_json::to_string_pretty(&all).map_err(|e| e.to_string())?;
    statefs::Dir::open_root(dir)
        .and_then(|d| d.replace_file(FILE, &format!("{text}\n")))
        .map_err(|e| format!("cannot keep the egress overrides: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::Policy;

    #[test]
    fn overrides_are_kept_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new(Policy::new(
            vec!["registry.example.com:443".parse().unwrap()],
            Vec::new(),
            None,
        ));
        assert_eq!(load(&registry, dir.path()), Ok(0));
        let change: Override =
            serde_json::from_str(r#"{"allow":["git.example.com:443"],"methods":["GET"]}"#).unwrap();
        registry.set_override("alpha", Some(change.clone()));
        save(&registry, dir.path()).unwrap();
        let again = Registry::new(Policy::new(Vec::new(), Vec::new(), None));
        assert_eq!(load(&again, dir.path()), Ok(1));
        assert_eq!(again.override_of("alpha"), Some(change));
        assert_eq!(again.override_of("beta"), None);
    }

    #[test]
    fn a_file_that_cannot_be_read_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new(Policy::new(Vec::new(), Vec::new(), None));
        std::fs::write(dir.path().join(FILE), "{\"alpha\": {\"allow\": [\"*x\"]}}").unwrap();
        assert!(load(&registry, dir.path()).is_err());
        std::fs::write(dir.path().join(FILE), "{\"../x\": {}}").unwrap();
        assert!(load(&registry, dir.path()).is_err());
    }
}
