#!/usr/bin/env python3
"""Golden fixtures for ftune's LoRA / rsLoRA / DoRA adapters, made by PEFT itself
(tests/fixtures/peft/), and the check that PEFT loads what ftune writes.

The base models and the padded text-pair batches are the engine fixtures' tiny BERT and RoBERTa
(tests/fixtures/engine/{bert,roberta}_pair: random weights, all dropout 0, eager attention), so a
case here only adds the adapter. For each case PEFT's get_peft_model (task SEQ_CLS) wraps the
classifier; lora_A keeps PEFT's kaiming-uniform init (torch seed), while lora_B and DoRA's
magnitude are then perturbed (PEFT starts B at 0, which would leave A without gradient). Each
case directory holds:

    adapter/               PEFT's save_pretrained of that initial adapter (adapter_config.json,
                           adapter_model.safetensors): the C++ test loads it as its start point
    expected.safetensors   logits, loss, grad.<name> of every trainable parameter (first step),
                           step3.<name> after three torch.optim.AdamW steps (decay split as HF
                           Trainer's), losses (3)
    case.json              the adapter settings, base model, optimizer, trainable names

<name> is ftune's name: PEFT's key without "base_model.model." and the adapter name, e.g.
bert.encoder.layer.0.attention.self.query.lora_A.weight, ...lora_magnitude_vector, classifier.weight.

    python tools/make_peft_fixtures.py                 # writes tests/fixtures/peft/<case>/
    python tools/make_peft_fixtures.py --check DIR     # DIR/<case>/ written by ftune (test_models
                                                       # with FTUNE_PEFT_OUT=DIR): PEFT loads each
                                                       # adapter and must give ftune's logits; a
                                                       # merged export (DIR/<case>/merged) must
                                                       # load in transformers with the same logits
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
from transformers import AutoModelForSequenceClassification, Trainer

REPO = Path(__file__).resolve().parents[1]
ENGINE = REPO / "tests" / "fixtures" / "engine"
STEPS = 3
OPT = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

CASES = {
    # query + value only: a subset of ftune's fused QKV GEMM.
    "bert_lora": dict(base="bert_pair", r=4, lora_alpha=8, target_modules=["query", "value"]),
    # rsLoRA; "output.dense" also matches attention.output.dense (PEFT's suffix rule); the
    # pooler is trained too (modules_to_save).
    "bert_rslora": dict(base="bert_pair", r=4, lora_alpha=6, use_rslora=True,
                        target_modules=["key", "intermediate.dense", "output.dense"],
                        modules_to_save=["pooler"]),
    "bert_dora": dict(base="bert_pair", r=4, lora_alpha=8, use_dora=True,
                      target_modules=["query", "key", "value", "attention.output.dense",
                                      "intermediate.dense", "output.dense"]),
    "roberta_lora": dict(base="roberta_pair", r=4, lora_alpha=16, target_modules=["query", "key"]),
    "roberta_rslora": dict(base="roberta_pair", r=3, lora_alpha=4, use_rslora=True,
                           target_modules=["value", "attention.output.dense", "intermediate.dense"]),
    "roberta_dora": dict(base="roberta_pair", r=4, lora_alpha=8, use_dora=True,
                         target_modules=["value", "attention.output.dense", "intermediate.dense",
                                         "output.dense"]),
}


def ftune_name(peft_key):
    """PEFT parameter / state-dict name -> ftune's name."""
    n = peft_key.removeprefix("base_model.model.")
    n = n.replace(".modules_to_save.default", "").replace(".default", "")
    if n.endswith("lora_magnitude_vector.weight"):
        n = n.removesuffix(".weight")
    return n


def load_inputs(base):
    t = load_file(str(ENGINE / base / "inputs.safetensors"))
    labels = t.pop("labels")
    return t, labels


def load_base(base):
    return AutoModelForSequenceClassification.from_pretrained(
        str(ENGINE / base / "model"), attn_implementation="eager")


