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

Cases with lora_dropout > 0 use ftune's dropout masks on PEFT's side: each adapted module's
lora_dropout is replaced by the mask ftune draws for it (Philox4x32-10 keyed as src/core/philox.h:
seed DROPOUT_SEED, the module's site, the optimizer step as offset; stream index = flat index of
the module's input, ops/dropout.h), so PEFT's training step and ftune's see the same x_d. Step 0's
masks of two modules are stored (mask.<module>) for the C++ test to check the keying bit for bit.

    python tools/make_peft_fixtures.py [--cases ...]   # writes tests/fixtures/peft/<case>/
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

import numpy as np
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

DROPOUT_SEED = 5

# The decoder family's sites (models/decoder/decoder.h DecoderSite).
DECODER_SITES = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
DECODER_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# The ModernBERT family's sites (models/modernbert/modernbert.h ModernBertSite); head.dense is kind
# 0 of the
# layer past the last (NUM_LAYERS, set from the base model's config).
MODERNBERT_SITES = ["attn.Wqkv", "attn.Wo", "mlp.Wi", "mlp.Wo"]


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
    # PEFT's suffix rule: "dense" also adapts bert.pooler.dense (and every layer's dense).
    "bert_lora_pooler": dict(base="bert_pair", r=4, lora_alpha=8,
                             target_modules=["query", "value", "dense"]),
    # DoRA with adapter dropout on every linear layer, the pooler included (all-linear).
    "bert_dora_dropout": dict(base="bert_pair", r=4, lora_alpha=8, use_dora=True,
                              lora_dropout=0.25, target_modules="all-linear"),
    # RoBERTa has no pooler; "dense" leaves classifier.dense alone (modules_to_save).
    "roberta_dora_dropout": dict(base="roberta_pair", r=3, lora_alpha=6, use_dora=True,
                                 lora_dropout=0.25, target_modules=["query", "dense"]),
    # Decoders (tools/make_decoder_fixtures.py): every linear layer adapted, the score head saved
    # whole (modules_to_save); Qwen2's q/k/v biases under DoRA; DoRA with dropout on Mistral.
    "llama_lora": dict(base="llama_pair", r=4, lora_alpha=8, target_modules=DECODER_LINEAR),
    "qwen2_dora": dict(base="qwen2_pair", r=4, lora_alpha=8, use_dora=True,
                       target_modules=DECODER_LINEAR),
    "mistral_dora_dropout": dict(base="mistral_pair", r=3, lora_alpha=6, use_dora=True,
                                 lora_dropout=0.1, target_modules=DECODER_LINEAR),
    "qwen3_lora": dict(base="qwen3_pair", r=4, lora_alpha=8, target_modules=DECODER_LINEAR),
    # Gemma 2 (soft-capped attention, sandwich norms, scaled embeddings): LoRA everywhere; Gemma 3
    # (q/k norms, two RoPE bases, biases): DoRA with adapter dropout.
    "gemma2_lora": dict(base="gemma2_pair", r=4, lora_alpha=8, target_modules=DECODER_LINEAR),
    "gemma3_dora_dropout": dict(base="gemma3_pair", r=3, lora_alpha=6, use_dora=True,
                                lora_dropout=0.1, target_modules=DECODER_LINEAR),
    # The multimodal Gemma 3 (Gemma3ForSequenceClassification, model_type gemma3): PEFT's q/k/v
    # names match the SigLIP vision tower's attention too, so the adapter holds vision-tower
    # tensors (given non-zero B here) that text-only input never reaches and ftune ignores by name
    # (VISION_SIDE below).
    "gemma3_mm_lora": dict(base="gemma3_mm_pair", r=4, lora_alpha=8, target_modules=DECODER_LINEAR),
    # Gemma 1 (no sandwich norms, GeGLU, scaled embeddings): DoRA with adapter dropout.
    "gemma_dora_dropout": dict(base="gemma_pair", r=4, lora_alpha=8, use_dora=True,
                               lora_dropout=0.1, target_modules=DECODER_LINEAR),
    # DeBERTa-v3 (share_att_key): HF runs key_proj / query_proj on the relative embeddings too, so
    # their adapters act there as well.
    "deberta_v3_lora": dict(base="deberta_v3_pair", r=4, lora_alpha=8,
                            target_modules=["query_proj", "key_proj", "value_proj"]),
    # DoRA on all of q / k / v (no fused GEMM) and every dense, the pooler's included.
    "deberta_v3_dora": dict(base="deberta_v3_pair", r=4, lora_alpha=8, use_dora=True,
                            target_modules=["query_proj", "key_proj", "value_proj", "dense"]),
    # DoRA with adapter dropout everywhere: the positional calls draw their own masks.
    "deberta_v3_dora_dropout": dict(base="deberta_v3_pair", r=3, lora_alpha=6, use_dora=True,
                                    lora_dropout=0.25, target_modules="all-linear"),
    # DeBERTa-v2's separate pos_key_proj / pos_query_proj as targets; rsLoRA; pooler saved whole.
    "deberta_v2_lora": dict(base="deberta_v2_pair", r=4, lora_alpha=6, use_rslora=True,
                            target_modules=["key_proj", "pos_key_proj", "pos_query_proj",
                                            "intermediate.dense"],
                            modules_to_save=["pooler"]),
    # ModernBERT (tools/make_modernbert_fixtures.py): the fused Wqkv, "Wo" (attn.Wo and mlp.Wo by
    # PEFT's suffix rule) and Wi; DoRA with dropout on all-linear, which adapts head.dense too.
    "modernbert_lora": dict(base="modernbert_cls", r=4, lora_alpha=8, target_modules=["Wqkv", "Wo", "Wi"]),
    "modernbert_dora_dropout": dict(base="modernbert_mean", r=3, lora_alpha=6, use_dora=True,
                                    lora_dropout=0.1, target_modules="all-linear"),
}

