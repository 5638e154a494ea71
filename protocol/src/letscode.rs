//! letscode-rpc/1 constants shared by the agent and the gateway: the
//! protocol name and which versions count as the same major.

/// The protocol spoken, as `ready` and `hello` name it.
pub const PROTOCOL: &str = "letscode-rpc/1";

/// Whether `given` is `letscode-rpc/1` or any `letscode-rpc/1.x` (same
/// major version).
pub fn speaks(given: &str) -> bool {
    given
        .strip_prefix("letscode-rpc/")
        .and_then(|version| version.split('.').next())
        == Some("1")
}

#[cfg(test)]
mod tests {
    use super::speaks;

    #[test]
    fn same_major_only() {
        assert!(speaks("letscode-rpc/1"));
        assert!(speaks("letscode-rpc/1.3"));
        assert!(!speaks("letscode-rpc/10"));
        assert!(!speaks("letscode-rpc/2"));
        assert!(!speaks("letscode-rpc/"));
        assert!(!speaks("zut"));
    }
}
