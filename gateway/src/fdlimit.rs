//! The open-file limit and the connection cap derived from it.
//!
//! At start the gateway raises its soft `RLIMIT_NOFILE` to the hard limit.
//! Connections may then use all of it but a headroom: descriptors for the
//! children's stdio sockets (one per child), session files, the listeners, the egress proxy's
//! tool connections (two each) and the `/proc` reads of
//! the admin API, so that none of those fails with `EMFILE` while clients
//! (or an attacker) hold every connection the cap allows.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Descriptors kept free besides those of the children. A spawn holds a
/// few more for a moment (the child's ends of its stdio socket, its stderr
/// file, its cgroups' files, the status pipe of `exec`), but children are
/// forked one at a time, on one thread, so this covers them.
pub const BASE_HEADROOM: u64 = 128;
/// Descriptors the gateway holds per running child: its end of the
/// child's stdio socket. The child's stderr goes to a file only the child
/// holds, and its exit is learnt from SIGCHLD (no pidfd).
pub const PER_CHILD_HEADROOM: u64 = 1;
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
        // 1024 fds, 64 children: 128 + 64 kept free.
        assert_eq!(default_max_connections(1024, 64, 0), 832);
        assert_eq!(default_max_connections(1 << 20, 64, 0), (1 << 20) - 192);
        // 100 egress connections hold 200 more.
        assert_eq!(default_max_connections(1024, 64, 100), 632);
        // 10,010 children under a hard limit of 20,000 leave room for
        // nearly 10,000 connections.
        assert_eq!(default_max_connections(20_000, 10_010, 0), 9_862);
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
