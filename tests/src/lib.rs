//! End-to-end support for corral: the scripted mock LLM server that the
//! suites point `corral-agent` at instead of the real Anthropic and OpenAI
//! APIs (see [`mock_llm`]), plus the `mock-llm` binary for manual trials.

pub mod acp_client;
pub mod bench;
pub mod brief;
pub mod captured;
pub mod cdp;
pub mod fixture;
pub mod flood;
pub mod gateway;
pub mod harness;
pub mod http;
pub mod mock_llm;
pub mod module_graph;
pub mod otlp;
pub mod prerequisites;
pub mod raw_ws;
pub mod terminals;

pub use brief::brief;

/// A fresh directory outside `/tmp`, for tests of what the sandbox hides:
/// inside the sandbox `/tmp` is a private, empty tmpfs, so anything under
/// the host's `/tmp` is out of reach whether or not it is hidden. Under
/// `/var/tmp` (the other standard temporary directory), only the explicit
/// hiding stands between a tool and the file. Falls back to the usual temp
/// directory where `/var/tmp` is not writable.
pub fn dir_outside_tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("corral-test-")
        .tempdir_in("/var/tmp")
        .or_else(|_| tempfile::tempdir())
        .expect("a temp dir outside /tmp")
}
