#!/usr/bin/env python3
"""The PyTorch + Hugging Face Trainer peer of `ftune train`: fine-tunes an HF
*ForSequenceClassification (BERT; from a model directory also DeBERTa-v2/v3, ModernBERT, Llama /
Qwen decoders) on the same JSONL pairs (text, text_pair, label), with the same max_length,
effective batch, epochs / steps, linear schedule with warm-up, weight decay, gradient clipping and
seed, and every optimisation users apply by hand, each switchable and on by default: bf16 autocast
(fp16 where bf16 is missing), TF32, SDPA attention (where the model has it: --attn auto; DeBERTa
runs eagerly, as HF has no SDPA path for it), fused AdamW, torch.compile, DataLoader workers +
pinned memory + prefetch, group_by_length and dynamic padding (DataCollatorWithPadding). With --lora-r, PEFT LoRA
(task SEQ_CLS: the head trained whole) on --lora-targets, the frozen base loaded in --base-dtype
(bf16, as LoRA users load a decoder) and --gradient-checkpointing (non-reentrant), as decoder
fine-tuning scripts run. With --causal-lm, a causal LM (AutoModelForCausalLM) on prompt ->
completion rows (--fields prompt,completion), the completion learned (bench/hf_peer_causal_lm.py:
the recipe of ftune's model.task causal_lm), LoRA's task CAUSAL_LM (lm_head frozen).

  python3 bench/hf_peer_train.py --model .cache/models/all-MiniLM-L6-v2 [--max-steps N] ...
  python3 bench/hf_peer_train.py --random bert-base ...             # random init, offline
  python3 bench/hf_peer_train.py --random bert-base --write-random DIR  # write it once, exit

Prints one JSON line (last line of stdout): samples/s and real (non-pad) tokens/s over the timed
part (optimizer steps after the first --timing-warmup, which hold torch.compile's compilation;
reported separately as compile_seconds: the warm-up's time beyond as many steady steps), the
training FLOPs and MFU with ftune's BERT formula (src/train/flops.h: 6·N·T + 12·L·C·T² + 6·(C² + C·K)
per sequence at its padded length T; BERT-family models only, null for the others) and ftune's peak
table (src/train/gpu_peak_flops.json), peak
memory (torch.cuda.max_memory_allocated / max_memory_reserved; on CPU the process's peak RSS) and
the final validation accuracy. Runs on CPU too (bf16 autocast on CPU; no compile, TF32 or workers
by default there) for smoke tests. Needs torch and transformers; never part of the test suite.
"""
import argparse
import inspect
import json
import math
import os
import resource
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEAKS = os.path.join(ROOT, "src", "train", "gpu_peak_flops.json")
MINILM = os.path.join(ROOT, ".cache", "models", "all-MiniLM-L6-v2")
FIXTURE_TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "minilm")
DATA = os.path.join(ROOT, ".cache", "data", "wordnet-3k")

# Random-init shapes (vocabulary: bert-base-uncased's, which the MiniLM tokenizer uses).
RANDOM_MODELS = {
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072),
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                   intermediate_size=1536),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


# ---- FLOPs and peak: the same formula and table as ftune (src/train/flops.h) --------------------

def matmul_params(L, C, F):
    return L * (4 * C * C + 2 * C * F)


def training_flops_per_sequence(L, C, F, K, T):
    """6·N·T + 12·L·C·T² + 6·(C² + C·K): forward and backward matmul FLOPs of one sequence."""
    if T <= 0:
        return 0.0
    return 6.0 * matmul_params(L, C, F) * T + 12.0 * L * C * T * T + 6.0 * (C * C + C * K)


def name_words(name):
    words, word = set(), ""
    for c in name + " ":
        if c.isascii() and c.isalnum():
            word += c.upper()
        elif word:
            words.add(word)
            word = ""
    return words


def peak_flops(device_name, precision, tf32, table_path=PEAKS):
    """(entry name, math, FLOP/s) from ftune's table, or None (src/train/flops.cc peak_flops)."""
    with open(table_path) as f:
        table = json.load(f)
    words = name_words(device_name or "")
    if not words:
        return None
    for gpu in table["gpus"]:
        if not all(m.upper() in words for m in gpu["match"]):
            continue
        key, math_ = precision, precision + " tensor"
        if precision == "fp32":
            key, math_ = ("tf32", "tf32 tensor") if tf32 else ("fp32", "fp32")
        if gpu[key] is None:
            return None
        return gpu["name"], math_, gpu[key] * 1e12
    return None


