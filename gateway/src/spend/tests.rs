//! The ledger with its files: spend kept across restarts and counted over
//! several gateways on one state directory, admin changes kept, metrics.

use super::*;

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new().unwrap())
}

fn bob(budget: Option<f64>) -> Payer {
    Payer {
        name: "bob".into(),
        budget_usd: budget,
    }
}

#[tokio::test]
async fn spend_survives_a_restart_and_counts_over_gateways() {
    let state = tempfile::tempdir().unwrap();
    let one = Ledger::open(state.path(), Some(1.0), metrics()).unwrap();
    let two = Ledger::open(state.path(), Some(1.0), metrics()).unwrap();
    let payer = bob(Some(0.5));
    assert!(one
        .charge("alpha", Some(&payer), Source::Broker, 0.3)
        .crossed
        .is_empty());
    one.sync().await;
    let changes = two.changes();
    two.sync().await;
    assert!(
        changes.has_changed().unwrap(),
        "new spend from another gateway"
    );
    // The identity's budget counts the other gateway's spend.
    let crossed = two
        .charge("beta", Some(&payer), Source::Broker, 0.3)
        .crossed;
    assert_eq!(crossed.len(), 1);
    assert_eq!(crossed[0].scope, Scope::Identity);
    two.sync().await;
    one.sync().await;
    assert_eq!(
        one.check("gamma", Some(&payer)).unwrap_err().scope,
        Scope::Identity
    );
    drop((one, two));

    let again = Ledger::open(state.path(), Some(1.0), metrics()).unwrap();
    let view = again.view(Scope::Identity, "bob");
    assert!((view.total_usd - 0.6).abs() < 1e-9, "{view:?}");
    let alpha = again.view(Scope::Project, "alpha");
    assert!((alpha.spent_usd - 0.3).abs() < 1e-9);
    assert_eq!(alpha.source, Some("broker"));
}

#[tokio::test]
async fn an_admin_change_is_kept_and_seen_by_the_other_gateways() {
    let state = tempfile::tempdir().unwrap();
    let one = Ledger::open(state.path(), Some(0.01), metrics()).unwrap();
    let two = Ledger::open(state.path(), Some(0.01), metrics()).unwrap();
    one.charge("alpha", None, Source::Broker, 0.0132);
    one.sync().await;
    two.sync().await;
    let refused = two.check("alpha", None).unwrap_err();
    assert_eq!(refused.limit_usd, 0.01);

    let raise = Change {
        limit: LimitChange::Set(Some(1.0)),
        reset: false,
    };
    let view = two.change(Scope::Project, "alpha", raise).await.unwrap();
    assert_eq!(view.limit_usd, Some(1.0));
    assert!(!view.exhausted);
    one.sync().await;
    assert_eq!(one.check("alpha", None), Ok(()));

    let reset = Change {
        limit: LimitChange::Default,
        reset: true,
    };
    let view = one.change(Scope::Project, "alpha", reset).await.unwrap();
    assert_eq!((view.limit_usd, view.spent_usd), (Some(0.01), 0.0));
    drop((one, two));
    let again = Ledger::open(state.path(), Some(0.01), metrics()).unwrap();
    assert_eq!(again.check("alpha", None), Ok(()));
    assert!((again.view(Scope::Project, "alpha").total_usd - 0.0132).abs() < 1e-9);
}

#[tokio::test]
async fn a_limits_file_that_cannot_be_read_refuses_the_start() {
    let state = tempfile::tempdir().unwrap();
    drop(Ledger::open(state.path(), None, metrics()).unwrap());
    std::fs::write(state.path().join("budgets/limits.json"), "{").unwrap();
    let err = Ledger::open(state.path(), None, metrics()).unwrap_err();
    assert!(err.to_string().contains("limits.json"), "{err}");
}

#[tokio::test]
async fn crossings_and_spend_show_in_the_metrics() {
    let metrics = metrics();
    let ledger = Ledger::detached(Some(0.01), metrics.clone());
    let changes = ledger.changes();
    ledger.charge("alpha", Some(&bob(Some(0.005))), Source::Agent, 0.02);
    assert!(changes.has_changed().unwrap());
    let text = metrics.render();
    for scope in ["project", "identity"] {
        assert!(
            text.contains(&format!(
                "corral_budget_exhausted_total{{scope=\"{scope}\"}} 1"
            )),
            "{text}"
        );
    }
    ledger.update_metrics();
    assert!(metrics
        .render()
        .contains("corral_budget_spent_usd{scope=\"project\"} 0.02"));
    ledger.unpriced("openai", "my-local-model");
    ledger.unpriced("openai", "my-local-model");
    assert!(metrics
        .render()
        .contains("corral_budget_unpriced_calls_total 2"));
}

#[tokio::test]
async fn a_detached_ledger_applies_changes_in_memory() {
    let ledger = Ledger::detached(None, metrics());
    assert_eq!(ledger.default_project_limit(), None);
    let change = Change {
        limit: LimitChange::Set(Some(0.0)),
        reset: false,
    };
    ledger
        .change(Scope::Project, "alpha", change)
        .await
        .unwrap();
    let refused = ledger.check("alpha", None).unwrap_err();
    assert_eq!(refused.spent_usd, 0.0);
    ledger.attribute("alpha", Some(bob(None)));
    assert_eq!(ledger.payer_of("alpha"), Some(bob(None)));
}
