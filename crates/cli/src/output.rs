//! Standard output of the client commands (`next`, `decode`, `status`, `sql`): one locked,
//! buffered writer for the whole command, and what a closed pipe means.
//!
//! A reader that stops early (`idmint next photos -n 10000 | head -1`) closes the pipe; the next
//! write fails with `BrokenPipe`. That is the reader's choice, not an error of ours: the command
//! ends quietly with exit code 0, as ripgrep does, rather than 141 (death by SIGPIPE), which
//! `set -o pipefail` scripts would take for a failure of `idmint`. Every write goes through
//! [`Out`], which turns `BrokenPipe` into [`StdoutError::Closed`] so `main` can tell it apart
//! from a broken pipe to a server (a real error).
//!
//! `serve` does not use this writer: it prints a line at a time while it runs, and never holds
//! the stdout lock.

use std::fmt;
use std::io::{self, BufWriter, StdoutLock, Write};

/// The buffered, locked standard output of one command.
pub struct Out {
    inner: BufWriter<StdoutLock<'static>>,
}

/// A failed write to standard output.
#[derive(Debug)]
pub enum StdoutError {
    /// The reader closed the pipe: the command stops quietly.
    Closed,
    /// Any other write error (disk full, ...).
    Failed(io::Error),
}

impl fmt::Display for StdoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StdoutError::Closed => f.write_str("standard output was closed"),
            StdoutError::Failed(e) => write!(f, "cannot write to standard output: {e}"),
        }
    }
}

impl std::error::Error for StdoutError {}

impl From<io::Error> for StdoutError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            StdoutError::Closed
        } else {
            StdoutError::Failed(e)
        }
    }
}

impl Out {
    /// Locks standard output for the rest of the process.
    pub fn new() -> Out {
        Out {
            inner: BufWriter::new(io::stdout().lock()),
        }
    }

    /// Writes `args` and a newline.
    pub fn line(&mut self, args: fmt::Arguments<'_>) -> Result<(), StdoutError> {
        self.inner.write_fmt(args)?;
        self.inner.write_all(b"\n")?;
        Ok(())
    }

    /// Writes `bytes` as they are (a generated script or page).
    pub fn bytes(&mut self, bytes: &[u8]) -> Result<(), StdoutError> {
        self.inner.write_all(bytes)?;
        Ok(())
    }

    /// Writes what is buffered.
    pub fn flush(&mut self) -> Result<(), StdoutError> {
        self.inner.flush()?;
        Ok(())
    }
}

/// The exhaustion foresight of a snowflake namespace for `idmint status`, written right after
/// its "time runs out" date: the time left until its layout's timestamp bits run out, its worker
/// pool (leases held of worker ids possible) and its sequence headroom (the peak ids per time
/// unit of the last one to two minutes against the per-unit limit), e.g. ` (in 52 years 256
/// days), workers 2/1024 leased, peak 1024/4096 per 1ms (25%)`; with owned shards, the ranges
/// held instead of the workers (`, 2000 shards owned, ranges of 64: 30/32 held, 10 here`). What
/// an older server does not send is left out.
pub fn snowflake_foresight(time_unit: &str, state: &idmint_api::SnowflakeState) -> String {
    const YEAR: u64 = 365 * 86_400;
    let s = state.seconds_to_exhaustion;
    let mut out = if s >= YEAR {
        format!(" (in {} years {} days)", s / YEAR, s % YEAR / 86_400)
    } else if s > 0 {
        format!(" (in {} days)", s / 86_400)
    } else {
        String::new()
    };
    if let Some(map) = &state.shards {
        let ranges = map.logical_shards.div_ceil(map.shard_range.max(1));
        let here = map
            .ranges
            .iter()
            .filter(|r| r.holder == map.this_node)
            .count();
        out.push_str(&match &map.error {
            None => format!(
                ", {} shards owned, ranges of {}: {}/{ranges} held, {here} here",
                map.logical_shards,
                map.shard_range,
                map.ranges.len()
            ),
            Some(e) => format!(
                ", {} shards owned, ranges of {}: ?/{ranges} held ({e})",
                map.logical_shards, map.shard_range
            ),
        });
    } else if let Some(p) = &state.worker_pool {
        out.push_str(&match p.held {
            Some(held) if held >= p.possible => {
                format!(", workers {held}/{} leased (FULL)", p.possible)
            }
            Some(held) => format!(", workers {held}/{} leased", p.possible),
            None => format!(
                ", workers ?/{} ({})",
                p.possible,
                p.error.as_deref().unwrap_or("not read")
            ),
        });
    }
    if let Some(h) = &state.sequence_headroom {
        out.push_str(&format!(
            ", peak {}/{} per {time_unit} ({:.0}%)",
            h.peak_per_unit,
            h.limit_per_unit,
            h.peak_fraction * 100.0
        ));
    }
    out
}

