//! The connection policy every listener applies, whatever its protocol: a connection is
//! [`Policed`] from the moment it is accepted until it closes.
//!
//! Invariants:
//! - **first request**: a connection whose first request has not arrived within
//!   `server.header_read_timeout_ms` of its accept (a TLS handshake included) is closed: HTTP
//!   headers, the HTTP/2 preface and first stream, the first RESP command alike;
//! - **idle**: a connection with no request in flight that reads nothing for
//!   `server.idle_timeout_ms` is closed; while a request is in flight it is never idle (an
//!   answer waiting for a refill, a stream the client reads slowly);
//! - both end the connection the same way: the next read fails with `TimedOut`, which every
//!   protocol's server treats as the peer gone, so the connection's task ends and its permit
//!   ([`super::accept::Accepted::permit`]) frees the slot;
//! - the protocol handler reports requests ([`Activity::begin`], dropped when the request ends):
//!   that is all it has to do to be policed.
//!
//! What it does not do: bound a request's size (each protocol's parser does, before it
//! allocates), or read the clock outside tokio's (tests run it on paused time).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The deadlines of a connection (`[server]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// The first request must arrive within this of the accept.
    pub first_request: Duration,
    /// A connection with nothing in flight may read nothing for this long.
    pub idle: Duration,
}

/// What a connection is doing, shared by its I/O ([`Policed`]) and its protocol handler.
#[derive(Debug)]
pub struct Activity {
    origin: Instant,
    /// Nanoseconds after `origin` of the last byte read or written.
    last: AtomicU64,
    in_flight: AtomicUsize,
    started: AtomicBool,
}

impl Activity {
    /// A connection accepted now.
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            origin: Instant::now(),
            last: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            started: AtomicBool::new(false),
        })
    }

    fn touch(&self) {
        let since = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.fetch_max(since, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.origin + Duration::from_nanos(self.last.load(Ordering::Relaxed))
    }

    /// A request began: the connection is not idle until the returned guard is dropped, and
    /// its first request has arrived.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.started.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.touch();
        InFlight(self.clone())
    }

    /// Whether a request is being handled.
    pub fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) > 0
    }

    /// Whether the first request has arrived.
    pub fn started(&self) -> bool {
        self.started.load(Ordering::Relaxed)
    }
}

/// A request in flight ([`Activity::begin`]); dropped when it ends.
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A connection's I/O with the policy's deadlines (see the module docs).
#[derive(Debug)]
pub struct Policed<IO> {
    inner: IO,
    activity: Arc<Activity>,
    deadlines: Deadlines,
    timer: Pin<Box<Sleep>>,
}

impl<IO> Policed<IO> {
    /// `inner`, accepted when `activity` began, held to `deadlines`.
    pub fn new(inner: IO, activity: Arc<Activity>, deadlines: Deadlines) -> Self {
        let first = activity.origin + deadlines.first_request;
        Policed {
            inner,
            activity,
            deadlines,
            timer: Box::pin(tokio::time::sleep_until(first)),
        }
    }

    /// The connection's activity.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// The I/O underneath.
    pub fn get_ref(&self) -> &IO {
        &self.inner
    }

    /// When the connection is due to close if nothing happens, or `None` while a request is
    /// in flight.
    fn due(&self) -> Option<Instant> {
        if !self.activity.started() {
            return Some(self.activity.origin + self.deadlines.first_request);
        }
        if self.activity.busy() {
            return None;
        }
        Some(self.activity.last() + self.deadlines.idle)
    }

    /// Polls the deadline: `Ready(error)` once it passed with nothing happening.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        loop {
            let Some(due) = self.due() else {
                // Busy: look again when the timer fires, at the latest one idle period from
                // now (a timer still running wakes this read sooner, which only looks again).
                if self.timer.as_mut().poll(cx).is_ready() {
                    let again = Instant::now() + self.deadlines.idle;
                    self.timer.as_mut().reset(again);
                    let _ = self.timer.as_mut().poll(cx);
                }
                return Poll::Pending;
            };
            // Activity only moves `due` later: a timer set before it fires early and is set
            // again below, so it is reset once per idle period, not once per request.
            if due < self.timer.deadline() || self.timer.is_elapsed() {
                self.timer.as_mut().reset(due);
            }
            match self.timer.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) => {
                    // Activity may have moved the deadline while the timer slept.
                    if self.due().is_some_and(|now_due| now_due > Instant::now()) {
                        continue;
                    }
                    let what = if self.activity.started() {
                        "the connection was idle past server.idle_timeout_ms"
                    } else {
                        "no request arrived within server.header_read_timeout_ms"
                    };
                    return Poll::Ready(io::Error::new(io::ErrorKind::TimedOut, what));
                }
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Policed<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.activity.touch();
                }
                Poll::Ready(result)
            }
            Poll::Pending => match this.poll_deadline(cx) {
                Poll::Ready(e) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Policed<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const DEADLINES: Deadlines = Deadlines {
        first_request: Duration::from_secs(2),
        idle: Duration::from_secs(5),
    };

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_a_request_is_closed_at_the_first_deadline() {
        let (server, _client) = tokio::io::duplex(64);
        let mut policed = Policed::new(server, Activity::new(), DEADLINES);
        let started = Instant::now();
        let mut buf = [0u8; 8];
        let err = policed.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), DEADLINES.first_request);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_counts_only_without_a_request_in_flight() {
        let (server, mut client) = tokio::io::duplex(64);
        let activity = Activity::new();
        let mut policed = Policed::new(server, activity.clone(), DEADLINES);
        client.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(policed.read(&mut buf).await.unwrap(), 1);
        let request = activity.begin();
        // In flight: a long wait is not idleness.
        let waited = tokio::time::timeout(Duration::from_secs(60), policed.read(&mut buf)).await;
        assert!(waited.is_err(), "closed while a request was in flight");
        drop(request);
        let quiet = Instant::now();
        let err = policed.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(quiet.elapsed(), DEADLINES.idle);
    }

    #[tokio::test(start_paused = true)]
    async fn reading_keeps_a_connection_open() {
        let (server, mut client) = tokio::io::duplex(64);
        let activity = Activity::new();
        let _first = activity.begin();
        let mut policed = Policed::new(server, activity.clone(), DEADLINES);
        drop(_first);
        let writer = tokio::spawn(async move {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_secs(4)).await;
                client.write_all(b"y").await.unwrap();
            }
            client
        });
        let mut buf = [0u8; 8];
        for _ in 0..10 {
            assert_eq!(policed.read(&mut buf).await.unwrap(), 1);
        }
        let _client = writer.await.unwrap();
    }
}
