"""The reference GRPO trainer with a tiny local LM: sampling, log-probs, loss weights, MirrorPop, KL, training."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
import torch

pytest.importorskip("transformers")

from rl_doubles import CharCountEnv

from musaenv.errors import ConfigError
from musaenv.rl.grpo import GRPOConfig, GRPOTrainer
from musaenv.rl.protocol import Episode, EpisodeBatch, EpisodeGroup, Generation, Optimizer, Policy, Prompt, Turn
from musaenv.rl.rollout import collect_groups
from musaenv.rl.tiny_lm import build_tiny_lm, build_tiny_tokenizer


def _trainer(vocab: str | None = "abcd", seed: int = 0, **cfg: object) -> GRPOTrainer:
    model, tok = build_tiny_lm(vocab, seed=seed)
    base: dict[str, object] = {"learning_rate": 1e-2, "max_new_tokens": 6, "micro_batch_size": 3}
    base.update(cfg)
    return GRPOTrainer(model, tok, GRPOConfig(**base))  # type: ignore[arg-type]


def _params(t: GRPOTrainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in t.model.parameters()]


def _unchanged(before: list[torch.Tensor], t: GRPOTrainer) -> bool:
    return all(torch.equal(a, b) for a, b in zip(before, t.model.parameters()))


def _batch(
    prompt: str, gens: Sequence[Generation], advantages: Sequence[float], weights: Sequence[float] = (1.0,)
) -> EpisodeBatch:
    episodes = []
    for g in gens:
        turns = tuple(
            Turn(prompt, g.text, reward=0.0, loss_weight=w, token_ids=g.token_ids, logprobs=g.logprobs) for w in weights
        )
        episodes.append(Episode("toy", 0, turns, 0.0))
    return EpisodeBatch((EpisodeGroup("toy", tuple(episodes), tuple(advantages)),))


def test_tiny_tokenizer_is_character_level_and_round_trips() -> None:
    tok = build_tiny_tokenizer()
    text = "def f(x):\n\treturn x + 1  # ok"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text) and tok.decode(ids) == text
    small = build_tiny_tokenizer("ab")
    assert small.convert_ids_to_tokens(small("abz", add_special_tokens=False)["input_ids"]) == ["a", "b", "<unk>"]
    assert small.decode([small.eos_token_id], skip_special_tokens=True) == ""


def test_trainer_is_a_policy_and_an_optimizer() -> None:
    t = _trainer()
    assert isinstance(t, Policy) and isinstance(t, Optimizer)


def test_generate_returns_tokens_with_their_sampling_logprobs() -> None:
    t = _trainer(max_new_tokens=5)
    prompts: list[Prompt] = ["ab", [{"role": "user", "content": "abc"}]]
    out = t.generate(prompts, num_samples=3)
    assert [len(row) for row in out] == [3, 3]
    for prompt, row in zip(prompts, out):
        for g in row:
            assert g.token_ids is not None and g.logprobs is not None
            assert 1 <= len(g.token_ids) <= 5 and len(g.logprobs) == len(g.token_ids)
            assert all(lp <= 0.0 for lp in g.logprobs)
            assert (g.finish_reason == "stop") == (g.token_ids[-1] == t.tokenizer.eos_token_id)
            assert g.text == t.tokenizer.decode(list(g.token_ids), skip_special_tokens=True)
            # Recomputed under the same (unchanged) model: the importance ratio is exactly 1 before any update.
            again = t.response_logprobs([prompt], [g.token_ids])[0]
            assert again == pytest.approx(list(g.logprobs), abs=1e-5)


def test_logprobs_do_not_depend_on_batch_padding() -> None:
    t = _trainer()
    prompts = ["a", "abcdabcdabcd"]
    responses = [[4, 5, 6, 7, 4, 5], [6]]
    batched = t.response_logprobs(prompts, responses)
    alone = [t.response_logprobs([p], [r])[0] for p, r in zip(prompts, responses)]
    for b, a in zip(batched, alone):
        assert b == pytest.approx(a, abs=1e-5)


def test_sampling_is_seeded_and_leaves_the_global_rng_alone() -> None:
    state = torch.get_rng_state()
    a = _trainer(seed=3).generate(["abc"], num_samples=4)
    b = _trainer(seed=3).generate(["abc"], num_samples=4)
    assert [g.token_ids for g in a[0]] == [g.token_ids for g in b[0]]
    assert torch.equal(torch.get_rng_state(), state)


def test_only_positive_weight_turns_with_signal_are_trained() -> None:
    t = _trainer()
    gens = t.generate(["ab"], num_samples=2)[0]
    # PrimeEcho weights: the first turn of each episode counts, the second does not.
    samples = t.samples_from_batch(_batch("ab", gens, [1.0, -1.0], weights=(1.0, 0.0)))
    assert len(samples) == 2 and all(s.weight == 1.0 for s in samples)
    assert t.samples_from_batch(_batch("ab", gens, [0.0, 0.0])) == []
    before = _params(t)
    metrics = t.update(_batch("ab", gens, [1.0, -1.0], weights=(0.0,)))
    assert metrics["n_sequences"] == 0.0 and metrics["n_optimizer_steps"] == 0.0
    assert _unchanged(before, t)


def test_first_step_is_on_policy_and_its_loss_is_the_token_mean() -> None:
    t = _trainer(max_new_tokens=8)
    gens = t.generate(["ab"], num_samples=2)[0]
    adv = [1.0, -0.5]
    before = _params(t)
    m = t.update(_batch("ab", gens, adv))
    lengths = [len(g.token_ids or ()) for g in gens]
    # ratio = 1 on every token, so pg = -A per token; the token-level mean weights each sequence by its length.
    assert m["ratio"] == pytest.approx(1.0, abs=1e-5)
    assert m["pg_loss"] == pytest.approx(-(adv[0] * lengths[0] + adv[1] * lengths[1]) / sum(lengths), abs=1e-5)
    assert m["n_tokens"] == sum(lengths) and m["mirrorpop/dropped_fraction"] == 0.0
    assert m["n_optimizer_steps"] == 1.0 and not _unchanged(before, t)


def test_mirrorpop_drops_stale_samples_before_the_loss() -> None:
    t = _trainer()
    gens = t.generate(["ab"], num_samples=2)[0]
    # Pretend the sampler's log-probs were 0.5 nats off on every token: mean |log rho| = 0.5 > delta = 0.1.
    stale = [Generation(g.text, g.token_ids, tuple(lp - 0.5 for lp in g.logprobs or ())) for g in gens]
    before = _params(t)
    m = t.update(_batch("ab", stale, [1.0, -1.0]))
    assert m["mirrorpop/dropped_fraction"] == 1.0 and m["n_optimizer_steps"] == 0.0 and math.isnan(m["loss"])
    assert _unchanged(before, t)
    unfiltered = _trainer(mirrorpop_delta=None)
    m2 = unfiltered.update(_batch("ab", [Generation(g.text, g.token_ids, g.logprobs) for g in stale], [1.0, -1.0]))
    assert m2["mirrorpop/dropped_fraction"] == 0.0 and m2["n_optimizer_steps"] == 1.0
    assert m2["ratio"] == pytest.approx(math.exp(0.5), rel=1e-4)


def test_kl_metric_is_the_token_mean_of_k3_against_the_reference() -> None:
    ref, _ = build_tiny_lm("abcd", seed=1)
    model, tok = build_tiny_lm("abcd", seed=0)
    t = GRPOTrainer(model, tok, GRPOConfig(learning_rate=1e-2, max_new_tokens=6, beta=0.5), ref_model=ref)
    gens = t.generate(["ab"], num_samples=3)[0]
    ref_scorer = GRPOTrainer(ref, tok, GRPOConfig(max_new_tokens=6))
    k3s = []
    for g in gens:
        ref_lp = ref_scorer.response_logprobs(["ab"], [g.token_ids or ()])[0]
        k3s += [math.exp(r - n) - (r - n) - 1 for r, n in zip(ref_lp, g.logprobs or ())]
    m = t.update(_batch("ab", gens, [1.0, 0.5, -1.5]))
    assert m["kl"] == pytest.approx(sum(k3s) / len(k3s), rel=1e-4)
    assert m["kl"] > 0.0


def test_config_is_validated_and_round_trips() -> None:
    cfg = GRPOConfig(eps_low=0.1, eps_high=0.3, mini_batch_size=4)
    assert GRPOConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="eps_low"):
        GRPOConfig(eps_low=1.5)
    with pytest.raises(ConfigError, match="mirrorpop_rule"):
        GRPOConfig(mirrorpop_rule="median")
    with pytest.raises(ConfigError, match="unknown keys"):
        GRPOConfig.from_dict({"lr": 1.0})


@pytest.mark.slow
def test_grpo_learns_a_toy_task_with_a_known_optimum() -> None:
    """Reward = fraction of 'a' among the first 8 characters (optimum 1.0); the tiny LM starts near 1/8 per char."""

    def advantages(returns: Sequence[float]) -> list[float]:
        mean = sum(returns) / len(returns)
        std = math.sqrt(sum((r - mean) ** 2 for r in returns) / max(len(returns) - 1, 1))
        return [(r - mean) / (std + 1e-6) for r in returns]

    model, tok = build_tiny_lm("abcd", seed=0, chat_template=False)
    cfg = GRPOConfig(
        learning_rate=3e-3, max_new_tokens=8, mini_batch_size=8, micro_batch_size=8, generation_batch_size=16, seed=0
    )
    trainer = GRPOTrainer(model, tok, cfg)
    env = CharCountEnv(target="a", length=8)
    curve = []
    for step in range(16):
        groups = collect_groups(env, trainer, ["t0", "t1"], group_size=8, seed=step, advantage_fn=advantages)
        batch = EpisodeBatch(tuple(groups))
        curve.append(batch.mean_return)
        trainer.update(batch)
    first, last = sum(curve[:4]) / 4, sum(curve[-4:]) / 4
    assert last > first + 0.3, curve
    assert last > 0.7, curve