/// Whether `error` (or one of its causes) is a closed standard output.
pub fn is_closed_stdout(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| matches!(cause.downcast_ref(), Some(StdoutError::Closed)))
}

/// Prints a user error to stderr: the message, then one `caused by:` line per cause. Never a
/// backtrace, whatever `RUST_BACKTRACE` says: these are errors of input or environment, not
/// bugs (a bug still panics, and a panic still honours `RUST_BACKTRACE`).
pub fn report(error: &anyhow::Error) {
    let mut stderr = io::stderr().lock();
    // If stderr is gone too, there is nobody left to tell.
    for line in report_lines(error) {
        let _ = writeln!(stderr, "{line}");
    }
}

/// The lines of [`report`]. A cause whose message the line above already quotes (an error
/// that formats its source into its own message) is not printed again.
fn report_lines(error: &anyhow::Error) -> Vec<String> {
    let mut last = error.to_string();
    let mut lines = vec![format!("error: {last}")];
    for cause in error.chain().skip(1) {
        let text = cause.to_string();
        if last.contains(&text) {
            continue;
        }
        lines.push(format!("caused by: {text}"));
        last = text;
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that formats its source into its own message, as many libraries' do.
    #[derive(Debug)]
    struct Quoting {
        source: std::io::Error,
    }

    impl std::fmt::Display for Quoting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "opening the store: {}", self.source)
        }
    }

    impl std::error::Error for Quoting {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_already_quoted_is_not_printed_twice() {
        let quoting = anyhow::Error::new(Quoting {
            source: std::io::Error::other("disk full"),
        })
        .context("starting the node");
        assert_eq!(
            report_lines(&quoting),
            [
                "error: starting the node",
                "caused by: opening the store: disk full"
            ]
        );
        let plain = anyhow::Error::new(std::io::Error::other("disk full")).context("writing");
        assert_eq!(
            report_lines(&plain),
            ["error: writing", "caused by: disk full"]
        );
    }
    use idmint_api::{SequenceHeadroom, SnowflakeState, WorkerPool};

    fn state(seconds: u64, held: Option<u64>) -> SnowflakeState {
        SnowflakeState {
            ids_served: 10,
            last_timestamp: Some(1),
            time_runs_out: "2079-09-07T15:47:35.551Z".into(),
            seconds_to_exhaustion: seconds,
            worker_pool: Some(WorkerPool::new(
                "events".into(),
                1024,
                held,
                held.is_none().then(|| "connection refused".into()),
            )),
            sequence_headroom: Some(SequenceHeadroom::new(4096, 1_000_000, 1024, 0, 60)),
            worker_lease: None,
            shards: None,
        }
    }

    #[test]
    fn status_shows_time_left_pool_and_headroom() {
        assert_eq!(
            snowflake_foresight("1ms", &state(1_662_000_000, Some(2))),
            " (in 52 years 256 days), workers 2/1024 leased, peak 1024/4096 per 1ms (25%)"
        );
        assert_eq!(
            snowflake_foresight("1ms", &state(3_888_000, Some(1024))),
            " (in 45 days), workers 1024/1024 leased (FULL), peak 1024/4096 per 1ms (25%)"
        );
        assert_eq!(
            snowflake_foresight("10ms", &state(0, None)),
            ", workers ?/1024 (connection refused), peak 1024/4096 per 10ms (25%)"
        );
        // An older server: nothing but what it sent.
        let mut old = state(0, None);
        old.worker_pool = None;
        old.sequence_headroom = None;
        assert_eq!(snowflake_foresight("1ms", &old), "");
        let mut owned = state(0, Some(3));
        owned.sequence_headroom = None;
        owned.shards = Some(idmint_api::ShardMap {
            logical_shards: 100,
            shard_range: 16,
            this_node: "http://a:7879".into(),
            ranges: [0, 1, 5]
                .iter()
                .map(|&r| idmint_api::ShardRangeHolder {
                    range: r,
                    first_shard: r * 16,
                    last_shard: r * 16 + 15,
                    holder: if r == 5 {
                        "http://b:7879"
                    } else {
                        "http://a:7879"
                    }
                    .into(),
                })
                .collect(),
            error: None,
        });
        assert_eq!(
            snowflake_foresight("1ms", &owned),
            ", 100 shards owned, ranges of 16: 3/7 held, 2 here"
        );
    }
}
