//! The open-file limit and the connection cap derived from it.
//!
//! At start the gateway raises its soft `RLIMIT_NOFILE` to the hard limit.
//! Connections may then use all of it but a headroom: descriptors for the
//! children's pipes, session files, the listeners and the `/proc` reads of
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

/// Descriptors kept free for everything but client connections.
pub fn headroom(max_children: usize) -> u64 {
    let children = u64::try_from(max_children).unwrap_or(u64::MAX);
    BASE_HEADROOM.saturating_add(PER_CHILD_HEADROOM.saturating_mul(children))
}

/// The default `--max-connections`: the soft limit minus [`headroom`],
/// at least [`MIN_CONNECTIONS`].
pub fn default_max_connections(soft: u64, max_children: usize) -> usize {
    let free = soft.saturating_sub(headroom(max_children));
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
        assert_eq!(default_max_connections(1024, 64), 640);
        assert_eq!(default_max_connections(1 << 20, 64), (1 << 20) - 384);
        // A tiny limit still allows a few connections.
        assert_eq!(default_max_connections(100, 64), MIN_CONNECTIONS);
        // RLIM_INFINITY does not overflow.
        assert!(default_max_connections(u64::MAX, usize::MAX) >= MIN_CONNECTIONS);
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
