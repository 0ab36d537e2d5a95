#!/usr/bin/env bash
# The whole test suite: formatting, lints with warnings denied, then every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