# ftune's Philox sites of the adapters' input dropouts (models/adapters.h, classification_head.h).
SITES = ["attention.self.query", "attention.self.key", "attention.self.value",
         "attention.output.dense", "intermediate.dense", "output.dense"]


# The DeBERTa family's (models/deberta/deberta_weights.h DebertaSite): kinds 6 / 7 are also the
# streams of
# the positional calls of key_proj / query_proj under share_att_key.
DEBERTA_SITES = ["attention.self.query_proj", "attention.self.key_proj",
                 "attention.self.value_proj", "attention.output.dense", "intermediate.dense",
                 "output.dense", "attention.self.pos_key_proj", "attention.self.pos_query_proj"]
NUM_LAYERS = {"n": 0}  # the case's layer count (DeBERTa's pooler site is past the last layer)


def dropout_site(module, positional=False):
    """ftune's Philox site of the input dropout of adapted module `module` (ftune's name);
    positional: DeBERTa's call of key_proj / query_proj on the relative embeddings."""
    if module == "bert.pooler.dense":
        return 0x10002
    if module == "pooler.dense":  # DeBERTa's
        return 0x20000 + 8 * NUM_LAYERS["n"]
    if module.startswith("deberta.encoder.layer."):
        layer, site = module.removeprefix("deberta.encoder.layer.").split(".", 1)
        if positional:
            site = {"attention.self.key_proj": "attention.self.pos_key_proj",
                    "attention.self.query_proj": "attention.self.pos_query_proj"}[site]
        return 0x20000 + 8 * int(layer) + DEBERTA_SITES.index(site)
    if module == "head.dense":  # ModernBERT's
        return 0x20000 + 8 * NUM_LAYERS["n"]
    if module.startswith("model.layers."):
        layer, site = module.removeprefix("model.layers.").split(".", 1)
        kind = DECODER_SITES.index(site) if site in DECODER_SITES else MODERNBERT_SITES.index(site)
        return 0x20000 + 8 * int(layer) + kind
    layer, site = module.split(".encoder.layer.")[1].split(".", 1)
    return 0x20000 + 8 * int(layer) + SITES.index(site)


def philox_uniforms(seed, site, offset, n):
    """Uniforms of stream elements 0..n-1 of key (seed, site, offset): src/core/philox.h."""
    m32 = np.uint64(0xFFFFFFFF)
    group = np.arange((n + 3) // 4, dtype=np.uint64)
    c = [group & m32, group >> np.uint64(32), np.full_like(group, site), np.full_like(group, offset)]
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & m32, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & m32]
        k0 = (k0 + np.uint64(0x9E3779B9)) & m32
        k1 = (k1 + np.uint64(0xBB67AE85)) & m32
    words = np.stack(c, axis=1).reshape(-1)[:n]  # element 4g + j is word j of block g
    return (words >> np.uint64(8)).astype(np.float64) / 16777216.0


