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
