"""A measured chip's GPC layout and GPC share of a step, read from the stamped matmul launches replay_launch.py writes:
what the saturating progress model needs to predict that chip rather than the model's own (sim_validation README).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from swizzlelab.hw import HardwareModel

UNIFORM_RATIO = 0.98  # fastest SMs within 2% of the rest and no whole small GPCs among them: no GPC pace


def chip_layout(arrays, n_sms: int, n_gpcs: int) -> dict:
    """The SM pace of the measured chip: each SM's program durations over those of the programs that started near
    them (40 start-time bins), averaged over the grouped orders' runs (L2-bound: ncu's DRAM idle, so the GPC's
    bandwidth sets the pace, README). The fastest SMs stand apart by the largest gap in the sorted pace; a cluster of
    12k SMs is taken as k GPCs of 12 (6 TPCs), the other SMs as GPCs of 18 and 16, and the GPC share of a step's
    time follows from the two clusters' pace ratio r: pace = 1 - b + b x size / mean, so
    b = (1 - r) / (1 - r + (r x slow size - fast size) / mean)."""
    rel, sms = [], []
    for name in arrays.files:
        if name.endswith("_duration") and "__grouped" in name:
            stem = name.removesuffix("_duration")
            start = arrays[f"{stem}_start"].astype(np.float64)
            duration = arrays[name].astype(np.float64)
            bins = np.digitize(start, np.quantile(start, np.linspace(0, 1, 41)[1:-1]))
            medians = np.array([np.median(duration[bins == b]) for b in range(40)])
            rel.append(duration / medians[bins])
            sms.append(arrays[f"{stem}_sm"].astype(np.int64))
    if not rel:
        return {"found": False, "why": "no grouped order among the stamped runs"}
    rel, sms = np.concatenate(rel), np.concatenate(sms)
    pace = np.array([rel[sms == s].mean() for s in range(n_sms) if (sms == s).any()])
    ordered = np.sort(pace)
    cut = int(np.argmax(np.diff(ordered[: n_sms // 2]))) + 1  # the fast cluster is a minority
    r = float(ordered[:cut].mean() / ordered[cut:].mean())
    out = {"sm_pace_sorted": [round(float(x), 4) for x in ordered], "fast_sms": cut, "pace_ratio": round(r, 4),
           "fast_sm_ids": sorted(int(s) for s in np.argsort(pace)[:cut])}
    k = cut // 12
    rest = n_sms - cut
    big = (rest - 16 * (n_gpcs - k)) // 2 if k and cut % 12 == 0 else -1
    if not 0 <= big <= n_gpcs - k:
        if r > UNIFORM_RATIO:
            # No whole small GPCs stand out and the fastest SMs run within 2% of the rest (an H200 of stop 33:
            # 0.991-1.008 over all 132 SMs): the chip shows no GPC pace, and the model's layout goes unused.
            out.update(found=True, gpc_sms=None, gpc_bound=0.0,
                       why=f"no whole GPCs run faster; pace ratio {r:.3f} of the fastest {cut} SMs: GPC share 0")
            return out
        out.update(found=False, why=f"{cut} fast SMs are not whole GPCs of 12 with the rest in GPCs of 16 and 18")
        return out
    layout = (12,) * k + (16,) * (n_gpcs - k - big) + (18,) * big
    slow = rest / (n_gpcs - k)
    b = (1 - r) / (1 - r + (r * slow - 12) / (n_sms / n_gpcs))
    out.update(found=True, gpc_sms=list(layout), gpc_bound=round(float(b), 3))
    return out


def on_chip(model: HardwareModel, chip: dict) -> HardwareModel:
    """`model` with the GPC layout and share a chip_layout read (its own layout with share 0 for a chip whose SMs keep
    one pace)."""
    if not chip["gpc_sms"]:
        return replace(model, gpc_bound=0.0)
    return replace(model, gpc_sms=tuple(chip["gpc_sms"]), gpc_bound=float(chip["gpc_bound"]))


def load_chip(launches_json: str | Path, n_sms: int, n_gpcs: int) -> dict:
    """chip_layout of a launches_<gpu>_<cases>.json (and the .npz beside it), with its device and file name; refuses
    a file whose grouped orders show neither whole faster GPCs nor SMs of one pace (one line)."""
    path = Path(launches_json)
    if not path.is_file() or not path.with_suffix(".npz").is_file():
        raise SystemExit(f"{path}: no such launches file with its .npz beside it")
    device = json.loads(path.read_text())["device"]
    layout = chip_layout(np.load(path.with_suffix(".npz")), n_sms, n_gpcs)
    if not layout["found"]:
        raise SystemExit(f"{path}: {layout['why']}")
    return {"device": device, "launches": path.name, **layout}
