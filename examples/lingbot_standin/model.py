"""The DiT (WanModel) of the stand-in: dim 5120, FFN 13824, 40 heads, 40
blocks (one block's weights reused, as the seed's structure allows), patch
(1,2,2), Ulysses sequence parallelism (SPEC section 6). Every linear of the
seed's 12 DiT rows is here, with the same inputs:

per forward   patch embed Linear(144,5120) on [10560,144]; time embedding
              Linear(256,5120) + Linear(5120,5120) on [3,.]; time projection
              Linear(5120,30720) on [1,3,5120]; camera Linear(1536,5120) and
              two Linear(5120,5120) on [1,10560,.]; head Linear(5120,64) on the
              gathered [1,10560,5120]
per block     fused QKV 5120->15360; self-attn out; cross-attn q and out;
              camera injector layer 1 (fed this rank's chunk view of the
              camera embedding: a strided [1,2640,5120]) and layer 2; camera
              scale and shift 5120->5120; FFN 5120->13824->5120
The model input is the noisy latent concatenated with the image-to-video
condition (36 channels: patch embedding 144 -> 5120). Cross-attention keys/values of the text context are computed once, outside
the forward (prepare_context), as a KV cache would be."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def attention(q, k, v):
    """q, k, v: [B, L, H, D]. SDPA where torch has it (2.x), else matmul+softmax."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    if hasattr(F, "scaled_dot_product_attention"):
        out = F.scaled_dot_product_attention(q, k, v)
    else:
        out = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v
    return out.transpose(1, 2)


class WanRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6, fk=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, **(fk or {})))

    def forward(self, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype) * self.weight


class WanAttentionBlock(nn.Module):
    def __init__(self, dim, ffn_dim, num_heads, fk):
        super().__init__()
        self.dim, self.num_heads = dim, num_heads
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6, **fk)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6, **fk)
        self.norm3 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6, **fk)
        self.qkv = nn.Linear(dim, 3 * dim, **fk)
        self.o = nn.Linear(dim, dim, **fk)
        self.norm_q, self.norm_k = WanRMSNorm(dim, fk=fk), WanRMSNorm(dim, fk=fk)
        self.cross_q = nn.Linear(dim, dim, **fk)
        self.cross_o = nn.Linear(dim, dim, **fk)
        self.cam_injector_layer1 = nn.Linear(dim, dim, **fk)
        self.cam_injector_layer2 = nn.Linear(dim, dim, **fk)
        self.cam_scale_layer = nn.Linear(dim, dim, **fk)
        self.cam_shift_layer = nn.Linear(dim, dim, **fk)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_dim, **fk), nn.GELU(approximate="tanh"), nn.Linear(ffn_dim, dim, **fk))
        self.modulation = nn.Parameter(torch.randn(1, 6, dim, **fk) / dim ** 0.5)

    def forward(self, x, e, cam, context_kv, sp):
        b, s, d = x.shape
        h, hd = self.num_heads, d // self.num_heads
        e = (self.modulation + e).chunk(6, dim=1)
        # self-attention, Ulysses: heads scattered, sequence gathered
        q, k, v = self.qkv(self.norm1(x) * (1 + e[1]) + e[0]).chunk(3, dim=-1)
        q, k = self.norm_q(q), self.norm_k(k)
        q, k, v = (sp.all_to_all(t.reshape(b, s, h, hd), scatter_dim=2, gather_dim=1) for t in (q, k, v))
        y = sp.all_to_all(attention(q, k, v), scatter_dim=1, gather_dim=2).reshape(b, s, d)
        x = x + self.o(y) * e[2]
        # cross-attention over the cached text keys/values
        ck, cv = context_kv
        q = self.cross_q(self.norm3(x)).reshape(b, s, h, hd)
        x = x + self.cross_o(attention(q, ck, cv).reshape(b, s, d))
        # camera injection: this rank's chunk of the camera embedding (a view)
        c = self.cam_injector_layer2(F.silu(self.cam_injector_layer1(cam)))
        x = x * (1 + self.cam_scale_layer(c)) + self.cam_shift_layer(c)
        # FFN
        return x + self.ffn(self.norm2(x) * (1 + e[4]) + e[3]) * e[5]


