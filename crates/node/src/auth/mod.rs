//! Authentication, scopes and quotas (docs/api.md "Authentication"), the one place every
//! front-end asks whether a request may run.
//!
//! With `[auth]` in the configuration, every request but the health checks (and the
//! documentation, and `/metrics` unless `[auth] metrics = "read"`) must present a bearer token
//! the node knows: HTTP `Authorization: Bearer <token>`, gRPC metadata of the same name, RESP
//! `AUTH <token>` once per connection. The node knows tokens only by their SHA-256
//! ([`token`]). Each token holds scopes per namespace pattern ([`scope`]), and optionally a
//! per-request `max_count` and a rate of ids per second per namespace ([`quota`]).
//!
//! The node's request path (`crate::node`'s operations) turns what a request carries into
//! a [`Caller`] ([`Auth::authenticate_header`], or [`Auth::authenticate_token`] once per RESP
//! connection), then asks [`Auth::admit`] with the namespace, the [`Scope`] the operation needs
//! and the count of ids it asks for, before it looks the namespace up (so a refused request
//! creates nothing), and takes the token's rate quota ([`Admitted::take_quota`]) from the
//! namespace's own buckets once the namespace exists: quota state exists only for namespaces
//! that exist, bounded by the tokens, with no global map to sweep. Refusals are [`IdError`]s
//! (`Unauthorized`, `Forbidden`, `RateLimited`; a count above the token's `max_count` is
//! `InvalidCount`, like one above `server.max_count`: retrying cannot help). Without `[auth]`
//! every caller is [`Caller::Open`] and nothing is checked, counted or locked.
//!
//! The tokens can be replaced while the node runs ([`Auth::reload`], on SIGHUP): every
//! request looks its caller's token up again, so a removed token is refused at once, on every
//! open connection too.
//!
//! Metrics: `idmint_auth_ids_total{token}` (ids handed out to a token, counted by the
//! front-end after the answer is made, [`Admitted::served`]) and
//! `idmint_auth_refused_total{token,reason}`; `token` is the token's `name`, or the first 12
//! hex digits of its hash, never the token.

pub mod quota;
pub mod scope;
pub mod token;

use crate::config::ConfigError;
use crate::error::IdError;
use crate::metrics::{AuthLabels, Metrics, RefusedLabels};
use crate::time::SharedClock;
use arc_swap::ArcSwapOption;
use idmint_core::Clock;
pub use quota::{Buckets, Rate};
pub use scope::{Pattern, Scope, Scopes};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
pub use token::TokenHash;

/// The token of an `Authorization` value `Bearer <token>` (the scheme in any case), if it is
/// one and the token is not empty.
pub fn bearer(header: &[u8]) -> Option<&str> {
    std::str::from_utf8(header)
        .ok()
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|token| !token.is_empty())
}

/// The most ids per second a `rate` may name (a billion: beyond it, a quota means nothing).
pub const MAX_RATE: f64 = 1e9;

/// Who may read `/metrics` when authentication is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricsAccess {
    /// Anyone (the default: scrapers rarely carry tokens; the metrics hold no ids and name
    /// tokens by label only).
    #[default]
    Open,
    /// A token with the `read` scope on `*`.
    Read,
}

/// One configured token (`[[auth.tokens]]`), validated.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenConfig {
    /// How metrics and messages name it: `name`, or the first 12 hex digits of the hash.
    pub label: String,
    /// The SHA-256 of the token.
    pub hash: TokenHash,
    /// Scopes per namespace pattern, in the order configured.
    pub grants: Vec<(Pattern, Scopes)>,
    /// Largest count of one request (ids or a block) this token may ask for.
    pub max_count: Option<u64>,
    /// The most ids one block request of this token may get from a 32-bit namespace, instead
    /// of the default 1/100,000 of its space ([`crate::config::block_request_cap`]): for a
    /// regional tier's token, so its buffer can hold `buffer_seconds` of its demand.
    pub max_block_32: Option<u64>,
    /// Ids per second per namespace.
    pub rate: Option<Rate>,
}

/// The `[auth]` table, validated. Its presence turns authentication on.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AuthConfig {
    /// The tokens.
    pub tokens: Vec<Arc<TokenConfig>>,
    /// Who may read `/metrics`.
    pub metrics: MetricsAccess,
}

/// `[auth]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAuth {
    metrics: Option<String>,
    #[serde(default)]
    tokens: Vec<RawToken>,
}

