//! The one list of the dialects the child speaks on stdio (`rpc --dialect`):
//! which front-end serves each and what each can do. This is the only place
//! outside a dialect's own module that names one; adding a dialect is one
//! variant here and one line in each match below.

use super::{acp, letscode, zi, zut, TransportOptions};
use crate::setup::Setup;

/// The RPC dialects the child speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Dialect {
    #[default]
    Zut,
    Letscode,
    Zi,
    Acp,
}

/// `--max-in-flight` by default: Zi's document bound (the only dialect that
/// bounds operations in flight).
pub const DEFAULT_MAX_IN_FLIGHT: usize = zi::MAX_IN_FLIGHT;

impl Dialect {
    /// Whether the dialect can ask the client to approve a tool call, which
    /// `--permission-mode ask` needs.
    pub fn can_ask_permission(self) -> bool {
        match self {
            Dialect::Zut => zut::CAN_ASK_PERMISSION,
            Dialect::Letscode => letscode::CAN_ASK_PERMISSION,
            Dialect::Zi => zi::CAN_ASK_PERMISSION,
            Dialect::Acp => acp::CAN_ASK_PERMISSION,
        }
    }

    /// Serves this dialect on stdin/stdout; returns the exit code. `token`
    /// is the gateway's secret, for a dialect whose hello carries one.
    pub async fn serve_stdio(
        self,
        setup: Setup,
        token: Option<String>,
        transport: TransportOptions,
    ) -> u8 {
        match self {
            Dialect::Zut => zut::serve_stdio(setup, token, transport).await,
            Dialect::Letscode => letscode::serve_stdio(setup, transport).await,
            Dialect::Zi => zi::serve_stdio(setup, transport).await,
            Dialect::Acp => acp::serve_stdio(setup, transport).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn zut_is_the_default_and_only_zi_cannot_ask() {
        assert_eq!(Dialect::default(), Dialect::Zut);
        let asking: Vec<_> = Dialect::value_variants()
            .iter()
            .filter(|d| d.can_ask_permission())
            .map(|d| d.to_possible_value().unwrap().get_name().to_string())
            .collect();
        assert_eq!(asking, ["zut", "letscode", "acp"]);
    }
}
