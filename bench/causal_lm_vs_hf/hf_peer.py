#!/usr/bin/env python3
"""The transformers + PEFT peer of `ftune train` with the lora-causal-lm recipe, on the same
prompt -> completion JSONL: TRL's completion-only loss written out (tokenizer(prompt +
completion) + EOS, the tokens before the point where tokenizer(prompt) and tokenizer(prompt +
completion) part labelled -100; transformers'
ForCausalLMLoss: the mean over every counted token of the step batch), PEFT LoRA (task
CAUSAL_LM, target_modules all-linear, lm_head frozen), AdamW (torch, betas 0.9 / 0.999, eps
1e-8), gradient clipping to a global norm, transformers' get_cosine_schedule_with_warmup stepped
after each optimizer step, fp32 on the CPU with --threads threads. The training batches are
ftune's (ftune_order.py: the same rows in the same steps for the same seed), so the step-1 loss
(LoRA's B starts at zero: the base model's loss on that batch) must equal ftune's.

Writes OUT/metrics.jsonl (one line per step: step, loss, lr, grad_norm; one per evaluation:
split validation, step, loss, perplexity, tokens), OUT/scores_{untuned,tuned}.jsonl (held-out
candidate scoring as `ftune predict --candidates-field`: log p(candidate | prompt) summed over the
candidate's tokens, no EOS) and OUT/summary.json (wall times, accuracies).

    python3 bench/causal_lm_vs_hf/hf_peer.py --model DIR --data DATA_DIR --out OUT \
        [--steps 100 --batch 8 --lr 2e-4 --warmup 5 --eval-every 25 --seed 42 --threads 2]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, get_cosine_schedule_with_warmup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from ftune_order import epoch_batches  # noqa: E402
from hf_peer_causal_lm import prompt_tokens  # noqa: E402  (TRL's completion start)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def tokenize(tok, prompt, completion, eos, append_eos=True):
    ids = tok(prompt + completion)["input_ids"] + ([eos] if append_eos else [])
    n_prompt = prompt_tokens(tok(prompt)["input_ids"], ids)
    labels = [-100] * n_prompt + ids[n_prompt:]
    return ids, labels[: len(ids)]


def collate(rows, pad_id):
    T = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), T), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for i, (x, y) in enumerate(rows):
        ids[i, : len(x)] = torch.tensor(x)
        labels[i, : len(y)] = torch.tensor(y)
        mask[i, : len(x)] = 1
    return ids, labels, mask


def summed_nll(model, rows, pad_id):
    """Sum of -log p over the batch's counted tokens (labels shifted by one), and their count."""
    ids, labels, mask = collate(rows, pad_id)
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    shift = labels[:, 1:]
    lp = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), shift.reshape(-1), ignore_index=-100,
        reduction="sum")
    return lp, int((shift != -100).sum())


@torch.no_grad()
def evaluate(model, rows, pad_id, batch):
    model.eval()
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    total, n = 0.0, 0
    for b in range(0, len(order), batch):
        s, c = summed_nll(model, [rows[i] for i in order[b:b + batch]], pad_id)
        total += float(s)
        n += c
    model.train()
    return {"loss": total / n, "perplexity": math.exp(total / n), "tokens": n}


