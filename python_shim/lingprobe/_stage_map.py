"""Stage rules for jobs nobody may edit (LINGPROBE_STAGE_MAP):

    dit=WanModel;vae=WanVAE|Decoder3d;output=wan.utils.utils:save_video

A bare name matches a module class by __name__ ("WanModel"); a dotted name
by module and qualified name ("wan.modules.model.WanModel"); "pkg.mod:qualname"
names a function (or "Class.method"), wrapped when its module is imported
(or now, if it already is). Module rules use torch's global forward hooks,
registered once torch is imported. Calls inside a matched module or function
carry its stage; nested matches stack."""
import functools
import threading

from . import pop_stage, push_stage
from ._import_hooks import after_import


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
                    if not module.strip() or not qualname.strip():
                        raise ValueError(f"target '{target}' is not pkg.module:function")
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

    handles = [m.register_module_forward_pre_hook(pre)]
    try:
        handles.append(m.register_module_forward_hook(post, always_call=True))  # torch >= 2.0: also on exceptions
    except TypeError:
        handles.append(m.register_module_forward_hook(post))
    return handles  # removable (the benchmark measures with and without)


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


def install(spec):
    rules = _Rules(spec)
    for module_name, entries in rules.functions.items():
        after_import(module_name, functools.partial(_patch_functions, entries=entries))
    if rules.classes:
        after_import("torch", lambda module: _install_module_hooks(rules))
    return rules
