//! The open-file limit and the connection cap derived from it.
//!
//! At start the gateway raises its soft `RLIMIT_NOFILE` to the hard limit.
//! Connections may then use all of it but a headroom: descriptors for the
//! children's pipes, session files, the listeners, the egress proxy's
//! tool connections (two each) and the `/proc` reads of
//! the admin API, so that none of those fails with `EMFILE` while clients
//! (or an attacker) hold every connection the cap allows.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Descriptors kept free besides those of the children.
pub const BASE_HEADROOM: u64 = 128;
/// Descriptors kept free per child (stdin, stdout, stderr, pidfd, slack).
pub const PER_CHILD_HEADROOM: u64 = 4;
/// The derived cap never goes below this (a tiny fd limit still serves).
pub const MIN_CONNECTIONS: usize = 16;

/// The open-file limit after [`raise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// Soft limit before raising.
    pub before: u64,
    /// Soft limit now (the hard limit unless raising failed).
    pub soft: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. On failure the
/// soft limit is kept and returned (with the error, for a warning).
pub fn raise() -> Result<FdLimit, (FdLimit, nix::Error)> {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        // Unknowable: assume the common default and do not touch it.
        Err(e) => {
            let fallback = FdLimit {
                before: 1024,
                soft: 1024,
            };
            return Err((fallback, e));
        }
    };
    let kept = FdLimit { before: soft, soft };
    if hard <= soft {
        return Ok(kept);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => Ok(FdLimit {
            before: soft,
            soft: hard,
        }),
        Err(e) => Err((kept, e)),
    }
}

/// Whether `error` says no descriptor is left: the process's limit
/// (`EMFILE`) or the system's (`ENFILE`).
pub fn exhausted(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(nix::libc::EMFILE | nix::libc::ENFILE)
    )
}

/// Descriptors each tool connection through the egress proxy holds: the
/// relay's Unix connection and the upstream TCP connection.
pub const PER_EGRESS_CONNECTION: u64 = 2;

/// Descriptors kept free for everything but client connections: the
/// children's and, with `--tool-network proxy`, up to `egress_connections`
/// tool connections through the egress proxy.
pub fn headroom(max_children: usize, egress_connections: usize) -> u64 {
    let children = u64::try_from(max_children).unwrap_or(u64::MAX);
    let egress = u64::try_from(egress_connections).unwrap_or(u64::MAX);
    BASE_HEADROOM
        .saturating_add(PER_CHILD_HEADROOM.saturating_mul(children))
        .saturating_add(PER_EGRESS_CONNECTION.saturating_mul(egress))
}

/// The default `--max-connections`: the soft limit minus [`headroom`],
/// at least [`MIN_CONNECTIONS`].
pub fn default_max_connections(soft: u64, max_children: usize, egress_connections: usize) -> usize {
    let free = soft.saturating_sub(headroom(max_children, egress_connections));
    usize::try_from(free)
        .unwrap_or(usize::MAX)
        .max(MIN_CONNECTIONS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_cap_leaves_headroom() {
        // 1024 fds, 64 children: 128 + 256 kept free.
        assert_eq!(default_max_connections(1024, 64, 0), 640);
        assert_eq!(default_max_connections(1 << 20, 64, 0), (1 << 20) - 384);
        // 100 egress connections hold 200 more.
        assert_eq!(default_max_connections(1024, 64, 100), 440);
        // A tiny limit still allows a few connections.
        assert_eq!(default_max_connections(100, 64, 0), MIN_CONNECTIONS);
        // RLIM_INFINITY does not overflow.
        assert!(default_max_connections(u64::MAX, usize::MAX, usize::MAX) >= MIN_CONNECTIONS);
    }

    #[test]
    fn exhaustion_is_told_by_errno() {
        use std::io::Error;
        assert!(exhausted(&Error::from_raw_os_error(nix::libc::EMFILE)));
        assert!(exhausted(&Error::from_raw_os_error(nix::libc::ENFILE)));
        assert!(!exhausted(&Error::from_raw_os_error(nix::libc::ENOENT)));
        assert!(!exhausted(&Error::other("EMFILE")));
    }

    #[test]
    fn raise_reaches_the_hard_limit() {
        let limit = raise().unwrap_or_else(|(limit, _)| limit);
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(limit.soft, soft);
        assert!(soft == hard || limit.soft == limit.before);
    }
}