/// `[[auth.tokens]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    name: Option<String>,
    hash: String,
    #[serde(default)]
    scopes: BTreeMap<String, Vec<String>>,
    max_count: Option<u64>,
    max_block_32: Option<u64>,
    rate: Option<f64>,
    burst: Option<u64>,
}

fn invalid(key: String, message: impl ToString) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.to_string(),
    }
}

impl RawAuth {
    /// Validates `[auth]`: each hash well formed and distinct, names distinct and usable as
    /// labels, every pattern and scope known, counts and rates in range. `max_request` is the
    /// largest count any request may have anyway (the larger of `server.max_count` and
    /// `server.max_block_request`).
    pub(crate) fn validate(self, max_request: u64) -> Result<AuthConfig, ConfigError> {
        let metrics = match self.metrics.as_deref() {
            None | Some("open") => MetricsAccess::Open,
            Some("read") => MetricsAccess::Read,
            Some(other) => {
                return Err(invalid(
                    "auth.metrics".into(),
                    format!("{other:?}: must be \"open\" (anyone may scrape) or \"read\" (a token with read on *)"),
                ))
            }
        };
        let mut tokens = Vec::new();
        let (mut labels, mut hashes) = (HashSet::new(), HashSet::new());
        for (i, raw) in self.tokens.into_iter().enumerate() {
            let key = |field: &str| format!("auth.tokens[{i}].{field}");
            let hash = TokenHash::parse(&raw.hash).map_err(|e| invalid(key("hash"), e))?;
            if !hashes.insert(hash) {
                return Err(invalid(key("hash"), "the same hash is configured twice"));
            }
            let label = match raw.name {
                Some(name) => {
                    let usable = !name.is_empty()
                        && name.len() <= 64
                        && name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
                    if !usable || name == "none" || name == "unknown" {
                        return Err(invalid(
                            key("name"),
                            format!("{name:?}: 1 to 64 ASCII letters, digits, '_', '-' or '.', and not \"none\" or \"unknown\" (metrics use those for refused requests without a known token)"),
                        ));
                    }
                    name
                }
                None => hash.short(),
            };
            if !labels.insert(label.clone()) {
                return Err(invalid(
                    key("name"),
                    format!("{label:?} names two tokens; names label the metrics and must differ"),
                ));
            }
            let mut grants = Vec::new();
            for (pattern, scopes) in raw.scopes {
                let parsed = Pattern::parse(&pattern)
                    .map_err(|e| invalid(format!("auth.tokens[{i}].scopes"), e))?;
                let mut set = Scopes::default();
                for s in &scopes {
                    set =
                        set.with(Scope::parse(s).map_err(|e| {
                            invalid(format!("auth.tokens[{i}].scopes.{pattern:?}"), e)
                        })?);
                }
                grants.push((parsed, set));
            }
            if let Some(max) = raw.max_count {
                if max == 0 || max > max_request {
                    return Err(invalid(
                        key("max_count"),
                        format!("{max}: must be from 1 to {max_request} (the server's own request limit)"),
                    ));
                }
            }
            if let Some(max) = raw.max_block_32 {
                let ceiling = max_request.min(1 << 31);
                if max == 0 || max > ceiling {
                    return Err(invalid(
                        key("max_block_32"),
                        format!("{max}: must be from 1 to {ceiling} (the server's own request limit, and the size of a 32-bit space)"),
                    ));
                }
            }
            let rate = match (raw.rate, raw.burst) {
                (None, None) => None,
                (None, Some(_)) => {
                    return Err(invalid(key("burst"), "burst needs a rate"));
                }
                (Some(r), burst) => {
                    if !(r.is_finite() && r > 0.0 && r <= MAX_RATE) {
                        return Err(invalid(
                            key("rate"),
                            format!("{r}: must be above 0 and at most {MAX_RATE} ids per second"),
                        ));
                    }
                    let burst = match burst {
                        Some(0) => return Err(invalid(key("burst"), "must be at least 1")),
                        Some(b) => b as f64,
                        None => r.max(1.0),
                    };
                    Some(Rate {
                        per_second: r,
                        burst,
                    })
                }
            };
            tokens.push(Arc::new(TokenConfig {
                label,
                hash,
                grants,
                max_count: raw.max_count,
                max_block_32: raw.max_block_32,
                rate,
            }));
        }
        Ok(AuthConfig { tokens, metrics })
    }
}

