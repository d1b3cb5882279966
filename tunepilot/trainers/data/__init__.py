"""Data for the built-in CTR task: the synthetic generator (more formats in trainers.data.*)."""

from tunepilot.trainers.data.ctr import CTRData, Split
from tunepilot.trainers.data.synthetic import synthetic

__all__ = ["CTRData", "Split", "synthetic"]
