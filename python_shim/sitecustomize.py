"""Imported by Python at start-up from python_shim/ (the LD_PRELOAD stub puts
this directory first on PYTHONPATH in every Python process it is preloaded
into; `lingprobe run` and users may put it there too). Never raises, prints
nothing, and imports torch only when the program does:

1. undoes the stub's PYTHONPATH entry in os.environ (children get the user's
   PYTHONPATH; a Python child gets the entry from its own copy of the stub);
2. runs any sitecustomize this one shadows;
3. once the program's own `import torch` finishes, attaches lingprobe (the
   preloaded stub loads liblingprobe.so), mirrors what lingprobe exported for
   child processes into os.environ (Python copied the environment at
   start-up, and subprocess builds children's environments from that copy),
   and watches torch.distributed.init_process_group so that processes that
   learn their rank there (mp.spawn) are named by it;
4. installs the stage rules of LINGPROBE_STAGE_MAP."""
import os
import sys


def _undo_stub_pythonpath():
    shim = os.environ.pop("LINGPROBE_SHIM_PATH", None)
    if shim is None:
        return
    before = os.environ.pop("LINGPROBE_PYTHONPATH_BEFORE", None)
    if before is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = before


def _chain_shadowed_sitecustomize():
    # Without importlib.util (it costs about 10 ms at every start-up).
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), "sitecustomize.py")
        if os.path.abspath(os.path.dirname(candidate)) == here or not os.path.isfile(candidate):
            continue
        module = type(sys)("_lingprobe_shadowed_sitecustomize")
        module.__file__ = candidate
        sys.modules[module.__name__] = module
        with open(candidate, "rb") as f:
            exec(compile(f.read(), candidate, "exec"), module.__dict__)
        return


_undo_stub_pythonpath()
try:
    _chain_shadowed_sitecustomize()
except Exception as e:  # a broken site file must not be blamed on us, nor stop the program
    print(f"[lingprobe] the shadowed sitecustomize raised {e!r}", file=sys.stderr)


def _attach_preloaded(torch_module):
    import ctypes
    try:
        attached = ctypes.CDLL(None).lingprobe_preload_stub_attach()
    except AttributeError:
        return  # the stub is not in this process after all
    if attached:
        from lingprobe import _process
        _process.after_init()


if "liblingprobe_preload" in os.environ.get("LD_PRELOAD", ""):
    try:
        from lingprobe._import_hooks import after_import
        after_import("torch", _attach_preloaded)
    except Exception as e:
        print(f"[lingprobe] could not watch for torch: {e}", file=sys.stderr)

if os.environ.get("LINGPROBE_STAGE_MAP"):
    try:
        from lingprobe import _stage_map
        _stage_map.install(os.environ["LINGPROBE_STAGE_MAP"])
    except Exception as e:
        print(f"[lingprobe] LINGPROBE_STAGE_MAP not installed: {e}", file=sys.stderr)
