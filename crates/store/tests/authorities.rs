//! The conformance suite on the backends without a network (the memory and file authorities),
//! one test per property (`memory::…`, `file::…`, and their worker leases `memory_leases::…`,
//! `file_leases::…`), and what only the file store has: one process per data directory, in
//! this process and across processes (redb's file lock), and worker leases across a reopen.
//!
//! The networked backends run the suite, with its fault scenarios, in their own test files.

#![allow(clippy::unwrap_used)]

use idmint_store::conformance::MemoryBackend;

idmint_store::conformance_tests!(memory => MemoryBackend);
idmint_store::conformance_tests!(memory_leases => MemoryBackend, leases);
idmint_store::conformance_tests!(memory_audit => MemoryBackend, audit);
idmint_store::conformance_tests!(memory_parks => MemoryBackend, parks);

#[cfg(feature = "file")]
idmint_store::conformance_tests!(file => idmint_store::conformance::FileBackend);
#[cfg(feature = "file")]
idmint_store::conformance_tests!(file_audit => idmint_store::conformance::FileBackend, audit);
#[cfg(feature = "file")]
idmint_store::conformance_tests!(file_parks => idmint_store::conformance::FileBackend, parks);
#[cfg(feature = "file")]
idmint_store::conformance_tests!(file_leases => idmint_store::conformance::FileBackend, leases);

/// The file store's lock: one authority per data directory.
#[cfg(feature = "file")]
mod file_lock {
    use idmint_core::{NamespaceName, SequenceSpec};
    use idmint_store::{Authority, FileAuthority, StoreError, FILE_NAME};
    use std::path::Path;
    use std::process::Command;

    /// A second open of a directory in use is `Locked`, names the file, and leaves the store intact.
    #[tokio::test]
    async fn second_open_in_process_is_locked_and_harmless() {
        let dir = tempfile::tempdir().unwrap();
        let name = NamespaceName::new("photos").unwrap();
        let first = FileAuthority::open(dir.path()).unwrap();
        first
            .ensure_namespace(&name, SequenceSpec::default_64())
            .await
            .unwrap();
        let held = first.reserve(&name, 100).await.unwrap();

        let err = FileAuthority::open(dir.path()).unwrap_err();
        assert_eq!(
            err,
            StoreError::Locked {
                path: dir.path().join(FILE_NAME)
            }
        );
        assert!(
            err.to_string().contains(&dir.path().display().to_string()),
            "{err}"
        );

        // The holder is unaffected, and after it closes the store reopens with its watermark.
        let next = first.reserve(&name, 1).await.unwrap();
        assert_eq!(next.block.start(), held.watermark);
        drop(first);
        let reopened = FileAuthority::open(dir.path()).unwrap();
        assert_eq!(
            reopened.state(&name).await.unwrap().unwrap().watermark,
            next.watermark
        );
    }

    const CHILD_DIR_ENV: &str = "IDMINT_STORE_TEST_LOCKED_DIR";
    const CHILD_OK: &str = "child-saw-locked";

    /// Run by [`second_process_is_locked`] in a child process (this test binary, re-executed); a
    /// no-op when run normally.
    #[test]
    fn child_process_open() {
        let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
            return;
        };
        let dir = Path::new(&dir);
        match FileAuthority::open(dir) {
            Err(StoreError::Locked { path }) if path == dir.join(FILE_NAME) => {
                println!("{CHILD_OK}")
            }
            other => panic!("a second process opening {} got {other:?}", dir.display()),
        }
    }

    /// Another process opening a directory in use gets `Locked` (redb's file lock), not a shared,
    /// corruptible file.
    #[tokio::test]
    async fn second_process_is_locked() {
        let dir = tempfile::tempdir().unwrap();
        let name = NamespaceName::new("photos").unwrap();
        let first = FileAuthority::open(dir.path()).unwrap();
        first
            .ensure_namespace(&name, SequenceSpec::default_64())
            .await
            .unwrap();
        let held = first.reserve(&name, 10).await.unwrap();

        let output = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "file_lock::child_process_open",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR_ENV, dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains(CHILD_OK),
            "child process: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(
            first.reserve(&name, 1).await.unwrap().block.start(),
            held.watermark
        );
    }
}

/// The file store's worker leases across a reopen, and their expiry by its clock.
#[cfg(feature = "file")]
mod file_leases_reopen {
    use idmint_core::{Clock, ManualClock, NamespaceName};
    use idmint_store::lease::{LeaseError, LeaseRequest, WorkerChoice, WorkerLeases};
    use idmint_store::{Authority, FileAuthority};
    use std::sync::Arc;
    use std::time::Duration;

