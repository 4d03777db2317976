"""Registry, parameter validation, and the interface contract every shaper must keep."""

from __future__ import annotations

import math

import pytest

from musaenv.config import RewardConfig
from musaenv.errors import ConfigError
from musaenv.rewards import (
    RewardShaper,
    available_shapers,
    base,
    make_shaper,
    register_shaper,
    shaper_from_config,
    shaper_kwargs,
)
from musaenv.types import EvalResult, Stage

ALL = ["best", "delta", "kernelgym", "kernrl", "kevin", "last", "per_turn", "primeecho", "tcpo"]
CAUSAL = ["delta", "kernelgym", "kernrl", "per_turn"]
EPISODES: list[list[float | None]] = [
    [1.4],
    [-1.0],
    [-1.0, -0.2, 1.4],
    [-0.2, 1.0],
    [1.4, -0.2, 1.0],
    [None, -1.0, 2.0],
    [-1.0, None, -0.5],
]


def test_available_shapers() -> None:
    assert available_shapers() == ALL


def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(ConfigError, match="primeecho") as err:
        make_shaper("prime_echo")
    assert "tcpo" in str(err.value)


def test_unknown_kwarg_lists_accepted_kwargs() -> None:
    with pytest.raises(ConfigError, match="alpha") as err:
        make_shaper("primeecho", beta=0.5)
    assert "bonus_turn1" in str(err.value) and "beta" in str(err.value)
    with pytest.raises(ConfigError, match="none"):
        make_shaper("best", alpha=0.0)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("primeecho", {"alpha": 1.5}),
        ("primeecho", {"alpha": -0.1}),
        ("primeecho", {"alpha": "0.5"}),
        ("primeecho", {"alpha": True}),
        ("primeecho", {"bonus_turn1": 0.1, "bonus_turn2": 0.1}),  # B1 > B2 required
        ("primeecho", {"bonus_turn1": 0.1, "bonus_turn2": 0.2}),
        ("primeecho", {"bonus_turn2": 0.0}),  # B2 > 0 required
        ("primeecho", {"success_threshold": math.inf}),
        ("kevin", {"gamma": -0.1}),
        ("kevin", {"gamma": 1.1}),
        ("kernrl", {"speedup_weight": -1.0}),
        ("tcpo", {"preserve_weight": -0.1}),
        ("tcpo", {"success_threshold": 5.0}),  # outside [-1, 2]
    ],
)
def test_bad_parameter_values_raise(name: str, kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        make_shaper(name, **kwargs)


def test_params_round_trip_through_make_shaper() -> None:
    for name in ALL:
        shaper = make_shaper(name)
        assert shaper.name == name
        assert set(shaper.params()) == set(shaper_kwargs(name))
        assert make_shaper(name, **shaper.params()).params() == shaper.params()


def test_shaper_from_config() -> None:
    prime = shaper_from_config(RewardConfig())
    assert prime.name == "primeecho" and prime.params()["alpha"] == 0.75
    kevin = shaper_from_config(RewardConfig(shaper="kevin", speedup_weight=1.0, shaper_kwargs={"gamma": 0.5}))
    assert kevin.params() == {"gamma": 0.5, "speedup_weight": 1.0, "speedup_cap": 2.0}
    # lambda 1: score 1.5 -> v = 1.5; x = 0.3 + 1.5 = 1.8
    assert kevin.episode_rewards([1.5]) == pytest.approx([1.8])
    with pytest.raises(ConfigError, match="speedup_weight"):
        shaper_from_config(RewardConfig(shaper="kevin", shaper_kwargs={"speedup_weight": 0.3}))


def test_flags() -> None:
    causal = {n for n in ALL if make_shaper(n).causal}
    assert causal == set(CAUSAL)
    assert {n for n in ALL if make_shaper(n).needs_group} == {"tcpo"}


@pytest.mark.parametrize("name", CAUSAL)
@pytest.mark.parametrize("episode", EPISODES)
def test_causal_shapers_do_not_look_ahead(name: str, episode: list[float | None]) -> None:
    # What an env pays at step k (rewards of the prefix) must be what the full episode credits to turn k.
    shaper = make_shaper(name)
    full = shaper.episode_rewards(episode)
    for k in range(len(episode)):
        assert shaper.episode_rewards(episode[: k + 1]) == full[: k + 1]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("episode", EPISODES)
def test_every_shaper_pays_online(name: str, episode: list[float | None]) -> None:
    # After every step, what was paid sums to the return of the turns played: right whoever ends the episode.
    shaper = make_shaper(name)
    assert shaper.online
    paid = [shaper.step_reward(episode[: k + 1]) for k in range(len(episode))]
    assert paid == shaper.paid_rewards(episode)
    for t in range(1, len(episode) + 1):
        assert math.fsum(paid[:t]) == pytest.approx(shaper.episode_return(episode[:t]), abs=1e-12)
    if shaper.causal:  # a causal shaper's payment is its credit
        assert paid == pytest.approx(shaper.episode_rewards(episode))


def test_primeecho_pays_r_t_minus_r_t_minus_1() -> None:
    prime = make_shaper("primeecho")
    # R_1 = -1; R_2 = 0.75(-1) + 0.25(1.0) + B2 = -0.4; R_3 = -0.75 + 0.25(1.4) + 0.1 = -0.3.
    assert prime.paid_rewards([-1.0, 1.0]) == pytest.approx([-1.0, 0.6])
    assert prime.paid_rewards([-1.0, 1.0, 1.4]) == pytest.approx([-1.0, 0.6, 0.1])
    assert prime.paid_rewards([1.4]) == pytest.approx([1.6])  # 1.4 + B1
    assert prime.episode_rewards([-1.0, 1.0]) == pytest.approx([-0.4, 0.0])  # the credit stays on turn 1


@pytest.mark.parametrize("name", ALL)
def test_failed_episode_cut_early_never_out_earns_one_repaired_at_the_same_length(name: str) -> None:
    shaper = make_shaper(name)
    for t in (1, 2, 3):
        failed = [-1.0] * t
        for fix in (1.0, 1.4, 2.0):
            assert shaper.episode_return(failed) <= shaper.episode_return([-1.0] * (t - 1) + [fix])
    if name in ("primeecho", "best", "delta", "last"):  # these return -1 for any all-failed prefix: the least
        low = min(shaper.episode_return(e) for e in EPISODES)
        for t in (1, 2, 3):
            assert shaper.episode_return([-1.0] * t) == pytest.approx(-1.0)
            assert shaper.episode_return([-1.0] * t) <= low + 1e-12


def test_a_shaper_that_is_not_online_pays_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))

    @register_shaper
    class WholeEpisodes(RewardShaper):
        name = "test_whole"
        online = False

        def _shape(self, scores: list[float], results: list[EvalResult | None] | None) -> list[float]:
            return [sum(scores)] + [0.0] * (len(scores) - 1)

    shaper = make_shaper("test_whole")
    assert shaper.paid_rewards([1.0, 2.0]) == [0.0, 3.0]
    assert shaper.paid_rewards([1.0, 2.0], done=False) == [0.0, 0.0]  # cut from outside: nothing paid


