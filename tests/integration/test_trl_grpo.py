"""TRL's own GRPOTrainer drives KernelGen-v0 through ``environment_factory`` for one step on the CPU.

The model is musaenv's tiny LM; its generations are scripted with a logits processor (a random 0.1 M-parameter model
would never write a tool call), so one rollout submits the shipped l1_relu kernel and the other stays silent.
Everything else is TRL's: prompt rendering with the tool schema, generation, parsing the tool call, calling the
tool, appending its answer, the reward read from the environments, the loss and the optimizer step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ANCHOR = "assistant: "
SILENT = "I will not submit anything."
# A correct l1_relu kernel, short because the tiny LM writes it one character per token.
RELU = """import torch
from torch.utils.cpp_extension import load_inline
m = load_inline("relu", cpp_sources="torch::Tensor f(torch::Tensor x) { x = x.contiguous();"
    "auto y = torch::empty_like(x); auto p = x.data_ptr<float>(); auto q = y.data_ptr<float>();"
    "for (int64_t i = 0; i < x.numel(); ++i) q[i] = p[i] > 0 ? p[i] : 0; return y; }", functions=["f"])
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return m.f(x)
"""


class ScriptedReplies:
    """Logits processor forcing each row's reply: even rows call ``submit_kernel``, odd rows never do; after a tool
    message the reply is "Done." Stateless: the reply so far is read back from the row itself."""

    def __init__(self, tok: Any, code: str) -> None:
        self.tok, self.eos = tok, tok.eos_token_id
        self.prompts: list[str] = []  # each row's rendered prompt, as the model read it
        call = json.dumps({"name": "submit_kernel", "arguments": {"code": code}})
        scripts = [f"<tool_call>{call}</tool_call>", SILENT, "Done."]
        self.ids = [tok(s, add_special_tokens=False)["input_ids"] + [self.eos] for s in scripts]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        for b in range(input_ids.shape[0]):
            text = self.tok.decode(input_ids[b], skip_special_tokens=True)
            start = text.rindex(ANCHOR) + len(ANCHOR)
            if len(text) == start and text.count(ANCHOR) == 1:  # a first turn: the prompt alone
                self.prompts.append(text)
            ids = self.ids[2] if "\ntool: " in text[:start] else self.ids[b % 2]
            done = len(text) - start
            scores[b, :] = float("-inf")
            scores[b, ids[done] if done < len(ids) else self.eos] = 0.0
        return scores


@pytest.fixture
def one_thread() -> Any:
    """One torch thread: on a busy 2-core machine, two threads make token-by-token generation ~10x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_grpo_trainer_scores_a_correct_kernel_and_silence_once_each(tmp_path: Path, one_thread: Any) -> None:
    from datasets import Dataset
    from transformers import LogitsProcessorList
    from trl import GRPOConfig, GRPOTrainer

    from musaenv.config import EvalConfig, TimingConfig
    from musaenv.rl.adapters.trl import close_trl_environment, make_trl_environment
    from musaenv.rl.dataset import dataset_rows
    from musaenv.rl.tiny_lm import build_tiny_lm

    model, tok = build_tiny_lm(max_positions=6144)
    script = ScriptedReplies(tok, RELU)
    real_generate = model.generate

    def generate(*args: Any, **kwargs: Any) -> Any:  # the model's own generate, its choices forced by the script
        return real_generate(*args, logits_processor=LogitsProcessorList([script]), **kwargs)

    model.generate = generate
    fast = EvalConfig(timing=TimingConfig(repeats=3, warmup=1, max_time_s=0.5))
    env_cls = make_trl_environment(task=None, backend="cpu", max_turns=2, eval_config=fast)
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=2048, logging_steps=1, report_to="none", use_cpu=True,
                      save_strategy="no", max_tool_calling_iterations=2, beta=0.0)  # fmt: skip
    dataset = Dataset.from_list(dataset_rows(["l1_relu"], repeats=2, trainer="trl"))  # `musaenv dataset`'s rows
    try:
        trainer = GRPOTrainer(
            model=model, args=args, train_dataset=dataset, processing_class=tok, environment_factory=env_cls
        )  # fmt: skip; no reward_funcs: the env owns the reward
        trainer.train()
        envs = trainer._environment_pool[None]
        rewards = sorted(e.get_reward() for e in envs)
        submitted = [e for e in envs if e.last_info]
    finally:
        close_trl_environment(env_cls, getattr(trainer, "_environment_pool", {}).get(None, []))
    assert len(submitted) == 1 and submitted[0].last_info["eval"]["stage"] == "correct", [e.last_info for e in envs]
    correct = submitted[0].last_info["episode_return"]  # the PrimeEcho return of a first-turn success
    assert correct > 1.0 and rewards == pytest.approx([-1.0, correct])  # silence scores like the worst verdict
    # What the model read: the task prompt once, asking for the call the tool schema describes, not a fenced block.
    assert len(script.prompts) == 2, script.prompts
    for text in script.prompts:
        assert text.count("Reference program:") == 1 and text.count("Task l1_relu (level 1)") == 1
        assert "Call the tool `submit_kernel`" in text and "fenced python code block" not in text
        assert '"name": "submit_kernel"' in text or "submit_kernel" in text.split("Task l1_relu")[0]
    logged = trainer.state.log_history[0]
    assert logged[f"rewards/{env_cls.__name__}/mean"] == pytest.approx((correct - 1.0) / 2)
    assert logged["reward"] == pytest.approx((correct - 1.0) / 2)  # counted once: the env's get_reward only
