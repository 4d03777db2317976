"""A tiny, randomly initialised causal LM and a character-level tokenizer, built locally (no downloads).

For tests, examples and smoke runs of the RL loop on a CPU: :func:`build_tiny_lm` returns a ``transformers``
``LlamaForCausalLM`` (2 layers, hidden size 64 by default: about 0.1 M parameters with the default vocabulary) and a
``PreTrainedTokenizerFast`` whose tokens are single characters plus four special tokens. ``transformers`` and
``tokenizers`` are imported when the function is called (install the ``llm`` extra).
"""

from __future__ import annotations

import string
from typing import Any

__all__ = ["DEFAULT_VOCAB", "SPECIAL_TOKENS", "TINY_CHAT_TEMPLATE", "TINY_RESPONSE_TEMPLATE", "build_tiny_lm",
           "build_tiny_tokenizer"]  # fmt: skip

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")
"""Special tokens, ids 0..3 in this order."""

DEFAULT_VOCAB: str = "".join(c for c in string.printable if c not in "\x0b\x0c")
"""Printable ASCII: letters, digits, punctuation, space, tab, newline, carriage return."""

TINY_CHAT_TEMPLATE = (
    '{% if tools %}system: Tools you can call, one per <tool_call>{"name": ..., "arguments": {...}}</tool_call>:'
    "{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}{{ '\\n' }}{% endif %}"
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] or '' }}"
    "{% for c in (m['tool_calls'] or []) if m['role'] == 'assistant' %}{% set f = c['function'] or c %}"
    '<tool_call>{"name": {{ f[\'name\'] | tojson }}, "arguments": '
    "{% if f['arguments'] is string %}{{ f['arguments'] }}{% else %}{{ f['arguments'] | tojson }}{% endif %}}"
    "</tool_call>{% endfor %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
"""A small Jinja chat template: "role: content" lines, then "assistant: ". It renders tools too (a system line
listing their JSON schemas) and an assistant's tool calls as ``<tool_call>{"name": ..., "arguments": {...}}
</tool_call>`` after its content, so tool-calling trainers (TRL's ``environment_factory``) accept it."""

TINY_RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "assistant: ",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<eos>\s*", "content": "text"},
    },
}
"""How ``tokenizer.parse_response`` (transformers >= 5.13) reads a reply in :data:`TINY_CHAT_TEMPLATE`'s format."""


def _unique_chars(vocab: str) -> list[str]:
    seen: dict[str, None] = {}
    for c in vocab:
        seen.setdefault(c, None)
    return list(seen)


def build_tiny_tokenizer(vocab: str | None = None, *, chat_template: bool = True) -> Any:
    """A character-level ``PreTrainedTokenizerFast``: one token per character of ``vocab``, unknown chars -> <unk>.

    Args:
        vocab: The characters (duplicates ignored); default :data:`DEFAULT_VOCAB`.
        chat_template: Attach :data:`TINY_CHAT_TEMPLATE`.

    Returns:
        The tokenizer; ``decode`` concatenates characters, ``<pad>``/``<eos>`` are its pad and EOS tokens.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in _unique_chars(DEFAULT_VOCAB if vocab is None else vocab) if c not in SPECIAL_TOKENS]
    if not chars:
        raise ValueError("build_tiny_tokenizer: expected a non-empty vocabulary string.")
    table = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *chars])}
    backend = Tokenizer(models.WordLevel(vocab=table, unk_token="<unk>"))
    # Every character is its own pre-token ([\s\S] also matches newlines); Fuse joins decoded pieces without spaces.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    if chat_template:
        tok.chat_template = TINY_CHAT_TEMPLATE
        tok.response_template = dict(TINY_RESPONSE_TEMPLATE)  # read by parse_response; ignored where unsupported
    return tok


def build_tiny_lm(
    vocab: str | None = None,
    seed: int = 0,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    max_positions: int = 512,
    chat_template: bool = True,
) -> tuple[Any, Any]:
    """Build a randomly initialised tiny Llama-style causal LM and its character tokenizer.

    Args:
        vocab: Characters of the tokenizer (default printable ASCII).
        seed: Seeds the weight initialisation (inside a forked RNG: the global torch RNG is left untouched).
        hidden_size: Model width.
        num_layers: Decoder layers.
        num_heads: Attention heads (must divide ``hidden_size``).
        max_positions: Longest sequence (prompt + response) the model accepts.
        chat_template: Give the tokenizer :data:`TINY_CHAT_TEMPLATE`.

    Returns:
        ``(model, tokenizer)``; the model is in eval mode on the CPU.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if hidden_size % num_heads:
        raise ValueError(f"build_tiny_lm: num_heads ({num_heads}) must divide hidden_size ({hidden_size}).")
    tok = build_tiny_tokenizer(vocab, chat_template=chat_template)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    return model, tok
