"""Compiles CUDA C files to PTX through libnvrtc (ctypes), for kernels/build.sh.

Usage: python3 nvrtc.py --lib PATH/libnvrtc.so.12 --out-dir DIR [--option OPT ...] FILE.cu ...

Writes DIR/<stem>.ptx for every FILE.cu. Prints NVRTC's log when it has one (warnings) and
exits non-zero on the first file that fails to compile.
"""

import argparse
import ctypes
import os
import sys

NVRTC_SUCCESS = 0


class Nvrtc:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        self.lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]

    def check(self, what, status):
        if status != NVRTC_SUCCESS:
            name = self.lib.nvrtcGetErrorString(status).decode()
            raise RuntimeError(f"{what} failed: {name}")

    def version(self):
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check("nvrtcVersion", self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)))
        return f"{major.value}.{minor.value}"

    def compile(self, source, name, options):
        """Returns (ptx or None, log)."""
        prog = ctypes.c_void_p()
        self.check(
            "nvrtcCreateProgram",
            self.lib.nvrtcCreateProgram(
                ctypes.byref(prog), source.encode(), name.encode(), 0, None, None
            ),
        )
        try:
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            status = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            size = ctypes.c_size_t()
            self.check("nvrtcGetProgramLogSize", self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)))
            log = ctypes.create_string_buffer(size.value)
            self.check("nvrtcGetProgramLog", self.lib.nvrtcGetProgramLog(prog, log))
            log_text = log.value.decode(errors="replace").strip()
            if status != NVRTC_SUCCESS:
                name = self.lib.nvrtcGetErrorString(status).decode()
                return None, f"{name}\n{log_text}"
            self.check("nvrtcGetPTXSize", self.lib.nvrtcGetPTXSize(prog, ctypes.byref(size)))
            ptx = ctypes.create_string_buffer(size.value)
            self.check("nvrtcGetPTX", self.lib.nvrtcGetPTX(prog, ptx))
            return ptx.value.decode(), log_text
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True, help="path to libnvrtc.so.12")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--option", action="append", default=[], help="an NVRTC option")
    parser.add_argument("--expect-version", help="fail unless NVRTC reports this major.minor")
    parser.add_argument("sources", nargs="+")
    args = parser.parse_args()

    nvrtc = Nvrtc(args.lib)
    version = nvrtc.version()
    if args.expect_version and version != args.expect_version:
        print(f"nvrtc.py: NVRTC is {version}, expected {args.expect_version}", file=sys.stderr)
        return 1
    for path in args.sources:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        name = os.path.basename(path)
        ptx, log = nvrtc.compile(source, name, args.option)
        if log:
            print(f"{name}: {log}", file=sys.stderr)
        if ptx is None:
            print(f"nvrtc.py: {name} did not compile", file=sys.stderr)
            return 1
        stem = os.path.splitext(name)[0]
        with open(os.path.join(args.out_dir, stem + ".ptx"), "w", encoding="utf-8", newline="\n") as f:
            f.write(ptx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