def ftune_mask(module, p, step, shape, positional=False):
    """ftune's dropout multipliers for `module`'s input of `shape` at optimizer step `step`."""
    n = int(np.prod(shape))
    site = dropout_site(module, positional)
    keep = philox_uniforms(DROPOUT_SEED, site, step, n) >= float(np.float32(p))
    scale = np.float32(1.0) / (np.float32(1.0) - np.float32(p))
    return torch.from_numpy(np.where(keep, scale, np.float32(0.0)).astype(np.float32).reshape(shape))


class FtuneDropout(torch.nn.Module):
    """Stands in for a LoRA layer's nn.Dropout: multiplies by ftune's mask of this step."""

    def __init__(self, module, p, clock):
        super().__init__()
        self.module, self.p, self.clock = module, p, clock

    def forward(self, x):
        if not self.training:
            return x
        # DeBERTa's key_proj / query_proj on the relative embeddings (1, 2S, C) under
        # share_att_key (the content calls see the batch, B > 1).
        positional = (self.module.endswith((".self.key_proj", ".self.query_proj"))
                      and x.dim() == 3 and x.shape[0] == 1)
        mask = ftune_mask(self.module, self.p, self.clock["step"], tuple(x.shape), positional)
        if not positional:
            self.clock.setdefault("masks", {})[self.module] = mask
        return x * mask



# Modules of a multimodal model that text-only input never runs (no gradient, no effect on the
# logits): left out of the trainable names and adapted modules ftune is compared against.
VISION_SIDE = ("vision_tower", "multi_modal_projector")


def text_side(name):
    return not any(v in name for v in VISION_SIDE)


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
    p_drop = spec.pop("lora_dropout", 0.0)
    torch.manual_seed(1234)
    model = load_base(base)
    NUM_LAYERS["n"] = model.config.get_text_config().num_hidden_layers
    cfg = LoraConfig(task_type=TaskType.SEQ_CLS, lora_dropout=p_drop, **spec)
    pm = get_peft_model(model, cfg)
    clock = {"step": 0}
    if p_drop > 0:
        for module_name, module in pm.named_modules():
            if hasattr(module, "lora_dropout") and "default" in module.lora_dropout:
                module.lora_dropout["default"] = FtuneDropout(ftune_name(module_name), p_drop, clock)
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
    trainable = [(n, p) for n, p in pm.named_parameters() if p.requires_grad and text_side(n)]
    ignored = sorted(ftune_name(n) for n, p in pm.named_parameters()
                     if p.requires_grad and not text_side(n))
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
        clock["step"] = step
        opt.zero_grad()
        logits = pm(**inputs).logits
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        if step == 0:
            expected["logits"], expected["loss"] = logits.detach().clone(), loss.detach().clone()
            for n, p in trainable:
                expected[f"grad.{ftune_name(n)}"] = p.grad.detach().clone()
            masks = clock.get("masks", {})
            for module in sorted(masks)[:1] + [m for m in masks if "pooler" in m]:
                expected[f"mask.{module}"] = masks[module]
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
        "lora_dropout": p_drop,
        "dropout_seed": DROPOUT_SEED,
        "adapted_modules": sorted({ftune_name(n).rsplit(".lora_A", 1)[0]
                                   for n, _ in pm.named_parameters()
                                   if ".lora_A." in n and text_side(n)}),
        **({"ignored_tensors": ignored} if ignored else {}),
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
        "expected": "logits, loss, grad.* at step 1; step3.* after 3 AdamW steps; losses"
                    + ("; mask.<module>: ftune's dropout multipliers of step 0" if p_drop else ""),
        "dropout": ("ftune's Philox masks (seed dropout_seed, offset = step) on each adapter's "
                    "input, in PEFT's lora_dropout" if p_drop else "none"),
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
    ap.add_argument("--cases", nargs="*", help="only these cases (default: all)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.check:
        sys.exit(0 if check(a.check) else 1)
    for name, spec in CASES.items():
        if not a.cases or name in a.cases:
            make_case(Path(a.out), name, spec)


if __name__ == "__main__":
    main()