@torch.no_grad()
def score(model, tok, test, pad_id, out_path):
    """Held-out candidate scoring; returns accuracy. Each row's candidates in one batch."""
    model.eval()
    right = 0
    with open(out_path, "w") as f:
        for r in test:
            rows = [tokenize(tok, r["prompt"], c, None, append_eos=False) for c in r["candidates"]]
            ids, labels, mask = collate(rows, pad_id)
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
            logp = torch.log_softmax(logits[:, :-1], -1)
            shift = labels[:, 1:]
            keep = shift != -100
            tok_lp = logp.gather(-1, shift.clamp(min=0).unsqueeze(-1)).squeeze(-1) * keep
            ll = tok_lp.sum(1).tolist()
            best = max(range(len(ll)), key=lambda i: ll[i])
            right += int(best == r["answer"])
            f.write(json.dumps({"candidates": r["candidates"], "log_likelihoods": ll,
                                "prediction": r["candidates"][best]}) + "\n")
    model.train()
    return right / len(test)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--eval-batch", type=int, default=8)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--init-seed", type=int, default=None,
                    help="seed of the LoRA init only (default --seed): the same batches, another "
                         "init, to measure the spread LoRA's random A alone gives")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--init-adapter", default=None,
                    help="start LoRA from this PEFT adapter directory (ftune's initial adapter: "
                         "the equal-init comparison) instead of PEFT's own random init")
    ap.add_argument("--skip-untuned", action="store_true",
                    help="no untuned scoring, no step-0 validation")
    ap.add_argument("--skip-tuned", action="store_true", help="no tuned scoring (curves only)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    t_start = time.time()
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    eos = model.config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else eos
    train = [tokenize(tok, r["prompt"], r["completion"], eos)
             for r in read_jsonl(os.path.join(a.data, "train.jsonl"))]
    valid = [tokenize(tok, r["prompt"], r["completion"], eos)
             for r in read_jsonl(os.path.join(a.data, "validation.jsonl"))]
    test = read_jsonl(os.path.join(a.data, "test.jsonl"))
    summary = {"train_rows": len(train), "train_tokens": sum(len(x) for x, _ in train),
               "train_counted_tokens": sum(sum(1 for l in y[1:] if l != -100) for _, y in train)}
    print(json.dumps(summary), flush=True)
    log = open(os.path.join(a.out, "metrics.jsonl"), "w")

    def emit(j):
        log.write(json.dumps(j) + "\n")
        log.flush()
        print(json.dumps(j), flush=True)

    if not a.skip_untuned:
        t0 = time.time()
        summary["untuned_accuracy"] = score(model, tok, test, pad_id,
                                            os.path.join(a.out, "scores_untuned.jsonl"))
        summary["untuned_scoring_seconds"] = time.time() - t0
        print(f"untuned held-out accuracy {summary['untuned_accuracy']:.4f}", flush=True)
        model.eval()
        emit({"split": "validation", "step": 0, **evaluate(model, valid, pad_id, a.eval_batch)})

    t_train = time.time()
    torch.manual_seed(a.seed if a.init_seed is None else a.init_seed)  # LoRA's A (B starts at 0)
    cfg = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                     task_type="CAUSAL_LM")
    if a.init_adapter:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, a.init_adapter, is_trainable=True)
        assert model.peft_config["default"].lora_dropout == 0.0
    else:
        model = get_peft_model(model, cfg)
    summary["trainable_parameters"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    sched = get_cosine_schedule_with_warmup(opt, a.warmup, a.steps)
    per_epoch = epoch_batches([len(x) for x, _ in train], a.batch, a.seed, 0)
    step, epoch, eval_seconds = 0, 0, 0.0
    while step < a.steps:
        if step // len(per_epoch) != epoch:
            epoch = step // len(per_epoch)
            per_epoch = epoch_batches([len(x) for x, _ in train], a.batch, a.seed, epoch)
        rows = [train[i] for i in per_epoch[step % len(per_epoch)]]
        lr = sched.get_last_lr()[0]
        s, n = summed_nll(model, rows, pad_id)
        loss = s / n
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, a.max_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        emit({"step": step, "loss": float(loss.detach()), "lr": lr, "grad_norm": float(gn),
              "tokens": n, "seconds": time.time() - t_train})
        if step % a.eval_every == 0 or step == a.steps:
            t0 = time.time()
            emit({"split": "validation", "step": step, **evaluate(model, valid, pad_id, a.eval_batch)})
            eval_seconds += time.time() - t0
    summary["train_seconds"] = time.time() - t_train
    summary["train_eval_seconds"] = eval_seconds
    if not a.skip_tuned:
        t0 = time.time()
        summary["tuned_accuracy"] = score(model, tok, test, pad_id,
                                          os.path.join(a.out, "scores_tuned.jsonl"))
        summary["tuned_scoring_seconds"] = time.time() - t0
    summary["total_seconds"] = time.time() - t_start
    summary["threads"] = a.threads
    summary["versions"] = {"torch": torch.__version__,
                           "transformers": __import__("transformers").__version__,
                           "peft": __import__("peft").__version__}
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
