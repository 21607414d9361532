"""Thread pools kept per process (made again after a fork), by name: starting threads for every
job or search cost more than the work they did."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_pools: dict[tuple[int, str, int], ThreadPoolExecutor] = {}
_lock = threading.Lock()


def process_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """This process's pool `name` of `workers` threads."""
    key = (os.getpid(), name, workers)
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        return pool


# numpy's BLAS (OpenBLAS in numpy's wheels) spreads a product over its own threads, which spin
# while they wait: on a shared 2-core machine a 10 x 768 x 200 product of a search took 3 ms
# instead of 0.3. Searches here are many small products; this process's own threads
# (process_pool) split the work that is worth splitting.
_BLAS_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)


def blas_threads(count: int) -> bool:
    """Let numpy's BLAS use `count` threads in this process (OpenBLAS, found among the loaded
    libraries); False when there is none to tell."""
    import ctypes

    import numpy  # noqa: F401 (loads its BLAS)

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        return False
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _BLAS_SETTERS:
            setter = getattr(library, name, None)
            if setter is not None:
                setter(int(count))
                return True
    return False
