//! `idmint token new`: a fresh bearer token for `[auth]`, printed once with the configuration
//! lines that name it by hash. The node never stores the token itself (docs/configuration.md,
//! `[auth]`), so this is the only time it is shown.

use anyhow::{bail, Result};
use idmint_node::auth::TokenHash;
use rand::RngCore;
use std::fmt::Write;

/// The text every token starts with, so one found in a log or a repository is recognisable.
const PREFIX: &str = "idmint_";

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
pub fn new(name: Option<&str>) -> Result<String> {
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
    Ok(format!(
        "# The token, shown this once (the node keeps only its hash); give it to the client:\n\
         {token}\n\
         \n\
         # For idmint.toml. The scopes of an application (an idmint client library, or\n\
         # curl); narrow \"*\" to its namespaces. A lower tier (kind = \"upstream\"): blocks,\n\
         # read. A peer's [peers] token: ids. A dashboard: read. An operator: admin.\n\
         [[auth.tokens]]\n\
         {name_line}\
         hash = \"{hash}\"\n\
         scopes = {{ \"*\" = [\"ids\", \"blocks\", \"read\"] }}\n"
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_printed_hash_is_the_printed_tokens() {
        let text = new(Some("orders-service")).unwrap();
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
        // The application role: what the client libraries need (blocks for sequence buffers).
        assert!(
            text.contains("scopes = { \"*\" = [\"ids\", \"blocks\", \"read\"] }"),
            "{text}"
        );
        assert_ne!(new(None).unwrap(), new(None).unwrap());
        assert!(new(Some("a b")).is_err());
    }
}
