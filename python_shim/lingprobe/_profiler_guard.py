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

_local = threading.local()  # a prepared session's hold, until its enable on this thread


def _hold(lib, on):
    status = lib.lingprobe_hold_counters(1 if on else 0)
    if status != 0:
        print(f"[lingprobe] {lib.lingprobe_last_error().decode(errors='replace')}", file=sys.stderr)


def watch(profiler_module):
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
            _hold(lib, True)
            _local.held = True
        return prepare(*args, **kwargs)

    @functools.wraps(enable)
    def _enable_profiler(*args, **kwargs):
        if getattr(_local, "held", False):
            _local.held = False  # the hold its prepare took
        else:
            _hold(lib, True)
        return enable(*args, **kwargs)

    @functools.wraps(disable)
    def _disable_profiler(*args, **kwargs):
        try:
            return disable(*args, **kwargs)
        finally:
            _hold(lib, False)

    for f in (_prepare_profiler, _enable_profiler, _disable_profiler):
        f._lingprobe_wrapped = True
    profiler_module._prepare_profiler = _prepare_profiler
    profiler_module._enable_profiler = _enable_profiler
    profiler_module._disable_profiler = _disable_profiler
