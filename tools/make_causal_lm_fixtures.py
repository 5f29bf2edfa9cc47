#!/usr/bin/env python3
"""Golden fixtures of causal-LM fine-tuning (issue 40; tests/fixtures/causal_lm/<case>/), made by
transformers and PEFT, in the style of tools/make_decoder_fixtures.py and make_peft_fixtures.py:
tiny random *ForCausalLM models, a right-padded prompt -> completion batch whose prompt tokens
are masked (-100) as TRL's completion-only training does, and for each case

    model/                 save_pretrained of the base model (fp32, eager attention)
    inputs.safetensors     input_ids, attention_mask (B, T); labels (B, T): HF's unshifted labels
                           (input_ids with prompt and padding at -100); token_labels (B, T): the
                           same shifted as transformers' ForCausalLMLoss shifts them (position t
                           holds label t + 1, the last position -100): what ftune reads
    expected.safetensors   logits (B, T, V) (soft-capped where the model caps them), loss
                           (transformers' own, model(..., labels=labels).loss: the mean over every
                           counted token of the batch), plain_loss (F.cross_entropy over the
                           materialised logits, equal to it), grad.<name> of every parameter
                           (full fine-tuning, first step); lora.grad.<name> and lora.step3.<name>
                           of the LoRA adapter (PEFT task CAUSAL_LM, every linear layer, lm_head
                           frozen) at the first step and after three torch AdamW steps (HF
                           Trainer's decay split), lora.logits, lora.losses
    adapter/               PEFT's save_pretrained of the initial adapter (the C++ test's start)
    case.json              what was made and how

Cases:
    llama_clm   LlamaForCausalLM, untied lm_head, GQA 8 / 4, mlp_bias, rope llama3
    qwen2_clm   Qwen2ForCausalLM, untied lm_head, q/k/v biases
    gemma2_clm  Gemma2ForCausalLM, tied lm_head (the embedding), attention soft-cap 3 and final
                logit soft-cap 2 (both active), sandwich norms, scaled embeddings

Also completions.json: prompt -> completion rows tokenized by the shared Llama 3 and Gemma 3
tokenizer.json files ($FTUNE_SHARED_DIR/fixtures/tokenizers) as TRL's SFTTrainer tokenizes a
prompt-completion data set (trl/trainer/sft_trainer.py tokenize_fn, restated here as TRL is not
installed): ids = tokenizer(prompt + completion) + [eos] (TRL appends eos_token to the
completion), completion mask 0 over len(tokenizer(prompt)) tokens; token_labels shifted by one.

    python tools/make_causal_lm_fixtures.py [--out tests/fixtures/causal_lm]
    python tools/make_causal_lm_fixtures.py --check DIR   # DIR/<case>/ written by test_models with
                                                          # FTUNE_CAUSAL_LM_OUT=DIR: PEFT loads
                                                          # ftune's adapter onto
                                                          # AutoModelForCausalLM and transformers
                                                          # the merged model, each giving ftune's
                                                          # logits
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import peft
import torch
import torch.nn.functional as F
import transformers
from peft import LoraConfig, PeftModel, TaskType, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Trainer,
)

REPO = Path(__file__).resolve().parents[1]
STEPS = 3
OPT = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

SIZES = dict(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=8,
             num_key_value_heads=4, head_dim=6, intermediate_size=37, max_position_embeddings=64,
             rms_norm_eps=1e-6, initializer_range=0.2, attention_dropout=0.0)
IDS = dict(pad=0, bos=1, eos=2, first_content=4)
# (prompt, completion) content lengths per row: '<bos> prompt completion <eos>', lengths 13, 8, 5, 10.
SEGMENTS = [(6, 5), (4, 2), (1, 2), (3, 5)]
BATCH, SEQ = 4, 13


def batch(seed):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.full((BATCH, SEQ), IDS["pad"], dtype=torch.int64)
    mask = torch.zeros((BATCH, SEQ), dtype=torch.int64)
    labels = torch.full((BATCH, SEQ), -100, dtype=torch.int64)
    for row, (lp, lc) in enumerate(SEGMENTS):
        p = torch.randint(IDS["first_content"], SIZES["vocab_size"], (lp,), generator=gen).tolist()
        c = torch.randint(IDS["first_content"], SIZES["vocab_size"], (lc,), generator=gen).tolist()
        prompt, completion = [IDS["bos"]] + p, c + [IDS["eos"]]
        n = len(prompt) + len(completion)
        ids[row, :n] = torch.tensor(prompt + completion)
        mask[row, :n] = 1
        labels[row, len(prompt):n] = torch.tensor(completion)  # TRL: loss on the completion only
    shifted = torch.full_like(labels, -100)
    shifted[:, :-1] = labels[:, 1:]
    return dict(input_ids=ids, attention_mask=mask), labels, shifted


def build(model_cls, config, seed):
    torch.manual_seed(seed)
    model = model_cls(config)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "norm" in name:
                offset = 0.0 if config.model_type.startswith("gemma") else 1.0
                p.copy_(offset + 0.1 * torch.randn(p.shape, generator=gen))
    model.config._attn_implementation = "eager"
    return model


def common():
    return dict(**SIZES, pad_token_id=IDS["pad"], bos_token_id=IDS["bos"], eos_token_id=IDS["eos"])


CASES = {
    "llama_clm": lambda: build(LlamaForCausalLM, LlamaConfig(
        **common(), hidden_act="silu", mlp_bias=True, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=16)), seed=21),
    "qwen2_clm": lambda: build(Qwen2ForCausalLM, Qwen2Config(
        **common(), hidden_act="silu", tie_word_embeddings=False,
        rope_parameters=dict(rope_type="default", rope_theta=1000.0)), seed=22),
    "gemma2_clm": lambda: build(Gemma2ForCausalLM, Gemma2Config(
        **{**common(), "num_key_value_heads": 2, "head_dim": 10}, hidden_activation="gelu_pytorch_tanh",
        sliding_window=4, query_pre_attn_scalar=20, attn_logit_softcapping=3.0,
        final_logit_softcapping=2.0, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0)), seed=23),
}


def plain_loss(logits, labels):
    """The loss from the materialised logits: shift, flatten, mean over labels != -100."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                           labels[:, 1:].reshape(-1), ignore_index=-100, reduction="mean")