/// Who a request comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// Authentication was off when the caller was established: anyone may do anything while
    /// it stays off.
    Open,
    /// A configured token, known by its hash: every request looks it up again, so a token
    /// removed by a reload is refused from then on, even on a connection that authenticated
    /// with it earlier (RESP `AUTH`).
    Token(TokenHash),
}

/// The node's authentication state: the tokens (reloadable), the clock the quota buckets
/// refill on, and the metrics.
#[derive(Debug)]
pub struct Auth {
    config: ArcSwapOption<AuthConfig>,
    clock: SharedClock,
    metrics: Arc<Metrics>,
}

/// A caller allowed to run an operation: what the rest of the request path needs of its token
/// (its quota, its limits, the counter of ids it was handed).
#[derive(Debug, Clone)]
pub struct Admitted {
    token: Option<Arc<TokenConfig>>,
}

impl Admitted {
    /// Anyone, with authentication off.
    pub fn open() -> Self {
        Admitted { token: None }
    }

    /// The token's rate quota on a namespace whose buckets are `buckets`: takes `count` ids
    /// (0: nothing) or refuses with [`IdError::RateLimited`].
    pub fn take_quota(
        &self,
        auth: &Auth,
        buckets: &Buckets,
        namespace: &str,
        count: u64,
    ) -> Result<(), IdError> {
        let (Some(t), true) = (&self.token, count > 0) else {
            return Ok(());
        };
        let Some(rate) = t.rate else {
            return Ok(());
        };
        let now = auth.clock.monotonic_nanos();
        buckets.take(t.hash, rate, count, now).map_err(|wait| {
            auth.refuse(&t.label, "rate_limited");
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            IdError::RateLimited {
                message: format!(
                    "token {:?} may take {} ids per second from namespace {namespace:?} \
                     (bursts of {}); retry in {secs} s",
                    t.label, rate.per_second, rate.burst
                ),
                retry_after_secs: secs.max(1),
            }
        })
    }

    /// The largest count this caller may ask for in one request, if its token has a limit.
    pub fn max_count(&self) -> Option<u64> {
        self.token.as_ref().and_then(|t| t.max_count)
    }

    /// The most ids one block request of this caller may get from a 32-bit namespace, if its
    /// token raises the default cap (`max_block_32`).
    pub fn max_block_32(&self) -> Option<u64> {
        self.token.as_ref().and_then(|t| t.max_block_32)
    }

    /// Counts `ids` handed out to this caller (`idmint_auth_ids_total`).
    pub fn served(&self, auth: &Auth, ids: u64) {
        if let Some(t) = &self.token {
            auth.metrics
                .auth_ids
                .get_or_create(&AuthLabels {
                    token: t.label.clone(),
                })
                .inc_by(ids);
        }
    }
}

impl Auth {
    /// Authentication per `config` (`None`: off), quotas on `clock`'s monotonic time.
    pub fn new(config: Option<AuthConfig>, clock: Arc<dyn Clock>, metrics: Arc<Metrics>) -> Self {
        Auth {
            config: ArcSwapOption::new(config.map(Arc::new)),
            clock: SharedClock(clock),
            metrics,
        }
    }

    /// Replaces the tokens (SIGHUP): requests from now on are judged by `config`; connections
    /// stay open, and a caller whose token is gone is refused at its next request. Quota
    /// buckets are kept per token hash, so a token that stays keeps its bucket.
    pub fn reload(&self, config: Option<AuthConfig>) {
        self.config.store(config.map(Arc::new));
    }

    /// Whether requests must carry a token.
    pub fn enabled(&self) -> bool {
        self.config.load().is_some()
    }

    /// Whether `/metrics` needs a token (with `read` on `*`).
    pub fn metrics_need_token(&self) -> bool {
        self.config
            .load()
            .as_ref()
            .is_some_and(|c| c.metrics == MetricsAccess::Read)
    }

    fn refuse(&self, token: &str, reason: &'static str) {
        self.metrics
            .auth_refused
            .get_or_create(&RefusedLabels {
                token: token.to_owned(),
                reason,
            })
            .inc();
    }

    /// The caller an HTTP `Authorization` header (or gRPC `authorization` metadata) names:
    /// `Bearer <token>`, the scheme in any case. Off: [`Caller::Open`], whatever is sent.
    pub fn authenticate_header(&self, header: Option<&[u8]>) -> Result<Caller, IdError> {
        if !self.enabled() {
            return Ok(Caller::Open);
        }
        let Some(header) = header else {
            self.refuse("none", "unauthorized");
            return Err(IdError::Unauthorized(
                "this node requires a bearer token: send the header Authorization: Bearer <token>"
                    .into(),
            ));
        };
        match bearer(header) {
            Some(token) => self.authenticate_token(token.as_bytes()),
            None => {
                self.refuse("none", "unauthorized");
                Err(IdError::Unauthorized(
                    "the Authorization header must be \"Bearer <token>\"".into(),
                ))
            }
        }
    }

