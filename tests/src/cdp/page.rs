//! One browser tab ([`Page`]) driven through its flattened DevTools
//! session: navigate, evaluate, wait, real input events, screenshots, and
//! the errors the page reported.

use std::time::Duration;

use serde_json::{json, Value};

use super::{lock, Browser, CdpError, CDP_TIMEOUT};

/// One tab, driven through its session.
pub struct Page<'a> {
    browser: &'a Browser,
    session: String,
}

impl<'a> Page<'a> {
    pub(super) fn new(browser: &'a Browser, session: String) -> Page<'a> {
        Page { browser, session }
    }

    pub async fn call(&self, method: &str, params: Value) -> Result<Value, CdpError> {
        self.browser.call(method, params, Some(&self.session)).await
    }

    /// Loads `url` and waits until the document has finished loading.
    pub async fn navigate(&self, url: &str) -> Result<(), CdpError> {
        let result = self.call("Page.navigate", json!({"url": url})).await?;
        if let Some(error) = result["errorText"].as_str().filter(|e| !e.is_empty()) {
            return Err(CdpError::Command {
                method: "Page.navigate".into(),
                message: format!("{url}: {error}"),
            });
        }
        self.wait_for("document.readyState === 'complete'", "the page to load")
            .await
            .map(|_| ())
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns
    /// its value as JSON (`null` for `undefined`).
    pub async fn eval(&self, expression: &str) -> Result<Value, CdpError> {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({
                    "expression": expression,
                    "awaitPromise": true,
                    "returnByValue": true,
                    "userGesture": true,
                }),
            )
            .await?;
        if let Some(details) = result.get("exceptionDetails") {
            let text = details["exception"]["description"]
                .as_str()
                .or_else(|| details["text"].as_str())
                .unwrap_or("exception");
            return Err(CdpError::Script(format!("{text}\n  in: {expression}")));
        }
        Ok(result["result"]["value"].clone())
    }

    /// Polls `expression` until it is truthy and returns its value; fails
    /// after [`CDP_TIMEOUT`] naming `what` was awaited and the last value.
    pub async fn wait_for(&self, expression: &str, what: &str) -> Result<Value, CdpError> {
        let deadline = tokio::time::Instant::now() + CDP_TIMEOUT;
        loop {
            let last = self.eval(expression).await;
            match &last {
                Ok(value) if truthy(value) => return Ok(value.clone()),
                Err(CdpError::Script(_)) | Ok(_) => {}
                Err(_) => return last,
            }
            if tokio::time::Instant::now() >= deadline {
                let last = match last {
                    Ok(value) => value.to_string(),
                    Err(e) => e.to_string(),
                };
                return Err(CdpError::Timeout(format!(
                    "waiting {}s for {what} (`{expression}` was {last})",
                    CDP_TIMEOUT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A real left click in the middle of the first element matching
    /// `selector`, after scrolling it into view.
    pub async fn click(&self, selector: &str) -> Result<(), CdpError> {
        let selector_js = json!(selector).to_string();
        let rect = self
            .eval(&format!(
                "(() => {{ const e = document.querySelector({selector_js}); \
                 if (!e) return null; e.scrollIntoView({{block: 'center'}}); \
                 const r = e.getBoundingClientRect(); \
                 return {{x: r.x + r.width / 2, y: r.y + r.height / 2, w: r.width, h: r.height}}; }})()"
            ))
            .await?;
        let (Some(x), Some(y)) = (rect["x"].as_f64(), rect["y"].as_f64()) else {
            return Err(CdpError::Script(format!("no element matches {selector}")));
        };
        if rect["w"].as_f64() == Some(0.0) || rect["h"].as_f64() == Some(0.0) {
            return Err(CdpError::Script(format!("{selector} is not visible")));
        }
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            )
            .await?;
        }
        Ok(())
    }

    /// Types `text` into the focused element, as an input method would.
    pub async fn type_text(&self, text: &str) -> Result<(), CdpError> {
        self.call("Input.insertText", json!({"text": text}))
            .await
            .map(|_| ())
    }

    /// Presses and releases Enter on the focused element.
    pub async fn press_enter(&self) -> Result<(), CdpError> {
        for kind in ["keyDown", "keyUp"] {
            let mut event = json!({
                "type": kind, "key": "Enter", "code": "Enter",
                "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13,
            });
            if kind == "keyDown" {
                event["text"] = json!("\r");
            }
            self.call("Input.dispatchKeyEvent", event).await?;
        }
        Ok(())
    }

    /// A PNG of the viewport.
    pub async fn screenshot_png(&self) -> Result<Vec<u8>, CdpError> {
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": false}),
            )
            .await?;
        let data = shot["data"].as_str().unwrap_or_default();
        decode_base64(data).ok_or_else(|| CdpError::Command {
            method: "Page.captureScreenshot".into(),
            message: "data is not base64".into(),
        })
    }

    /// Uncaught exceptions and error-level console/log entries so far.
    pub fn errors(&self) -> Vec<String> {
        lock(&self.browser.shared.errors)
            .get(&self.session)
            .cloned()
            .unwrap_or_default()
    }
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// Standard base64 (with or without padding), as CDP sends binary data.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    fn sextet(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let bytes = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= sextet(c)? << (18 - 6 * i);
        }
        let [_, a, b, c] = acc.to_be_bytes();
        match chunk.len() {
            4 => out.extend([a, b, c]),
            3 => out.extend([a, b]),
            2 => out.push(a),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_known_vectors() {
        for (encoded, plain) in [
            ("", ""),
            ("Zg==", "f"),
            ("Zm8=", "fo"),
            ("Zm9v", "foo"),
            ("Zm9vYg==", "foob"),
            ("Zm9vYmE=", "fooba"),
            ("Zm9vYmFy", "foobar"),
        ] {
            assert_eq!(
                decode_base64(encoded).unwrap(),
                plain.as_bytes(),
                "{encoded}"
            );
        }
        assert_eq!(decode_base64("iVBORw0K").unwrap(), b"\x89PNG\r\n");
        assert!(decode_base64("Zm9v!").is_none());
        assert!(decode_base64("Z").is_none());
    }

    #[test]
    fn truthiness_follows_javascript() {
        assert!(!truthy(&json!(null)));
        assert!(!truthy(&json!(0)));
        assert!(!truthy(&json!("")));
        assert!(truthy(&json!(2)));
        assert!(truthy(&json!("x")));
        assert!(truthy(&json!([])));
    }
}
