#!/usr/bin/env python3
"""PyTorch peer for ftune's CPU training-step benchmark.

Times what a practitioner's PyTorch script does per step when fine-tuning a BERT cross-encoder
on CPU — forward of BertForSequenceClassification, cross-entropy, backward, AdamW step,
zero_grad — so that ftune's own number has a fair reference on the same machine. The model is
randomly initialised from its config (no download), fp32, dropout 0.1 as in training, 2 labels,
random token ids with every position real (no padding). The step is identical in work to ftune's
(`ftune bench` with the same model, batch and sequence length).

    python bench/torch_train_step.py --model minilm --threads 2
    python bench/torch_train_step.py --model bert-base --batch 32 --seq 128 --steps 5 --json
    python bench/torch_train_step.py --model deberta-v3-large --batch 1 --seq 512 --autocast bf16

--autocast bf16 / fp16 runs the forward and the loss under torch.autocast (fp32 weights, AdamW on
them), as HF Trainer's bf16 / fp16 flags do.

Prints ms/step and samples/s (median over the timed steps, after warmup); --json adds one
machine-readable line starting with '{'. It also reports the process's peak resident memory
(getrusage ru_maxrss: the whole process, Python and torch included; on a CPU this is the peak that
torch has no allocator statistics for) and the resident memory before the first step, so a run
with a step or two gives HF's peak training memory next to ftune's plan (bench/deberta_memory.sh).
"""

import argparse
import json
import platform
import resource
import statistics
import time

import torch
import torch.nn.functional as F
import transformers
from transformers import (BertConfig, BertForSequenceClassification, DebertaV2Config,
                          DebertaV2ForSequenceClassification, ModernBertConfig,
                          ModernBertForSequenceClassification)

MODELS = {
    # sentence-transformers/all-MiniLM-L6-v2 is this geometry (MiniLM-L6-H384).
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    # microsoft/deberta-v3-base's config.json (eager attention: HF has no SDPA path for it).
    "deberta-v3-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "deberta-v3-large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
    # answerdotai/ModernBERT-base's config.json (22 layers, every third global, local window 128).
    "modernbert-base": dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152),
}
MODERNBERT_BASE = dict(
    vocab_size=50368, max_position_embeddings=8192, global_attn_every_n_layers=3, local_attention=128,
    global_rope_theta=160000.0, local_rope_theta=10000.0, norm_eps=1e-5, pad_token_id=50283,
    hidden_activation="gelu", classifier_activation="gelu", classifier_pooling="mean",
)
DEBERTA_V3 = dict(
    vocab_size=128100, max_position_embeddings=512, type_vocab_size=0, relative_attention=True,
    position_buckets=256, max_relative_positions=-1, pos_att_type=["p2c", "c2p"], share_att_key=True,
    norm_rel_ebd="layer_norm", position_biased_input=False, layer_norm_eps=1e-7, pooler_hidden_act="gelu",
)


def time_steps(step, warmup, steps):
    """Runs step() warmup times untimed, then `steps` times; returns the timed wall seconds and the
    process's CPU seconds (user + sys, all threads) of each."""
    for _ in range(warmup):
        step()
    times, cpu = [], []
    for _ in range(steps):
        start, cpu_start = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return times, cpu