    /// The caller `token` is (RESP `AUTH`). Off: [`Caller::Open`].
    pub fn authenticate_token(&self, token: &[u8]) -> Result<Caller, IdError> {
        let Some(config) = self.config.load_full() else {
            return Ok(Caller::Open);
        };
        let presented = TokenHash::of(token);
        // Every hash is compared, so the time taken does not say which one matched.
        let found = config.tokens.iter().fold(None, |found, t| {
            if t.hash.matches(&presented) {
                Some(t.hash)
            } else {
                found
            }
        });
        match found {
            Some(hash) => Ok(Caller::Token(hash)),
            None => {
                self.refuse("unknown", "unauthorized");
                Err(IdError::Unauthorized(
                    "the bearer token is not one this node knows".into(),
                ))
            }
        }
    }

    /// `caller`'s token as configured now: `Ok(None)` with authentication off; refused when
    /// authentication is on and the caller has no token (it authenticated while it was off)
    /// or a token that is no longer configured.
    fn token(&self, caller: Caller) -> Result<Option<Arc<TokenConfig>>, IdError> {
        let Some(config) = self.config.load_full() else {
            return Ok(None);
        };
        let found = match caller {
            Caller::Token(hash) => config.tokens.iter().find(|t| t.hash == hash).cloned(),
            Caller::Open => None,
        };
        match found {
            Some(t) => Ok(Some(t)),
            None => {
                self.refuse("unknown", "unauthorized");
                Err(IdError::Unauthorized(
                    "the token is not one this node knows (any more): authenticate again".into(),
                ))
            }
        }
    }

    /// Whether `caller` holds `scope` on `namespace` (no quota taken, nothing counted).
    pub fn may(&self, caller: Caller, namespace: &str, scope: Scope) -> bool {
        match self.token(caller) {
            Ok(None) => true,
            Ok(Some(t)) => scope::scopes_on(&t.grants, namespace).contains(scope),
            Err(_) => false,
        }
    }

    /// Whether `caller` may run an operation needing `scope` on `namespace` for `count` ids
    /// (0: the operation takes none): the token, the scope, then the token's `max_count`. The
    /// rate quota is taken once the namespace is known ([`Admitted::take_quota`]), so quota
    /// state exists only for namespaces that exist.
    pub fn admit(
        &self,
        caller: Caller,
        namespace: &str,
        scope: Scope,
        count: u64,
    ) -> Result<Admitted, IdError> {
        let Some(t) = self.token(caller)? else {
            return Ok(Admitted::open());
        };
        if !scope::scopes_on(&t.grants, namespace).contains(scope) {
            self.refuse(&t.label, "forbidden");
            return Err(IdError::Forbidden(format!(
                "token {:?} does not hold the {scope} scope on namespace {namespace:?}",
                t.label
            )));
        }
        if let Some(max) = t.max_count.filter(|max| count > *max) {
            self.refuse(&t.label, "max_count");
            return Err(IdError::InvalidCount(format!(
                "count {count} is above token {:?}'s maximum of {max} per request (its max_count)",
                t.label
            )));
        }
        Ok(Admitted { token: Some(t) })
    }

    /// [`Auth::admit`] for an operation that either of `scopes` allows (the lease calls:
    /// `workers` or `tier`); a refusal, counted once, names both.
    pub fn admit_either(
        &self,
        caller: Caller,
        namespace: &str,
        scopes: [Scope; 2],
        count: u64,
    ) -> Result<Admitted, IdError> {
        let Some(t) = self.token(caller)? else {
            return Ok(Admitted::open());
        };
        let held = scope::scopes_on(&t.grants, namespace);
        match scopes.into_iter().find(|s| held.contains(*s)) {
            Some(scope) => self.admit(caller, namespace, scope, count),
            None => {
                self.refuse(&t.label, "forbidden");
                Err(IdError::Forbidden(format!(
                    "token {:?} holds neither the {} nor the {} scope on namespace {namespace:?}",
                    t.label, scopes[0], scopes[1]
                )))
            }
        }
    }

