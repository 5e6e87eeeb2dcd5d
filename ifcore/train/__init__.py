"""The embedded trainer: GRPO for precise instruction following on a small CPU policy or a real checkpoint.

- `model.py`: the small Qwen3 built from a config, its locally trained byte-level BPE tokenizer and the
  Qwen3-style chat template with `<think>` tags; `load_policy(path)` reads any from_pretrained directory.
- `sft.py`: the behaviour-cloning warm start on hindsight-relabelled pairs from `ifcore.synth`, and the
  cache of default assets (`$IFCORE_CACHE`, default `~/.cache/ifcore`).
- `grpo.py`: `TrainConfig` (validated on load) and the loop behind `ifcore train` (metrics.jsonl, TensorBoard,
  checksummed checkpoints, exact resume, a lock per run directory).

Needs the `train` extra (torch, transformers, tokenizers, tensorboard, tqdm); the core never imports it, and it never
imports ifcore.run (which drives it: ifcore.run.sweep runs arms x seeds of it).
"""

# Part of every run's identity (grpo.run_identity) and of the cache key of the default assets (sft.default_assets):
# bump it when a code change moves the numbers of a run with an unchanged configuration (the warm start, the
# default data, the GRPO step), so that no run or cached policy of the old code is reused as if it were new.
# 2: the warm start's schedule is transformers' cosine-with-min-lr (warm-up from 0, decay after the warm-up).
# 3: the warm start also teaches RAIF's CoT prompt (a plan in the think block, the answer in <answer> tags), in
#    length-bucketed batches.
# 4: RAIF's no-think rollouts carry no gradient and dropped groups are skipped (issue 22); RTT's verifier relevance
#    uses the paper's taxonomy by default.
# 5: the step-0 evaluation is one per warm start (its sampling no longer seeded by the run's seed); RAIF's evaluation
#    keeps each prompt's mean reward.
# 6: rollouts and evaluations decode with the trainer's own loop and inverse-CDF sampler (other draws from the same
#    distribution), 512 sequences at a time by default.
TRAINER_VERSION = 6


def _default_policy():
    from ifcore.train.sft import WarmStartConfig, default_assets

    return default_assets(WarmStartConfig())["model"]


# `tiny` in the model registry is the cached warm-started policy; infer may not import train, so train registers it.
from ifcore.infer.registry import register  # noqa: E402

register("tiny", _default_policy)
