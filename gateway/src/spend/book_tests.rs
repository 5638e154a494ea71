use super::*;

fn alice(budget: Option<f64>) -> Payer {
    Payer {
        name: "alice".into(),
        budget_usd: budget,
    }
}

#[test]
fn a_project_budget_is_crossed_once_then_refuses() {
    let mut book = Book::new(Some(0.01), Tally::default());
    assert_eq!(book.check("alpha", None), Ok(()));
    assert!(book.charge("alpha", None, Source::Broker, 0.004).is_empty());
    let crossed = book.charge("alpha", None, Source::Broker, 0.0092);
    assert_eq!(crossed.len(), 1);
    assert_eq!(crossed[0].scope, Scope::Project);
    assert!((crossed[0].spent_usd - 0.0132).abs() < 1e-12);
    let refused = book.check("alpha", None).unwrap_err();
    assert_eq!(refused.limit_usd, 0.01);
    // Further charges (a call that was already under way) cross nothing.
    assert!(book.charge("alpha", None, Source::Broker, 0.01).is_empty());
    // Another project has its own budget.
    assert_eq!(book.check("beta", None), Ok(()));
}

#[test]
fn an_identity_budget_counts_over_every_project() {
    let mut book = Book::new(None, Tally::default());
    let payer = alice(Some(1.0));
    assert!(book
        .charge("alpha", Some(&payer), Source::Broker, 0.6)
        .is_empty());
    let crossed = book.charge("beta", Some(&payer), Source::Agent, 0.5);
    assert_eq!(crossed.len(), 1);
    assert_eq!(crossed[0].scope, Scope::Identity);
    assert_eq!(crossed[0].name, "alice");
    assert_eq!(book.check("gamma", None), Ok(()));
    assert_eq!(
        book.check("gamma", Some(&payer)).unwrap_err().scope,
        Scope::Identity
    );
    // The same name with a larger credential budget may go on.
    assert_eq!(book.check("gamma", Some(&alice(Some(5.0)))), Ok(()));
    assert_eq!(book.check("gamma", Some(&alice(None))), Ok(()));
}

#[test]
fn the_project_is_named_first_when_both_are_spent() {
    let mut book = Book::new(Some(0.5), Tally::default());
    let payer = alice(Some(0.5));
    let crossed = book.charge("alpha", Some(&payer), Source::Broker, 1.0);
    let scopes: Vec<Scope> = crossed.iter().map(|e| e.scope).collect();
    assert_eq!(scopes, [Scope::Project, Scope::Identity]);
    assert_eq!(
        book.check("alpha", Some(&payer)).unwrap_err().scope,
        Scope::Project
    );
}

#[test]
fn nonsense_amounts_are_not_counted() {
    let mut book = Book::new(Some(1.0), Tally::default());
    for usd in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(book.charge("alpha", None, Source::Broker, usd).is_empty());
    }
    assert_eq!(book.own(), Tally::default());
}

#[test]
fn other_gateways_spend_counts_against_the_same_budget() {
    let mut book = Book::new(Some(1.0), Tally::default());
    book.charge("alpha", None, Source::Broker, 0.4);
    let mut others = Tally::default();
    others.add("alpha", None, Source::Broker, 0.7);
    assert!(book.set_others(others.clone()));
    assert!(!book.set_others(others));
    let view = book.view(Scope::Project, "alpha");
    assert!((view.spent_usd - 1.1).abs() < 1e-12);
    assert!(view.exhausted);
    assert!(book.check("alpha", None).is_err());
}

