"""The policy: a small Qwen3 causal LM built from a config with a byte-level BPE tokenizer trained locally, or a
real checkpoint (a registry name such as smollm2-135m, resolved by ifcore.infer.registry, or a path). Both end as
a directory that `load_policy` reads with `AutoModelForCausalLM` / `AutoTokenizer.from_pretrained`, so the CPU
toy, SmolLM2 and a real Qwen3 on a GPU take one code path.

The chat template is Qwen3's, cut down: `<|im_start|>role\\ncontent<|im_end|>\\n` turns, and with
`enable_thinking=False` the generation prompt already holds an empty `<think>\\n\\n</think>\\n\\n` block
(RAIF's no-think mode, the same switch a real Qwen3 template reads).

A template without that switch (SmolLM2's has no think tags at all) gets the same two modes from `chat_prompt`:
think=False appends the empty think block to its generation prompt, as Qwen3's template would; think=True leaves
the response free. Nothing asks such a model for a think block (SmolLM2-135M ignores a system prompt that does),
so its reward gate is "auto" (`think_gate`): a think block it writes is skipped, one it leaves open fails, and
a response without one is verified whole.
"""
from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (AutoModelForCausalLM, AutoTokenizer, DynamicCache, PreTrainedTokenizerFast, Qwen3Config,
                          Qwen3ForCausalLM)

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
EMPTY_THINK = f"{THINK_OPEN}\n\n{THINK_CLOSE}\n\n"
# The forward pass's KV-cache argument: `cache` from transformers 5.2x on (which warns at the old name),
# `past_key_values` before (the GPU extra's pins)
CACHE_ARG = "cache" if "cache" in inspect.signature(Qwen3ForCausalLM.forward).parameters else "past_key_values"

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


def has_think_switch(tokenizer) -> bool:
    """Whether the chat template reads `enable_thinking` (Qwen3's and the embedded policy's do, SmolLM2's not)."""
    return "enable_thinking" in (tokenizer.chat_template or "")


def load_lora_policy(path, device, r: int, alpha: float, targets: str, checkpoint=None, seed: int = 0):
    """(policy, tokenizer, reference) for LoRA (peft): the model at `path` with a checkpoint's adapters, or new ones
    initialised under `seed` (peft draws lora_A from torch's RNG; lora_B starts at 0, so the policy starts as the
    model); `targets` is "all-linear" or comma-separated module names. The reference is the same model with its
    adapters off: the frozen base without a second copy of the weights."""
    from peft import LoraConfig, PeftModel, get_peft_model

    model, tokenizer = load_policy(path, device)
    with warnings.catch_warnings():  # peft asks transformers a deprecated question; nothing for the user
        warnings.simplefilter("ignore", FutureWarning)
        if checkpoint is not None:
            policy = PeftModel.from_pretrained(model, checkpoint, is_trainable=True)
        else:
            torch.manual_seed(seed)
            names = targets if targets == "all-linear" else [t.strip() for t in targets.split(",") if t.strip()]
            policy = get_peft_model(model, LoraConfig(r=r, lora_alpha=alpha, target_modules=names))
    return policy, tokenizer, AdaptersOff(policy)


class AdaptersOff:
    """A peft model seen with its adapters disabled, for the calls the trainer makes of a reference policy: a
    forward pass, generate, generation_config. (Not a Module: eval() or requires_grad_ on it must not reach the
    policy's adapters.)"""

    def __init__(self, peft_model):
        self.peft_model = peft_model

    def __call__(self, **kwargs):
        with self.peft_model.disable_adapter():
            return self.peft_model(**kwargs)

    def generate(self, **kwargs):
        with self.peft_model.disable_adapter():
            return self.peft_model.generate(**kwargs)

    @property
    def generation_config(self):
        return self.peft_model.generation_config


