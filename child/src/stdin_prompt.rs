//! The prompt of `corral-agent run -`, read from stdin: all of it up to
//! EOF, at most [`MAX_STDIN_PROMPT`] bytes of UTF-8.

use std::io::Read;

use corral_protocol::ndjson::DEFAULT_MAX_LINE;

/// The prompt argument that means "read the prompt from stdin".
pub const FROM_STDIN: &str = "-";

/// Longest prompt read from stdin: the longest line `rpc` accepts.
pub const MAX_STDIN_PROMPT: usize = DEFAULT_MAX_LINE;

/// Why the prompt could not be read from stdin.
#[derive(Debug, thiserror::Error)]
pub enum StdinPromptError {
    #[error(
        "the prompt on stdin is longer than {limit} bytes; shorten it, or put the material in \
         a file in the project and ask the agent to read it"
    )]
    TooLong { limit: usize },
    #[error("the prompt on stdin is not UTF-8 text")]
    NotUtf8,
    #[error("cannot read the prompt from stdin: {0}")]
    Read(#[from] std::io::Error),
}

/// Reads `input` to its end as the prompt, refusing more than `limit`
/// bytes (without reading further than one byte past it).
pub fn read_prompt(input: impl Read, limit: usize) -> Result<String, StdinPromptError> {
    let mut bytes = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    input.take(cap).read_to_end(&mut bytes)?;
    if bytes.len() > limit {
        return Err(StdinPromptError::TooLong { limit });
    }
    String::from_utf8(bytes).map_err(|_| StdinPromptError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_everything_up_to_the_limit() {
        let text = "line one\nline two\n";
        assert_eq!(read_prompt(text.as_bytes(), text.len()).unwrap(), text);
        assert_eq!(read_prompt(&b""[..], 10).unwrap(), "");
    }

    #[test]
    fn one_byte_over_the_limit_is_refused() {
        let err = read_prompt(&b"12345"[..], 4).unwrap_err();
        assert!(matches!(err, StdinPromptError::TooLong { limit: 4 }));
        assert!(err.to_string().contains("longer than 4 bytes"), "{err}");
    }

    #[test]
    fn invalid_utf8_is_refused() {
        let err = read_prompt(&[0x66, 0xff, 0x0a][..], 10).unwrap_err();
        assert!(matches!(err, StdinPromptError::NotUtf8), "{err}");
    }
}