@pytest.mark.parametrize("name", ALL)
def test_masked_turns_get_zero_reward_and_weight(name: str) -> None:
    shaper = make_shaper(name)
    episode = [-1.0, None, 1.4, None]
    rewards = shaper.episode_rewards(episode)
    weights = shaper.loss_weights(episode)
    assert rewards[1] == 0.0 and rewards[3] == 0.0
    assert weights[1] == 0.0 and weights[3] == 0.0
    # an infra error is not a failure: the same rewards as if the masked turns never happened
    assert [rewards[0], rewards[2]] == pytest.approx(shaper.episode_rewards([-1.0, 1.4]))


@pytest.mark.parametrize("name", ALL)
def test_bad_inputs_raise(name: str) -> None:
    shaper = make_shaper(name)
    with pytest.raises(ConfigError):
        shaper.episode_rewards([float("nan")])
    with pytest.raises(ConfigError):
        shaper.episode_rewards([1.0, 1.0], [EvalResult(stage=Stage.CORRECT)])
    with pytest.raises(ConfigError):
        shaper.step_reward([], done=True)


def test_custom_shaper_can_register(monkeypatch: pytest.MonkeyPatch) -> None:
    # Register into a copy of the registry so other tests still see the built-in set only.
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))

    @register_shaper
    class Doubled(RewardShaper):
        name = "test_doubled"
        causal = True

        def _shape(self, scores: list[float], results: list[EvalResult | None] | None) -> list[float]:
            return [2.0 * s for s in scores]

    assert "test_doubled" in available_shapers()
    assert make_shaper("test_doubled").episode_rewards([1.0, None, -1.0]) == [2.0, 0.0, -2.0]
    assert make_shaper("test_doubled").causal
    with pytest.raises(ConfigError, match="already registered"):

        @register_shaper
        class Clash(Doubled):
            name = "primeecho"
