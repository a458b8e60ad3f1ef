"""The integration tier under a sanitizer (scripts/sanitize.sh asan-torch,
tsan-torch): a torch process with a sanitized liblingprobe preloaded, doing
what stresses lingprobe's own code in one run. Threads call ops under their
own stages (new signatures appear all along, with snapshots of first sightings
and nested-call suppression learning), one thread stops and restarts
recording while they run, the main thread flushes and reads stats, a child is
forked mid-run, and finalize runs from atexit while threads still call ops.
It prints "ok" last, only when no thread, no lingprobe call and no child
failed; a sanitizer's report fails the run too, and the caller audits the
files."""
import atexit
import os
import sys
import threading
import time

import torch
import torch.nn.functional as F

import lingprobe

THREADS = int(os.environ.get("JOB_THREADS", "6"))
SECONDS = float(os.environ.get("JOB_SECONDS", "6"))
stop = threading.Event()
errors = []  # what went wrong on any thread: the exit status says so


def recorded(fn):
    def run(*args):
        try:
            fn(*args)
        except BaseException as e:  # noqa: B902 - a thread's failure must reach the exit status
            errors.append(f"{fn.__name__}: {e!r}")
    return run


@recorded
def worker(k):
    torch.manual_seed(k)
    w = torch.randn(32, 16)
    i = 0
    while not stop.is_set():
        with lingprobe.stage(f"worker{k % 3}"):
            x = torch.randn(1 + i % 24, 16)
            F.linear(x, w).relu().sum(1)               # nested calls below linear: suppression learns
            torch.cat([x, x]).mean()
            if i % 7 == 0:
                torch.randn(1 + i % 200, 3).softmax(-1)  # new signatures for a while
        i += 1


@recorded
def toggler():
    while not stop.is_set():
        time.sleep(0.05)
        try:
            lingprobe.stop()
            time.sleep(0.01)
            lingprobe.start()
        except lingprobe.LingprobeError as e:       # finalized at exit meanwhile: the one expected refusal
            assert e.status == 4, e
            return


lingprobe.start()
threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(THREADS)]
threads.append(threading.Thread(target=toggler, daemon=True))
for t in threads:
    t.start()
end = time.time() + SECONDS
forked = False
while time.time() < end:
    time.sleep(0.1)
    lingprobe.flush()
    lingprobe.stats()
    if not forked and time.time() > end - SECONDS / 2:
        forked = True
        pid = os.fork()
        if pid == 0:                                   # the child: lingprobe is off, torch works
            torch.add(torch.ones(3), 1)
            try:
                lingprobe.start()
                os._exit(3)                            # recording must not start in a forked child
            except lingprobe.LingprobeError as e:
                os._exit(0 if e.status == 7 else 4)    # LINGPROBE_ERROR_UNAVAILABLE
        _, status = os.waitpid(pid, 0)
        assert status == 0, f"forked child ended with {status}"


def join_workers_and_judge():
    stop.set()
    for t in threads:
        t.join()
    if lingprobe._library().lingprobe_get_state() != 2:
        errors.append("not finalized at exit")
    if errors:
        print("FAILED:", *errors, sep="\n", flush=True)
        os._exit(1)
    print("ok", flush=True)


atexit.register(join_workers_and_judge)  # atexit runs last-in first-out: finalize first, the workers still calling ops
atexit.register(recorded(lingprobe.finalize))
sys.exit(0)
