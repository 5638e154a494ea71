//! `plan {explanation?, plan: [{step, status}]}`: replaces the session's
//! checklist. Statuses are [`STATUSES`]; at most one step is `in_progress`,
//! at most [`MAX_STEPS`] steps. The agent loop reads the result's `plan`.

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::{Args, PlanItem, PlanUpdate, Tool, ToolContext, ToolOutput};
use crate::provider::ToolSpec;

/// The statuses a step may have.
pub const STATUSES: [&str; 3] = ["pending", "in_progress", "completed"];
/// Steps in one plan.
pub const MAX_STEPS: usize = 50;

pub struct PlanTool;

impl Tool for PlanTool {
    fn name(&self) -> &'static str {
        "plan"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Record or update the task checklist shown to the user. Send the \
                          whole list each time; each step is pending, in_progress or \
                          completed, with at most one in_progress. Use it for multi-step work \
                          and mark steps completed as you finish them."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "explanation": {"type": "string", "description": "Optional note on what changed."},
                    "plan": {
                        "type": "array",
                        "description": "The complete list of steps, in order.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "step": {"type": "string"},
                                "status": {"type": "string", "enum": STATUSES}
                            },
                            "required": ["step", "status"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["plan"],
                "additionalProperties": false
            }),
        }
    }

    fn run(&self, args: Value, _ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let out = match parse(&args) {
            Ok(update) => ToolOutput {
                plan: Some(update),
                ..ToolOutput::ok("Plan updated")
            },
            Err(message) => ToolOutput::error(message),
        };
        Box::pin(async move { out })
    }
}

/// The validated plan, or what the model must fix.
fn parse(args: &Value) -> Result<PlanUpdate, String> {
    let args = Args::new(args).map_err(|e| e.to_string())?;
    let explanation = args
        .opt_string("explanation")
        .map_err(|e| e.to_string())?
        .filter(|s| !s.trim().is_empty())
        .map(str::to_string);
    let items = match args.get("plan") {
        None => return Err("missing required argument `plan`".into()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err("argument `plan` must be an array of {step, status}".into()),
    };
    if items.len() > MAX_STEPS {
        return Err(format!(
            "the plan has {} steps; the limit is {MAX_STEPS}",
            items.len()
        ));
    }
    let mut plan = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let step = item
            .get("step")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or("");
        if step.is_empty() {
            return Err(format!("plan[{i}].step must be a non-empty string"));
        }
        let status = item.get("status").and_then(Value::as_str).unwrap_or("");
        if !STATUSES.contains(&status) {
            return Err(format!(
                "plan[{i}].status must be one of {} (got {})",
                STATUSES.join(", "),
                item.get("status").unwrap_or(&Value::Null)
            ));
        }
        plan.push(PlanItem {
            step: step.to_string(),
            status: status.to_string(),
        });
    }
    let in_progress = plan.iter().filter(|p| p.status == "in_progress").count();
    if in_progress > 1 {
        return Err(format!(
            "{in_progress} steps are in_progress; at most one step may be in_progress"
        ));
    }
    Ok(PlanUpdate { explanation, plan })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::{context, text};

    async fn plan(args: Value) -> ToolOutput {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, _rx) = context(dir.path());
        PlanTool.run(args, ctx).await
    }

    #[tokio::test]
    async fn returns_the_plan_update() {
        let out = plan(json!({
            "explanation": "starting",
            "plan": [
                {"step": "read code", "status": "completed"},
                {"step": "fix bug", "status": "in_progress"},
                {"step": "run tests", "status": "pending"}
            ]
        }))
        .await;
        assert!(!out.is_error);
        assert_eq!(text(&out), "Plan updated");
        let update = out.plan.unwrap();
        assert_eq!(update.explanation.as_deref(), Some("starting"));
        assert_eq!(update.plan.len(), 3);
        assert_eq!(
            update.plan[1],
            PlanItem {
                step: "fix bug".into(),
                status: "in_progress".into()
            }
        );
    }

    #[tokio::test]
    async fn rejects_bad_statuses_and_several_in_progress() {
        for (args, expect) in [
            (
                json!({"plan": [{"step": "a", "status": "done"}]}),
                "plan[0].status must be one of pending, in_progress, completed (got \"done\")",
            ),
            (
                json!({"plan": [{"step": "", "status": "pending"}]}),
                "plan[0].step must be a non-empty string",
            ),
            (
                json!({"plan": [{"step": "a", "status": "in_progress"}, {"step": "b", "status": "in_progress"}]}),
                "2 steps are in_progress; at most one step may be in_progress",
            ),
            (json!({}), "missing required argument `plan`"),
            (
                json!({"plan": "a"}),
                "argument `plan` must be an array of {step, status}",
            ),
        ] {
            let out = plan(args).await;
            assert!(out.is_error);
            assert!(out.plan.is_none());
            assert_eq!(text(&out), expect);
        }
    }
}
