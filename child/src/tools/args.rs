//! Typed access to a tool call's JSON arguments. Every failure is an
//! [`ArgError`] whose text tells the model what to fix; it converts into an
//! `is_error` [`ToolOutput`]. A `null` argument counts as absent.

use serde_json::{Map, Value};

use super::ToolOutput;

/// Why a tool call's arguments were rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    #[error("arguments must be a JSON object")]
    NotAnObject,
    #[error("missing required argument `{0}`")]
    Missing(&'static str),
    #[error("argument `{name}` must be {expected}")]
    WrongType {
        name: &'static str,
        expected: &'static str,
    },
    #[error("argument `{0}` must not be empty")]
    Empty(&'static str),
}

impl From<ArgError> for ToolOutput {
    fn from(err: ArgError) -> ToolOutput {
        ToolOutput::error(err.to_string())
    }
}

/// The arguments object of one tool call.
#[derive(Clone, Copy, Debug)]
pub struct Args<'a> {
    map: &'a Map<String, Value>,
}

impl<'a> Args<'a> {
    pub fn new(value: &'a Value) -> Result<Args<'a>, ArgError> {
        match value {
            Value::Object(map) => Ok(Args { map }),
            _ => Err(ArgError::NotAnObject),
        }
    }

    /// The raw value of `name`, `None` when absent or `null`.
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    /// A required string (which may be empty).
    pub fn string(&self, name: &'static str) -> Result<&'a str, ArgError> {
        self.opt_string(name)?.ok_or(ArgError::Missing(name))
    }

    /// A required, non-empty string such as a path or a pattern.
    pub fn non_empty(&self, name: &'static str) -> Result<&'a str, ArgError> {
        match self.string(name)? {
            "" => Err(ArgError::Empty(name)),
            s => Ok(s),
        }
    }

    pub fn opt_string(&self, name: &'static str) -> Result<Option<&'a str>, ArgError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(wrong(name, "a string")),
        }
    }

    /// An optional non-negative integer; integral floats such as `10.0` are
    /// accepted because some models emit them.
    pub fn opt_u64(&self, name: &'static str) -> Result<Option<u64>, ArgError> {
        let Some(value) = self.get(name) else {
            return Ok(None);
        };
        if let Some(n) = value.as_u64() {
            return Ok(Some(n));
        }
        match value.as_f64() {
            Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= u64::MAX as f64 => Ok(Some(f as u64)),
            _ => Err(wrong(name, "a non-negative integer")),
        }
    }

    pub fn opt_bool(&self, name: &'static str) -> Result<Option<bool>, ArgError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(wrong(name, "true or false")),
        }
    }
}

fn wrong(name: &'static str, expected: &'static str) -> ArgError {
    ArgError::WrongType { name, expected }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_typed_arguments() {
        let v = json!({"path": "a", "n": 3, "f": 4.0, "b": true, "none": null});
        let args = Args::new(&v).unwrap();
        assert_eq!(args.non_empty("path"), Ok("a"));
        assert_eq!(args.opt_u64("n"), Ok(Some(3)));
        assert_eq!(args.opt_u64("f"), Ok(Some(4)));
        assert_eq!(args.opt_bool("b"), Ok(Some(true)));
        assert_eq!(args.opt_string("none"), Ok(None));
        assert_eq!(args.opt_u64("absent"), Ok(None));
    }

    #[test]
    fn errors_name_the_argument() {
        let v = json!({"path": "", "n": -1, "s": 5});
        let args = Args::new(&v).unwrap();
        let msg = |e: ArgError| e.to_string();
        assert_eq!(
            msg(args.string("x").unwrap_err()),
            "missing required argument `x`"
        );
        assert_eq!(
            msg(args.non_empty("path").unwrap_err()),
            "argument `path` must not be empty"
        );
        assert_eq!(
            msg(args.opt_u64("n").unwrap_err()),
            "argument `n` must be a non-negative integer"
        );
        assert_eq!(
            msg(args.string("s").unwrap_err()),
            "argument `s` must be a string"
        );
        assert_eq!(Args::new(&json!([1])).unwrap_err(), ArgError::NotAnObject);
        let out: ToolOutput = ArgError::Missing("path").into();
        assert!(out.is_error);
    }
}
