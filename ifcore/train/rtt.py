"""RTT (Rubrics to Tokens, ../papers/rtt.txt): the token-level relevance discriminator and RTT-GRPO's token advantages.

- Data (`build_pairs`, RTT section 4.1 and app. C.2 without an LLM): synthetic instructions with their witness
  responses (ifcore.synth), minimal modifications of a witness that break exactly one constraint (rule-based
  edits, kept only when ifcore.verify says that constraint alone flipped), the policy's own responses, and
  constraint omission (the policy answering the instruction with one constraint left out). Every (response,
  constraint) pair gets its relevance labels from the verifier through RTT's taxonomy (ifcore.rtt_labels; the
  paper's labels by default, `DiscConfig.labels`), or from RTT's LLM annotator when `DiscConfig.annotator` names
  a model (its "greedy" prompt gives Table 4's Greedy discriminator). Two held-out sets: by template family (no
  held-out template occurs in training) and by instruction.
- The discriminator (`Discriminator`): any causal LM checkpoint's backbone (by default the embedded policy,
  whose tokenizer it shares) and a linear score head with one output and no bias; p = sigmoid(score). Its input
  is RTT's prompt (app. C.1) followed by the policy's response token ids cut at the first special token; it is
  trained by BCE over the response tokens (section 4.1) and saved as a from_pretrained backbone folder with the
  head beside it.
- Evaluation (`evaluate`): the headline is within-response AUROC (`within_auroc`, over the responses that have
  both relevant and irrelevant tokens: the order that intra-sample normalization keeps), per Scope selector and
  taxonomy class, on each held-out set, against a per-response class prior (exactly 0.5 by construction: a
  discriminator that only knew each pair's relevance level would score that), quoted-literal matching, content-word
  and plain lexical overlap, random and uniform; pooled AUROC and F1 beside it. `relevance_examples`: the best and
  the worst held-out response, captioned as a success or a failure.
- RL (`token_advantages`): the [N, T] token advantages of RTT-GRPO: the discriminator's relevance (the one
  model-bound step) handed to ifcore.advantages.token_rtt_groups (eq. 7 with intra- or inter-sample token group
  normalization, groups kept apart; the OpenRLHF plug-in calls the same function), and the paper's uniform and
  random weighting ablations (ifcore.advantages.ablation_relevance).
- The LLM annotator (`llm_labels`): RTT's own labelling, for constraints the schema does not express: its
  annotation prompt, full or greedy (ifcore.rtt_labels.annotation_prompt) through ifcore.infer (a registry model in
  process or any OpenAI-compatible server), the JSON answer parsed to character spans. The default data never needs it:
  every constraint here is a schema constraint, labelled exactly by the verifier.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import random
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ifcore.advantages import TOKEN_ADVANTAGES, ablation_relevance, token_rtt_groups
from ifcore.rtt_labels import (CLASSES, LABELS, annotation_prompt, criteria_text, parse_annotation, relevant_spans,
                               taxonomy, template, token_labels, verifier_relevance)
from ifcore.schema import Constraint
from ifcore.progress import bar as progress_bar
from ifcore.text import Doc, reasoning_end, word_spans
from ifcore.train.model import THINK_CLOSE, autocast
from ifcore.verify import VERIFY_VERSION, verify_all

PROMPT = ("Identify which tokens in the response are relevant to the criteria.\n\nCriteria: {criteria}\n\n"
          "Response:\n\n")
HEAD_FILE = "score_head.safetensors"
META_FILE = "rtt_discriminator.json"
# Part of a cached discriminator's key: bump when a code change moves its data or its training.
# 2: the paper's labels by default, held-out splits by instruction and by template family, within-response AUROC.
RTT_VERSION = 2
SPLITS = ("train", "instruction", "template")  # a pair's split: trained on, or held out by instruction or by template


# ---- data: minimal modifications, omission, the policy's responses ------------------------------------------------

def _edit(text: str, op: str, rng: random.Random, words: list[str]) -> str | None:
    """One small rule-based edit of the text (None when the text offers nothing to edit)."""
    spans = word_spans(text)
    if op in ("insert", "number", "delete", "replace", "shout", "unshout") and not spans:
        return None
    if op in ("insert", "number"):
        _, b = rng.choice(spans)
        return f"{text[:b]} {rng.choice(words) if op == 'insert' else rng.randint(2, 12)}{text[b:]}"
    if op == "delete":
        if len(spans) < 2:
            return None
        a, b = rng.choice(spans)
        while b < len(text) and text[b] == " ":  # the word and the spaces after it
            b += 1
        return text[:a] + text[b:]
    if op == "replace":
        a, b = rng.choice(spans)
        w = rng.choice(words)
        return text[:a] + (w.capitalize() if text[a].isupper() else w) + text[b:]
    if op == "shout":
        a, b = rng.choice(spans)
        return text[:a] + text[a:b].upper() + text[b:]
    if op == "unshout":
        caps = [(a, b) for a, b in spans if text[a:b].isupper()]
        if not caps:
            return None
        a, b = rng.choice(caps)
        return text[:a] + text[a:b].lower() + text[b:]
    if op == "punct":
        ends = [m.start() for m in re.finditer(r"[.!?]", text)]
        if not ends:
            return None
        i = rng.choice(ends)
        return text[:i] + rng.choice([c for c in ".!?" if c != text[i]]) + text[i + 1:]
    doc = Doc(text)
    if op in ("drop_sentence", "dup_sentence"):
        if len(doc.sentences) < (2 if op == "drop_sentence" else 1):
            return None
        a, b = rng.choice(doc.sentences)
        if op == "dup_sentence":
            return text[:b] + " " + text[a:b] + text[b:]
        while b < len(text) and text[b] == " ":
            b += 1
        return text[:a] + text[b:]
    if op == "split_paragraph":  # a paragraph break at a sentence boundary
        gaps = [b for (_, b), (c, _) in zip(doc.sentences, doc.sentences[1:]) if text[b:c] == " "]
        if not gaps:
            return None
        b = rng.choice(gaps)
        return text[:b] + "\n\n" + text[b + 1:]
    breaks = [m.span() for m in re.finditer(r"\n\s*\n", text)]  # merge_paragraphs
    if not breaks:
        return None
    a, b = rng.choice(breaks)
    return text[:a] + " " + text[b:]


EDITS = ("insert", "delete", "replace", "number", "shout", "unshout", "punct", "drop_sentence", "dup_sentence",
         "split_paragraph", "merge_paragraphs")


def _literals(c: Constraint) -> list[str]:
    """The strings a constraint names (its keyword, banned word, required opening, ...): edits draw on them."""
    out, stack = [], [c.scope, c.target, c.range]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("of", "starts_with", "ends_with") and isinstance(v, str) and v.isalpha():
                    out.append(v)
                elif k in ("any_of", "has") and isinstance(v, list):
                    out += [w for w in v if isinstance(w, str)]
                else:
                    stack.append(v)
        elif isinstance(x, list):
            stack.extend(x)
    return out


def minimal_violation(constraints: list[Constraint], text: str, k: int, rng: random.Random, words: list[str],
                      tries: int = 12, max_edits: int = 4) -> str | None:
    """The text with the fewest edits found (1..max_edits of one kind) such that constraint k is violated and every
    other constraint that the text satisfied still is (RTT's minimal modification, app. C.4, by rules and the
    verifier instead of an LLM); None when `tries` random edits per edit count find none."""
    before = [v.satisfied for v in verify_all(constraints, text)]
    pool = words + _literals(constraints[k]) * max(1, len(words) // 4)  # the constraint's own words, often
    for m in range(1, max_edits + 1):
        for _ in range(tries):
            op, new = rng.choice(EDITS), text
            for _ in range(m):
                new = _edit(new, op, rng, pool) if new is not None else None
            if new is None or new == text or not new.strip():
                continue
            after = [v.satisfied for v in verify_all(constraints, new)]
            if not after[k] and all(a or not b for j, (a, b) in enumerate(zip(after, before)) if j != k):
                return new
    return None


def without_constraint(prompt: str, c: Constraint) -> str:
    """The instruction with one constraint's sentence left out (RTT's constraint omission)."""
    return " ".join(prompt.replace(c.text or "", " ").split()) if c.text else prompt


@dataclass
class DiscConfig:
    """How notebook 04 builds, trains and evaluates a discriminator (one folder per configuration)."""
    backbone: str | None = None  # a registry name or checkpoint; None: the policy (sharing its tokenizer)
    instructions: int = 600  # synthetic instructions; their witnesses, edits and the policy's answers
    held_out: float = 0.2  # share of instructions held out for evaluation
    held_out_templates: float = 0.2  # share of template families (ifcore.rtt_labels.template) held out as well
    labels: str = "paper"  # RTT app. C.3's taxonomy ("paper": GLOBAL = every answer token) or "scoped" (rtt_labels)
    annotator: str | None = None  # None: the verifier labels the training pairs; a model (registry name, folder,
    # or OpenAI-compatible URL): RTT's LLM annotator does, with `annotation`'s prompt (held-out pairs keep the
    # verifier's labels, the target every discriminator is scored against)
    annotation: str = "full"  # the annotator's prompt (RTT app. C.4): "full" (the taxonomy) or "greedy" (Table 4)
    policy_samples: int = 1  # policy responses per instruction (and as many with one constraint omitted)
    max_new_tokens: int = 64  # length of the policy's responses (as in GRPO)
    think: bool = True  # responses carry the empty think block the policy writes in think mode
    steps: int = 300  # optimizer steps (held-out AUROC of the default policy's backbone: 0.990 at 300, 0.991 at 400)
    batch_size: int = 32  # pairs per step
    lr: float = 1e-3  # AdamW, cosine to a tenth after a 5 % warm-up
    max_response_tokens: int = 128  # longer responses are cut (the policy writes at most max_new_tokens)
    eval_every: int = 50  # held-out loss and AUROC every N steps
    seed: int = 0
    precision: str = "fp32"  # CPU compute: fp32, or bf16 autocast (fp32 master weights; issue 25); CUDA: always bf16


def build_pairs(cfg: DiscConfig, policy_path, device: str = "cpu", progress: bool = True) -> list[dict]:
    """The discriminator's (response, constraint) rows: instruction, split (SPLITS), source (witness | modified |
    policy | omission), response (as the policy writes it, think block included), criteria, template, selector,
    class (by cfg.labels), satisfied, spans (the relevant character spans).

    Two held-out sets, both never trained on: "template", every pair whose constraint's template family is one of
    the cfg.held_out_templates share of families drawn out (no such template occurs in training), and
    "instruction", the other pairs of the first cfg.held_out share of instructions (their templates occur in
    training, with other literals and numbers)."""

    from ifcore import synth
    from ifcore.train.model import EMPTY_THINK, chat_prompt, generate, load_policy

    if cfg.labels not in LABELS:
        raise ValueError(f"DiscConfig.labels must be one of {LABELS}, got {cfg.labels!r}")
    rng = random.Random(cfg.seed)
    vocab = synth.vocabulary("tiny")
    words = vocab["nouns"] + vocab["adjs"] + vocab["verbs"] + synth.SHOUT
    insts = [synth.instruction(rng) for _ in range(cfg.instructions)]
    n_test = round(cfg.held_out * len(insts))
    families = sorted({template(criteria_text(Constraint.from_dict(c))) for inst in insts
                       for c in inst["constraints"]})
    # A stream of its own: the families drawn out never move the instructions, edits or rollouts.
    held_families = set(random.Random(f"templates-{cfg.seed}").sample(
        families, round(cfg.held_out_templates * len(families))))
    responses = []  # (instruction index, source, text)
    prefix = EMPTY_THINK if cfg.think else ""
    for i, inst in enumerate(progress_bar(insts, desc="rtt data: edits", enabled=progress)):
        cs = [Constraint.from_dict(c) for c in inst["constraints"]]
        inst["parsed"] = cs
        responses.append((i, "witness", prefix + inst["witness"]))
        for k in range(len(cs)):
            new = minimal_violation(cs, inst["witness"], k, rng, words)
            if new is not None:
                responses.append((i, "modified", prefix + new))
    policy, tokenizer = load_policy(policy_path, device)
    policy.eval()
    forward = autocast(device, cfg.precision)
    asks = []
    for i, inst in enumerate(insts):
        for _ in range(cfg.policy_samples):
            asks.append((i, "policy", inst["prompt"]))
            asks.append((i, "omission", without_constraint(inst["prompt"], rng.choice(inst["parsed"]))))
    torch.manual_seed(cfg.seed)
    for a in progress_bar(range(0, len(asks), 64), desc="rtt data: policy", enabled=progress):
        chunk = asks[a:a + 64]
        prompts = [chat_prompt(tokenizer, p, think=cfg.think) for _, _, p in chunk]
        texts = generate(policy, tokenizer, prompts, cfg.max_new_tokens, device, forward, sample=True)[4]
        responses += [(i, source, text) for (i, source, _), text in zip(chunk, texts)]
    pairs = []
    for i, source, text in responses:
        cs = insts[i]["parsed"]
        answer = (reasoning_end(text), len(text))
        for c, v in zip(cs, verify_all(cs, text)):
            family = template(criteria_text(c))
            split = "template" if family in held_families else "instruction" if i < n_test else "train"
            pairs.append({"instruction": i, "split": split, "source": source, "response": text,
                          "criteria": criteria_text(c), "template": family, "selector": c.selector,
                          "class": taxonomy(c, cfg.labels), "satisfied": bool(v.satisfied),
                          "spans": [list(s) for s in relevant_spans(c, v, answer, cfg.labels)]})
    if cfg.annotator is not None:
        pairs = annotate(pairs, cfg.annotator, cfg.annotation, progress)
    return pairs


def annotate(pairs: list[dict], model, prompt: str = "full", progress: bool = True) -> list[dict]:
    """The training pairs relabelled by RTT's LLM annotator (app. C.3-C.4, `llm_labels` with `prompt` "full" or
    "greedy": Table 4's Greedy discriminator is trained on the latter); a training pair whose answer is none of the
    annotator's JSON forms is dropped (no label). Held-out pairs keep the verifier's labels, the target that
    `evaluate` scores every discriminator against. The annotator reads the answer after the think block."""
    train = [k for k, p in enumerate(pairs) if p["split"] == "train"]
    starts = [reasoning_end(pairs[k]["response"]) for k in train]
    got = llm_labels(model, [pairs[k]["criteria"] for k in train],
                     [pairs[k]["response"][s:] for k, s in zip(train, starts)], prompt=prompt, progress=progress)
    drop = set()
    for k, s, g in zip(train, starts, got):
        if g["type"] is None:
            drop.add(k)
        else:
            pairs[k] = {**pairs[k], "spans": [[a + s, b + s] for a, b in g["spans"]], "annotation": g["type"]}
    return [p for k, p in enumerate(pairs) if k not in drop]


# ---- the discriminator --------------------------------------------------------------------------------------------

class Discriminator(torch.nn.Module):
    """A causal LM's backbone and a linear score head (one output, no bias): p = sigmoid(score) per token."""

    def __init__(self, backbone, tokenizer):
        super().__init__()
        self.backbone, self.tokenizer = backbone, tokenizer
        hidden = backbone.config.hidden_size
        self.score = torch.nn.Linear(hidden, 1, bias=False)
        torch.nn.init.normal_(self.score.weight, std=1 / (hidden + 1))  # as OpenRLHF's value heads
        self._prompts: dict[str, list[int]] = {}
        self.precision = "fp32"  # the forward passes' on a CPU (ifcore.train.model.autocast); CUDA: bf16

    @classmethod
    def from_backbone(cls, name, seed: int = 0, device="cpu") -> "Discriminator":
        """A fresh head on the backbone of a registry name (tiny, smollm2-135m) or any causal LM checkpoint."""
        from transformers import AutoModel, AutoTokenizer

        from ifcore.infer.registry import resolve

        path = resolve(name)
        torch.manual_seed(seed)
        disc = cls(AutoModel.from_pretrained(path, dtype=torch.float32), AutoTokenizer.from_pretrained(path))
        return disc.to(device)

    @classmethod
    def from_pretrained(cls, path, device="cpu") -> "Discriminator":
        from safetensors.torch import load_file
        from transformers import AutoModel, AutoTokenizer

        path = Path(path)
        if not (path / HEAD_FILE).is_file() or not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path}: not a saved RTT discriminator (needs config.json and {HEAD_FILE}, "
                                    "as Discriminator.save_pretrained writes them)")
        disc = cls(AutoModel.from_pretrained(path, dtype=torch.float32), AutoTokenizer.from_pretrained(path))
        disc.score.load_state_dict(load_file(path / HEAD_FILE))
        return disc.to(device)

    def save_pretrained(self, path, **meta) -> Path:
        """The backbone and tokenizer as a from_pretrained folder, the head beside them, `meta` as JSON."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.score.state_dict().items()}, path / HEAD_FILE)
        (path / META_FILE).write_text(json.dumps({"prompt": PROMPT, **meta}, indent=1))
        return path

    def forward(self, input_ids, attention_mask):
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.score(hidden).squeeze(-1).float()

    def prompt_ids(self, criteria: str) -> list[int]:
        if criteria not in self._prompts:
            self._prompts[criteria] = self.tokenizer(PROMPT.format(criteria=criteria),
                                                     add_special_tokens=False).input_ids
        return self._prompts[criteria]

    def cut(self, response_ids: list[int]) -> list[int]:
        """The response up to its first special token (end of turn, padding), as RTT's discriminator reads it."""
        special = set(self.tokenizer.all_special_ids)
        return next((response_ids[:i] for i, t in enumerate(response_ids) if t in special), response_ids)

    def check_tokenizer(self, tokenizer) -> None:
        """RTT's discriminator reads the policy's token ids: both must share one vocabulary."""
        if self.tokenizer.get_vocab() != tokenizer.get_vocab():
            raise ValueError("rtt_discriminator: its tokenizer differs from the policy's (RTT's discriminator reads "
                             "the policy's token ids); train it from the policy's checkpoint (DiscConfig.backbone "
                             "None)")

    @torch.no_grad()
    def probabilities(self, sequences: list[tuple[list[int], int]], batch_size: int = 64) -> list[np.ndarray]:
        """p for the response positions of each (ids, n_prompt) sequence, batched (longest first, right-padded)."""
        order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i][0]))
        out: list = [None] * len(sequences)
        device = self.score.weight.device
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        for a in range(0, len(order), batch_size):
            chunk = order[a:a + batch_size]
            ids, attention = _pad([sequences[i][0] for i in chunk], pad, device)
            with autocast(device, self.precision):
                p = torch.sigmoid(self(ids, attention)).cpu().numpy()
            for row, i in enumerate(chunk):
                seq, n_prompt = sequences[i]
                out[i] = p[row, n_prompt:len(seq)].astype(float)
        return out

    @torch.no_grad()
    def relevance(self, criteria: list[str], responses: list[list[int]], batch_size: int = 32) -> list[np.ndarray]:
        """p of every token of each response for its criteria (pairs in parallel lists), cut at the first special
        token: each array is as long as the cut response.

        The same p as `probabilities` of prompt + response, computed cheaper: each distinct criteria prompt is
        encoded once and its keys and values serve every response that shares it (in GRPO the G responses to one
        instruction share each of its constraints, and the prompt is about half of every sequence)."""
        cut = [self.cut(list(r)) for r in responses]
        probs = [np.zeros(len(r)) for r in cut]
        by_criteria: dict[str, list[int]] = {}
        for i, (c, r) in enumerate(zip(criteria, cut)):
            if r:
                by_criteria.setdefault(c, []).append(i)
        chunks, current, size = [], [], 0  # whole criteria per chunk, about batch_size responses
        for c, rows in by_criteria.items():
            if current and size + len(rows) > batch_size:
                chunks.append(current)
                current, size = [], 0
            current.append((c, rows))
            size += len(rows)
        chunks += [current] if current else []
        device = self.score.weight.device
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        for chunk in chunks:
            prompts = [self.prompt_ids(c) for c, _ in chunk]
            width = max(map(len, prompts))
            ids = torch.full((len(prompts), width), pad, dtype=torch.long, device=device)
            mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
            for k, p in enumerate(prompts):  # left-padded, so that every prompt ends where its response begins
                ids[k, width - len(p):] = torch.tensor(p, device=device)
                mask[k, width - len(p):] = 1
            which = torch.tensor([k for k, (_, rows) in enumerate(chunk) for _ in rows], device=device)
            index = [i for _, rows in chunk for i in rows]
            r_ids, r_mask = _pad([cut[i] for i in index], pad, device)
            positions = torch.tensor([len(prompts[k]) for k in which.tolist()], device=device)[:, None] + \
                torch.arange(r_ids.shape[1], device=device)[None]
            with autocast(device, self.precision):
                out = self.backbone(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                                    use_cache=True)
                cache = out["cache"] if "cache" in out else out["past_key_values"]  # transformers 5 renamed it
                cache.batch_select_indices(which)  # each response gets its prompt's keys and values
                hidden = self.backbone(r_ids, torch.cat([mask[which], r_mask], dim=1), positions,
                                       cache).last_hidden_state  # the cache by position: its name differs by version
                p = torch.sigmoid(self.score(hidden).squeeze(-1).float()).cpu().numpy()
            for row, i in enumerate(index):
                probs[i] = p[row, :len(cut[i])].astype(float)
        return probs


