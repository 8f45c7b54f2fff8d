#!/usr/bin/env bash
# The test command. Installs what the tests need, each part best effort — Envoy 1.40 (the
# other half of the differential tests), iproute2 and iptables (the capture tests, as root),
# kubernetes-validate, the Go peers built from source, cargo-nextest — then runs every test
# with cargo-nextest, which gives each test its own process (some set process limits or
# enter network namespaces). OUTRIDER_EXPECT lists the tools that are present afterwards:
# a test that skips for want of one of them fails (tests/common/skip.rs). Set OUTRIDER_EXPECT
# yourself to expect less (or more). Arguments go to `cargo nextest run`.
set -euo pipefail
cd "$(dirname "$0")/.."

expect=()
if bash bench/install-envoy.sh; then
  expect+=(envoy)
else
  echo "tests/run.sh: envoy not installed; the Envoy halves of the differential tests will say SKIPPED"
fi

if [[ "$(id -u)" == 0 ]] && { ! command -v iptables >/dev/null || ! command -v ip >/dev/null; }; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq iptables iproute2 >/dev/null; } || true
fi
if [[ "$(id -u)" == 0 ]] && command -v iptables >/dev/null && command -v ip >/dev/null; then
  expect+=(netns)
else
  echo "tests/run.sh: not root, or no iptables/iproute2; the network-namespace tests will say SKIPPED"
fi

if bash deploy/install-validator.sh; then
  expect+=(validator)
else
  echo "tests/run.sh: kubernetes-validate not installed; the manifest validation will say SKIPPED"
fi

if command -v go >/dev/null && bash tests/peers/build.sh; then
  expect+=(peers)
else
  echo "tests/run.sh: Go peers not built; the tests that need them will say SKIPPED"
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi

OUTRIDER_EXPECT="${OUTRIDER_EXPECT-$(IFS=,; echo "${expect[*]}")}"
export OUTRIDER_EXPECT
echo "tests/run.sh: expecting ${OUTRIDER_EXPECT:-nothing}"
exec cargo nextest run --no-fail-fast "$@"
