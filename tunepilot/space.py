"""The search space: float (linear or log), int (linear or log, with a step), categorical.

A space is validated where it enters (config file, Python call) and is immutable afterwards.
Fixed settings (``epochs = 3``) live beside the tuned parameters so that a trainer always gets
one flat config.

Example:
    >>> space = SearchSpace.of(lr=Float(1e-5, 1e-1, log=True), batch_size=Categorical([256, 512]),
    ...                        epochs=3)
    >>> sorted(space.params), space.fixed
    (['batch_size', 'lr'], {'epochs': 3})
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tunepilot.errors import ConfigError

if TYPE_CHECKING:
    import optuna

Scalar = bool | int | float | str


class _Param(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Float(_Param):
    """A float in ``[low, high]``; ``log=True`` samples uniformly in log space."""

    type: Literal["float"] = "float"
    low: float
    high: float
    log: bool = False
    step: float | None = None
    default: float | None = None  # trial 0 of a new study: what a person would try first

    def __init__(self, low: float | None = None, high: float | None = None, /, **kw: Any):
        if low is not None:
            kw["low"] = low
        if high is not None:
            kw["high"] = high
        super().__init__(**kw)

    @model_validator(mode="after")
    def _check(self) -> Float:
        _check_bounds(self.low, self.high, self.log)
        if self.log and self.step is not None:
            raise ValueError("a log-scaled float cannot have a step; drop `step` or `log`")
        if self.step is not None and self.step <= 0:
            raise ValueError(f"step must be positive, found {self.step}")
        _check_default(self)
        return self

    def distribution(self) -> optuna.distributions.BaseDistribution:
        from optuna.distributions import FloatDistribution

        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)

    def suggest(self, trial: optuna.Trial, name: str) -> float:
        return trial.suggest_float(name, self.low, self.high, log=self.log, step=self.step)

    def snap(self, value: Any) -> float:
        """The value as a float rounded to the step; outside [low, high] is an error."""
        v = _in_range(value, self.low, self.high)
        if self.step is not None:
            v = self.low + round((v - self.low) / self.step) * self.step
            v = min(v, self.high)
        return v

    def describe(self) -> str:
        scale = "log" if self.log else "linear"
        step = f", step {self.step:g}" if self.step else ""
        return f"float in [{self.low:g}, {self.high:g}] ({scale}{step})"


class Int(_Param):
    """An integer in ``[low, high]`` (both included), optionally log-scaled or stepped."""

    type: Literal["int"] = "int"
    low: int
    high: int
    log: bool = False
    step: int = 1
    default: int | None = None  # trial 0 of a new study: what a person would try first

    def __init__(self, low: int | None = None, high: int | None = None, /, **kw: Any):
        if low is not None:
            kw["low"] = low
        if high is not None:
            kw["high"] = high
        super().__init__(**kw)

    @model_validator(mode="after")
    def _check(self) -> Int:
        _check_bounds(self.low, self.high, self.log)
        if self.step < 1:
            raise ValueError(f"step must be a positive integer, found {self.step}")
        if self.log and self.step != 1:
            raise ValueError("a log-scaled int must have step 1; drop `step` or `log`")
        _check_default(self)
        return self

    def distribution(self) -> optuna.distributions.BaseDistribution:
        from optuna.distributions import IntDistribution

        return IntDistribution(self.low, self.high, log=self.log, step=self.step)

    def suggest(self, trial: optuna.Trial, name: str) -> int:
        return trial.suggest_int(name, self.low, self.high, log=self.log, step=self.step)

    def snap(self, value: Any) -> int:
        """The value rounded to the nearest allowed integer; outside [low, high] is an error."""
        v = _in_range(value, self.low, self.high)
        v = self.low + round((v - self.low) / self.step) * self.step
        return int(min(v, self.high))

    def describe(self) -> str:
        scale = "log" if self.log else "linear"
        step = f", step {self.step}" if self.step != 1 else ""
        return f"int in [{self.low}, {self.high}] ({scale}{step})"


class Categorical(_Param):
    """One of a list of choices (strings, numbers or booleans)."""

    type: Literal["categorical"] = "categorical"
    choices: tuple[Scalar, ...]
    default: Scalar | None = None  # trial 0 of a new study: what a person would try first

    def __init__(self, choices: Any = None, /, **kw: Any):
        if choices is not None:
            kw["choices"] = choices
        super().__init__(**kw)

    @model_validator(mode="after")
    def _check(self) -> Categorical:
        if not self.choices:
            raise ValueError("choices is empty; list at least one value, e.g. choices = [256, 512]")
        if len(set(map(repr, self.choices))) != len(self.choices):
            raise ValueError(f"choices repeat a value: {list(self.choices)}")
        _check_default(self)
        return self

    def distribution(self) -> optuna.distributions.BaseDistribution:
        from optuna.distributions import CategoricalDistribution

        return CategoricalDistribution(self.choices)

    def suggest(self, trial: optuna.Trial, name: str) -> Scalar:
        value = trial.suggest_categorical(name, self.choices)
        assert value is not None  # choices are scalars (validated above)
        return value

    def snap(self, value: Any) -> Scalar:
        """The matching choice; numbers match numerically ('512' or 512.0 -> 512)."""
        for c in self.choices:
            if value == c and type(value) is type(c):
                return c
        for c in self.choices:
            if isinstance(c, bool) or isinstance(value, bool):
                continue
            if isinstance(c, (int, float)):
                try:
                    if float(value) == c:
                        return c
                except (TypeError, ValueError):
                    pass
            elif str(value) == str(c):
                return c
        raise ValueError(f"{value!r} is not one of {list(self.choices)}")

    def describe(self) -> str:
        return f"one of {list(self.choices)}"


Param = Annotated[Float | Int | Categorical, Field(discriminator="type")]


def _in_range(value: Any, low: float, high: float) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    v = float(value)  # ValueError/TypeError for text that is not a number
    if not math.isfinite(v):
        raise ValueError(f"{value!r} is not a finite number")
    slack = 1e-9 * (high - low)  # absorbs float noise from printing and parsing
    if v < low - slack or v > high + slack:
        raise ValueError(f"{v:g} is outside [{low:g}, {high:g}]")
    return min(max(v, low), high)


def _check_default(p: Float | Int | Categorical) -> None:
    if p.default is not None:
        try:
            p.snap(p.default)
        except (TypeError, ValueError) as e:
            raise ValueError(f"default {p.default!r} is not in the range: {e}") from None


def _check_bounds(low: float, high: float, log: bool) -> None:
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"bounds must be finite numbers, found low={low}, high={high}")
    if low >= high:
        raise ValueError(
            f"low ({low:g}) must be below high ({high:g}); swap them, or use a fixed value "
            "(e.g. `epochs = 3`) for a setting that should not be tuned"
        )
    if log and low <= 0:
        raise ValueError(
            f"a log-scaled range needs low > 0, found low={low:g}; use a small positive "
            "low such as 1e-6, or set log = false"
        )


class SearchSpace(BaseModel):
    """Tuned parameters and fixed settings; both are passed to the trainer as one config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    params: dict[str, Param] = Field(default_factory=dict)
    fixed: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> SearchSpace:
        both = set(self.params) & set(self.fixed)
        if both:
            raise ValueError(f"{sorted(both)} are both tuned and fixed; keep one")
        return self

    @classmethod
    def of(cls, mapping: Mapping[str, Any] | None = None, /, **entries: Any) -> SearchSpace:
        """Builds a space from ``name -> Float/Int/Categorical, spec dict, or constant``.

        A dict with a ``type`` key (as in a TOML table) is a parameter; anything else is a fixed
        setting. Raises `ConfigError` naming the parameter and the fix.
        """
        merged = {**(mapping or {}), **entries}
        params: dict[str, Any] = {}
        fixed: dict[str, Any] = {}
        for name, spec in merged.items():
            if isinstance(spec, _Param):
                params[name] = spec
            elif isinstance(spec, Mapping):
                params[name] = _parse_param(name, spec)
            else:
                fixed[name] = spec
        try:
            return cls(params=params, fixed=fixed)
        except ValidationError as e:
            raise ConfigError(f"Invalid search space: {_first_error(e)}") from None

    def merged(self, other: SearchSpace) -> SearchSpace:
        """This space with `other`'s entries added or replacing same-named ones."""
        params = {k: v for k, v in self.params.items() if k not in other.fixed}
        fixed = {k: v for k, v in self.fixed.items() if k not in other.params}
        return SearchSpace(params={**params, **other.params}, fixed={**fixed, **other.fixed})

    def checked(self, config: Mapping[str, Any], what: str) -> dict[str, Any]:
        """The tuned values of a whole or partial `config` snapped into the space (fixed
        settings it repeats are left out); a ConfigError that names `what` and the fix."""
        unknown = sorted(set(config) - set(self.params) - set(self.fixed))
        if unknown:
            from tunepilot.errors import did_you_mean

            raise ConfigError(f"{what}: unknown parameters {unknown}; the space has "
                              f"{sorted(self.params)}.{did_you_mean(unknown[0], self.params)}")
        try:
            return {k: self.params[k].snap(v) for k, v in config.items() if k in self.params}
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{what}: {e}. The space:\n{self.describe()}") from None

    def defaults(self) -> dict[str, Any]:
        """The parameters' declared defaults (`default = ...`), snapped into the space: the
        config of trial 0 of a new study (what it leaves out, the sampler draws)."""
        return {name: p.snap(p.default) for name, p in self.params.items()
                if p.default is not None}

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        return {name: p.distribution() for name, p in self.params.items()}

    def sample(self, trial: optuna.Trial) -> dict[str, Any]:
        """Asks `trial` for every parameter and returns the full config (params + fixed)."""
        config = {name: p.suggest(trial, name) for name, p in self.params.items()}
        return {**self.fixed, **config}

    def snap(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Validates and snaps a proposed config into the space.

        Raises:
            ValueError: a parameter is missing, unknown, or not a valid value; the message lists
                every problem so a model can fix them all in one retry.
        """
        problems = []
        out: dict[str, Any] = {}
        for name, p in self.params.items():
            if name not in values:
                problems.append(f"'{name}' is missing ({p.describe()})")
                continue
            try:
                out[name] = p.snap(values[name])
            except (TypeError, ValueError) as e:
                problems.append(f"'{name}': {e}")
        unknown = sorted(set(values) - set(self.params) - set(self.fixed))
        if unknown:
            problems.append(f"unknown parameters {unknown}; the space has {sorted(self.params)}")
        if problems:
            raise ValueError("; ".join(problems))
        return out

    @classmethod
    def from_distributions(cls, dists: Mapping[str, Any]) -> SearchSpace:
        """The space of Optuna distributions (e.g. of a study tunepilot did not make)."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution

        params: dict[str, Any] = {}
        for name, d in dists.items():
            if isinstance(d, CategoricalDistribution):
                params[name] = Categorical(list(d.choices))
            elif isinstance(d, FloatDistribution):
                params[name] = Float(d.low, d.high, log=d.log, step=d.step)
            else:
                params[name] = Int(d.low, d.high, log=d.log, step=d.step)
        return cls.of(**params)

    def describe(self) -> str:
        lines = [f"  {name}: {p.describe()}" + (f", default {p.default!r}" if p.default is not None
                                               else "") for name, p in self.params.items()]
        lines += [f"  {name} = {v!r} (fixed)" for name, v in self.fixed.items()]
        return "\n".join(lines)


def _parse_param(name: str, spec: Mapping[str, Any]) -> Float | Int | Categorical:
    kinds: dict[str, type[Float | Int | Categorical]] = {
        "float": Float,
        "int": Int,
        "categorical": Categorical,
    }
    kind = spec.get("type")
    if kind not in kinds:
        from tunepilot.errors import did_you_mean

        hint = did_you_mean(str(kind), kinds) if kind is not None else ""
        raise ConfigError(
            f"Search space parameter '{name}' has type {kind!r}; expected one of "
            f"{sorted(kinds)}.{hint} Example: {name} = {{ type = \"float\", low = 0.0, "
            "high = 0.5 }."
        )
    try:
        return kinds[kind].model_validate(dict(spec))
    except ValidationError as e:
        raise ConfigError(
            f"Search space parameter '{name}' is invalid: {_first_error(e)}"
        ) from None


def _first_error(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        where = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown key '{err['loc'][-1]}'"
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)
