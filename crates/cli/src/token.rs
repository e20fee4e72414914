//! `idmint token new`: a fresh bearer token for `[auth]`, printed once with the configuration
//! lines that name it by hash. The node never stores the token itself (docs/configuration.md,
//! `[auth]`), so this is the only time it is shown. Its scopes follow the role it is for
//! ([`Role`]; docs/grpc.md "Tokens and roles").

use anyhow::{bail, Result};
use idmint_node::auth::TokenHash;
use rand::RngCore;
use std::fmt::Write;

/// The text every token starts with, so one found in a log or a repository is recognisable.
const PREFIX: &str = "idmint_";

/// Who a token is for, which decides its scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// An application taking ids: `ids`, `blocks` (the client libraries buffer sequence
    /// blocks and give their unused tail back), `workers` (their local snowflake generators
    /// lease worker ids) and `read`.
    Application,
    /// A lower tier of nodes (its `[authority] token`): blocks and worker leases, `blocks`,
    /// `tier` and `read`.
    Tier,
    /// The nodes of one cluster forwarding to each other (their `[peers] token`): `peer`.
    Peer,
    /// An operator moving watermarks (`idmint admin`): `admin` and `read`.
    Admin,
}

impl Role {
    /// The scopes the role's token is granted on `*`.
    pub fn scopes(self) -> &'static [&'static str] {
        match self {
            Role::Application => &["ids", "blocks", "workers", "read"],
            Role::Tier => &["blocks", "tier", "read"],
            Role::Peer => &["peer"],
            Role::Admin => &["admin", "read"],
        }
    }
}

/// A new token: [`PREFIX`] and 32 random bytes (256 bits) in hex.
fn new_token() -> String {
    let mut bytes = [0u8; 32];
    // ThreadRng: a CSPRNG seeded, and reseeded, from the operating system.
    rand::rng().fill_bytes(&mut bytes);
    let mut token = String::from(PREFIX);
    for b in bytes {
        let _ = write!(token, "{b:02x}");
    }
    token
}

/// What `idmint token new` prints: the token, then a `[[auth.tokens]]` entry for it.
pub fn new(name: Option<&str>, role: Role) -> Result<String> {
    if let Some(name) = name {
        let usable = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !usable {
            bail!("--name {name:?}: 1 to 64 ASCII letters, digits, '_', '-' or '.'");
        }
    }
    let token = new_token();
    let hash = TokenHash::of(token.as_bytes());
    let name_line = name.map_or(String::new(), |n| format!("name = \"{n}\"\n"));
    let scopes = role
        .scopes()
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect::<Vec<_>>()
        .join(", ");
    Ok(format!(
        "# The token, shown this once (the node keeps only its hash); give it to the client:\n\
         {token}\n\
         \n\
         # For idmint.toml; narrow \"*\" to the namespaces the client needs:\n\
         [[auth.tokens]]\n\
         {name_line}\
         hash = \"{hash}\"\n\
         scopes = {{ \"*\" = [{scopes}] }}\n"
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_printed_hash_is_the_printed_tokens() {
        let text = new(Some("orders-service"), Role::Application).unwrap();
        let token = text.lines().nth(1).unwrap();
        assert!(
            token.starts_with(PREFIX) && token.len() == PREFIX.len() + 64,
            "{token}"
        );
        let hash = TokenHash::of(token.as_bytes()).to_string();
        assert!(text.contains(&format!("hash = \"{hash}\"")), "{text}");
        assert!(text.contains("name = \"orders-service\""), "{text}");
        // The entry parses as the node's configuration.
        let toml = text.split_once("[[auth.tokens]]").unwrap().1;
        let config = idmint_node::FileConfig::parse(&format!("[[auth.tokens]]{toml}")).unwrap();
        assert_eq!(config.node.auth.unwrap().tokens[0].label, "orders-service");
        assert_ne!(
            new(None, Role::Application).unwrap(),
            new(None, Role::Application).unwrap()
        );
        assert!(new(Some("a b"), Role::Application).is_err());
    }

    /// Each role's entry parses and grants its scopes on `*`, and only a tier's token holds
    /// `tier`, only a peer's `peer` (the node-to-node calls need scopes no application token
    /// holds), only an application's `workers`.
    #[test]
    fn each_role_gets_its_scopes() {
        use idmint_node::auth::{Caller, Scope};
        for (role, holds) in [
            (
                Role::Application,
                vec![Scope::Ids, Scope::Blocks, Scope::Workers, Scope::Read],
            ),
            (Role::Tier, vec![Scope::Blocks, Scope::Tier, Scope::Read]),
            (Role::Peer, vec![Scope::Peer]),
            (Role::Admin, vec![Scope::Admin, Scope::Read]),
        ] {
            let text = new(None, role).unwrap();
            let token = text.lines().nth(1).unwrap();
            let toml = text.split_once("[[auth.tokens]]").unwrap().1;
            let config = idmint_node::FileConfig::parse(&format!("[[auth.tokens]]{toml}")).unwrap();
            let auth = idmint_node::auth::Auth::new(
                config.node.auth,
                std::sync::Arc::new(idmint_core::ManualClock::default()),
                std::sync::Arc::new(idmint_node::metrics::Metrics::new()),
            );
            let caller = auth.authenticate_token(token.as_bytes()).unwrap();
            assert!(matches!(caller, Caller::Token(_)));
            for scope in Scope::ALL {
                assert_eq!(
                    auth.may(caller, "orders", scope),
                    holds.contains(&scope),
                    "{role:?} {scope}"
                );
            }
        }
    }
}
