"""Bad configuration (issue 15): every LINGPROBE_* option with malformed,
out-of-range and hostile values. Through the environment (LD_PRELOAD into a
torch process) each one gives one clear error line naming the option,
recording stays off (no metadata file anywhere) and the host's exit status
is unchanged. The options docs/USAGE.md lists as ignored on a bad value
(STAGE_MAP) warn once and record on. The same values through the C ABI
(ctypes, lingprobe_init's settings) and the shim (lingprobe.start) return
LINGPROBE_ERROR_INVALID_CONFIG / raise LingprobeError with the same text."""
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import metadata

SHIM_DIR = pathlib.Path(__file__).resolve().parents[2] / "python_shim"

BOOL = ["", "maybe", "2"]
INT = ["", "abc", "1e3", "99999999999999999999999", "-5"]
ENUM = ["", "bogus"]

# (option, bad value): every option of `lingprobe config`, each with the values its type can get wrong
# (unit_tests' "every option refuses" case runs each type's whole list through the parser).
ALL_BAD = (
    [(o, v) for o in ("ENABLE", "NESTED", "CALL_RECORDS", "SIGNAL_FLUSH", "SNAPSHOTS", "PROFILE",
                      "PROFILE_UNGUARDED", "STAGE_GPU_TIME") for v in BOOL]
    + [(o, v) for o in ("SUPPRESS_NESTED_MIN", "FLUSH_INTERVAL_MS", "BUFFER_RECORDS", "SAMPLE_FIRST", "SAMPLE_EVERY")
       for v in INT + ["0"]]
    + [(o, v) for o in ("SKIP_CALLS", "SAMPLE_SKIP", "SAMPLE_SEED", "RANK", "LOCAL_RANK", "WORLD_SIZE") for v in INT]
    + [("FLUSH_INTERVAL_MS", "4611686018427387904"), ("BUFFER_RECORDS", "4294967296"), ("RANK", "16777216"),
       ("WORLD_SIZE", "9223372036854775807"), ("SUPPRESS_NESTED_MIN", "2000000")]
    + [(o, v) for o in ("SKIP_SECONDS",) for v in ["", "x", "-1", "nan", "inf", "1e400"]]
    + [(o, v) for o in ("SAMPLE_PROBABILITY",) for v in ["", "1.5", "nan", "-0"]][:3]
    + [(o, v) for o in ("SAMPLE_BUDGET_PROCESS", "SAMPLE_BUDGET_RUN", "SAMPLE_BUDGET_DEVICE")
       for v in ["", "-1G", "12X", "1e30"]]
    + [(o, v) for o in ("SUPPRESS_NESTED", "OVERFLOW", "ROLE", "LOG_LEVEL", "SAMPLE_COORDINATION") for v in ENUM]
    + [(o, v) for o in ("OPS", "OPS_DENY", "SAMPLE_OPS") for v in ["linear", "dit:", "aten::[", ";;dit:aten::x:y"]]
    + [("NVTX_MAP", "dit=("), ("NVTX_MAP", "noequals"), ("NVTX_MAP", "=^x")]
    + [("OUT", "")]
)


def one_per_option(cases):
    """Each option once end to end, its values taken in turn so that every kind of bad value appears."""
    seen, out = {}, []
    for name, value in cases:
        seen.setdefault(name, []).append(value)
    for i, (name, values) in enumerate(seen.items()):
        out.append((name, values[i % len(values)]))
    return out


BAD = one_per_option(ALL_BAD) + [("FLUSH_INTERVAL_MS", "4611686018427387904"), ("SKIP_SECONDS", "nan"),
                                 ("OPS", "aten::["), ("NVTX_MAP", "dit=(")]


