"""Imported by Python at start-up when python_shim/ is on PYTHONPATH (`lingprobe
run` puts it there; for plain LD_PRELOAD use, add it yourself). It runs any
sitecustomize it shadows; then, without importing torch itself, it arranges
that once the program's own `import torch` finishes, the preloaded stub
attaches lingprobe (when liblingprobe_preload.so is preloaded) and the stage
rules of LINGPROBE_STAGE_MAP are installed. Never raises."""
import os
import sys


def _chain_shadowed_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.util
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), "sitecustomize.py")
        if os.path.abspath(os.path.dirname(candidate)) == here or not os.path.isfile(candidate):
            continue
        spec = importlib.util.spec_from_file_location("_lingprobe_shadowed_sitecustomize", candidate)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return


try:
    _chain_shadowed_sitecustomize()
except Exception as e:  # a broken site file must not be blamed on us, nor stop the program
    print(f"[lingprobe] the shadowed sitecustomize raised {e!r}", file=sys.stderr)

def _attach_preloaded(torch_module):
    import ctypes
    try:
        ctypes.CDLL(None).lingprobe_preload_stub_attach()
    except AttributeError:
        pass  # the stub is not in this process after all


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
