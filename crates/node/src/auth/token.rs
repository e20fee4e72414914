//! Bearer tokens as the node knows them: by the SHA-256 of the token, never the token itself.
//!
//! The configuration holds `hash = "sha256:<64 hex digits>"`; a presented token is hashed and
//! compared with every configured hash in constant time (the comparison of two digests leaks
//! nothing useful, but it costs nothing to make it not depend on where they differ). A token is
//! a long random string (`idmint token new`: 32 random bytes), so a plain unsalted hash is
//! enough: there is no dictionary to try.

use sha2::{Digest, Sha256};
use std::fmt;

/// The text before the hex digits of a configured hash.
pub const HASH_PREFIX: &str = "sha256:";

/// The SHA-256 digest of a bearer token.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash([u8; 32]);

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenHash({})", self.short())
    }
}

impl fmt::Display for TokenHash {
    /// `sha256:<64 hex digits>`, as in the configuration.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(HASH_PREFIX)?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl TokenHash {
    /// The hash of `token`.
    pub fn of(token: &[u8]) -> Self {
        TokenHash(Sha256::digest(token).into())
    }

    /// Reads `sha256:<64 hex digits>` (either case), or says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(hex) = text.strip_prefix(HASH_PREFIX) else {
            return Err(format!(
                "must be \"{HASH_PREFIX}\" followed by 64 hex digits (idmint token new prints \
                 one); the token itself never goes in the configuration"
            ));
        };
        if hex.len() != 64 {
            return Err(format!(
                "{HASH_PREFIX} must be followed by 64 hex digits, got {}",
                hex.len()
            ));
        }
        let mut out = [0u8; 32];
        for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
            let digit = |c: u8| (c as char).to_digit(16);
            match (digit(pair[0]), digit(pair[1])) {
                (Some(hi), Some(lo)) => out[i] = (hi * 16 + lo) as u8,
                _ => return Err(format!("{HASH_PREFIX} is followed by a non-hex digit")),
            }
        }
        Ok(TokenHash(out))
    }

    /// The first 12 hex digits: a label for metrics and logs that identifies the token without
    /// giving its hash away whole.
    pub fn short(&self) -> String {
        self.0[..6].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `self` and `other` are equal, in time that does not depend on where they differ.
    pub fn matches(&self, other: &TokenHash) -> bool {
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn hashes_print_and_parse_back() {
        let h = TokenHash::of(b"abc");
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        assert_eq!(
            h.to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(TokenHash::parse(&h.to_string()).unwrap(), h);
        assert_eq!(
            TokenHash::parse(&h.to_string().to_uppercase().replace("SHA256", "sha256")).unwrap(),
            h
        );
        assert_eq!(h.short(), "ba7816bf8f01");
    }

    #[test]
    fn verification_accepts_the_token_only() {
        let h = TokenHash::of(b"idmint_secret");
        assert!(TokenHash::of(b"idmint_secret").matches(&h));
        assert!(!TokenHash::of(b"idmint_secreT").matches(&h));
        assert!(!TokenHash::of(b"").matches(&h));
    }

    #[test]
    fn malformed_hashes_are_refused_with_a_reason() {
        for bad in [
            "abc",
            "sha256:",
            "sha256:xyz",
            "md5:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015az",
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad00",
        ] {
            assert!(TokenHash::parse(bad).is_err(), "{bad}");
        }
        // Multi-byte text of the right length must not panic.
        assert!(TokenHash::parse(&format!("sha256:{}", "é".repeat(32))).is_err());
    }
}
