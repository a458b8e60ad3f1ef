"""Stage rules for jobs nobody may edit (LINGPROBE_STAGE_MAP):

    dit=WanModel;vae=WanVAE|Decoder3d;output=wan.utils.utils:save_video

A bare name matches a module class by __name__ ("WanModel"); a dotted name
by module and qualified name ("wan.modules.model.WanModel"); "pkg.mod:qualname"
names a function (or "Class.method"), wrapped when its module is imported
(or now, if it already is). Module rules use torch's global forward hooks,
registered once torch is imported. Calls inside a matched module or function
carry its stage; nested matches stack. A rule that names nothing the program
has (a misspelt function, class or module) never stops the program: a
function is named at once, a class or module that never ran at exit, each in
one warning line with the closest name the program did have."""
import atexit
import difflib
import functools
import os
import re
import sys
import threading

from . import pop_stage, push_stage
from ._import_hooks import after_import


_SPACE = " \t\r\n\v\f"
_NAME = re.compile(r"[A-Za-z0-9_.\u0080-\U0010FFFF]+(:[A-Za-z0-9_.\u0080-\U0010FFFF]+)?")


class _Rules:
    def __init__(self, spec):
        self.classes = {}      # bare or dotted class name -> stage
        self.functions = {}    # module -> [(qualname, stage)]
        self.seen_classes = {}  # every module class whose forward ran -> its stage or None
        self.imported = set()   # the function rules' modules that were imported
        self.called = set()     # "module:qualname" of wrapped functions that ran
        # The same rules, and the same whitespace, as check_stage_map (lib/api/config_table.cpp), which `lingprobe
        # run` applies before the job starts.
        for part in filter(None, (p.strip(_SPACE) for p in spec.split(";"))):
            stage, sep, targets = part.partition("=")
            if not sep or not stage.strip(_SPACE) or not targets.strip(_SPACE + "|"):
                raise ValueError(f"rule '{part}' is not stage=Class|pkg.module:function")
            stage = stage.strip(_SPACE)
            for target in filter(None, (t.strip(_SPACE) for t in targets.split("|"))):
                if not _NAME.fullmatch(target):
                    separators = ": rules are separated by ';'" if any(c in target for c in ",=") else ""
                    raise ValueError(f"'{target}' is not a class or pkg.module:function name{separators} "
                                     "(stage=Class|pkg.module:function;..., e.g. dit=WanModel;vae=WanVAE|Decoder3d)")
                if ":" in target:
                    module, _, qualname = target.partition(":")
                    self.functions.setdefault(module, []).append((qualname, stage))
                else:
                    self.classes[target] = stage


_local = threading.local()


def _pushed():
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _install_module_hooks(rules):
    import torch.nn.modules.module as m

    cache = rules.seen_classes

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


def _wrap(func, stage, on_call):
    if getattr(func, "__lingprobe_stage__", None) == stage:
        return func

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        on_call()
        push_stage(stage)
        try:
            return func(*args, **kwargs)
        finally:
            pop_stage()

    wrapper.__lingprobe_stage__ = stage
    return wrapper


# Whether this process may speak for the job, read at start-up (before lingprobe exports its own pid for its
# children): not a child of a recording process (a DataLoader worker, a helper), and rank 0 or no rank.
_FIRST_OF_THE_JOB = (os.environ.get("LINGPROBE_PARENT_PID", str(os.getpid())) == str(os.getpid())
                     and os.environ.get("RANK", "0").strip() in ("", "0"))


def _warn(text):
    if _FIRST_OF_THE_JOB:
        print(f"[lingprobe] warning: LINGPROBE_STAGE_MAP: {text}", file=sys.stderr)


def _recorded_here():
    """Whether lingprobe recorded calls in this process: not a launcher (torchrun's agent imports torch and runs no
    module), nor a process that never loaded it. Asked without loading the library."""
    import ctypes
    from ._native import Stats, _already_loaded
    lib = _already_loaded()
    if lib is None:
        return False
    s = Stats()
    s.struct_size = ctypes.sizeof(Stats)
    return lib.lingprobe_get_stats(ctypes.byref(s)) == 0 and s.calls_seen > 0


def _closest(name, candidates):
    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.75)
    return f"; did you mean '{match[0]}'?" if match else ""


def _patch_functions(module, entries, rules):
    rules.imported.add(module.__name__)
    for qualname, stage in entries:
        owner, _, attr = qualname.rpartition(".")
        target = module
        try:
            for name in filter(None, owner.split(".")):
                target = getattr(target, name)
            func = getattr(target, attr)
        except AttributeError:
            names = [n for n in dir(target) if not n.startswith("__")]
            _warn(f"{module.__name__} has no '{qualname}' (stage {stage}): nothing wrapped, its calls stay in their "
                  f"caller's stage{_closest(attr, names)}")
            continue
        rule = f"{module.__name__}:{qualname}"
        setattr(target, attr, _wrap(func, stage, functools.partial(rules.called.add, rule)))


def _unmatched_at_exit(rules):
    if not _FIRST_OF_THE_JOB or not _recorded_here():
        return
    ran = {cls.__name__ for cls in rules.seen_classes}
    ran |= {f"{cls.__module__}.{cls.__qualname__}" for cls in rules.seen_classes}
    for name, stage in rules.classes.items():
        if name in ran:
            continue
        if not rules.seen_classes:
            _warn(f"no torch module ran, so class '{name}' (stage {stage}) matched nothing")
        else:
            _warn(f"no module of class '{name}' ran (stage {stage}){_closest(name, ran)}")
    for module_name, entries in rules.functions.items():
        if module_name not in rules.imported:
            _warn(f"module '{module_name}' was never imported (stage {entries[0][1]})"
                  f"{_closest(module_name, sys.modules)}")
            continue
        for qualname, stage in entries:
            rule = f"{module_name}:{qualname}"
            if rule not in rules.called and _exists(module_name, qualname):
                _warn(f"{rule} (stage {stage}) was never called")


def _exists(module_name, qualname):
    target = sys.modules.get(module_name)
    for name in qualname.split("."):
        target = getattr(target, name, None)
    return target is not None


def install(spec):
    rules = _Rules(spec)
    for module_name, entries in rules.functions.items():
        after_import(module_name, functools.partial(_patch_functions, entries=entries, rules=rules))
    if rules.classes:
        after_import("torch", lambda module: _install_module_hooks(rules))
    atexit.register(_unmatched_at_exit, rules)
    return rules
