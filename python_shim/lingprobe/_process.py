"""This process's place in a launch, seen from Python: the environment
lingprobe exports for the processes this one starts, and the rank learnt from
torch.distributed.init_process_group (mp.spawn and other launchers set no
RANK). Used by sitecustomize after attaching and by lingprobe.start()."""
import ctypes
import functools
import os
import sys

# What liblingprobe sets with setenv() at init for child processes (and the
# library path the stub sets): Python's os.environ is a copy made at start-up,
# and subprocess/multiprocessing build children's environments from it.
EXPORTED = ("LINGPROBE_RUN_ID", "LINGPROBE_PARENT_PID", "LINGPROBE_PARENT_RANK", "LINGPROBE_LIBRARY")


def sync_environment():
    getenv = ctypes.CDLL(None).getenv
    getenv.restype = ctypes.c_char_p
    getenv.argtypes = [ctypes.c_char_p]
    for name in EXPORTED:
        value = getenv(name.encode())
        if value is None:
            os.environ.pop(name, None)
        elif os.environ.get(name) != value.decode():
            os.environ[name] = value.decode()


def _learn_rank(c10d):
    try:
        rank, world = c10d.get_rank(), c10d.get_world_size()
    except Exception:
        return
    local = int(os.environ.get("LOCAL_RANK", "-1")) if os.environ.get("LOCAL_RANK", "").isdigit() else -1
    from . import _native
    lib = _native.load_library()
    if lib.lingprobe_get_state() != 1:
        return
    status = lib.lingprobe_set_rank(rank, local, world)
    if status != 0:
        message = lib.lingprobe_last_error().decode(errors="replace")
        print(f"[lingprobe] init_process_group says rank {rank} of {world}, but {message}", file=sys.stderr)
        return
    sync_environment()


def watch_init_process_group(c10d):
    original = c10d.init_process_group
    if getattr(original, "_lingprobe_wrapped", False):
        return

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        result = original(*args, **kwargs)
        try:
            _learn_rank(c10d)
        except Exception as e:  # never break the program's init
            print(f"[lingprobe] could not learn the rank from init_process_group: {e!r}", file=sys.stderr)
        return result

    init_process_group._lingprobe_wrapped = True
    c10d.init_process_group = init_process_group
    dist = sys.modules.get("torch.distributed")
    if dist is not None and getattr(dist, "init_process_group", None) is original:
        dist.init_process_group = init_process_group


def _interactive():
    """An interpreter that shows an exception and goes on (python -i, a REPL, IPython and Jupyter kernels): its
    sys.last_value is the last statement's, never the cause of its exit."""
    ipython = sys.modules.get("IPython")
    return bool(sys.flags.interactive or hasattr(sys, "ps1") or
                (ipython is not None and getattr(ipython, "get_ipython", lambda: None)() is not None))


def _finalize_if_ending_by_sigint():
    # An unhandled KeyboardInterrupt ends Python with kill(SIGINT) after its
    # finalization, before the C atexit handlers (lingprobe's finalize) run:
    # finalize here, in Python's atexit, for that exit only (others keep
    # recording until the C atexit, which sees later teardown calls too). The final counts record says SIGINT: the
    # audit reports the run as interrupted. An interactive interpreter's sys.last_value is its last shown exception,
    # which may be long past; but where its last statement was interrupted, its end of input (Ctrl-D) exits by
    # SIGINT too: its run is finalized here as any orderly one ("finalize"), not as interrupted.
    if not isinstance(getattr(sys, "last_value", None), KeyboardInterrupt):
        return
    import signal
    from . import _native
    lib = _native.load_library()
    if _interactive():
        lib.lingprobe_finalize()
    else:
        lib.lingprobe_finalize_on_signal(int(signal.SIGINT))


def finalize_before_sigint_exit():
    import atexit
    atexit.register(_finalize_if_ending_by_sigint)


_after_init_done = False
# lingprobe.start() made the process's first init (else the preload stub or the host did). Here, not in the package:
# a notebook's importlib.reload(lingprobe) (%autoreload) re-runs the package's code, not this module's.
initialised_by_start = False


def after_init():
    """The Python side of a successful init, once per process (the preload stub's attach or the shim's start()):
    what the library exported for child processes into os.environ, finalize before a SIGINT exit, the rank from
    init_process_group, and the profiler guard."""
    global _after_init_done
    if _after_init_done:
        return
    _after_init_done = True
    from ._import_hooks import after_import
    from . import _profiler_guard
    sync_environment()
    finalize_before_sigint_exit()
    after_import("torch.distributed.distributed_c10d", watch_init_process_group)
    after_import("torch.autograd.profiler", _profiler_guard.watch)
