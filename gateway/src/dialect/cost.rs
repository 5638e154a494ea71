//! Model spend an agent reports about itself ([`ReportedCost`]), as each
//! dialect writes it ([`super::DialectRules::reported_cost`]): the weaker
//! source of budgets, read only for agents that reach their model without
//! the model broker (an agent could under-report). Pure, no I/O.
//!
//! Which dialects report a cost: zut (`usage.cost_usd`, per model call),
//! letscode (`turn_end.usage.cost_usd`, per step), Zi (the `usage`
//! session event's `turn.cost_usd`, per model call) and ACP (a
//! `usage_update` session update's `cost`, the session's total so far, in
//! USD only: what third-party agents may send).

use serde_json::Value;

/// A cost an agent reported in one line, in USD.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReportedCost {
    /// What one model call (or step) cost: counted as it is.
    Call(f64),
    /// What the session cost so far: what it grew by since the last
    /// report is counted.
    SessionTotal(f64),
}

/// Whether `line` holds `mark`: a cheap test before a line is parsed, so
/// the many lines that report nothing are not parsed again.
pub fn mentions(line: &[u8], mark: &[u8]) -> bool {
    line.windows(mark.len()).any(|w| w == mark)
}

/// An amount of USD as an agent wrote it: a finite number, 0 or more.
pub fn amount(value: Option<&Value>) -> Option<f64> {
    value
        .and_then(Value::as_f64)
        .filter(|usd| usd.is_finite() && *usd >= 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn amounts_are_finite_and_not_negative() {
        assert_eq!(amount(Some(&json!(0.25))), Some(0.25));
        assert_eq!(amount(Some(&json!(0))), Some(0.0));
        assert_eq!(amount(Some(&json!(-1.0))), None);
        assert_eq!(amount(Some(&json!("0.5"))), None);
        assert_eq!(amount(None), None);
        assert!(mentions(br#"{"cost_usd":1}"#, b"cost_usd"));
        assert!(!mentions(b"{}", b"cost_usd"));
    }
}
