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
            return f"cuda:{torch.cuda.get_device_name(0)}"
    if "jax" in sys.modules:
        import jax

        return f"jax:{jax.default_backend()}"
    return f"cpu:{platform.machine()}"