class WanModel(nn.Module):
    def __init__(self, dim=5120, ffn_dim=13824, num_heads=40, num_layers=40, in_dim=36, out_dim=16,
                 patch_size=(1, 2, 2), freq_dim=256, cam_dim=1536, text_len=512, device=None, dtype=None):
        super().__init__()
        fk = {"device": device, "dtype": dtype}
        self.dim, self.num_heads, self.num_layers, self.patch_size = dim, num_heads, num_layers, patch_size
        self.freq_dim, self.text_len, self.out_dim = freq_dim, text_len, out_dim
        patch_numel = in_dim * math.prod(patch_size)
        self.patch_embedding = nn.Linear(patch_numel, dim, **fk)
        self.time_embedding = nn.Sequential(nn.Linear(freq_dim, dim, **fk), nn.SiLU(), nn.Linear(dim, dim, **fk))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim, **fk))
        self.cam_embedding = nn.Linear(cam_dim, dim, **fk)
        self.cam_adapter = nn.Sequential(nn.Linear(dim, dim, **fk), nn.SiLU(), nn.Linear(dim, dim, **fk))
        self.block = WanAttentionBlock(dim, ffn_dim, num_heads, fk)  # reused num_layers times
        self.head_norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6, **fk)
        self.head = nn.Linear(dim, out_dim * math.prod(patch_size), **fk)

    def prepare_context(self, context):
        """Text keys/values, computed once per video (a KV cache), outside forward."""
        b, n, _ = context.shape
        h, hd = self.num_heads, self.dim // self.num_heads
        k = self.block.norm_k(self.block.cross_q(context)).reshape(b, n, h, hd)
        return k, context.reshape(b, n, h, hd)

    def sinusoidal(self, t):
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
        args = t.float()[:, None] * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=1)

    def forward(self, latent, cond, t, cam, context_kv, sp):
        """latent [1,16,F,H,W] with cond [1,20,F,H,W] (image-to-video: 4 mask + 16 image-latent
        channels, so the patch embedding sees 36 x 1x2x2 = 144); t [F] timesteps; cam [1,F*H/2*W/2,1536]."""
        latent = torch.cat([latent, cond], dim=1)
        _, c, f, hh, ww = latent.shape
        pt, ph, pw = self.patch_size
        gf, gh, gw = f // pt, hh // ph, ww // pw
        patches = latent.reshape(c, gf, pt, gh, ph, gw, pw).permute(1, 3, 5, 0, 2, 4, 6).reshape(gf * gh * gw, -1)
        x = self.patch_embedding(patches.to(self.patch_embedding.weight.dtype)).unsqueeze(0)   # [1,10560,dim]
        e = self.time_embedding(self.sinusoidal(t).to(x.dtype))                                 # [3,dim]
        e0 = self.time_projection(e.unsqueeze(0)).unflatten(2, (6, self.dim))                  # [1,3,6,dim]
        e0 = e0.mean(dim=1)                                                                    # [1,6,dim]
        cam = self.cam_adapter(self.cam_embedding(cam.to(x.dtype)))                            # [1,10560,dim]
        x, cam = sp.chunk(x, dim=1), sp.chunk(cam, dim=1)                                      # [1,2640,dim] views
        for _ in range(self.num_layers):
            x = self.block(x, e0, cam, context_kv, sp)
        x = sp.all_gather(x, dim=1)                                                            # [1,10560,dim]
        x = self.head(self.head_norm(x))                                                       # [1,10560,64]
        x = x.reshape(gf, gh, gw, pt, ph, pw, self.out_dim).permute(6, 0, 3, 1, 4, 2, 5)
        return x.reshape(1, self.out_dim, f, hh, ww).float()
