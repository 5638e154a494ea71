//! Token files: one token per line, shared by the role lists' `*_file`
//! settings, `[[token]]` entries and `corral attach --token-file`.

use std::fs;
use std::path::Path;

use super::ConfigError;
use crate::auth::Secret;

/// Shortest accepted token, in characters: shorter ones can be guessed.
pub const MIN_TOKEN_CHARS: usize = 16;

/// One role's candidate tokens from one source, each with a description
/// of where it came from (for errors).
pub type Found = Vec<(Secret, String)>;

/// One token per line; blank lines and lines starting with `#` are skipped,
/// surrounding whitespace is trimmed. A file that yields none is an error.
pub fn read_token_file(path: &Path) -> Result<Found, ConfigError> {
    let text = fs::read_to_string(path).map_err(|source| ConfigError::TokenFile {
        path: path.to_path_buf(),
        source,
    })?;
    let found: Found = text
        .lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .map(|(n, line)| (Secret::new(line), format!("{} (line {n})", path.display())))
        .collect();
    if found.is_empty() {
        return Err(ConfigError::EmptyTokenFile {
            path: path.to_path_buf(),
        });
    }
    Ok(found)
}