def chat_prompt(tokenizer, instruction: str, think: bool = True) -> str:
    """The instruction as one user turn plus the assistant header (and an empty think block when think is off:
    the template's own where it has the switch, else EMPTY_THINK appended)."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": instruction}], tokenize=False, add_generation_prompt=True,
        enable_thinking=think,
    )
    return text if think or has_think_switch(tokenizer) else text + EMPTY_THINK


def think_gate(tokenizer, think: bool) -> str:
    """The format gate's think mode (ifcore.rewards.format_gate) for responses to `chat_prompt(..., think)`:
    "required" (a closed think block) where the template has the switch, "auto" where it has none (a think block
    is allowed, not demanded), "none" with thinking off."""
    return "none" if not think else "required" if has_think_switch(tokenizer) else "auto"


def autocast(device, precision: str = "fp32"):
    """The forward passes' autocast: bf16 on CUDA always, on a CPU with precision "bf16" (fp32 weights and
    optimizer state stay the master copy); otherwise off (fp32)."""
    device = torch.device(device)
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda" or precision == "bf16")


def sample_next(logits, temperature: float = 1.0, top_p: float = 1.0):
    """One token per row of `logits` [B, V] by inverse-CDF sampling: one uniform per row from torch's generator
    against the cumulative distribution (transformers' sampler draws through torch.multinomial, which spends an
    exponential per vocabulary entry: 19 % of a CPU rollout's time). The same categorical distribution as
    transformers' temperature and top-p warpers: top-p keeps the most probable tokens up to and including the one
    whose cumulative probability reaches top_p."""
    probs = torch.softmax(logits.float() / temperature, -1)
    order = None
    if top_p < 1.0:
        probs, order = probs.sort(-1, descending=True)
        probs = probs * ((probs.cumsum(-1) - probs) < top_p)  # the first token is always kept
    cdf = probs.cumsum(-1)
    u = torch.rand(cdf.shape[0], 1, device=cdf.device) * cdf[:, -1:]
    # right=True: the first entry above u, so a token of zero mass is never drawn
    pick = torch.searchsorted(cdf, u, right=True).clamp(max=cdf.shape[-1] - 1)
    return (pick if order is None else order.gather(-1, pick)).squeeze(-1)


def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, device, autocast,
             sample: bool, temperature: float = 1.0, top_p: float = 1.0, batch: int = 0):
    """Rollouts with the KV cache, `batch` sequences at a time (0: all at once):
    (sequences, attention, n_prompt, response mask, texts, truncated).

    The decoding loop is written here rather than taken from transformers' generate: with its own sampler
    (`sample_next`), in chunks of 512, it drew 2,048 rollouts of 64 tokens from the embedded policy 1.8x faster than
    transformers' generate at once and 1.5x faster than it in chunks of 256 (one CPU thread); its greedy decoding
    is transformers' token for token. Position ids come from the attention mask, as in `response_logprobs`. A
    checkpoint's generation_config is read for its end ids only: its sampling settings (Qwen3 ships top_k=20 and
    temperature 0.6) never apply, `temperature` and `top_p` are the caller's."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    # Every end-of-turn id stops a response: the tokenizer's and the generation config's (Qwen3 lists two).
    eos = model.generation_config.eos_token_id
    eos = torch.tensor(sorted({tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos])} - {None}),
                       device=enc.input_ids.device)
    pad, size = tokenizer.pad_token_id, batch or len(prompts)
    chunks = []
    with torch.no_grad(), autocast:
        for i in range(0, len(prompts), size):
            ids, attention = enc.input_ids[i:i + size], enc.attention_mask[i:i + size]
            position, cache = (attention.cumsum(-1) - 1).clamp(min=0), {CACHE_ARG: DynamicCache()}
            out = model(input_ids=ids, attention_mask=attention, position_ids=position, use_cache=True,
                        logits_to_keep=1, **cache)
            position = position[:, -1:]
            new = ids.new_full((ids.shape[0], max_new_tokens), pad)
            done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
            for t in range(max_new_tokens):
                logits = out.logits[:, -1]
                token = sample_next(logits, temperature, top_p) if sample else logits.argmax(-1)
                new[:, t] = token.masked_fill(done, pad)  # a finished response is padded
                done |= torch.isin(token, eos)
                if bool(done.all()) or t + 1 == max_new_tokens:
                    new = new[:, :t + 1]
                    break
                attention = torch.cat([attention, attention.new_ones(ids.shape[0], 1)], 1)
                position = position + 1
                out = model(input_ids=new[:, t:t + 1], attention_mask=attention, position_ids=position,
                            use_cache=True, **cache)
            chunks.append(torch.cat([ids, new], 1))
    width = max(c.shape[1] for c in chunks)  # a chunk whose responses all ended early is shorter
    seqs = torch.cat([torch.nn.functional.pad(c, (0, width - c.shape[1]), value=pad) for c in chunks])
    n_prompt = enc.input_ids.shape[1]
    gen = seqs[:, n_prompt:]
    is_eos = torch.isin(gen, eos)
    has_eos = is_eos.any(-1)
    # The response is every token up to and including the first EOS (stopping is an action too).
    length = torch.where(has_eos, is_eos.int().argmax(-1) + 1, gen.shape[1])
    mask = torch.arange(gen.shape[1], device=gen.device)[None] < length[:, None]
    attention = torch.cat([enc.attention_mask, torch.ones_like(gen)], dim=1)
    texts = [tokenizer.decode(ids[: n - int(e)], skip_special_tokens=True)
             for ids, n, e in zip(gen.tolist(), length.tolist(), has_eos.tolist())]
    truncated = (~has_eos).tolist()
    return seqs, attention, n_prompt, mask, texts, truncated
