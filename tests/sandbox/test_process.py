"""sandbox.process.completed: waiting for futures never outlasts a Ctrl-C, whichever thread of the
process the kernel delivered it to."""
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Two futures that never finish; one of them sends SIGINT to its own thread, not to the main one,
# as the kernel sometimes does with a Ctrl-C. The main thread then waits for the futures.
SCRIPT = """
import signal, sys, threading, time
from concurrent.futures import ThreadPoolExecutor, as_completed
from sandbox.process import completed

release, waiting_started = threading.Event(), threading.Event()

def hang():
    release.wait()

def interrupt_this_thread():
    waiting_started.wait()
    time.sleep(0.3)  # the main thread is inside its wait by now
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)
    release.wait()

try:
    pool = ThreadPoolExecutor(2)
    futures = [pool.submit(hang), pool.submit(interrupt_this_thread)]
    waiting = completed(futures, poll_s=0.2) if sys.argv[1] == "completed" else as_completed(futures)
    waiting_started.set()
    for _ in waiting:
        pass
except KeyboardInterrupt:
    print("interrupted")
    sys.exit(130)
finally:
    release.set()
"""


def run(how: str, timeout_s: float) -> subprocess.CompletedProcess:
    # Ctrl-C at its default in the child: a suite started as a background job inherits SIGINT ignored.
    return subprocess.run([sys.executable, "-c", SCRIPT, how], capture_output=True, text=True, timeout=timeout_s,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_a_ctrl_c_delivered_to_another_thread_ends_the_wait():
    out = run("completed", timeout_s=60)
    assert out.returncode == 130 and out.stdout.strip() == "interrupted", out.stderr[-2000:]


def test_an_untimed_wait_would_outlast_it():
    """The reason for ``completed``: plain as_completed waits on (the check that the case above can fail)."""
    with pytest.raises(subprocess.TimeoutExpired):
        run("as_completed", timeout_s=5)
