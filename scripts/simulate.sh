#!/usr/bin/env bash
# Runs every seeded simulation with many more seeds than CI does, optimised, and prints
# how many seeds each ran and how long it took. A failing seed is printed by the
# simulation with the line that replays it (SIM_SEED=n).
#
#   scripts/simulate.sh [SEEDS] [FIRST_SEED]
#
# SEEDS (default 2000) seeds per simulation from FIRST_SEED (default 1000000, above the
# seeds CI runs, so a long run tries new ones). The quorum simulations run an eighth as
# many (and so do the whole-cluster simulations): each of their seeds drives openraft
# through thousands of simulated milliseconds.
#
# They are built with `--cfg tokio_unstable`, which lets the simulations seed Tokio's own
# generator (the fairness of `select!` inside openraft), so that every seed replays
# exactly; in a target directory of their own (target/simulate), so that the flag does
# not rebuild, or reach, the rest of the workspace. To replay a seed exactly:
#   RUSTFLAGS="--cfg tokio_unstable" CARGO_TARGET_DIR=target/simulate SIM_SEED=n \
#     cargo test --release -p osprey-cluster --test cluster_simulation
set -euo pipefail
cd "$(dirname "$0")/.."

seeds=${1:-2000}
first=${2:-1000000}

# crate:test-binary, for every seeded simulation in the workspace.
simulations=(
    osprey-cluster:replica_simulation
    osprey-cluster:controller_simulation
    osprey-cluster:partition_replication_simulation
    osprey-cluster:quorum_simulation
    osprey-cluster:cluster_simulation
    osprey-coordinator:cluster_coordinators_simulation
    osprey-coordinator:cluster_txn_simulation
    osprey-coordinator:group_simulation
    osprey-coordinator:group_consumer_simulation
    osprey-coordinator:group_share_simulation
    osprey-coordinator:group_streams_simulation
    osprey-coordinator:group_txn_offsets_simulation
    osprey-coordinator:share_partition_simulation
    osprey-coordinator:txn_simulation
)

export RUSTFLAGS="${RUSTFLAGS:-} --cfg tokio_unstable"
export CARGO_TARGET_DIR=target/simulate
mkdir -p "$CARGO_TARGET_DIR"
cargo build --release --locked --tests -p osprey-cluster -p osprey-coordinator >/dev/null
failed=()
for sim in "${simulations[@]}"; do
    crate=${sim%%:*}
    test=${sim##*:}
    n=$seeds
    if [ "$test" = quorum_simulation ] || [ "$test" = cluster_simulation ] || [ "$test" = cluster_coordinators_simulation ] || [ "$test" = cluster_txn_simulation ]; then
        n=$(( (seeds + 7) / 8 ))
    fi
    started=$(date +%s)
    if SIM_SEEDS=$n SIM_FIRST_SEED=$first cargo test --release --locked -q -p "$crate" --test "$test" >"$CARGO_TARGET_DIR/$test.log" 2>&1; then
        verdict=ok
    else
        verdict="FAILED ($CARGO_TARGET_DIR/$test.log)"
        failed+=("$test")
        grep -E "panicked|replay with|SIM_SEED" "$CARGO_TARGET_DIR/$test.log" | head -n 20 >&2 || true
    fi
    printf '%-32s %6d seeds from %d  %5d s  %s\n' "$test" "$n" "$first" $(( $(date +%s) - started )) "$verdict"
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "failed: ${failed[*]}" >&2
    exit 1
fi
