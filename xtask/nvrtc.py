"""Compiles one CUDA C++ file to PTX with NVRTC (the library from the
PyPI wheel nvidia-cuda-nvrtc-cu12): what `cargo xtask mma-ptx` runs.

usage: nvrtc.py LIBNVRTC SOURCE OUTPUT [NVRTC OPTION ...]
"""

import ctypes
import sys


def main():
    lib_path, source, output, *options = sys.argv[1:]
    lib = ctypes.CDLL(lib_path)
    prog = ctypes.c_void_p()
    with open(source, "rb") as f:
        text = f.read()
    check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), text, source.encode(), 0, None, None))
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    status = lib.nvrtcCompileProgram(prog, len(options), opts)
    size = ctypes.c_size_t()
    check(lib, lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)))
    log = ctypes.create_string_buffer(size.value)
    check(lib, lib.nvrtcGetProgramLog(prog, log))
    if log.value.strip():
        sys.stderr.write(log.value.decode(errors="replace"))
    check(lib, status)
    check(lib, lib.nvrtcGetPTXSize(prog, ctypes.byref(size)))
    ptx = ctypes.create_string_buffer(size.value)
    check(lib, lib.nvrtcGetPTX(prog, ptx))
    with open(output, "wb") as f:
        f.write(ptx.value)


def check(lib, status):
    if status != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        sys.exit(f"nvrtc: {lib.nvrtcGetErrorString(status).decode()}")


if __name__ == "__main__":
    main()
