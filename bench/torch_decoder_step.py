#!/usr/bin/env python3
"""PyTorch + PEFT peer for ftune's decoder LoRA training step (train_step_bench --model llama-100m).

One step of what a practitioner's script does when LoRA-fine-tuning a Llama-shaped classifier on
the CPU: forward of LlamaForSequenceClassification wrapped by PEFT (LoRA r=16, alpha 32, dropout
0.05 on every linear layer: target_modules="all-linear", the score head trained as
modules_to_save), cross-entropy, backward, gradient clipping at 1.0, AdamW over the trained
parameters, zero_grad. The same ~100M-parameter config as ftune's (bench/bench_models.h; random
weights, no download), fp32, random token ids with every position real.

    python bench/torch_decoder_step.py --threads 2 --batch 4 --seq 128 --json
"""

import argparse
import json
import statistics

import peft
import torch
import torch.nn.functional as F
import transformers
from transformers import LlamaConfig, LlamaForSequenceClassification

from torch_train_step import time_steps  # this directory: the peer's shared timing loop


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--r", type=int, default=16)
    parser.add_argument("--lora-dropout", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--checkpointing", action="store_true", help="HF gradient checkpointing")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        num_key_value_heads=4, intermediate_size=2048, max_position_embeddings=2048,
        rms_norm_eps=1e-5, hidden_act="silu", rope_theta=10000.0, pad_token_id=0, num_labels=2,
        attn_implementation="sdpa",
    )
    model = LlamaForSequenceClassification(config)
    n_params = sum(p.numel() for p in model.parameters())
    lora = peft.LoraConfig(task_type="SEQ_CLS", r=args.r, lora_alpha=2 * args.r, lora_dropout=args.lora_dropout,
                           target_modules="all-linear")
    model = peft.get_peft_model(model, lora)
    if args.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    trained = [p for p in model.parameters() if p.requires_grad]
    try:
        optimizer = torch.optim.AdamW(trained, lr=2e-5, weight_decay=0.01, fused=True)
    except (RuntimeError, TypeError):
        optimizer = torch.optim.AdamW(trained, lr=2e-5, weight_decay=0.01, foreach=True)

    gen = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1000, config.vocab_size, (args.batch, args.seq), generator=gen)
    attention_mask = torch.ones_like(input_ids)
    labels = torch.randint(0, 2, (args.batch,), generator=gen)

    def step():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    times, cpu_times = time_steps(step, args.warmup, args.steps)
    median = statistics.median(times)
    result = {
        "impl": "pytorch+peft", "batch": args.batch, "seq": args.seq,
        "threads": torch.get_num_threads(), "params_m": round(n_params / 1e6, 1),
        "trained_m": round(sum(p.numel() for p in trained) / 1e6, 2),
        "ms_per_step": round(median * 1e3, 1), "min_ms": round(min(times) * 1e3, 1),
        "cpu_ms_per_step": round(statistics.median(cpu_times) * 1e3, 1),
        "lora_dropout": args.lora_dropout,
        "samples_per_s": round(args.batch / median, 2), "torch": torch.__version__,
        "transformers": transformers.__version__, "peft": peft.__version__,
    }
    print(f"pytorch+peft llama-100m LoRA r={args.r} {args.batch}x{args.seq} threads={result['threads']} "
          f"params={result['params_m']}M trained={result['trained_m']}M: {result['ms_per_step']} ms/step "
          f"(min {result['min_ms']})")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