def ftune_name(peft_key):
    n = peft_key.removeprefix("base_model.model.")
    return n.replace(".default", "")


def lora_case(case_dir, base_dir, inputs, labels, expected):
    torch.manual_seed(1234)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), attn_implementation="eager")
    pm = get_peft_model(model, LoraConfig(task_type=TaskType.CAUSAL_LM, r=4, lora_alpha=8,
                                          target_modules=LINEAR))
    gen = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:  # PEFT starts B at 0, which would leave A without gradient
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
    pm.save_pretrained(str(case_dir / "adapter"))
    pm.train()
    trainable = [(n, p) for n, p in pm.named_parameters() if p.requires_grad]
    decay = set(Trainer.get_decay_parameter_names(None, pm))
    opt = torch.optim.AdamW(
        [{"params": [p for n, p in trainable if n in decay], "weight_decay": OPT["weight_decay"]},
         {"params": [p for n, p in trainable if n not in decay], "weight_decay": 0.0}],
        lr=OPT["lr"], betas=OPT["betas"], eps=OPT["eps"], foreach=False, fused=False)
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        out = pm(**inputs, labels=labels)
        out.loss.backward()
        if step == 0:
            expected["lora.logits"] = out.logits.detach().clone()
            for n, p in trainable:
                expected[f"lora.grad.{ftune_name(n)}"] = p.grad.detach().clone()
        losses.append(out.loss.item())
        opt.step()
    for n, p in trainable:
        expected[f"lora.step3.{ftune_name(n)}"] = p.detach().clone()
    expected["lora.losses"] = torch.tensor(losses)
    return [ftune_name(n) for n, _ in trainable], [ftune_name(n) for n, _ in trainable if n not in decay], losses


