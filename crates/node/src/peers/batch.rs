//! Forwards to one node, batched: a strict namespace's follower to its leader, a node to the
//! holder of owned shards.
//!
//! Requests queue per destination ([`Batcher`]); at most [`MAX_IN_FLIGHT`] forwards are in
//! flight per queue, and each carries every request queued when it leaves (up to a total of
//! `server.max_count` ids, the most the node called admits in one forward), then splits the answer in queue order. A request's ids are
//! therefore taken by the node called after the request arrived and before it is answered,
//! which is what strict order needs. A request marked `alone` (consecutive ids, RESP `INCRBY`)
//! travels alone, so its answer is one block. Each request carries a tag (the shard it asks
//! for) that the sender puts in the forward.
//!
//! A forward whose answer is lost burns the ids the node took for it (they were never
//! answered to anyone); it is not resent to the same node under the same batch.

pub use crate::peers::ForwardError;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

/// Forwards in flight at once per queue.
pub const MAX_IN_FLIGHT: usize = 4;

/// One request waiting in the queue.
#[derive(Debug)]
pub struct Waiter<T> {
    /// Ids it asks for.
    pub count: u64,
    /// Whether it travels alone (its ids must be one block).
    pub alone: bool,
    /// What the forward says of it besides the count (the shard it asks for).
    pub tag: T,
    /// Where its share of the answer goes.
    pub reply: oneshot::Sender<Result<Vec<u64>, ForwardError>>,
}

/// The queue of requests to one node and the forwards in flight to it.
#[derive(Debug)]
pub struct Batcher<T> {
    queue: Mutex<VecDeque<Waiter<T>>>,
    permits: Arc<Semaphore>,
    max_batch: u64,
}

impl<T> Batcher<T> {
    /// A queue whose forwards carry at most `max_batch` ids each.
    pub fn new(max_batch: u64) -> Batcher<T> {
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
        alone: bool,
        tag: T,
    ) -> oneshot::Receiver<Result<Vec<u64>, ForwardError>> {
        let (reply, answer) = oneshot::channel();
        self.lock().push_back(Waiter {
            count,
            alone,
            tag,
            reply,
        });
        answer
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Waiter<T>>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free forward slot and the requests it carries; `None` when no slot is free or nothing
    /// waits. The slot is held until the permit drops: the sender then calls this again, so a
    /// request queued while every slot was busy is never left behind.
    pub fn next_batch(&self) -> Option<(OwnedSemaphorePermit, Vec<Waiter<T>>)> {
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        let mut queue = self.lock();
        let mut batch = Vec::new();
        let mut total = 0u64;
        while let Some(w) = queue.front() {
            let alone = w.alone;
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
}

/// Hands each request of `batch` its share of `answer`, in queue order: the first request the
/// first `count` ids, and so on. An answer short of the total (the namespace ran out) leaves
/// the last requests short or empty; an empty share is the node's exhaustion.
pub fn distribute<T>(batch: Vec<Waiter<T>>, answer: Result<Vec<u64>, ForwardError>) {
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
                message: "the answer ran out of ids".into(),
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
        let a1 = b.enqueue(3, false, 1);
        let a2 = b.enqueue(4, false, 2);
        let a3 = b.enqueue(5, false, 3); // would pass max_batch: next batch
        let a4 = b.enqueue(2, true, 4);
        let (p1, first) = b.next_batch().unwrap();
        assert_eq!(
            first.iter().map(|w| (w.count, w.tag)).collect::<Vec<_>>(),
            vec![(3, 1), (4, 2)]
        );
        distribute(first, Ok((1..=7).collect()));
        assert_eq!(a1.await.unwrap().unwrap(), vec![1, 2, 3]);
        assert_eq!(a2.await.unwrap().unwrap(), vec![4, 5, 6, 7]);
        let (_p2, second) = b.next_batch().unwrap();
        assert_eq!(second.len(), 1);
        let (_p3, third) = b.next_batch().unwrap();
        assert!(third[0].alone && third.len() == 1);
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
            drop(b.enqueue(1, false, ()));
            held.push(b.next_batch().unwrap().0);
        }
        drop(b.enqueue(1, false, ()));
        assert!(b.next_batch().is_none(), "every slot is busy");
        held.pop();
        assert!(b.next_batch().is_some());
    }
}
