#!/usr/bin/env bash
# The CPU row of `benches/dispatch.rs` (a 256-element `add` through the
# dispatcher / the same kernel launched directly) over shuffled function
# layouts of one build.
#
# One binary's ratio depends on where the linker put the hot functions:
# the same source measured 1.10 in one binary and 1.27 in another. So this
# relinks the bench K times with the linker's sections shuffled (lld's
# `--shuffle-sections`, one seed per layout; nothing is recompiled), runs
# the CPU row of each, and prints every layout's paired median and their
# spread. Compare two builds by their distributions, not by one binary.
#
# Usage: scripts/layouts.sh [K]   (K layouts, 8 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
layouts="${1:-8}"
if ! [[ "$layouts" =~ ^[1-9][0-9]*$ ]]; then
    echo "layouts.sh: expected a number of layouts (1 or more), found '${layouts:0:20}'" >&2
    exit 2
fi
ratios=()
for seed in $(seq 1 "$layouts"); do
    # Linking with lld (rustc's default linker on x86_64 Linux).
    exe=$(cargo rustc -q --profile bench --bench dispatch --features testing \
        --message-format=json-render-diagnostics \
        -- -C "link-arg=-Wl,--shuffle-sections=.text.*=$seed" |
        grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
    if [ -z "$exe" ]; then
        echo "layouts.sh: the bench binary was not built for layout $seed" >&2
        exit 1
    fi
    line=$(KEEL_BENCH_DEVICES=cpu "$exe" --bench dispatch_add_256 \
        --warm-up-time 0.5 --measurement-time 0.5 2>/dev/null |
        grep 'cpu:0: paired.*dispatched / direct =' || true)
    ratio=$(sed -E 's/.*dispatched \/ direct = ([0-9.]+) \(median\).*/\1/' <<<"$line")
    if ! [[ "$ratio" =~ ^[0-9.]+$ ]]; then
        echo "layouts.sh: expected the bench's cpu:0 paired ratio for layout $seed, found '${line:0:80}'" >&2
        exit 1
    fi
    echo "layout $seed: dispatched / direct = $ratio"
    ratios+=("$ratio")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk -v goal=1.15 '
    { r[NR] = $1; sum += $1; if ($1 <= goal) met++ }
    END {
        mid = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
        printf "%d layouts: median %.3f, mean %.3f, range %.3f-%.3f; <= %.2f in %d of %d\n",
            NR, mid, sum / NR, r[1], r[NR], goal, met + 0, NR
    }'
