//! Private or per-test instances of postgres for tests (being written).
