"""The Wan2.1-style causal VAE decoder of the stand-in (fp32), decoding this
rank's width slice one latent frame at a time with a 2-frame causal cache.
Every conv3d of the seed's 17 VAE rows is here (SPEC section 6):

per chunk          conv2 (1x1x1, 16->16) on the whole latent [1,16,3,88,160]
per latent frame   conv1 16->384; middle (2 ResBlocks) + stage 0 (3 ResBlocks)
                   at 384: 10 convs; stage-0 upsample3d: time_conv 384->768
                   (3,1,1) on regular frames, then a 2-D upsample + Conv2d
                   384->192; stage 1: ResBlock 192->384 with a 1x1x1 shortcut,
                   2 ResBlocks at 384, upsample3d (time_conv on regular frames,
                   Conv2d 384->192); stage 2: 3 ResBlocks at 192, upsample2d
                   (Conv2d 192->96); stage 3: 3 ResBlocks at 96; head 96->3.
The first latent frame of a video takes the single-frame path (no cache, no
temporal upsampling). Causal convs concatenate the cached frames, then F.pad
the rest (time in front, H and W by 1) and convolve with padding=0."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CACHE_T = 2


class CausalConv3d(nn.Conv3d):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        pt, ph, pw = self.padding
        self._pad = (pw, pw, ph, ph, 2 * pt, 0)
        self.padding = (0, 0, 0)
        self.cache = None

    def reset(self):
        self.cache = None

    def forward(self, x):
        pad = list(self._pad)
        new_cache = x[:, :, -CACHE_T:] if self._pad[4] > 0 else None
        if self.cache is not None and pad[4] > 0:
            x = torch.cat([self.cache, x], dim=2)
            pad[4] -= self.cache.shape[2]
        if new_cache is not None:
            if new_cache.shape[2] < CACHE_T and self.cache is not None:
                new_cache = torch.cat([self.cache[:, :, -1:], new_cache], dim=2)
            self.cache = new_cache
        return super().forward(F.pad(x, pad))


class RMSNorm3d(nn.Module):
    def __init__(self, dim, fk):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim, 1, 1, 1, **fk))

    def forward(self, x):
        return F.normalize(x, dim=1) * (x.shape[1] ** 0.5) * self.gamma


class ResidualBlock(nn.Module):
    def __init__(self, in_dim, out_dim, fk):
        super().__init__()
        self.residual = nn.ModuleList([RMSNorm3d(in_dim, fk), nn.SiLU(), CausalConv3d(in_dim, out_dim, 3, padding=1, **fk),
                                       RMSNorm3d(out_dim, fk), nn.SiLU(), CausalConv3d(out_dim, out_dim, 3, padding=1, **fk)])
        self.shortcut = CausalConv3d(in_dim, out_dim, 1, **fk) if in_dim != out_dim else None

    def forward(self, x):
        h = self.shortcut(x) if self.shortcut is not None else x
        for layer in self.residual:
            x = layer(x)
        return x + h


class AttentionBlock(nn.Module):
    """Per-frame spatial self-attention with 2-D ops (not conv3d)."""

    def __init__(self, dim, fk):
        super().__init__()
        self.norm = RMSNorm3d(dim, fk)
        self.to_qkv = nn.Conv2d(dim, 3 * dim, 1, **fk)
        self.proj = nn.Conv2d(dim, dim, 1, **fk)

    def forward(self, x):
        b, c, t, h, w = x.shape
        y = self.norm(x).permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
        q, k, v = self.to_qkv(y).reshape(b * t, 3, c, h * w).permute(1, 0, 3, 2).unbind(0)
        a = torch.softmax(q @ k.transpose(-1, -2) / c ** 0.5, dim=-1) @ v
        y = self.proj(a.transpose(1, 2).reshape(b * t, c, h, w))
        return x + y.reshape(b, t, c, h, w).permute(0, 2, 1, 3, 4)


class Resample(nn.Module):
    """upsample3d: time_conv (regular frames only) then 2x spatial + Conv2d; upsample2d: spatial only."""

    def __init__(self, dim, mode, fk):
        super().__init__()
        self.mode = mode
        self.conv = nn.Conv2d(dim, dim // 2, 3, padding=1, **fk)
        self.time_conv = CausalConv3d(dim, dim * 2, (3, 1, 1), padding=(1, 0, 0), **fk) if mode == "upsample3d" else None
        self.first = True

    def reset(self):
        self.first = True

    def forward(self, x):
        b, c, t, h, w = x.shape
        if self.time_conv is not None:
            if self.first:  # a video's first frame: no temporal upsampling
                self.first = False
                self.time_conv.cache = x[:, :, -CACHE_T:]
            else:
                x = self.time_conv(x).reshape(b, 2, c, t, h, w)
                x = torch.stack((x[:, 0], x[:, 1]), dim=3).reshape(b, c, t * 2, h, w)
                t = t * 2
        x = x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
        x = self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        return x.reshape(b, t, c // 2, 2 * h, 2 * w).permute(0, 2, 1, 3, 4)


class Decoder3d(nn.Module):
    def __init__(self, dim=96, z_dim=16, device=None):
        super().__init__()
        fk = {"device": device}
        d = [dim * 4, dim * 4, dim * 4, dim * 2, dim]  # 384, 384, 384, 192, 96
        self.conv1 = CausalConv3d(z_dim, d[0], 3, padding=1, **fk)
        self.middle = nn.ModuleList([ResidualBlock(d[0], d[0], fk), AttentionBlock(d[0], fk), ResidualBlock(d[0], d[0], fk)])
        stages = []
        for i, (in_dim, out_dim) in enumerate(zip(d[:-1], d[1:])):
            if i > 0:
                in_dim //= 2  # the previous upsample halved the channels
            blocks = [ResidualBlock(in_dim, out_dim, fk), ResidualBlock(out_dim, out_dim, fk), ResidualBlock(out_dim, out_dim, fk)]
            if i < 3:
                blocks.append(Resample(out_dim, "upsample3d" if i < 2 else "upsample2d", fk))
            stages.append(nn.ModuleList(blocks))
        self.upsamples = nn.ModuleList(stages)
        self.head = nn.ModuleList([RMSNorm3d(d[-1], fk), nn.SiLU(), CausalConv3d(d[-1], 3, 3, padding=1, **fk)])

    def reset(self):
        for m in self.modules():
            if isinstance(m, (CausalConv3d, Resample)):
                m.reset()

    def forward(self, z):
        x = self.conv1(z)
        for layer in self.middle:
            x = layer(x)
        for stage in self.upsamples:
            for layer in stage:
                x = layer(x)
        for layer in self.head:
            x = layer(x)
        return x


class WanVAE(nn.Module):
    """Decodes a chunk's latent: conv2 on the whole latent, then this rank's
    width slice (W/world latent columns) frame by frame; all ranks' slices are
    gathered along W."""

    def __init__(self, sp, dim=96, z_dim=16, device=None):
        super().__init__()
        fk = {"device": device}
        self.sp = sp
        self.conv2 = CausalConv3d(z_dim, z_dim, 1, **fk)
        self.decoder = Decoder3d(dim, z_dim, device)

    def start_video(self):
        self.decoder.reset()

    def forward(self, latent):
        x = self.conv2(latent)                          # [1,16,3,88,160]
        x = self.sp.chunk(x, dim=4)                     # [1,16,3,88,40]
        frames = [self.decoder(x[:, :, i:i + 1]) for i in range(x.shape[2])]
        video = torch.cat(frames, dim=2)                # [1,3,T,704,320]
        return self.sp.all_gather(video.clamp(-1, 1), dim=4)
