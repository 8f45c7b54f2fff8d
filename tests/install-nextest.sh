#!/usr/bin/env bash
# Installs cargo-nextest, which runs the tests (each in its own process), when the machine
# does not have it: built from crates.io with the versions its lock file pins. Called by
# .ci/run before anything else and by tests/setup.sh (the README's test command).
set -euo pipefail
# The version the tests were last run with: a newer release may need a newer Rust.
NEXTEST_VERSION=0.9.151
if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked --version "$NEXTEST_VERSION" cargo-nextest
fi
cargo nextest --version
