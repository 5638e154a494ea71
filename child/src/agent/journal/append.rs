//! Appending that never tears: each line is written and synced whole, or
//! the file is cut back to the last good offset and the line waits, with
//! every later one, in a queue that the next append (or the journal's drop)
//! writes first. The file is thus always a sequence of whole entries, and
//! the queue plus the file always hold every change, in order.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};

use nix::fcntl::Flock;

/// The operations appending needs; a file opened with `O_APPEND`, or a
/// fault-injecting fake in tests.
pub(super) trait Sink {
    /// Writes at the end of the file.
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()>;
    fn sync(&mut self) -> io::Result<()>;
    /// Cuts the file to `len` bytes.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
}

impl Sink for Flock<File> {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut file: &File = self;
        file.write_all(bytes)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }
}

/// Why lines are still waiting.
#[derive(Debug)]
pub(super) struct Stalled {
    pub source: io::Error,
    /// Lines kept in memory, not yet on disk.
    pub pending: usize,
}

/// Appends lines to a [`Sink`], keeping those the disk refused.
#[derive(Debug)]
pub(super) struct Appender<S> {
    sink: S,
    /// Bytes of whole, synced lines: where a failed write is cut back to.
    len: u64,
    /// Lines not on disk yet, oldest first; always written before newer ones.
    pending: VecDeque<Vec<u8>>,
    /// The file may extend past `len` (a cut back failed too): cut again
    /// before writing anything.
    dirty: bool,
}

impl<S: Sink> Appender<S> {
    /// An appender for a sink whose content is `len` bytes of whole lines.
    pub fn new(sink: S, len: u64) -> Appender<S> {
        Appender {
            sink,
            len,
            pending: VecDeque::new(),
            dirty: false,
        }
    }

    /// Queues `line` and writes everything queued.
    pub fn append(&mut self, line: Vec<u8>) -> Result<(), Stalled> {
        self.pending.push_back(line);
        self.flush()
    }

    /// Writes the queued lines in order, each synced; stops at the first
    /// failure, with the file cut back to its last whole line.
    pub fn flush(&mut self) -> Result<(), Stalled> {
        let stalled = |source, pending| Stalled { source, pending };
        if self.dirty {
            self.sink
                .truncate(self.len)
                .map_err(|e| stalled(e, self.pending.len()))?;
            self.dirty = false;
        }
        while let Some(line) = self.pending.front() {
            let written = self.sink.write_all(line).and_then(|()| self.sink.sync());
            if let Err(source) = written {
                // Cut the partial line off now; if even that fails, retry
                // before the next write.
                self.dirty = self.sink.truncate(self.len).is_err();
                return Err(stalled(source, self.pending.len()));
            }
            self.len += line.len() as u64;
            self.pending.pop_front();
        }
        Ok(())
    }

    /// Lines waiting for the disk.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// An in-memory file that fails writes with ENOSPC past `capacity`
    /// bytes (after writing what fits, as a real file system does), and
    /// whose syncs or cuts can be made to fail.
    #[derive(Clone, Default)]
    pub struct FakeDisk(Rc<RefCell<Disk>>);

    #[derive(Default)]
    pub struct Disk {
        pub bytes: Vec<u8>,
        pub capacity: Option<usize>,
        pub fail_sync: bool,
        pub fail_truncate: bool,
    }

    impl FakeDisk {
        pub fn disk(&self) -> std::cell::RefMut<'_, Disk> {
            self.0.borrow_mut()
        }
    }

    impl Sink for FakeDisk {
        fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
            let mut disk = self.disk();
            let room = disk.capacity.map_or(usize::MAX, |c| c - disk.bytes.len());
            let fits = bytes.len().min(room);
            disk.bytes.extend_from_slice(&bytes[..fits]);
            if fits < bytes.len() {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            Ok(())
        }

        fn sync(&mut self) -> io::Result<()> {
            if self.disk().fail_sync {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            Ok(())
        }

        fn truncate(&mut self, len: u64) -> io::Result<()> {
            let mut disk = self.disk();
            if disk.fail_truncate {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            disk.bytes.truncate(len as usize);
            Ok(())
        }
    }

    fn line(text: &str) -> Vec<u8> {
        format!("{text}\n").into_bytes()
    }

    #[test]
    fn a_full_disk_keeps_the_file_whole_and_the_lines_queued() {
        let disk = FakeDisk::default();
        let mut appender = Appender::new(disk.clone(), 0);
        appender.append(line("one")).unwrap();
        disk.disk().capacity = Some(6);

        let err = appender.append(line("two")).unwrap_err();
        assert_eq!(err.source.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(err.pending, 1);
        assert_eq!(disk.disk().bytes, b"one\n", "the partial line is cut off");
        let err = appender.append(line("three")).unwrap_err();
        assert_eq!(err.pending, 2);
        assert_eq!(disk.disk().bytes, b"one\n");

        disk.disk().capacity = None;
        appender.append(line("four")).unwrap();
        assert_eq!(appender.pending(), 0);
        assert_eq!(disk.disk().bytes, b"one\ntwo\nthree\nfour\n");
    }

    #[test]
    fn a_failed_sync_cuts_the_line_and_retries_it() {
        let disk = FakeDisk::default();
        let mut appender = Appender::new(disk.clone(), 0);
        disk.disk().fail_sync = true;
        let err = appender.append(line("one")).unwrap_err();
        assert_eq!(err.source.raw_os_error(), Some(libc::EIO));
        assert_eq!(disk.disk().bytes, b"");
        disk.disk().fail_sync = false;
        appender.flush().unwrap();
        assert_eq!(disk.disk().bytes, b"one\n");
    }

    #[test]
    fn a_failed_cut_is_redone_before_the_next_write() {
        let disk = FakeDisk::default();
        let mut appender = Appender::new(disk.clone(), 0);
        appender.append(line("one")).unwrap();
        {
            let mut d = disk.disk();
            d.capacity = Some(6);
            d.fail_truncate = true;
        }
        appender.append(line("two")).unwrap_err();
        assert_eq!(disk.disk().bytes, b"one\ntw", "torn, for now");

        // Still cannot cut: nothing is written after the torn bytes.
        disk.disk().capacity = None;
        appender.append(line("three")).unwrap_err();
        assert_eq!(disk.disk().bytes, b"one\ntw");

        disk.disk().fail_truncate = false;
        appender.flush().unwrap();
        assert_eq!(disk.disk().bytes, b"one\ntwo\nthree\n");
    }
}
