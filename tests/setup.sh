#!/usr/bin/env bash
# What the tests need, installed before `cargo nextest run` — sourced by the test command
# (tests/run.sh) and by CI (.ci/run). Each part is best effort: Envoy 1.40 (the other half
# of the differential tests), iproute2 and iptables (the capture tests, as root),
# kubernetes-validate, the Go peers and ztunnel built from source, Chromium, cargo-nextest. It exports
# OUTRIDER_EXPECT, the tools present afterwards: a test that skips for want of one of them
# fails (tests/common/skip.rs). Set OUTRIDER_EXPECT yourself to expect less (or more).
# Sourced, so it leaves the caller's shell options as they were.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

expect=()
if bash bench/install-envoy.sh; then
  expect+=(envoy)
else
  echo "tests/setup.sh: envoy not installed; the Envoy halves of the differential tests will say SKIPPED"
fi

if [[ "$(id -u)" == 0 ]] && { ! command -v iptables >/dev/null || ! command -v ip >/dev/null; }; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq iptables iproute2 >/dev/null; } || true
fi
if [[ "$(id -u)" == 0 ]] && command -v iptables >/dev/null && command -v ip >/dev/null; then
  expect+=(netns)
else
  echo "tests/setup.sh: not root, or no iptables/iproute2; the network-namespace tests will say SKIPPED"
fi

# Chromium draws the admin server's live pages for their test (Debian's package, headless).
if [[ "$(id -u)" == 0 ]] && ! command -v chromium >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || true
fi
if command -v chromium >/dev/null; then
  expect+=(chromium)
else
  echo "tests/setup.sh: chromium not installed; the live balancing page test will say SKIPPED"
fi

if bash deploy/install-validator.sh; then
  expect+=(validator)
else
  echo "tests/setup.sh: kubernetes-validate not installed; the manifest validation will say SKIPPED"
fi

if command -v go >/dev/null && bash tests/peers/build.sh; then
  expect+=(peers)
else
  echo "tests/setup.sh: Go peers not built; the tests that need them will say SKIPPED"
fi

if bash tests/peers/ztunnel/build.sh; then
  expect+=(ztunnel)
else
  echo "tests/setup.sh: ztunnel not built; the tests that need it will say SKIPPED"
fi

bash tests/install-nextest.sh

OUTRIDER_EXPECT="${OUTRIDER_EXPECT-$(IFS=,; echo "${expect[*]}")}"
export OUTRIDER_EXPECT
echo "tests/setup.sh: expecting ${OUTRIDER_EXPECT:-nothing}"
