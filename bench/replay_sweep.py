"""Third-party models through plain LD_PRELOAD with LINGPROBE_SNAPSHOTS=1 LINGPROBE_PROFILE=1, then `lingprobe replay`:
what a new user meets on code nobody here wrote (docs/SNAPSHOTS.md, "Tried on torchvision's models").

Each model is built in the process under test with random weights and run twice, in fp32 and under CPU bf16
autocast (torch.autocast("cpu")), on the CPU; each run is replayed with torchvision's own library loaded. A row
per run: calls, signatures, snapshots, the replay's verdicts, and the run's own exit status (some of these models
raise under CPU bf16 autocast on torch 1.13: a call that raised keeps no snapshot).

    /usr/bin/python3 bench/replay_sweep.py [--build build] [--models regnet_y_400mf,raft,...]
"""
import argparse
import glob
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

JOB = r'''
import sys, torch, torchvision
name, mode = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
tv = torchvision.models
models = {
    "fasterrcnn": lambda: (tv.detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None),
                           lambda m: m([torch.rand(3, 240, 320)])),
    "raft": lambda: (tv.optical_flow.raft_small(weights=None),
                     lambda m: m(torch.rand(1, 3, 128, 128), torch.rand(1, 3, 128, 128), num_flow_updates=3)),
    "r3d_18": lambda: (tv.video.r3d_18(weights=None), lambda m: m(torch.rand(1, 3, 8, 64, 64))),
    "deeplabv3": lambda: (tv.segmentation.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None),
                          lambda m: m(torch.rand(1, 3, 128, 128))),
    "transformer": lambda: (torch.nn.Transformer(64, 4, 2, 2, 128),
                            lambda m: m(torch.rand(10, 2, 64), torch.rand(7, 2, 64))),
    "lstm": lambda: (torch.nn.LSTM(32, 64, num_layers=2, batch_first=True), lambda m: m(torch.rand(2, 12, 32))),
}
size = {"vit_b_16": 224, "swin_t": 224}.get(name, 128)
build, forward = models[name]() if name in models else (
    getattr(tv, name)(weights=None), lambda m: m(torch.rand(2, 3, size, size)))
m = build.eval()
region = torch.autocast("cpu", dtype=torch.bfloat16) if mode == "autocast" else torch.autocast("cpu", enabled=False)
with torch.no_grad(), region:
    for _ in range(2):
        forward(m)
'''

DEFAULT = ("mobilenet_v3_small,efficientnet_b0,squeezenet1_0,shufflenet_v2_x0_5,regnet_y_400mf,convnext_tiny,swin_t,"
           "vit_b_16,fasterrcnn,raft,r3d_18,deeplabv3,transformer,lstm")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    ap.add_argument("--models", default=DEFAULT)
    args = ap.parse_args()
    import torchvision
    (library,) = glob.glob(os.path.join(os.path.dirname(torchvision.__file__), "_C*.so"))
    print(f"{'model':20} {'mode':9} {'run rc':>6} {'calls':>6} {'sigs':>5} {'snaps':>5}  replay")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        job = pathlib.Path(tmp) / "job.py"
        job.write_text(JOB)
        for name in args.models.split(","):
            for mode in ("fp32", "autocast"):
                out = pathlib.Path(tmp) / f"out-{name}-{mode}"
                env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k != "LD_PRELOAD"}
                env.update(LD_PRELOAD=str(args.build / "liblingprobe_preload.so"), LINGPROBE_OUT=str(out),
                           LINGPROBE_SNAPSHOTS="1", LINGPROBE_PROFILE="1", OMP_NUM_THREADS="1")
                run = subprocess.run([sys.executable, str(job), name, mode], env=env, capture_output=True, text=True,
                                     timeout=900)
                recorded = re.search(r"recorded (\d+) calls, (\d+) signatures(?:, (\d+) snapshots)?", run.stderr)
                (run_dir,) = [d for d in out.iterdir() if d.is_dir() and not d.is_symlink()]
                r = subprocess.run([str(args.build / "lingprobe"), "replay", str(run_dir), "--quiet",
                                    "--load-library", library], capture_output=True, text=True, timeout=1800)
                total = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr.strip()
                verdict = re.sub(r"; results in .*", "", total.replace("replayed ", ""))
                failures += r.returncode != 0
                calls, sigs, snaps = (recorded.groups() if recorded else ("?", "?", "?"))
                print(f"{name:20} {mode:9} {run.returncode:6} {calls:>6} {sigs:>5} {snaps or 0:>5}  {verdict}",
                      flush=True)
                for line in r.stdout.splitlines():
                    if line.startswith(("FAILED", "INEXACT")):
                        print("    " + line[:200])
    print(json.dumps({"replays_not_all_exact_or_nondeterministic": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
