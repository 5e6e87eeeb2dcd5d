"""One generation layer for every notebook and evaluation: `generate(model, prompts_or_chats, params)`.

`model` is a registry name or path (in-process transformers: `Local`) or an `Endpoint` (any OpenAI-compatible
server: vLLM, `transformers serve`, a hosted API). An input is a plain prompt (a string) or a chat (a list of
{role, content}); a plain prompt goes through the model's chat template as one user turn when the model has one,
so both backends see the same text. Completions are cached on disk, one JSONL file per model id in
`$IFCORE_CACHE/completions/`, keyed by (input, params): a half-done study resumes where it stopped and a re-run
renders without generating.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from ifcore.infer.registry import cache_dir, model_id, resolve
from ifcore.jsonl import JsonlError, iter_jsonl, read_jsonl
from ifcore.progress import bar as progress_bar


@dataclass
class GenParams:
    """What shapes a completion; every field is part of the cache key. Sampling starts from the model's own
    generation config (as `transformers serve` and vLLM do) with these fields on top."""
    max_new_tokens: int = 512
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int = 0
    chat_template_kwargs: dict = field(default_factory=dict)  # e.g. {"enable_thinking": False}


PRECISIONS = ("fp32", "bf16")


def bf16_native() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX), per /proc/cpuinfo's flags; elsewhere bf16
    runs, slower than fp32."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


class Local:
    """In-process transformers: left-padded batches (the caller sorts inputs by length), KV cache, stop at EOS.
    `precision` on a CPU: fp32 (the default), or bf16 (weights and compute in bf16, as on CUDA, where it is always
    bf16); bf16 completions are cached apart (`+bf16` in the model id)."""

    def __init__(self, name: str | os.PathLike, batch_size: int = 32, device: str | None = None,
                 precision: str = "fp32"):
        if precision not in PRECISIONS:
            raise ValueError(f"precision: one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.path, self.batch_size, self.device, self.precision = resolve(name), batch_size, device, precision
        self.model_id = model_id(name) + ("+bf16" if precision == "bf16" else "")

    def complete(self, inputs: list, params: GenParams, seeds: list[int]) -> list[tuple[str, int]]:
        """(text, generated tokens) per input; one batch, sampled with the first seed (torch has one generator)."""
        import torch

        model, tokenizer = _load(str(self.path), self.model_id, self.device, self.precision)
        texts = [render(tokenizer, x, params.chat_template_kwargs) for x in inputs]
        # A chat template writes its own special tokens; a raw prompt gets the tokenizer's (a BOS, for some).
        batch = tokenizer(texts, return_tensors="pt", padding=True,
                          add_special_tokens=not tokenizer.chat_template).to(model.device)
        config = copy.deepcopy(model.generation_config)
        eos = {tokenizer.eos_token_id} | set(_as_list(config.eos_token_id))
        config.update(max_new_tokens=params.max_new_tokens, do_sample=params.temperature > 0,
                      eos_token_id=sorted(e for e in eos if e is not None), pad_token_id=tokenizer.pad_token_id)
        if params.temperature > 0:
            config.update(temperature=params.temperature, top_p=params.top_p)
        torch.manual_seed(seeds[0])
        with torch.inference_mode():
            out = model.generate(**batch, generation_config=config)
        results = []
        for row in out[:, batch["input_ids"].shape[1]:].tolist():
            n = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))  # up to and with the first EOS
            results.append((tokenizer.decode(row[:n], skip_special_tokens=True), n))
        return results


@dataclass
class Endpoint:
    """An OpenAI-compatible server. `base_url`/`api_key` default to OPENAI_BASE_URL/OPENAI_API_KEY; the key is
    never printed. Plain prompts go to /chat/completions as one user turn (`chat=False`: /completions as they
    are). Transient errors (connection, timeout, 408, 409, 429, 5xx) are retried by the client with exponential
    backoff, `max_retries` times; at most `concurrency` requests are in flight."""
    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    model_id: str | None = None  # the cache key (default: endpoint:MODEL)
    chat: bool = True
    concurrency: int = 8
    timeout: float = 600.0
    max_retries: int = 5

    def __post_init__(self):
        self.model_id = self.model_id or f"endpoint:{self.model}"

    @property
    def batch_size(self) -> int:  # inputs handed over (and cached) together
        return 4 * self.concurrency

    def complete(self, inputs: list, params: GenParams, seeds: list[int]) -> list[tuple[str, int]]:
        from openai import OpenAI

        base_url = self.base_url or os.environ.get("OPENAI_BASE_URL")
        # A local server takes any key, but the client insists on one.
        api_key = self.api_key or os.environ.get("OPENAI_API_KEY") or ("EMPTY" if base_url else None)
        client = OpenAI(base_url=base_url, api_key=api_key, timeout=self.timeout, max_retries=self.max_retries)
        common = {"model": self.model, "max_tokens": params.max_new_tokens, "temperature": params.temperature,
                  "top_p": params.top_p}
        if params.chat_template_kwargs:  # read by vLLM and transformers serve
            common["extra_body"] = {"chat_template_kwargs": params.chat_template_kwargs}

        def one(item, seed):
            if isinstance(item, str) and not self.chat:
                r = client.completions.create(prompt=item, seed=seed, **common)
                text = r.choices[0].text
            else:
                messages = [{"role": "user", "content": item}] if isinstance(item, str) else item
                r = client.chat.completions.create(messages=messages, seed=seed, **common)
                text = r.choices[0].message.content or ""
            return text, r.usage.completion_tokens if r.usage else 0

        pool = ThreadPoolExecutor(self.concurrency)
        try:
            return list(pool.map(one, inputs, seeds))
        finally:  # on Ctrl-C or an error, return at once instead of waiting for the requests in flight
            pool.shutdown(wait=False, cancel_futures=True)


def render(tokenizer, item, chat_template_kwargs: dict) -> str:
    """The text a model continues: a chat (or, with a chat template, a plain prompt as one user turn) through
    the template with the assistant header; a plain prompt as it is for a model without a template."""
    if isinstance(item, str) and not tokenizer.chat_template:
        return item
    if not tokenizer.chat_template:
        raise ValueError(f"{tokenizer.name_or_path}: the model has no chat template; give plain prompts")
    messages = [{"role": "user", "content": item}] if isinstance(item, str) else item
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **chat_template_kwargs)


def too_long(model, inputs: list, params: GenParams, limit: int | None = None) -> tuple[list[bool], int | None]:
    """Which inputs, rendered through the model's chat template, have more than `limit` tokens (default: the
    model's positions less `max_new_tokens`, the room a generation needs), and the limit. For a registry name or
    path, a Local, or an Endpoint serving a local folder (`ifcore.infer.serve`); for any other backend (an endpoint
    whose tokenizer is not here: its server refuses what it cannot take) no input is flagged and the limit is None."""
    from transformers import AutoConfig, AutoTokenizer

    backend = Local(model) if isinstance(model, (str, os.PathLike)) else model
    path = backend.path if isinstance(backend, Local) else getattr(backend, "model", None)
    if not isinstance(path, (str, os.PathLike)) or not Path(path).is_dir():
        return [False] * len(inputs), None
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if limit is None:
        limit = AutoConfig.from_pretrained(str(path)).max_position_embeddings - params.max_new_tokens
    lengths = [len(tokenizer(render(tokenizer, x, params.chat_template_kwargs),
                             add_special_tokens=not tokenizer.chat_template).input_ids) for x in inputs]
    return [n > limit for n in lengths], limit


def generate(model, inputs: list, params: GenParams | None = None, *, cache: bool = True,
             progress: bool = True, with_tokens: bool = False) -> list:
    """Completions for `inputs` (prompts or chats), in order. `model`: a registry name or path, a `Local` or an
    `Endpoint`. Cached completions are reused; the rest are generated shortest first and cached batch by batch.
    `with_tokens`: (text, generated tokens) pairs (a count of max_new_tokens: the completion was cut there)."""

    backend = Local(model) if isinstance(model, (str, os.PathLike)) else model
    with progress_bar(desc=f"generate {backend.model_id}", total=len(inputs), enabled=progress) as bar:
        results = _generate(backend, inputs, params or GenParams(), cache, bar)
    return results if with_tokens else [text for text, _ in results]


def generate_jsonl(model, input_path, output_path, params: GenParams | None = None, *, cache: bool = True,
                   progress: bool = True, chunk: int = 256) -> int:
    """Rows {prompt} or {messages} in, the same rows with `response` added out, written chunk by chunk in input
    order (a killed run leaves whole rows; the rerun takes the finished ones from the cache). Returns the count."""

    rows = read_jsonl(input_path)
    inputs = []
    for n, row in enumerate(rows, 1):
        item = row.get("messages", row.get("prompt"))
        if not (isinstance(item, str) or isinstance(item, list) and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in item) and item):
            raise JsonlError(f"{input_path}: row {n}: needs `prompt` (a string) or `messages` (a non-empty list of "
                             "{role, content} strings)")
        inputs.append(item)
    backend = Local(model) if isinstance(model, (str, os.PathLike)) else model
    params = params or GenParams()
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    # backslashreplace: an endpoint's lone surrogate (a JSON "\ud800") is written as that escape and reads back the same
    with open(output_path, "w", encoding="utf-8", errors="backslashreplace") as out, \
            progress_bar(desc=f"generate {backend.model_id}", total=len(rows), enabled=progress) as bar:
        for start in range(0, len(rows), chunk):
            responses = _generate(backend, inputs[start:start + chunk], params, cache, bar)
            out.writelines(json.dumps({**row, "response": r}, ensure_ascii=False) + "\n"
                           for row, (r, _) in zip(rows[start:start + chunk], responses))
            out.flush()
    return len(rows)


def cache_path(model_id: str) -> Path:
    return cache_dir() / "completions" / (re.sub(r"[^A-Za-z0-9._@-]+", "_", model_id) + ".jsonl")


def _generate(backend, inputs: list, params: GenParams, cache: bool, bar) -> list[tuple[str, int]]:
    # A sampled input that repeats is drawn again (its occurrence is in the key and shifts its seed); a greedy
    # one is generated once.
    sampled = params.temperature > 0
    seen: dict[str, int] = {}
    keys, todo = [], {}
    for item in inputs:
        text = json.dumps(item, sort_keys=True, ensure_ascii=False)
        occurrence = seen[text] = seen.get(text, -1) + 1 if sampled else 0
        key = hashlib.sha256(json.dumps([text, asdict(params), occurrence], sort_keys=True).encode()).hexdigest()
        keys.append(key)
        todo[key] = (item, occurrence)
    path = cache_path(backend.model_id)
    done = {}
    if cache and path.is_file():
        data = path.read_bytes()
        # A line cut short by a kill is skipped (that completion is made again) and ended, so that the next
        # append starts on a line of its own.
        done = {row["key"]: (row["response"], row.get("tokens")) for _, row, problem
                in iter_jsonl(data.splitlines(), ("key", "response")) if row is not None and not problem}
        if data and not data.endswith(b"\n"):
            with open(path, "ab") as f:
                f.write(b"\n")
    bar.update(sum(k in done for k in keys))
    order = sorted((k for k in todo if k not in done), key=lambda k: len(json.dumps(todo[k][0])))
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(order), backend.batch_size):
        batch = order[start:start + backend.batch_size]
        results = backend.complete([todo[k][0] for k in batch], params, [params.seed + todo[k][1] for k in batch])
        done.update(zip(batch, results))
        if cache:
            with open(path, "a", encoding="utf-8", errors="backslashreplace") as f:
                f.writelines(json.dumps({"key": k, "response": text, "tokens": n}, ensure_ascii=False) + "\n"
                             for k, (text, n) in zip(batch, results))
        finished = set(batch)
        bar.update(sum(k in finished for k in keys))
    return [done[k] for k in keys]


@lru_cache(maxsize=1)
def _load(path: str, model_id: str, device: str | None, precision: str = "fp32"):  # model_id: a folder rewritten
    # in place is reloaded
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"  # generation appends on the right
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if device.startswith("cuda") or precision == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True).to(device).eval()
    return model, tokenizer


def _as_list(x) -> list:
    return [] if x is None else list(x) if isinstance(x, (list, tuple)) else [x]
