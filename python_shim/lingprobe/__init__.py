"""lingprobe from Python (notebooks, scripts): record the structural signature
of every ATen operator call of this process.

    import torch, lingprobe
    lingprobe.start(out_dir="runs/a", ops=["aten::linear", "aten::*conv*"])
    with lingprobe.stage("dit"):
        model(x)
    print(lingprobe.stats())
    lingprobe.stop()          # recording off, the window written; finalize() (or exit) writes the final counts

Options are the names `lingprobe config` lists, as keywords (nested=True,
call_records=False, flush_interval_ms=100, ...). The library is found through
LINGPROBE_LIBRARY (a path) or next to this package. Failed calls raise
LingprobeError carrying lingprobe's status text.
"""
import os

from ._errors import LingprobeError
# ctypes and the bindings load on first use: sitecustomize imports this package
# in every Python process the preload stub is in, most of which never use it.

__all__ = ["LingprobeError", "start", "stop", "flush", "finalize", "stage", "push_stage", "pop_stage",
           "stats", "set_rank", "metadata_path", "run_dir", "version"]

_lib = None
_NOT_INITIALIZED = 3  # LINGPROBE_ERROR_NOT_INITIALIZED
_ALREADY_INITIALIZED = 12  # LINGPROBE_ERROR_ALREADY_INITIALIZED
_STATES = {0: "fresh", 1: "running", 2: "finalized", 3: "forked_child"}


def _library():
    global _lib
    if _lib is None:
        import torch  # noqa: F401  (the library links libtorch: load the process's first)
        from ._native import load_library
        _lib = load_library()
    return _lib


def check(lib, status):
    from ._native import check as native_check
    native_check(lib, status)


_RULE_LISTS = ("ops", "sample_ops")  # OPS syntax: a list's items are rules, each with its stage or for every stage


def _joined(name, items):
    """A list option's text: OPS syntax joins rules with ';' where an item names its stage ('dit:aten::linear'),
    else, as every other list, patterns with ',' (the same text as the environment's, so that a start() with the
    options LD_PRELOAD configured resumes)."""
    name = name.lower()
    name = name[len("lingprobe_"):] if name.startswith("lingprobe_") else name
    staged = name in _RULE_LISTS and any(":" in item.replace("::", "") for item in items)
    return (";" if staged else ",").join(items)


def _setting(name, value):
    if isinstance(value, bool):
        value = "1" if value else "0"
    elif isinstance(value, (list, tuple)):
        value = _joined(name, value)
    return f"{name}={value}".encode()


def start(out_dir=None, ops=None, use_environment=True, **options):
    """Initialises lingprobe on first use (with these options on top of the
    LINGPROBE_* environment) and starts recording. Later calls restart
    recording; their options must be none, or the first start()'s again (a
    notebook cell run twice), else they raise. After a start() whose
    configuration was invalid, the next one initialises with its own. Raises
    LingprobeError with the reason when the configuration is invalid (an output
    directory this process cannot write, a bad option) or after finalize()."""
    import ctypes
    from ._native import Options
    lib = _library()
    settings = [_setting(k, v) for k, v in options.items()]
    ops_text = _joined("ops", ops) if isinstance(ops, (list, tuple)) else ops
    fresh = lib.lingprobe_get_state() == 0
    if fresh or options or out_dir or ops:
        # The library decides: a first init (or one after a failed init) configures; the same configuration
        # again resumes; another is refused (LINGPROBE_ERROR_ALREADY_INITIALIZED), the first staying.
        arr = (ctypes.c_char_p * max(1, len(settings)))(*settings)
        opts = Options(ctypes.sizeof(Options), 1 if use_environment else 0,
                       out_dir.encode() if out_dir else None, ops_text.encode() if ops_text else None,
                       arr, len(settings))
        status = lib.lingprobe_init(ctypes.byref(opts))
        if status == _ALREADY_INITIALIZED:
            raise LingprobeError(status, _already_initialised(lib))
        from . import _process
        _process.initialised_by_start = _process.initialised_by_start or fresh
        check(lib, status)
        _process.after_init()
    check(lib, lib.lingprobe_start())


