"""A new user's first hour (issue 28): each surprise they met, as a test that failed before its fix.

`lingprobe run` validates everything before it starts the job and never names a directory that was not written; an
op selection that matches nothing says so at exit, with the closest names, and still leaves a file the audit reads;
a run says where its records went and what to run next. (The reports: test_first_hour_reports.py.)"""
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import metadata

PROGRAM = textwrap.dedent("""
    import torch
    m = torch.nn.Linear(8, 8)
    for _ in range(3):
        y = m(torch.randn(2, 8)).relu()
    print("ran")
""")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LINGPROBE_") and k not in ("PYTHONPATH", "LD_PRELOAD")}
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def program(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return path


def preloaded(build_dir, tmp_path, out, **extra):
    env = clean_env(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(out), **extra)
    return subprocess.run([sys.executable, str(program(tmp_path))], env=env, capture_output=True, text=True,
                          timeout=300)


def lingprobe_run(cli, args, timeout=300):
    return subprocess.run([cli, "run", *args], env=clean_env(), capture_output=True, text=True, timeout=timeout)


# Item 2: `lingprobe run` validates all of its options, and its exit status says what happened.

def test_run_refuses_an_op_pattern_that_can_match_nothing_before_starting_the_job(cli, tmp_path):
    marker = tmp_path / "ran"
    p = lingprobe_run(cli, ["-o", str(tmp_path / "o"), "--ops", "aten:linear", "--", "touch", str(marker)])
    assert p.returncode == 2, p.stderr
    assert "reads as stage 'aten'" in p.stderr and "did you mean 'aten::linear'" in p.stderr, p.stderr
    assert not marker.exists() and not (tmp_path / "o").exists()


def test_run_refuses_a_stage_map_with_a_comma_between_rules_before_starting_the_job(cli, tmp_path):
    # A new user's 'attn=SPAttention,block=Block' passed the up-front check; the 4-rank job then ran unstaged and
    # rank 0 named "class 'SPAttention,block=Block'" at its end.
    marker = tmp_path / "ran"
    p = lingprobe_run(cli, ["-o", str(tmp_path / "o"), "--stage-map", "attn=SPAttention,block=Block", "--", "touch",
                            str(marker)])
    assert p.returncode == 2 and "rules are separated by ';'" in p.stderr, p.stderr
    assert not marker.exists() and not (tmp_path / "o").exists()


def test_run_refuses_an_output_directory_it_cannot_write(cli, tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "file").write_text("")
    for out in ("/proc/lingprobe-out", str(tmp_path / "file" / "o")):
        p = lingprobe_run(cli, ["-o", out, "--", "touch", str(marker)])
        assert p.returncode == 2, p.stderr
        assert p.stderr.startswith(f"lingprobe run: -o {out}: ") and "give a directory you can write" in p.stderr
    assert not marker.exists()


def test_run_keeps_a_failed_jobs_status_and_names_no_directory_it_did_not_write(cli, tmp_path):
    p = lingprobe_run(cli, ["-o", str(tmp_path / "o"), "--", sys.executable, "-c", "raise SystemExit(7)"])
    assert p.returncode == 7
    assert "exited with status 7" in p.stderr and "was not written" in p.stderr, p.stderr
    assert "audit it" not in p.stderr and not list((tmp_path / "o").glob("*/metadata"))


def test_run_of_a_job_that_recorded_nothing_is_not_a_success(cli, tmp_path):
    p = lingprobe_run(cli, ["-o", str(tmp_path / "o"), "--", "true"])
    assert p.returncode == 3, p.stderr
    assert "no process of it recorded anything" in p.stderr and "PyTorch program" in p.stderr
    assert "audit it" not in p.stderr


def test_run_that_recorded_says_where_and_what_next(cli, tmp_path):
    out = tmp_path / "o"
    p = lingprobe_run(cli, ["-o", str(out), "--", sys.executable, str(program(tmp_path))])
    assert p.returncode == 0, p.stderr
    (run_dir,) = metadata.run_dirs(out)
    assert f"audit it: lingprobe audit {run_dir}" in p.stderr


# Item 3: a selection that matches nothing leaves a trace.

def test_a_pattern_that_matched_nothing_is_named_at_exit_with_the_closest_ops(build_dir, tmp_path):
    out = tmp_path / "o"
    p = preloaded(build_dir, tmp_path, out, LINGPROBE_OPS="aten::Linear,aten::relu")
    assert p.returncode == 0 and p.stdout.strip() == "ran", p.stderr
    (warning,) = [l for l in p.stderr.splitlines() if "warning" in l]
    assert "LINGPROBE_OPS='aten::Linear,aten::relu': 3 of " in warning, warning
    assert "matched 'aten::Linear' (closest ran: aten::linear)" in warning, warning
    assert "LINGPROBE_NESTED" not in warning, warning  # a typo with a close name: the nested hint would mislead


def test_a_misspelt_op_that_never_ran_gets_torchs_closest_name_not_the_nested_hint(build_dir, tmp_path):
    """A new user's C++ program never ran aten::linear (torch::nn::Linear is t + addmm); their 'aten::lienar' got
    the LINGPROBE_NESTED hint, which cannot help a typo."""
    p = preloaded(build_dir, tmp_path, tmp_path / "o", LINGPROBE_OPS="aten::convolutoin")
    assert p.returncode == 0 and p.stdout.strip() == "ran", p.stderr
    (warning,) = [l for l in p.stderr.splitlines() if "warning" in l]
    assert "'aten::convolutoin' (no operator torch has is named so; did you mean aten::convolution" in warning, warning
    assert "LINGPROBE_NESTED" not in warning, warning


def test_a_pattern_for_an_op_that_ran_only_nested_is_told_how_to_record_it(build_dir, tmp_path):
    """A new user selected aten::addmm for an nn.Linear and got 'no operator this process ran matched' though addmm
    ran, nested below aten::linear."""
    out = tmp_path / "o"
    p = preloaded(build_dir, tmp_path, out, LINGPROBE_OPS="aten::addmm")
    (warning,) = [l for l in p.stderr.splitlines() if "warning" in l]
    assert "no top-level operator this process ran matched 'aten::addmm'" in warning, warning
    assert "is recorded with LINGPROBE_NESTED=1" in warning, warning
    p = preloaded(build_dir, tmp_path, tmp_path / "nested", LINGPROBE_OPS="aten::addmm", LINGPROBE_NESTED="1")
    assert not [l for l in p.stderr.splitlines() if "warning" in l], p.stderr


def test_a_selection_that_matched_nothing_still_writes_a_file_the_audit_explains(build_dir, cli, tmp_path):
    out = tmp_path / "o"
    p = preloaded(build_dir, tmp_path, out, LINGPROBE_OPS="aten::Linear")
    assert p.returncode == 0, p.stderr
    assert "0 of " in p.stderr and "closest ran: aten::linear" in p.stderr, p.stderr
    (f,) = metadata.files(out)
    header, sigs, counts, _, last = metadata.summarize(f)
    assert header["role"] == "single" and not counts and last["final"]
    assert header["config"]["ops"] == "aten::Linear"
    (run_dir,) = metadata.run_dirs(out)
    a = subprocess.run([cli, "audit", str(run_dir)], capture_output=True, text=True, timeout=120)
    assert a.returncode == 0, a.stderr
    assert "0 calls matched LINGPROBE_OPS='aten::Linear'" in a.stdout, a.stdout
    assert "from 1 metadata file(s) with no recorded call;" in a.stdout, a.stdout  # not "of 0 rank(s)"


# Item 4: where did it go?

def test_a_plain_preload_run_says_where_its_records_went_and_the_next_command(build_dir, tmp_path):
    out = tmp_path / "o"
    p = preloaded(build_dir, tmp_path, out)
    assert p.returncode == 0, p.stderr
    (run_dir,) = metadata.run_dirs(out)
    (line,) = p.stderr.splitlines()
    assert line.startswith("[lingprobe] info: recorded ") and f"into {run_dir}; next: " in line, line
    # the next command runs as printed: `lingprobe` where it is on PATH, else the one beside the library
    command = line.split("; next: ", 1)[1].split()
    assert command[1:] == ["audit", str(run_dir)] and (command[0] == "lingprobe" or os.access(command[0], os.X_OK))
    if command[0] != "lingprobe":
        assert subprocess.run(command, capture_output=True, timeout=120).returncode == 0
    quiet = preloaded(build_dir, tmp_path, tmp_path / "q", LINGPROBE_LOG_LEVEL="warn")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


# Item 6: scalar values need not turn one op into thousands of signatures.

ITEMS = textwrap.dedent("""
    import torch
    x = torch.arange(3000.)
    s = 0.0
    for i in range(1200):
        s += x[i].item()
    y = torch.add(torch.ones(2, 4), torch.ones(2, 4), alpha=2)
    print(s)
""")


def run_items(build_dir, tmp_path, out, **extra):
    path = tmp_path / "items.py"
    path.write_text(ITEMS)
    env = clean_env(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(out), **extra)
    return subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=300)


