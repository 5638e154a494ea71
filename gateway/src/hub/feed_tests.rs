//! Tests of one client's delivery from the feed.

use super::*;
use crate::hub::budget::Outgoing;
use crate::hub::ClientId;
use crate::ws::close::CloseCode;

fn test_metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new().unwrap())
}

/// A client budget nothing goes over.
fn unbounded() -> Arc<ClientBudget> {
    super::super::budget::Budgets::new(usize::MAX, usize::MAX, test_metrics()).client()
}

fn push(feed: &Feed, seq: u64) {
    feed.push(Frame {
        seq,
        bytes: Bytes::from(format!("e{seq}")),
        audience: Audience::Everyone,
    });
}

fn uni(after_seq: u64, text: &str) -> Unicast {
    Unicast::Frame {
        after_seq,
        bytes: Bytes::from(text.to_string()).into(),
    }
}

async fn texts(client: &mut ClientFeed) -> Vec<String> {
    match client.next().await {
        Delivery::Frames(frames) => frames
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect(),
        other => panic!("expected frames, got {other:?}"),
    }
}

#[tokio::test]
async fn unicast_frames_interleave_in_child_order() {
    let feed = Arc::new(Feed::new(ReplayRing::new(100, 10_000, 0)));
    let (tx, rx) = mpsc::channel(8);
    let mut client = ClientFeed::new(feed.clone(), 0, rx, unbounded(), test_metrics(), 2);
    // The child wrote: e1, response, e2, e3.
    push(&feed, 1);
    tx.send(uni(1, "r")).await.unwrap();
    push(&feed, 2);
    push(&feed, 3);
    assert_eq!(texts(&mut client).await, ["e1", "r", "e2", "e3"]);
    // A response before any event the client has seen goes first.
    tx.send(uni(3, "r2")).await.unwrap();
    push(&feed, 4);
    assert_eq!(texts(&mut client).await, ["r2", "e4"]);
    assert_eq!(client.cursor(), 4);
}

#[tokio::test]
async fn waits_for_new_events_and_closes_on_request() {
    let feed = Arc::new(Feed::new(ReplayRing::new(100, 10_000, 0)));
    let (tx, rx) = mpsc::channel(8);
    let mut client = ClientFeed::new(feed.clone(), 0, rx, unbounded(), test_metrics(), 2);
    let pusher = {
        let feed = feed.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            push(&feed, 1);
        })
    };
    assert_eq!(texts(&mut client).await, ["e1"]);
    pusher.await.unwrap();
    push(&feed, 2);
    tx.send(Unicast::Close {
        after_seq: 1,
        code: CloseCode::GoingAway,
        reason: "bye".into(),
    })
    .await
    .unwrap();
    // The close is due before e2, so e2 is not delivered.
    assert_eq!(
        client.next().await,
        Delivery::Close {
            code: CloseCode::GoingAway,
            reason: "bye".into()
        }
    );
    drop(tx);
}

#[tokio::test]
async fn a_lagging_client_is_caught_up_then_dropped_once_evicted() {
    let feed = Arc::new(Feed::new(ReplayRing::new(4, 10_000, 0)));
    let (_tx, rx) = mpsc::channel(8);
    let metrics = test_metrics();
    let mut slow = ClientFeed::new(feed.clone(), 0, rx, unbounded(), metrics.clone(), 2);
    for seq in 1..=4 {
        push(&feed, seq);
    }
    assert_eq!(
        texts(&mut slow).await,
        ["e1", "e2", "e3", "e4"],
        "caught up from the ring"
    );
    for seq in 5..=10 {
        push(&feed, seq);
    }
    match slow.next().await {
        Delivery::Close { code, reason } => {
            assert_eq!(code, CloseCode::Lagged);
            assert!(reason.contains("fell behind"), "{reason}");
            assert_eq!(metrics.slow_client_disconnects.get(), 1);
        }
        other => panic!("expected a close, got {other:?}"),
    }
}

