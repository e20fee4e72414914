//! Where a node's log lines go without ever stopping the node: [`LogSink`], a bounded queue in
//! front of standard error, written by a thread of its own.
//!
//! Invariants:
//! - writing a log line never blocks and never panics: a line is handed to the queue with a
//!   non-blocking send; a full queue (a slow or stalled reader of stderr) or a closed one drops
//!   the line and counts it (`idmint_log_lines_dropped_total`, [`lines_dropped`]);
//! - a failed write to stderr (a closed pipe: `idmint serve 2>&1 | head -3`) drops the line
//!   and counts it; the writing thread goes on, so the node, its signal handling and its
//!   requests never depend on anyone reading the log.
//!
//! Use it as the writer of a `tracing-subscriber` formatter:
//! `fmt().with_writer(move || sink.line())` (any `Fn() -> impl io::Write` is one).

use prometheus_client::metrics::counter::Counter;
use std::io::{self, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::LazyLock;

/// Lines queued at most; past it lines are dropped (and counted).
pub const QUEUED_LINES: usize = 4096;

/// The one count of dropped lines of the process (every node's metrics register it).
static DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Lines dropped so far by every [`LogSink`] of the process.
pub fn lines_dropped() -> u64 {
    DROPPED.get()
}

/// The counter behind [`lines_dropped`], for a metrics registry.
pub(crate) fn dropped_counter() -> Counter {
    DROPPED.clone()
}

/// A log destination that never blocks its callers. See the module docs.
#[derive(Debug, Clone)]
pub struct LogSink {
    queue: SyncSender<Vec<u8>>,
}

impl LogSink {
    /// Lines to standard error, written by a thread started now.
    pub fn stderr() -> io::Result<LogSink> {
        LogSink::to(io::stderr())
    }

    /// Lines to `out`, written by a thread started now.
    pub fn to(out: impl Write + Send + 'static) -> io::Result<LogSink> {
        let (queue, lines) = sync_channel(QUEUED_LINES);
        std::thread::Builder::new()
            .name("idmint-log".into())
            .spawn(move || write_lines(lines, out))?;
        Ok(LogSink { queue })
    }

    /// A writer for one log event: what it is given goes to the queue, as one line, when it is
    /// dropped.
    pub fn line(&self) -> LogLine {
        LogLine {
            queue: self.queue.clone(),
            buf: Vec::new(),
        }
    }
}

/// One log event being written ([`LogSink::line`]).
#[derive(Debug)]
pub struct LogLine {
    queue: SyncSender<Vec<u8>>,
    buf: Vec<u8>,
}

impl Write for LogLine {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        match self.queue.try_send(std::mem::take(&mut self.buf)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                DROPPED.inc();
            }
        }
    }
}

/// The writing thread: every line queued, in order; a failed write drops that line.
fn write_lines(lines: Receiver<Vec<u8>>, mut out: impl Write) {
    for line in lines {
        if out.write_all(&line).and_then(|()| out.flush()).is_err() {
            DROPPED.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A reader that went away: every write fails, as on a closed pipe.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A reader that never reads: every write blocks.
    struct Stalled(std::sync::mpsc::Receiver<()>);

    impl Write for Stalled {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            let _ = self.0.recv();
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_or_stalled_reader_never_blocks_or_panics_the_writer() {
        let before = lines_dropped();
        let sink = LogSink::to(Closed).unwrap();
        for _ in 0..10 {
            writeln!(sink.line(), "a line").unwrap();
        }
        // The writing thread drops all ten, in its own time.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while lines_dropped() < before + 10 {
            assert!(std::time::Instant::now() < deadline);
            std::thread::yield_now();
        }

        let (_release, wait) = std::sync::mpsc::channel();
        let stalled = LogSink::to(Stalled(wait)).unwrap();
        let before = lines_dropped();
        // More than the queue holds, and none of these calls blocks.
        for _ in 0..QUEUED_LINES + 100 {
            writeln!(stalled.line(), "a line").unwrap();
        }
        assert!(lines_dropped() >= before + 99);
    }
}
