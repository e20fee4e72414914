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

    /// Writes what is buffered.
    pub fn flush(&mut self) -> Result<(), StdoutError> {
        self.inner.flush()?;
        Ok(())
    }
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
    let _ = writeln!(stderr, "error: {error}");
    for cause in error.chain().skip(1) {
        let _ = writeln!(stderr, "caused by: {cause}");
    }
}
