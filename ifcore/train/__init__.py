"""The embedded trainer: GRPO for precise instruction following on a small CPU policy or a real checkpoint.

- `model.py`: the small Qwen3 built from a config, its locally trained byte-level BPE tokenizer and the
  Qwen3-style chat template with `<think>` tags; `load_policy(path)` reads any from_pretrained directory.
- `sft.py`: the behaviour-cloning warm start on hindsight-relabelled pairs from `ifcore.synth`, and the
  cache of default assets (`$IFCORE_CACHE`, default `~/.cache/ifcore`).
- `grpo.py`: `TrainConfig` and the loop behind `ifcore train` (metrics.jsonl, TensorBoard, checkpoints,
  exact resume).

Needs the `train` extra (torch, transformers, tokenizers, tensorboard, tqdm); the core never imports it.
"""