def make_case(out_root, name, model):
    case_dir = out_root / name
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    model.save_pretrained(str(case_dir / "model"), safe_serialization=True)
    inputs, labels, shifted = batch(seed=200 + sorted(CASES).index(name))
    save_file({**{k: v.contiguous() for k, v in inputs.items()}, "labels": labels,
               "token_labels": shifted}, str(case_dir / "inputs.safetensors"),
              metadata={"format": "pt"})
    model.train()
    out = model(**inputs, labels=labels)
    plain = plain_loss(out.logits, labels)
    assert torch.allclose(plain, out.loss, rtol=1e-6), (plain.item(), out.loss.item())
    out.loss.backward()
    expected = {"logits": out.logits.detach(), "loss": out.loss.detach(), "plain_loss": plain.detach()}
    names = []
    for n, p in model.named_parameters():
        assert p.grad is not None, f"{name}: no gradient for {n}"
        expected[f"grad.{n}"] = p.grad.detach().clone()
        names.append(n)
    trainable, no_decay, losses = lora_case(case_dir, case_dir / "model", inputs, labels, expected)
    save_file({k: (v.reshape(1) if v.dim() == 0 else v).float().contiguous() for k, v in expected.items()},
              str(case_dir / "expected.safetensors"), metadata={"format": "pt"})
    cfg = model.config
    info = {
        "case": name,
        "architecture": type(model).__name__,
        "model_type": cfg.model_type,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "final_logit_softcapping": getattr(cfg, "final_logit_softcapping", None),
        "batch": {"format": "<bos> prompt completion <eos>, right-padded (pad 0)",
                  "segments": SEGMENTS, "labels": "prompt and padding -100 (TRL completion-only)"},
        "loss": "transformers ForCausalLMLoss: shift by one, mean over tokens != -100 of the batch",
        "full_params": names,
        "lora": {"task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "target_modules": LINEAR,
                 "init": "lora_A PEFT's kaiming (torch seed 1234); lora_B ~ 0.2 N(0,1) (seed 99)",
                 "trainable": trainable, "no_decay": no_decay, "losses": losses},
        "optimizer": {"type": "torch.optim.AdamW (foreach=False)", "lr": OPT["lr"],
                      "betas": list(OPT["betas"]), "eps": OPT["eps"], "weight_decay": OPT["weight_decay"]},
        "steps": STEPS,
        "generator": {"script": "tools/make_causal_lm_fixtures.py", "torch": torch.__version__,
                      "transformers": transformers.__version__, "peft": peft.__version__},
    }
    (case_dir / "case.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"{name}: loss {out.loss.item():.6f}, LoRA losses {losses}")


SHARED = Path(__import__("os").environ.get("FTUNE_SHARED_DIR", REPO.parent / "shared")) / "fixtures" / "tokenizers"
EOS = {"llama3": "<|end_of_text|>", "gemma3": "<eos>"}
ROWS = [("Question: is the sky blue?\nAnswer:", " yes"),
        ("Translate to French: cat =>", " chat"),
        ("", "A completion with no prompt at all."),
        ("Résumé the text «naïve café»:", " un café naïf, très bien.")]


def completions(out_root):
    from transformers import PreTrainedTokenizerFast
    cases = []
    for name, eos in EOS.items():
        tok = PreTrainedTokenizerFast(tokenizer_file=str(SHARED / f"{name}.tokenizer.json"))
        eos_id = tok.convert_tokens_to_ids(eos)
        for prompt, completion in ROWS:
            prompt_ids = tok(prompt)["input_ids"]
            ids = tok(prompt + completion)["input_ids"] + [eos_id]
            # TRL 1.16: the completion starts where the two tokenizations part
            # (trl.data_utils.common_prefix_length; the prompt's length unless tokens merge).
            n = next((k for k, (a, b) in enumerate(zip(prompt_ids, ids)) if a != b),
                     min(len(prompt_ids), len(ids)))
            mask = [0] * n + [1] * (len(ids) - n)
            labels = [i if m else -100 for i, m in zip(ids, mask)]
            cases.append({"tokenizer": name, "eos": eos, "prompt": prompt, "completion": completion,
                          "input_ids": ids, "token_labels": labels[1:] + [-100]})
    (out_root / "completions.json").write_text(json.dumps(
        {"generator": {"script": "tools/make_causal_lm_fixtures.py",
                       "transformers": transformers.__version__},
         "cases": cases}, indent=1, ensure_ascii=False) + "\n")
    print(f"completions.json: {len(cases)} rows")


def rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def check(dir_):
    """PEFT loads each adapter ftune wrote onto AutoModelForCausalLM, transformers the merged
    model: both give ftune's logits."""
    ok = True
    print(f"peft {peft.__version__}, transformers {transformers.__version__}, torch {torch.__version__}")
    for case_dir in sorted(Path(dir_).iterdir()):
        fixture = REPO / "tests" / "fixtures" / "causal_lm" / case_dir.name
        t = load_file(str(fixture / "inputs.safetensors"))
        inputs = dict(input_ids=t["input_ids"], attention_mask=t["attention_mask"])
        want = load_file(str(case_dir / "ftune_logits.safetensors"))["logits"]
        mask = inputs["attention_mask"].bool()
        base = AutoModelForCausalLM.from_pretrained(str(fixture / "model"), attn_implementation="eager")
        pm = PeftModel.from_pretrained(base, str(case_dir / "adapter"))
        assert pm.peft_config["default"].task_type == TaskType.CAUSAL_LM
        pm.eval()
        with torch.no_grad():
            got = pm(**inputs).logits
        e = rel_err(got[mask], want[mask])
        ok &= e < 1e-4
        line = f"{case_dir.name}: PEFT (CAUSAL_LM) logits of ftune's adapter vs ftune: max rel err {e:.2e}"
        merged = case_dir / "merged"
        if merged.exists():
            m = AutoModelForCausalLM.from_pretrained(str(merged), attn_implementation="eager")
            m.eval()
            with torch.no_grad():
                em = rel_err(m(**inputs).logits[mask], want[mask])
            ok &= em < 1e-4
            line += f"; merged model in AutoModelForCausalLM ({type(m).__name__}): {em:.2e}"
        print(line)
    print("OK" if ok else "FAILED")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "causal_lm"))
    ap.add_argument("--check")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if a.check:
        sys.exit(0 if check(a.check) else 1)
    for name, make in CASES.items():
        if not a.only or name in a.only:
            make_case(Path(a.out), name, make())
    if not a.only or "completions" in a.only:
        completions(Path(a.out))


if __name__ == "__main__":
    main()
