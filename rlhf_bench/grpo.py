"""The tiny offline GRPO run, top to bottom: tokenizer, model, reward, prompts, training,
the saved policy, and its reload.

Everything is built here, nothing is downloaded (the package sets offline mode before
transformers is imported; `check_offline()` verifies it):

* a character-level tokenizer: a `tokenizers` WordLevel model over lowercase letters and
  the space, one token per character, with <pad>, <bos>, <eos> and <unk>, wrapped in
  transformers' PreTrainedTokenizerFast and padded on the left (prompts are left-padded
  for generation);
* a small causal language model initialised from a LlamaConfig (hidden size 32, 2
  layers, tied embeddings) under a fixed seed;
* a programmatic reward: the fraction of the completion's characters that are the target
  character ("a"); a random policy scores about 0.04 (one token in 31);
* prompts: random lowercase strings, made in memory with datasets.Dataset.from_dict;
* TRL's GRPOTrainer (group-relative advantages over `NUM_GENERATIONS` completions per
  prompt, no KL term: beta 0, so no reference model). The pinned TRL has no PPOTrainer
  (it was removed from TRL), so GRPO is the only RL trainer this gate runs.

fp32 on the CPU; on a GPU bf16 mixed precision (GRPOConfig(bf16=True): bf16 autocast
over fp32 weights). The GPU path has not been run yet: the settings and the margin were
measured on a 2-core CPU only.

`train()` runs in the gate's own process, or in each rank of an `accelerate launch`
(rlhf_bench.ranks): every rank returns the sha256 digest of its final weights, rank 0
saves the policy. `reload_and_generate()` is the proof that what was saved loads back
with from_pretrained and generates.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from rlhf_bench.errors import ConfigError, PolicyError, RLHFBenchError

# --- the task: fixed, small, and the same for every run --------------------------------
ALPHABET = "abcdefghijklmnopqrstuvwxyz "
PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
TARGET_CHAR = "a"  # the reward: the share of this character in a completion
NUM_PROMPTS = 64
PROMPT_LENGTHS = (3, 6)  # prompt lengths in characters, inclusive
NUM_GENERATIONS = 8  # completions per prompt (the GRPO group)
BATCH_SIZE = 8  # completions per optimizer step, all processes together (one prompt's group)
MAX_COMPLETION_LENGTH = 8  # new tokens per completion
SAMPLE_PROMPT = "the cat "  # what the reloaded policy is asked to continue
SAMPLE_NEW_TOKENS = 8


@dataclass(frozen=True)
class RunConfig:
    """One gate run. The command line (`python -m rlhf_bench`) fills every field; the
    defaults are the gate's (see docs in __main__.py for how they were chosen)."""

    out_dir: str = "rlhf-out"
    """Folder for result.json, reward_curve.png, the saved policy and the ranks' digests."""
    steps: int = 60
    """Optimizer steps (GRPOConfig.max_steps); one logged mean reward per step."""
    learning_rate: float = 3e-3
    """AdamW learning rate (constant). 0 leaves the policy as it was: the gate must then fail."""
    seed: int = 0
    """Seeds the model's initialisation, the prompts, the sampler and generation."""
    min_gain: float = 0.3
    """The gate: mean reward of the last `window` steps minus that of the first `window` steps."""
    window: int = 10
    """Steps averaged at each end of the reward curve."""
    processes: int = 1
    """1: train in this process. N > 1: `accelerate launch` N ranks (gloo on the CPU, one GPU each with NCCL)."""
    device: str = "auto"
    """auto (cuda if torch sees a GPU, else cpu), cpu, or cuda."""
    progress: bool = False
    """Show TRL's tqdm progress bar."""
    timeout: float = 600.0
    """Seconds the multi-process run may take before it is killed (and the gate fails)."""


# --- pure pieces ------------------------------------------------------------------------
def target_fraction(text: str, target: str = TARGET_CHAR) -> float:
    """Share of the characters of `text` equal to `target`; 0.0 for an empty text."""
    return text.count(target) / len(text) if text else 0.0


def char_reward(completions: list[str], **_: object) -> list[float]:
    """GRPO reward function: `target_fraction` of each completion (TRL passes the decoded
    completions, special tokens skipped, plus dataset columns and trainer state, ignored)."""
    return [target_fraction(c) for c in completions]


