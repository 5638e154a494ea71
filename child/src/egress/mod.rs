//! The child's side of `--tool-network proxy`: the [`EgressRoute`] to the
//! gateway's egress socket (opened before the sandbox hides its path), and
//! the [`relay`] that each tool command runs behind, inside a network
//! namespace of its own, so that the gateway's HTTP proxy is its only way
//! out. The wire contract is `corral_protocol::egress`.

pub mod relay;
mod route;

pub use route::{
    open_socket, EgressError, EgressRoute, BROKER_FD_FLAG, SELF_EXE, SOCKET_FD_FLAG, SUBCOMMAND,
};
