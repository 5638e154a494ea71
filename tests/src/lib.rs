//! End-to-end support for corral: the scripted mock LLM server that the
//! suites point `corral-agent` at instead of the real Anthropic and OpenAI
//! APIs (see [`mock_llm`]), plus the `mock-llm` binary for manual trials.

pub mod bench;
pub mod cdp;
pub mod gateway;
pub mod harness;
pub mod mock_llm;
