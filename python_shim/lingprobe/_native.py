"""ctypes bindings of lingprobe's C ABI (include/lingprobe/lingprobe.h)."""
import ctypes
import os
import pathlib


from ._errors import LingprobeError


class Options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("use_environment", ctypes.c_int),
        ("out_dir", ctypes.c_char_p),
        ("ops", ctypes.c_char_p),
        ("settings", ctypes.POINTER(ctypes.c_char_p)),
        ("settings_count", ctypes.c_size_t),
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("calls_seen", ctypes.c_uint64),
        ("calls_recorded", ctypes.c_uint64),
        ("signatures", ctypes.c_uint64),
        ("records_written", ctypes.c_uint64),
        ("dropped", ctypes.c_uint64),
        ("recording", ctypes.c_int32),
        ("state", ctypes.c_int32),
        ("rank", ctypes.c_int64),
        ("world_size", ctypes.c_int64),
        ("snapshots_written", ctypes.c_uint64),
        ("snapshot_bytes", ctypes.c_uint64),
        ("nested_seen", ctypes.c_uint64),
        ("nested_suppressed", ctypes.c_uint64),
    ]


def _candidates():
    env = os.environ.get("LINGPROBE_LIBRARY")
    if env:
        yield pathlib.Path(env)
        return
    here = pathlib.Path(__file__).resolve().parent
    yield here / "liblingprobe.so"                         # installed next to the package
    yield here.parent.parent / "build" / "liblingprobe.so"  # source checkout, default build dir


def _already_loaded():
    """The copy the LD_PRELOAD stub loaded, if any: by soname, without loading.
    (The stub also sets LINGPROBE_LIBRARY, but after Python read its environment.)"""
    try:
        return ctypes.CDLL("liblingprobe.so.0", mode=os.RTLD_NOLOAD)
    except OSError:
        return None


def load_library():
    lib = _already_loaded()
    if lib is not None:
        _declare(lib)
        return lib
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if path.exists():
            # RTLD_GLOBAL is not needed; the library links the process's libtorch.
            lib = ctypes.CDLL(str(path))
            _declare(lib)
            return lib
    raise LingprobeError(-1, "liblingprobe.so not found (tried " + ", ".join(tried) +
                         "); set LINGPROBE_LIBRARY to its path")


def _declare(lib):
    status = ctypes.c_int
    lib.lingprobe_status_string.restype = ctypes.c_char_p
    lib.lingprobe_status_string.argtypes = [ctypes.c_int]
    lib.lingprobe_last_error.restype = ctypes.c_char_p
    lib.lingprobe_version.restype = ctypes.c_char_p
    lib.lingprobe_init.restype = status
    lib.lingprobe_init.argtypes = [ctypes.POINTER(Options)]
    for name in ("lingprobe_start", "lingprobe_stop", "lingprobe_flush", "lingprobe_finalize", "lingprobe_stage_pop"):
        getattr(lib, name).restype = status
        getattr(lib, name).argtypes = []
    lib.lingprobe_finalize_on_signal.restype = status
    lib.lingprobe_finalize_on_signal.argtypes = [ctypes.c_int]
    lib.lingprobe_stage_push.restype = status
    lib.lingprobe_stage_push.argtypes = [ctypes.c_char_p]
    lib.lingprobe_set_rank.restype = status
    lib.lingprobe_set_rank.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    lib.lingprobe_get_stats.restype = status
    lib.lingprobe_get_stats.argtypes = [ctypes.POINTER(Stats)]
    lib.lingprobe_get_state.restype = ctypes.c_int
    lib.lingprobe_hold_counters.restype = status
    lib.lingprobe_hold_counters.argtypes = [ctypes.c_int]
    for name in ("lingprobe_get_metadata_path", "lingprobe_get_run_dir"):
        getattr(lib, name).restype = status
        getattr(lib, name).argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def check(lib, status):
    if status != 0:
        message = lib.lingprobe_last_error().decode(errors="replace") or lib.lingprobe_status_string(status).decode()
        raise LingprobeError(status, message)
