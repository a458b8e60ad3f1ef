"""The reference workload: LingBot-World realtime TP1SP4 stand-in (SPEC section 6).

    torchrun --nproc_per_node=4 -m lingbot_standin.generate --device meta

Per rank: 2 videos x 10 chunks, each chunk 4 denoising forwards + 1 KV-cache
refresh forward of the DiT (100 forwards), the chunk's VAE decode of this
rank's width slice, and on rank 0 the uint8 output conversion. Stages are
marked without code changes by lingprobe's stage map (default), or with NVTX
ranges (--mark nvtx) or the Python shim (--mark api)."""
import argparse
import contextlib
import ctypes
import json
import os
import time

import torch
import torch.distributed as dist

from .dist import SP
from .model import WanModel
from .utils import save_video
from .vae import WanVAE


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["meta", "cpu", "cuda"], default="meta")
    ap.add_argument("--size", default="704*1280", help="H*W of the video (multiple of 16)")
    ap.add_argument("--chunks", type=int, default=20, help="chunks in all (2 videos when even)")
    ap.add_argument("--steps", type=int, default=4, help="denoising steps per chunk (plus 1 KV-cache refresh)")
    ap.add_argument("--blocks", type=int, default=40)
    ap.add_argument("--width-scale", type=int, default=1, help="divide model widths by this (fast CPU runs)")
    ap.add_argument("--mark", choices=["stage-map", "nvtx", "api"], default="stage-map")
    ap.add_argument("--report", help="write this rank's timings as JSON to REPORT.rank{R}.json")
    return ap.parse_args()


def nvtx_marker():
    if torch.cuda.is_available():
        return lambda name: torch.cuda.nvtx.range(name)
    lib = ctypes.CDLL(os.environ["LINGPROBE_NVTX_HELPER"])  # NVTX3 C API (tests/integration/nvtx_helper.c)

    @contextlib.contextmanager
    def rng(name):
        lib.helper_range_push(name.encode())
        try:
            yield
        finally:
            lib.helper_range_pop()
    return rng


def main():
    args = parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        backend = "nccl" if torch.cuda.device_count() >= world else "gloo"  # one GPU: ranks share it over gloo
    else:
        device, backend = torch.device(args.device), "gloo"
    if world > 1:
        dist.init_process_group(backend)
    sp = SP(rank, world, device)

    s = args.width_scale
    h, w = (int(v) for v in args.size.split("*"))
    heads = max(world, (40 // s) // world * world)
    model = WanModel(dim=5120 // s, ffn_dim=13824 // s, num_heads=heads, num_layers=args.blocks, cam_dim=1536 // s or 1,
                     text_len=max(1, 512 // s), device=device, dtype=torch.bfloat16).eval()
    vae = WanVAE(sp, dim=max(4, 96 // s), device=device).eval()
    lh, lw = h // 8, w // 8
    tokens = 3 * (lh // 2) * (lw // 2)

    if args.mark == "nvtx":
        mark = nvtx_marker()
    elif args.mark == "api":
        import lingprobe
        mark = lingprobe.stage
    else:  # the stage map marks stages from outside; the code stays as the real job's
        mark = lambda name: contextlib.nullcontext()  # noqa: E731

    videos = 2 if args.chunks >= 2 and args.chunks % 2 == 0 else 1
    per_video = args.chunks // videos
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    forward_s, start = [], time.perf_counter()
    with torch.no_grad():
        gen = torch.Generator(device="cpu").manual_seed(1234)
        rand = lambda *shape: torch.randn(*shape, generator=gen).to(device) if device.type != "meta" \
            else torch.empty(*shape, device=device)  # noqa: E731
        context_kv = model.prepare_context(rand(1, model.text_len, model.dim).to(torch.bfloat16))
        cam = rand(1, tokens, 1536 // s or 1)
        t = torch.full((3,), 999.0, device=device)
        for _ in range(videos):
            vae.start_video()
            cond = rand(1, 20, 3, lh, lw)  # the video's first-frame condition (mask + image latent)
            for _ in range(per_video):
                latent = rand(1, 16, 3, lh, lw)
                for step in range(args.steps + 1):  # the last forward refreshes the KV cache
                    sync()
                    t0 = time.perf_counter()
                    with mark("dit"):
                        out = model(latent, cond, t, cam, context_kv, sp)
                    sync()
                    forward_s.append(time.perf_counter() - t0)
                    if step < args.steps:
                        latent = latent - 0.1 * out
                with mark("vae"):
                    video = vae(latent)
                if rank == 0:
                    with mark("output"):
                        save_video(video)
    sync()
    wall = time.perf_counter() - start
    if world > 1:
        dist.barrier()
    report = {"rank": rank, "world_size": world, "device": str(device), "wall_s": wall, "forwards": len(forward_s),
              "forward_mean_s": sum(forward_s) / max(1, len(forward_s)),
              "forward_median_s": sorted(forward_s)[len(forward_s) // 2] if forward_s else 0.0}
    if args.report:
        with open(f"{args.report}.rank{rank}.json", "w") as f:
            json.dump(report, f)
    if rank == 0:
        print(json.dumps(report), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
