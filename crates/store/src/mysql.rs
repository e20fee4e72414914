//! The mysql authority (being written).
