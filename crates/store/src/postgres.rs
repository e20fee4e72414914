//! The postgres authority (being written).
