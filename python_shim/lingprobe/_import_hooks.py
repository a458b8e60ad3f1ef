"""Run callbacks right after a module finishes importing (or now, if it
already has), without importing it: a meta-path finder that wraps the
module's loader. Used by sitecustomize to attach lingprobe once torch is
imported, and by the stage map to wrap functions of modules not yet loaded.
Imported at every Python start-up under the preload stub, so it imports
nothing (importlib.abc alone costs about 10 ms)."""
import sys

_pending = {}  # module name -> [callback(module)]
_finder = None


class _AfterImport:  # the meta-path finder protocol: find_spec
    def find_spec(self, name, path, target=None):
        if name not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None:
                continue
            if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return None
            callbacks, original = _pending.pop(name), spec.loader.exec_module

            def exec_module(module, original=original, callbacks=callbacks):
                original(module)
                for callback in callbacks:
                    _run(callback, module)

            spec.loader.exec_module = exec_module
            return spec
        return None


def _run(callback, module):
    """A callback's failure is lingprobe's: one line, and the program's import goes on."""
    try:
        callback(module)
    except Exception as e:
        print(f"[lingprobe] warning: after importing {module.__name__}: {e!r}; lingprobe's hook there is off",
              file=sys.stderr)


def after_import(name, callback):
    global _finder
    if name in sys.modules:
        _run(callback, sys.modules[name])
        return
    _pending.setdefault(name, []).append(callback)
    if _finder is None:
        _finder = _AfterImport()
        sys.meta_path.insert(0, _finder)
