//! [`LocalIds`]: one owner's handle on a namespace, for the hottest loops.
//!
//! [`Namespace::try_next`] is one atomic read-modify-write per id on the namespace's shared
//! window, whatever thread calls it. A `LocalIds` belongs to one owner (its methods take
//! `&mut self`): for a sequence namespace it takes a chunk of ids from the namespace's buffer
//! at a time (one block of a window's length, under the namespace's lock, the window retired
//! first, as every take does) and hands them out with plain arithmetic, no atomic operation at
//! all. Time-ordered namespaces are not chunked: their ids go through the namespace's queue,
//! which checks freshness per id.
//!
//! Invariants:
//! - its ids are ids of the namespace's buffer, each taken once (the chunk left the buffer
//!   under the lock), so unique across every handle of the client;
//! - increasing per `LocalIds`: each chunk is taken after every id the buffer handed out
//!   before, and the chunk's ids go out in order. Ids of *different* handles interleave: a
//!   `LocalIds` on one thread may hand out an id below one another thread got earlier. Use
//!   [`Namespace::try_next`] where every call must see a larger id than every call before it;
//! - a chunk's ids count as served in [`NamespaceStats`](crate::NamespaceStats) from when it
//!   is taken; when the handle drops, the unused tail goes back in front of the buffer if
//!   nothing was taken from it since, and is burned (and counted so) otherwise or after the
//!   namespace closed. So at rest with no `LocalIds` alive, the namespace's counts stay exact.

use crate::error::ClientError;
use crate::id::Id;
use crate::namespace::{Ids, Namespace};
use idmint_core::buffer::Taken;
use idmint_core::Block;

/// One owner's handle on a namespace. See the module docs.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Runtime::new()?;
/// # let dir = tempfile::tempdir()?;
/// # rt.block_on(async {
/// #     let authority = std::sync::Arc::new(idmint_store::FileAuthority::open(dir.path())?);
/// #     let node = idmint_node::Node::start(idmint_node::NodeConfig::default(), authority).await?;
/// #     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// #     let url = format!("http://{}", listener.local_addr()?);
/// #     let server = idmint_node::Server::new(node).grpc(listener);
/// #     let shutdown = server.shutdown_handle();
/// #     let served = tokio::spawn(server.serve());
/// use idmint_client::Client;
///
/// let client = Client::connect([url]).await?;
/// let mut ids = client.namespace("orders").await?.local();
/// let first = ids.next().await?.as_u64().unwrap_or(0);
/// let mut last = first;
/// for _ in 0..100_000 {
///     // No lock and no atomic operation while the chunk lasts.
///     let id = match ids.try_next() {
///         Some(id) => id,
///         None => ids.next().await?,
///     };
///     let id = id.as_u64().unwrap_or(0);
///     assert!(id > last);
///     last = id;
/// }
/// drop(ids); // the chunk's unused tail goes back to the buffer
/// client.close().await;
/// #     shutdown.drain();
/// #     served.await??;
/// #     Ok::<_, Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct LocalIds {
    namespace: Namespace,
    /// The next id of the chunk (meaningless while `left` is 0).
    next: u64,
    /// Ids left in the chunk.
    left: u64,
    step: u64,
    /// The chunk's block and the take that recorded it, while it has ids left.
    chunk: Option<(Block, Taken)>,
}

impl LocalIds {
    pub(crate) fn new(namespace: Namespace) -> LocalIds {
        LocalIds {
            namespace,
            next: 0,
            left: 0,
            step: 1,
            chunk: None,
        }
    }

    /// The next id if one is at hand, without waiting: from the chunk (plain arithmetic), else
    /// a new chunk from the namespace's buffer; `None` when the buffer is empty (the background
    /// refill is woken). Never touches the network.
    #[inline]
    pub fn try_next(&mut self) -> Option<Id> {
        if self.left > 0 {
            let id = self.next;
            self.left -= 1;
            // Past the chunk's last id this may wrap; it is never read then (`left` is 0).
            self.next = id.wrapping_add(self.step);
            return Some(Id::Sequence(id));
        }
        self.next_chunk()
    }

    /// The next id, waiting for a refill only when none is buffered
    /// ([`Namespace::next`]).
    pub async fn next(&mut self) -> Result<Id, ClientError> {
        if let Some(id) = self.try_next() {
            return Ok(id);
        }
        self.namespace.next().await
    }

    /// Ids held in the current chunk.
    pub fn held(&self) -> u64 {
        self.left
    }

    /// The namespace this handle takes from.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    #[cold]
    #[inline(never)]
    fn next_chunk(&mut self) -> Option<Id> {
        let state = &self.namespace.state;
        match &state.ids {
            Ids::Sequence(s) => {
                self.chunk = None; // used up: nothing to give back
                let chunk = s.take_chunk(|| state.wake.notify_one())?;
                let block = chunk.block;
                self.next = block.start().wrapping_add(block.step());
                self.left = block.len() - 1;
                self.step = block.step();
                self.chunk = Some((block, chunk.lease));
                Some(Id::Sequence(block.start()))
            }
            Ids::Timed(_) => self.namespace.try_next(),
        }
    }
}

impl Drop for LocalIds {
    fn drop(&mut self) {
        let Some((block, lease)) = self.chunk.take() else {
            return;
        };
        if self.left == 0 {
            return;
        }
        let tail = Block::new(self.next, block.end(), block.step());
        if let (Some(tail), Ids::Sequence(s)) = (tail, &self.namespace.state.ids) {
            s.return_chunk(&lease, tail);
        }
    }
}
