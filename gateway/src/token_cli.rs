//! `corral token create|list|revoke`: the managed-token admin API
//! (`/v1/tokens`) from a shell. The admin credential comes from
//! `--admin-token-file` or `CORRAL_ADMIN_TOKEN` (never a flag's value, which
//! other users see in `ps`); the gateway from `--url` or `CORRAL_URL`.
//! `create` prints the new token alone on stdout (it is shown once) and
//! what it grants on stderr, so `TOKEN=$(corral token create ...)` works.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::auth::Secret;
use crate::config::read_token_file;

/// The variable the admin token is read from (the one `corral serve`
/// reads its admin token from, too).
const ADMIN_TOKEN_ENV: &str = "CORRAL_ADMIN_TOKEN";

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// `corral token`.
#[derive(Debug, Clone, Args)]
pub struct TokenArgs {
    /// The gateway's base URL.
    #[arg(
        long,
        value_name = "URL",
        env = "CORRAL_URL",
        default_value = "http://127.0.0.1:7000",
        global = true
    )]
    pub url: String,

    /// File holding the admin token (first non-comment line).
    #[arg(long, value_name = "F", global = true)]
    pub admin_token_file: Option<PathBuf>,

    #[command(subcommand)]
    pub action: TokenAction,
}

/// What to do.
#[derive(Debug, Clone, Subcommand)]
pub enum TokenAction {
    /// Make a token; prints it once on stdout.
    Create {
        /// Its name (letters, digits, '.', '_', '-'; not starting with '.').
        name: String,
        /// client, observer or admin.
        #[arg(long, default_value = "client")]
        role: String,
        /// A project name or glob it may open (repeatable; none: nothing).
        #[arg(long = "project", value_name = "PATTERN")]
        projects: Vec<String>,
        /// Lifetime, e.g. 12h or 30d (default: until revoked).
        #[arg(long, value_name = "DUR")]
        expires_in: Option<String>,
        /// Most its prompts may spend on the model, in USD.
        #[arg(long, value_name = "USD")]
        budget_usd: Option<f64>,
    },
    /// List tokens (never their secrets).
    List,
    /// Revoke a token: its sessions are closed at once.
    Revoke { name: String },
}

/// Runs the command; returns the exit code. Prints its answer on stdout.
#[allow(clippy::print_stdout)]
pub async fn run(args: TokenArgs) -> anyhow::Result<i32> {
    let token = match &args.admin_token_file {
        Some(path) => read_token_file(path)?
            .into_iter()
            .next()
            .map(|(token, _)| token),
        None => std::env::var(ADMIN_TOKEN_ENV).ok().map(Secret::new),
    };
    let Some(token) = token else {
        eprintln!("corral token: give the admin token in CORRAL_ADMIN_TOKEN or --admin-token-file");
        return Ok(2);
    };
    let base = args.url.trim_end_matches('/').to_string();
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let request = match &args.action {
        TokenAction::Create {
            name,
            role,
            projects,
            expires_in,
            budget_usd,
        } => {
            let mut body = json!({"name": name, "role": role, "projects": projects});
            if let Some(lifetime) = expires_in {
                body["expires_in"] = json!(lifetime);
            }
            if let Some(budget) = budget_usd {
                body["budget_usd"] = json!(budget);
            }
            client.post(format!("{base}/v1/tokens")).json(&body)
        }
        TokenAction::List => client.get(format!("{base}/v1/tokens")),
        TokenAction::Revoke { name } => match revoke_url(&base, name) {
            Ok(url) => client.delete(url),
            Err(e) => {
                eprintln!("corral token: {e}");
                return Ok(2);
            }
        },
    };
    let response = request.bearer_auth(token.expose()).send().await?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let error = body["error"].as_str().unwrap_or("no error message");
        eprintln!("corral token: {status}: {error}");
        return Ok(1);
    }
    match &args.action {
        TokenAction::Create { .. } => {
            eprintln!(
                "made token {} ({}, projects {}, expires {}); it is shown once:",
                body["name"].as_str().unwrap_or("?"),
                body["role"].as_str().unwrap_or("?"),
                body["projects"],
                body["expires"]
            );
            println!("{}", body["token"].as_str().unwrap_or_default());
        }
        TokenAction::List => print!("{}", table(&body["tokens"])),
        TokenAction::Revoke { name } => println!(
            "revoked {name}: {} session(s) closed",
            body["sessions_closed"]
        ),
    }
    Ok(0)
}

/// The URL revoking the token `name`, which must be a token name: it is
/// put in the path as it is, and a `/`, `..` or `?` in it would make
/// another request of the admin API with the admin's credential.
fn revoke_url(base: &str, name: &str) -> Result<String, String> {
    crate::projects::validate_name(name)
        .map_err(|e| e.to_string().replace("project name", "token name"))?;
    Ok(format!("{base}/v1/tokens/{name}"))
}

/// The tokens as a text table.
fn table(tokens: &Value) -> String {
    let mut out = String::from("NAME\tKIND\tROLE\tPROJECTS\tEXPIRES\tSESSIONS\tLAST USED FROM\n");
    for token in tokens.as_array().into_iter().flatten() {
        let projects: Vec<&str> = token["projects"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            token["name"].as_str().unwrap_or("?"),
            token["kind"].as_str().unwrap_or("?"),
            token["role"].as_str().unwrap_or("?"),
            projects.join(","),
            token["expires"]
                .as_u64()
                .map_or("never".into(), |e| e.to_string()),
            token["sessions"],
            token["last_used"]["from"].as_str().unwrap_or("-"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name is one path segment: a name with `/` or `..` cannot turn
    /// a revocation into another admin request (`DELETE
    /// /v1/projects/alpha/budget` resets a budget).
    #[test]
    fn a_revocation_names_one_token_and_nothing_else() {
        assert_eq!(
            revoke_url("http://gw:7000", "ci-bot").unwrap(),
            "http://gw:7000/v1/tokens/ci-bot"
        );
        for bad in ["../projects/alpha/budget", "..", "a/b", "a?b", "a#b", ""] {
            assert!(revoke_url("http://gw:7000", bad).is_err(), "{bad:?}");
        }
    }
}
