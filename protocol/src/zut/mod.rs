//! zut RPC v1: commands, responses, events and the message shape, as
//! `docs/protocol.md` describes them (and zut's own RPC document).

mod command;
mod event;
mod message;
mod reasoning;
mod response;
pub(crate) mod tagged;

#[cfg(test)]
mod spec_examples;

pub use command::{Command, Request, RequestError, RequestId, COMMAND_NAMES};
pub use event::*;
pub use message::{
    ContentBlock, Extra, ImageBlock, ImageInput, Message, ModelInfo, PlanItem, TextBlock,
    ToolCallBlock, ToolResultBlock, Usage,
};
pub use reasoning::{InvalidReasoningLevel, ReasoningLevel, SET_REASONING_ERROR};
pub use response::{HelloData, MessagesData, ModelsData, Response, ResponseTag, StateData};

/// The major version reported in the `hello` response.
pub const PROTOCOL_VERSION: u32 = 1;

/// The environment variable that carries the secret a client's `hello`
/// must present to the agent (set by the gateway on each child it spawns).
pub const TOKEN_ENV: &str = "ZUTCORE_RPC_TOKEN";
