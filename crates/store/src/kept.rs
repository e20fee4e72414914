//! Kept blocks: the unused sequence blocks a node held at a clean stop that did not go back
//! to its authority (older blocks, a tail the authority answered it would not take), written to
//! `kept-blocks.json` in the data directory, with the key they were parked under in the
//! authority ([`crate::parks`]).
//!
//! The file is a claim ticket, never a grant: a namespace with a claim key is served after the
//! restart only with the blocks the authority returns to [`crate::Authority::claim`], once
//! (a copied or edited file claims nothing). A namespace without one holds blocks the
//! authority could not park; only a node told to serve kept blocks unconfirmed
//! (`server.kept_blocks = "unconfirmed"`) serves them, and the node burns them otherwise.
//!
//! Invariants:
//! - a block whose give-back outcome is unknown is never written here (the node burns it);
//! - the file is written durably (a temporary file, fsync, rename, fsync of the directory), and
//!   [`take`] removes it durably before returning its blocks, so before any of them is served:
//!   a crash after that burns them (at most what was buffered, as any crash), and no block is
//!   ever served by two starts of one data directory;
//! - blocks are claimed only on the authority they came from (the configured authority's text
//!   is recorded with them): a file of another authority, or one that cannot be read, is set
//!   aside under another name and serves nothing;
//! - every block is checked against its namespace's spec when read (the node checks it again
//!   with its gate before serving it).
//!
//! What it does not do: decide what to keep, park or claim (the node does).

use crate::node_record::{sync_dir, write_durably};
use crate::parks::ClaimKey;
use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file's name in the data directory.
pub const KEPT_FILE: &str = "kept-blocks.json";

/// One namespace's kept blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptNamespace {
    /// The namespace.
    pub name: NamespaceName,
    /// Its spec when the blocks were kept.
    pub spec: SequenceSpec,
    /// Unused blocks, in the order they were granted (increasing).
    pub blocks: Vec<Block>,
    /// The key the blocks were parked under in the authority; `None`: not parked (served only
    /// unconfirmed).
    pub claim: Option<ClaimKey>,
}

impl KeptNamespace {
    /// How many ids the blocks hold.
    pub fn ids(&self) -> u64 {
        self.blocks.iter().map(Block::len).sum()
    }
}

/// Why kept blocks could not be written.
#[derive(Debug, thiserror::Error)]
#[error("writing the kept blocks to {path}: {source}")]
pub struct KeptError {
    path: PathBuf,
    source: std::io::Error,
}

/// What [`take`] found.
#[derive(Debug, Default)]
pub struct Taken {
    /// The blocks to serve first, per namespace.
    pub namespaces: Vec<KeptNamespace>,
    /// A file that could not be used, and where it was set aside, with the reason.
    pub set_aside: Option<(PathBuf, String)>,
}

#[derive(Serialize, Deserialize)]
struct FileNamespace {
    name: String,
    width: u32,
    first: u64,
    step: u64,
    offset: u64,
    /// `[start, end)` pairs.
    blocks: Vec<[u64; 2]>,
    /// The claim key the blocks were parked under; absent: not parked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    claim: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct File {
    /// Written by idmint at a clean stop; read and removed at the next start.
    about: String,
    authority: String,
    namespaces: Vec<FileNamespace>,
}

const ABOUT: &str = "Unused blocks this node held at its last clean stop, parked in its \
                     authority under the claim key: its next start claims them from the \
                     authority (once) and removes this file. Written by idmint.";

/// Writes `namespaces` (those with blocks) to the data directory `dir`, durably, for a node
/// on `authority`. Writes nothing when there is nothing to keep.
pub fn write(dir: &Path, authority: &str, namespaces: &[KeptNamespace]) -> Result<(), KeptError> {
    let path = dir.join(KEPT_FILE);
    let file = File {
        about: ABOUT.to_owned(),
        authority: authority.to_owned(),
        namespaces: namespaces
            .iter()
            .filter(|n| !n.blocks.is_empty())
            .map(|n| FileNamespace {
                name: n.name.to_string(),
                width: n.spec.width().bits(),
                first: n.spec.first(),
                step: n.spec.step(),
                offset: n.spec.offset(),
                blocks: n.blocks.iter().map(|b| [b.start(), b.end()]).collect(),
                claim: n.claim.as_ref().map(|k| k.as_str().to_owned()),
            })
            .collect(),
    };
    if file.namespaces.is_empty() {
        return Ok(());
    }
    let bytes = serde_json::to_vec_pretty(&file).map_err(|e| KeptError {
        path: path.clone(),
        source: std::io::Error::other(e),
    })?;
    write_durably(&path, &bytes).map_err(|source| KeptError { path, source })
}

