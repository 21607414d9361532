"""A fork taken while another thread of this process holds some locks, as a worker that forks
while a side thread is inside its critical section would."""

import os
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack


def child_answer_while_held(locks: list, check: Callable[[], bool], timeout: float = 10.0):
    """Fork while a helper thread holds every one of `locks`; the child runs `check()` and exits
    0 when it returns True. The parent lets the locks go after the fork and returns True or
    False as the child answered, or None when the child was still waiting after `timeout`
    (it is killed then)."""
    held, let_go = threading.Event(), threading.Event()

    def hold_them():
        with ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            held.set()
            let_go.wait(timeout)

    holder = threading.Thread(target=hold_them)
    holder.start()
    assert held.wait(timeout)
    child = os.fork()
    if child == 0:  # the holder thread is not in the child; its holds of the locks are
        code = 1
        try:
            code = 0 if check() else 1
        finally:
            os._exit(code)
    let_go.set()
    holder.join()
    deadline = time.monotonic() + timeout
    while (done := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(child, 9)
        os.waitpid(child, 0)
        return None
    return os.waitstatus_to_exitcode(done[1]) == 0