#[test]
fn raising_or_resetting_lets_the_project_continue() {
    let mut book = Book::new(Some(0.01), Tally::default());
    book.charge("alpha", None, Source::Broker, 0.02);
    assert!(book.check("alpha", None).is_err());

    let mut limits = book.limits.clone();
    let raise = Change {
        limit: LimitChange::Set(Some(1.0)),
        reset: false,
    };
    book.apply(&mut limits, Scope::Project, "alpha", raise);
    assert!(book.set_limits(limits.clone()));
    assert_eq!(book.check("alpha", None), Ok(()));
    let view = book.view(Scope::Project, "alpha");
    assert_eq!(
        (view.limit_usd, view.limit_from),
        (Some(1.0), LimitFrom::Admin)
    );

    // Back to the default: spent again; a reset starts from zero.
    let back = Change {
        limit: LimitChange::Default,
        reset: false,
    };
    book.apply(&mut limits, Scope::Project, "alpha", back);
    assert_eq!(
        limits,
        Limits::default(),
        "an entry back to defaults is dropped"
    );
    book.set_limits(limits.clone());
    assert!(book.check("alpha", None).is_err());
    let reset = Change {
        limit: LimitChange::Keep,
        reset: true,
    };
    book.apply(&mut limits, Scope::Project, "alpha", reset);
    book.set_limits(limits.clone());
    assert_eq!(book.check("alpha", None), Ok(()));
    let view = book.view(Scope::Project, "alpha");
    assert_eq!(view.spent_usd, 0.0);
    assert!((view.total_usd - 0.02).abs() < 1e-12);
    assert_eq!(view.limit_from, LimitFrom::Default);
    // The next charge over the limit crosses it again.
    assert_eq!(book.charge("alpha", None, Source::Broker, 0.011).len(), 1);

    // An admin's unlimited override.
    let unlimited = Change {
        limit: LimitChange::Set(None),
        reset: false,
    };
    book.apply(&mut limits, Scope::Project, "alpha", unlimited);
    book.set_limits(limits);
    assert_eq!(book.check("alpha", None), Ok(()));
    assert_eq!(book.view(Scope::Project, "alpha").limit_usd, None);
}

#[test]
fn an_admin_override_wins_over_the_credential() {
    let mut book = Book::new(None, Tally::default());
    let payer = alice(Some(10.0));
    book.charge("alpha", Some(&payer), Source::Broker, 2.0);
    let mut limits = Limits::default();
    let lower = Change {
        limit: LimitChange::Set(Some(1.0)),
        reset: false,
    };
    book.apply(&mut limits, Scope::Identity, "alice", lower);
    book.set_limits(limits);
    assert_eq!(
        book.check("alpha", Some(&payer)).unwrap_err().limit_usd,
        1.0
    );
}

#[test]
fn listings_show_budgets_with_spend_or_settings() {
    let mut book = Book::new(Some(5.0), Tally::default());
    book.charge("alpha", Some(&alice(Some(3.0))), Source::Agent, 1.0);
    book.check("beta", Some(&alice(Some(3.0)))).unwrap();
    let mut limits = Limits::default();
    let change = Change {
        limit: LimitChange::Set(Some(2.0)),
        reset: false,
    };
    book.apply(&mut limits, Scope::Project, "gamma", change);
    book.set_limits(limits);
    let projects: Vec<String> = book
        .list(Scope::Project)
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(projects, ["alpha", "gamma"]);
    let identities = book.list(Scope::Identity);
    assert_eq!(identities.len(), 1);
    assert_eq!(identities[0].limit_usd, Some(3.0));
    assert_eq!(identities[0].limit_from, LimitFrom::Credential);
    assert_eq!(book.view(Scope::Project, "alpha").source, Some("agent"));
    assert_eq!(book.spent_sum(Scope::Project), 1.0);
    assert_eq!(book.spent_sum(Scope::Identity), 1.0);
}

#[test]
fn the_payer_of_a_project_is_set_and_cleared() {
    let mut book = Book::new(None, Tally::default());
    book.attribute("alpha", Some(alice(Some(1.0))));
    assert_eq!(book.payer_of("alpha"), Some(alice(Some(1.0))));
    assert_eq!(book.payer_of("beta"), None);
    book.attribute("alpha", None);
    assert_eq!(book.payer_of("alpha"), None);
}

#[test]
fn a_handed_over_file_leaves_the_rest_to_count() {
    let mut start = Tally::default();
    start.add("alpha", None, Source::Broker, 1.0);
    let mut book = Book::new(None, start.clone());
    book.charge("alpha", None, Source::Broker, 0.25);
    assert_eq!(book.own().project("alpha").broker, 1.25);
    book.hand_over(&start);
    assert_eq!(book.own().project("alpha").broker, 0.25);
}
