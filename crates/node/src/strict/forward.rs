//! A follower's forwards to the leader of a strict namespace, batched.
//!
//! Requests queue per namespace ([`Batcher`]); at most [`MAX_IN_FLIGHT`] forwards are in flight
//! per namespace, and each carries every request queued when it leaves (up to a total of
//! `server.max_block_request` ids), then splits the leader's answer in queue order. A request's
//! ids are therefore taken by the leader after the request arrived and before it is answered,
//! which is what strict order needs. A request for consecutive ids (RESP `INCRBY`) travels
//! alone, so its answer is one block.
//!
//! A forward whose answer is lost burns the ids the leader took for it (they were never
//! answered to anyone); it is not resent to the same leader under the same batch.

pub use crate::peers::ForwardError;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

/// Forwards in flight at once per namespace on one follower.
pub const MAX_IN_FLIGHT: usize = 4;

/// One request waiting in the queue.
#[derive(Debug)]
pub struct Waiter {
    /// Ids it asks for.
    pub count: u64,
    /// Whether they must be one block.
    pub consecutive: bool,
    /// Where its share of the answer goes.
    pub reply: oneshot::Sender<Result<Vec<u64>, ForwardError>>,
}

/// The queue of one namespace's requests and its forwards in flight.
#[derive(Debug)]
pub struct Batcher {
    queue: Mutex<VecDeque<Waiter>>,
    permits: Arc<Semaphore>,
    max_batch: u64,
}

impl Batcher {
    /// A queue whose forwards carry at most `max_batch` ids each.
    pub fn new(max_batch: u64) -> Batcher {
        Batcher {
            queue: Mutex::new(VecDeque::new()),
            permits: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            max_batch: max_batch.max(1),
        }
    }

    /// Queues a request; its answer comes on the returned channel once a forward carried it.
    pub fn enqueue(
        &self,
        count: u64,
        consecutive: bool,
    ) -> oneshot::Receiver<Result<Vec<u64>, ForwardError>> {
        let (reply, answer) = oneshot::channel();
        self.lock().push_back(Waiter {
            count,
            consecutive,
            reply,
        });
        answer
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Waiter>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free forward slot and the requests it carries; `None` when no slot is free or nothing
    /// waits. The slot is held until the permit drops: the sender then calls this again, so a
    /// request queued while every slot was busy is never left behind.
    pub fn next_batch(&self) -> Option<(OwnedSemaphorePermit, Vec<Waiter>)> {
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        let mut queue = self.lock();
        let mut batch = Vec::new();
        let mut total = 0u64;
        while let Some(w) = queue.front() {
            let alone = w.consecutive;
            if !batch.is_empty() && (alone || total.saturating_add(w.count) > self.max_batch) {
                break;
            }
            total = total.saturating_add(w.count);
            batch.extend(queue.pop_front());
            if alone {
                break;
            }
        }
        drop(queue);
        (!batch.is_empty()).then_some((permit, batch))
    }

    /// Fails every queued request with `error` (no leader to forward to).
    pub fn fail_all(&self, error: &ForwardError) {
        let waiting: Vec<Waiter> = self.lock().drain(..).collect();
        for w in waiting {
            let _ = w.reply.send(Err(error.clone()));
        }
    }
}

/// Hands each request of `batch` its share of `answer`, in queue order: the first request the
/// first `count` ids, and so on. An answer short of the total (the namespace ran out) leaves
/// the last requests short or empty; an empty share is the leader's exhaustion.
pub fn distribute(batch: Vec<Waiter>, answer: Result<Vec<u64>, ForwardError>) {
    let ids = match answer {
        Ok(ids) => ids,
        Err(e) => {
            for w in batch {
                let _ = w.reply.send(Err(e.clone()));
            }
            return;
        }
    };
    let mut rest = ids.as_slice();
    for w in batch {
        let n = usize::try_from(w.count)
            .unwrap_or(usize::MAX)
            .min(rest.len());
        let (share, tail) = rest.split_at(n);
        rest = tail;
        let share = if share.is_empty() {
            Err(ForwardError::Answer {
                code: "namespace_exhausted".into(),
                message: "the leader's answer ran out of ids".into(),
            })
        } else {
            Ok(share.to_vec())
        };
        let _ = w.reply.send(share);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn batches_split_answers_in_queue_order_and_consecutive_requests_go_alone() {
        let b = Batcher::new(10);
        let a1 = b.enqueue(3, false);
        let a2 = b.enqueue(4, false);
        let a3 = b.enqueue(5, false); // would pass max_batch: next batch
        let a4 = b.enqueue(2, true);
        let (p1, first) = b.next_batch().unwrap();
        assert_eq!(
            first.iter().map(|w| w.count).collect::<Vec<_>>(),
            vec![3, 4]
        );
        distribute(first, Ok((1..=7).collect()));
        assert_eq!(a1.await.unwrap().unwrap(), vec![1, 2, 3]);
        assert_eq!(a2.await.unwrap().unwrap(), vec![4, 5, 6, 7]);
        let (_p2, second) = b.next_batch().unwrap();
        assert_eq!(second.len(), 1);
        let (_p3, third) = b.next_batch().unwrap();
        assert!(third[0].consecutive && third.len() == 1);
        drop(p1);
        assert!(b.next_batch().is_none(), "nothing left to send");
        distribute(second, Ok(vec![20, 21]));
        assert_eq!(
            a3.await.unwrap().unwrap(),
            vec![20, 21],
            "short: the namespace ran out"
        );
        distribute(third, Err(ForwardError::Retry("gone".into())));
        assert_eq!(a4.await.unwrap(), Err(ForwardError::Retry("gone".into())));
    }

    #[tokio::test]
    async fn slots_are_bounded() {
        let b = Batcher::new(100);
        let mut held = Vec::new();
        for _ in 0..MAX_IN_FLIGHT {
            drop(b.enqueue(1, false));
            held.push(b.next_batch().unwrap().0);
        }
        drop(b.enqueue(1, false));
        assert!(b.next_batch().is_none(), "every slot is busy");
        held.pop();
        assert!(b.next_batch().is_some());
    }
}
