//! The JWT settings checked and merged into [`JwtSettings`]: the secret of
//! `--jwt-secret-file` is read here (like token files, at start) from a
//! file only the gateway's user may read; `--jwks-file` and `--jwks-url`
//! are exclusive, and the URL must be `https://` (or `http://` on a
//! loopback address: keys fetched in clear could be anyone's).

use std::fs::File;
use std::io::Read;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use super::settings::Layers;
use super::ConfigError;
use crate::access::jwt::{HmacSecret, JwksSource, JwtSettings, MIN_FETCH_INTERVAL};
use crate::auth::Role;

/// Most bytes read from `--jwt-secret-file` (a secret is tens of bytes).
pub const MAX_SECRET_FILE_BYTES: usize = 4096;

/// Largest `--jwt-leeway`: beyond a few minutes it is no clock skew but a
/// longer life for every token.
pub const MAX_LEEWAY: Duration = Duration::from_secs(300);

/// `--jwt-max-role`: the highest `corral_role` a JWT may claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MaxRole {
    Client,
    Observer,
    Admin,
}

impl From<MaxRole> for Role {
    fn from(role: MaxRole) -> Role {
        match role {
            MaxRole::Client => Role::Client,
            MaxRole::Observer => Role::Observer,
            MaxRole::Admin => Role::Admin,
        }
    }
}

/// `--jwt-leeway`: at most [`MAX_LEEWAY`].
pub(super) fn leeway(setting: &str, value: Duration) -> Result<Duration, ConfigError> {
    match value > MAX_LEEWAY {
        true => Err(ConfigError::Invalid {
            setting: setting.into(),
            reason: format!("at most {}s", MAX_LEEWAY.as_secs()),
        }),
        false => Ok(value),
    }
}

/// `--jwks-refresh`: no shorter than the least time between two loads.
pub(super) fn refresh(setting: &str, value: Duration) -> Result<Duration, ConfigError> {
    match value < MIN_FETCH_INTERVAL {
        true => Err(ConfigError::Invalid {
            setting: setting.into(),
            reason: format!("at least {}s", MIN_FETCH_INTERVAL.as_secs()),
        }),
        false => Ok(value),
    }
}

/// The JWT settings, the secret read and checked.
pub(super) fn resolve(layers: &Layers) -> Result<JwtSettings, ConfigError> {
    let secret = layers
        .jwt_secret_file()
        .map(|path| read_secret(&path))
        .transpose()?;
    let jwks = match (layers.jwks_file(), layers.jwks_url()) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::Invalid {
                setting: "--jwks-file / jwks_file and --jwks-url / jwks_url".into(),
                reason: "give one of them".into(),
            })
        }
        (Some(path), None) => Some(JwksSource::File(path)),
        (None, Some(url)) => Some(JwksSource::Url(jwks_url(&url)?)),
        (None, None) => None,
    };
    let nonempty = |value: Option<String>, setting: &str| match value {
        Some(text) if text.trim().is_empty() => Err(ConfigError::Invalid {
            setting: setting.into(),
            reason: "is empty".into(),
        }),
        other => Ok(other),
    };
    Ok(JwtSettings {
        secret,
        jwks,
        issuer: nonempty(layers.jwt_issuer(), "--jwt-issuer / jwt_issuer")?,
        audience: nonempty(layers.jwt_audience(), "--jwt-audience / jwt_audience")?,
        max_role: layers.jwt_max_role()?.into(),
        leeway: layers.jwt_leeway()?,
        refresh: layers.jwks_refresh()?,
    })
}

/// The secret: the file's bytes less one final newline, at least
/// [`MIN_SECRET_BYTES`](crate::access::jwt::MIN_SECRET_BYTES), from a
/// regular file no group or other user may read or write.
fn read_secret(path: &Path) -> Result<HmacSecret, ConfigError> {
    let refused = |reason: String| ConfigError::Invalid {
        setting: format!("--jwt-secret-file / jwt_secret_file {}", path.display()),
        reason,
    };
    let file = File::open(path).map_err(|e| refused(format!("cannot be read: {e}")))?;
    check_private(&file).map_err(refused)?;
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refused(format!("cannot be read: {e}")))?;
    if bytes.len() > MAX_SECRET_FILE_BYTES {
        return Err(refused(format!(
            "is longer than {MAX_SECRET_FILE_BYTES} bytes"
        )));
    }
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    HmacSecret::new(bytes).map_err(|short| {
        refused(format!(
            "{short} (one final newline is not counted); make one with \
             `openssl rand -hex 32 > FILE`"
        ))
    })
}

/// A regular file whose mode gives no group or other user any access: a
/// secret anyone on the host could read is no secret.
pub(super) fn check_private(file: &File) -> Result<(), String> {
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot be read: {e}"))?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "may be read or written by other users (mode {mode:03o}): `chmod 600` it"
        ));
    }
    Ok(())
}

