"""A reference GRPO optimizer for Hugging Face causal LMs, exposing both plugin protocols.

:class:`GRPOTrainer` is a :class:`~musaenv.rl.protocol.Policy` (``generate``: chat-template prompts, temperature
sampling, per-token log-probs of the samples under the sampling policy) and an
:class:`~musaenv.rl.protocol.Optimizer` (``update``: clipped-ratio GRPO with asymmetric clip bounds, optional k3 KL
to a frozen reference, per-turn loss weights, the MirrorPop filter, a token-level mean loss). It is a readable
reference for single-process training, not a scalable trainer: no vLLM, no sharding, logits materialised in full.

``transformers`` is never imported here; the model and tokenizer are passed in (see :mod:`musaenv.rl.tiny_lm`).
The model is kept in eval mode (no dropout), so before the first optimizer step of a batch the recomputed log-probs
equal the sampling ones and the ratio measures parameter change only.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from musaenv.rl.grpo_config import GRPOConfig
from musaenv.rl.grpo_loss import grpo_token_loss, token_logprobs
from musaenv.rl.mirrorpop import mirrorpop_filter
from musaenv.rl.protocol import EpisodeBatch, Generation, Prompt

__all__ = ["GRPOConfig", "GRPOTrainer", "Sample"]

logger = logging.getLogger(__name__)

_ZERO_ADV = 1e-8  # |A| below this carries no policy-gradient signal


class Sample:
    """One training sequence: a prompt's token ids, a response's token ids, and what the loss needs about it."""

    __slots__ = ("advantage", "logp_old", "logp_ref", "prompt_ids", "response_ids", "weight")

    def __init__(
        self,
        prompt_ids: list[int],
        response_ids: list[int],
        advantage: float,
        weight: float,
        logp_old: list[float] | None = None,
    ) -> None:
        self.prompt_ids = prompt_ids
        self.response_ids = response_ids
        self.advantage = advantage
        self.weight = weight
        self.logp_old = logp_old
        self.logp_ref: list[float] | None = None


def _chunks(xs: Sequence[Any], n: int) -> list[Sequence[Any]]:
    return [xs[i : i + n] for i in range(0, len(xs), n)]


class GRPOTrainer:
    """GRPO for a Hugging Face causal LM: sample with :meth:`generate`, train with :meth:`update`.

    Args:
        model: A ``transformers`` causal LM (``model(input_ids, attention_mask, position_ids).logits`` and
            ``model.generate``).
        tokenizer: Its tokenizer; it needs an EOS token, and a pad token or EOS to pad with.
        config: Hyper-parameters.
        ref_model: Frozen reference for the KL term; default a deep copy of ``model`` taken now (only when
            ``config.beta > 0``).
        optimizer: A torch optimizer over ``model``'s parameters; default AdamW with ``config``'s settings, created
            at the first :meth:`update`.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        config: GRPOConfig | None = None,
        *,
        ref_model: Any = None,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or GRPOConfig()
        self.model.eval()
        self.device = next(model.parameters()).device
        eos = tokenizer.eos_token_id
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos_ids = {eos} if eos is not None else set()
        eos_ids |= set(gen_eos) if isinstance(gen_eos, (list, tuple)) else ({gen_eos} if gen_eos is not None else set())
        if not eos_ids:
            raise ValueError("GRPOTrainer: the tokenizer has no eos_token_id; set one so responses can end.")
        self.eos_ids = frozenset(int(e) for e in eos_ids)
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids))
        self.ref_model = None
        if self.config.beta > 0.0:
            self.ref_model = ref_model if ref_model is not None else copy.deepcopy(model)
            self.ref_model.eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        self._optimizer = optimizer
        self._rng = np.random.default_rng(self.config.seed)
        self.steps = 0

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The torch optimizer, created on first use (a trainer used only to sample never needs one)."""
        if self._optimizer is None:
            params = [p for p in self.model.parameters() if p.requires_grad]
            if not params:
                raise ValueError("GRPOTrainer.update: the model has no trainable parameters (requires_grad=False).")
            self._optimizer = torch.optim.AdamW(
                params, lr=self.config.learning_rate, weight_decay=self.config.weight_decay
            )
        return self._optimizer

    # ----------------------------------------------------------------------------------------------- prompts
    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt: the chat template with a generation prompt when the tokenizer has one, else text.

        Deterministic, so :meth:`update` re-encodes a turn's prompt exactly as :meth:`generate` did.
        """
        cfg = self.config
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        if cfg.system_prompt is not None and not any(m.get("role") == "system" for m in messages):
            messages = [{"role": "system", "content": cfg.system_prompt}, *messages]
        if cfg.use_chat_template and getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        elif isinstance(prompt, str) and cfg.system_prompt is None:
            text = prompt
        else:
            text = "\n\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\n\nassistant: "
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if cfg.max_prompt_tokens is not None and len(ids) > cfg.max_prompt_tokens:
            ids = ids[-cfg.max_prompt_tokens :]  # keep the end: the latest feedback and the generation prompt
        return ids

    # ------------------------------------------------------------------------------------------- tensors
    def _pack(
        self, prompts: Sequence[list[int]], responses: Sequence[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """Left-pad prompts to a common length P, right-pad responses: every response starts at column P."""
        p_len = max(len(p) for p in prompts)
        r_len = max(len(r) for r in responses)
        ids = torch.full((len(prompts), p_len + r_len), self.pad_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, (p, r) in enumerate(zip(prompts, responses)):
            ids[i, p_len - len(p) : p_len + len(r)] = torch.tensor(p + r, dtype=torch.long)
            attn[i, p_len - len(p) : p_len + len(r)] = 1
        position_ids = (attn.cumsum(-1) - 1).clamp(min=0)
        resp_mask = attn[:, p_len:].float()
        dev = self.device
        return ids.to(dev), attn.to(dev), position_ids.to(dev), resp_mask.to(dev), p_len

    def _logprobs(
        self, model: Any, prompts: Sequence[list[int]], responses: Sequence[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(batch, R)`` log-probs of the responses (0 on padding) and the response mask."""
        ids, attn, pos, resp_mask, p_len = self._pack(prompts, responses)
        r_len = ids.shape[1] - p_len
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, p_len - 1 : p_len - 1 + r_len]
        lp = token_logprobs(logits, ids[:, p_len:], self.config.temperature)
        return lp * resp_mask, resp_mask

    @torch.no_grad()
    def _logprob_lists(
        self, model: Any, prompts: Sequence[list[int]], responses: Sequence[list[int]]
    ) -> list[list[float]]:
        out: list[list[float]] = []
        n = self.config.micro_batch_size
        for ps, rs in zip(_chunks(prompts, n), _chunks(responses, n)):
            lp, _ = self._logprobs(model, ps, rs)
            out += [lp[i, : len(r)].tolist() for i, r in enumerate(rs)]
        return out

    def response_logprobs(self, prompts: Sequence[Prompt], responses: Sequence[Sequence[int]]) -> list[list[float]]:
        """Per-token log-probs (at ``config.temperature``) of given response token ids under the current model.

        Args:
            prompts: One prompt per response, encoded as :meth:`generate` encodes them.
            responses: Response token ids.

        Returns:
            One list of floats per response, as long as the response.
        """
        encoded = [self.encode_prompt(p) for p in prompts]
        return self._logprob_lists(self.model, encoded, [list(r) for r in responses])

    # ---------------------------------------------------------------------------------------------- policy
    @torch.no_grad()
    def _sample(self, prompts: Sequence[list[int]], max_new_tokens: int) -> list[tuple[list[int], str]]:
        ids, attn, _, _, p_len = self._pack(prompts, [[] for _ in prompts])
        seed = int(self._rng.integers(2**62))
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            out = self.model.generate(
                input_ids=ids,
                attention_mask=attn,
                do_sample=True,
                temperature=self.config.temperature,
                top_p=self.config.top_p,
                top_k=0,  # transformers defaults to top_k=50; the log-probs are of the untruncated distribution
                max_new_tokens=max_new_tokens,
                pad_token_id=self.pad_id,
                eos_token_id=sorted(self.eos_ids),
            )
        results = []
        for row in out[:, p_len:].tolist():
            end = next((i for i, t in enumerate(row) if t in self.eos_ids), None)
            results.append((row, "length") if end is None else (row[: end + 1], "stop"))
        return results

    def generate(self, prompts: Sequence[Prompt], *, num_samples: int = 1, **kw: Any) -> list[list[Generation]]:
        """Sample ``num_samples`` responses per prompt (the :class:`~musaenv.rl.protocol.Policy` protocol).

        Args:
            prompts: Env observations (text) or chat messages.
            num_samples: Responses per prompt.
            **kw: ``max_new_tokens`` overrides the config; other keys are ignored (logged at debug level).

        Returns:
            Per prompt, ``num_samples`` :class:`Generation` s with token ids (EOS included when sampled) and their
            log-probs under the current (sampling) policy at ``config.temperature``.
        """
        max_new = int(kw.pop("max_new_tokens", self.config.max_new_tokens))
        if kw:
            logger.debug("GRPOTrainer.generate ignores %s", sorted(kw))
        encoded = [self.encode_prompt(p) for p in prompts]
        flat = [e for e in encoded for _ in range(num_samples)]
        gens: list[Generation] = []
        for chunk in _chunks(flat, self.config.generation_batch_size):
            sampled = self._sample(chunk, max_new)
            lps = self._logprob_lists(self.model, chunk, [r for r, _ in sampled])
            for (resp, finish), lp in zip(sampled, lps):
                text = self.tokenizer.decode(resp, skip_special_tokens=True)
                gens.append(Generation(text, tuple(resp), tuple(lp), finish))
        return [gens[i * num_samples : (i + 1) * num_samples] for i in range(len(prompts))]

    # ------------------------------------------------------------------------------------------- optimizer
    def samples_from_batch(self, batch: EpisodeBatch) -> list[Sample]:
        """The training sequences of a batch: every turn with positive loss weight (and, by default, nonzero
        advantage), carrying its episode's advantage and the turn's loss weight and sampling log-probs."""
        samples = []
        for episode, adv in batch.episodes():
            if self.config.drop_zero_advantage and abs(adv) < _ZERO_ADV:
                continue
            for turn in episode.turns:
                if turn.loss_weight <= 0.0:
                    continue
                if turn.token_ids is None:  # a response from another policy: re-tokenize, pi_old = pi_theta now
                    resp = list(self.tokenizer(turn.response, add_special_tokens=False)["input_ids"])
                    old = None
                else:
                    resp = list(turn.token_ids)
                    old = None if turn.logprobs is None else list(turn.logprobs)
                if resp:
                    samples.append(Sample(self.encode_prompt(turn.prompt), resp, adv, turn.loss_weight, old))
        return samples

    def update(self, batch: EpisodeBatch) -> dict[str, float]:
        """One GRPO update on ``batch`` (the :class:`~musaenv.rl.protocol.Optimizer` protocol).

        ``config.ppo_epochs`` passes over the sequences, each split into mini-batches of ``config.mini_batch_size``
        sequences, one optimizer step per mini-batch. Returns ``loss``, ``pg_loss``, ``kl``, ``clip_frac_low``,
        ``clip_frac_high`` and ``ratio`` as means over every counted token of every step (``nan`` when none was
        counted), ``mirrorpop/dropped_fraction`` over all sequences seen, the mean ``grad_norm``, ``n_tokens``,
        ``n_sequences``, ``n_optimizer_steps`` (steps actually taken) and the batch's ``mean_return``.
        """
        self.model.eval()
        samples = self.samples_from_batch(batch)
        metrics: dict[str, float] = {"n_sequences": float(len(samples)), "mean_return": batch.mean_return}
        if not samples:
            metrics["n_optimizer_steps"] = 0.0
            return metrics
        self._fill_reference_logprobs(samples)
        mb_size = self.config.mini_batch_size or len(samples)
        totals: dict[str, float] = {}
        norms: list[float] = []
        for _ in range(self.config.ppo_epochs):
            order = self._rng.permutation(len(samples))
            for idx in _chunks(order.tolist(), mb_size):
                sums, norm = self._step([samples[i] for i in idx])
                norms += [] if norm is None else [norm]
                for k, v in sums.items():
                    totals[k] = totals.get(k, 0.0) + v
        n_tok = totals.pop("n_tokens")
        n_kept, n_seq = totals.pop("n_kept"), totals.pop("n_seen")
        # Token-weighted over all steps: a step whose sequences were all filtered out adds no tokens, not zeros.
        metrics.update({k: (v / n_tok if n_tok > 0 else math.nan) for k, v in totals.items()})
        metrics["mirrorpop/dropped_fraction"] = 1.0 - n_kept / n_seq
        metrics["n_tokens"] = n_tok
        metrics["grad_norm"] = float(np.mean(norms)) if norms else math.nan
        metrics["n_optimizer_steps"] = float(len(norms))
        return metrics

    def _fill_reference_logprobs(self, samples: list[Sample]) -> None:
        missing = [s for s in samples if s.logp_old is None]
        if missing:
            lps = self._logprob_lists(self.model, [s.prompt_ids for s in missing], [s.response_ids for s in missing])
            for s, lp in zip(missing, lps):
                s.logp_old = lp
        if self.ref_model is not None:
            lps = self._logprob_lists(
                self.ref_model, [s.prompt_ids for s in samples], [s.response_ids for s in samples]
            )
            for s, lp in zip(samples, lps):
                s.logp_ref = lp

    def _padded(self, rows: Sequence[list[float] | None], width: int) -> torch.Tensor:
        out = torch.zeros((len(rows), width), dtype=torch.float32)
        for i, r in enumerate(rows):
            if r:
                out[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
        return out.to(self.device)

    def _step(self, samples: list[Sample]) -> tuple[dict[str, float], float | None]:
        """One optimizer step: sum the weighted per-token losses over micro-batches, then divide by token count.

        Returns sums of the per-token metrics over the counted tokens, the counts, and the gradient norm (``None``
        when no token was counted and no step was taken).
        """
        cfg = self.config
        self.optimizer.zero_grad(set_to_none=True)
        sums = dict.fromkeys(("loss", "pg_loss", "kl", "clip_frac_low", "clip_frac_high", "ratio", "n_tokens"), 0.0)
        sums["n_kept"], sums["n_seen"] = 0.0, float(len(samples))
        for micro in _chunks(samples, cfg.micro_batch_size):
            lp_new, mask = self._logprobs(self.model, [s.prompt_ids for s in micro], [s.response_ids for s in micro])
            width = mask.shape[1]
            lp_old = self._padded([s.logp_old for s in micro], width)
            lp_ref = self._padded([s.logp_ref for s in micro], width) if self.ref_model is not None else None
            adv = torch.tensor([s.advantage for s in micro], dtype=torch.float32, device=self.device)
            keep = torch.ones(len(micro), dtype=torch.bool, device=self.device)
            if cfg.mirrorpop_delta is not None:
                keep = mirrorpop_filter(lp_new, lp_old, mask, delta=cfg.mirrorpop_delta, rule=cfg.mirrorpop_rule).keep
            weights = torch.tensor([s.weight for s in micro], dtype=torch.float32, device=self.device)
            w_tok = mask * (weights * keep.float()).unsqueeze(-1)
            tl = grpo_token_loss(
                lp_new, lp_old, adv, eps_low=cfg.eps_low, eps_high=cfg.eps_high, logp_ref=lp_ref, beta=cfg.beta
            )
            (tl.loss * w_tok).sum().backward()
            with torch.no_grad():
                counted = (w_tok > 0).float()
                sums["n_tokens"] += float(counted.sum())
                sums["n_kept"] += float(keep.sum())
                sums["loss"] += float((tl.loss * w_tok).sum())
                sums["pg_loss"] += float((tl.pg * w_tok).sum())
                sums["kl"] += float((tl.kl * counted).sum()) if tl.kl is not None else 0.0
                sums["clip_frac_low"] += float((tl.clipped_low.float() * counted).sum())
                sums["clip_frac_high"] += float((tl.clipped_high.float() * counted).sum())
                sums["ratio"] += float((tl.ratio * counted).sum())
        return sums, self._apply_gradients(sums["n_tokens"])

    def _apply_gradients(self, n_tok: float) -> float | None:
        params = [p for p in self.model.parameters() if p.grad is not None]
        if n_tok <= 0 or not params:  # everything filtered out: no step, no optimizer state change
            self.optimizer.zero_grad(set_to_none=True)
            return None
        for p in params:
            p.grad.div_(n_tok)  # the token-level mean: sum over all counted tokens of the mini-batch / their number
        max_norm = self.config.max_grad_norm if self.config.max_grad_norm is not None else math.inf
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return norm
