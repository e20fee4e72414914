//! Waiting for a condition against real servers and processes: poll it, with a deadline.
//!
//! A test never sleeps to order events; it waits until what it needs has happened. These
//! helpers poll a condition every [`POLL`] until it holds (or yields a value), and panic with
//! what was awaited once `within` has passed. The synchronous ones sleep the thread between
//! polls (for tests driving processes); the async ones sleep on tokio's clock, so under paused
//! time they advance it instead of waiting.
//!
//! Invariants: the condition is polled at least once, and once more after the deadline has
//! passed, so a condition met while the last pause ran is not reported as a timeout; a
//! timeout panics naming `what` and `within`, never returns.

use std::fmt::Display;
use std::time::Duration;

/// The pause between two polls.
pub const POLL: Duration = Duration::from_millis(10);

/// A description of what is awaited, made when a timeout shows it: for a message that should
/// show the state at the timeout (a process's log, say). `wait::until(lazy(|| …), …)`.
pub fn lazy<F: Fn() -> String>(describe: F) -> Lazy<F> {
    Lazy(describe)
}

/// See [`lazy`].
pub struct Lazy<F>(F);

impl<F: Fn() -> String> Display for Lazy<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&(self.0)())
    }
}

/// Polls `cond` until it holds; panics naming `what` if it does not within `within`.
pub fn until(what: impl Display, within: Duration, mut cond: impl FnMut() -> bool) {
    until_some(what, within, || cond().then_some(()));
}

/// Polls `poll` until it yields a value, and returns it; panics naming `what` if it yields none
/// within `within`.
pub fn until_some<T>(
    what: impl Display,
    within: Duration,
    mut poll: impl FnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + within;
    loop {
        let late = std::time::Instant::now() >= deadline;
        if let Some(value) = poll() {
            return value;
        }
        if late {
            panic!("timed out after {within:?} waiting for {what}");
        }
        std::thread::sleep(POLL);
    }
}

/// [`until`] for a condition that awaits (a request, a read from a server).
pub async fn until_async(
    what: impl Display,
    within: Duration,
    mut cond: impl AsyncFnMut() -> bool,
) {
    until_some_async(what, within, async || cond().await.then_some(())).await;
}

/// [`until_some`] for a poll that awaits.
pub async fn until_some_async<T>(
    what: impl Display,
    within: Duration,
    mut poll: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let late = tokio::time::Instant::now() >= deadline;
        if let Some(value) = poll().await {
            return value;
        }
        if late {
            panic!("timed out after {within:?} waiting for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    #[test]
    fn returns_once_the_condition_holds() {
        let mut polls = 0;
        until("three polls", Duration::from_secs(5), || {
            polls += 1;
            polls == 3
        });
        assert_eq!(polls, 3);
        let value = until_some("a value", Duration::from_secs(5), || Some(7));
        assert_eq!(value, 7);
    }

    #[test]
    fn a_timeout_panics_naming_what_was_awaited() {
        let mut polls = 0;
        let err = catch_unwind(AssertUnwindSafe(|| {
            until("the impossible", Duration::from_millis(30), || {
                polls += 1;
                false
            })
        }))
        .expect_err("a condition that never holds timed out");
        let message = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("the impossible"), "{message}");
        assert!(polls >= 2, "polled {polls} times");
    }

    #[test]
    fn a_lazy_description_shows_the_state_at_the_timeout() {
        let state = std::cell::Cell::new(0);
        let err = catch_unwind(AssertUnwindSafe(|| {
            until(
                lazy(|| format!("state {}", state.get())),
                Duration::from_millis(20),
                || {
                    state.set(state.get() + 1);
                    false
                },
            )
        }))
        .expect_err("timed out");
        let message = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            message.contains(&format!("state {}", state.get())),
            "{message}"
        );
    }

    /// On paused time the wait advances tokio's clock: a minute passes at once.
    #[tokio::test(start_paused = true)]
    async fn the_async_wait_runs_on_tokios_clock() {
        let start = tokio::time::Instant::now();
        let at = start + Duration::from_secs(60);
        let waited = until_some_async("a minute", Duration::from_secs(120), async || {
            (tokio::time::Instant::now() >= at).then(|| tokio::time::Instant::now() - start)
        })
        .await;
        assert!(waited >= Duration::from_secs(60), "{waited:?}");
        let mut polls = 0;
        until_async("two polls", Duration::from_secs(1), async || {
            polls += 1;
            polls == 2
        })
        .await;
        assert_eq!(polls, 2);
    }
}
