//! The replay ring: the most recent events of one project, bounded by count
//! and by bytes, each stamped with its `seq`. The byte bound is never below
//! two maximum frames ([`byte_budget`]), so an event stays until at least
//! one maximum frame of newer events followed it: a client busy sending the
//! previous event, however big, still finds it.
//!
//! Clients read it through a cursor (the last `seq` they have), so live
//! delivery, catch-up of a slow client and replay after a reconnect are all
//! the same operation: "give me what follows my cursor".

use std::collections::VecDeque;

use bytes::Bytes;

use super::runs::Audience;

/// One event as sent to clients (a JSON line without the LF, `seq` inside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub seq: u64,
    pub bytes: Bytes,
    /// Who gets it among clients that receive their own runs only.
    pub audience: Audience,
}

/// The frames after a cursor were partly evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evicted {
    /// The oldest `seq` still retained (or the next one, if empty).
    pub first_retained: u64,
}

/// The ring's byte bound for `replay_bytes` (`--replay-bytes`) and the
/// largest event a child may write (`--max-frame-bytes`): at least two of
/// those. With less, one big event evicts the one before it while a
/// client that keeps up is still writing that one, and the client is
/// closed as fallen behind although it never was.
pub fn byte_budget(replay_bytes: usize, max_frame: usize) -> usize {
    replay_bytes.max(max_frame.saturating_mul(2))
}

/// A bounded FIFO of frames with strictly increasing `seq`.
#[derive(Debug)]
pub struct ReplayRing {
    frames: VecDeque<Frame>,
    bytes: usize,
    max_frames: usize,
    max_bytes: usize,
    /// The `seq` of the newest frame ever pushed (0 before the first).
    last_seq: u64,
    /// Frames dropped to respect the bounds, for metrics.
    evicted: u64,
}

impl ReplayRing {
    /// `max_frames` and `max_bytes` are both at least 1 (smaller values
    /// are raised: a ring must hold the newest frame).
    pub fn new(max_frames: usize, max_bytes: usize, last_seq: u64) -> ReplayRing {
        ReplayRing {
            frames: VecDeque::new(),
            bytes: 0,
            max_frames: max_frames.max(1),
            max_bytes: max_bytes.max(1),
            last_seq,
            evicted: 0,
        }
    }

    /// Appends a frame; `seq` must exceed every earlier one.
    pub fn push(&mut self, frame: Frame) {
        debug_assert!(frame.seq > self.last_seq);
        self.last_seq = frame.seq;
        self.bytes += frame.bytes.len();
        self.frames.push_back(frame);
        // Keep at least the newest frame even when it alone is too big.
        while self.frames.len() > 1
            && (self.frames.len() > self.max_frames || self.bytes > self.max_bytes)
        {
            if let Some(old) = self.frames.pop_front() {
                self.bytes -= old.bytes.len();
                self.evicted += 1;
            }
        }
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The oldest retained `seq`, or `last_seq + 1` when empty.
    pub fn first_seq(&self) -> u64 {
        self.frames.front().map_or(self.last_seq + 1, |f| f.seq)
    }

    /// Up to `limit` frames with `seq > after`, oldest first. An error when
    /// some frame after the cursor is no longer retained.
    pub fn after(&self, after: u64, limit: usize) -> Result<Vec<Frame>, Evicted> {
        let first = self.first_seq();
        if after + 1 < first && after < self.last_seq {
            return Err(Evicted {
                first_retained: first,
            });
        }
        // Seqs are consecutive within the ring, so the start is an offset.
        let skip = usize::try_from((after + 1).saturating_sub(first)).unwrap_or(usize::MAX);
        Ok(self.frames.iter().skip(skip).take(limit).cloned().collect())
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn evicted(&self) -> u64 {
        self.evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(seq: u64, len: usize) -> Frame {
        Frame {
            seq,
            bytes: Bytes::from(vec![b'x'; len]),
            audience: Audience::Everyone,
        }
    }

    fn seqs(frames: &[Frame]) -> Vec<u64> {
        frames.iter().map(|f| f.seq).collect()
    }

    #[test]
    fn reads_after_a_cursor_in_order_and_in_batches() {
        let mut ring = ReplayRing::new(10, 1000, 0);
        for seq in 1..=5 {
            ring.push(frame(seq, 1));
        }
        assert_eq!(seqs(&ring.after(0, 100).unwrap()), [1, 2, 3, 4, 5]);
        assert_eq!(seqs(&ring.after(2, 2).unwrap()), [3, 4]);
        assert!(ring.after(5, 100).unwrap().is_empty());
        assert!(
            ring.after(99, 100).unwrap().is_empty(),
            "a cursor from the future sees nothing"
        );
    }

    #[test]
    fn evicts_by_count_and_bytes_and_reports_gaps() {
        let mut ring = ReplayRing::new(3, 1000, 0);
        for seq in 1..=5 {
            ring.push(frame(seq, 1));
        }
        assert_eq!((ring.first_seq(), ring.last_seq(), ring.len()), (3, 5, 3));
        assert_eq!(ring.after(1, 10), Err(Evicted { first_retained: 3 }));
        assert_eq!(
            seqs(&ring.after(2, 10).unwrap()),
            [3, 4, 5],
            "cursor 2 misses nothing"
        );

        let mut ring = ReplayRing::new(100, 10, 0);
        ring.push(frame(1, 6));
        ring.push(frame(2, 6));
        assert_eq!((ring.len(), ring.bytes(), ring.evicted()), (1, 6, 1));
        ring.push(frame(3, 50));
        assert_eq!(
            seqs(&ring.after(2, 10).unwrap()),
            [3],
            "an oversized frame is still kept"
        );
    }

    #[test]
    fn big_events_wait_for_a_reader_busy_with_the_previous_one() {
        // A 15 MiB echo: the user message, a few deltas, the reply.
        let max_frame = 16 << 20;
        let big = 15 << 20;
        let mut ring = ReplayRing::new(10_000, byte_budget(8 << 20, max_frame), 0);
        ring.push(frame(1, big));
        // The reader took event 1 and is sending it; the rest arrives.
        let in_hand = 1;
        ring.push(frame(2, 40));
        for seq in 3..=6 {
            ring.push(frame(seq, big / 4));
        }
        ring.push(frame(7, big));
        ring.push(frame(8, 20));
        assert_eq!(
            seqs(&ring.after(in_hand, 100).unwrap()),
            [2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(ring.first_seq(), 2, "event 1 made room");
    }

    #[test]
    fn seq_continues_from_an_earlier_ring() {
        let mut ring = ReplayRing::new(10, 100, 41);
        assert_eq!((ring.first_seq(), ring.last_seq()), (42, 41));
        assert!(ring.after(41, 10).unwrap().is_empty());
        assert_eq!(
            ring.after(3, 10),
            Err(Evicted { first_retained: 42 }),
            "events 4..=41 lived in a ring that is gone"
        );
        ring.push(frame(42, 1));
        assert_eq!(seqs(&ring.after(41, 10).unwrap()), [42]);
    }
}
