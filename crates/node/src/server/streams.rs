//! The tasks a protocol spawns for the requests of one connection (HTTP/2 runs each stream's
//! request future in a task of its own): [`Streams`] is the executor that spawns them, and it
//! keeps them so the connection can end them and wait for them.
//!
//! Invariant: once [`Streams::finish`] or [`Streams::cut`] returned, no request future of the
//! connection is left, finished or dropped. The server awaits one of them before a connection's
//! task ends, so `Server::serve` returns after the last request future of every connection
//! (docs/design.md invariant 3: the hand-back follows the last id handed out), exactly as for
//! a protocol that runs its requests inside the connection's task.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::task::JoinSet;

/// The request tasks of one connection; clones share them. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Streams {
    tasks: Arc<Mutex<JoinSet<()>>>,
}

impl Streams {
    /// A connection with no request task yet.
    pub fn new() -> Self {
        Streams::default()
    }

    fn take(&self) -> JoinSet<()> {
        std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Waits for every request task to finish on its own (the connection ended cleanly).
    pub async fn finish(&self) {
        loop {
            let mut tasks = self.take();
            if tasks.is_empty() {
                return;
            }
            while tasks.join_next().await.is_some() {}
        }
    }

    /// Cuts every request task (dropping its future) and waits until each is gone.
    pub async fn cut(&self) {
        loop {
            let mut tasks = self.take();
            if tasks.is_empty() {
                return;
            }
            tasks.shutdown().await;
        }
    }

    /// How many request tasks are running.
    pub fn len(&self) -> usize {
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no request task is running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<F> hyper::rt::Executor<F> for Streams
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        // Reap the finished ones so a long connection does not keep every task it ran.
        while tasks.try_join_next().is_some() {}
        tasks.spawn(async move {
            future.await;
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct CountDrop(Arc<AtomicUsize>);

    impl Drop for CountDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn cut_drops_every_request_future_before_it_returns() {
        let streams = Streams::new();
        let dropped = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let guard = CountDrop(dropped.clone());
            streams.execute(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
            });
        }
        assert_eq!(streams.len(), 3);
        streams.cut().await;
        assert_eq!(dropped.load(Ordering::SeqCst), 3);
        assert!(streams.is_empty());
    }

    #[tokio::test]
    async fn finish_waits_for_every_request_future() {
        let streams = Streams::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let done = Arc::new(AtomicUsize::new(0));
        let counted = done.clone();
        streams.execute(async move {
            let _ = rx.await;
            counted.fetch_add(1, Ordering::SeqCst);
        });
        let finished = tokio::spawn({
            let streams = streams.clone();
            async move { streams.finish().await }
        });
        tokio::task::yield_now().await;
        assert_eq!(done.load(Ordering::SeqCst), 0);
        tx.send(()).unwrap();
        finished.await.unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }
}
