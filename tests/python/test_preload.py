"""The LD_PRELOAD stub as users meet it: plain LD_PRELOAD with LINGPROBE_*
variables, processes without torch untouched, a foreign libtorch refused."""
import sys
import os
import subprocess

import metadata
from conftest import SHIM_DIR

JOB = "import torch; x = torch.ones(3, 3); [torch.mm(x, x) for _ in range(4)]"


def env_for(build_dir, tmp_path, stub="liblingprobe_preload.so", **extra):
    # python_shim/ on PYTHONPATH: its sitecustomize attaches lingprobe once torch is imported.
    return dict(os.environ, LD_PRELOAD=str(build_dir / stub), LINGPROBE_OUT=str(tmp_path),
                LINGPROBE_OPS="aten::mm", PYTHONPATH=str(SHIM_DIR), **extra)


def test_plain_ld_preload_records(build_dir, tmp_path):
    p = subprocess.run([sys.executable, "-c", JOB], env=env_for(build_dir, tmp_path), capture_output=True)
    assert p.returncode == 0, p.stderr.decode()
    (f,) = metadata.files(tmp_path)
    _, sigs, counts, _, last = metadata.summarize(f)
    assert list(counts.values()) == [4] and last["final"]


def test_processes_without_torch_are_untouched(build_dir, tmp_path):
    p = subprocess.run(["sh", "-c", "echo hi; /usr/bin/python3 -c 'print(1)'"],
                       env=env_for(build_dir, tmp_path), capture_output=True)
    assert p.returncode == 0 and p.stdout == b"hi\n1\n" and p.stderr == b""
    assert not metadata.files(tmp_path)


def test_foreign_libtorch_refused_with_one_line(build_dir, tmp_path):
    p = subprocess.run([sys.executable, "-c", JOB],
                       env=env_for(build_dir, tmp_path, stub="tests/liblingprobe_preload_mismatch.so"),
                       capture_output=True)
    assert p.returncode == 0
    lines = [l for l in p.stderr.decode().splitlines() if "lingprobe" in l]
    assert len(lines) == 1 and "built against /nonexistent/libtorch_cpu.so" in lines[0]
    assert not metadata.files(tmp_path)


def test_bad_configuration_one_line_and_the_job_runs_on(build_dir, tmp_path):
    p = subprocess.run([sys.executable, "-c", JOB + "; print('done')"],
                       env=env_for(build_dir, tmp_path, LINGPROBE_FLUSH_INTERVAL_MS="soon"), capture_output=True)
    assert p.returncode == 0 and p.stdout == b"done\n"
    lines = [l for l in p.stderr.decode().splitlines() if "lingprobe" in l]
    assert len(lines) == 1 and "LINGPROBE_FLUSH_INTERVAL_MS" in lines[0]
    assert not metadata.files(tmp_path)