def _pad(rows: list[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        attention[i, :len(r)] = 1
    return ids.to(device), attention.to(device)


def encode(disc: Discriminator, pair: dict, max_response_tokens: int = 128) -> dict:
    """A pair as the discriminator reads it: ids (prompt + response tokens), n_prompt, the token labels, and
    `answer`, which response tokens belong to the verified answer (after the think block)."""
    enc = disc.tokenizer(pair["response"], add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc.input_ids, enc.offset_mapping
    keep = len(disc.cut(ids[:max_response_tokens]))
    prompt = disc.prompt_ids(pair["criteria"])
    start = reasoning_end(pair["response"])
    return {"ids": prompt + ids[:keep], "n_prompt": len(prompt),
            "labels": token_labels([tuple(s) for s in pair["spans"]], offsets[:keep]),
            "answer": [int(b > start) for _, b in offsets[:keep]], "offsets": [tuple(o) for o in offsets[:keep]]}


def fit(disc: Discriminator, train: list[dict], steps: int, batch_size: int = 32, lr: float = 1e-3, seed: int = 0,
        held_out: list[dict] | None = None, eval_every: int = 50, progress: bool = True) -> list[dict]:
    """BCE with logits over the valid response tokens (RTT section 4.1) on `encode`d pairs; returns the log: the
    training loss every 10 steps, the held-out loss (all response tokens, as trained), pooled token AUROC and
    within-response AUROC (answer tokens, as `evaluate` scores them) every `eval_every` steps and at the end."""
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

    train = [e for e in train if e["labels"]]
    device = disc.score.weight.device
    pad = disc.tokenizer.pad_token_id if disc.tokenizer.pad_token_id is not None else 0
    opt = torch.optim.AdamW(disc.parameters(), lr=lr, weight_decay=0.01)
    sched = get_cosine_with_min_lr_schedule_with_warmup(opt, num_warmup_steps=max(1, steps // 20),
                                                        num_training_steps=steps, min_lr_rate=0.1)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    order: list[int] = []
    log, t0, running = [], time.time(), []
    bar = progress_bar(range(1, steps + 1), desc="rtt discriminator", enabled=progress)
    for step in bar:
        disc.train()
        if len(order) < batch_size:
            order += rng.sample(range(len(train)), len(train))
        batch = [train[i] for i in order[:batch_size]]
        del order[:batch_size]
        ids, attention = _pad([e["ids"] for e in batch], pad, device)
        target = torch.zeros_like(ids, dtype=torch.float32)
        valid = torch.zeros_like(ids, dtype=torch.bool)
        for row, e in enumerate(batch):
            n = e["n_prompt"]
            target[row, n:n + len(e["labels"])] = torch.tensor(e["labels"], dtype=torch.float32)
            valid[row, n:n + len(e["labels"])] = True
        with autocast(device, disc.precision):
            logits = disc(ids, attention)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits[valid], target[valid])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(disc.parameters(), 1.0)
        opt.step()
        sched.step()
        running.append(loss.item())
        if step % 10 == 0 or step == steps:
            log.append({"step": step, "loss": float(np.mean(running)), "seconds": round(time.time() - t0, 1)})
            running = []
            bar.set_postfix(loss=f"{log[-1]['loss']:.3f}")
        if held_out and (step % eval_every == 0 or step == steps):
            disc.eval()
            p = disc.probabilities([(e["ids"], e["n_prompt"]) for e in held_out])
            y = np.concatenate([e["labels"] for e in held_out]).astype(float)
            q = np.clip(np.concatenate(p), 1e-7, 1 - 1e-7)
            answer = np.concatenate([e["answer"] for e in held_out]).astype(bool)
            if not log or log[-1]["step"] != step:
                log.append({"step": step})
            masks = [np.asarray(e["answer"], dtype=bool) for e in held_out]
            log[-1] |= {"eval_loss": float(-(y * np.log(q) + (1 - y) * np.log(1 - q)).mean()),
                        "eval_auroc": auroc(q[answer], y[answer]),
                        "eval_auroc_within": within_auroc([x[m] for x, m in zip(p, masks)],
                                                          [np.asarray(e["labels"])[m] for e, m in
                                                           zip(held_out, masks)])[0]}
    bar.close()
    disc.eval()
    return log


# ---- evaluation ---------------------------------------------------------------------------------------------------

def auroc(scores, labels) -> float:
    """Area under the ROC curve: the probability that a random relevant token scores above a random irrelevant
    one, ties counting one half (Mann-Whitney U with average ranks); NaN when either class is absent."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    n1, n0 = int(y.sum()), int((~y).sum())
    if n1 == 0 or n0 == 0:
        return math.nan
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]  # 1-based average ranks
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def within_auroc(scores, labels) -> tuple[float, int]:
    """The headline metric: AUROC inside each response that has both relevant and irrelevant tokens, averaged over
    those responses; with their count (NaN, 0 when there is none). `scores` and `labels` are per-response arrays.

    It is what intra-sample normalization (RTT section 4.2.2) keeps: A_tok standardizes Score * p over each
    response's own tokens, so a level shared by a whole response (how relevant GLOBAL pairs are on the whole, or
    LOCAL ones) cancels, and only the order of the tokens inside a response moves the policy. Pooled AUROC over
    all tokens (`auroc` of the concatenation) rewards exactly that level."""
    values = [auroc(s, y) for s, y in zip(scores, labels) if 0 < int(np.sum(y)) < len(y)]
    return (float(np.mean(values)) if values else math.nan), len(values)


def f1(scores, labels, threshold: float = 0.5) -> float:
    """F1 of `score >= threshold` as the relevant tokens; NaN when nothing is relevant and nothing predicted."""
    pred, y = np.asarray(scores) >= threshold, np.asarray(labels, dtype=bool)
    tp, fp, fn = int((pred & y).sum()), int((pred & ~y).sum()), int((~pred & y).sum())
    return math.nan if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)


# English function words (articles, pronouns, auxiliaries, prepositions, conjunctions, quantifiers): what the
# content-word overlap baseline ignores, so "the" in a criteria does not mark every "the" of the response.
FUNCTION_WORDS = frozenset("""a an the this that these those it its it's i me my we our you your he him his she her
they them their what which who whom whose and or but nor so yet if then than as because while of to in on at by for
with about against between into through during before after above below from up down out off over under again
further once here there when where why how all any both each every few more most other some such no not only own
same too very can will just should would could must may might shall do does did doing done be is are was were been
being am have has had having make makes sure""".split())


def _words(pair: dict, offsets, keep) -> np.ndarray:
    """1 for the tokens of each answer word that `keep(word)` accepts (the word lower-cased, punctuation stripped)."""
    text = pair["response"]
    start = reasoning_end(text)
    spans = [(a, b) for a, b in word_spans(text)
             if a >= start and keep(re.sub(r"^\W+|\W+$", "", text[a:b]).casefold())]
    return np.asarray(token_labels(spans, offsets), dtype=float)


def lexical_overlap(pair: dict, offsets) -> np.ndarray:
    """The lexical baseline: 1 for the tokens of every answer word that also occurs in the criteria text."""
    wanted = {w.casefold() for w in re.findall(r"\w+", pair["criteria"])}
    return _words(pair, offsets, wanted.__contains__)


def content_overlap(pair: dict, offsets) -> np.ndarray:
    """Lexical overlap restricted to content words: the criteria's words less FUNCTION_WORDS."""
    wanted = {w.casefold() for w in re.findall(r"\w+", pair["criteria"])} - FUNCTION_WORDS
    return _words(pair, offsets, wanted.__contains__)


def quoted_literal(pair: dict, offsets) -> np.ndarray:
    """1 for the tokens of every occurrence in the answer (case-insensitive; whole words where the literal starts or
    ends with a letter or digit) of a literal that the criteria quote ("the word \"bright\"", "begin with \"The\"")."""
    text = pair["response"]
    start = reasoning_end(text)
    spans = []
    for lit in re.findall(r'"([^"]+)"', pair["criteria"]):
        pattern = ((r"(?<!\w)" if lit[0].isalnum() else "") + re.escape(lit)
                   + (r"(?!\w)" if lit[-1].isalnum() else ""))
        spans += [(m.start(), m.end()) for m in re.finditer(pattern, text, re.IGNORECASE) if m.start() >= start]
    return np.asarray(token_labels(spans, offsets), dtype=float)


def class_prior(pairs: list[dict], encoded: list[dict]) -> dict:
    """The per-response class prior: the mean relevance of the answer tokens of `pairs` (the training split) per
    (taxonomy class, Scope selector), and under None over all of them (for a combination training never saw). Every
    token of a response gets its pair's value, so its within-response AUROC is exactly 0.5."""
    sums: dict = {}
    for p, e in zip(pairs, encoded):
        y = np.asarray(e["labels"])[np.asarray(e["answer"], dtype=bool)]
        for key in ((p["class"], p["selector"]), None):
            s, n = sums.get(key, (0.0, 0))
            sums[key] = (s + float(y.sum()), n + len(y))
    return {k: s / n for k, (s, n) in sums.items() if n}


def token_lookup(pairs: list[dict], encoded: list[dict]) -> dict:
    """The parameter-free token lookup: the mean relevance label of each answer token id of `pairs` (the training
    split) per (taxonomy class, criteria template, token id), and per (class, token id) to back off to. A
    discriminator that only memorized which tokens are relevant to which kind of constraint scores this; it is the
    baseline a learned relevance has to beat (`lookup_scores`)."""
    sums: dict = {}
    for p, e in zip(pairs, encoded):
        family = template(p["criteria"])
        for tok, y, a in zip(e["ids"][e["n_prompt"]:], e["labels"], e["answer"]):
            if a:
                for key in ((p["class"], family, tok), (p["class"], tok)):
                    s, n = sums.get(key, (0.0, 0))
                    sums[key] = (s + y, n + 1)
    return {k: s / n for k, (s, n) in sums.items()}


def lookup_scores(table: dict, pair: dict, e: dict, default: float) -> np.ndarray:
    """`token_lookup`'s score of each response token of an encoded pair: (class, template, token), else (class,
    token), else `default` (the class prior)."""
    family = template(pair["criteria"])
    return np.array([table.get((pair["class"], family, t), table.get((pair["class"], t), default))
                     for t in e["ids"][e["n_prompt"]:]], dtype=float)


# "class prior" is constant within a response: its within-response AUROC is 0.5 by construction, the chance line
# (CHANCE), never a baseline to beat.
METHODS = ("discriminator", "token lookup", "class prior", "quoted literal", "content-word overlap", "lexical overlap",
           "random", "uniform")
CHANCE = "class prior"


def evaluate(disc: Discriminator, pairs: list[dict], encoded: list[dict] | None = None, seed: int = 0):
    """The discriminator and the baselines on the held-out pairs (every split but "train"), over answer tokens.

    Returns (table, within). table, one row per held-out split x method x group (all; each Scope selector; each
    taxonomy class): pairs, mixed (pairs whose answer has both relevant and irrelevant tokens), tokens, relevant
    (share), auroc_within (`within_auroc`, over the mixed pairs: the headline), auroc_pooled (over all tokens of the
    group) and f1 (p >= 0.5, pooled). within: one row per mixed held-out pair (split, pair: its index in `pairs`,
    instruction, class, selector, tokens, relevant) with each method's AUROC inside it, for comparisons paired by
    response (or, since a response's pairs and an instruction's responses are not independent, by instruction).

    Baselines: the token lookup (`token_lookup` of the training pairs), class prior (`class_prior` of the training
    pairs: constant per response, so its within-response AUROC is the chance line, 0.5), quoted literal
    (`quoted_literal`), content-word and plain lexical overlap with the criteria, random (p ~ U[0, 1]) and uniform
    (p = 1, the paper's Uniform weighting)."""
    import pandas as pd

    encoded = encoded or [encode(disc, p) for p in pairs]
    train = [(p, e) for p, e in zip(pairs, encoded) if p["split"] == "train"]
    prior = class_prior([p for p, _ in train], [e for _, e in train])
    lookup = token_lookup([p for p, _ in train], [e for _, e in train])
    keep = [i for i, (p, e) in enumerate(zip(pairs, encoded)) if p["split"] != "train" and any(e["answer"])]
    probs = disc.probabilities([(encoded[i]["ids"], encoded[i]["n_prompt"]) for i in keep])
    rng = np.random.default_rng(seed)
    per_pair, within = [], []
    for i, p in zip(keep, probs):
        q, e = pairs[i], encoded[i]
        answer = np.asarray(e["answer"], dtype=bool)
        n = len(p)
        chance = prior.get((q["class"], q["selector"]), prior.get(None, 0.0))
        scores = {"discriminator": p, "token lookup": lookup_scores(lookup, q, e, chance)[:n],
                  "class prior": np.full(n, chance),
                  "quoted literal": quoted_literal(q, e["offsets"]),
                  "content-word overlap": content_overlap(q, e["offsets"]),
                  "lexical overlap": lexical_overlap(q, e["offsets"]),
                  "random": rng.random(n), "uniform": np.ones(n)}
        y = np.asarray(e["labels"])[answer]
        scores = {k: v[answer] for k, v in scores.items()}
        per_pair.append((q, y, scores))
        if 0 < y.sum() < len(y):
            within.append({"split": q["split"], "pair": i, "instruction": q["instruction"], "class": q["class"],
                           "selector": q["selector"],
                           "tokens": len(y), "relevant": int(y.sum())} | {m: auroc(scores[m], y) for m in METHODS})
    groups = [("all", "all", lambda q: True)]
    groups += [("selector", s, lambda q, s=s: q["selector"] == s)
               for s in ("Global", "Traversal", "Position", "Condition", "Nested")]
    groups += [("class", c, lambda q, c=c: q["class"] == c) for c in CLASSES]
    rows = []
    for split in [s for s in SPLITS[1:] if any(q["split"] == s for q, _, _ in per_pair)]:
        for method in METHODS:
            for by, group, test in groups:
                sel = [(y, s[method]) for q, y, s in per_pair if q["split"] == split and test(q)]
                if not sel:
                    continue
                y = np.concatenate([a for a, _ in sel])
                s = np.concatenate([b for _, b in sel])
                mean, mixed = within_auroc([b for _, b in sel], [a for a, _ in sel])
                rows.append({"split": split, "method": method, "by": by, "group": group, "pairs": len(sel),
                             "mixed": mixed, "tokens": len(y), "relevant": float(y.mean()) if len(y) else math.nan,
                             "auroc_within": mean, "auroc_pooled": auroc(s, y), "f1": f1(s, y)})
    return pd.DataFrame(rows), pd.DataFrame(within)


def relevance_examples(disc: Discriminator, pairs: list[dict], split: str = "instruction",
                       success: float = 0.75) -> list[dict]:
    """RTT Table 6's analog, chosen so that a reader sees where the discriminator works and where it does not: the
    held-out pairs of `split` whose answer has both relevant and irrelevant tokens, preferring violated LOCAL
    negative ones (their relevant tokens are the violating ones), are ranked by the discriminator's AUROC inside
    the response; the best and the worst (one when there is a single candidate) are returned, each as {"auroc",
    "verdict" ("success" when auroc >= `success`, else "failure"), "criteria" (the pair's), "caption", "rows"}; rows
    has one dict per constraint of that response: criteria, class, satisfied, pieces (the answer's tokens as
    text), p and labels (per piece)."""
    held = [k for k, p in enumerate(pairs) if p["split"] == split]
    encoded = {k: encode(disc, pairs[k]) for k in held}

    def answer_labels(k):
        e = encoded[k]
        return np.asarray(e["labels"])[np.asarray(e["answer"], dtype=bool)]

    mixed = [k for k in held if 0 < answer_labels(k).sum() < len(answer_labels(k))]
    violating = [k for k in mixed if pairs[k]["class"] == "local_negative" and not pairs[k]["satisfied"]]
    candidates = violating or mixed
    if not candidates:
        return []
    probs = disc.probabilities([(encoded[k]["ids"], encoded[k]["n_prompt"]) for k in candidates])
    scored = [(auroc(p[np.asarray(encoded[k]["answer"], dtype=bool)], answer_labels(k)), k)
              for k, p in zip(candidates, probs)]
    best, worst = max(scored, key=lambda x: x[0]), min(scored, key=lambda x: x[0])
    out = []
    for a, k in ([best, worst] if best[1] != worst[1] else [best]):
        q = pairs[k]
        what = ("tokens that violate" if q["class"] == "local_negative" and not q["satisfied"]
                else "tokens relevant to")
        verdict = "success" if a >= success else "failure"
        rows = []
        for p in pairs:  # every constraint of the same response
            if p["instruction"] == q["instruction"] and p["response"] == q["response"]:
                e = encode(disc, p)
                prob = disc.probabilities([(e["ids"], e["n_prompt"])])[0]
                answer = [t for t, x in enumerate(e["answer"]) if x]
                rows.append({"criteria": p["criteria"], "class": p["class"], "satisfied": p["satisfied"],
                             "pieces": [p["response"][s:t] for s, t in (e["offsets"][j] for j in answer)],
                             "p": prob[answer], "labels": [e["labels"][j] for j in answer]})
        out.append({"auroc": a, "verdict": verdict, "criteria": q["criteria"], "rows": rows,
                    "caption": f"{verdict.upper()} ({'best' if k == best[1] else 'worst'} of {len(candidates)} "
                               f"held-out candidates): within-response AUROC {a:.2f} for the {what} "
                               f"\"{q['criteria']}\" (1 = every relevant token above every other, 0.5 = chance; "
                               f"success means >= {success:g})"})
    return out


# ---- building, caching and loading a discriminator -----------------------------------------------------------------

def discriminator_key(cfg: DiscConfig, policy_path) -> str:
    """A hash of everything a trained discriminator depends on: its configuration, the policy's files, the code."""
    from ifcore import synth
    from ifcore.infer.registry import checksums
    from ifcore.train import TRAINER_VERSION

    config = asdict(cfg)
    if cfg.precision == "fp32":  # the default keeps the keys (and cached discriminators) made before the option
        del config["precision"]
    spec = {"config": config, "policy": hashlib.sha256(checksums(Path(policy_path)).encode()).hexdigest(),
            "rtt": RTT_VERSION, "trainer": TRAINER_VERSION, "synth": synth.SYNTH_VERSION, "verify": VERIFY_VERSION}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]


def train_discriminator(cfg: DiscConfig, policy_path, root, device: str = "cpu", progress: bool = True) -> Path:
    """Build the pairs, train and evaluate a discriminator, save it in root/discriminator-<key> (with pairs.jsonl,
    its training log and the evaluation table); a folder of the same key is reused as it is. Returns the folder."""
    import os
    import shutil

    out = Path(root) / f"discriminator-{discriminator_key(cfg, policy_path)}"
    if (out / META_FILE).is_file():
        if progress:
            print(f"{out}: reused (trained earlier with this configuration and policy)", flush=True)
        return out
    t0 = time.time()
    pairs = build_pairs(cfg, policy_path, device, progress)
    t_data = time.time() - t0
    disc = Discriminator.from_backbone(cfg.backbone or policy_path, seed=cfg.seed, device=device)
    disc.precision = cfg.precision
    encoded = [encode(disc, p, cfg.max_response_tokens) for p in pairs]
    train = [e for p, e in zip(pairs, encoded) if p["split"] == "train"]
    held = [e for p, e in zip(pairs, encoded) if p["split"] != "train"]
    log = fit(disc, train, cfg.steps, cfg.batch_size, cfg.lr, cfg.seed, held, cfg.eval_every, progress)
    table, within = evaluate(disc, pairs, encoded, seed=cfg.seed)
    # Written beside, then renamed: a killed build never leaves a folder that looks finished.
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with open(tmp / "pairs.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(p) + "\n" for p in pairs)
    (tmp / "eval.json").write_text(table.to_json(orient="records", indent=1))
    (tmp / "within.json").write_text(within.to_json(orient="records", indent=1))
    disc.save_pretrained(tmp, config=asdict(cfg), policy=str(policy_path), log=log,
                         seconds={"data": round(t_data, 1), "total": round(time.time() - t0, 1)})
    os.replace(tmp, out)
    return out


def load_report(path) -> dict:
    """What train_discriminator saved beside the weights: config, policy, log, seconds, eval and within (evaluate's
    two DataFrames), pairs."""
    import pandas as pd

    from ifcore.jsonl import read_jsonl

    path = Path(path)
    meta = json.loads((path / META_FILE).read_text())
    meta["eval"] = pd.DataFrame(json.loads((path / "eval.json").read_text()))
    meta["within"] = pd.DataFrame(json.loads((path / "within.json").read_text()))
    meta["pairs"] = read_jsonl(path / "pairs.jsonl")
    return meta


# ---- RTT-GRPO: the token advantages --------------------------------------------------------------------------------

def answer_tokens(tokenizer, response_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N, T] bool: the response tokens that carry a token-level advantage, those of the verified answer: after the
    last `</think>` token (when the tokenizer has one) and before the first special token (the end of turn).

    The think block and the end-of-turn token are the format that the gate checks, not text that a constraint
    speaks about. Normalized together with the answer they would count as irrelevant tokens and be pushed against
    the relevant ones, down whenever a response satisfies its constraints: the policy then learns to stop less
    often and truncates (what a first version of notebook 04 measured). Outside the answer, A = alpha A_res."""
    special = torch.tensor(sorted(tokenizer.all_special_ids), device=response_ids.device)
    keep = mask & (torch.isin(response_ids, special).cumsum(-1) == 0)
    close = tokenizer.get_vocab().get(THINK_CLOSE)
    if close is not None:
        after = (((response_ids == close) & mask).flip(-1).cumsum(-1).flip(-1) == 0)
        keep &= after
    return keep


def token_advantages(mode: str, response_ids: torch.Tensor, mask: torch.Tensor, criteria: list[list[str]],
                     satisfied: list[list[bool]], response_adv, alpha: float, beta: float, tokenizer,
                     disc: Discriminator | None = None, rng: np.random.Generator | None = None,
                     batch_size: int = 32, verified: list | None = None,
                     std_floor: float = 0.0) -> tuple[torch.Tensor, float]:
    """RTT-GRPO's [N, T] advantages (RTT eq. 7: ifcore.advantages.token_rtt_groups, the same function the OpenRLHF
    plug-in calls) and the discriminator's seconds: this wrapper adds only what needs the model, the relevance p.

    N = B * G responses in group order (rows g*G .. g*G + G - 1 answer prompt g); `mask` marks each response's
    tokens (its end-of-turn included); criteria[i] and satisfied[i] are response i's constraints and verdicts;
    response_adv is [B, G] (group_norm). mode: "rtt" (intra-sample normalization, the paper's), "rtt_inter"
    (inter-sample), "uniform" (p = 1: A_tok = 0) or "random" (p ~ U[0, 1], drawn from `rng`). The discriminator
    reads each response cut at its first special token; the token-level group of a response is its answer's tokens
    (`answer_tokens`), and its other tokens get alpha A_res. Each group of responses is normalized on its own list
    of [T_i, C] arrays.

    `verified`: for modes rtt and rtt_inter, the oracle relevance instead of the discriminator's: one (constraints,
    verdicts, offset, text) per response, its score_response verdicts on `text`, mapped to tokens by
    ifcore.rtt_labels.verifier_relevance (the function the OpenRLHF plug-in's IFCORE_RTT_RELEVANCE=verifier calls);
    a response that does not decode to `text` again, or re-tokenize to its ids, gets no scored token. std_floor:
    ifcore.advantages.token_rtt's (0: the paper's normalization)."""
    if mode not in TOKEN_ADVANTAGES[1:]:
        raise ValueError(f"token_advantages: mode must be one of {TOKEN_ADVANTAGES[1:]}, got {mode!r}")
    adv = np.asarray(response_adv, dtype=float)
    n, size = len(criteria), adv.shape[1]
    lengths = mask.sum(-1).tolist()
    scored = [torch.nonzero(row).flatten().tolist() for row in answer_tokens(tokenizer, response_ids, mask).cpu()]
    ids = response_ids.tolist()
    seconds = 0.0
    if mode in ("rtt", "rtt_inter") and verified is not None:  # the oracle: the verifier's evidence, no model
        relevance = []
        t0 = time.perf_counter()
        for i, (constraints, verdicts, offset, text) in enumerate(verified):
            got, p = verifier_relevance(tokenizer, ids[i][:lengths[i]], constraints, verdicts, offset, text=text)
            scored[i] = got
            relevance.append(np.asarray(p, dtype=float).reshape(len(got), len(criteria[i])))
        seconds = time.perf_counter() - t0
    elif mode in ("rtt", "rtt_inter"):
        if disc is None:
            raise ValueError(f"token_advantages={mode!r} needs a discriminator")
        pairs = [(i, k) for i in range(n) for k in range(len(criteria[i]))]
        t0 = time.perf_counter()
        probs = disc.relevance([criteria[i][k] for i, k in pairs], [ids[i][:lengths[i]] for i, _ in pairs],
                               batch_size)
        seconds = time.perf_counter() - t0
        relevance = [np.zeros((len(scored[i]), len(criteria[i]))) for i in range(n)]
        for (i, k), p in zip(pairs, probs):
            relevance[i][:, k] = p[scored[i]]  # answer tokens come before the cut, so p covers them
    else:  # RTT Table 4's uniform and random weightings: one [T_i, C] array per response, in order
        if mode == "random" and rng is None:
            raise ValueError("token_advantages='random' needs an rng")
        relevance = [r for i in range(n) for r in ablation_relevance(mode, [len(scored[i])], len(criteria[i]), rng)]
    advs = token_rtt_groups(relevance, satisfied, adv, alpha=alpha, beta=beta,
                            mode="inter" if mode == "rtt_inter" else "intra", std_floor=std_floor)
    out = torch.zeros(mask.shape, dtype=torch.float32)
    for i, a in enumerate(advs):
        out[i, :lengths[i]] = float(alpha * adv[i // size][i % size])  # outside the answer: alpha A_res
        out[i, scored[i]] = torch.from_numpy(a).float()
    return out.to(mask.device), seconds


@functools.cache
def _saved_discriminator(path: str) -> Discriminator:
    cuda = torch.cuda.is_available()  # the OpenRLHF plug-ins call it in a reference actor: its GPU, in bf16
    disc = Discriminator.from_pretrained(path, "cuda" if cuda else "cpu")
    return (disc.to(torch.bfloat16) if cuda else disc).eval().requires_grad_(False)


def saved_relevance(criteria: list[str], responses: list[list[int]]) -> list[np.ndarray]:
    """Discriminator.relevance of the discriminator saved at $IFCORE_RTT_DISCRIMINATOR, loaded once per process:
    the OpenRLHF plug-ins' IFCORE_RTT_RELEVANCE="ifcore.train.rtt:saved_relevance" (ifcore.run.openrlhf sets both
    from a run's rtt_discriminator)."""
    path = os.environ.get("IFCORE_RTT_DISCRIMINATOR")
    if not path:
        raise ValueError("IFCORE_RTT_DISCRIMINATOR: not set (the folder of a saved RTT discriminator)")
    return _saved_discriminator(path).relevance(criteria, responses)


def llm_labels(model, criteria: list[str], responses: list[str], params=None, progress: bool = False,
               prompt: str = "full") -> list[dict]:
    """RTT's LLM annotator (app. C.3-C.4): one annotation per (constraint text, response) pair, each
    ifcore.rtt_labels.parse_annotation's {"type", "spans", "unmatched"} (type None: the answer was not one of the
    three JSON forms, so the pair has no label). `model`: a registry name or folder, an ifcore.infer Local or an
    Endpoint (vLLM, a hosted API); greedy decoding by default, completions cached as every generation is.
    `prompt`: "full" (the taxonomy prompt) or "greedy" (Table 4's Greedy annotator)."""
    from ifcore.infer.generate import GenParams, generate

    if len(criteria) != len(responses):
        raise ValueError(f"llm_labels: {len(criteria)} criteria for {len(responses)} responses")
    answers = generate(model, [annotation_prompt(c, r, prompt) for c, r in zip(criteria, responses)],
                       params or GenParams(max_new_tokens=512), progress=progress)
    return [parse_annotation(a, r) for a, r in zip(answers, responses)]
