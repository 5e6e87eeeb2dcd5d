"""RTT (Rubrics to Tokens, ../papers/rtt.txt): the token-level relevance discriminator and RTT-GRPO's token advantages.

- Data (`build_pairs`, RTT section 4.1 and app. C.2 without an LLM): synthetic instructions with their witness
  responses (ifcore.synth), minimal modifications of a witness that break exactly one constraint (rule-based
  edits, kept only when ifcore.verify says that constraint alone flipped), the policy's own responses, and
  constraint omission (the policy answering the instruction with one constraint left out). Every (response,
  constraint) pair gets its relevance labels from the verifier (ifcore.rtt_labels); the held-out split is by
  instruction.
- The discriminator (`Discriminator`): any causal LM checkpoint's backbone (by default the embedded policy,
  whose tokenizer it shares) and a linear score head with one output and no bias; p = sigmoid(score). Its input
  is RTT's prompt (app. C.1) followed by the policy's response token ids cut at the first special token; it is
  trained by BCE over the response tokens (section 4.1) and saved as a from_pretrained backbone folder with the
  head beside it.
- Evaluation (`evaluate`): token AUROC and F1 per Scope selector and per taxonomy class against the uniform,
  random and lexical-overlap baselines.
- RL (`token_advantages`): the [N, T] token advantages of RTT-GRPO (eq. 7 with intra- or inter-sample token
  group normalization, ifcore.advantages.token_rtt) and the paper's uniform and random weighting ablations.
  Groups are kept apart by construction (one list of [T_i, C] arrays per group), never by reshaping a
  [G, C, T] tensor: the authors' code reshapes it to [C, G, T] instead of permuting it, which mixes other
  responses' rows into a response's advantage.

- The LLM annotator (`llm_labels`): RTT's own labelling, for constraints the schema does not express: its
  annotation prompt (ifcore.rtt_labels.annotation_prompt) through ifcore.infer (a registry model in process or
  any OpenAI-compatible server), the JSON answer parsed to character spans. The default data never needs it:
  every constraint here is a schema constraint, labelled exactly by the verifier.
"""
from __future__ import annotations

import contextlib
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

from ifcore.rtt_labels import CLASSES, annotation_prompt, parse_annotation, relevant_spans, taxonomy, token_labels
from ifcore.schema import Constraint
from ifcore.text import Doc, reasoning_end, word_spans
from ifcore.train.model import THINK_CLOSE
from ifcore.verify import VERIFY_VERSION, verify_all

PROMPT = ("Identify which tokens in the response are relevant to the criteria.\n\nCriteria: {criteria}\n\n"
          "Response:\n\n")
HEAD_FILE = "score_head.safetensors"
META_FILE = "rtt_discriminator.json"
# Part of a cached discriminator's key: bump when a code change moves its data or its training.
RTT_VERSION = 1
TOKEN_ADVANTAGES = ("broadcast", "rtt", "rtt_inter", "uniform", "random")


def criteria_text(c: Constraint) -> str:
    """The constraint as the discriminator reads it: its wording, or its schema JSON when it has none."""
    return c.text or json.dumps({k: v for k, v in c.to_dict().items() if k not in ("id", "category")})


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
    policy_samples: int = 1  # policy responses per instruction (and as many with one constraint omitted)
    max_new_tokens: int = 64  # length of the policy's responses (as in GRPO)
    think: bool = True  # responses carry the empty think block the policy writes in think mode
    steps: int = 300  # optimizer steps (held-out AUROC of the default policy's backbone: 0.990 at 300, 0.991 at 400)
    batch_size: int = 32  # pairs per step
    lr: float = 1e-3  # AdamW, cosine to a tenth after a 5 % warm-up
    max_response_tokens: int = 128  # longer responses are cut (the policy writes at most max_new_tokens)
    eval_every: int = 50  # held-out loss and AUROC every N steps
    seed: int = 0


