//! How a frame from the gateway becomes a stdout line of `corral attach`.
//! Pure logic, no I/O. What each dialect answers locally is in
//! `crate::dialect::attach`.

use corral_protocol::ndjson::escape_line_separators;
use serde_json::Value;

/// One frame from the gateway as one stdout line (with its LF), U+2028 and
/// U+2029 escaped. A frame spread over several lines (pretty-printed JSON)
/// is re-encoded from `parsed`; `None` when there is nothing to write.
pub fn frame_line(text: &str, parsed: Option<&Value>) -> Option<Vec<u8>> {
    let text = text.trim_end_matches(['\r', '\n']);
    if text.trim().is_empty() {
        return None;
    }
    let mut line = if text.contains('\n') {
        serde_json::to_vec(parsed?).ok()?
    } else {
        text.as_bytes().to_vec()
    };
    escape_line_separators(&mut line);
    line.push(b'\n');
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_become_single_escaped_lines() {
        let line = frame_line("{\"d\":\"a\u{2028}b\"}\n", None).unwrap();
        assert_eq!(line, b"{\"d\":\"a\\u2028b\"}\n");
        let pretty = "{\n  \"type\": \"done\"\n}";
        let parsed: Value = serde_json::from_str(pretty).unwrap();
        assert_eq!(
            frame_line(pretty, Some(&parsed)).unwrap(),
            b"{\"type\":\"done\"}\n"
        );
        assert_eq!(frame_line(pretty, None), None);
        assert_eq!(frame_line(" \r\n", None), None);
    }
}
