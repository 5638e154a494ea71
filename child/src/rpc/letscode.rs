//! The letscode-rpc/1 dialect (being written).

/// Serves letscode-rpc/1 on stdin/stdout; returns the exit code.
pub async fn serve_stdio(_setup: crate::setup::Setup, _transport: super::TransportOptions) -> u8 {
    eprintln!("corral-agent: the letscode dialect is not available yet");
    2
}
