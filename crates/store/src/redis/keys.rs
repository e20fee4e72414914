//! The key names of one store: every key is `{<prefix>}:<kind>…`, so the whole store is one
//! Redis Cluster hash slot (the braces are the hash tag) and a script may touch any of them.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{p}:incarnation` | string | the store's incarnation |
//! | `{p}:namespaces` | set | every namespace's name |
//! | `{p}:ns:<name>` | hash | `bits first step offset watermark` |
//! | `{p}:parks:<name>` | string | the namespace's parked blocks, [`crate::Parks::encode`]'s text (absent: none) |
//! | `{p}:audit-seq` | string | the last audit sequence number (`INCR`) |
//! | `{p}:audit-subjects` | set | every subject with a ledger |
//! | `{p}:audit:<subject>` | stream | entries `<seq>-0`: `at event a b holder` |
//! | `{p}:audit-checkpoint:<subject>` | hash | the checkpoint that stands for pruned entries |
//! | `{p}:lease:<group>` | hash | `layout last_token`, per worker `w:<n>:token`, `w:<n>:holder`, `w:<n>:floor` |
//! | `{p}:live:<group>:<n>` | string, `PX` TTL | `<token> <holder>` while worker `n` is leased |
//!
//! Names are [`NamespaceName`]s (no braces, no spaces), so no two of these keys collide.

use idmint_core::NamespaceName;

/// The key names of one store.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    /// `{<prefix>}:`.
    base: String,
}

impl Keys {
    pub(super) fn new(prefix: &str) -> Keys {
        Keys {
            base: format!("{{{prefix}}}:"),
        }
    }

    pub(super) fn incarnation(&self) -> String {
        format!("{}incarnation", self.base)
    }

    pub(super) fn namespaces(&self) -> String {
        format!("{}namespaces", self.base)
    }

    pub(super) fn namespace(&self, name: &NamespaceName) -> String {
        format!("{}{}", self.namespace_prefix(), name.as_str())
    }

    /// The namespace keys are this followed by the name.
    pub(super) fn namespace_prefix(&self) -> String {
        format!("{}ns:", self.base)
    }

    /// The namespace's parked blocks ([`crate::parks`]).
    pub(super) fn parks(&self, name: &NamespaceName) -> String {
        format!("{}parks:{}", self.base, name.as_str())
    }

    pub(super) fn audit_seq(&self) -> String {
        format!("{}audit-seq", self.base)
    }

    pub(super) fn audit_subjects(&self) -> String {
        format!("{}audit-subjects", self.base)
    }

    pub(super) fn audit(&self, subject: &NamespaceName) -> String {
        format!("{}audit:{}", self.base, subject.as_str())
    }

    pub(super) fn checkpoint(&self, subject: &NamespaceName) -> String {
        format!("{}audit-checkpoint:{}", self.base, subject.as_str())
    }

    pub(super) fn lease_group(&self, group: &NamespaceName) -> String {
        format!("{}lease:{}", self.base, group.as_str())
    }

    /// The live keys of a group are this followed by the worker id.
    pub(super) fn live_prefix(&self, group: &NamespaceName) -> String {
        format!("{}live:{}:", self.base, group.as_str())
    }

    pub(super) fn live(&self, group: &NamespaceName, worker: u64) -> String {
        format!("{}{worker}", self.live_prefix(group))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_share_the_prefix_hash_tag() {
        let keys = Keys::new("idmint");
        let ns = NamespaceName::new("photos").unwrap();
        assert_eq!(keys.namespace(&ns), "{idmint}:ns:photos");
        assert_eq!(keys.live(&ns, 3), "{idmint}:live:photos:3");
        assert_eq!(keys.audit(&ns), "{idmint}:audit:photos");
    }
}
