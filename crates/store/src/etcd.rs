//! The etcd authority (being written).