#[tokio::test]
async fn resume_cursor_and_gap() {
    let feed = Feed::new(ReplayRing::new(3, 10_000, 0));
    for seq in 1..=5 {
        push(&feed, seq);
    }
    assert_eq!(feed.start_cursor(None), (5, false));
    assert_eq!(feed.start_cursor(Some(2)), (2, false));
    assert_eq!(feed.start_cursor(Some(1)), (2, true));
    assert_eq!(feed.start_cursor(Some(9)), (5, false));
}

#[tokio::test]
async fn zi_clients_get_their_own_gap_free_sequence_and_event_mode() {
    let feed = Arc::new(Feed::new(ReplayRing::new(100, 10_000, 0)));
    let event = |seq: u64| Frame {
        seq,
        bytes: Bytes::from(format!(
            r#"{{"version":1,"type":"session_event","event":{{}},"seq":{seq}}}"#
        )),
        audience: Audience::Everyone,
    };
    let (tx, rx) = mpsc::channel(8);
    let mut client = ClientFeed::new(feed.clone(), 0, rx, unbounded(), test_metrics(), 2)
        .with_dialect(sequenced());
    feed.push(event(1));
    tx.send(uni(1, r#"{"version":1,"type":"response"}"#))
        .await
        .unwrap();
    tx.send(Unicast::Events {
        after_seq: 1,
        all: false,
    })
    .await
    .unwrap();
    feed.push(event(2));
    tx.send(uni(2, r#"{"version":1,"type":"response","id":"b"}"#))
        .await
        .unwrap();
    let frames = texts(&mut client).await;
    assert_eq!(
        frames,
        [
            r#"{"version":1,"sequence":1,"type":"session_event","event":{},"seq":1}"#,
            r#"{"version":1,"sequence":2,"type":"response"}"#,
            r#"{"version":1,"sequence":3,"type":"response","id":"b"}"#,
        ],
        "event 2 is suppressed and leaves no gap"
    );
    assert_eq!(client.cursor(), 2);
    // Another client of the same feed counts from 1 and sees both.
    let (_tx2, rx2) = mpsc::channel(8);
    let mut other = ClientFeed::new(feed.clone(), 0, rx2, unbounded(), test_metrics(), 2)
        .with_dialect(sequenced());
    let frames = texts(&mut other).await;
    assert_eq!(frames.len(), 2);
    assert!(frames[1].starts_with(r#"{"version":1,"sequence":2,"type":"session_event""#));
}

#[tokio::test]
async fn hub_gone_closes_the_client() {
    let feed = Arc::new(Feed::new(ReplayRing::new(4, 10_000, 0)));
    let (tx, rx) = mpsc::channel(8);
    let mut client = ClientFeed::new(feed, 0, rx, unbounded(), test_metrics(), 2);
    drop(tx);
    assert!(matches!(
        client.next().await,
        Delivery::Close {
            code: CloseCode::GoingAway,
            ..
        }
    ));
}

#[tokio::test]
async fn own_runs_skip_other_clients_runs_live_and_on_replay() {
    let feed = Arc::new(Feed::new(ReplayRing::new(100, 10_000, 0)));
    let run = |seq: u64, members: &[u64]| Frame {
        seq,
        bytes: Bytes::from(format!("r{seq}")),
        audience: Audience::Run(members.iter().copied().map(ClientId::named).collect()),
    };
    push(&feed, 1);
    feed.push(run(2, &[7]));
    feed.push(run(3, &[8]));
    feed.push(run(4, &[7, 8]));
    push(&feed, 5);
    let (_tx, rx) = mpsc::channel(8);
    let mut mine = ClientFeed::new(feed.clone(), 0, rx, unbounded(), test_metrics(), 2)
        .with_owner(Some(ClientId::named(7)));
    assert_eq!(texts(&mut mine).await, ["e1", "r2", "r4", "e5"]);
    assert_eq!(mine.cursor(), 5, "skipped events still move the cursor");
    // Switching in order: from event 6 on, everything.
    let (tx, rx) = mpsc::channel(8);
    let mut other = ClientFeed::new(feed.clone(), 1, rx, unbounded(), test_metrics(), 2)
        .with_owner(Some(ClientId::named(9)));
    tx.send(Unicast::OwnRuns {
        after_seq: 3,
        owner: None,
    })
    .await
    .unwrap();
    feed.push(run(6, &[7]));
    assert_eq!(texts(&mut other).await, ["r4", "e5", "r6"]);
}

/// The dialect that numbers frames per connection (Zi).
fn sequenced() -> crate::dialect::Dialect {
    use clap::ValueEnum;
    let all = crate::dialect::Dialect::value_variants();
    *all.iter()
        .find(|dialect| dialect.rules().sequenced())
        .unwrap()
}

#[tokio::test]
async fn a_rewind_sends_the_ring_again_before_what_follows_it() {
    // The ring keeps 3 events: e1 was evicted by e4.
    let feed = Arc::new(Feed::new(ReplayRing::new(3, 10_000, 0)));
    let (tx, rx) = mpsc::channel(8);
    let mut client = ClientFeed::new(feed.clone(), 0, rx, unbounded(), test_metrics(), 8);
    for seq in 1..=2 {
        push(&feed, seq);
    }
    assert_eq!(texts(&mut client).await, ["e1", "e2"]);
    push(&feed, 3);
    push(&feed, 4);
    // A session/load at seq 4: the history the ring has, then the answer;
    // what this connection was sent already is not sent again.
    tx.send(Unicast::Rewind {
        after_seq: 4,
        to: 0,
    })
    .await
    .unwrap();
    tx.send(uni(4, "loaded")).await.unwrap();
    let mut seen = Vec::new();
    while !seen.contains(&"loaded".to_string()) {
        seen.extend(texts(&mut client).await);
    }
    assert_eq!(seen, ["e3", "e4", "loaded"]);
    push(&feed, 5);
    assert_eq!(texts(&mut client).await, ["e5"]);
}

#[tokio::test]
async fn a_muted_client_takes_events_unsent_and_a_rewind_sends_them_later() {
    let feed = Arc::new(Feed::new(ReplayRing::new(8, 10_000, 0)));
    let (tx, rx) = mpsc::channel(8);
    let mut client =
        ClientFeed::new(feed.clone(), 0, rx, unbounded(), test_metrics(), 8).muted(true);
    push(&feed, 1);
    push(&feed, 2);
    // Its own answers still come, in order, while events are held back.
    tx.send(uni(2, "initialized")).await.unwrap();
    assert_eq!(texts(&mut client).await, ["initialized"]);
    push(&feed, 3);
    // It opens the session resuming after seq 1: 2 and 3, then the answer.
    tx.send(Unicast::Mute {
        after_seq: 3,
        on: false,
    })
    .await
    .unwrap();
    tx.send(Unicast::Rewind {
        after_seq: 3,
        to: 1,
    })
    .await
    .unwrap();
    tx.send(uni(3, "resumed")).await.unwrap();
    let mut seen = Vec::new();
    while !seen.contains(&"resumed".to_string()) {
        seen.extend(texts(&mut client).await);
    }
    assert_eq!(seen, ["e2", "e3", "resumed"]);
    // Muted again (it closed the session): nothing until it opens again.
    tx.send(Unicast::Mute {
        after_seq: 3,
        on: true,
    })
    .await
    .unwrap();
    push(&feed, 4);
    tx.send(uni(4, "closed")).await.unwrap();
    assert_eq!(texts(&mut client).await, ["closed"]);
    push(&feed, 5);
    tx.send(Unicast::Mute {
        after_seq: 5,
        on: false,
    })
    .await
    .unwrap();
    push(&feed, 6);
    assert_eq!(texts(&mut client).await, ["e6"]);
}

fn bounded(client_cap: usize) -> (Arc<super::super::budget::Budgets>, Arc<ClientBudget>) {
    let budgets = super::super::budget::Budgets::new(client_cap, usize::MAX, test_metrics());
    let client = budgets.client();
    (budgets, client)
}

fn charged(budget: &Arc<ClientBudget>, after_seq: u64, len: usize) -> Unicast {
    let bytes = Bytes::from(vec![b'r'; len]);
    let charge = budget.charge(len).unwrap();
    Unicast::Frame {
        after_seq,
        bytes: Outgoing::new(bytes, charge),
    }
}

#[tokio::test]
async fn frames_count_until_the_writer_drops_them() {
    let feed = Arc::new(Feed::new(ReplayRing::new(100, 10_000, 0)));
    let (budgets, budget) = bounded(1000);
    let (tx, rx) = mpsc::channel(8);
    let mut client = ClientFeed::new(feed.clone(), 0, rx, budget.clone(), test_metrics(), 8);
    tx.send(charged(&budget, 0, 100)).await.unwrap();
    push(&feed, 1);
    assert_eq!(budget.used(), 100, "a queued reply counts");
    let Delivery::Frames(frames) = client.next().await else {
        panic!("expected frames");
    };
    assert_eq!(budget.used(), 102, "the event in hand counts too");
    drop(frames);
    assert_eq!((budget.used(), budgets.total()), (0, 0));
}

#[tokio::test]
async fn a_client_over_its_bytes_is_closed_with_the_slow_client_code_and_freed() {
    let feed = Arc::new(Feed::new(ReplayRing::new(100, 10_000, 0)));
    let (budgets, budget) = bounded(100);
    let (tx, rx) = mpsc::channel(8);
    let mut client = ClientFeed::new(feed.clone(), 0, rx, budget.clone(), test_metrics(), 8);
    tx.send(charged(&budget, 0, 80)).await.unwrap();
    // The hub cannot charge the next reply: the client is over.
    assert!(budget.charge(30).is_err());
    match client.next().await {
        Delivery::Close { code, reason } => {
            assert_eq!(code, CloseCode::Lagged);
            assert!(reason.contains("--client-buffer-bytes"), "{reason}");
        }
        other => panic!("expected a close, got {other:?}"),
    }
    assert_eq!(budgets.total(), 0, "what was queued is dropped");
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_writer_is_woken_when_its_client_goes_over() {
    let feed = Arc::new(Feed::new(ReplayRing::new(100, 10_000, 0)));
    let (_budgets, budget) = bounded(100);
    let (_tx, rx) = mpsc::channel(8);
    let mut client = ClientFeed::new(feed, 0, rx, budget.clone(), test_metrics(), 8);
    let next = tokio::spawn(async move { client.next().await });
    tokio::task::yield_now().await;
    assert!(budget.check(101).is_err());
    let delivery = tokio::time::timeout(std::time::Duration::from_secs(1), next)
        .await
        .expect("woken")
        .unwrap();
    assert!(matches!(
        delivery,
        Delivery::Close {
            code: CloseCode::Lagged,
            ..
        }
    ));
}

#[tokio::test]
async fn an_event_the_client_cannot_take_closes_it() {
    let feed = Arc::new(Feed::new(ReplayRing::new(100, 10_000, 0)));
    let (_budgets, budget) = bounded(50);
    let (_tx, rx) = mpsc::channel(8);
    let mut client = ClientFeed::new(feed.clone(), 0, rx, budget, test_metrics(), 8);
    feed.push(Frame {
        seq: 1,
        bytes: Bytes::from(vec![b'e'; 60]),
        audience: Audience::Everyone,
    });
    assert!(matches!(
        client.next().await,
        Delivery::Close {
            code: CloseCode::Lagged,
            ..
        }
    ));
}

#[tokio::test]
async fn events_in_hand_are_bounded_in_bytes_but_one_always_passes() {
    let feed = Arc::new(Feed::new(ReplayRing::new(100, 64 << 20, 0)));
    let (_budgets, budget) = bounded(64 << 20);
    let (_tx, rx) = mpsc::channel(8);
    let mut client = ClientFeed::new(feed.clone(), 0, rx, budget.clone(), test_metrics(), 8);
    let big = BATCH_BYTES * 3 / 5;
    for seq in 1..=3 {
        feed.push(Frame {
            seq,
            bytes: Bytes::from(vec![b'e'; big]),
            audience: Audience::Everyone,
        });
    }
    feed.push(Frame {
        seq: 4,
        bytes: Bytes::from(vec![b'e'; 2 * BATCH_BYTES]),
        audience: Audience::Everyone,
    });
    let mut batches = Vec::new();
    while client.cursor() < 4 {
        let Delivery::Frames(frames) = client.next().await else {
            panic!("expected frames");
        };
        assert!(budget.used() <= 2 * BATCH_BYTES);
        batches.push(frames.len());
    }
    assert_eq!(batches, [1, 1, 1, 1]);
}
