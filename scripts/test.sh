#!/usr/bin/env bash
# The project's test command (the README's second command): formatting, lints, the whole test
# suite, and the loom model checks. It installs what it needs that is missing (the rustfmt and
# clippy components) and says clearly what it cannot provide.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo is not installed; install Rust from https://rustup.rs (1.90 or later)" >&2
  exit 1
fi
for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null 2>&1; then
      step "installing the $component component"
      rustup component add "$component"
    else
      echo "error: cargo $component is missing and rustup is not available to install it" >&2
      exit 1
    fi
  fi
done

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings denied)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo test --workspace"
cargo test --workspace --all-features

step "loom model checks of the lock-free paths"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p idmint-core --test loom --release

echo
echo "all checks passed"
