//! SHA-256 digests of secrets, which is what the config file and the
//! state directory keep of a token (tokens are high-entropy random
//! strings: a fast hash is enough, and a slow password hash on every hello
//! would be a CPU denial of service on the gateway's event loop).

use ring::digest::{digest, SHA256};

/// SHA-256 of a secret.
pub fn sha256(secret: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, secret.as_bytes()).as_ref());
    out
}

/// Lower-case hex of a digest.
pub fn hex(digest: &[u8; 32]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A digest from 64 hex digits (either case), optionally after `sha256:`.
pub fn parse(text: &str) -> Option<[u8; 32]> {
    let hex = text.strip_prefix("sha256:").unwrap_or(text).as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_read_back() {
        let d = sha256("test");
        assert_eq!(
            hex(&d),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
        assert_eq!(parse(&hex(&d)), Some(d));
        assert_eq!(
            parse(&format!("sha256:{}", hex(&d).to_uppercase())),
            Some(d)
        );
        assert_eq!(parse("sha256:12"), None);
        assert_eq!(parse(&"zz".repeat(32)), None);
    }
}
