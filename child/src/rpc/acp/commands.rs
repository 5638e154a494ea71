//! Slash commands: the ones the agent runs itself, announced with
//! `available_commands_update`, and a prompt read as one of them. ACP
//! runs a command as a prompt whose text is `/name`. Pure.

use corral_protocol::acp::{AvailableCommand, ContentBlock};

use super::rpc::RpcError;

/// A command the agent runs instead of sending the prompt to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Summarise the conversation and continue from the summary.
    Compact,
    /// Start the conversation afresh (the journal records it).
    Clear,
}

impl Command {
    const ALL: [Command; 2] = [Command::Compact, Command::Clear];

    pub fn name(self) -> &'static str {
        match self {
            Command::Compact => "compact",
            Command::Clear => "clear",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Command::Compact => {
                "Summarise the conversation so far and continue from the summary (frees context)"
            }
            Command::Clear => "Start the conversation afresh",
        }
    }
}

/// What `available_commands_update` announces.
pub fn available() -> Vec<AvailableCommand> {
    Command::ALL
        .into_iter()
        .map(|command| AvailableCommand {
            name: command.name().to_string(),
            description: command.description().to_string(),
            input: None,
        })
        .collect()
}

/// The command a prompt runs: a prompt of text only whose first word is
/// `/compact` or `/clear`; `None` for anything else (a prompt for the
/// model, even one starting with another `/word`). Text after the name
/// is an error: neither command takes any, and silently dropping it
/// could lose what the user meant.
pub fn parse(prompt: &[ContentBlock]) -> Result<Option<Command>, RpcError> {
    let mut text = String::new();
    for block in prompt {
        match block {
            ContentBlock::Text { text: part } => text.push_str(part),
            _ => return Ok(None),
        }
    }
    let text = text.trim();
    let Some(rest) = text.strip_prefix('/') else {
        return Ok(None);
    };
    let (name, input) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let Some(command) = Command::ALL.into_iter().find(|c| c.name() == name) else {
        return Ok(None);
    };
    if !input.trim().is_empty() {
        return Err(RpcError::invalid_params(format!("/{name} takes no input")));
    }
    Ok(Some(command))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(text: &str) -> Vec<ContentBlock> {
        vec![ContentBlock::text(text)]
    }

    #[test]
    fn commands_are_read_from_the_prompt_text() {
        assert_eq!(parse(&text("/compact")), Ok(Some(Command::Compact)));
        assert_eq!(parse(&text("  /clear\n")), Ok(Some(Command::Clear)));
        assert_eq!(parse(&text("/help")), Ok(None));
        assert_eq!(parse(&text("please /compact")), Ok(None));
        assert_eq!(parse(&text("/compactly")), Ok(None));
        assert!(parse(&text("/clear everything")).is_err());
        let with_image = vec![
            ContentBlock::text("/compact"),
            ContentBlock::Image {
                data: "AAAA".into(),
                mime_type: "image/png".into(),
                uri: None,
            },
        ];
        assert_eq!(parse(&with_image), Ok(None));
        let names: Vec<String> = available().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["compact", "clear"]);
    }
}
