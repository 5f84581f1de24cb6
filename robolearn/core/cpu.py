"""CPU training without page faults: keep glibc's freed tensor memory for reuse instead of unmapping it.

glibc's malloc serves every allocation above its mmap threshold (128 KiB, growing dynamically up to 32 MiB only
after such a block is freed) with a fresh `mmap`, and returns freed memory at the top of the heap to the kernel
above 128 KiB. A training step allocates and frees the same large activations every step (CQL's critics run on
[2, 7680, 256] inputs: 16 MB each), so each step re-faults and zeroes those pages: in the profile this shows up as
ReLU and other elementwise ops running several times slower on the big tensors than on small ones. Raising both
thresholds keeps that memory in the process's heap, as jemalloc/tcmalloc (which PyTorch recommends on CPU) do.
Measured on CQL with 256x256 critics, one thread (`benchmarks/speed/allocator_ab.py`): 7.6 -> 8.4 gradient steps/s on an
idle 2-core machine; with another job on the second core the gain was larger (4.0 -> 7.6, not recorded in results).

`tune_allocator()` runs once per process at the CLI's start (and in bench workers); the cost is that memory freed
after a peak stays with the process (up to `TRIM_BYTES` at the heap's top). `ROBOLEARN_MALLOC=default` turns it off.
Elsewhere than glibc (macOS, musl, Windows) it does nothing.

`cpu_model()` names the processor, which results record beside the software: torch's matrix kernels differ between
instruction sets, so one recipe makes other bits on another kind of CPU (docs/offline-rl.md, "Bit for bit").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
from pathlib import Path

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc <malloc.h>
MMAP_BYTES = 32 * 1024 * 1024  # the largest mmap threshold glibc accepts on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_BYTES = 1 << 30

_done: bool | None = None


def tune_allocator() -> bool:
    """Raise glibc malloc's mmap and trim thresholds for this process; True if they were set (idempotent)."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if not sys.platform.startswith("linux") or os.environ.get("ROBOLEARN_MALLOC", "") == "default":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))
    return _done


def cpu_model() -> str:
    """The processor's model name (Linux's /proc/cpuinfo, else `platform.processor()`), e.g. "AMD EPYC"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
