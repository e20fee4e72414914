//! Private or per-test instances of mysql for tests (being written).
