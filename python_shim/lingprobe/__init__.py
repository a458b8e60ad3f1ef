"""lingprobe from Python (notebooks, scripts): record the structural signature
of every ATen operator call of this process.

    import torch, lingprobe
    lingprobe.start(out_dir="runs/a", ops=["aten::linear", "aten::*conv*"])
    with lingprobe.stage("dit"):
        model(x)
    print(lingprobe.stats())
    lingprobe.stop()          # recording off; lingprobe.finalize() (or exit) writes the final counts

Options are the names `lingprobe config` lists, as keywords (nested=True,
call_records=False, flush_interval_ms=100, ...). The library is found through
LINGPROBE_LIBRARY (a path) or next to this package. Failed calls raise
LingprobeError carrying lingprobe's status text.
"""
import contextlib
import ctypes

from ._native import LingprobeError, Options, Stats, check, load_library

__all__ = ["LingprobeError", "start", "stop", "flush", "finalize", "stage", "push_stage", "pop_stage",
           "stats", "set_rank", "metadata_path", "version"]

_lib = None
_STATES = {0: "fresh", 1: "running", 2: "finalized"}


def _library():
    global _lib
    if _lib is None:
        import torch  # noqa: F401  (the library links libtorch: load the process's first)
        _lib = load_library()
    return _lib


def _setting(name, value):
    if isinstance(value, bool):
        value = "1" if value else "0"
    elif isinstance(value, (list, tuple)):
        value = ",".join(value)
    return f"{name}={value}".encode()


def start(out_dir=None, ops=None, use_environment=True, **options):
    """Initialises lingprobe on first use (with these options on top of the
    LINGPROBE_* environment) and starts recording. Later calls restart
    recording; options then must be empty."""
    lib = _library()
    if lib.lingprobe_get_state() == 0:
        settings = [_setting(k, v) for k, v in options.items()]
        arr = (ctypes.c_char_p * max(1, len(settings)))(*settings)
        opts = Options(ctypes.sizeof(Options), 1 if use_environment else 0,
                       out_dir.encode() if out_dir else None,
                       ",".join(ops).encode() if isinstance(ops, (list, tuple)) else (ops.encode() if ops else None),
                       arr, len(settings))
        check(lib, lib.lingprobe_init(ctypes.byref(opts)))
    elif options or out_dir or ops:
        raise LingprobeError(1, "already initialised: options apply only to the first start()")
    check(lib, lib.lingprobe_start())


def stop():
    lib = _library()
    check(lib, lib.lingprobe_stop())


def flush():
    lib = _library()
    check(lib, lib.lingprobe_flush())


def finalize():
    lib = _library()
    check(lib, lib.lingprobe_finalize())


def push_stage(name):
    lib = _library()
    check(lib, lib.lingprobe_stage_push(name.encode()))


def pop_stage():
    lib = _library()
    check(lib, lib.lingprobe_stage_pop())


@contextlib.contextmanager
def stage(name):
    """Calls made on this thread inside the block carry `name` as their stage."""
    push_stage(name)
    try:
        yield
    finally:
        pop_stage()


def stats():
    lib = _library()
    s = Stats()
    s.struct_size = ctypes.sizeof(Stats)
    check(lib, lib.lingprobe_get_stats(ctypes.byref(s)))
    return {
        "calls_seen": s.calls_seen, "calls_recorded": s.calls_recorded, "signatures": s.signatures,
        "records_written": s.records_written, "dropped": s.dropped, "recording": bool(s.recording),
        "state": _STATES.get(s.state, str(s.state)), "rank": s.rank, "world_size": s.world_size,
    }


def set_rank(rank=-1, local_rank=-1, world_size=-1):
    lib = _library()
    check(lib, lib.lingprobe_set_rank(rank, local_rank, world_size))


def metadata_path():
    lib = _library()
    buf = ctypes.create_string_buffer(4096)
    check(lib, lib.lingprobe_get_metadata_path(buf, len(buf)))
    return buf.value.decode()


def version():
    return _library().lingprobe_version().decode()
