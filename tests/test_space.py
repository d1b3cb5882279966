import pytest

from tunepilot import Categorical, ConfigError, Float, Int, SearchSpace


def test_of_splits_params_and_fixed_settings():
    space = SearchSpace.of({"lr": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True}},
                           batch_size=Categorical([256, 512]), epochs=3)
    assert set(space.params) == {"lr", "batch_size"}
    assert space.fixed == {"epochs": 3}
    assert space.params["lr"] == Float(1e-5, 1e-1, log=True)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"type": "float", "low": 0.1, "high": 0.01}, "low (0.1) must be below high (0.01)"),
        ({"type": "float", "low": 0.0, "high": 1.0, "log": True}, "needs low > 0"),
        ({"type": "int", "low": 0, "high": 10, "log": True}, "needs low > 0"),
        ({"type": "categorical", "choices": []}, "choices is empty"),
        ({"type": "flaot", "low": 0, "high": 1}, "Did you mean 'float'?"),
        ({"type": "float", "low": 0, "high": 1, "lgo": True}, "unknown key 'lgo'"),
    ],
)
def test_invalid_parameters_name_the_parameter_and_the_fix(spec, expected):
    with pytest.raises(ConfigError) as e:
        SearchSpace.of(dropout=spec)
    assert "dropout" in str(e.value)
    assert expected in str(e.value)


def test_snap_rounds_matches_choices_and_refuses_out_of_range():
    space = SearchSpace.of(lr=Float(1e-4, 1e-1, log=True), layers=Int(1, 8, step=1),
                           batch_size=Categorical([256, 512]), precision=Categorical(["32-true"]))
    snapped = space.snap({"lr": "0.1", "layers": 3.6, "batch_size": "512",
                          "precision": "32-true"})
    assert snapped == {"lr": 0.1, "layers": 4, "batch_size": 512, "precision": "32-true"}
    assert isinstance(snapped["batch_size"], int)
    with pytest.raises(ValueError, match=r"'lr': 5 is outside \[0.0001, 0.1\]"):
        space.snap({"lr": 5.0, "layers": 3, "batch_size": 256, "precision": "32-true"})
    with pytest.raises(ValueError, match="'layers'"):
        space.snap({"lr": 0.01, "layers": "many", "batch_size": 256, "precision": "32-true"})


def test_snap_lists_every_problem():
    space = SearchSpace.of(lr=Float(1e-4, 1e-1), batch_size=Categorical([256, 512]))
    with pytest.raises(ValueError) as e:
        space.snap({"batch_size": 300, "momentum": 0.9})
    text = str(e.value)
    assert "'lr' is missing" in text
    assert "300 is not one of [256, 512]" in text
    assert "unknown parameters ['momentum']" in text


def test_merged_lets_a_fixed_value_replace_a_parameter():
    base = SearchSpace.of(lr=Float(1e-4, 1e-1), epochs=3)
    user = SearchSpace.of(lr=0.01, epochs=Int(1, 5))
    merged = base.merged(user)
    assert merged.fixed == {"lr": 0.01}
    assert merged.params == {"epochs": Int(1, 5)}