# ---- data --------------------------------------------------------------------------------------

def read_jsonl(path, fields):
    text_f, pair_f, label_f = fields
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                rows.append((obj[text_f], obj.get(pair_f) if pair_f else None, obj[label_f]))
            except (ValueError, KeyError) as e:
                raise SystemExit("%s:%d: %s (expected a JSON object with %r, %r, %r)" %
                                 (path, n, e, text_f, pair_f, label_f))
    if not rows:
        raise SystemExit("%s: no rows" % path)
    return rows


def label_ids(rows):
    """Integer labels are their own ids (as in ftune); strings are numbered in sorted order."""
    labels = [r[2] for r in rows]
    if all(isinstance(x, int) for x in labels):
        return {x: x for x in labels}, max(labels) + 1
    names = sorted(set(str(x) for x in labels))
    return {n: i for i, n in enumerate(names)}, len(names)


def tokenize(tokenizer, rows, ids, max_length):
    texts = [r[0] for r in rows]
    pairs = [r[1] for r in rows] if rows[0][1] is not None else None
    enc = tokenizer(texts, pairs, truncation=True, max_length=max_length)
    out = []
    for i, r in enumerate(rows):
        item = {k: enc[k][i] for k in enc.keys()}
        item["labels"] = ids[r[2]] if r[2] in ids else ids[str(r[2])]
        out.append(item)
    return out


# ---- model -------------------------------------------------------------------------------------

def random_model(kind, num_labels, seed, attn, tokenizer_dir):
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    with open(os.path.join(tokenizer_dir, "tokenizer.json")) as f:
        vocab = len(json.load(f)["model"]["vocab"])
    config = BertConfig(vocab_size=vocab, max_position_embeddings=512, type_vocab_size=2,
                        num_labels=num_labels, **RANDOM_MODELS[kind])
    torch.manual_seed(seed)
    try:
        return BertForSequenceClassification(config, attn_implementation=attn)
    except TypeError:
        config._attn_implementation = attn
        return BertForSequenceClassification(config)


BERT_TYPES = ("bert", "roberta", "xlm-roberta")  # the models the FLOP formula is for


