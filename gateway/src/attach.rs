//! `corral attach URL`: bridges this process's stdin/stdout to a project on
//! a gateway (being written).

use crate::config::AttachArgs;

/// Runs the bridge; returns the exit code.
pub async fn run(args: AttachArgs) -> anyhow::Result<i32> {
    anyhow::bail!("attach to {} is not implemented yet", args.url)
}
