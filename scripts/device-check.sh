#!/usr/bin/env bash
# The GPU checks, prepared here and run in one call on a lent GPU machine
# (see ../.library/device): the CUDA, Vulkan and wgpu tests on NVIDIA's
# drivers, then the benchmarks that have GPU rows in docs/BENCHMARKS.md.
#
#   scripts/device-check.sh pack          here: builds the test and bench
#                                         binaries and packs them into .gpu/
#   scripts/device-check.sh run [tests|benches|all]
#                                         there (a bare machine, no Rust):
#                                         runs them; logs go to $OUT
#
# `run` stops starting binaries once BUDGET seconds (default 540) have
# passed, so one call ends inside the device's 10-minute limit: tests
# first (each for at most TEST_SECS, default 240), then the benches in the
# order of what is left to measure (PyTorch's own figures, where a wgpu
# pass's timestamps land, large matmuls in every precision mode, the
# input-rounding modes, randn and normal_, sum and softmax, matmul, the
# wgpu and Vulkan dispatch loops, dispatch overhead).
#
# The device call (after `pack`, which also fetches `.gl/`): carry
# [".gl", ".gpu"], command
# `bash scripts/device-check.sh run all`; for a second, shorter call,
# `BUDGET=300 GPU_BENCHES_RUN="matmul-large reduce" ... run all` reruns
# every test and only the benches named (see run_benches). `.gl/` holds the Debian loader
# packages (libvulkan1, libegl1, ...) the device README says to bring;
# both folders are in .gitignore. The test binaries read their data
# from the path they were built at, so `run` links the checkout there.
set -euo pipefail
cd "$(dirname "$0")/.."

# The test binaries that exercise a GPU backend (the libraries' own unit
# tests are `keel` and `keel_device`), and the benches with GPU rows.
# (GPU_TESTS and GPU_BENCHES in the environment replace them, for a quick
# re-check: `GPU_TESTS=tests/ops GPU_BENCHES=benches/matmul ... pack`
# builds and packs only those.)
ALL_GPU_TESTS="tests/keel tests/keel_device tests/backends tests/conformance tests/profiler
tests/allocator tests/launch_blocking tests/ops tests/numerics tests/interop
tests/example_cuda_program"
ALL_GPU_BENCHES="benches/mlp benches/dispatch benches/wgpu benches/vulkan benches/matmul benches/random benches/reduce benches/ptx_baseline"
GPU_TESTS=$(echo ${GPU_TESTS:-$ALL_GPU_TESTS})
GPU_BENCHES=$(echo ${GPU_BENCHES:-$ALL_GPU_BENCHES})

# Cargo's target selection for a list of kind/name: all of a kind when the
# list is the full one (the library's unit tests among them).
targets() {
    local list=$1 all=$2 flag=$3 t
    [ "$list" = "$(echo $all)" ] && return
    for t in $list; do
        case "$t" in
            tests/keel) printf -- '--lib ' ;;
            tests/keel_device) ;;
            tests/example_*) ;;
            *) printf -- '--%s %s ' "$flag" "${t#*/}" ;;
        esac
    done
}

# The loader packages a bare lent machine lacks (Vulkan's and GL's;
# its driver is there): fetched once into .gl/, as the device README
# says, for amd64 whatever this machine is.
fetch_loaders() {
    compgen -G ".gl/*.deb" >/dev/null && return
    local lists=/tmp/keel-apt-amd64
    local o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists="$lists")
    mkdir -p .gl "$lists/partial"
    apt-get "${o[@]}" update >/dev/null
    (cd .gl && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
}

