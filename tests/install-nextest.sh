#!/usr/bin/env bash
# Installs cargo-nextest, which runs the tests (each in its own process), when the machine
# does not have it: built from crates.io with the versions its lock file pins. Called by
# .ci/run before anything else and by tests/setup.sh (the README's test command).
set -euo pipefail
if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi
cargo nextest --version
