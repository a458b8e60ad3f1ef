"""Stage rules for jobs nobody may edit (LINGPROBE_STAGE_MAP):

    dit=WanModel;vae=WanVAE|Decoder3d;output=wan.utils.utils:save_video

A bare name matches a module class by __name__ ("WanModel"); a dotted name
by module and qualified name ("wan.modules.model.WanModel"); "pkg.mod:qualname"
names a function (or "Class.method"), wrapped when its module is imported
(or now, if it already is). Module rules use torch's global forward hooks,
registered once torch is imported. Calls inside a matched module or function
carry its stage; nested matches stack."""
import functools
import importlib.abc
import sys
import threading

from . import pop_stage, push_stage


class _Rules:
    def __init__(self, spec):
        self.classes = {}      # bare or dotted class name -> stage
        self.functions = {}    # module -> [(qualname, stage)]
        for part in filter(None, (p.strip() for p in spec.split(";"))):
            stage, sep, targets = part.partition("=")
            if not sep or not stage.strip() or not targets.strip():
                raise ValueError(f"rule '{part}' is not stage=Target|Target")
            for target in filter(None, (t.strip() for t in targets.split("|"))):
                if ":" in target:
                    module, _, qualname = target.partition(":")
                    self.functions.setdefault(module, []).append((qualname, stage.strip()))
                else:
                    self.classes[target] = stage.strip()


_local = threading.local()


def _pushed():
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _install_module_hooks(rules):
    import torch.nn.modules.module as m

    cache = {}

    def stage_of(cls):
        if cls not in cache:
            cache[cls] = rules.classes.get(cls.__name__) or rules.classes.get(f"{cls.__module__}.{cls.__qualname__}")
        return cache[cls]

    def pre(module, args):
        stage = stage_of(type(module))
        if stage is not None:
            push_stage(stage)
            _pushed().append(id(module))

    def post(module, args, output):
        stack = _pushed()
        if stack and stack[-1] == id(module):
            stack.pop()
            pop_stage()

    m.register_module_forward_pre_hook(pre)
    try:
        m.register_module_forward_hook(post, always_call=True)  # torch >= 2.0: also after an exception
    except TypeError:
        m.register_module_forward_hook(post)


def _wrap(func, stage):
    if getattr(func, "__lingprobe_stage__", None) == stage:
        return func

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        push_stage(stage)
        try:
            return func(*args, **kwargs)
        finally:
            pop_stage()

    wrapper.__lingprobe_stage__ = stage
    return wrapper


def _patch_functions(module, entries):
    for qualname, stage in entries:
        owner, _, attr = qualname.rpartition(".")
        target = module
        for name in filter(None, owner.split(".")):
            target = getattr(target, name)
        setattr(target, attr, _wrap(getattr(target, attr), stage))


class _ImportWatcher(importlib.abc.MetaPathFinder):
    """Runs a callback right after a watched module executes."""

    def __init__(self, callbacks):
        self.callbacks = callbacks  # module name -> callable(module)

    def find_spec(self, name, path, target=None):
        if name not in self.callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                loader, callback = spec.loader, self.callbacks.pop(name)
                original = loader.exec_module

                def exec_module(module, original=original, callback=callback):
                    original(module)
                    callback(module)

                loader.exec_module = exec_module
                return spec
        return None


def install(spec):
    rules = _Rules(spec)
    callbacks = {}
    for module_name, entries in rules.functions.items():
        if module_name in sys.modules:
            _patch_functions(sys.modules[module_name], entries)
        else:
            callbacks[module_name] = functools.partial(_patch_functions, entries=entries)
    if rules.classes:
        if "torch" in sys.modules:
            _install_module_hooks(rules)
        else:
            callbacks["torch"] = lambda module: _install_module_hooks(rules)
    if callbacks:
        sys.meta_path.insert(0, _ImportWatcher(callbacks))
    return rules