def build_pairs(cfg: DiscConfig, policy_path, device: str = "cpu", progress: bool = True) -> list[dict]:
    """The discriminator's (response, constraint) rows: instruction, split, source (witness | modified | policy |
    omission), response (as the policy writes it, think block included), criteria, selector, class, satisfied,
    spans (the relevant character spans)."""
    from tqdm import tqdm

    from ifcore import synth
    from ifcore.train.grpo import generate
    from ifcore.train.model import EMPTY_THINK, chat_prompt, load_policy

    rng = random.Random(cfg.seed)
    vocab = synth.vocabulary("tiny")
    words = vocab["nouns"] + vocab["adjs"] + vocab["verbs"] + synth.SHOUT
    insts = [synth.instruction(rng) for _ in range(cfg.instructions)]
    n_test = round(cfg.held_out * len(insts))
    responses = []  # (instruction index, source, text)
    prefix = EMPTY_THINK if cfg.think else ""
    for i, inst in enumerate(tqdm(insts, desc="rtt data: edits", disable=not progress, dynamic_ncols=True)):
        cs = [Constraint.from_dict(c) for c in inst["constraints"]]
        inst["parsed"] = cs
        responses.append((i, "witness", prefix + inst["witness"]))
        for k in range(len(cs)):
            new = minimal_violation(cs, inst["witness"], k, rng, words)
            if new is not None:
                responses.append((i, "modified", prefix + new))
    policy, tokenizer = load_policy(policy_path, device)
    policy.eval()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()
    asks = []
    for i, inst in enumerate(insts):
        for _ in range(cfg.policy_samples):
            asks.append((i, "policy", inst["prompt"]))
            asks.append((i, "omission", without_constraint(inst["prompt"], rng.choice(inst["parsed"]))))
    torch.manual_seed(cfg.seed)
    for a in tqdm(range(0, len(asks), 64), desc="rtt data: policy", disable=not progress, dynamic_ncols=True):
        chunk = asks[a:a + 64]
        prompts = [chat_prompt(tokenizer, p, think=cfg.think) for _, _, p in chunk]
        texts = generate(policy, tokenizer, prompts, cfg.max_new_tokens, device, autocast, sample=True)[4]
        responses += [(i, source, text) for (i, source, _), text in zip(chunk, texts)]
    pairs = []
    for i, source, text in responses:
        cs = insts[i]["parsed"]
        for c, v in zip(cs, verify_all(cs, text)):
            pairs.append({"instruction": i, "split": "test" if i < n_test else "train", "source": source,
                          "response": text, "criteria": criteria_text(c), "selector": c.selector,
                          "class": taxonomy(c), "satisfied": bool(v.satisfied),
                          "spans": [list(s) for s in relevant_spans(c, v)]})
    return pairs


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
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
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
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
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
    training loss every 10 steps, the held-out loss (all response tokens, as trained) and token AUROC (answer
    tokens, as `evaluate` scores them) every `eval_every` steps and at the end."""
    from tqdm import tqdm
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
    bar = tqdm(range(1, steps + 1), desc="rtt discriminator", disable=not progress, dynamic_ncols=True)
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
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
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
            log[-1] |= {"eval_loss": float(-(y * np.log(q) + (1 - y) * np.log(1 - q)).mean()),
                        "eval_auroc": auroc(q[answer], y[answer])}
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


def f1(scores, labels, threshold: float = 0.5) -> float:
    """F1 of `score >= threshold` as the relevant tokens; NaN when nothing is relevant and nothing predicted."""
    pred, y = np.asarray(scores) >= threshold, np.asarray(labels, dtype=bool)
    tp, fp, fn = int((pred & y).sum()), int((pred & ~y).sum()), int((~pred & y).sum())
    return math.nan if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)


def lexical_overlap(pair: dict, offsets) -> np.ndarray:
    """The lexical baseline: 1 for the tokens of every response word that also occurs in the criteria text."""
    wanted = {w.casefold() for w in re.findall(r"\w+", pair["criteria"])}
    text = pair["response"]
    spans = [(a, b) for a, b in word_spans(text) if re.sub(r"^\W+|\W+$", "", text[a:b]).casefold() in wanted]
    return np.asarray(token_labels(spans, offsets), dtype=float)


def evaluate(disc: Discriminator, pairs: list[dict], encoded: list[dict] | None = None, seed: int = 0):
    """Token AUROC and F1 (threshold 0.5) of the discriminator and of the baselines over the answer tokens of
    `pairs`: overall, per Scope selector and per taxonomy class. Baselines: uniform (every token relevant,
    p = 1: the paper's Uniform weighting), random (p ~ U[0, 1]) and lexical overlap with the criteria text.
    A long DataFrame: method, by, group, pairs, tokens, relevant (share), auroc, f1."""
    import pandas as pd

    encoded = encoded or [encode(disc, p) for p in pairs]
    keep = [i for i, e in enumerate(encoded) if any(e["answer"])]
    probs = disc.probabilities([(encoded[i]["ids"], encoded[i]["n_prompt"]) for i in keep])
    rng = np.random.default_rng(seed)
    rows = []
    per_pair = []
    for i, p in zip(keep, probs):
        e, answer = encoded[i], np.asarray(encoded[i]["answer"], dtype=bool)
        scores = {"discriminator": p, "uniform": np.ones(len(p)), "random": rng.random(len(p)),
                  "lexical overlap": lexical_overlap(pairs[i], e["offsets"])}
        per_pair.append((pairs[i], np.asarray(e["labels"])[answer], {k: v[answer] for k, v in scores.items()}))
    groups = [("all", "all", lambda q: True)]
    groups += [("selector", s, lambda q, s=s: q["selector"] == s)
               for s in ("Global", "Traversal", "Position", "Condition", "Nested")]
    groups += [("class", c, lambda q, c=c: q["class"] == c) for c in CLASSES]
    for method in ("discriminator", "uniform", "random", "lexical overlap"):
        for by, group, test in groups:
            sel = [(y, s[method]) for q, y, s in per_pair if test(q)]
            if not sel:
                continue
            y = np.concatenate([a for a, _ in sel])
            s = np.concatenate([b for _, b in sel])
            rows.append({"method": method, "by": by, "group": group, "pairs": len(sel), "tokens": len(y),
                         "relevant": float(y.mean()) if len(y) else math.nan, "auroc": auroc(s, y), "f1": f1(s, y)})
    return pd.DataFrame(rows)


def relevance_example(disc: Discriminator, pairs: list[dict], split: str = "test") -> list[dict]:
    """RTT Table 6's analog: the discriminator's relevance over one response for each of its constraints.

    The response is the first of `split` that has a satisfied and a violated constraint, preferring a minimal
    modification whose violated constraint is LOCAL (its relevant tokens are a few, not all). One dict per
    constraint: criteria, class, satisfied, pieces (the answer's tokens as text), p and labels (per piece)."""
    responses: dict[tuple, list[dict]] = {}
    for p in pairs:
        if p["split"] == split:
            responses.setdefault((p["instruction"], p["response"]), []).append(p)

    def rank(group):
        mixed = len({p["satisfied"] for p in group}) == 2
        local = any(not p["satisfied"] and p["class"] != "global" for p in group)
        return (not mixed, not local, group[0]["source"] != "modified")

    group = min(responses.values(), key=rank)  # min keeps the first of equals: the order of the pairs
    out = []
    for p in group:
        e = encode(disc, p)
        prob = disc.probabilities([(e["ids"], e["n_prompt"])])[0]
        keep = [i for i, a in enumerate(e["answer"]) if a]
        out.append({"criteria": p["criteria"], "class": p["class"], "satisfied": p["satisfied"],
                    "pieces": [p["response"][a:b] for a, b in (e["offsets"][i] for i in keep)],
                    "p": prob[keep], "labels": [e["labels"][i] for i in keep]})
    return out


# ---- building, caching and loading a discriminator -----------------------------------------------------------------

def discriminator_key(cfg: DiscConfig, policy_path) -> str:
    """A hash of everything a trained discriminator depends on: its configuration, the policy's files, the code."""
    from ifcore import synth
    from ifcore.infer.registry import checksums
    from ifcore.train import TRAINER_VERSION

    spec = {"config": asdict(cfg), "policy": hashlib.sha256(checksums(Path(policy_path)).encode()).hexdigest(),
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
    encoded = [encode(disc, p, cfg.max_response_tokens) for p in pairs]
    train = [e for p, e in zip(pairs, encoded) if p["split"] == "train"]
    held = [e for p, e in zip(pairs, encoded) if p["split"] == "test"]
    log = fit(disc, train, cfg.steps, cfg.batch_size, cfg.lr, cfg.seed, held, cfg.eval_every, progress)
    test_pairs = [p for p in pairs if p["split"] == "test"]
    table = evaluate(disc, test_pairs, held, seed=cfg.seed)
    # Written beside, then renamed: a killed build never leaves a folder that looks finished.
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with open(tmp / "pairs.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(p) + "\n" for p in pairs)
    (tmp / "eval.json").write_text(table.to_json(orient="records", indent=1))
    disc.save_pretrained(tmp, config=asdict(cfg), policy=str(policy_path), log=log,
                         seconds={"data": round(t_data, 1), "total": round(time.time() - t0, 1)})
    os.replace(tmp, out)
    return out


def load_report(path) -> dict:
    """What train_discriminator saved beside the weights: config, policy, log, seconds, eval (a DataFrame), pairs."""
    import pandas as pd

    from ifcore.jsonl import read_jsonl

    path = Path(path)
    meta = json.loads((path / META_FILE).read_text())
    meta["eval"] = pd.DataFrame(json.loads((path / "eval.json").read_text()))
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
                     batch_size: int = 32) -> tuple[torch.Tensor, float]:
    """RTT-GRPO's [N, T] advantages (RTT eq. 7; ifcore.advantages.token_rtt) and the discriminator's seconds.

    N = B * G responses in group order (rows g*G .. g*G + G - 1 answer prompt g); `mask` marks each response's
    tokens (its end-of-turn included); criteria[i] and satisfied[i] are response i's constraints and verdicts;
    response_adv is [B, G] (group_norm). mode: "rtt" (intra-sample normalization, the paper's), "rtt_inter"
    (inter-sample), "uniform" (p = 1: A_tok = 0) or "random" (p ~ U[0, 1], drawn from `rng`). The discriminator
    reads each response cut at its first special token; the token-level group of a response is its answer's tokens
    (`answer_tokens`), and its other tokens get alpha A_res. Each group of responses is normalized on its own list
    of [T_i, C] arrays."""
    if mode not in TOKEN_ADVANTAGES[1:]:
        raise ValueError(f"token_advantages: mode must be one of {TOKEN_ADVANTAGES[1:]}, got {mode!r}")
    from ifcore.advantages import token_rtt

    adv = np.asarray(response_adv, dtype=float)
    n, groups, size = len(criteria), adv.shape[0], adv.shape[1]
    lengths = mask.sum(-1).tolist()
    scored = [torch.nonzero(row).flatten().tolist() for row in answer_tokens(tokenizer, response_ids, mask).cpu()]
    ids = response_ids.tolist()
    seconds = 0.0
    if mode in ("rtt", "rtt_inter"):
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
    elif mode == "uniform":
        relevance = [np.ones((len(scored[i]), len(criteria[i]))) for i in range(n)]
    else:
        if rng is None:
            raise ValueError("token_advantages='random' needs an rng")
        relevance = [rng.random((len(scored[i]), len(criteria[i]))) for i in range(n)]
    out = torch.zeros(mask.shape, dtype=torch.float32)
    for g in range(groups):
        rows = range(g * size, (g + 1) * size)
        sat = np.array([satisfied[i] for i in rows], dtype=bool)
        advs = token_rtt([relevance[i] for i in rows], sat, adv[g], alpha=alpha, beta=beta,
                         mode="inter" if mode == "rtt_inter" else "intra")
        for i, a in zip(rows, advs):
            out[i, :lengths[i]] = float(alpha * adv[g][i - g * size])
            out[i, scored[i]] = torch.from_numpy(a).float()
    return out.to(mask.device), seconds


@functools.cache
def _saved_discriminator(path: str) -> Discriminator:
    disc = Discriminator.from_pretrained(path, "cuda" if torch.cuda.is_available() else "cpu")
    return disc.eval().requires_grad_(False)


def saved_relevance(criteria: list[str], responses: list[list[int]]) -> list[np.ndarray]:
    """Discriminator.relevance of the discriminator saved at $IFCORE_RTT_DISCRIMINATOR, loaded once per process:
    the OpenRLHF plug-ins' IFCORE_RTT_RELEVANCE="ifcore.train.rtt:saved_relevance" (ifcore.run.openrlhf sets both
    from a run's rtt_discriminator)."""
    path = os.environ.get("IFCORE_RTT_DISCRIMINATOR")
    if not path:
        raise ValueError("IFCORE_RTT_DISCRIMINATOR: not set (the folder of a saved RTT discriminator)")
    return _saved_discriminator(path).relevance(criteria, responses)


def llm_labels(model, criteria: list[str], responses: list[str], params=None, progress: bool = False) -> list[dict]:
    """RTT's LLM annotator (app. C.3-C.4): one annotation per (constraint text, response) pair, each
    ifcore.rtt_labels.parse_annotation's {"type", "spans", "unmatched"} (type None: the answer was not one of the
    three JSON forms, so the pair has no label). `model`: a registry name or folder, an ifcore.infer Local or an
    Endpoint (vLLM, a hosted API); greedy by default, completions cached as every generation is."""
    from ifcore.infer.generate import GenParams, generate

    if len(criteria) != len(responses):
        raise ValueError(f"llm_labels: {len(criteria)} criteria for {len(responses)} responses")
    answers = generate(model, [annotation_prompt(c, r) for c, r in zip(criteria, responses)],
                       params or GenParams(max_new_tokens=512), progress=progress)
    return [parse_annotation(a, r) for a, r in zip(answers, responses)]
