//! Private or per-test instances of etcd for tests (being written).
