//! Landlock, applied by init to itself and so inherited by the agent and
//! every tool: the rights of a [`RulePlan`] over every file-system right the
//! running kernel knows, plus the abstract-socket and signal scopes (ABI 6+).
//! Landlock also denies mount, umount and pivot_root, so nothing inside can
//! uncover what the mounts hide.

use std::path::PathBuf;

use landlock::{
    Access, AccessFs, BitFlags, LandlockStatus, PathBeneath, PathFd, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, ABI,
};

use super::plan::{Grant, RulePlan};
use super::SandboxError;

/// The newest ABI this code asks for; older kernels get what they support.
const WANTED: ABI = ABI::V10;

/// The link to the running binary: opened by init, it names the agent's
/// own executable whatever the mounts did to its path.
const OWN_EXE: &str = "/proc/self/exe";

/// What the kernel enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Enforced {
    /// The Landlock ABI in force.
    pub abi: u32,
    /// Whether abstract unix sockets and signals are scoped to the sandbox.
    pub scoped: bool,
}

/// The reason given when Landlock is missing (also when simulated).
pub(super) const NOT_AVAILABLE: &str = "landlock_create_ruleset: not supported";

/// A ruleset made and holding its first rules, not yet in force: what a
/// spare agent keeps until it knows its project.
pub struct Prepared(RulesetCreated);

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prepared")
    }
}

/// Makes the ruleset with `plan`'s rules and the agent's own binary.
pub fn prepare(plan: &RulePlan, simulate_missing: bool) -> Result<Prepared, SandboxError> {
    if simulate_missing {
        return Err(SandboxError::Landlock(NOT_AVAILABLE.to_string()));
    }
    build(plan)
        .map(Prepared)
        .map_err(|e| SandboxError::LandlockRules(e.to_string()))
}

impl Prepared {
    /// Adds `writable` (each [`Grant::Writable`]) and restricts the calling
    /// thread (and its future children).
    pub fn restrict(self, writable: &[PathBuf]) -> Result<Enforced, SandboxError> {
        let status = add(self.0, writable.iter().map(|w| (w, Grant::Writable)))
            .and_then(|ruleset| ruleset.restrict_self())
            .map_err(|e| SandboxError::LandlockRules(e.to_string()))?;
        enforced(&status)
    }
}

fn build(plan: &RulePlan) -> Result<RulesetCreated, RulesetError> {
    let ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(WANTED))?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)?
        .create()?;
    let mut ruleset = add(
        ruleset,
        plan.rules.iter().map(|(path, grant)| (path, *grant)),
    )?;
    // The agent's own binary, wherever it lies (a hidden directory, the
    // host's /tmp under the private one): tool commands under
    // `--tool-network proxy` run it again as their relay.
    if let Ok(fd) = PathFd::new(OWN_EXE) {
        ruleset = ruleset.add_rule(PathBeneath::new(fd, rights(Grant::ReadExecute)))?;
    }
    Ok(ruleset)
}

/// Adds a rule per path that still exists (one that vanished since the
/// plan was made needs none).
fn add<'a>(
    mut ruleset: RulesetCreated,
    rules: impl Iterator<Item = (&'a PathBuf, Grant)>,
) -> Result<RulesetCreated, RulesetError> {
    for (path, grant) in rules {
        let Ok(fd) = PathFd::new(path) else {
            continue;
        };
        ruleset = ruleset.add_rule(PathBeneath::new(fd, rights(grant)))?;
    }
    Ok(ruleset)
}

/// The Landlock rights of a grant (the crate drops those the running ABI
/// lacks, and directory rights on files).
fn rights(grant: Grant) -> BitFlags<AccessFs> {
    match grant {
        Grant::ListDirectories => AccessFs::ReadDir.into(),
        Grant::ReadExecute => AccessFs::ReadFile | AccessFs::Execute,
        Grant::Device => AccessFs::ReadFile | AccessFs::WriteFile,
        Grant::Terminal => AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev,
        Grant::Writable => {
            AccessFs::from_all(WANTED)
                & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev)
        }
    }
}

/// Refuses a ruleset the kernel did not enforce at all.
fn enforced(status: &RestrictionStatus) -> Result<Enforced, SandboxError> {
    let abi = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => effective_abi,
        LandlockStatus::NotEnabled => {
            return Err(SandboxError::Landlock(
                "supported but not enabled at boot".to_string(),
            ))
        }
        _ => return Err(SandboxError::Landlock(NOT_AVAILABLE.to_string())),
    };
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(SandboxError::Landlock(NOT_AVAILABLE.to_string()));
    }
    Ok(Enforced {
        abi: abi_number(abi),
        scoped: abi >= ABI::V6,
    })
}

/// The ABI as its version number.
fn abi_number(abi: ABI) -> u32 {
    (1..=64u32)
        .find(|&n| ABI::from(n as i32) == abi)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_numbers_round_trip() {
        assert_eq!(abi_number(ABI::V1), 1);
        assert_eq!(abi_number(ABI::V7), 7);
        assert_eq!(abi_number(ABI::Unsupported), 0);
    }

    #[test]
    fn writable_grants_no_device_rights() {
        let w = rights(Grant::Writable);
        assert!(w.contains(AccessFs::WriteFile | AccessFs::MakeDir | AccessFs::Refer));
        assert!(w.contains(AccessFs::Truncate | AccessFs::RemoveFile | AccessFs::ReadFile));
        assert!(!w.intersects(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev));
        assert!(!rights(Grant::ReadExecute).contains(AccessFs::WriteFile));
        assert!(!rights(Grant::Device).contains(AccessFs::IoctlDev));
        assert!(rights(Grant::Terminal).contains(AccessFs::IoctlDev | AccessFs::WriteFile));
    }
}
