//! What a sandboxed agent takes away from each tool command it starts,
//! beyond what the sandbox already imposes: the network (with
//! `--tool-network off`) and every capability. Tools carry a
//! [`ToolConfinement`] in their context and apply it to their commands.

use super::sys::{self, ExecConfinement};

/// The confinement of tool commands; the default confines nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ToolConfinement {
    /// Each command runs in a new network namespace with only `lo`.
    no_network: bool,
    /// Each command starts with an empty capability bounding set.
    no_capabilities: bool,
}

impl ToolConfinement {
    /// No extra confinement (the sandbox is off).
    pub fn none() -> ToolConfinement {
        ToolConfinement::default()
    }

    /// Inside the sandbox: no capabilities, and no network unless
    /// `tool_network`.
    pub fn sandboxed(tool_network: bool) -> ToolConfinement {
        ToolConfinement {
            no_network: !tool_network,
            no_capabilities: true,
        }
    }

    /// Whether commands lose the network.
    pub fn no_network(self) -> bool {
        self.no_network
    }

    /// Makes `command` apply this confinement between fork and exec.
    pub fn apply(self, command: &mut tokio::process::Command) {
        if self != ToolConfinement::none() {
            sys::confine_command(
                command,
                ExecConfinement {
                    no_network: self.no_network,
                    no_capabilities: self.no_capabilities,
                },
            );
        }
    }
}
