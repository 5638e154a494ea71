//! Tests of one client's delivery from the feed.

use super::*;

fn test_metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new().unwrap())
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
        bytes: Bytes::from(text.to_string()),
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
    let mut client = ClientFeed::new(feed.clone(), 0, rx, test_metrics(), 2);
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
    let mut client = ClientFeed::new(feed.clone(), 0, rx, test_metrics(), 2);
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
        code: 1001,
        reason: "bye".into(),
    })
    .await
    .unwrap();
    // The close is due before e2, so e2 is not delivered.
    assert_eq!(
        client.next().await,
        Delivery::Close {
            code: 1001,
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
    let mut slow = ClientFeed::new(feed.clone(), 0, rx, metrics.clone(), 2);
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
            assert_eq!(code, CLOSE_LAGGED);
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
    let mut client =
        ClientFeed::new(feed.clone(), 0, rx, test_metrics(), 2).with_dialect(sequenced());
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
    let mut other =
        ClientFeed::new(feed.clone(), 0, rx2, test_metrics(), 2).with_dialect(sequenced());
    let frames = texts(&mut other).await;
    assert_eq!(frames.len(), 2);
    assert!(frames[1].starts_with(r#"{"version":1,"sequence":2,"type":"session_event""#));
}

#[tokio::test]
async fn hub_gone_closes_the_client() {
    let feed = Arc::new(Feed::new(ReplayRing::new(4, 10_000, 0)));
    let (tx, rx) = mpsc::channel(8);
    let mut client = ClientFeed::new(feed, 0, rx, test_metrics(), 2);
    drop(tx);
    assert!(matches!(
        client.next().await,
        Delivery::Close { code: 1001, .. }
    ));
}

#[tokio::test]
async fn own_runs_skip_other_clients_runs_live_and_on_replay() {
    let feed = Arc::new(Feed::new(ReplayRing::new(100, 10_000, 0)));
    let run = |seq: u64, members: &[u64]| Frame {
        seq,
        bytes: Bytes::from(format!("r{seq}")),
        audience: Audience::Run(Arc::from(members)),
    };
    push(&feed, 1);
    feed.push(run(2, &[7]));
    feed.push(run(3, &[8]));
    feed.push(run(4, &[7, 8]));
    push(&feed, 5);
    let (_tx, rx) = mpsc::channel(8);
    let mut mine = ClientFeed::new(feed.clone(), 0, rx, test_metrics(), 2).with_owner(Some(7));
    assert_eq!(texts(&mut mine).await, ["e1", "r2", "r4", "e5"]);
    assert_eq!(mine.cursor(), 5, "skipped events still move the cursor");
    // Switching in order: from event 6 on, everything.
    let (tx, rx) = mpsc::channel(8);
    let mut other = ClientFeed::new(feed.clone(), 1, rx, test_metrics(), 2).with_owner(Some(9));
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
    *all.iter().find(|dialect| dialect.sequenced()).unwrap()
}

#[tokio::test]
async fn a_rewind_sends_the_ring_again_before_what_follows_it() {
    // The ring keeps 3 events: e1 was evicted by e4.
    let feed = Arc::new(Feed::new(ReplayRing::new(3, 10_000, 0)));
    let (tx, rx) = mpsc::channel(8);
    let mut client = ClientFeed::new(feed.clone(), 0, rx, test_metrics(), 8);
    for seq in 1..=2 {
        push(&feed, seq);
    }
    assert_eq!(texts(&mut client).await, ["e1", "e2"]);
    push(&feed, 3);
    push(&feed, 4);
    // A session/load at seq 4: the history the ring has, then the answer.
    tx.send(Unicast::Rewind { after_seq: 4 }).await.unwrap();
    tx.send(uni(4, "loaded")).await.unwrap();
    let mut seen = Vec::new();
    while !seen.contains(&"loaded".to_string()) {
        seen.extend(texts(&mut client).await);
    }
    assert_eq!(seen, ["e3", "e4", "e2", "e3", "e4", "loaded"]);
    push(&feed, 5);
    assert_eq!(texts(&mut client).await, ["e5"]);
}
