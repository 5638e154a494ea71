//! The egress channel between a sandboxed child and the gateway's proxy
//! (`--tool-network proxy`).
//!
//! A tool command runs in a network namespace of its own whose only way
//! out is a relay listening on [`PROXY_ADDR`] inside it. The relay opens
//! one connection to the gateway's egress socket per TCP connection a tool
//! makes, writes the [`preamble`] line naming its project's per-spawn
//! secret, and then copies bytes both ways: what follows is ordinary
//! HTTP/1.1 proxy traffic (`CONNECT host:port`, or an absolute-form
//! `http://` request), decided by the gateway's policy.

/// The environment variable the gateway passes the per-spawn egress secret
/// in. The agent removes it from its environment at start; the relay reads
/// it and removes it from what its command inherits.
pub const SECRET_ENV: &str = "CORRAL_EGRESS_SECRET";

/// Where the relay listens inside a tool's network namespace.
pub const PROXY_ADDR: &str = "127.0.0.1:3128";

/// The proxy URL tools are given (`HTTP_PROXY`, `HTTPS_PROXY` and their
/// lower-case forms).
pub const PROXY_URL: &str = "http://127.0.0.1:3128";

/// Hosts tools reach directly, without the proxy (`NO_PROXY`, `no_proxy`):
/// their own loopback, inside their own network namespace.
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// With the gateway's model-key broker (`corral serve --model-broker on`),
/// where the relay around a third-party agent (`sandbox-exec
/// --model-socket`) also listens: each connection is carried to the
/// broker's socket as it is, with no preamble (the HTTP request names its
/// per-spawn placeholder key where a provider key would go).
pub const BROKER_ADDR: &str = "127.0.0.1:3129";

/// The base of a third-party agent's provider URLs under the broker.
pub const BROKER_RELAY_URL: &str = "http://127.0.0.1:3129";

/// The base of `corral-agent`'s provider URLs under the broker. The name
/// is never resolved: the agent's HTTP client connects through the
/// broker's socket (`--model-socket`) whatever the URL's host.
pub const BROKER_SOCKET_URL: &str = "http://corral-broker";

/// The first word of the preamble line.
pub const PREAMBLE_WORD: &str = "CORRAL-EGRESS";

/// Longest preamble line accepted, LF included.
pub const MAX_PREAMBLE: usize = 128;

/// Bytes of a secret (it is written as twice as many hex digits).
pub const SECRET_BYTES: usize = 32;

/// The line a relay writes first on each connection: `CORRAL-EGRESS
/// <secret>\n`.
pub fn preamble(secret: &str) -> String {
    format!("{PREAMBLE_WORD} {secret}\n")
}

/// The secret a preamble line names (without its LF), if it is one: the
/// word, one space, then lower-case hex digits of [`SECRET_BYTES`].
pub fn parse_preamble(line: &str) -> Option<&str> {
    let secret = line.strip_prefix(PREAMBLE_WORD)?.strip_prefix(' ')?;
    let secret = secret.strip_suffix('\r').unwrap_or(secret);
    (secret.len() == SECRET_BYTES * 2
        && secret
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    .then_some(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preamble_names_one_hex_secret() {
        let secret = "0f".repeat(SECRET_BYTES);
        let line = preamble(&secret);
        assert!(line.len() <= MAX_PREAMBLE);
        assert_eq!(parse_preamble(line.trim_end_matches('\n')), Some(&*secret));
        assert_eq!(
            parse_preamble(&format!("{PREAMBLE_WORD} {secret}\r")),
            Some(&*secret)
        );
        for bad in [
            String::new(),
            secret.clone(),
            format!("{PREAMBLE_WORD}  {secret}"),
            format!("{PREAMBLE_WORD} {}", "0F".repeat(SECRET_BYTES)),
            format!("{PREAMBLE_WORD} {}", "0f".repeat(SECRET_BYTES - 1)),
            format!("CONNECT {secret}"),
        ] {
            assert_eq!(parse_preamble(&bad), None, "{bad}");
        }
    }
}