def load_model(path, attn, dtype=None, num_labels=None):
    """The model from an HF directory: a sequence classifier of num_labels, or with num_labels
    None a causal LM (AutoModelForCausalLM). attn "auto": SDPA where the model has it, else eager
    (HF refuses SDPA for models without it, e.g. DeBERTa-v2). dtype: the weights' type (None:
    fp32)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
    auto = AutoModelForCausalLM if num_labels is None else AutoModelForSequenceClassification
    kw = {} if num_labels is None else {"num_labels": num_labels}
    if dtype is not None:
        kw["dtype"] = dtype  # transformers >= 4.56 (before: torch_dtype)
    if attn != "auto":
        return auto.from_pretrained(path, attn_implementation=attn, **kw)
    try:
        return auto.from_pretrained(path, attn_implementation="sdpa", **kw)
    except (ValueError, ImportError) as e:
        print("hf_peer_train: no SDPA for this model (%s); eager attention" % str(e)[:160],
              file=sys.stderr)
        return auto.from_pretrained(path, attn_implementation="eager", **kw)


def add_lora(model, a):
    """PEFT LoRA on --lora-targets; the score / classifier head trained whole (task SEQ_CLS
    puts it in modules_to_save; a causal LM's task CAUSAL_LM leaves lm_head frozen), the adapters
    in fp32 (PEFT's autocast_adapter_dtype)."""
    from peft import LoraConfig, TaskType, get_peft_model
    targets = a.lora_targets if a.lora_targets == "all-linear" else a.lora_targets.split(",")
    task = TaskType.CAUSAL_LM if a.causal_lm else TaskType.SEQ_CLS
    config = LoraConfig(task_type=task, r=a.lora_r, lora_alpha=a.lora_alpha,
                        lora_dropout=a.lora_dropout, target_modules=targets)
    return get_peft_model(model, config)


def write_random(a):
    """The random model as an HF directory (fp32 safetensors + the tokenizer's files), so ftune
    and this script start from the same weights."""
    model = random_model(a.random, a.num_labels, a.seed, "eager", a.tokenizer)
    os.makedirs(a.write_random, exist_ok=True)
    model.save_pretrained(a.write_random, safe_serialization=True)
    for name in TOKENIZER_FILES:
        src = os.path.join(a.tokenizer, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(a.write_random, name))
    print(json.dumps({"written": a.write_random, "model": a.random, "seed": a.seed,
                      "parameters": sum(p.numel() for p in model.parameters())}))


# ---- training ----------------------------------------------------------------------------------

def supported(cls, **kwargs):
    """The keyword arguments the installed transformers accepts (they moved between versions)."""
    params = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in kwargs.items() if k in params}


def what_ran(trainer, torch, cuda):
    """What the run used, read from the objects after training rather than from the switches:
    the Trainer's mixed precision, TF32 for fp32 matmuls, the optimizer and whether it is fused,
    whether a module recomputes in backward (gradient checkpointing), the graphs torch.compile
    made (0 when nothing was compiled) and its graph breaks."""
    opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate wraps it
    out = {"mixed_precision": str(getattr(trainer.accelerator, "mixed_precision", "?")),
           "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32) if cuda else None,
           "optimizer": type(opt).__name__,
           "fused": bool(getattr(opt, "defaults", {}).get("fused")),
           "checkpointing": any(bool(getattr(m, "gradient_checkpointing", False))
                                for m in trainer.model.modules())}
    try:
        from torch._dynamo.utils import counters
        out["compiled_graphs"] = int(counters["stats"]["unique_graphs"])
        out["graph_breaks"] = int(sum(counters["graph_break"].values()))
    except (ImportError, KeyError, AttributeError):
        pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--model", help="HF model directory (default: all-MiniLM-L6-v2 in .cache)")
    src.add_argument("--random", choices=sorted(RANDOM_MODELS), help="random init of this shape")
    ap.add_argument("--tokenizer", help="tokenizer directory for --random (default: MiniLM's)")
    ap.add_argument("--write-random", metavar="DIR", help="write the --random model to DIR, exit")
    ap.add_argument("--num-labels", type=int, default=2, help="for --write-random")
    ap.add_argument("--train", default=os.path.join(DATA, "train.jsonl"))
    ap.add_argument("--validation", default=os.path.join(DATA, "validation.jsonl"))
    ap.add_argument("--eval-limit", type=int, default=0, help="evaluate the first N rows (0: all)")
    ap.add_argument("--fields", default=None,
                    help="text,text_pair,label keys (--causal-lm: prompt,completion)")
    ap.add_argument("--causal-lm", action="store_true",
                    help="a causal LM on prompt -> completion rows (bench/hf_peer_causal_lm.py)")
    ap.add_argument("--max-length", type=int, default=96)
    ap.add_argument("--batch", type=int, default=32, help="per-device micro-batch")
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--epochs", type=float, default=2)
    ap.add_argument("--max-steps", type=int, default=0, help="> 0 overrides --epochs")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--warmup-ratio", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--timing-warmup", type=int, default=10,
                    help="optimizer steps left out of the timing (compilation happens there)")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's)")
    B = argparse.BooleanOptionalAction
    ap.add_argument("--bf16", action=B, default=True, help="bf16 autocast (fp16 without bf16)")
    ap.add_argument("--tf32", action=B, default=None, help="TF32 matmuls (default: on CUDA)")
    ap.add_argument("--attn", choices=["auto", "sdpa", "eager", "flash_attention_2"], default="auto",
                    help="auto: sdpa where the model has it, else eager")
    ap.add_argument("--optim", default="adamw_torch_fused")
    ap.add_argument("--compile", action=B, default=None, help="torch.compile (default: on CUDA)")
    ap.add_argument("--workers", type=int, default=None, help="DataLoader workers (4 CUDA, 0 CPU)")
    ap.add_argument("--pin-memory", action=B, default=True)
    ap.add_argument("--prefetch", type=int, default=4, help="batches per worker prefetched")
    ap.add_argument("--group-by-length", action=B, default=True)
    ap.add_argument("--dynamic-padding", action=B, default=True,
                    help="pad each batch to its longest row (else to --max-length)")
    ap.add_argument("--lora-r", type=int, default=0, help="PEFT LoRA rank (0: full fine-tuning)")
    ap.add_argument("--lora-alpha", type=float, default=32)
    ap.add_argument("--lora-dropout", type=float, default=0.05)
    ap.add_argument("--lora-targets", default="all-linear", help="all-linear or a,b,c")
    ap.add_argument("--base-dtype", choices=["fp32", "bf16"], default="fp32",
                    help="the weights' type as loaded (bf16: the frozen base of a LoRA run)")
    ap.add_argument("--gradient-checkpointing", action=B, default=False,
                    help="recompute each layer in backward (non-reentrant)")
    ap.add_argument("--output-dir", default=None, help="Trainer output_dir (default: a temp dir)")
    ap.add_argument("--peaks", default=PEAKS, help="peak FLOP/s table (ftune's)")
    ap.add_argument("--name", help="model name in the JSON line")
    a = ap.parse_args()

    a.tokenizer = a.tokenizer or (MINILM if os.path.isdir(MINILM) else FIXTURE_TOKENIZER)
    if a.write_random:
        if not a.random:
            ap.error("--write-random needs --random bert-base|minilm")
        write_random(a)
        return 0
    if not a.random and not a.model:
        a.model = MINILM
    if a.model and not os.path.isfile(os.path.join(a.model, "config.json")):
        ap.error("--model %s: no config.json there (an HF model directory is expected)" % a.model)

    import tempfile
    import torch
    from transformers import (AutoTokenizer, DataCollatorWithPadding, Trainer, TrainerCallback,
                              TrainingArguments)
    from transformers import __version__ as tf_version

    cuda = torch.cuda.is_available() if a.device == "auto" else a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    compile_ = cuda if a.compile is None else a.compile
    tf32 = cuda if a.tf32 is None else (a.tf32 and cuda)
    workers = (4 if cuda else 0) if a.workers is None else a.workers
    bf16 = fp16 = False
    if a.bf16:
        if not cuda or torch.cuda.is_bf16_supported():
            bf16 = True
        else:
            fp16 = True
    precision = "bf16" if bf16 else "fp16" if fp16 else "fp32"

    if a.causal_lm and (a.random or not a.model):
        ap.error("--causal-lm needs --model (an HF causal LM directory)")
    fields = (a.fields or ("prompt,completion" if a.causal_lm else "text,text_pair,label")).split(",")
    if len(fields) != (2 if a.causal_lm else 3):
        ap.error("--fields: expected prompt,completion" if a.causal_lm else
                 "--fields: expected text,text_pair,label (text_pair may be empty)")
    tok_dir = a.tokenizer if a.random else a.model
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    if a.causal_lm:
        import hf_peer_causal_lm as clm
        eos = clm.eos_token_id(a.model, tokenizer)
        train_set = clm.tokenize_completions(tokenizer, clm.read_completions(a.train, fields),
                                             a.max_length, eos)
        val_rows = clm.read_completions(a.validation, fields) if a.validation else []
        val_set = (clm.tokenize_completions(tokenizer, val_rows[:a.eval_limit or None],
                                            a.max_length, eos) if val_rows else None)
        num_labels = 0
    else:
        train_rows = read_jsonl(a.train, fields)
        ids, num_labels = label_ids(train_rows)
        val_rows = read_jsonl(a.validation, fields) if a.validation else []
        if a.eval_limit > 0:
            val_rows = val_rows[:a.eval_limit]
        train_set = tokenize(tokenizer, train_rows, ids, a.max_length)
        val_set = tokenize(tokenizer, val_rows, ids, a.max_length) if val_rows else None

    if a.causal_lm:
        model = load_model(a.model, a.attn, torch.bfloat16 if a.base_dtype == "bf16" else None)
    elif a.random:
        model = random_model(a.random, num_labels, a.seed, "sdpa" if a.attn == "auto" else a.attn,
                             a.tokenizer)
    else:
        model = load_model(a.model, a.attn, torch.bfloat16 if a.base_dtype == "bf16" else None,
                           num_labels)
    if model.config.pad_token_id is None:  # decoders: batches of several rows need a pad id
        model.config.pad_token_id = tokenizer.pad_token_id
    if a.causal_lm and tokenizer.pad_token_id is None:
        tokenizer.pad_token_id = model.config.pad_token_id
    attn_used = getattr(model.config, "_attn_implementation", a.attn)
    cfg = model.config
    flops_known = cfg.model_type in BERT_TYPES
    if a.lora_r > 0:
        model = add_lora(model, a)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    L, C, F, K = (cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, num_labels)

    effective = a.batch * a.grad_accum
    steps_per_epoch = math.ceil(len(train_set) / effective)
    total_steps = a.max_steps if a.max_steps > 0 else math.ceil(a.epochs * steps_per_epoch)
    warmup_steps = math.ceil(a.warmup_ratio * total_steps)  # as ftune (train/trainer.cc)
    timing_warmup = min(a.timing_warmup, max(total_steps - 1, 0))

    out_dir = a.output_dir or tempfile.mkdtemp(prefix="hf-peer-")
    kwargs = dict(
        output_dir=out_dir, per_device_train_batch_size=a.batch,
        per_device_eval_batch_size=max(a.batch, 64), gradient_accumulation_steps=a.grad_accum,
        num_train_epochs=a.epochs, max_steps=a.max_steps if a.max_steps > 0 else -1,
        learning_rate=a.lr, lr_scheduler_type="linear", warmup_steps=warmup_steps,
        weight_decay=a.weight_decay, max_grad_norm=a.max_grad_norm, seed=a.seed, data_seed=a.seed,
        bf16=bf16, fp16=fp16, optim=a.optim, torch_compile=compile_,
        dataloader_num_workers=workers, dataloader_pin_memory=a.pin_memory and cuda,
        dataloader_persistent_workers=workers > 0, report_to="none", save_strategy="no",
        eval_strategy="no", logging_strategy="no", disable_tqdm=True, use_cpu=not cuda,
        remove_unused_columns=False)
    if a.gradient_checkpointing:
        kwargs["gradient_checkpointing"] = True
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if tf32:
        kwargs["tf32"] = True
    if workers > 0:
        kwargs["dataloader_prefetch_factor"] = a.prefetch
    params = inspect.signature(TrainingArguments.__init__).parameters
    if a.group_by_length:
        if "group_by_length" in params:
            kwargs["group_by_length"] = True
        else:  # transformers 5
            kwargs["train_sampling_strategy"] = "group_by_length"
    if "eval_strategy" not in params:
        kwargs["evaluation_strategy"] = kwargs.pop("eval_strategy")
    if "use_cpu" not in params:
        kwargs["no_cuda"] = kwargs.pop("use_cpu")
    dropped = sorted(set(kwargs) - set(params))
    if dropped:
        print("hf_peer_train: this transformers (%s) has no %s; not set" % (tf_version, dropped),
              file=sys.stderr)
    args = TrainingArguments(**supported(TrainingArguments, **kwargs))

    if a.causal_lm:
        collator = clm.CompletionCollator(tokenizer.pad_token_id,
                                          None if a.dynamic_padding else a.max_length)
    elif a.dynamic_padding:
        collator = DataCollatorWithPadding(tokenizer)
    else:
        collator = DataCollatorWithPadding(tokenizer, padding="max_length", max_length=a.max_length)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    # Work per micro-batch, split at the timing warm-up: padded FLOPs on the host (from the
    # shape), real-token sums as device tensors (no host sync inside the loop).
    def counters():
        return {"rows": 0, "padded": 0, "padded_flops": 0.0, "real": 0, "real_sq": 0}
    work = {"warmup": counters(), "timed": counters()}

    class CountingTrainer(Trainer):
        def training_step(self, model, inputs, *rest, **kw):
            w = work["timed" if self.state.global_step >= timing_warmup else "warmup"]
            rows, T = inputs["input_ids"].shape
            lens = inputs["attention_mask"].sum(dim=1)
            w["rows"] += rows
            w["padded"] += rows * T
            w["padded_flops"] += rows * training_flops_per_sequence(L, C, F, K, T)
            w["real"] = w["real"] + lens.sum()
            w["real_sq"] = w["real_sq"] + (lens * lens).sum()
            return super().training_step(model, inputs, *rest, **kw)

    marks = {}

    class Timing(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            sync()
            marks["begin"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 1:
                sync()
                marks["first"] = time.perf_counter()
            if state.global_step == timing_warmup:
                sync()
                marks["timed_from"] = time.perf_counter()
            if state.global_step == state.max_steps:
                sync()
                marks["end"] = time.perf_counter()

    def accuracy(p):
        import numpy as np
        return {"accuracy": float((np.argmax(p.predictions, axis=-1) == p.label_ids).mean())}

    trainer = CountingTrainer(model=model, args=args, train_dataset=train_set,
                              eval_dataset=val_set, data_collator=collator,
                              compute_metrics=None if a.causal_lm else accuracy,
                              callbacks=[Timing()])
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    out = trainer.train()
    sync()
    marks.setdefault("end", time.perf_counter())
    peak_alloc = torch.cuda.max_memory_allocated() if cuda else None
    evidence = what_ran(trainer, torch, cuda)
    peak_reserved = torch.cuda.max_memory_reserved() if cuda else None
    steps = trainer.state.global_step
    timed_from = marks.get("timed_from", marks["begin"])
    timed_steps = steps - (timing_warmup if "timed_from" in marks else 0)
    t = work["timed"] if "timed_from" in marks and timing_warmup > 0 else {
        k: work["timed"][k] + work["warmup"][k] for k in work["timed"]}
    timed_secs = marks["end"] - timed_from
    real = int(t["real"]) if not isinstance(t["real"], int) else t["real"]
    real_sq = int(t["real_sq"]) if not isinstance(t["real_sq"], int) else t["real_sq"]
    real_flops = (6.0 * matmul_params(L, C, F) * real + 12.0 * L * C * real_sq
                  + 6.0 * (C * C + C * K) * t["rows"])
    samples_per_s = t["rows"] / timed_secs if timed_secs > 0 else 0.0
    per_sample = t["padded_flops"] / t["rows"] if t["rows"] else 0.0
    achieved = per_sample * samples_per_s
    step_secs = timed_secs / timed_steps if timed_steps > 0 else 0.0
    warm_secs = timed_from - marks["begin"]
    excess = max(0.0, warm_secs - timing_warmup * step_secs) if "timed_from" in marks else None
    device_name = torch.cuda.get_device_name() if cuda else ""
    peak = peak_flops(device_name, precision, tf32, a.peaks) if cuda else None

    eval_metrics = trainer.evaluate() if val_set else {}
    result = {
        "impl": "hf-trainer", "model": a.name or (a.random or os.path.basename(
            os.path.normpath(a.model))),
        "device": "cuda" if cuda else "cpu", "gpu": device_name, "precision": precision,
        "tf32": tf32, "attn": attn_used, "optim": a.optim, "compile": compile_,
        "model_type": cfg.model_type, "task": "causal_lm" if a.causal_lm else "classification",
        "lora_r": a.lora_r, "base_dtype": a.base_dtype,
        "gradient_checkpointing": a.gradient_checkpointing, "trainable_params": trainable,
        "what_ran": evidence,
        "dataloader_workers": workers, "pin_memory": a.pin_memory and cuda,
        "group_by_length": a.group_by_length, "dynamic_padding": a.dynamic_padding,
        "max_length": a.max_length, "micro_batch": a.batch, "gradient_accumulation": a.grad_accum,
        "effective_batch": effective, "steps": steps, "total_steps": total_steps,
        "lr_warmup_steps": warmup_steps, "timing_warmup_steps": timing_warmup if "timed_from" in marks else 0,
        "timed_steps": timed_steps, "timed_seconds": timed_secs,
        "samples_per_s": samples_per_s, "tokens_per_s": real / timed_secs if timed_secs > 0 else 0.0,
        "padded_tokens_per_s": t["padded"] / timed_secs if timed_secs > 0 else 0.0,
        "ms_per_step": 1e3 * step_secs,
        "first_step_seconds": marks.get("first", marks["end"]) - marks["begin"],
        # The warm-up's time beyond as many steady steps: compilation (and autotuning) when
        # compiling, first-call costs otherwise.
        "warmup_excess_seconds": excess,
        "compile_seconds": excess if compile_ else None,
        "train_seconds": marks["end"] - marks["begin"],
        "flops_per_sample": per_sample if flops_known else None,
        "flops_per_sample_real": (real_flops / t["rows"] if t["rows"] else 0.0) if flops_known else None,
        "model_tflops_per_s": achieved / 1e12 if flops_known else None,
        "peak_tflops": peak[2] / 1e12 if peak else None,
        "peak": {"gpu": peak[0], "math": peak[1]} if peak else None,
        "mfu": achieved / peak[2] if peak and flops_known else None,
        "peak_memory_allocated_bytes": peak_alloc, "peak_memory_reserved_bytes": peak_reserved,
        "peak_host_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "train_loss": out.training_loss,
        "eval_accuracy": eval_metrics.get("eval_accuracy"), "eval_loss": eval_metrics.get("eval_loss"),
        "eval_rows": len(val_set) if val_set else 0,
        "torch": torch.__version__, "transformers": tf_version,
        "peft": __import__("peft").__version__ if a.lora_r > 0 else None,
    }
    if not a.output_dir:
        shutil.rmtree(out_dir, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