/// `--jwks-url`: `https://`, or `http://` on a loopback address.
fn jwks_url(text: &str) -> Result<reqwest::Url, ConfigError> {
    let refused = |reason: &str| ConfigError::Invalid {
        setting: "--jwks-url / jwks_url".into(),
        reason: format!("{text:?} {reason}"),
    };
    let url = reqwest::Url::parse(text.trim()).map_err(|_| refused("is not a URL"))?;
    let loopback = url.host_str().is_some_and(|host| {
        host.eq_ignore_ascii_case("localhost")
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    match url.scheme() {
        "https" => Ok(url),
        "http" if loopback => Ok(url),
        _ => Err(refused(
            "is not https:// (http:// only on a loopback address: keys fetched in clear \
             could be replaced on the way)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::settings::{FileConfig, ServeArgs};
    use super::*;

    fn resolved(args: ServeArgs, file: FileConfig) -> Result<JwtSettings, String> {
        resolve(&Layers {
            args: &args,
            file: &file,
        })
        .map_err(|e| e.to_string())
    }

    fn secret_file(dir: &Path, content: &[u8], mode: u32) -> PathBuf {
        let path = dir.join("jwt-secret");
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    fn with_secret(path: PathBuf) -> ServeArgs {
        ServeArgs {
            jwt_secret_file: Some(path),
            ..ServeArgs::default()
        }
    }

    #[test]
    fn defaults_accept_no_jwt() {
        let settings = resolved(ServeArgs::default(), FileConfig::default()).unwrap();
        assert_eq!(settings, JwtSettings::default());
    }

    #[test]
    fn the_secret_is_read_less_one_final_newline_from_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let secret = "s".repeat(32);
        let path = secret_file(dir.path(), format!("{secret}\n").as_bytes(), 0o600);
        let settings = resolved(with_secret(path), FileConfig::default()).unwrap();
        let expected = HmacSecret::new(secret.clone().into_bytes()).unwrap();
        assert_eq!(settings.secret, Some(expected));

        let short = secret_file(dir.path(), format!("{}\n", &secret[1..]).as_bytes(), 0o600);
        let err = resolved(with_secret(short), FileConfig::default()).unwrap_err();
        assert!(err.contains("31 bytes; at least 32"), "{err}");
        assert!(!err.contains(&secret[1..]), "{err}");

        let shared = secret_file(dir.path(), secret.as_bytes(), 0o640);
        let err = resolved(with_secret(shared), FileConfig::default()).unwrap_err();
        assert!(
            err.contains("mode 640") && err.contains("chmod 600"),
            "{err}"
        );
        assert!(!err.contains(&secret), "{err}");

        let err = resolved(with_secret(dir.path().into()), FileConfig::default()).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
    }

    #[test]
    fn a_jwks_comes_from_a_file_or_a_url_that_cannot_be_tampered_with() {
        let url = |text: &str| {
            resolved(
                ServeArgs {
                    jwks_url: Some(text.into()),
                    ..ServeArgs::default()
                },
                FileConfig::default(),
            )
        };
        for good in [
            "https://idp.example.com/jwks.json",
            "http://127.0.0.1:8080/jwks",
            "http://[::1]/jwks",
            "http://localhost/jwks",
        ] {
            let jwks = url(good).unwrap().jwks;
            assert!(matches!(jwks, Some(JwksSource::Url(_))), "{good}");
        }
        for bad in [
            "http://idp.example.com/jwks",
            "ftp://127.0.0.1/jwks",
            "jwks",
        ] {
            let err = url(bad).unwrap_err();
            assert!(err.contains("--jwks-url"), "{err}");
        }
        let both = ServeArgs {
            jwks_url: Some("https://idp.example.com/jwks".into()),
            ..ServeArgs::default()
        };
        let file = FileConfig {
            jwks_file: Some("/etc/corral/jwks.json".into()),
            ..FileConfig::default()
        };
        let err = resolved(both, file).unwrap_err();
        assert!(err.contains("give one of them"), "{err}");
    }

    #[test]
    fn claims_settings_come_from_the_file_and_are_bounded() {
        let file: FileConfig = toml::from_str(
            r#"
            jwks_file = "/etc/corral/jwks.json"
            jwt_issuer = "https://ide.example.com"
            jwt_audience = "corral"
            jwt_max_role = "admin"
            jwt_leeway = "1m"
            jwks_refresh = "1h"
            "#,
        )
        .unwrap();
        let settings = resolved(ServeArgs::default(), file).unwrap();
        assert_eq!(
            settings.jwks,
            Some(JwksSource::File("/etc/corral/jwks.json".into()))
        );
        assert_eq!(settings.issuer.as_deref(), Some("https://ide.example.com"));
        assert_eq!(settings.audience.as_deref(), Some("corral"));
        assert_eq!(settings.max_role, Role::Admin);
        assert_eq!(settings.leeway, Duration::from_secs(60));
        assert_eq!(settings.refresh, Duration::from_secs(3600));

        for (args, expected) in [
            (
                ServeArgs {
                    jwt_leeway: Some(Duration::from_secs(301)),
                    ..ServeArgs::default()
                },
                "at most 300s",
            ),
            (
                ServeArgs {
                    jwks_refresh: Some(Duration::from_secs(9)),
                    ..ServeArgs::default()
                },
                "at least 10s",
            ),
            (
                ServeArgs {
                    jwt_issuer: Some(" ".into()),
                    ..ServeArgs::default()
                },
                "--jwt-issuer / jwt_issuer: is empty",
            ),
        ] {
            let err = resolved(args, FileConfig::default()).unwrap_err();
            assert!(err.contains(expected), "{err}");
        }
        let err = toml::from_str::<FileConfig>("jwt_max_role = \"root\"").unwrap_err();
        assert!(err.to_string().contains("client"), "{err}");
    }
}
