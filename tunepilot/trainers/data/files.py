"""CTR data from files: the Criteo TSV format, and CSV/Parquet with a named label column.

Both produce the same `CTRData` as the synthetic generator. Rows are split in file order (the
last `val_fraction` is validation: Criteo files are ordered by time, so this validates on the
future). Dense features are log-transformed and standardised with statistics of the training
split only; categorical values are hashed (no fitting) into `buckets` per field.

A malformed file is refused with a `ConfigError` naming the file, the line or column, and the fix.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tunepilot.errors import ConfigError, did_you_mean
from tunepilot.trainers.data.ctr import CTRData, Split, base_rate_logloss, hash_buckets, standardise

if TYPE_CHECKING:
    import pandas as pd

CRITEO_DENSE = [f"I{i}" for i in range(1, 14)]
CRITEO_CAT = [f"C{i}" for i in range(1, 27)]
CRITEO_COLUMNS = ["label", *CRITEO_DENSE, *CRITEO_CAT]
_CRITEO_SHAPE = ("label<TAB>13 integer features<TAB>26 categorical features (40 fields, "
                 "empty = missing)")


def criteo(path: str | Path, *, rows: int | None = None, buckets: int = 2**16,
           val_fraction: float = 0.2) -> CTRData:
    """Reads a Criteo display-ads TSV file (``.gz`` too), at most `rows` lines.

    Example:
        >>> data = criteo("train.txt.gz", rows=1_000_000)  # doctest: +SKIP
    """
    import pandas as pd

    path = _existing(path)
    try:
        frame = pd.read_csv(path, sep="\t", header=None, names=CRITEO_COLUMNS, dtype=str,
                            keep_default_na=False, na_filter=False, nrows=rows,
                            compression="infer", quoting=3, on_bad_lines="error")
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path} is empty; a Criteo file has lines of {_CRITEO_SHAPE}.") from None
    except pd.errors.ParserError as e:
        raise ConfigError(f"{path} is not in the Criteo format ({_first_line(e)}); each line "
                          f"must hold {_CRITEO_SHAPE}.") from None
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise ConfigError(f"Cannot read {path}: {_first_line(e)}.") from None
    _check_not_empty(frame, path)
    _check_field_counts(path, len(frame), 40)
    labels = _labels(frame["label"], path, "column 1 (label)")
    dense = np.stack([_numeric(frame[c], path, f"column {i + 2} ({c})",
                               "Criteo integer features must be numbers or empty")
                      for i, c in enumerate(CRITEO_DENSE)], axis=1)
    _check_both_classes(labels, path)
    cat = _hashed(frame, CRITEO_CAT, buckets)
    return _split(f"Criteo {path.name}", dense, cat, labels, buckets, val_fraction)


def table(path: str | Path, *, label: str = "label", categorical: list[str] | tuple[str, ...] = (),
          rows: int | None = None, buckets: int = 2**16, val_fraction: float = 0.2) -> CTRData:
    """Reads CSV or Parquet: `label` (0/1), `categorical` columns hashed, all others dense numbers.

    Example:
        >>> data = table("clicks.parquet", label="clicked",
        ...              categorical=["site", "device"])  # doctest: +SKIP
    """
    import pandas as pd

    path = _existing(path)
    suffix = "".join(path.suffixes[-2:]).lower()
    try:
        if suffix.endswith(".parquet") or suffix.endswith(".pq"):
            frame = pd.read_parquet(path)
            frame = frame.head(rows) if rows else frame
        elif any(suffix.endswith(s) for s in (".csv", ".csv.gz", ".tsv", ".tsv.gz", ".txt")):
            sep = "\t" if ".tsv" in suffix else ","
            frame = pd.read_csv(path, sep=sep, nrows=rows, compression="infer")
        else:
            raise ConfigError(f"{path}: unknown file type {suffix or '(none)'!r}; expected .csv, "
                              ".tsv (optionally .gz) or .parquet.")
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path} is empty; expected a header line with a '{label}' column "
                          "and rows of data.") from None
    except (pd.errors.ParserError, OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"Cannot read {path}: {_first_line(e)}.") from None
    _check_not_empty(frame, path)
    columns = [str(c) for c in frame.columns]
    frame.columns = columns
    for name, role in [(label, "label"), *((c, "categorical") for c in categorical)]:
        if name not in columns:
            raise ConfigError(
                f"{path} has no {role} column {name!r}.{did_you_mean(name, columns)} Its columns "
                f"are: {', '.join(columns)}. Name the right one with "
                + ("--label." if role == "label" else "--categorical.")
            )
    dense_cols = [c for c in columns if c != label and c not in categorical]
    if not dense_cols and not categorical:
        raise ConfigError(f"{path} has only the label column; add feature columns.")
    labels = _labels(frame[label], path, f"column {label!r}", header=True)
    dense = (np.stack([_numeric(frame[c], path, f"column {c!r}",
                                "declare it with --categorical if it is not a number",
                                header=True) for c in dense_cols], axis=1)
             if dense_cols else np.zeros((len(frame), 0), np.float32))
    _check_both_classes(labels, path)
    cat = _hashed(frame, list(categorical), buckets)
    return _split(f"{path.name}", dense, cat, labels, buckets, val_fraction)


def _existing(path: str | Path) -> Path:
    path = Path(path).expanduser()
    if path.exists() and not path.is_file():
        what = "a directory" if path.is_dir() else "not a regular file (a device or a pipe)"
        raise ConfigError(f"Data file {path} is {what}; name a file of rows (CSV, Parquet or "
                          "Criteo TSV, optionally .gz).")
    if not path.is_file():
        raise ConfigError(f"Data file {path} does not exist. Check the path (relative paths start "
                          f"from {Path.cwd()}).")
    if path.stat().st_size == 0:
        raise ConfigError(f"Data file {path} is empty.")
    return path


def _check_not_empty(frame: pd.DataFrame, path: Path) -> None:
    if len(frame) == 0:
        raise ConfigError(f"{path} has no data rows.")


def _labels(col: pd.Series, path: Path, where: str, header: bool = False) -> np.ndarray:
    import pandas as pd

    values = pd.to_numeric(col.replace("", np.nan), errors="coerce")
    bad = ~values.isin([0, 1])
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ConfigError(f"{path}, line {i + 1 + header}, {where}: {col.iloc[i]!r} is not a "
                          "click label; labels must be 0 or 1.")
    return values.to_numpy(np.float32)


def _check_both_classes(y: np.ndarray, path: Path) -> None:
    if y.min() == y.max():
        raise ConfigError(f"{path}: every label is {int(y[0])}; a CTR model needs both clicks (1) "
                          "and non-clicks (0). Use more rows or another file.")


def _check_field_counts(path: Path, n_lines: int, expected: int) -> None:
    """Short lines: pandas pads them with empty values, which Criteo also uses for 'missing'."""
    import bz2
    import gzip
    import lzma

    openers: dict[str, Any] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
    opener = openers.get(path.suffix.lower(), open)
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(itertools.islice(f, n_lines), start=1):
            fields = line.count("\t") + 1
            if fields != expected:
                raise ConfigError(f"{path}, line {number}: {fields} fields, expected {expected} "
                                  f"({_CRITEO_SHAPE}).")


def _numeric(col: pd.Series, path: Path, where: str, fix: str, header: bool = False) -> np.ndarray:
    import pandas as pd

    text = col.astype("string").str.strip()
    missing = text.isna() | (text == "")
    values = pd.to_numeric(text.where(~missing), errors="coerce")
    bad = values.isna() & ~missing
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ConfigError(f"{path}, line {i + 1 + header}, {where}: {col.iloc[i]!r} is not a "
                          f"number; {fix}.")
    return values.to_numpy(np.float32, na_value=np.nan)


def _hashed(frame: pd.DataFrame, columns: list[str], buckets: int) -> np.ndarray:
    from pandas.util import hash_array

    if not columns:
        return np.zeros((len(frame), 0), np.int32)
    return np.stack([
        hash_buckets(hash_array(frame[c].astype(str).to_numpy(object)), field, buckets)
        for field, c in enumerate(columns)
    ], axis=1)


def _split(name: str, dense_raw: np.ndarray, cat: np.ndarray, y: np.ndarray, buckets: int,
           val_fraction: float) -> CTRData:
    n = len(y)
    n_val = int(n * val_fraction)
    if n_val < 1 or n - n_val < 1:
        raise ConfigError(f"{name}: {n} rows are too few to split into training and validation; "
                          "use at least 10.")
    cut = n - n_val
    dense_tr, dense_va = standardise(dense_raw[:cut], dense_raw[cut:])
    train, val = Split(dense_tr, cat[:cut], y[:cut]), Split(dense_va, cat[cut:], y[cut:])
    if train.y.min() == train.y.max():
        raise ConfigError(f"{name}: the training split holds only label {int(train.y[0])}; "
                          "shuffle the file or use more rows.")
    return CTRData(name=name, train=train, val=val, buckets=buckets,
                   base_logloss=base_rate_logloss(train.y, val.y))


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
