//! The Zi RPC v1 dialect (being written).

/// Serves Zi RPC v1 on stdin/stdout; returns the exit code.
pub async fn serve_stdio(_setup: crate::setup::Setup, _transport: super::TransportOptions) -> u8 {
    eprintln!("corral-agent: the zi dialect is not available yet");
    2
}
