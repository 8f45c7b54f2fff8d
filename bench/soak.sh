#!/usr/bin/env bash
# Soak run: everything that takes too long for CI, in one go, with a summary table.
#
#   bench/soak.sh [seconds-per-fuzz-target]        (default 60)
#
# 1. builds Outrider in the dist profile (skip with OUTRIDER_SKIP_BUILD=1; OUTRIDER_BIN to use
#    another binary);
# 2. runs each cargo-fuzz target in fuzz/ for the given time, from its seed corpus
#    (fuzz/corpus/<target>); new inputs and crash artifacts go to fuzz/out/ (not committed).
#    Needs a nightly toolchain and cargo-fuzz: both installed if missing;
# 3. runs the fault-injection tests (tests/*/faults_*.rs, when present) in release with
#    OUTRIDER_FAULT_REQUESTS requests (default 100000);
# 4. runs the runtime fuzzer (tests/xds/runtime_fuzz.rs) in release, over SotW and Delta ADS,
#    with OUTRIDER_FUZZ_STEPS steps each (default 2000), the largest rings allowed
#    (OUTRIDER_FUZZ_HEAVY) and OUTRIDER_FUZZ_SEED if set (else the test's own seeds);
# 5. runs bench/idle-connections.py: IDLE_CONNECTIONS (default 10000) idle HTTP/1.1 and
#    HTTP/2 connections on Outrider, then on Envoy 1.40 (bench/install-envoy.sh), one after
#    the other, with RSS before and after.
# Honours CARGO_TARGET_DIR (the fuzz build goes to $CARGO_TARGET_DIR/fuzz, else
# fuzz/target). Exits non-zero when any step failed; a fuzz crash is a bug in Outrider:
# the input is in fuzz/out/artifacts/<target>/, replay it with
# `cargo +nightly fuzz run <target> <file>`.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
secs="${1:-60}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
fuzz_target_dir="${CARGO_TARGET_DIR:+$CARGO_TARGET_DIR/fuzz}"
fuzz_target_dir="${fuzz_target_dir:-$root/fuzz/target}"
out="$root/fuzz/out"
mkdir -p "$out"

rows=()
failed=0
row() { rows+=("| $1 | $2 | $3 |"); [[ "$2" == FAIL* ]] && failed=1; return 0; }

# --- 1. dist build -------------------------------------------------------------------
if [[ -z "${OUTRIDER_SKIP_BUILD:-}" ]]; then
    if (cd "$root" && cargo build --profile dist --bin outrider); then
        row "dist build" ok "$target_dir/dist/outrider"
    else
        row "dist build" FAIL "cargo build --profile dist"
    fi
fi
outrider="${OUTRIDER_BIN:-$target_dir/dist/outrider}"

# --- 2. fuzz targets --------------------------------------------------------------------
fuzz_ready=1
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal || fuzz_ready=0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked || fuzz_ready=0
fi
if [[ $fuzz_ready == 1 ]]; then
    for t in $(cd "$root/fuzz" && cargo +nightly fuzz list); do
        mkdir -p "$out/corpus/$t" "$out/artifacts/$t"
        log="$out/$t.log"
        # New inputs go to the first corpus directory (out/), seeds are only read.
        (cd "$root/fuzz" && cargo +nightly fuzz run --target-dir "$fuzz_target_dir" "$t" \
            "$out/corpus/$t" "$root/fuzz/corpus/$t" -- \
            -max_total_time="$secs" -timeout=10 -print_final_stats=1 \
            -artifact_prefix="$out/artifacts/$t/") >"$log" 2>&1
        status=$?
        execs=$(awk '/stat::number_of_executed_units/ {print $NF}' "$log" | tail -1)
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
        crashes=$(find "$out/artifacts/$t" -type f | wc -l)
        detail="${execs:-?} executions in ${secs}s, coverage ${cov:-?}, $crashes crash artifact(s)"
        if [[ $status == 0 && $crashes == 0 ]]; then
            row "fuzz $t" ok "$detail"
        else
            row "fuzz $t" "FAIL (exit $status)" "$detail; log $log"
        fi
    done
else
    row "fuzz" "FAIL" "no nightly toolchain or cargo-fuzz"
fi

# --- 3. fault tests under load ------------------------------------------------------------
shopt -s nullglob
faults=("$root"/tests/*/faults_*.rs)
shopt -u nullglob
if (( ${#faults[@]} == 0 )); then
    row "fault tests" skipped "no tests/*/faults_*.rs"
else
    requests="${OUTRIDER_FAULT_REQUESTS:-100000}"
    log="$out/faults.log"
    if (cd "$root" && OUTRIDER_FAULT_REQUESTS="$requests" cargo nextest run --release --test proxy --test xds -E 'test(/^faults_/)') >"$log" 2>&1; then
        row "fault tests" ok "$(grep -E 'Summary' "$log" | tail -1 | sed 's/^ *//'), $requests requests"
    else
        row "fault tests" FAIL "$(grep -E 'Summary' "$log" | tail -1 | sed 's/^ *//'); log $log"
    fi
fi

# --- 4. runtime fuzzer --------------------------------------------------------------------
steps="${OUTRIDER_FUZZ_STEPS:-2000}"
log="$out/runtime-fuzz.log"
if (cd "$root" && OUTRIDER_FUZZ_STEPS="$steps" OUTRIDER_FUZZ_HEAVY=1 \
        cargo nextest run --release --test xds -E 'test(/^runtime_fuzz::/)' --no-capture) >"$log" 2>&1; then
    row "runtime fuzzer" ok "$(grep -E '^runtime fuzz over .* steps, ' "$log" | sed 's/;.*//' | paste -sd' ' -)"
else
    row "runtime fuzzer" FAIL "$(grep -E 'seed 0x' "$log" | grep -E 'panicked|hung|died|not answered|grew' | head -1); log $log"
fi

# --- 5. idle connections ----------------------------------------------------------------
if ! command -v nginx >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null
fi
bash "$here/install-envoy.sh" >/dev/null || true
log="$out/idle-connections.md"
if python3 "$here/idle-connections.py" --connections "${IDLE_CONNECTIONS:-10000}" --outrider "$outrider" >"$log"; then
    row "idle connections" ok "table in $log"
else
    row "idle connections" FAIL "see $log"
fi

echo
echo "| step | result | detail |"
echo "| --- | --- | --- |"
printf '%s\n' "${rows[@]}"
echo
cat "$log"
exit "$failed"