def probe_job(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import torch
        torch.add(torch.ones(2), 1)
        print("ok", flush=True)
    """))
    return script


def clean_env(**extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k not in ("PYTHONPATH", "LD_PRELOAD")}
    e.update(OMP_NUM_THREADS="1")
    e.update(extra)
    return e


def lingprobe_lines(stderr):
    return [l for l in stderr.splitlines() if "lingprobe" in l]


def run_preloaded(build_dir, script, out, name, value, cwd):
    env = clean_env(LD_PRELOAD=str(build_dir.resolve() / "liblingprobe_preload.so"), LINGPROBE_OUT=str(out))
    env["LINGPROBE_" + name] = value
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180, cwd=cwd)


def assert_refused(p, name, out):
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    lines = lingprobe_lines(p.stderr)
    assert len(lines) == 1, lines
    assert "error" in lines[0] and f"LINGPROBE_{name}" in lines[0] and "recording is off" in lines[0], lines[0]
    assert not metadata.run_dirs(out), f"recorded despite LINGPROBE_{name}"


def test_every_option_refuses_its_bad_values_with_one_line_and_records_nothing(build_dir, tmp_path):
    script = probe_job(tmp_path)

    def one(i_case):
        i, (name, value) = i_case
        cwd = tmp_path / f"c{i}"
        cwd.mkdir()
        out = cwd / "out"
        return name, value, out, run_preloaded(build_dir, script, out, name, value, cwd)

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(one, enumerate(BAD)))
    failures = []
    for name, value, out, p in results:
        try:
            assert_refused(p, name, out)
            if name == "OUT":
                assert not any((out.parent).glob("lingprobe-out*"))
        except AssertionError as e:
            failures.append(f"LINGPROBE_{name}={value!r}: {e}")
    print(f"\nreliability: bad configuration: {len(BAD)} (option, value) cases through the environment, "
          f"{len(BAD) - len(failures)} refused with one line")
    assert not failures, "\n".join(failures)


def test_paths_that_cannot_hold_the_output_are_refused_at_init(build_dir, tmp_path):
    script = probe_job(tmp_path)
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    ro = tmp_path / "ro"
    ro.mkdir()
    cases = [("OUT", str(a_file)), ("OUT", str(a_file / "below")), ("CONTROL_FILE", str(tmp_path)),
             ("CONTROL_FILE", str(a_file / "ctl")), ("CONTROL_FILE", str(tmp_path / "missing" / "ctl"))]
    if os.geteuid() != 0:
        ro.chmod(0o500)
        cases.append(("OUT", str(ro / "out")))
    elif subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], capture_output=True).returncode == 0:
        cases.append(("OUT", str(ro / "out")))  # root passes permission bits: a read-only filesystem then
    try:
        for name, value in cases:
            p = run_preloaded(build_dir, script, tmp_path / "out", name, value, tmp_path)
            assert_refused(p, name, tmp_path / "out")
            if name == "OUT":
                assert "set it to a directory this process can write" in p.stderr
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)
    assert a_file.read_text() == "x"


def test_hostile_names_stay_inside_the_output_root(build_dir, tmp_path):
    """A run id or stage with '..' or '/' names a directory or file inside OUT (sanitised), never outside."""
    script = tmp_path / "stage.py"
    script.write_text(textwrap.dedent("""
        import torch, lingprobe
        with lingprobe.stage("../../escape"):
            torch.add(torch.ones(2), 1)
        print("ok")
    """))
    out = tmp_path / "deep" / "out"
    env = clean_env(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(out),
                    LINGPROBE_RUN_ID="../../../escape", LINGPROBE_SNAPSHOTS="1",
                    LINGPROBE_SAMPLE_DEVICES="any")  # its CPU call sampled on a GPU machine too
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    (run_dir,) = metadata.run_dirs(out)
    assert run_dir.parent == out and run_dir.name not in (".", "..")
    snaps = list((run_dir / "snapshots").glob("*.pt"))
    assert snaps and all(s.parent == run_dir / "snapshots" and not s.name.startswith(".") for s in snaps), snaps
    assert not (tmp_path / "escape").exists() and not (tmp_path / "deep" / "escape").exists()


# One bad value per parser, through the C ABI (ctypes) and the shim, in one process each.
API_CASES = [("nested", "maybe"), ("flush_interval_ms", "0"), ("skip_seconds", "nan"), ("sample_budget_run", "12X"),
             ("overflow", "bogus"), ("ops", "aten::["), ("nvtx_map", "dit=("), ("rank", "16777216")]


def test_the_same_values_through_the_c_abi_and_the_shim(build_dir, tmp_path):
    code = textwrap.dedent("""
        import ctypes, json, sys
        import torch
        import lingprobe
        from lingprobe import _native
        name, value, way = sys.argv[1:4]
        if way == "shim":
            try:
                lingprobe.start(out_dir=sys.argv[4], **{name: value})
                print(json.dumps({"status": 0}))
            except lingprobe.LingprobeError as e:
                print(json.dumps({"status": e.status, "message": str(e)}))
        else:
            lib = _native.load_library()
            settings = (ctypes.c_char_p * 1)(f"{name}={value}".encode())
            opts = _native.Options(ctypes.sizeof(_native.Options), 0, sys.argv[4].encode(), None, settings, 1)
            status = lib.lingprobe_init(ctypes.byref(opts))
            print(json.dumps({"status": status, "message": lib.lingprobe_last_error().decode(),
                              "start": lib.lingprobe_start(), "state": lib.lingprobe_get_state()}))
        torch.add(torch.ones(2), 1)
    """)
    script = tmp_path / "api.py"
    script.write_text(code)
    env = clean_env(LINGPROBE_LIBRARY=str(build_dir / "liblingprobe.so"), PYTHONPATH=str(SHIM_DIR))

    def one(case):
        (name, value), way = case
        out = tmp_path / f"out-{way}-{name}"
        p = subprocess.run([sys.executable, str(script), name, value, way, str(out)], env=env, capture_output=True,
                           text=True, timeout=180)
        return name, value, way, out, p

    cases = [(c, way) for c in API_CASES for way in ("capi", "shim")]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(one, cases))
    invalid_config = 2  # LINGPROBE_ERROR_INVALID_CONFIG
    for name, value, way, out, p in results:
        assert p.returncode == 0, p.stderr
        r = json.loads(p.stdout.strip().splitlines()[-1])
        assert r["status"] == invalid_config, (name, value, way, r)
        assert f"LINGPROBE_{name.upper()}" in r["message"], r
        if way == "capi":
            assert r["start"] == invalid_config and r["state"] == 1  # running, recording off
        assert len(lingprobe_lines(p.stderr)) == 1, p.stderr
        assert not metadata.run_dirs(out)


@pytest.mark.parametrize("value", ["dit=", "=WanModel", "dit=pkg.mod:", "no rules here", "attn=Attention,block=Block"])
def test_a_bad_stage_map_is_ignored_with_one_line_and_recording_goes_on(build_dir, tmp_path, value):
    """STAGE_MAP is the option docs/USAGE.md lists as ignored on a bad value (the shim installs it in Python)."""
    p = run_preloaded(build_dir, probe_job(tmp_path), tmp_path / "out", "STAGE_MAP", value, tmp_path)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    lines = [l for l in lingprobe_lines(p.stderr) if "; next: " not in l]  # the exit line aside
    assert len(lines) == 1 and "LINGPROBE_STAGE_MAP not installed" in lines[0], lines
    # a ',' between rules was one class name that never ran, named at exit only: now at start, the separator named
    assert ("rules are separated by ';'" in lines[0]) == ("," in value), lines
    assert metadata.run_dirs(tmp_path / "out")  # recorded, unstaged


def test_the_stage_map_parser_answers_any_text_with_rules_or_a_value_error():
    """The stage-map parser is Python (the shim): fuzzed here by seeded random mutation of real specs, not by
    libFuzzer. Any text gives rules or ValueError (which the shim reports in one line), nothing else."""
    sys.path.insert(0, str(SHIM_DIR))
    try:
        from lingprobe._stage_map import _Rules
    finally:
        sys.path.remove(str(SHIM_DIR))
    import random
    rng = random.Random(15)
    seeds = ["dit=WanModel;vae=WanVAE|Decoder3d;output=wan.utils.utils:save_video", "a=B", "x=pkg.mod:Cls.method"]
    alphabet = "=;|:. _-aZ9\t\n\x00é"
    outcomes = {"rules": 0, "ValueError": 0}
    for _ in range(20000):
        s = list(rng.choice(seeds))
        for _ in range(rng.randint(1, 6)):
            op, at = rng.randint(0, 2), rng.randint(0, len(s))
            if op == 0:
                s.insert(at, rng.choice(alphabet))
            elif s:
                del s[min(at, len(s) - 1)]
        try:
            rules = _Rules("".join(s))
            assert all(isinstance(k, str) and k for k in rules.classes)
            assert all(m.strip() and q.strip() and st for m, v in rules.functions.items() for q, st in v)
            outcomes["rules"] += 1
        except ValueError:
            outcomes["ValueError"] += 1
    assert outcomes["rules"] > 1000 and outcomes["ValueError"] > 1000, outcomes


def test_lingprobe_run_and_the_shim_agree_on_every_stage_map(cli, tmp_path):
    """`lingprobe run` checks the map in C++ (api::check_stage_map) before the job; the shim parses it in Python. A
    map one accepts and the other refuses is a job refused for nothing, or one started to run unstaged. Curated edge
    cases (a CRLF line's '\\r', a ',' between rules, empty targets, non-ASCII names) and seeded random mutations."""
    sys.path.insert(0, str(SHIM_DIR))
    try:
        from lingprobe._stage_map import _Rules
    finally:
        sys.path.remove(str(SHIM_DIR))
    import random
    rng = random.Random(29)
    cases = ["dit=WanModel\r", "dit=WanModel;\n", "x=|", "x=A||B", "attn=A,block=B", " = A", "dit=Wän", "a=B:",
             "a=:f", "a=m:f:g", "a=m.f:C.g", "a=B\u00a0C", "\t;\t", ""]
    seeds = ["dit=WanModel;vae=WanVAE|Decoder3d;output=wan.utils.utils:save_video", "a=B", "x=pkg.mod:Cls.method"]
    for _ in range(150):
        s = list(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(s))
            if rng.random() < 0.6:
                s.insert(at, rng.choice("=;|:. _-aZ9\t\ré,"))
            elif s:
                del s[min(at, len(s) - 1)]
        cases.append("".join(s))
    disagree = []
    for spec in cases:
        try:
            _Rules(spec)
            shim_ok = True
        except ValueError:
            shim_ok = False
        p = subprocess.run([cli, "run", "-o", str(tmp_path / "o"), "--stage-map", spec, "--", "true"],
                           capture_output=True, text=True, timeout=60)
        run_ok = "LINGPROBE_STAGE_MAP" not in p.stderr
        if run_ok != shim_ok:
            disagree.append((spec, shim_ok, p.stderr.strip()))
    assert not disagree, disagree
