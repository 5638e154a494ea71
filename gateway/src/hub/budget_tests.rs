//! Tests of the outbox byte bounds.

use super::*;

fn budgets(client_cap: usize, total_cap: usize) -> (Arc<Budgets>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new().unwrap());
    (
        Budgets::new(client_cap, total_cap, metrics.clone()),
        metrics,
    )
}

fn closes(metrics: &Metrics, why: Overflow) -> u64 {
    metrics
        .client_buffer_closes
        .with_label_values(&[why.as_str()])
        .get()
}

#[test]
fn charges_count_exactly_while_they_live() {
    let (budgets, metrics) = budgets(100, 1000);
    let a = budgets.client();
    let b = budgets.client();
    let one = a.charge(40).unwrap();
    let two = a.charge(60).unwrap();
    let three = b.charge(7).unwrap();
    assert_eq!((a.used(), b.used(), budgets.total()), (100, 7, 107));
    assert_eq!(metrics.client_buffer_bytes.get(), 107);
    drop(one);
    assert_eq!((a.used(), budgets.total()), (60, 67));
    drop((two, three));
    assert_eq!((a.used(), b.used(), budgets.total()), (0, 0, 0));
    assert_eq!(metrics.client_buffer_bytes.get(), 0);
}

#[test]
fn a_client_over_its_bound_is_closed_and_its_charge_undone() {
    let (budgets, metrics) = budgets(100, 1000);
    let a = budgets.client();
    let held = a.charge(90).unwrap();
    assert_eq!(a.charge(11).err(), Some(Overflow::Client));
    assert_eq!(a.overflow(), Some(Overflow::Client));
    assert_eq!(a.used(), 90, "the refused frame is not counted");
    assert_eq!(
        a.charge(1).err(),
        Some(Overflow::Client),
        "a closed client takes nothing more"
    );
    assert_eq!(closes(&metrics, Overflow::Client), 1);
    assert_eq!(metrics.slow_client_disconnects.get(), 1);
    drop(held);
    assert_eq!(budgets.total(), 0);
}

#[test]
fn exactly_the_bound_fits() {
    let (budgets, _) = budgets(100, 100);
    let a = budgets.client();
    let _all = a.charge(100).unwrap();
    assert_eq!(a.overflow(), None);
}

#[test]
fn over_the_total_the_largest_outbox_goes_not_the_reader() {
    let (budgets, metrics) = budgets(100, 150);
    let hog = budgets.client();
    let reader = budgets.client();
    let _hogged = hog.charge(95).unwrap();
    let _small = reader.charge(10).unwrap();
    // The reader's next reply takes the total over 150: the hog goes.
    let reply = reader.charge(60).unwrap();
    assert_eq!(hog.overflow(), Some(Overflow::Total));
    assert_eq!(reader.overflow(), None);
    assert_eq!(reply.len, 60);
    assert_eq!(closes(&metrics, Overflow::Total), 1);
}

#[test]
fn over_the_total_the_charging_client_goes_when_it_holds_the_most() {
    let (budgets, _) = budgets(150, 150);
    let small = budgets.client();
    let big = budgets.client();
    let _a = small.charge(50).unwrap();
    let _b = big.charge(90).unwrap();
    assert_eq!(big.charge(20).err(), Some(Overflow::Total));
    assert_eq!(small.overflow(), None, "a smaller outbox is not closed");
    assert_eq!(big.used(), 90);
}

#[test]
fn bytes_of_closed_clients_count_as_leaving() {
    let (budgets, _) = budgets(100, 150);
    let hog = budgets.client();
    let other = budgets.client();
    let reader = budgets.client();
    let _h = hog.charge(100).unwrap();
    assert_eq!(hog.charge(1).err(), Some(Overflow::Client));
    let _o = other.charge(40).unwrap();
    // 100 + 40 + 20 > 150, but the hog's 100 are on their way out.
    let _r = reader.charge(20).unwrap();
    assert_eq!(other.overflow(), None);
}

#[test]
fn check_refuses_before_anything_is_made() {
    let (budgets, _) = budgets(100, 1000);
    let a = budgets.client();
    let _held = a.charge(50).unwrap();
    assert_eq!(a.check(50), Ok(()));
    assert_eq!(a.check(51), Err(Overflow::Client));
    assert_eq!(a.overflow(), Some(Overflow::Client));
    assert_eq!(a.used(), 50);
}

#[tokio::test(start_paused = true)]
async fn closing_wakes_the_writer() {
    let (budgets, _) = budgets(10, 1000);
    let a = budgets.client();
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move { a.closed().await })
    };
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    assert!(a.charge(11).is_err());
    tokio::time::timeout(std::time::Duration::from_secs(1), waiter)
        .await
        .expect("woken")
        .unwrap();
}

#[test]
fn a_rewritten_frame_is_counted_at_its_new_length() {
    let (budgets, _) = budgets(100, 1000);
    let a = budgets.client();
    let frame = Outgoing::new(Bytes::from_static(b"abc"), a.charge(3).unwrap());
    let frame = frame.map(|_| Bytes::from_static(b"abcdefgh"));
    assert_eq!(a.used(), 8);
    let frame = frame.map(|_| Bytes::from_static(b"a"));
    assert_eq!(a.used(), 1);
    let (bytes, charge) = frame.into_parts();
    assert_eq!(&bytes[..], b"a");
    drop(charge);
    assert_eq!(budgets.total(), 0);
}

#[test]
fn a_dropped_client_leaves_the_registry() {
    let (budgets, _) = budgets(100, 1000);
    let a = budgets.client();
    assert_eq!(budgets.registry().len(), 1);
    drop(a);
    assert_eq!(budgets.registry().len(), 0);
}

#[test]
fn every_overflow_is_a_label_the_metrics_declare() {
    let labels: Vec<&str> = Overflow::ALL.iter().map(|why| why.as_str()).collect();
    assert_eq!(labels, crate::metrics::CLIENT_BUFFER_CLOSES);
}
