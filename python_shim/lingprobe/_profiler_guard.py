"""torch.profiler and lingprobe's counter windows, one CUPTI between them.

A counter window takes CUPTI's one callback subscriber for its duration; a
torch.profiler session whose Kineto initialises meanwhile finds it taken and
records no GPU events for the rest of the process. So counter windows are
held off (lingprobe_hold_counters) from the moment a profiler session is
prepared until it is disabled: the hold waits for a window open on another
thread to close first. Wraps the three module-level functions that
torch.autograd.profiler.profile (and so torch.profiler.profile) calls."""
import functools
import sys
import threading

_local = threading.local()  # a prepared session's hold, until its enable or disable on this thread
_lock = threading.Lock()
_taken = 0  # holds these wrappers took and have not released


def _hold(lib):
    global _taken
    status = lib.lingprobe_hold_counters(1)
    with _lock:
        _taken += 1
    if status != 0:
        print(f"[lingprobe] {lib.lingprobe_last_error().decode(errors='replace')}", file=sys.stderr)


def _release(lib):
    """Releases one hold these wrappers took (never another caller's)."""
    global _taken
    with _lock:
        if _taken == 0:
            return
        _taken -= 1
    lib.lingprobe_hold_counters(0)


def watch(profiler_module):
    """Failures lean towards a hold kept (counters off for the rest of the
    process) rather than one released early (a window while a profiler runs):
    a disable that raises releases nothing; a session prepared on one thread
    and enabled on another takes two holds and gives back one."""
    from . import _native
    names = ("_prepare_profiler", "_enable_profiler", "_disable_profiler")
    if not all(hasattr(profiler_module, n) for n in names):
        return  # another torch: nothing to wrap (windows may then meet a profiler; see docs/COUNTERS.md)
    if getattr(profiler_module._enable_profiler, "_lingprobe_wrapped", False):
        return
    lib = _native.load_library()
    prepare, enable, disable = (getattr(profiler_module, n) for n in names)

    @functools.wraps(prepare)
    def _prepare_profiler(*args, **kwargs):
        if not getattr(_local, "held", False):
            _hold(lib)
            _local.held = True
        try:
            return prepare(*args, **kwargs)
        except BaseException:
            _local.held = False
            _release(lib)
            raise

    @functools.wraps(enable)
    def _enable_profiler(*args, **kwargs):
        if not getattr(_local, "held", False):
            _hold(lib)
        _local.held = False  # the hold now belongs to the running session, released by its disable
        try:
            return enable(*args, **kwargs)
        except BaseException:
            _release(lib)  # no session runs: its __exit__ will not come
            raise

    @functools.wraps(disable)
    def _disable_profiler(*args, **kwargs):
        result = disable(*args, **kwargs)  # raised: not running, nothing released
        _local.held = False
        _release(lib)
        return result

    for f in (_prepare_profiler, _enable_profiler, _disable_profiler):
        f._lingprobe_wrapped = True
    profiler_module._prepare_profiler = _prepare_profiler
    profiler_module._enable_profiler = _enable_profiler
    profiler_module._disable_profiler = _disable_profiler
