# histogram submission 2: the library baseline, one torch.bincount over (channel * 256 + value).
import torch


def custom_kernel(data):
    x, out = data["x"], data["out"]
    rows, channels = x.shape
    keys = x.to(torch.int32) + torch.arange(channels, device=x.device, dtype=torch.int32) * 256
    counts = torch.bincount(keys.view(-1), minlength=channels * 256)
    out.copy_(counts.view(channels, 256))
    return out
