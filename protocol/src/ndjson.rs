//! Newline-delimited JSON framing over any `AsyncRead`/`AsyncWrite`.
//!
//! Input: lines end at LF only (U+2028/U+2029 are ordinary characters), one
//! trailing `\r` is stripped, blank lines are skipped, and a line longer than
//! the limit is reported and discarded without ever being buffered whole.
//! Output: one object per line, with U+2028/U+2029 escaped so readers that
//! split on them (Node's `readline`) never see a frame cut in two.

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

/// Default maximum length of one line, in bytes, excluding the LF.
pub const DEFAULT_MAX_LINE: usize = 16 * 1024 * 1024;

/// Why a line could not become a JSON object.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("line exceeds the maximum length of {limit} bytes")]
    TooLong { limit: usize },
    #[error("line is not valid UTF-8")]
    InvalidUtf8,
    #[error("invalid JSON: {0}")]
    InvalidJson(serde_json::Error),
    #[error("expected a JSON object, got {0}")]
    NotObject(&'static str),
    #[error("read error: {0}")]
    Io(#[from] std::io::Error),
}

impl FrameError {
    /// Whether the stream is still usable after this error. Only I/O errors
    /// end it; every other error concerns one line, already discarded.
    pub fn is_recoverable(&self) -> bool {
        !matches!(self, FrameError::Io(_))
    }
}

/// Reads NDJSON lines with a length limit.
pub struct FrameReader<R> {
    inner: R,
    max_line: usize,
    /// The line being assembled (never longer than `max_line`).
    buf: Vec<u8>,
    /// Set after an over-long line was reported: skip through its LF.
    discarding: bool,
}

impl<R: AsyncBufRead + Unpin> FrameReader<R> {
    pub fn new(inner: R) -> Self {
        Self::with_max_line(inner, DEFAULT_MAX_LINE)
    }

    pub fn with_max_line(inner: R, max_line: usize) -> Self {
        FrameReader {
            inner,
            max_line,
            buf: Vec::new(),
            discarding: false,
        }
    }

    /// The next non-blank line without its terminator, `None` at end of input.
    /// A final line without LF counts as a line.
    pub async fn next_line(&mut self) -> Option<Result<Vec<u8>, FrameError>> {
        loop {
            let available = match self.inner.fill_buf().await {
                Ok(bytes) => bytes,
                Err(e) => return Some(Err(FrameError::Io(e))),
            };
            if available.is_empty() {
                // End of input: flush a final unterminated line.
                let discarding = std::mem::replace(&mut self.discarding, false);
                let line = std::mem::take(&mut self.buf);
                if discarding {
                    return None;
                }
                // The limit holds for a last line without LF too.
                if line.len() > self.max_line && line.last() != Some(&b'\r') {
                    return Some(Err(FrameError::TooLong {
                        limit: self.max_line,
                    }));
                }
                match finish_line(line) {
                    Some(line) => return Some(Ok(line)),
                    None => return None,
                }
            }
            let (chunk, found_lf) = match memchr_lf(available) {
                Some(pos) => (&available[..pos], true),
                None => (available, false),
            };
            let consumed = chunk.len() + usize::from(found_lf);
            let mut result = None;
            if self.discarding {
                if found_lf {
                    self.discarding = false;
                }
            } else if self.buf.len() + chunk.len() > self.max_line + 1 {
                // +1 leaves room for a trailing '\r' that will be stripped.
                self.buf.clear();
                self.discarding = !found_lf;
                result = Some(Err(FrameError::TooLong {
                    limit: self.max_line,
                }));
            } else {
                self.buf.extend_from_slice(chunk);
                if found_lf {
                    let line = std::mem::take(&mut self.buf);
                    if line.len() > self.max_line && line.last() != Some(&b'\r') {
                        result = Some(Err(FrameError::TooLong {
                            limit: self.max_line,
                        }));
                    } else if let Some(line) = finish_line(line) {
                        result = Some(Ok(line));
                    }
                }
            }
            self.inner.consume(consumed);
            if let Some(result) = result {
                return Some(result);
            }
        }
    }

    /// The next line parsed as a JSON object.
    pub async fn next_object(&mut self) -> Option<Result<Map<String, Value>, FrameError>> {
        let line = self.next_line().await?;
        Some(line.and_then(|line| parse_object(&line)))
    }
}

/// Strips one trailing `\r`; `None` for a blank line.
fn finish_line(mut line: Vec<u8>) -> Option<Vec<u8>> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    if line.iter().all(|b| b.is_ascii_whitespace()) {
        None
    } else {
        Some(line)
    }
}

fn memchr_lf(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// Parses one line as a JSON object, with a typed error for each way it can
/// fail.
pub fn parse_object(line: &[u8]) -> Result<Map<String, Value>, FrameError> {
    let text = std::str::from_utf8(line).map_err(|_| FrameError::InvalidUtf8)?;
    match serde_json::from_str::<Value>(text).map_err(FrameError::InvalidJson)? {
        Value::Object(map) => Ok(map),
        other => Err(FrameError::NotObject(json_kind(&other))),
    }
}

/// A short name of a JSON value's kind, for error messages.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Serialises `value` as one NDJSON line (with the trailing LF), escaping
/// U+2028 and U+2029.
pub fn encode_line<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = serde_json::to_vec(value)?;
    escape_line_separators(&mut out);
    out.push(b'\n');
    Ok(out)
}

