"""A small real multi-rank inference loop in the shape of LingBot-World's
TP1SP4 pipeline (reduced width; the full stand-in is the reference-workload
issue): per chunk a DiT of linear layers over this rank's sequence shard, a
causal conv3d VAE decoder on this rank's width slice, and rank 0's uint8
output conversion. Stages are marked with the lingprobe shim when it is
importable (under `lingprobe run` it is), so the run's metadata is split by
stage like the seed's."""
import argparse
import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F

try:
    import lingprobe
    stage = lingprobe.stage
except ImportError:  # runs without lingprobe too
    stage = lambda name: contextlib.nullcontext()  # noqa: E731


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--blocks", type=int, default=4)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    dim, ffn, tokens = args.dim, args.dim * 27 // 10, 264
    qkv = torch.randn(3 * dim, dim) * 0.02
    proj = torch.randn(dim, dim) * 0.02
    up, down = torch.randn(ffn, dim) * 0.02, torch.randn(dim, ffn) * 0.02
    conv = torch.randn(16, 16, 3, 3, 3) * 0.02
    with torch.no_grad():
        for chunk in range(args.chunks):
            with stage("dit"):
                x = torch.randn(1, tokens * world, dim).chunk(world, dim=1)[rank]  # Ulysses-style shard (a strided view)
                for _ in range(args.blocks):
                    q, k, v = F.linear(x, qkv).chunk(3, dim=-1)
                    x = x + F.linear(torch.softmax(q @ k.transpose(-1, -2) / dim ** 0.5, -1) @ v, proj)
                    x = x + F.linear(F.gelu(F.linear(x, up)), down)
                dist.all_reduce(x)
            with stage("vae"):
                z = torch.randn(1, 16, 3, 12, 10 // world + 2)
                for _ in range(3):
                    z = F.conv3d(F.pad(z, (1, 1, 1, 1, 2, 0)), conv)
            if rank == 0:
                with stage("output"):
                    frames = 9 if chunk == 0 else 12
                    (torch.rand(1, 3, frames, 32, 40) * 255).to(torch.uint8)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