def window_means(rewards: list[float], window: int) -> tuple[float, float, float]:
    """(first, last, gain): the mean of the first and of the last `window` rewards, and
    last - first. Needs at least 2 * window rewards (the windows must not overlap)."""
    if window < 1 or len(rewards) < 2 * window:
        raise ValueError(f"need at least {2 * window} rewards for two windows of {window}, got {len(rewards)}")
    first = sum(rewards[:window]) / window
    last = sum(rewards[-window:]) / window
    return first, last, last - first


def make_prompts(seed: int, n: int = NUM_PROMPTS) -> list[str]:
    """`n` random lowercase strings (no spaces), the same for the same seed."""
    rng = random.Random(seed)
    letters = ALPHABET.strip()
    return ["".join(rng.choice(letters) for _ in range(rng.randint(*PROMPT_LENGTHS))) for _ in range(n)]


def state_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor in name order: name, dtype, shape, then the raw bytes."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# --- device ------------------------------------------------------------------------------
def resolve_device(device: str) -> str:
    """'cpu' or 'cuda' for --device auto|cpu|cuda; cuda without a GPU is a ConfigError."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda, but torch sees no CUDA device (use --device cpu or auto)")
    return device


def dtype_name(device: str) -> str:
    return "bf16" if device == "cuda" else "fp32"


# --- what transformers/trl touch ---------------------------------------------------------
def check_offline() -> None:
    """Fail if huggingface_hub was imported before rlhf_bench set offline mode."""
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        raise RLHFBenchError(
            "Hugging Face offline mode is off: huggingface_hub was imported before rlhf_bench "
            "(import rlhf_bench first, or set HF_HUB_OFFLINE=1)"
        )


def quiet_progress_bars(quiet: bool = True) -> None:
    """Turn off transformers' progress bars ("Loading weights", "Writing model shards")."""
    from transformers.utils import logging as hf_logging

    if quiet:
        hf_logging.disable_progress_bar()


def library_log_to(path: Path) -> None:
    """Send transformers' log records (its warnings and errors) to `path` instead of
    stderr, so the gate's own output stays one line per event; result.json names the file."""
    import logging

    from transformers.utils import logging as hf_logging

    root = logging.getLogger("transformers")
    for old in [h for h in root.handlers if getattr(h, "rlhf_bench", False)]:  # an earlier gate in this process
        root.removeHandler(old)
        old.close()
    handler = logging.FileHandler(path, mode="w")
    handler.rlhf_bench = True
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    hf_logging.disable_default_handler()
    hf_logging.add_handler(handler)


def build_tokenizer():
    """Character-level tokenizer: one token per character of ALPHABET, <bos> prepended,
    left padding with <pad>."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *ALPHABET])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK, padding_side="left"
    )


def build_model(tokenizer, seed: int):
    """A 2-layer Llama with hidden size 32 and tied embeddings, initialised under `seed`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def reward_logger():
    """A TrainerCallback that keeps the mean reward TRL logs each step (key "reward")."""
    from transformers import TrainerCallback

    class RewardLog(TrainerCallback):
        def __init__(self):
            self.rewards: list[float] = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs and logs["reward"] is not None:
                self.rewards.append(float(logs["reward"]))

    return RewardLog()