def signature_texts(out):
    (f,) = metadata.files(out)
    header, sigs, counts, _, _ = metadata.summarize(f)
    return header, sigs, counts


def test_scalar_values_mint_a_signature_per_call_and_the_warning_names_the_option(build_dir, tmp_path):
    p = run_items(build_dir, tmp_path, tmp_path / "o")
    assert p.returncode == 0, p.stderr
    header, sigs, counts = signature_texts(tmp_path / "o")
    assert len(sigs) > 2400 and "fold_scalars" not in header["config"]  # the seed's default: values
    warnings = [l for l in p.stderr.splitlines() if "has minted 1000 signatures" in l]
    assert {w.split("] warning: ")[1].split()[0] for w in warnings} == {"aten::select", "aten::item"}, p.stderr
    assert all("LINGPROBE_FOLD_SCALARS=1" in w for w in warnings)


def test_folded_scalars_keep_one_signature_per_structure(build_dir, tmp_path):
    p = run_items(build_dir, tmp_path, tmp_path / "o", LINGPROBE_FOLD_SCALARS="1")
    assert p.returncode == 0, p.stderr
    assert "has minted" not in p.stderr
    header, sigs, counts = signature_texts(tmp_path / "o")
    assert header["config"]["fold_scalars"] is True
    by_op = {s["op"]: s for s in sigs.values()}
    assert by_op["aten.item.default"]["output"] == "<float>"
    assert by_op["aten.select.int"]["args"][1:] == ["<int>", "<int>"]
    # tensors keep their structure, and int[] shapes their values
    assert by_op["aten.select.int"]["args"][0]["shape"] == [3000]
    assert by_op["aten.add.Tensor"]["kwargs"] == {"alpha": "<int>"}
    assert by_op["aten.ones.default"]["args"] == [[2, 4]]
    assert sum(counts.values()) > 2400 and len(sigs) <= 6, sorted(by_op)


