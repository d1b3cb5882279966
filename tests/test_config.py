import pytest

from tunepilot import ConfigError, load_config
from tunepilot.config import parse_duration, read_config


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


# Precedence, one rule everywhere: built-in defaults < the file < the environment < flags.

def test_each_layer_overrides_the_one_before(tmp_path):
    path = tmp_path / "tune.toml"
    path.write_text('n_trials = 30\nstorage = "sqlite:///file.db"\n[space]\nepochs = 3\n')
    env = {"TUNEPILOT_STORAGE": "sqlite:///env.db"}
    cfg, sources = read_config(environ={})
    assert (cfg.n_trials, cfg.epochs, cfg.storage) == (20, 3, "sqlite:///tunepilot.db")
    assert sources.line(cfg) is None  # all at their defaults: nothing to say
    cfg, sources = read_config(path, environ={})
    assert (cfg.n_trials, cfg.epochs, cfg.storage) == (30, 3, "sqlite:///file.db")
    cfg, sources = read_config(path, environ=env)
    assert cfg.storage == "sqlite:///env.db"
    assert "storage = sqlite:///env.db (environment; the file says sqlite:///file.db)" in \
        sources.line(cfg)
    cfg, sources = read_config(path, environ=env, storage="sqlite:///flag.db", epochs=1)
    assert (cfg.storage, cfg.epochs, cfg.space["epochs"]) == ("sqlite:///flag.db", 1, 1)
    line = sources.line(cfg)
    assert "epochs = 1 (flag; the file says 3)" in line and "n_trials = 30 (file)" in line
    assert ("storage = sqlite:///flag.db (flag; the file says sqlite:///file.db; the "
            "environment says sqlite:///env.db)") in line


def test_a_flag_cannot_fix_what_the_file_tunes(tmp_path):
    path = tmp_path / "tune.toml"
    path.write_text('[space]\nepochs = { type = "int", low = 1, high = 9 }\n')
    with pytest.raises(ConfigError, match="--epochs 2 fixes epochs, which \\[space\\] in"):
        load_config(path, epochs=2)
    path.write_text('epochs = 4\n[space]\nepochs = 3\n')
    with pytest.raises(ConfigError, match="epochs is set twice"):
        load_config(path)


def test_no_password_in_the_settings_line():
    cfg, sources = read_config(environ={}, storage="postgresql://me:s3cret@db:5432/tune")
    assert "s3cret" not in sources.line(cfg) and "postgresql://me:" in sources.line(cfg)
