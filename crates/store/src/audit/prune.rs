//! Retention of the audit ledger ([`prune`]): old entries fold into one checkpoint per
//! subject, aged by the store's clock ([`super::AuditLog::now_unix_ms`]), never the node's.

use super::{AuditEvent, AuditLog, SubjectVerifier, Violation, PAGE};
use crate::StoreError;

/// What [`prune`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Entries removed.
    pub removed: u64,
    /// Checkpoints written (one per subject pruned).
    pub checkpoints: u64,
    /// Subjects left unpruned because their old entries show a violation: pruning never
    /// removes the evidence.
    pub kept: Vec<Violation>,
}

/// Prunes `log` to `retention`: per subject, the longest prefix (in `seq` order) of entries
/// stamped more than `retention` before the store's clock ([`AuditLog::now_unix_ms`]) is
/// folded into one checkpoint ([`AuditLog::fold`]). A prefix that is already one checkpoint
/// is left alone; a prefix with a violation is kept whole.
pub async fn prune(
    log: &dyn AuditLog,
    retention: std::time::Duration,
) -> Result<Pruned, StoreError> {
    let now = log.now_unix_ms().await?;
    let retention_ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    let cutoff = now.saturating_sub(retention_ms);
    let mut pruned = Pruned::default();
    for subject in log.subjects().await? {
        let mut verifier = SubjectVerifier::new(subject.clone());
        let mut through: Option<u64> = None;
        let mut first_is_checkpoint = false;
        let mut count = 0u64;
        'pages: loop {
            let page = log.entries(&subject, through, PAGE).await?;
            for entry in &page {
                if entry.at_unix_ms >= cutoff {
                    break 'pages;
                }
                if count == 0 {
                    first_is_checkpoint = matches!(entry.event, AuditEvent::Checkpoint { .. });
                }
                verifier.add(entry);
                through = Some(entry.seq);
                count += 1;
            }
            if page.len() < PAGE {
                break;
            }
        }
        let Some(through) = through else { continue };
        if count == 1 && first_is_checkpoint {
            continue;
        }
        if !verifier.is_clean() {
            pruned.kept.extend(verifier.into_violations());
            continue;
        }
        let checkpoint = verifier.checkpoint_event();
        pruned.removed += log.fold(&subject, through, checkpoint).await?;
        pruned.checkpoints += 1;
    }
    Ok(pruned)
}