def rss_now():
    """Resident memory of this process now (bytes), from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def make_optimizer(params, impl, lr=2e-5):
    """AdamW as a tuned CPU script would create it. 'auto' picks fused (one kernel over all
    tensors, CPU support since torch 2.4) and falls back to foreach (multi-tensor)."""
    if impl in ("auto", "fused"):
        try:
            return torch.optim.AdamW(params, lr=lr, weight_decay=0.01, fused=True), "fused"
        except (RuntimeError, TypeError):
            if impl == "fused":
                raise
    if impl in ("auto", "foreach"):
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01, foreach=True), "foreach"
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.01, foreach=False), "loop"


def main():
    parser = argparse.ArgumentParser(description="Time a PyTorch BERT classifier training step on CPU.")
    parser.add_argument("--model", choices=sorted(MODELS), default="minilm")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--optimizer", choices=["auto", "fused", "foreach", "loop"], default="auto")
    parser.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa",
                        help="HF attention implementation (sdpa is transformers' default)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--autocast", choices=["none", "bf16", "fp16"], default="none",
                        help="forward and loss under torch.autocast in this type (fp32 weights)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line with the results")
    parser.add_argument("--profile", action="store_true",
                        help="after the timed steps, one more under torch.profiler: its per-op table "
                        "(self CPU time) on stderr, next to ftune's FTUNE_PROFILE_OPS=1")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    if args.model.startswith("deberta"):
        config = DebertaV2Config(
            **DEBERTA_V3, hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
            num_labels=2, attn_implementation="eager", **MODELS[args.model],
        )
        model = DebertaV2ForSequenceClassification(config)
        args.attn = "eager"
    elif args.model.startswith("modernbert"):
        # Dropout as in fine-tuning recipes (0.1 on the MLP, attention and head); HF's padded path
        # (transformers 5 has no unpadded one without flash-attn): --attn sdpa or eager.
        config = ModernBertConfig(
            **MODERNBERT_BASE, mlp_dropout=0.1, attention_dropout=0.1, classifier_dropout=0.1,
            num_labels=2, attn_implementation=args.attn, **MODELS[args.model],
        )
        model = ModernBertForSequenceClassification(config)
    else:
        config = BertConfig(
            vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu",
            hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, num_labels=2,
            attn_implementation=args.attn, **MODELS[args.model],
        )
        model = BertForSequenceClassification(config)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    optimizer, opt_impl = make_optimizer(model.parameters(), args.optimizer)
    step_model = torch.compile(model) if args.compile else model

    gen = torch.Generator().manual_seed(args.seed + 1)
    input_ids = torch.randint(1000, config.vocab_size, (args.batch, args.seq), generator=gen)
    input_ids[:, 0] = 101  # [CLS]
    input_ids[:, -1] = 102  # [SEP]
    input_ids = input_ids.clamp(max=config.vocab_size - 1)
    token_type_ids = torch.zeros_like(input_ids)
    if getattr(config, "type_vocab_size", 0) > 1:
        token_type_ids[:, args.seq // 2:] = 1  # a text pair: second half is segment B
    attention_mask = torch.ones_like(input_ids)
    labels = torch.randint(0, 2, (args.batch,), generator=gen)

    rss_before = rss_now()
    amp_dtype = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.autocast]

    def step():
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask)
        if hasattr(config, "type_vocab_size"):  # ModernBERT reads no token types
            inputs["token_type_ids"] = token_type_ids
        with torch.autocast("cpu", dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = step_model(**inputs).logits
            loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    times, cpu_times = time_steps(step, args.warmup, args.steps)
    if args.profile:
        import sys
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40), file=sys.stderr)
    median = statistics.median(times)
    result = {
        "bench": "torch_train_step",
        "model": args.model,
        "params": n_params,
        "batch": args.batch,
        "seq": args.seq,
        "threads": torch.get_num_threads(),
        "steps": args.steps,
        "warmup": args.warmup,
        "ms_per_step": round(median * 1e3, 2),
        "ms_per_step_min": round(min(times) * 1e3, 2),
        "cpu_ms_per_step": round(statistics.median(cpu_times) * 1e3, 2),
        "samples_per_s": round(args.batch / median, 3),
        "tokens_per_s": round(args.batch * args.seq / median, 1),
        "optimizer": f"torch.optim.AdamW ({opt_impl})",
        "attn": args.attn,
        "compile": args.compile,
        "dtype": "float32" if amp_dtype is None else f"float32, autocast {args.autocast}",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu": platform.processor() or platform.machine(),
        "rss_before_first_step_bytes": rss_before,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    print(
        f"torch {args.model} ({n_params / 1e6:.1f}M params) batch {args.batch} x {args.seq}, "
        f"{result['threads']} threads, AdamW {opt_impl}, attn {args.attn}{', compiled' if args.compile else ''}: "
        f"{result['ms_per_step']:.1f} ms/step (CPU {result['cpu_ms_per_step']:.1f}), {result['samples_per_s']:.2f} samples/s, "
        f"{result['tokens_per_s']:.0f} tokens/s (median of {args.steps} steps after {args.warmup} warmup)"
    )
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
