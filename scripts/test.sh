#!/usr/bin/env bash
# The whole test suite: formatting, lints with warnings denied, API docs without broken links,
# then every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Every rustdoc warning is an error: broken and private intra-doc links above all.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
cargo test --workspace --locked
