"""Sequence-parallel collectives that also run on `meta` tensors (gloo refuses
them): on meta each collective is replaced by a local op of the same output
shape, so the run's operator signatures are the real run's."""
import torch
import torch.distributed as dist


class SP:
    def __init__(self, rank, world_size, device):
        self.rank, self.world_size, self.device = rank, world_size, device
        self.real = device.type != "meta" and world_size > 1 and dist.is_initialized()
        self.gloo = self.real and dist.get_backend() == "gloo"

    def _wire(self, x):
        """gloo has no bfloat16 (move its bits as float16: same width, no
        rounding), and on a GPU shared by several ranks it stages through the CPU."""
        if self.gloo and x.dtype == torch.bfloat16:
            x = x.view(torch.float16)
        return x.cpu() if self.gloo and x.is_cuda else x

    def _unwire(self, x, dtype):
        x = x.to(self.device) if x.device != self.device else x
        return x.view(dtype) if x.dtype != dtype else x

    def chunk(self, x, dim):
        """This rank's shard: torch.chunk(x, world, dim)[rank] (a strided view)."""
        return torch.chunk(x, self.world_size, dim=dim)[self.rank]

    def all_gather(self, x, dim):
        if not self.real:
            return torch.cat([x] * self.world_size, dim=dim)
        wire = self._wire(x.contiguous())
        parts = [torch.empty_like(wire) for _ in range(self.world_size)]
        dist.all_gather(parts, wire)
        return torch.cat([self._unwire(p, x.dtype) for p in parts], dim=dim)

    def all_to_all(self, x, scatter_dim, gather_dim):
        """Ulysses: scatter `scatter_dim` across ranks, gather `gather_dim`."""
        inputs = torch.stack(torch.chunk(x, self.world_size, dim=scatter_dim))
        if not self.real:
            return torch.cat([inputs[0]] * self.world_size, dim=gather_dim)
        wire = self._wire(inputs)
        outputs = torch.empty_like(wire)
        dist.all_to_all_single(outputs, wire)  # gloo and NCCL both implement the single-tensor form
        return torch.cat(self._unwire(outputs, x.dtype).unbind(0), dim=gather_dim)