    fn request(choice: WorkerChoice, holder: &str) -> LeaseRequest {
        LeaseRequest {
            group: NamespaceName::new("events").unwrap(),
            workers: 4,
            choice,
            prefer_floor_at_most: None,
            holder: holder.to_owned(),
            layout: "L".to_owned(),
            ttl: Duration::from_secs(60),
        }
    }

    fn leases_of(a: &FileAuthority) -> &dyn WorkerLeases {
        a.worker_leases().unwrap()
    }

    /// Tokens, floors and layouts survive a reopen; a lease held when the store was closed
    /// (its process gone) is free after the reopen, with its floor kept, and its next holder
    /// gets a larger token; the old holder's renewal is then refused.
    #[tokio::test]
    async fn leases_and_floors_survive_a_reopen_and_held_leases_are_freed() {
        let dir = tempfile::tempdir().unwrap();
        let first = FileAuthority::open(dir.path()).unwrap();
        let held = leases_of(&first)
            .acquire(&request(WorkerChoice::Exactly(0), "held"))
            .await
            .unwrap();
        let held = leases_of(&first).renew(&held, 7_000).await.unwrap();
        let released = leases_of(&first)
            .acquire(&request(WorkerChoice::LowestFree, "released"))
            .await
            .unwrap();
        assert_eq!(released.worker, 1);
        leases_of(&first).release(&released, 9_000).await.unwrap();
        drop(first);

        let reopened = FileAuthority::open(dir.path()).unwrap();
        let (record, slots) = leases_of(&reopened)
            .group(&NamespaceName::new("events").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (record.layout.as_str(), record.last_token),
            ("L", released.token)
        );
        assert_eq!(slots.len(), 2);
        assert!(slots.iter().all(|s| !s.is_live()), "{slots:?}");
        assert_eq!(
            (slots[0].token, slots[0].floor_unix_ms),
            (held.token, 7_000)
        );
        assert_eq!(slots[0].holder, "held");
        assert_eq!(
            (slots[1].token, slots[1].floor_unix_ms),
            (released.token, 9_000)
        );

        let taken = leases_of(&reopened)
            .acquire(&request(WorkerChoice::LowestFree, "after"))
            .await
            .unwrap();
        assert_eq!((taken.worker, taken.floor_unix_ms), (0, 7_000));
        assert!(taken.token > released.token);
        match leases_of(&reopened).renew(&held, 8_000).await {
            Err(LeaseError::Superseded { current, .. }) => assert_eq!(current, taken.token),
            other => panic!("expected Superseded, got {other:?}"),
        }
        let mut other = request(WorkerChoice::LowestFree, "other");
        other.layout = "M".into();
        assert!(matches!(
            leases_of(&reopened).acquire(&other).await,
            Err(LeaseError::LayoutConflict { .. })
        ));
    }

    /// Expiry is the authority's monotonic clock: a lease is held until its TTL has passed on
    /// it, and renewing (even after it lapsed, if nobody took it) extends it from then.
    #[tokio::test]
    async fn leases_expire_by_the_authority_clock() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::at_unix_millis(1_700_000_000_000);
        let store =
            FileAuthority::open_with_clock(dir.path(), Arc::new(clock.clone()) as Arc<dyn Clock>)
                .unwrap();
        let lease = leases_of(&store)
            .acquire(&request(WorkerChoice::Exactly(2), "a"))
            .await
            .unwrap();
        clock.advance_millis(59_999);
        match leases_of(&store)
            .acquire(&request(WorkerChoice::Exactly(2), "b"))
            .await
        {
            Err(LeaseError::Held { expires_in, .. }) => {
                assert_eq!(expires_in, Duration::from_millis(1))
            }
            other => panic!("expected Held, got {other:?}"),
        }
        clock.advance_millis(1);
        let (_, slots) = leases_of(&store)
            .group(&NamespaceName::new("events").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert!(!slots[0].is_live(), "expired at its TTL");
        let lease = leases_of(&store).renew(&lease, 5).await.unwrap();
        clock.advance_millis(30_000);
        assert!(matches!(
            leases_of(&store)
                .acquire(&request(WorkerChoice::Exactly(2), "b"))
                .await,
            Err(LeaseError::Held { .. })
        ));
        clock.advance_millis(30_000);
        let taken = leases_of(&store)
            .acquire(&request(WorkerChoice::Exactly(2), "b"))
            .await
            .unwrap();
        assert_eq!(taken.floor_unix_ms, 5);
        assert!(taken.token > lease.token);
    }
}