def test_a_folded_snapshot_replays_with_its_signature(build_dir, cli, tmp_path):
    out = tmp_path / "o"
    # SAMPLE_DEVICES=any: these are CPU calls, which a machine with a GPU leaves unsampled by default
    p = run_items(build_dir, tmp_path, out, LINGPROBE_FOLD_SCALARS="1", LINGPROBE_SNAPSHOTS="1",
                  LINGPROBE_SAMPLE_DEVICES="any")
    assert p.returncode == 0, p.stderr
    (run_dir,) = metadata.run_dirs(out)
    r = subprocess.run([cli, "replay", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "signature differs" not in r.stdout and "FAILED" not in r.stdout, r.stdout
    assert "exact" in r.stdout


# Item 8: torchrun on the documented platform.

def test_run_gives_the_torchrun_hint_on_torch_1_13_and_leaves_the_command_alone(cli, tmp_path):
    import torch
    fake = tmp_path / "torchrun"  # records its arguments: the command must reach it unchanged
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'args'}\n")
    fake.chmod(0o755)
    hinted = "--redirects=2 --tee=2"
    p = lingprobe_run(cli, ["-o", str(tmp_path / "o"), "--", str(fake), "--nproc_per_node=2", "job.py"])
    assert (tmp_path / "args").read_text() == "--nproc_per_node=2 job.py\n"
    assert (hinted in p.stderr) == torch.__version__.startswith("1.13"), p.stderr
    p = lingprobe_run(cli, ["-o", str(tmp_path / "o"), "--", str(fake), "--redirects=2", "--tee=2", "job.py"])
    assert hinted not in p.stderr


def test_audit_and_diff_refuse_to_mix_folded_and_unfolded_runs(build_dir, cli, tmp_path):
    for name, fold in (("plain", "0"), ("folded", "1")):
        p = run_items(build_dir, tmp_path, tmp_path / name, LINGPROBE_FOLD_SCALARS=fold)
        assert p.returncode == 0, p.stderr
    (plain,) = metadata.run_dirs(tmp_path / "plain")
    (folded,) = metadata.run_dirs(tmp_path / "folded")
    d = subprocess.run([cli, "diff", str(plain), str(folded)], capture_output=True, text=True, timeout=120)
    assert d.returncode != 0 and "has its scalar values folded" in d.stderr, d.stderr
    files = [str(f) for f in metadata.files(tmp_path / "plain") + metadata.files(tmp_path / "folded")]
    a = subprocess.run([cli, "audit", "--allow-mixed-runs", "-o", str(tmp_path / "r.json"), *files],
                       capture_output=True, text=True, timeout=120)
    assert a.returncode != 0 and "mix signatures with scalar values folded (1 of 2" in a.stderr, a.stderr
    same = subprocess.run([cli, "diff", str(folded), str(folded)], capture_output=True, text=True, timeout=120)
    assert same.returncode == 0, same.stderr


# Item 10: the small things.

def test_help_for_a_command_is_that_commands_help_on_stdout(cli):
    # asked-for help goes to stdout (a user piped `lingprobe help run` into less and saw nothing); usage after a
    # mistake stays on stderr with status 2
    for command in ("audit", "diff", "report", "run", "trace", "replay"):
        for argv in (["help", command], [command, "--help"]):
            p = subprocess.run([cli, *argv], capture_output=True, text=True)
            assert p.returncode == 0 and f"usage: lingprobe {command}" in p.stdout and not p.stderr, (argv, p)
    p = subprocess.run([cli, "audit"], capture_output=True, text=True)
    assert p.returncode == 2 and "usage: lingprobe audit" in p.stderr and not p.stdout
    top = subprocess.run([cli, "--help"], capture_output=True, text=True).stdout
    assert "[--quiet]" in top and "lingprobe help <command>" in top


def test_a_misspelt_variable_gets_a_did_you_mean(build_dir, tmp_path):
    p = preloaded(build_dir, tmp_path, tmp_path / "o", LINGPROBE_OPTS="aten::linear")
    assert "LINGPROBE_OPTS is not a lingprobe option (did you mean LINGPROBE_OPS?)" in p.stderr, p.stderr


def test_run_says_a_misspelt_variable_once(cli, tmp_path):
    """`lingprobe run` warned about an unknown variable, then the job did again."""
    p = subprocess.run([cli, "run", "-o", str(tmp_path / "o"), "--", sys.executable, str(program(tmp_path))],
                       env=clean_env(LINGPROBE_OPTS="aten::linear"), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("LINGPROBE_OPTS is not a lingprobe option") == 1, p.stderr


SHIM = textwrap.dedent("""
    import sys, lingprobe
    try:
        lingprobe.start(out_dir=sys.argv[1])
    except lingprobe.LingprobeError as e:
        print("raised:", e)
        raise SystemExit(0)
    import torch
    torch.ones(2) + 1
    lingprobe.finalize()
    try:
        lingprobe.start()
    except lingprobe.LingprobeError as e:
        print("again:", e)
""")


def test_the_shim_raises_on_an_unwritable_output_and_says_what_a_second_start_needs(build_dir, tmp_path):
    path = tmp_path / "shim.py"
    path.write_text(SHIM)
    env = clean_env(PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[2] / "python_shim"),
                    LINGPROBE_LIBRARY=str(build_dir / "liblingprobe.so"))
    p = subprocess.run([sys.executable, str(path), "/proc/lingprobe-out"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("raised:") and "LINGPROBE_OUT" in p.stdout, p.stdout + p.stderr
    p = subprocess.run([sys.executable, str(path), str(tmp_path / "o")], env=env, capture_output=True, text=True,
                       timeout=120)
    assert "again:" in p.stdout and "record again in a new process" in p.stdout, p.stdout + p.stderr


RETRY = textwrap.dedent("""
    import sys, lingprobe
    try:
        lingprobe.start(out_dir=sys.argv[1], snapshot="1")  # misspelt: SNAPSHOTS
    except lingprobe.LingprobeError as e:
        print("raised:", e)
    lingprobe.start(out_dir=sys.argv[1], snapshots="1")  # fixed, in the same process (a notebook's next cell)
    import torch
    torch.ones(2) + 1
    try:
        lingprobe.start(out_dir=sys.argv[1] + "-elsewhere")
    except lingprobe.LingprobeError as e:
        print("other options:", e.status, e)
    lingprobe.finalize()
""")


def test_a_start_that_failed_on_a_bad_option_is_retried_and_records(build_dir, tmp_path):
    """A new user fixed a misspelt option and started again in the same process: told ok, recorded nothing."""
    path = tmp_path / "retry.py"
    path.write_text(RETRY)
    env = clean_env(PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[2] / "python_shim"),
                    LINGPROBE_LIBRARY=str(build_dir / "liblingprobe.so"), LINGPROBE_SNAPSHOOT="1")
    p = subprocess.run([sys.executable, str(path), str(tmp_path / "o")], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "raised:" in p.stdout and "LINGPROBE_SNAPSHOT" in p.stdout, p.stdout + p.stderr
    assert p.stderr.count("LINGPROBE_SNAPSHOOT is not a lingprobe option") == 1, p.stderr  # not again at the retry
    assert "other options: 12 " in p.stdout, p.stdout + p.stderr
    (run_dir,) = metadata.run_dirs(tmp_path / "o")
    (path,) = metadata.files(run_dir)
    _, sigs, _, _, _ = metadata.summarize(path)
    assert any(s["op"] == "aten.add.Tensor" for s in sigs.values()), sigs
    assert list((run_dir / "snapshots").glob("*.pt")), "the retried start's options apply"


def test_a_start_after_the_preloaded_init_failed_initialises_with_its_own_options(build_dir, tmp_path):
    """Under LD_PRELOAD with an output the process cannot write, the load's init fails; the program's own
    start(out_dir=...) was then refused as 'already initialised at load'."""
    path = tmp_path / "own.py"
    path.write_text(textwrap.dedent("""
        import sys, torch, lingprobe
        lingprobe.start(out_dir=sys.argv[1])
        torch.ones(2) + 1
        lingprobe.finalize()
        print("recorded", lingprobe.stats()["calls_recorded"])
    """))
    env = clean_env(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT="/proc/lingprobe-out")
    p = subprocess.run([sys.executable, str(path), str(tmp_path / "o")], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "recorded 2" in p.stdout, p.stdout + p.stderr
    assert len(metadata.run_dirs(tmp_path / "o")) == 1


def test_a_replay_of_a_missing_path_says_so_and_writes_nothing(cli, tmp_path):
    p = subprocess.run([cli, "replay", str(tmp_path / "missing")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "does not exist: give a snapshot (.pt) or a run directory" in p.stderr, p.stderr
    assert "results in" not in p.stdout + p.stderr and not (tmp_path / "missing").exists()


# exit 1 where the command's own failures are 1; replay and validate keep 1 for "replays or kernels differ"
@pytest.mark.parametrize("command,rc", [(["audit"], 1), (["report"], 1), (["trace"], 1), (["validate"], 2),
                                        (["validate", "--against-trace", "t.json"], 2)])
def test_every_command_says_a_missing_run_directory_does_not_exist(cli, tmp_path, command, rc):
    # audit said "cannot open", report "is not a run directory", validate "has no profiles/: no counter window ran"
    missing = tmp_path / "lingprobe-out" / "latest"
    p = subprocess.run([cli, command[0], str(missing), *command[1:]], capture_output=True, text=True, timeout=120)
    assert p.returncode == rc, p.stderr
    assert f"'{missing}' does not exist: give a run directory OUT/{{run_id}}" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) <= 2, p.stderr  # the line, and at most "nothing was written."
    assert not (tmp_path / "lingprobe-out").exists()


def test_a_replay_into_a_directory_it_cannot_write_says_so_once_before_any_snapshot(cli, tmp_path):
    """A new user's `replay RUN -o /proc/x` printed one FAILED per snapshot and exited 1."""
    p = subprocess.run([cli, "replay", str(tmp_path), "-o", "/proc/lingprobe-replays"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "-o /proc/lingprobe-replays" in p.stderr, p.stderr


def test_profile_on_a_machine_without_a_gpu_says_so_once_at_start(build_dir, tmp_path):
    import torch
    if torch.cuda.is_available():
        import pytest
        pytest.skip("this machine has a GPU: the line is for machines without one")
    p = preloaded(build_dir, tmp_path, tmp_path / "o", LINGPROBE_PROFILE="1")
    assert p.returncode == 0, p.stderr
    lines = [l for l in p.stderr.splitlines() if "no counters will be taken" in l]
    assert len(lines) == 1 and "LINGPROBE_PROFILE=1" in lines[0], p.stderr


# A stage map that names what the program does not have never stops it: one line per rule, with the closest name.
STAGED = {
    "helpers.py": "import torch\ndef postprocess(x):\n    return torch.softmax(x, -1)\n",
    "staged.py": textwrap.dedent("""
        import torch
        import helpers
        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(8, 4)
            def forward(self, x):
                return self.fc(x)
        enc = Encoder()
        with torch.no_grad():
            print("out", helpers.postprocess(enc(torch.ones(2, 8))).shape)
    """),
}


def run_staged(build_dir, tmp_path, stage_map):
    for name, text in STAGED.items():
        (tmp_path / name).write_text(text)
    env = clean_env(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(tmp_path / "o"),
                    LINGPROBE_STAGE_MAP=stage_map)
    p = subprocess.run([sys.executable, "staged.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "out torch.Size([2, 4])" in p.stdout, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    return [line for line in p.stderr.splitlines() if "LINGPROBE_STAGE_MAP" in line]


def test_a_stage_map_naming_what_the_program_lacks_warns_with_the_closest_name_and_the_job_runs(build_dir,
                                                                                                   tmp_path):
    (line,) = run_staged(build_dir, tmp_path, "post=helpers:postprocesss")
    assert "helpers has no 'postprocesss' (stage post)" in line and "did you mean 'postprocess'?" in line
    (line,) = run_staged(build_dir, tmp_path, "enc=Encodr")
    assert "no module of class 'Encodr' ran (stage enc); did you mean 'Encoder'?" in line
    (line,) = run_staged(build_dir, tmp_path, "post=helperz:postprocess")
    assert "module 'helperz' was never imported (stage post); did you mean 'helpers'?" in line
    assert run_staged(build_dir, tmp_path, "post=helpers:postprocess;enc=Encoder") == []
    # a process that records nothing (a helper script, torchrun's agent) or a child of a recording one (a DataLoader
    # worker) does not speak for the job: the reviewer's torchrun agent said "no torch module ran" of a good map
    for extra, code in (({}, "print('helper')"), ({}, "import torch; print('agent')"),
                        ({"LINGPROBE_PARENT_PID": "1"}, "import torch; torch.ones(1) + 1; print('child')")):
        env = clean_env(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(tmp_path / "o2"),
                        LINGPROBE_STAGE_MAP="enc=Encodr;post=helperz:postprocess", **extra)
        p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0 and "LINGPROBE_STAGE_MAP" not in p.stderr, (code, p.stderr)


def test_a_stage_named_by_an_op_rule_that_never_began_is_named_at_exit_with_the_closest(build_dir, tmp_path):
    """A new user's `--ops 'encc:aten::conv2d'` beside a stage map naming `enc`: only "0 of 37 calls matched"."""
    for name, text in STAGED.items():
        (tmp_path / name).write_text(text)
    env = clean_env(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(tmp_path / "o"),
                    LINGPROBE_STAGE_MAP="enc=Encoder", LINGPROBE_OPS="encc:aten::linear;post:aten::softmax")
    p = subprocess.run([sys.executable, "staged.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    (line,) = [l for l in p.stderr.splitlines() if "never began" in l]
    assert "stage 'encc' (did you mean 'enc'?), 'post' never began in this process" in line, line
    assert line.endswith("stages that did: enc"), line
