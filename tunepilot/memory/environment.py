"""What a trial ran on: package versions and the device, so the best trial can be re-run."""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import sys

PACKAGES = ("tunepilot", "torch", "lightning", "jax", "flax", "optax", "optuna", "numpy")


@functools.cache
def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def device() -> str:
    """The accelerator of the frameworks this process has loaded (no new imports)."""
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            total = torch.cuda.get_device_properties(0).total_memory / 2**30
            return f"cuda:{torch.cuda.get_device_name(0)} ({total:.0f} GiB)"
    if "jax" in sys.modules:
        import jax

        backend = jax.default_backend()
        if backend == "cpu":
            return "jax:cpu"
        first = jax.devices()[0]
        limit = (first.memory_stats() or {}).get("bytes_limit")
        size = f" ({limit / 2**30:.0f} GiB)" if limit else ""
        return f"jax:{backend}:{first.device_kind}{size}"
    return f"cpu:{platform.machine()}"
