""":class:`GRPOConfig`: the hyper-parameters of :class:`musaenv.rl.grpo.GRPOTrainer`, one docstring per field."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from musaenv.errors import ConfigError
from musaenv.rl.mirrorpop import DEFAULT_DELTA, RULES

__all__ = ["GRPOConfig"]


@dataclass(frozen=True)
class GRPOConfig:
    """Hyper-parameters of the reference GRPO trainer. Validated on construction; JSON-safe via :meth:`to_dict`."""

    learning_rate: float = 1e-6
    """AdamW step size. 1e-6 is the usual order for full fine-tuning of billion-parameter LMs with GRPO
    (DeepSeekMath, arXiv 2402.03300, used 1e-6); a tiny randomly initialised model needs far more (~1e-2)."""

    weight_decay: float = 0.0
    """AdamW weight decay."""

    max_grad_norm: float | None = 1.0
    """Clip the global gradient norm to this before each step; ``None`` disables clipping."""

    temperature: float = 1.0
    """Sampling temperature; log-probs are computed at the same temperature (they must describe what was sampled)."""

    top_p: float = 1.0
    """Nucleus sampling mass. Below 1 the sampler truncates but log-probs stay those of the full distribution."""

    max_new_tokens: int = 1024
    """Token budget per response."""

    max_prompt_tokens: int | None = None
    """Keep only the last this-many prompt tokens (the end holds the latest feedback); ``None`` keeps all."""

    generation_batch_size: int = 16
    """Sequences sampled per ``model.generate`` call."""

    eps_low: float = 0.2
    """Lower clip distance: ratios below ``1 - eps_low`` stop pushing a negative-advantage token down (PPO 0.2)."""

    eps_high: float = 0.28
    """Upper clip distance: ratios above ``1 + eps_high`` stop pushing a positive-advantage token up. DAPO's
    "clip-higher" (arXiv 2503.14476) uses 0.28 > eps_low so low-probability tokens can still grow (less entropy
    collapse)."""

    beta: float = 0.0
    """Weight of the k3 KL penalty to a frozen reference model. 0 (DAPO) skips the reference entirely;
    DeepSeekMath's GRPO used 0.04."""

    mirrorpop_delta: float | None = DEFAULT_DELTA
    """MirrorPop threshold on a response's mean |log rho| (see :mod:`musaenv.rl.mirrorpop` for the default's
    argument); ``None`` disables the filter."""

    mirrorpop_rule: str = "mirrorpop"
    """``"mirrorpop"`` (mean of |log rho|, MusaCoder) or ``"signed"`` (|mean of log rho|, for ablations)."""

    ppo_epochs: int = 1
    """Passes over each batch. With 1 pass and one mini-batch the update is fully on-policy (ratio = 1)."""

    mini_batch_size: int | None = None
    """Sequences per optimizer step; ``None`` = the whole batch (one step per epoch). Smaller values take several
    steps per batch, making later steps off-policy: that is where clipping and MirrorPop act."""

    micro_batch_size: int = 4
    """Sequences per forward/backward pass; gradients are accumulated, so this trades memory for speed only."""

    drop_zero_advantage: bool = True
    """Skip sequences whose advantage is 0: they carry no policy-gradient signal (with ``beta > 0`` their KL term is
    lost too) and would only dilute the token-level mean."""

    use_chat_template: bool = True
    """Wrap prompts in the tokenizer's chat template (with the generation prompt) when it has one."""

    system_prompt: str | None = None
    """Optional system message put before each prompt."""

    seed: int = 0
    """Seeds sampling and mini-batch shuffling (the global torch RNG is left untouched)."""

    def __post_init__(self) -> None:
        checks: list[tuple[bool, str, object]] = [
            (self.learning_rate > 0 and math.isfinite(self.learning_rate), "learning_rate > 0", self.learning_rate),
            (self.weight_decay >= 0, "weight_decay >= 0", self.weight_decay),
            (self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm > 0 or None", self.max_grad_norm),
            (self.temperature > 0 and math.isfinite(self.temperature), "temperature > 0", self.temperature),
            (0 < self.top_p <= 1, "top_p in (0, 1]", self.top_p),
            (self.max_new_tokens >= 1, "max_new_tokens >= 1", self.max_new_tokens),
            (
                self.max_prompt_tokens is None or self.max_prompt_tokens >= 1,
                "max_prompt_tokens >= 1",
                self.max_prompt_tokens,
            ),
            (self.generation_batch_size >= 1, "generation_batch_size >= 1", self.generation_batch_size),
            (0 <= self.eps_low < 1, "eps_low in [0, 1)", self.eps_low),
            (self.eps_high >= 0, "eps_high >= 0", self.eps_high),
            (self.beta >= 0, "beta >= 0", self.beta),
            (self.mirrorpop_delta is None or self.mirrorpop_delta >= 0, "mirrorpop_delta >= 0", self.mirrorpop_delta),
            (self.mirrorpop_rule in RULES, f"mirrorpop_rule in {RULES}", self.mirrorpop_rule),
            (self.ppo_epochs >= 1, "ppo_epochs >= 1", self.ppo_epochs),
            (self.mini_batch_size is None or self.mini_batch_size >= 1, "mini_batch_size >= 1", self.mini_batch_size),
            (self.micro_batch_size >= 1, "micro_batch_size >= 1", self.micro_batch_size),
        ]
        for ok, what, found in checks:
            if not ok:
                raise ConfigError(f"GRPOConfig: expected {what}, found {found!r}. Fix the value and retry.")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GRPOConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise :class:`~musaenv.errors.ConfigError`."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"GRPOConfig: unknown keys {unknown}. Known: {sorted(known)}.")
        return cls(**d)