pack() {
    fetch_loaders
    mkdir -p .gpu
    rm -rf .gpu/bin
    mkdir -p .gpu/bin/tests .gpu/bin/benches
    # The executables cargo reports, by kind.
    local list=.gpu/executables.txt
    : >"$list"
    # shellcheck disable=SC2046
    cargo test -p keel -p keel-device --all-features --no-run --message-format=json \
        $(targets "$GPU_TESTS" "$ALL_GPU_TESTS" test) \
        | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print("tests", m["target"]["name"], m["executable"])' >>"$list"
    # The examples that need a GPU run like a test binary (its exit status
    # is its result).
    cargo build -p keel --example cuda_program --message-format=json \
        | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "example" in m["target"]["kind"]:
        print("tests", "example_" + m["target"]["name"], m["executable"])' >>"$list"
    # shellcheck disable=SC2046
    cargo bench -p keel --features testing,cuda,vulkan,wgpu --no-run --message-format=json \
        $(targets "$GPU_BENCHES" "$ALL_GPU_BENCHES" bench) \
        | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in m["target"]["kind"]:
        print("benches", m["target"]["name"], m["executable"])' >>"$list"
    # Only what touches a GPU backend: the call carries at most 64 MiB.
    local n=0
    while read -r kind name exe; do
        case " $GPU_TESTS $GPU_BENCHES " in
            *" $kind/$name "*) ;;
            *) continue ;;
        esac
        cp "$exe" ".gpu/bin/$kind/$name"
        strip ".gpu/bin/$kind/$name"
        n=$((n + 1))
    done <"$list"
    # Built at this path: the test binaries find tests/data through it.
    pwd >.gpu/built-at
    # PyTorch's figures on Keel's shapes, measured beside Keel's in the
    # same call (the team's script, where this checkout has it).
    local torch=../shared/testdata/make_torch_traces.py
    [ -f "$torch" ] && cp "$torch" .gpu/
    # A dictionary as large as the biggest binaries: they share most of
    # their code, compressed once.
    tar -C .gpu -cf - bin | xz -T1 --lzma2=preset=6,dict=384MiB >.gpu/bin.tar.xz
    rm -rf .gpu/bin
    ls -la .gpu
    echo "packed $n executables; the call carries [\".gl\", \".gpu\"]"
}

