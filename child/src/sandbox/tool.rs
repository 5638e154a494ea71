//! What a sandboxed agent takes away from each tool command it starts,
//! beyond what the sandbox already imposes: the network (`--tool-network
//! off`, or `proxy`: a network namespace whose only way out is the relay to
//! the gateway's egress proxy) and every capability. Tools carry a
//! [`ToolConfinement`] in their context and build their commands with it.

use std::ffi::OsStr;

use corral_protocol::egress::SECRET_ENV;

use super::sys::{self, ExecConfinement};
use crate::egress::{self, EgressRoute};

/// The network a tool command gets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolNet {
    /// The agent's own network (`--tool-network on`, or no sandbox).
    #[default]
    Host,
    /// A new network namespace with only `lo` (`--tool-network off`).
    Isolated,
    /// A new network namespace with only `lo`, where the command runs
    /// behind the egress relay (`--tool-network proxy`).
    Proxy(EgressRoute),
}

/// The confinement of tool commands; the default confines nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolConfinement {
    /// Where each command's network traffic may go.
    network: ToolNet,
    /// Each command starts with an empty capability bounding set.
    no_capabilities: bool,
}

impl ToolConfinement {
    /// No extra confinement (the sandbox is off).
    pub fn none() -> ToolConfinement {
        ToolConfinement::default()
    }

    /// Inside the sandbox: no capabilities, and the given network.
    pub fn sandboxed(network: ToolNet) -> ToolConfinement {
        ToolConfinement {
            network,
            no_capabilities: true,
        }
    }

    /// The network commands get.
    pub fn network(&self) -> &ToolNet {
        &self.network
    }

    /// The variables [`ToolConfinement::command`] sets, for a caller that
    /// clears the command's environment after it: the relay's secret.
    pub fn command_env(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        match &self.network {
            ToolNet::Proxy(route) => vec![(SECRET_ENV, route.secret().into())],
            ToolNet::Host | ToolNet::Isolated => Vec::new(),
        }
    }

    /// A command that runs `program` confined as this says; arguments added
    /// to it go to `program`. With a proxy route the process started is the
    /// relay (`/proc/self/exe egress-relay --socket-fd N -- program …`),
    /// which alone gets the secret, in its environment; `program` is its
    /// child, in the same process group.
    pub fn command(&self, program: impl AsRef<OsStr>) -> tokio::process::Command {
        let mut command = match &self.network {
            ToolNet::Proxy(route) => {
                let mut command = tokio::process::Command::new(egress::SELF_EXE);
                command
                    .arg(egress::SUBCOMMAND)
                    .arg(egress::SOCKET_FD_FLAG)
                    .arg(route.socket_fd().to_string())
                    .arg("--")
                    .arg(program)
                    .env(SECRET_ENV, route.secret());
                command
            }
            ToolNet::Host | ToolNet::Isolated => tokio::process::Command::new(program),
        };
        if *self != ToolConfinement::none() {
            sys::confine_command(
                &mut command,
                ExecConfinement {
                    no_network: self.network != ToolNet::Host,
                    inherit_fd: match &self.network {
                        ToolNet::Proxy(route) => Some(route.socket_fd()),
                        ToolNet::Host | ToolNet::Isolated => None,
                    },
                    no_capabilities: self.no_capabilities,
                    own_domain: self.no_capabilities,
                },
            );
        }
        command
    }
}
