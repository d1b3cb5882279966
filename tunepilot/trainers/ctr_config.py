"""The settings of the built-in CTR model, shared by the Lightning and JAX backends.

Kept free of torch and jax so that a config can be checked before any framework is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tunepilot.errors import ConfigError

# A validation loss this many times the base rate's means the weights blew up (a learning rate
# far too high gives orders of magnitude more) even while the loss is still a finite number.
EXPLODED = 10


class CTRConfig(BaseModel):
    """The settings the built-in CTR model understands; anything else is refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lr: float = Field(1e-3, gt=0)  # Adam's customary default; the search moves it
    batch_size: int = Field(1024, ge=1)
    precision: Literal["32-true", "bf16-mixed", "16-mixed"] = "32-true"
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    epochs: int = Field(3, ge=1)  # a few epochs separate good from bad configs on small data
    seed: int = 0  # one seed for every trial: differences come from the config, not the draw
    emb_dim: int = Field(8, ge=1)  # 8 keeps the demo fast; Criteo-scale models use 16
    hidden: tuple[int, ...] = (256, 128)
    weight_decay: float = Field(0.0, ge=0.0)  # L2, as torch.optim.Adam's weight_decay
    # Lazy Adam on the embedding table: only the rows a batch touches are read and updated
    # (torch SparseAdam; the same rule in JAX): faster than dense Adam with the same validation
    # loss (bench/README.md#trainers); weight decay then applies to the MLP only.
    sparse_embeddings: bool = True

    @field_validator("hidden", mode="before")
    @classmethod
    def _parse_hidden(cls, v: Any) -> Any:
        # Categorical choices are scalars, so layer sizes may come as "256-128" or a single int.
        if isinstance(v, str):
            return tuple(int(x) for x in v.replace(",", "-").split("-") if x.strip())
        if isinstance(v, int):
            return (v,)
        return v


def parse_config(config: Mapping[str, Any]) -> CTRConfig:
    try:
        return CTRConfig.model_validate(dict(config))
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc']))}: "
            + ("unknown setting" if err["type"] == "extra_forbidden" else err["msg"])
            for err in e.errors()
        )
        raise ConfigError(
            f"The built-in CTR trainer cannot use this config ({problems}). It understands "
            f"{sorted(CTRConfig.model_fields)}; rename or remove the others, or use your own "
            "trainer (--trainer package.module:function)."
        ) from None


def check_ctr_keys(keys: set[str]) -> None:
    """Refuses, before any training, settings the built-in CTR model would not understand."""
    unknown = sorted(keys - set(CTRConfig.model_fields))
    if unknown:
        raise ConfigError(
            f"The built-in CTR trainer does not understand {unknown}. It takes "
            f"{', '.join(CTRConfig.model_fields)}; rename or remove the others in [space], or "
            "tune your own code with --trainer package.module:function."
        )