/// Reads and removes the kept blocks of the data directory `dir` for a node on `authority`.
/// The file is gone (durably) when this returns `Ok`; one that cannot be used is renamed
/// aside ([`Taken::set_aside`]). An I/O error leaves the file where it was and serves nothing
/// of it.
pub fn take(dir: &Path, authority: &str) -> std::io::Result<Taken> {
    let path = dir.join(KEPT_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Taken::default()),
        Err(e) => return Err(e),
    };
    let parsed = serde_json::from_slice::<File>(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|f| {
            if f.authority != authority {
                return Err(format!(
                    "kept for the authority {}, and this node's is {authority}",
                    f.authority
                ));
            }
            f.namespaces.into_iter().map(parse_namespace).collect()
        });
    match parsed {
        Ok(namespaces) => {
            std::fs::remove_file(&path)?;
            sync_dir(dir)?;
            Ok(Taken {
                namespaces,
                set_aside: None,
            })
        }
        Err(reason) => {
            let mut aside = path.as_os_str().to_owned();
            aside.push(".set-aside");
            let aside = PathBuf::from(aside);
            std::fs::rename(&path, &aside)?;
            sync_dir(dir)?;
            Ok(Taken {
                namespaces: Vec::new(),
                set_aside: Some((aside, reason)),
            })
        }
    }
}

fn parse_namespace(n: FileNamespace) -> Result<KeptNamespace, String> {
    let name = NamespaceName::new(&n.name).map_err(|e| format!("namespace {:?}: {e}", n.name))?;
    let width = Width::from_bits(n.width)
        .ok_or_else(|| format!("namespace {name}: width {} is not 32 or 64", n.width))?;
    let spec = SequenceSpec::new(width, n.first, n.step, n.offset)
        .map_err(|e| format!("namespace {name}: {e}"))?;
    let claim = match &n.claim {
        Some(text) => Some(
            ClaimKey::parse(text)
                .ok_or_else(|| format!("namespace {name}: the claim key is not 32 hex digits"))?,
        ),
        None => None,
    };
    let mut blocks = Vec::with_capacity(n.blocks.len());
    let mut above = 0u64;
    for [start, end] in n.blocks {
        let block = Block::new(start, end, spec.step())
            .filter(|b| spec.contains(b.start()) && spec.contains(b.last()) && b.start() >= above)
            .ok_or_else(|| {
                format!("namespace {name}: [{start}, {end}) is not an increasing block of its spec")
            })?;
        above = block.end();
        blocks.push(block);
    }
    Ok(KeptNamespace {
        name,
        spec,
        blocks,
        claim,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn kept(name: &str, blocks: &[(u64, u64)]) -> KeptNamespace {
        KeptNamespace {
            name: NamespaceName::new(name).unwrap(),
            spec: SequenceSpec::new(Width::Bits32, 1, 2, 1).unwrap(),
            blocks: blocks
                .iter()
                .map(|&(s, e)| Block::new(s, e, 2).unwrap())
                .collect(),
            claim: Some(ClaimKey::random()),
        }
    }

    #[test]
    fn blocks_round_trip_once() {
        let dir = tempfile::tempdir().unwrap();
        let written = vec![
            kept("orders", &[(101, 201), (301, 1001)]),
            kept("empty", &[]),
        ];
        write(dir.path(), "postgres://db/ids", &written).unwrap();
        let taken = take(dir.path(), "postgres://db/ids").unwrap();
        assert_eq!(taken.namespaces, written[..1].to_vec());
        assert_eq!(taken.namespaces[0].ids(), 50 + 350);
        assert!(taken.set_aside.is_none());
        // Removed by the first take: a second start serves nothing of it.
        assert!(!dir.path().join(KEPT_FILE).exists());
        assert!(take(dir.path(), "postgres://db/ids")
            .unwrap()
            .namespaces
            .is_empty());
    }

    #[test]
    fn nothing_to_keep_writes_no_file() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "file", &[kept("a", &[])]).unwrap();
        assert!(!dir.path().join(KEPT_FILE).exists());
    }

    #[test]
    fn another_authority_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "etcd://a", &[kept("orders", &[(1, 11)])]).unwrap();
        let taken = take(dir.path(), "etcd://b").unwrap();
        assert!(taken.namespaces.is_empty());
        let (aside, reason) = taken.set_aside.unwrap();
        assert!(reason.contains("etcd://a"), "{reason}");
        assert!(aside.exists());
        assert!(!dir.path().join(KEPT_FILE).exists());
    }

    #[test]
    fn a_block_outside_its_spec_sets_the_file_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEPT_FILE);
        for blocks in [
            "[[2, 12]]",
            "[[11, 21], [1, 9]]",
            "[[4294967295, 4294967299]]",
        ] {
            let text = format!(
                r#"{{"about": "", "authority": "file", "namespaces": [{{"name": "n", "width": 32,
                 "first": 1, "step": 2, "offset": 1, "blocks": {blocks}}}]}}"#
            );
            std::fs::write(&path, text).unwrap();
            let taken = take(dir.path(), "file").unwrap();
            assert!(taken.namespaces.is_empty(), "{blocks}");
            assert!(taken.set_aside.is_some(), "{blocks}");
        }
        std::fs::write(&path, "not json").unwrap();
        assert!(take(dir.path(), "file").unwrap().set_aside.is_some());
    }
}