setup() {
    # The loaders go into / on the lent machine only (it is bare, and
    # given back afterwards), never on a development machine.
    if command -v nvidia-smi >/dev/null && compgen -G ".gl/*.deb" >/dev/null; then
        for f in .gl/*.deb; do dpkg -x "$f" /; done
        ldconfig
    fi
    local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    local egl=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    [ -f "$icd" ] && export VK_DRIVER_FILES="$icd"
    [ -f "$egl" ] && export __EGL_VENDOR_LIBRARY_FILENAMES="$egl"
    local at
    at=$(cat .gpu/built-at)
    if [ "$at" != "$PWD" ] && [ ! -e "$at" ]; then
        mkdir -p "$(dirname "$at")"
        ln -s "$PWD" "$at"
    fi
    BIN=/tmp/keel-gpu
    rm -rf "$BIN"
    mkdir -p "$BIN"
    # Python's lzma: the machine may have no xz.
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        .gpu/bin.tar.xz "$BIN"
    OUT="${OUT:-/tmp/keel-gpu-out}"
    mkdir -p "$OUT"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 \
        | tee "$OUT/gpu.txt" || true
}

BUDGET="${BUDGET:-540}"

# Seconds left of the budget, at most $1.
DEADLINE=$(($(date +%s) + BUDGET))
left() {
    local rest=$((DEADLINE - $(date +%s)))
    if [ "$rest" -gt "$1" ]; then echo "$1"; else echo "$rest"; fi
}

# Every test binary, CUDA, Vulkan and cooperative matrices required (a
# test that would skip for want of any of them fails instead); one
# summary line each. TEST_JOBS (default 4) binaries run at once: the lent
# machine has 16 cores, and its minutes
# are few.
run_one_test() {
    local t=$1 name status secs one
    name=$(basename "$t")
    one="$LOGS/test-$name.log"
    secs=$(left "${TEST_SECS:-240}")
    if [ "$secs" -lt 20 ]; then
        echo "test $name: not run (the budget is spent)" >"$LOGS/test-$name.sum"
        return 1
    fi
    # The tests that regenerate the WGSL translations need rustfmt, which
    # the bare machine lacks; they touch no GPU, and CI runs them.
    local args=()
    case "$name" in
        example_*) ;;
        *) args=(--skip the_translation_is_current) ;;
    esac
    # NVIDIA's Vulkan driver offers 16x16x16 f16 cooperative matrices
    # from Ampere on, so the tests of matmul_coop must run, not skip.
    if KEEL_REQUIRE_BACKENDS=cuda,vulkan KEEL_REQUIRE_COOPERATIVE_MATRIX=1 RUST_BACKTRACE=1 timeout "$secs" "$t" "${args[@]}" >"$one" 2>&1; then
        status=ok
    else
        status="FAILED ($?)"
    fi
    {
        echo "test $name: $status $(grep -a '^test result' "$one" | tail -1)"
        grep -a -- '--- .* stdout ----\|panicked at' "$one" | head -20
    } >"$LOGS/test-$name.sum"
    [ "$status" = ok ]
}

# Each binary's log goes to $LOGS, then all of them into one file under
# $OUT: only 8 files come back from the device machine.
run_tests() {
    local failed=0 f
    LOGS=/tmp/keel-gpu-logs
    rm -rf "$LOGS"
    mkdir -p "$LOGS"
    export -f run_one_test left
    export OUT LOGS DEADLINE
    ls "$BIN"/bin/tests/* | xargs -P "${TEST_JOBS:-4}" -I{} bash -c 'run_one_test "$1"' _ {} || failed=1
    cat "$LOGS"/test-*.sum | tee "$OUT/summary.txt"
    for f in "$LOGS"/test-*.log; do
        echo "==== $(basename "$f")"
        cat "$f"
    done >"$OUT/tests.log"
    return "$failed"
}

# The GPU rows of docs/BENCHMARKS.md, with short measurement times (the
# paired ratios the benches print are the figures to report).
run_benches() {
    local log="$OUT/benches.log" b="$BIN/bin/benches"
    : >"$log"
    local quick=(--warm-up-time 1 --measurement-time 2)
    # GPU_BENCHES_RUN (names: "torch matmul-large reduce ...") runs only
    # those of PyTorch's timings, the modes (BENCH-VARIABLE lower-cased
    # past KEEL_, as matmul-large) and the criterion runs, for a re-check.
    local only=" ${GPU_BENCHES_RUN:-} "
    wanted() {
        [ "$only" = "  " ] || case "$only" in *" $1 "*) true ;; *) false ;; esac
    }
    local runs=(
        "ptx_baseline|"
        "mlp|"
        "matmul|${quick[*]}"
        "random|${quick[*]}"
        "reduce|${quick[*]}"
        "wgpu|--warm-up-time 1 --measurement-time 4 10k_dispatches"
        "vulkan|--warm-up-time 1 --measurement-time 4 10k_dispatches"
        "dispatch|${quick[*]} dispatch_add_256"
    )
    if [ -f .gpu/make_torch_traces.py ] && wanted torch && [ "$(left 60)" -ge 30 ]; then
        echo "== PyTorch: make_torch_traces.py timings" | tee -a "$log"
        timeout "$(left 60)" python3 .gpu/make_torch_traces.py timings "$OUT/torch" >>"$log" 2>&1 \
            || echo "torch timings: exit $?" | tee -a "$log"
    fi
    # The modes that print one table each (no criterion): where a wgpu
    # program's timestamps land around a kernel, the large products of
    # every precision mode, and each input-rounding mode against plain f32.
    local modes=(
        "wgpu|KEEL_WGPU_STAMPS"
        "matmul|KEEL_MATMUL_LARGE"
        "matmul|KEEL_MATMUL_PRECISION"
    )
    for r in "${modes[@]}"; do
        local bench="${r%%|*}" var="${r#*|}" secs tag
        tag="$bench-$(echo "${var#KEEL_*_}" | tr 'A-Z' 'a-z')"
        [ -x "$b/$bench" ] && wanted "$tag" || continue
        secs=$(left 90)
        if [ "$secs" -lt 20 ]; then
            echo "== $bench $var=1: not run (the budget is spent)" | tee -a "$log"
            continue
        fi
        echo "== $bench $var=1 (at most ${secs} s)" | tee -a "$log"
        env "$var=1" timeout "$secs" "$b/$bench" --bench >>"$log" 2>&1 || echo "$bench $var: exit $?" | tee -a "$log"
    done
    for r in "${runs[@]}"; do
        local bench="${r%%|*}" args="${r#*|}" secs
        [ -x "$b/$bench" ] && wanted "$bench" || continue
        secs=$(left 200)
        if [ "$secs" -lt 30 ]; then
            echo "== $bench: not run (the budget is spent)" | tee -a "$log"
            continue
        fi
        echo "== $bench $args (at most ${secs} s)" | tee -a "$log"
        # shellcheck disable=SC2086
        timeout "$secs" "$b/$bench" --bench $args >>"$log" 2>&1 || echo "$bench: exit $?" | tee -a "$log"
    done
    grep -aE "paired|time:|^[a-zA-Z_0-9]+/|^stamps|^large|^ptx_baseline|^== " "$log" >"$OUT/bench-summary.txt" || true
}

case "${1:-}" in
    pack) pack ;;
    run)
        setup
        case "${2:-all}" in
            tests) run_tests ;;
            benches) run_benches ;;
            all)
                run_tests || true
                run_benches
                ;;
            *) echo "run what? tests, benches or all" >&2; exit 2 ;;
        esac
        ;;
    *)
        echo "usage: $0 pack | run [tests|benches|all]" >&2
        exit 2
        ;;
esac
