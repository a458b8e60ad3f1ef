"""Output side of the stand-in (LingBot-World's wan.utils.utils role)."""
import torch


def save_video(video):
    """[-1,1] float video -> uint8 frames (the seed's output stage: one aten::to per chunk)."""
    return ((video + 1) * 127.5).to(torch.uint8)
