//! The conformance suite on the backends without a network (the memory and file authorities),
//! one test per property (`memory::…`, `file::…`), and what only the file store has: one
//! process per data directory, in this process and across processes (redb's file lock).
//!
//! The networked backends run the suite, with its fault scenarios, in their own test files.

#![allow(clippy::unwrap_used)]

use idmint_store::conformance::MemoryBackend;

idmint_store::conformance_tests!(memory => MemoryBackend);
idmint_store::conformance_tests!(memory_leases => MemoryBackend, leases);

#[cfg(feature = "file")]
idmint_store::conformance_tests!(file => idmint_store::conformance::FileBackend);

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