    /// Whether `caller` may run a node-wide operation needing `scope` (the status page, and
    /// `/metrics` when they need a token): only a grant on `*` covers the whole node.
    pub fn admit_node(&self, caller: Caller, scope: Scope) -> Result<(), IdError> {
        let Some(t) = self.token(caller)? else {
            return Ok(());
        };
        let whole = t
            .grants
            .iter()
            .any(|(p, s)| *p == Pattern::Any && s.contains(scope));
        if whole {
            Ok(())
        } else {
            self.refuse(&t.label, "forbidden");
            Err(IdError::Forbidden(format!(
                "token {:?} does not hold the {scope} scope on * (this covers every namespace)",
                t.label
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_api::ErrorCode;
    use idmint_core::ManualClock;

    fn config(toml_text: &str) -> AuthConfig {
        let raw: RawAuth = toml::from_str(toml_text).unwrap();
        raw.validate(1_000_000).unwrap()
    }

    fn auth(toml_text: &str, clock: Arc<ManualClock>) -> Auth {
        Auth::new(Some(config(toml_text)), clock, Arc::new(Metrics::new()))
    }

    const ORDERS: &str = r#"
        [[tokens]]
        name = "orders"
        hash = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        scopes = { "orders.*" = ["ids", "read"], "*" = ["read"] }
        max_count = 100
        rate = 10
    "#;

    #[test]
    fn off_lets_everyone_through() {
        let a = Auth::new(
            None,
            Arc::new(ManualClock::default()),
            Arc::new(Metrics::new()),
        );
        assert_eq!(a.authenticate_header(None), Ok(Caller::Open));
        assert!(a.admit(Caller::Open, "x", Scope::Admin, 1_000_000).is_ok());
    }

    /// Take `count` from `name` as `caller`, as the node's request path does: admit, then the
    /// namespace's quota.
    fn take(
        a: &Auth,
        buckets: &Buckets,
        caller: Caller,
        name: &str,
        scope: Scope,
        count: u64,
    ) -> Result<(), IdError> {
        a.admit(caller, name, scope, count)?
            .take_quota(a, buckets, name, count)
    }

    #[test]
    fn tokens_scopes_and_quotas_decide_in_order() {
        let clock = Arc::new(ManualClock::default());
        let a = auth(ORDERS, clock.clone());
        let (eu, us, users) = (Buckets::default(), Buckets::default(), Buckets::default());
        fn code<T>(r: Result<T, IdError>) -> Option<ErrorCode> {
            r.err().map(|e| e.code())
        }
        assert_eq!(
            code(a.authenticate_header(None)),
            Some(ErrorCode::Unauthorized)
        );
        assert_eq!(
            code(a.authenticate_header(Some(b"Basic abc"))),
            Some(ErrorCode::Unauthorized)
        );
        assert_eq!(
            code(a.authenticate_header(Some(b"Bearer abd"))),
            Some(ErrorCode::Unauthorized)
        );
        let caller = a.authenticate_header(Some(b"bearer abc")).unwrap();
        assert_eq!(caller, Caller::Token(TokenHash::of(b"abc")));
        assert_eq!(
            code(take(&a, &users, caller, "users", Scope::Ids, 1)),
            Some(ErrorCode::Forbidden)
        );
        assert_eq!(take(&a, &users, caller, "users", Scope::Read, 0), Ok(()));
        assert_eq!(
            code(take(&a, &eu, caller, "orders.eu", Scope::Blocks, 1)),
            Some(ErrorCode::Forbidden)
        );
        assert_eq!(
            code(take(&a, &eu, caller, "orders.eu", Scope::Ids, 101)),
            Some(ErrorCode::InvalidCount)
        );
        assert_eq!(take(&a, &eu, caller, "orders.eu", Scope::Ids, 10), Ok(()));
        let limited = take(&a, &eu, caller, "orders.eu", Scope::Ids, 1).unwrap_err();
        assert_eq!(
            limited,
            IdError::RateLimited {
                message: limited.to_string(),
                retry_after_secs: 1
            }
        );
        // Another namespace has its own bucket; the first refills on the injected clock.
        assert_eq!(take(&a, &us, caller, "orders.us", Scope::Ids, 10), Ok(()));
        clock.advance_millis(100);
        assert_eq!(take(&a, &eu, caller, "orders.eu", Scope::Ids, 1), Ok(()));
        assert!(a.admit_node(caller, Scope::Read).is_ok());
        assert!(a.admit_node(caller, Scope::Ids).is_err());
        // Only namespaces that took ids have buckets, one per token.
        assert_eq!((eu.len(), us.len(), users.len()), (1, 1, 0));
        let text = a.metrics.encode(crate::metrics::Format::Prometheus);
        for line in [
            "idmint_auth_refused_total{token=\"none\",reason=\"unauthorized\"} 2",
            "idmint_auth_refused_total{token=\"unknown\",reason=\"unauthorized\"} 1",
            "idmint_auth_refused_total{token=\"orders\",reason=\"forbidden\"} 3",
            "idmint_auth_refused_total{token=\"orders\",reason=\"max_count\"} 1",
            "idmint_auth_refused_total{token=\"orders\",reason=\"rate_limited\"} 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        a.admit(caller, "orders.eu", Scope::Ids, 0)
            .unwrap()
            .served(&a, 7);
        let text = a.metrics.encode(crate::metrics::Format::Prometheus);
        assert!(
            text.contains("idmint_auth_ids_total{token=\"orders\"} 7"),
            "{text}"
        );
    }

    /// A reload replaces the tokens for every caller at once, sessions included: a removed
    /// token is refused at its next request, a caller established with auth off is refused
    /// once auth is on.
    #[test]
    fn a_reload_takes_effect_at_the_next_request() {
        let a = auth(ORDERS, Arc::new(ManualClock::default()));
        let caller = a.authenticate_token(b"abc").unwrap();
        assert!(a.admit(caller, "orders.eu", Scope::Ids, 1).is_ok());
        a.reload(Some(config(
            "[[tokens]]\nhash = \"sha256:cb8379ac2098aa165029e3938a51da0bcecfc008fd6795f401178647f96c5b34\"\nscopes = { \"*\" = [\"ids\"] }",
        )));
        assert_eq!(
            a.admit(caller, "orders.eu", Scope::Ids, 1)
                .unwrap_err()
                .code(),
            ErrorCode::Unauthorized
        );
        let open = Auth::new(
            None,
            Arc::new(ManualClock::default()),
            Arc::new(Metrics::new()),
        );
        let session = open.authenticate_token(b"anything").unwrap();
        assert_eq!(session, Caller::Open);
        open.reload(Some(config(ORDERS)));
        assert_eq!(
            open.admit(session, "orders.eu", Scope::Ids, 1)
                .unwrap_err()
                .code(),
            ErrorCode::Unauthorized
        );
    }

    #[test]
    fn bad_tables_name_the_key() {
        let err = |text: &str| {
            let raw: RawAuth = toml::from_str(text).unwrap();
            raw.validate(1_000_000).unwrap_err().to_string()
        };
        let hash = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert!(err("metrics = \"closed\"").starts_with("auth.metrics:"));
        assert!(err("[[tokens]]\nhash = \"abc\"").starts_with("auth.tokens[0].hash:"));
        let two = format!("[[tokens]]\nhash = \"{hash}\"\n[[tokens]]\nhash = \"{hash}\"");
        assert!(err(&two).starts_with("auth.tokens[1].hash:"));
        let scope = format!("[[tokens]]\nhash = \"{hash}\"\nscopes = {{ \"*\" = [\"write\"] }}");
        assert!(
            err(&scope).starts_with("auth.tokens[0].scopes."),
            "{}",
            err(&scope)
        );
        let pattern = format!("[[tokens]]\nhash = \"{hash}\"\nscopes = {{ \"a*\" = [\"ids\"] }}");
        assert!(err(&pattern).starts_with("auth.tokens[0].scopes:"));
        let rate = format!("[[tokens]]\nhash = \"{hash}\"\nrate = 0");
        assert!(err(&rate).starts_with("auth.tokens[0].rate:"));
        for bad in [0, 2_000_000] {
            let max = format!("[[tokens]]\nhash = \"{hash}\"\nmax_block_32 = {bad}");
            assert!(err(&max).starts_with("auth.tokens[0].max_block_32:"));
        }
        let max = format!("[[tokens]]\nhash = \"{hash}\"\nmax_count = 2000000");
        assert!(err(&max).starts_with("auth.tokens[0].max_count:"));
        let name = format!("[[tokens]]\nname = \"none\"\nhash = \"{hash}\"");
        assert!(err(&name).starts_with("auth.tokens[0].name:"));
        // Without a name, the label is the hash's first 12 digits.
        let c = config(&format!("[[tokens]]\nhash = \"{hash}\""));
        assert_eq!(c.tokens[0].label, "ba7816bf8f01");
    }
}
