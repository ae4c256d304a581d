"""Runs PyTorch's trace analysis (HolisticTraceAnalysis) on a trace Keel
exported and checks that each analysis finds something.

Usage: python hta_check.py TRACE_DIR

TRACE_DIR holds one Keel JSON trace (`examples/record_trace` writes it).
`cargo xtask test` runs this in a virtual environment it creates
(`target/hta-venv`); see `xtask/src/main.rs`.
"""

import sys

from hta.trace_analysis import TraceAnalysis


def non_empty(name, frame):
    rows = 0 if frame is None else len(frame)
    print(f"hta_check: {name}: {rows} rows")
    if rows == 0:
        raise SystemExit(f"hta_check: {name} is empty")
    return frame


def main():
    trace_dir = sys.argv[1]
    analyzer = TraceAnalysis(trace_dir=trace_dir)

    kernel_type, kernels = analyzer.get_gpu_kernel_breakdown(visualize=False)
    non_empty("GPU kernel breakdown (kernel types)", kernel_type)
    non_empty("GPU kernel breakdown (kernels)", kernels)
    print(kernels.head(10).to_string())

    temporal = non_empty(
        "temporal breakdown", analyzer.get_temporal_breakdown(visualize=False)
    )
    print(temporal.to_string())
    if float(temporal["kernel_time(us)"].sum()) <= 0:
        raise SystemExit("hta_check: temporal breakdown has no kernel time")

    idle = analyzer.get_idle_time_breakdown(visualize=False)
    idle = idle[0] if isinstance(idle, tuple) else idle
    non_empty("idle time breakdown", idle)
    print(idle.to_string())

    launches = analyzer.get_cuda_kernel_launch_stats(visualize=False)
    rows = sum(len(frame) for frame in launches.values())
    print(f"hta_check: kernel launch statistics: {rows} rows over {len(launches)} rank(s)")
    if rows == 0:
        raise SystemExit("hta_check: kernel launch statistics are empty")
    for frame in launches.values():
        print(frame.head(10).to_string())
    print("hta_check: ok")


if __name__ == "__main__":
    main()
