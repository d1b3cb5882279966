"""One trial per device: which GPUs this machine has, and which each local worker gets.

Each worker is pinned through ``CUDA_VISIBLE_DEVICES`` (so torch, JAX and any library see its
GPUs alone, numbered from 0), and told not to preallocate the whole device (JAX takes 75% of
a GPU at start otherwise). On a machine without GPUs nothing changes.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from tunepilot.errors import ConfigError


def gpus() -> list[str]:
    """The GPUs workers may use: ``TUNEPILOT_GPUS`` (a list, "0,1,3", or a count), else
    ``CUDA_VISIBLE_DEVICES``, else what ``nvidia-smi`` lists; [] without any."""
    told = os.environ.get("TUNEPILOT_GPUS", "").strip()
    if told.isdigit():  # a count
        return [str(i) for i in range(int(told))]
    chosen = told or os.environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is not None:
        return [d for d in (p.strip() for p in chosen.split(",")) if d and d != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def assign(n_workers: int | None, per_trial: int | None,
           available: list[str]) -> tuple[int, list[dict[str, str]]]:
    """How many workers, and each one's environment. `n_workers` None: one per group of
    `per_trial` GPUs (``--n-workers auto``; 1 on a machine without GPUs)."""
    if not available:
        if per_trial:
            raise ConfigError(f"--gpus-per-trial {per_trial}: this machine shows no GPU (no "
                              "nvidia-smi, CUDA_VISIBLE_DEVICES or TUNEPILOT_GPUS). Drop the "
                              "flag to run on the CPU.")
        n = n_workers or 1
        return n, [{} for _ in range(n)]
    per = per_trial or 1
    groups = [available[i:i + per] for i in range(0, len(available) - per + 1, per)]
    if not groups:
        raise ConfigError(f"--gpus-per-trial {per} needs {per} GPUs; this machine has "
                          f"{len(available)} ({', '.join(available)}).")
    n = n_workers or len(groups)
    if n > len(groups):
        raise ConfigError(f"{n} workers with {per} GPU(s) each need {n * per} GPUs; this machine "
                          f"has {len(available)} ({', '.join(available)}). Use --n-workers "
                          f"{len(groups)} (or auto), or fewer --gpus-per-trial.")
    return n, [{"CUDA_VISIBLE_DEVICES": ",".join(g), "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
               for g in groups[:n]]
