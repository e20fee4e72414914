//! Readiness: whether this node can serve every namespace it declares, now.
//!
//! A declared namespace can serve while it has ids buffered (sequence), a worker lease that is
//! not lost (snowflake), needs nothing (UUIDv7, ULID), or while the authority answers (it
//! refills, leases, or sets the namespace up on the next request). So an outage of the
//! authority, or of the tier above, that the buffers bridge leaves the node ready and
//! `degraded`; it turns unready only when a declared namespace could not answer a request.
//! A node that declares nothing serves only what the authority sets up, so it is ready while
//! the authority answers.
//!
//! Invariants: the probe is a read (the authority's `list`, bounded by [`PROBE_TIMEOUT`]); it
//! never sets a namespace up, reserves or refills. Each probe sets `idmint_authority_up` and
//! `idmint_ready`, so `/metrics` shows what the load balancer sees.

use super::Node;
use crate::error::IdError;
use crate::namespace::Namespace;
use idmint_api::LeaseStatus;
use std::time::Duration;

/// How long the readiness probe waits for the authority's answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the readiness probe found. A declared namespace can serve while it has ids buffered
/// (sequence), a worker lease that is not lost (snowflake), needs nothing (UUIDv7, ULID), or the
/// authority answers; an outage the buffers bridge is degraded, not unready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// The authority answered (with several members: at least one is up).
    pub authority_up: bool,
    /// Why the authority did not answer, while it does not.
    pub authority_error: Option<String>,
    /// Each member of a multi authority (empty otherwise).
    pub members: Vec<idmint_api::MemberState>,
    /// The declared namespaces that could not answer a request now, each with the reason.
    pub cannot_serve: Vec<(String, String)>,
    /// Whether the node declares any namespace.
    pub declares_any: bool,
}

impl Readiness {
    /// Every declared namespace can serve (and, declaring none, the authority answers).
    pub fn is_ready(&self) -> bool {
        self.cannot_serve.is_empty() && (self.declares_any || self.authority_up)
    }

    /// Ready, but the authority (or a member of it) does not answer.
    pub fn is_degraded(&self) -> bool {
        !self.authority_up || self.members.iter().any(|m| !m.up)
    }

    /// Why the node is not ready: every namespace that cannot serve, and the authority's state.
    pub fn why_not(&self) -> String {
        let namespaces: Vec<String> = self
            .cannot_serve
            .iter()
            .map(|(name, why)| format!("{name:?}: {why}"))
            .collect();
        let authority = self
            .authority_error
            .as_deref()
            .unwrap_or("the authority answers");
        if namespaces.is_empty() {
            format!("{authority}, and this node declares no namespace to serve from its buffers")
        } else {
            format!("{authority}; cannot serve {}", namespaces.join("; "))
        }
    }
}

impl Node {
    /// Probes the authority and checks every declared namespace, as [`Readiness`] describes.
    /// [`IdError::ShuttingDown`] once shutdown began.
    pub async fn readiness(&self) -> Result<Readiness, IdError> {
        if self.is_draining() {
            return Err(IdError::ShuttingDown);
        }
        let authority = self.authority();
        let kind = authority.kind();
        let probe = tokio::time::timeout(PROBE_TIMEOUT, authority.list()).await;
        let members = self.members();
        let (authority_up, authority_error) = if !members.is_empty() {
            // The members' recorded health decides (a probe cut short by the timeout has still
            // recorded the members it reached).
            if members.iter().any(|m| m.up) {
                (true, None)
            } else {
                let why: Vec<String> = members
                    .iter()
                    .map(|m| {
                        format!(
                            "member {} ({}): {}",
                            m.number,
                            m.kind,
                            m.last_error.as_deref().unwrap_or("down")
                        )
                    })
                    .collect();
                (
                    false,
                    Some(format!(
                        "no member of the {kind} authority is up: {}",
                        why.join("; ")
                    )),
                )
            }
        } else {
            match probe {
                Ok(Ok(_)) => (true, None),
                Ok(Err(e)) => (
                    false,
                    Some(format!("the {kind} authority is unavailable: {e}")),
                ),
                Err(_) => (
                    false,
                    Some(format!(
                        "the {kind} authority did not answer within {}s",
                        PROBE_TIMEOUT.as_secs()
                    )),
                ),
            }
        };
        let mut cannot_serve = Vec::new();
        for name in self.config.namespaces.keys() {
            let why = match self.lookup(name).map(|served| served.ns) {
                None if authority_up => None,
                None => Some("not set up yet, and the authority does not answer".to_owned()),
                Some(ns) => match &*ns {
                    Namespace::Sequence(s) => (!authority_up
                        && s.supply().snapshot().buffered == 0)
                        .then(|| "no ids buffered, and the authority does not answer".to_owned()),
                    Namespace::Snowflake(s) => s
                        .worker()
                        .and_then(|w| w.lease_state())
                        .filter(|lease| lease.status == LeaseStatus::Lost)
                        .map(|lease| format!("the worker lease of group {} was lost", lease.group)),
                    Namespace::Uuid7(..) | Namespace::Ulid(..) => None,
                },
            };
            if let Some(why) = why {
                cannot_serve.push((name.to_string(), why));
            }
        }
        cannot_serve.sort();
        let readiness = Readiness {
            authority_up,
            authority_error,
            members,
            cannot_serve,
            declares_any: !self.config.namespaces.is_empty(),
        };
        self.metrics
            .authority_up
            .set(i64::from(readiness.authority_up));
        self.metrics.ready.set(i64::from(readiness.is_ready()));
        Ok(readiness)
    }
}
