import pytest

from tunepilot import ConfigError, load_config
from tunepilot.config import parse_duration


def test_toml_file_with_flags_overriding(tmp_path):
    path = tmp_path / "tune.toml"
    path.write_text('n_trials = 30\ntarget = 0.45\ntimeout = "1h30m"\n'
                    '[space]\nepochs = 4\nweight_decay = { type = "float", low = 1e-6, '
                    'high = 1e-2, log = true }\n')
    cfg = load_config(path, n_trials=12, target=None)
    assert cfg.n_trials == 12  # the flag wins
    assert cfg.target == 0.45  # None means "flag not given"
    assert cfg.timeout == 5400.0
    assert cfg.space["epochs"] == 4


def test_yaml_file(tmp_path):
    path = tmp_path / "tune.yaml"
    path.write_text("n-trials: 7\nsampler: random\n")
    cfg = load_config(path)
    assert (cfg.n_trials, cfg.sampler) == (7, "random")


def test_unknown_key_suggests_the_right_one(tmp_path):
    path = tmp_path / "tune.toml"
    path.write_text("n_trails = 5\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "unknown setting 'n_trails'" in str(e.value)
    assert "Did you mean 'n_trials'?" in str(e.value)
    assert str(path) in str(e.value)


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("n_trials = = 3\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_invalid_values_are_explained():
    with pytest.raises(ConfigError,
                       match="strategy: expected 'auto', 'optuna', 'review', 'llm' or 'hybrid'"):
        load_config(strategy="genetic")
    with pytest.raises(ConfigError, match="not a duration"):
        load_config(timeout="soon")
    with pytest.raises(ConfigError, match="n_trials"):
        load_config(n_trials=0)


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("20m", 1200),
                                               ("8h", 28800), ("1h30m", 5400), ("2d", 172800)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_default_study_name_is_stable_so_a_rerun_resumes():
    assert load_config().study_name() == "lightning-synthetic"
    assert load_config(trainer="my_pkg.mod:fn").study_name() == "my_pkg.mod-fn"
