//! Routing a row from its key, offline: no node is asked. The arithmetic is idmint-core's, the
//! same `idmint decode` and `idmint shard-for` use (the shared vectors of
//! clients/conformance/decode.json check it against the CLI, as they check the Python and
//! TypeScript clients).
//!
//! - [`shard_of`]: the shard an id names (its node field), from a layout spec or a preset name
//!   ([`shard_of_preset`]; `"instagram"` names the field `shard`).
//! - [`shard_for`]: the logical shard of a key, `key % shards`.
//! - [`residue_of`] and [`member_of`]: an id of a step/offset sequence or a multi authority names
//!   its issuer by `id % step`; members are numbered from 1 in configuration order.
//! - [`CompositeKey`]: `(shard, local)` written `shard-local` (`42-1007`), canonical text only.

pub use idmint_core::keys::{
    member_of, residue_of, shard_for, CompositeKey, CompositeKeyError, KeyPart,
};
use idmint_core::{DecodeError, Layout, LayoutError, LayoutSpec};
use thiserror::Error;

/// Why an id's shard could not be read.
#[derive(Debug, Error)]
pub enum ShardOfError {
    /// The layout is not a valid one (or not a preset's name).
    #[error("layout: {0}")]
    Layout(#[from] LayoutError),
    /// The id does not fit the layout.
    #[error(transparent)]
    Id(#[from] DecodeError),
}

/// The shard an id of layout `spec` was made on: its node field.
pub fn shard_of(spec: &LayoutSpec, id: u64) -> Result<u64, ShardOfError> {
    let layout = Layout::new(*spec)?;
    Ok(idmint_core::keys::shard_of(&layout, id)?)
}

/// The shard an id of the preset layout `name` (`instagram`, `twitter`, ...) was made on.
pub fn shard_of_preset(name: &str, id: u64) -> Result<u64, ShardOfError> {
    shard_of(Layout::preset(name)?.spec(), id)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::num::NonZeroU64;

    #[test]
    fn an_instagram_id_names_its_shard() {
        let id = (1_387_263_000u64 << 23) | (1341 << 10) | (5001 % 1024);
        assert_eq!(shard_of_preset("instagram", id).unwrap(), 1341);
        assert_eq!(shard_of(Layout::instagram().spec(), id).unwrap(), 1341);
        assert_eq!(shard_for(31_341, NonZeroU64::new(2000).unwrap()), 1341);
        assert!(matches!(
            shard_of_preset("instagram", 1 << 63),
            Err(ShardOfError::Id(_))
        ));
        assert!(matches!(
            shard_of_preset("nope", 1),
            Err(ShardOfError::Layout(_))
        ));
    }
}