def train(cfg: RunConfig, device: str) -> dict:
    """Train one policy with GRPO; in a multi-process launch every rank calls this.

    Returns rewards (one mean per step, averaged over all ranks' completions), seconds of
    training, the final weights' digest, rank and world size. The main process saves the
    policy and the tokenizer to out_dir/policy. `device` is 'cpu' or 'cuda'.
    """
    check_offline()
    from datasets import Dataset

    if BATCH_SIZE % cfg.processes:
        raise ConfigError(f"--processes {cfg.processes} does not divide the batch of {BATCH_SIZE} completions per step")
    quiet_progress_bars(not cfg.progress)
    if device == "cpu":
        # The model is tiny: a second thread only adds synchronisation. On the busy 2-core
        # build machine 20 steps took 5.8 s with 2 threads and 0.6 s with 1.
        torch.set_num_threads(1)
    out = Path(cfg.out_dir)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, cfg.seed)
    dataset = Dataset.from_dict({"prompt": make_prompts(cfg.seed)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        trainer, log = make_trainer(cfg, device, model, tokenizer, dataset)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start

    acc = trainer.accelerator
    final = acc.unwrap_model(trainer.model)
    digest = state_digest(final.state_dict())
    if acc.is_main_process:
        save_policy(final, tokenizer, out / "policy")
    acc.wait_for_everyone()
    with contextlib.suppress(OSError):
        (out / "trainer").rmdir()  # TRL's output_dir: nothing is saved there (save_strategy "no")
    return {
        "rewards": log.rewards,
        "seconds": seconds,
        "digest": digest,
        "rank": acc.process_index,
        "world_size": acc.num_processes,
        "backend": str(acc.state.backend) if acc.num_processes > 1 else None,
        # what the libraries warned about during training, once each (kept out of the gate's output)
        "warnings": sorted({f"{w.category.__name__}: {w.message}" for w in caught}),
    }


def make_trainer(cfg: RunConfig, device: str, model, tokenizer, dataset):
    """GRPOTrainer with the gate's settings, and the RewardLog callback it reports to."""
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(Path(cfg.out_dir) / "trainer"),
        max_steps=cfg.steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        per_device_train_batch_size=BATCH_SIZE // cfg.processes,
        num_generations=NUM_GENERATIONS,
        max_completion_length=MAX_COMPLETION_LENGTH,
        temperature=1.0,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=cfg.seed,
        data_seed=cfg.seed,
        use_cpu=device == "cpu",
        bf16=device == "cuda",
        activation_checkpointing=False,  # (TRL's configs default gradient_checkpointing, its old name, to True)
        disable_tqdm=not cfg.progress,
        dataloader_num_workers=0,
        ddp_timeout=int(cfg.timeout),
        ddp_find_unused_parameters=False,  # every parameter gets a gradient; True costs a graph walk per step
    )
    log = reward_logger()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=char_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[log],
    )
    trainer.remove_callback(PrinterCallback)  # no dict per step on stdout; the result has them
    return trainer, log


POLICY_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def save_policy(model, tokenizer, path: Path) -> None:
    """save_pretrained the model and the tokenizer into `path`, and check the files are
    there: save_pretrained only logs an error (and returns) when `path` is a file."""
    if Path(path).is_dir():
        shutil.rmtree(path)  # a policy from an earlier run must not pass for this one
    try:
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    except Exception as exc:  # noqa: BLE001 - any failure here is the gate's "cannot save"
        raise PolicyError(f"saving the policy to {path} failed: {type(exc).__name__}: {exc}") from exc
    missing = [name for name in POLICY_FILES if not (Path(path) / name).is_file()]
    if missing:
        what = "is a file, not a folder" if Path(path).is_file() else "is missing files"
        raise PolicyError(f"saving the policy to {path} wrote no {', '.join(missing)}: {path} {what}")


def reload_and_generate(path: Path, device: str, prompt: str = SAMPLE_PROMPT, seed: int = 0) -> dict:
    """Load the saved policy with AutoModelForCausalLM / AutoTokenizer.from_pretrained
    (local files only), sample SAMPLE_NEW_TOKENS tokens after `prompt`; the text and how
    many tokens came out. Any failure is a PolicyError."""
    check_offline()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).to(device).eval()
        inputs = tokenizer([prompt], return_tensors="pt").to(device)
        torch.manual_seed(seed)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=SAMPLE_NEW_TOKENS, do_sample=True, top_k=0, top_p=1.0)
        new = out[0, inputs["input_ids"].shape[1] :]
        text = tokenizer.decode(new, skip_special_tokens=True)
    except Exception as exc:  # noqa: BLE001 - any failure here is the gate's "cannot reload/generate"
        raise PolicyError(f"reloading the policy from {path} and generating failed: {type(exc).__name__}: {exc}") from exc
    if new.numel() == 0:
        raise PolicyError(f"the policy reloaded from {path} generated no tokens")
    return {
        "prompt": prompt,
        "completion": text,
        "new_tokens": int(new.numel()),
        "target_fraction": target_fraction(text),
        "tokenizer_class": type(tokenizer).__name__,
        "model_class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def is_finite(values: list[float]) -> bool:
    return all(math.isfinite(v) for v in values)
