"""Keep glibc malloc from handing memory back to the kernel between training steps.

TensorFlow allocates each step's tensors (activations of several MB, the packed gradients, gRPC
buffers) with malloc and frees them at the end of the step. glibc's defaults then now and then
return the freed top of a heap to the kernel (trim) or serve a large block with a fresh mmap, so
the next step takes page faults and zeroes the same pages again. bench/trainer measured one MWMS
worker taking 138,800 page faults (0.7 s of kernel time, 7% of its CPU) in a 150-step window,
another in the same run 4,168; which process hits it changes from run to run. Fixed thresholds
make the freed memory stay in the process for the next step. Peak RSS did not grow in the bench
(bench/trainer/results.md): the same blocks are reused.
"""

from __future__ import annotations

import ctypes

# mallopt(3) parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's maximum on 64-bit; only blocks above it are mmapped
TRIM_THRESHOLD = 1 << 30  # give memory back only when over 1 GiB is free at the top of a heap


def retain_freed_memory() -> bool:
    """Set the thresholds; False where that had no effect (a C library without glibc's mallopt)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success. Setting either threshold turns off glibc's dynamic adjustment of both.
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