def overflow_run(build_dir, tmp_path, policy):
    code = ("import torch; x = torch.ones(2, 2)\n"
            "for _ in range(20000): torch.mm(x, x)\n")
    p = subprocess.run([sys.executable, "-c", code],
                       env=env_for(build_dir, tmp_path, LINGPROBE_BUFFER_RECORDS="16",
                                   LINGPROBE_FLUSH_INTERVAL_MS="1000", LINGPROBE_OVERFLOW=policy),
                       capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    (f,) = metadata.files(tmp_path)
    return metadata.summarize(f)


def test_overflow_drop_counts_what_it_dropped(build_dir, tmp_path):
    _, _, counts, calls, last = overflow_run(build_dir, tmp_path, "drop")
    assert sum(counts.values()) == 20000  # counts never drop
    dropped = last["dropped"]["call_records"]["buffer_full"]
    assert dropped > 0 and len(calls) + dropped == 20000


def test_overflow_block_loses_nothing(build_dir, tmp_path):
    _, _, counts, calls, last = overflow_run(build_dir, tmp_path, "block")
    assert sum(counts.values()) == 20000 and len(calls) == 20000 and last["dropped"] == {}


def test_runpath_relative_dlopen_still_works_under_the_stub(build_dir, tmp_path):
    # Regression (H200): the stub once interposed dlopen, so libraries that dlopen
    # through their own RUNPATH (libtorch_cuda -> cuDNN engines) found other copies.
    code = f"import ctypes; print(ctypes.CDLL({str(build_dir / 'tests' / 'liborigin_a.so')!r}).origin_a_load())"
    p = subprocess.run([sys.executable, "-c", code], env=env_for(build_dir, tmp_path), capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "1", p.stderr


def test_torch_profiler_sessions_hold_counter_windows_off(build_dir, tmp_path):
    """The shim wraps torch.autograd.profiler's prepare/enable/disable so that
    counter windows are held off around a torch.profiler session (CUPTI's one
    subscriber stays free for Kineto): the wrappers are installed, the
    profiler works as before, every hold taken is given back (a refused
    nested start included), and the C ABI call answers from Python. (That a
    window then opens again is shown on the GPU: tests/python/test_counters.py.)"""
    job = """if True:
        import ctypes, torch, torch.autograd.profiler as ap
        from torch.profiler import profile, ProfilerActivity
        assert all(getattr(getattr(ap, n), "_lingprobe_wrapped", False)
                   for n in ("_prepare_profiler", "_enable_profiler", "_disable_profiler"))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.mm(torch.ones(3, 3), torch.ones(3, 3))
        assert any(e.name == "aten::mm" for e in prof.events())
        with torch.autograd.profiler.profile() as legacy:
            torch.mm(torch.ones(3, 3), torch.ones(3, 3))
        assert any(e.name == "aten::mm" for e in legacy.function_events)
        from lingprobe import _profiler_guard as g
        assert g._taken == 0, g._taken                     # every session's hold given back
        with profile(activities=[ProfilerActivity.CPU]):
            try:
                with profile(activities=[ProfilerActivity.CPU]):  # a second session at once: torch refuses it
                    pass
            except RuntimeError:
                pass
            assert g._taken >= 1                           # the running session's hold stays
        assert g._taken == 0, g._taken                     # a refused start keeps no hold
        lib = ctypes.CDLL("liblingprobe.so.0", mode=ctypes.RTLD_NOLOAD if hasattr(ctypes, "RTLD_NOLOAD") else 4)
        assert lib.lingprobe_hold_counters(1) == 0 and lib.lingprobe_hold_counters(0) == 0
        print("ok")
    """
    p = subprocess.run([sys.executable, "-c", job], env=env_for(build_dir, tmp_path, LINGPROBE_PROFILE="1"),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr


def audited_rows(build_dir, cli, tmp_path, job, ops):
    """`job` (Python source) run under the preload with LINGPROBE_OPS=ops, then audited: its run and its rows."""
    import json
    p = subprocess.run([sys.executable, "-c", job], env=dict(env_for(build_dir, tmp_path), LINGPROBE_OPS=ops),
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    (run,) = metadata.run_dirs(tmp_path)
    assert subprocess.run([cli, "audit", "--quiet", str(run)], capture_output=True).returncode == 0
    return run, json.loads((run / "reports" / "coverage_audit.json").read_text())["rows"]


def test_the_fused_attention_paths_have_their_flops(build_dir, cli, tmp_path):
    """torch's nn.MultiheadAttention and nn.TransformerEncoderLayer in eval without autograd run one fused op each
    (`_native_multi_head_attention`, `_transformer_encoder_layer_fwd`): a new user's torchvision ViT spent 71% of its
    encoder's time in the first with no FLOP formula, so FLOP shares and sample plans left its attention out."""
    job = ("import torch\n"
           "layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()\n"
           "mha = torch.nn.MultiheadAttention(64, 4, batch_first=True).eval()\n"
           "x = torch.randn(2, 17, 64)\n"
           "with torch.no_grad():\n"
           "    layer(x); mha(x, x, x)\n"
           "    torch.erfinv(torch.rand(4_000_000) * 0.5)\n")  # no formula, most of the host time
    run, rows = audited_rows(build_dir, cli, tmp_path, job,
                             "aten::_native_multi_head_attention,aten::_transformer_encoder_layer_fwd,aten::erfinv")
    flops = {r["signature"]["op"]: r["flops_per_call"] for r in rows}
    attention = 4 * (2 * 34 * 64 * 64 + 34 * 64) + 4 * 2 * 17 * 17 * 64  # 4 projections of 34 tokens; 2BLSE twice
    assert flops == {"aten._native_multi_head_attention.default": attention,
                     "aten._transformer_encoder_layer_fwd.default": attention + 34 * (4 * 64 * 128 + 128 + 64),
                     "aten.erfinv.default": None}
    # summary.md names the op whose time no FLOP figure holds, and only that one
    (line,) = [l for l in (run / "reports" / "summary.md").read_text().splitlines() if "FLOPs unknown" in l]
    assert "`aten.erfinv.default`" in line and "attention" not in line and "encoder" not in line, line


def test_a_training_steps_backward_convolution_and_optimizer_have_their_flops(build_dir, cli, tmp_path):
    """A new user's training step showed `flops_per_call: null` for convolution_backward (two thirds of a conv
    layer's FLOPs) and for the optimizer's add_, though AUDIT.md lists add: the FLOP shares counted the forward only.
    A ConvTranspose2d runs `convolution` with transposed=True, whose products are per input element."""
    job = ("import torch\n"
           "conv, up = torch.nn.Conv2d(3, 16, 3), torch.nn.ConvTranspose2d(16, 4, 3, stride=2)\n"
           "opt = torch.optim.SGD(list(conv.parameters()) + list(up.parameters()), lr=0.1)\n"
           "x = torch.randn(2, 3, 10, 10)\n"
           "for _ in range(2):\n"
           "    opt.zero_grad(); up(conv(x)).sum().backward(); opt.step()\n")
    _, rows = audited_rows(build_dir, cli, tmp_path, job,
                           "aten::conv2d,aten::conv_transpose2d,aten::convolution_backward,aten::add_")
    flops = sorted((r["signature"]["op"], r["flops_per_call"]) for r in rows)
    conv = 2 * (2 * 16 * 8 * 8) * 27  # output [2,16,8,8], 27 weights each
    up = 2 * (2 * 16 * 8 * 8) * 36  # input [2,16,8,8] -> [2,4,17,17], each input element meets 4 x 9 weights
    assert ("aten.conv2d.default", conv + 2 * 16 * 64) in flops
    assert ("aten.conv_transpose2d.input", up + 2 * 4 * 17 * 17) in flops
    # backward: the transposed one's grad_input and grad_weight, with its grad_bias; the first conv's grad_weight and
    # grad_bias (its input needs no gradient)
    assert ("aten.convolution_backward.default", 2 * up + 2 * 4 * 17 * 17) in flops
    assert ("aten.convolution_backward.default", conv + 2 * 16 * 64) in flops
    adds = [f for op, f in flops if op == "aten.add_.Tensor"]
    assert adds and None not in adds and sorted(set(adds)) == sorted({16 * 27, 16, 16 * 4 * 9, 4}), adds
