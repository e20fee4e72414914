//! The outcome of a write to an authority, as its caller must read it: **applied**, **refused**
//! (the store answered no and changed nothing), or **unknown** (a timeout, a lost reply, a cut
//! connection after the request was sent, a `WAIT` short of its replicas, an upper node that did
//! not answer: the write may have happened).
//!
//! Every write of the [`crate::Authority`] trait answers `Result<T, StoreError>`, and every
//! backend reports a write it cannot vouch for as [`StoreError::Unavailable`]. [`Outcome::of`]
//! is the one place that turns such a result into the three cases, so a caller that decides what
//! to do with ids matches on all three and cannot read "unknown" as "refused" by accident.
//!
//! The rule for ids, applied by every caller: ids whose give-back, park or claim is unknown are
//! burned, never kept, never served (docs/design.md, invariant 3).

use crate::StoreError;

/// What became of one write. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an unknown outcome must burn what the write was about"]
pub enum Outcome<T> {
    /// The store applied the write and said so.
    Applied(T),
    /// The store answered and changed nothing.
    Refused(StoreError),
    /// The write may or may not have been applied.
    Unknown(StoreError),
}

impl<T> Outcome<T> {
    /// The outcome of a write that answered `result`: an error after which the caller cannot
    /// know whether the write reached the storage ([`StoreError::outcome_unknown`]) is
    /// [`Outcome::Unknown`]; every other error is a refusal.
    pub fn of(result: Result<T, StoreError>) -> Self {
        match result {
            Ok(t) => Outcome::Applied(t),
            Err(e) if e.outcome_unknown() => Outcome::Unknown(e),
            Err(e) => Outcome::Refused(e),
        }
    }

    /// The applied value, if the write was applied.
    pub fn applied(self) -> Option<T> {
        match self {
            Outcome::Applied(t) => Some(t),
            Outcome::Refused(_) | Outcome::Unknown(_) => None,
        }
    }
}

impl StoreError {
    /// Whether a write that failed with this error may still have been applied: the backend
    /// could not be reached or did not answer in time ([`StoreError::Unavailable`]). Every
    /// other error is the store's own answer, given before anything changed.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idmint_core::NamespaceName;

    #[test]
    fn only_an_unanswered_write_is_unknown() {
        let name = NamespaceName::new("a").expect("valid name");
        assert_eq!(Outcome::of(Ok::<_, StoreError>(3)), Outcome::Applied(3));
        let unavailable = StoreError::Unavailable {
            backend: "postgres",
            message: "timed out".into(),
        };
        assert_eq!(
            Outcome::<()>::of(Err(unavailable.clone())),
            Outcome::Unknown(unavailable)
        );
        for refused in [
            StoreError::UnknownNamespace { name: name.clone() },
            StoreError::Retired { name: name.clone() },
            StoreError::NotParked { name },
            StoreError::NotSupported {
                backend: "upstream",
                what: "parking blocks",
            },
        ] {
            assert_eq!(
                Outcome::<()>::of(Err(refused.clone())),
                Outcome::Refused(refused)
            );
        }
    }
}
