"""The job's output function, named by the stage map as job_outputs:save_video."""
import torch


def save_video(frames):
    return frames.to(torch.uint8)