def _already_initialised(lib):
    """The library's line (it names the options that differ) and what to do about it from Python."""
    from . import _process
    message = lib.lingprobe_last_error().decode(errors="replace")
    if not _process.initialised_by_start:
        by = ("at load (LD_PRELOAD or `lingprobe run`), from the environment" if "lingprobe_preload" in
              os.environ.get("LD_PRELOAD", "") else "by the host's own lingprobe_init (C, or ctypes)")
        return (message + f"; from Python: it was initialised {by}: call start() without options to record as "
                "configured there")
    return (message + "; from Python: options apply only to the first start() of a process: call start() without "
            "options (or with the first start()'s own) to resume the same run")


def stop():
    """Stops recording and writes what was recorded: the metadata file holds the window's calls and counts when it
    returns (snapshots still being written land after). start() resumes the same run, in the same files."""
    lib = _library()
    check(lib, lib.lingprobe_stop())


def flush():
    """Writes everything recorded so far and a counts record; returns when it is on disk. Recording goes on."""
    lib = _library()
    check(lib, lib.lingprobe_flush())


def finalize():
    """Ends the process's run: stops recording, writes the last records and closes the files (it also runs at
    exit). A process has one run: after finalize(), start() raises LingprobeError; record again in a new process,
    or use stop() and start() to pause and resume within the run."""
    lib = _library()
    check(lib, lib.lingprobe_finalize())


def push_stage(name):
    lib = _library()
    check(lib, lib.lingprobe_stage_push(name.encode()))


def pop_stage():
    lib = _library()
    check(lib, lib.lingprobe_stage_pop())


class stage:
    """`with lingprobe.stage("dit"):` calls made on this thread inside the block carry
    `name` as their stage. (A class, not contextlib: importing this package stays free.)"""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        push_stage(self.name)
        return self

    def __exit__(self, *exc):
        pop_stage()
        return False


def stats():
    import ctypes
    from ._native import Stats
    lib = _library()
    s = Stats()
    s.struct_size = ctypes.sizeof(Stats)
    check(lib, lib.lingprobe_get_stats(ctypes.byref(s)))
    return {
        "calls_seen": s.calls_seen, "calls_recorded": s.calls_recorded, "signatures": s.signatures,
        "records_written": s.records_written, "dropped": s.dropped, "recording": bool(s.recording),
        "state": _STATES.get(s.state, str(s.state)), "rank": s.rank, "world_size": s.world_size,
        "snapshots_written": s.snapshots_written, "snapshot_bytes": s.snapshot_bytes,
        "nested_seen": s.nested_seen, "nested_suppressed": s.nested_suppressed,
    }


def set_rank(rank=-1, local_rank=-1, world_size=-1):
    """This process's rank, before lingprobe's first flush (it names the metadata
    file). torch.distributed.init_process_group sets it by itself."""
    lib = _library()
    check(lib, lib.lingprobe_set_rank(rank, local_rank, world_size))
    from . import _process
    _process.sync_environment()


def _path(getter):
    import ctypes
    lib = _library()
    buf = ctypes.create_string_buffer(4096)
    status = getattr(lib, getter)(buf, len(buf))
    if status == _NOT_INITIALIZED:  # the C ABI's line names lingprobe_init()
        raise LingprobeError(status, "lingprobe is not initialised in this process: call lingprobe.start() first "
                                     "(or run the program under LD_PRELOAD or `lingprobe run`)")
    check(lib, status)
    return buf.value.decode()


def metadata_path():
    """The metadata file this process writes (or will write)."""
    return _path("lingprobe_get_metadata_path")


def run_dir():
    """This launch's run directory, OUT/{run_id}: what `lingprobe audit` takes."""
    return _path("lingprobe_get_run_dir")


def version():
    return _library().lingprobe_version().decode()