def make_case(out_root, name, spec):
    spec = dict(spec)
    base = spec.pop("base")
    torch.manual_seed(1234)
    model = load_base(base)
    cfg = LoraConfig(task_type=TaskType.SEQ_CLS, lora_dropout=0.0, **spec)
    pm = get_peft_model(model, cfg)
    gen = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif "lora_magnitude_vector" in n:
                p.mul_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
    case_dir = out_root / name
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    pm.save_pretrained(str(case_dir / "adapter"))

    pm.train()
    inputs, labels = load_inputs(base)
    trainable = [(n, p) for n, p in pm.named_parameters() if p.requires_grad]
    names = [ftune_name(n) for n, _ in trainable]
    decay = set(Trainer.get_decay_parameter_names(None, pm))
    groups = [
        {"params": [p for n, p in trainable if n in decay], "weight_decay": OPT["weight_decay"]},
        {"params": [p for n, p in trainable if n not in decay], "weight_decay": 0.0},
    ]
    no_decay = [ftune_name(n) for n, _ in trainable if n not in decay]
    opt = torch.optim.AdamW(groups, lr=OPT["lr"], betas=OPT["betas"], eps=OPT["eps"],
                            foreach=False, fused=False)
    expected, losses = {}, []
    for step in range(STEPS):
        opt.zero_grad()
        logits = pm(**inputs).logits
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        if step == 0:
            expected["logits"], expected["loss"] = logits.detach().clone(), loss.detach().clone()
            for n, p in trainable:
                expected[f"grad.{ftune_name(n)}"] = p.grad.detach().clone()
        losses.append(loss.item())
        opt.step()
    for n, p in trainable:
        expected[f"step3.{ftune_name(n)}"] = p.detach().clone()
    expected["losses"] = torch.tensor(losses)
    save_file({k: (v.reshape(1) if v.dim() == 0 else v).float().contiguous()
               for k, v in expected.items()},
              str(case_dir / "expected.safetensors"), metadata={"format": "pt"})
    info = {
        "case": name,
        "base": f"engine/{base}",
        "peft": {k: (list(v) if isinstance(v, (list, tuple, set)) else v) for k, v in spec.items()},
        "method": "dora" if spec.get("use_dora") else "lora",
        "scaling": next(m.scaling["default"] for m in pm.modules()
                        if isinstance(getattr(m, "scaling", None), dict)),
        "trainable": names,
        "no_decay": no_decay,
        "optimizer": {"type": "torch.optim.AdamW (foreach=False)", "lr": OPT["lr"],
                      "betas": list(OPT["betas"]), "eps": OPT["eps"],
                      "weight_decay": OPT["weight_decay"]},
        "loss": "F.cross_entropy(logits, labels), mean",
        "steps": STEPS,
        "init": "lora_A: PEFT's kaiming_uniform (torch seed 1234); lora_B ~ 0.2 * N(0,1); "
                "magnitude *= 1 + 0.1 * N(0,1) (generator seed 99)",
        "expected": "logits, loss, grad.* at step 1; step3.* after 3 AdamW steps; losses",
        "tolerance": "max relative error 1e-4 (max|got - want| / max|want|)",
        "generator": {"script": "tools/make_peft_fixtures.py", "torch": torch.__version__,
                      "transformers": transformers.__version__, "peft": peft.__version__},
    }
    (case_dir / "case.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"{name}: {len(names)} trainable tensors, loss {losses[0]:.6f} -> {losses[-1]:.6f}")


def rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def check(dir_):
    """PEFT loads every adapter ftune wrote and reproduces ftune's logits; merged exports load in
    transformers with the same logits."""
    ok = True
    print(f"peft {peft.__version__}, transformers {transformers.__version__}, torch {torch.__version__}")
    for case_dir in sorted(Path(dir_).iterdir()):
        info = json.loads((case_dir / "ftune_case.json").read_text())
        inputs, _ = load_inputs(info["base"].split("/")[-1])
        want = load_file(str(case_dir / "ftune_logits.safetensors"))["logits"]
        pm = PeftModel.from_pretrained(load_base(info["base"].split("/")[-1]),
                                       str(case_dir / "adapter"))
        pm.eval()
        with torch.no_grad():
            got = pm(**inputs).logits
        e = rel_err(got, want)
        ok &= e < 1e-4
        line = f"{case_dir.name}: PEFT logits of the ftune-written adapter vs ftune: max rel err {e:.2e}"
        merged = case_dir / "merged"
        if merged.exists():
            m = AutoModelForSequenceClassification.from_pretrained(str(merged),
                                                                   attn_implementation="eager")
            m.eval()
            with torch.no_grad():
                em = rel_err(m(**inputs).logits, want)
            ok &= em < 1e-4
            line += f"; merged HF model (merge_adapters + save_model, as ftune export --merge): {em:.2e}"
        print(line)
    print("OK" if ok else "FAILED")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "peft"))
    ap.add_argument("--check", help="directory of ftune-written adapters to load with PEFT")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.check:
        sys.exit(0 if check(a.check) else 1)
    for name, spec in CASES.items():
        make_case(Path(a.out), name, spec)


if __name__ == "__main__":
    main()
