"""Imported by Python at start-up when python_shim/ is on PYTHONPATH (`lingprobe
run` puts it there; for plain LD_PRELOAD use, add it yourself). It runs any
sitecustomize it shadows, then, if LINGPROBE_STAGE_MAP is set, installs the
stage rules (lingprobe._stage_map) without importing torch itself: module
hooks wait for the program's own `import torch`. Never raises."""
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

if os.environ.get("LINGPROBE_STAGE_MAP"):
    try:
        from lingprobe import _stage_map
        _stage_map.install(os.environ["LINGPROBE_STAGE_MAP"])
    except Exception as e:
        print(f"[lingprobe] LINGPROBE_STAGE_MAP not installed: {e}", file=sys.stderr)
