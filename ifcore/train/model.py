"""The policy: a small Qwen3 causal LM built from a config with a byte-level BPE tokenizer trained locally, or a
real checkpoint by path. Both end as a directory that `load_policy` reads with `AutoModelForCausalLM` /
`AutoTokenizer.from_pretrained`, so the CPU toy and a real Qwen3 on a GPU take one code path.

The chat template is Qwen3's, cut down: `<|im_start|>role\\ncontent<|im_end|>\\n` turns, and with
`enable_thinking=False` the generation prompt already holds an empty `<think>\\n\\n</think>\\n\\n` block
(RAIF's no-think mode, the same switch a real Qwen3 template reads).
"""
from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
EMPTY_THINK = f"{THINK_OPEN}\n\n{THINK_CLOSE}\n\n"

CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif -%}"
    "{%- endif -%}"
)


def train_tokenizer(texts, vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE on `texts` (any string survives: unseen characters fall back to bytes)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[PAD, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    # Think tags are single, non-special tokens as in Qwen3: decoding with skip_special_tokens keeps them,
    # so the format gate sees them.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in (THINK_OPEN, THINK_CLOSE)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=IM_END, pad_token=PAD, padding_side="left",
        chat_template=CHAT_TEMPLATE, model_max_length=1 << 16,
    )


def build_policy(tokenizer, *, hidden_size: int, layers: int, heads: int, kv_heads: int,
                 intermediate_size: int, max_positions: int, seed: int) -> Qwen3ForCausalLM:
    """A freshly initialised Qwen3 sized for the CPU (tied embeddings: the vocabulary is most of the model)."""
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=hidden_size // heads, max_position_embeddings=max_positions, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config)


def load_policy(path, device="cpu"):
    """(model, tokenizer) from a saved directory: the warm-started toy or any Hugging Face causal LM checkpoint.

    On CUDA the weights stay fp32 (the optimizer's master copy) and the forward passes run under bf16 autocast.
    """
    if not (Path(path) / "config.json").is_file():  # else from_pretrained would take it for a hub id
        raise FileNotFoundError(f"{path}: not a saved model directory (no config.json)")
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"  # generation appends to the right; real Qwen3 tokenizers default to right
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path).to(device=device, dtype=torch.float32)
    return model, tokenizer


def chat_prompt(tokenizer, instruction: str, think: bool = True) -> str:
    """The instruction as one user turn plus the assistant header (and an empty think block when think is off)."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": instruction}], tokenize=False, add_generation_prompt=True,
        enable_thinking=think,
    )
