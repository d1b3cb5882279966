"""Data for the built-in CTR task: synthetic, Criteo TSV, and CSV/Parquet tables."""

from tunepilot.trainers.data.ctr import CTRData, Split
from tunepilot.trainers.data.files import criteo, table
from tunepilot.trainers.data.synthetic import synthetic

__all__ = ["CTRData", "Split", "criteo", "synthetic", "table"]