/// Rewrites the UTF-8 encodings of U+2028 and U+2029 as JSON escapes. In
/// serialised JSON they can only occur inside strings, where the escape has
/// the same meaning.
pub fn escape_line_separators(json: &mut Vec<u8>) {
    let needs = json
        .windows(3)
        .any(|w| w[0] == 0xE2 && w[1] == 0x80 && (w[2] == 0xA8 || w[2] == 0xA9));
    if !needs {
        return;
    }
    let mut out = Vec::with_capacity(json.len() + 16);
    let mut i = 0;
    while i < json.len() {
        if json[i] == 0xE2
            && json.get(i + 1) == Some(&0x80)
            && matches!(json.get(i + 2), Some(0xA8) | Some(0xA9))
        {
            out.extend_from_slice(if json[i + 2] == 0xA8 {
                b"\\u2028"
            } else {
                b"\\u2029"
            });
            i += 3;
        } else {
            out.push(json[i]);
            i += 1;
        }
    }
    *json = out;
}

/// Writes `value` as one line and flushes.
pub async fn write_line<W, T>(writer: &mut W, value: &T) -> std::io::Result<()>
where
    W: AsyncWrite + Unpin,
    T: Serialize + ?Sized,
{
    let line = encode_line(value).map_err(std::io::Error::other)?;
    writer.write_all(&line).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    async fn lines(input: &[u8], max: usize, cap: usize) -> Vec<Result<Vec<u8>, String>> {
        let reader = BufReader::with_capacity(cap, input);
        let mut frames = FrameReader::with_max_line(reader, max);
        let mut out = Vec::new();
        while let Some(line) = frames.next_line().await {
            out.push(line.map_err(|e| e.to_string()));
        }
        out
    }

    #[tokio::test]
    async fn splits_on_lf_only_and_strips_cr() {
        let input = "{\"a\":\"x\u{2028}y\"}\r\n\n  \n{\"b\":1}".as_bytes();
        for cap in [1, 3, 1024] {
            let got = lines(input, 1024, cap).await;
            assert_eq!(
                got,
                vec![
                    Ok("{\"a\":\"x\u{2028}y\"}".as_bytes().to_vec()),
                    Ok(b"{\"b\":1}".to_vec())
                ],
                "buffer capacity {cap}"
            );
        }
    }

    #[tokio::test]
    async fn over_long_line_is_reported_once_and_discarded() {
        let mut input = vec![b'x'; 100];
        input.extend_from_slice(b"\n{\"ok\":1}\n");
        for cap in [1, 7, 4096] {
            let got = lines(&input, 10, cap).await;
            assert_eq!(got.len(), 2, "capacity {cap}: {got:?}");
            assert!(got[0]
                .as_ref()
                .unwrap_err()
                .contains("maximum length of 10"));
            assert_eq!(got[1], Ok(b"{\"ok\":1}".to_vec()));
        }
    }

    #[tokio::test]
    async fn line_of_exactly_the_limit_passes_with_or_without_cr() {
        let input = b"0123456789\n0123456789\r\n01234567890\n";
        let got = lines(input, 10, 4).await;
        assert_eq!(got[0], Ok(b"0123456789".to_vec()));
        assert_eq!(got[1], Ok(b"0123456789".to_vec()));
        assert!(got[2].is_err());
    }

    /// Found by fuzzing (fuzz/ `ndjson_framing`): a last line without LF
    /// one byte over the limit was returned whole.
    #[tokio::test]
    async fn the_limit_holds_for_a_last_line_without_lf() {
        for cap in [1, 3, 1024] {
            let got = lines(b"{\"a\":1}\n012345", 5, cap).await;
            assert_eq!(got.len(), 2, "capacity {cap}: {got:?}");
            assert!(got[1].as_ref().unwrap_err().contains("maximum length of 5"));
            let got = lines(b"01234\r", 5, cap).await;
            assert_eq!(got, vec![Ok(b"01234".to_vec())], "capacity {cap}");
        }
    }

    #[test]
    fn typed_parse_errors() {
        assert!(parse_object(b"{\"a\":1}").is_ok());
        assert!(matches!(
            parse_object(b"[]"),
            Err(FrameError::NotObject("an array"))
        ));
        assert!(matches!(
            parse_object(b"{nope"),
            Err(FrameError::InvalidJson(_))
        ));
        assert!(matches!(
            parse_object(b"{\"a\":\"\xff\"}"),
            Err(FrameError::InvalidUtf8)
        ));
    }

    #[test]
    fn output_escapes_line_separators() {
        let value = serde_json::json!({"t": "a\u{2028}b\u{2029}c\u{e9}"});
        let line = encode_line(&value).unwrap();
        let text = String::from_utf8(line).unwrap();
        assert_eq!(text, "{\"t\":\"a\\u2028b\\u2029c\u{e9}\"}\n");
        let back: Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(back, value);
    }
}
