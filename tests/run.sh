#!/usr/bin/env bash
# The test command: installs what the tests need (tests/setup.sh), then runs every test with
# cargo-nextest, which gives each test its own process (some set process limits or enter
# network namespaces). Arguments go to `cargo nextest run`.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cargo nextest run --no-fail-fast "$@"
