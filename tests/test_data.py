"""The data layer: synthetic, Criteo TSV, CSV/Parquet, and refusal of malformed files."""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest

from tunepilot import ConfigError
from tunepilot.trainers import load_data
from tunepilot.trainers.data import criteo, synthetic, table


def criteo_line(label, dense, cats):
    return "\t".join([str(label), *dense, *cats]) + "\n"


def make_criteo(path, n=50, missing=True, compress=False):
    rng = np.random.default_rng(0)
    lines = []
    for i in range(n):
        dense = [str(int(rng.integers(-2, 500))) for _ in range(13)]
        cats = [f"{int(rng.integers(0, 2**32)):08x}" for _ in range(26)]
        if missing:
            dense[i % 13] = ""  # empty = missing, as in the real files
            cats[i % 26] = ""
        lines.append(criteo_line(i % 3 == 0 and 1 or 0, dense, cats))
    text = "".join(lines)
    if compress:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def test_synthetic_is_seeded_cached_and_reports_the_floor():
    a, b = synthetic(3000, seed=4), synthetic(3000, seed=4)
    assert np.array_equal(a.train.cat, b.train.cat)
    assert np.array_equal(a.val.y, b.val.y)
    assert 0.2 < a.train.y.mean() < 0.3
    assert a.bayes_logloss < a.base_logloss - 0.1
    assert not np.array_equal(synthetic(3000, seed=5).train.y, a.train.y)


def test_criteo_tsv_with_missing_values(tmp_path):
    data = criteo(make_criteo(tmp_path / "day_0.txt"), buckets=128)
    assert (len(data.train), len(data.val)) == (40, 10)
    assert data.train.dense.shape == (40, 13) and data.train.cat.shape == (40, 26)
    assert np.isfinite(data.train.dense).all()  # missing -> 0 before standardising
    assert data.train.cat.min() >= 0 and data.train.cat.max() < 128
    # An empty categorical value is a value of its own: the same bucket every time.
    assert data.describe().startswith("Criteo day_0.txt")


def test_criteo_gz_and_row_limit(tmp_path):
    data = criteo(make_criteo(tmp_path / "day_0.txt.gz", n=80, compress=True), rows=30)
    assert len(data.train) + len(data.val) == 30


def test_preprocessing_is_fitted_on_the_training_split_only(tmp_path):
    frame = pd.DataFrame({"label": [0, 1] * 50, "x": [1.0] * 80 + [1e6] * 20})
    frame.to_csv(tmp_path / "t.csv", index=False)
    data = table(tmp_path / "t.csv")
    assert np.allclose(data.train.dense, 0.0)  # constant in training: std 1, mean removed
    assert (data.val.dense > 5).all()  # the validation outliers are not hidden by their own stats


def test_csv_and_parquet_with_categorical_columns(tmp_path):
    frame = pd.DataFrame({
        "clicked": [0, 1, 0, 0] * 25,
        "price": np.linspace(0, 10, 100),
        "site": ["a", "b", "c", "d"] * 25,
        "device": ["ios", "android"] * 50,
    })
    frame.to_csv(tmp_path / "c.csv", index=False)
    frame.to_parquet(tmp_path / "c.parquet")
    for name in ("c.csv", "c.parquet"):
        data = table(tmp_path / name, label="clicked", categorical=["site", "device"])
        assert data.n_dense == 1 and data.n_fields == 2
        assert len(data.train) == 80
    via_spec = load_data(f"parquet:{tmp_path / 'c.parquet'}", label="clicked",
                         categorical=["site", "device"], rows=60)
    assert len(via_spec.train) + len(via_spec.val) == 60


@pytest.mark.parametrize(("content", "expected"), [
    ("", "is empty"),
    (criteo_line(1, ["1"] * 13, ["ab"] * 25), "line 1: 39 fields, expected 40"),
    (criteo_line(0, ["1"] * 12 + ["x7"], ["ab"] * 26),
     "line 1, column 14 (I13): 'x7' is not a number"),
    (criteo_line(2, ["1"] * 13, ["ab"] * 26), "'2' is not a click label"),
    (criteo_line(0, ["1"] * 13, ["ab"] * 26) * 20, "every label is 0"),
])
def test_malformed_criteo_files_are_refused(tmp_path, content, expected):
    path = tmp_path / "bad.txt"
    path.write_text(content)
    with pytest.raises(ConfigError) as e:
        criteo(path)
    assert expected in str(e.value)
    assert str(path) in str(e.value)


def test_malformed_tables_are_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("clicked,price,site\n0,1.0,a\n1,abc,b\n")
    with pytest.raises(ConfigError,
                       match="no label column 'label'. Its columns are: clicked, price, site"):
        table(path)
    with pytest.raises(ConfigError, match=r"line 3, column 'price': 'abc' is not a number; "
                                          "declare it with --categorical"):
        table(path, label="clicked", categorical=["site"])
    with pytest.raises(ConfigError, match="no categorical column 'sight'"):
        table(path, label="clicked", categorical=["sight"])
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        table(tmp_path / "empty.csv")
    with pytest.raises(ConfigError, match="does not exist"):
        table(tmp_path / "nope.csv")


def test_unknown_data_spec_is_refused():
    with pytest.raises(ConfigError, match="Did you mean 'criteo'"):
        load_data("critio:x.tsv")
    with pytest.raises(ConfigError, match="needs a path"):
        load_data("csv")


@pytest.mark.slow
def test_cli_tunes_on_a_criteo_file_and_refuses_a_broken_one(tmp_path):
    from tests.conftest import run_tune

    make_criteo(tmp_path / "day.txt.gz", n=400, compress=True)
    proc = run_tune("run", "--llm", "none", "--trainer", "jax", "--data", "criteo:day.txt.gz",
                    "--n-trials", "2",
                    "--epochs", "1", "--storage", "sqlite:///s.db", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "data: Criteo day.txt.gz: 320 train / 80 validation rows" in proc.stdout
    assert "2 finished" in proc.stdout

    (tmp_path / "broken.txt").write_text(criteo_line(1, ["1"] * 13, ["ab"] * 20))
    proc = run_tune("run", "--llm", "none", "--data", "criteo:broken.txt", cwd=tmp_path)
    assert proc.returncode == 2
    assert "broken.txt, line 1: 34 fields, expected 40" in proc.stderr
    assert "Traceback" not in proc.stderr
