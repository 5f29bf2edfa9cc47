#!/usr/bin/env python3
"""Writes the golden fixtures that the C++ engine is checked against (tests/fixtures/engine/).

The oracle is the real Hugging Face stack: transformers builds tiny BERT / RoBERTa / XLM-R
sequence classifiers, torch computes their forward, loss, every parameter gradient and three
AdamW steps with HF Trainer's parameter groups, LR schedules and gradient clipping. Each case
directory holds everything a C++ test needs to replay it without Python:

    model/                 the HF checkpoint exactly as save_pretrained writes it
    inputs.safetensors     input_ids, token_type_ids, attention_mask (int64 [B, T]), labels (int64 [B])
    expected.safetensors   float32 tensors: logits, hidden, loss, grad.<name>, losses, grad_norms,
                           lrs, step3.<name> (training cases) or logits/hidden only (loading cases)
    case.json              model, batch, loss, optimizer, clipping and schedule settings, and for
                           loading cases what HF reported (missing / unexpected keys)

Everything is fp32 on CPU, single-threaded and deterministic, with eager attention and all
dropout probabilities 0, so the numbers do not depend on the machine that made them. CI never
installs torch: run this on a development machine (see tools/requirements-dev.txt) and commit
the output:

    python tools/make_engine_fixtures.py [--out tests/fixtures/engine]
"""

import argparse
import json
import math
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertModel,
    RobertaConfig,
    RobertaForSequenceClassification,
    RobertaModel,
    Trainer,
    XLMRobertaConfig,
    XLMRobertaForSequenceClassification,
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
    get_linear_schedule_with_warmup,
)

REPO = Path(__file__).resolve().parents[1]

# One tiny geometry for every case: small enough that a case is a few hundred KB, odd sizes
# (intermediate 37, vocab 97) so that a wrong stride or a square-matrix assumption shows.
SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=40,
    layer_norm_eps=1e-12,
    initializer_range=0.2,  # larger than HF's 0.02 so that activations and gradients are not tiny
)
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0)
STEPS = 3
BATCH, SEQ = 4, 13

# Special token ids of the tiny vocabularies (content tokens are drawn above them).
BERT_IDS = dict(pad=0, unk=1, cls=2, sep=3, first_content=5)
ROBERTA_IDS = dict(bos=0, pad=1, eos=2, unk=3, first_content=4)

# (len(a), len(b)) per row: real lengths 13, 9, 6, 10 in both formats, so row 0 fills T.
BERT_SEGMENTS = [(5, 5), (3, 3), (2, 1), (4, 3)]
ROBERTA_SEGMENTS = [(5, 4), (2, 3), (1, 1), (3, 3)]

FORMULAS = {
    "loss": (
        "PyTorch F.cross_entropy(logits, y, weight=w, label_smoothing=e, reduction='mean'): "
        "with logp = log_softmax(logits), W = sum_i w[y_i], "
        "loss = (1-e) * sum_i w[y_i]*(-logp[i,y_i]) / W + (e/K) * sum_i sum_c w[c]*(-logp[i,c]) / W; "
        "w = 1 when class_weights is null"
    ),
    "grad_clip": (
        "torch.nn.utils.clip_grad_norm_: total = sqrt(sum over all params of sum(g^2)); "
        "coef = min(1, max_norm / (total + 1e-6)); g *= coef (grad_norms records total, pre-clip)"
    ),
    "adamw": (
        "torch.optim.AdamW (foreach=False, fused=False), step t = 1, 2, ...: "
        "p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; "
        "p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps); "
        "wd = weight_decay for every parameter not in no_decay, 0 for those in it; "
        "every parameter is updated every step, including embedding rows that got no gradient"
    ),
    "linear": "HF get_linear_schedule_with_warmup: lr_k = lr * (k/warmup if k < warmup else max(0, (total-k)/(total-warmup))), k = 0-based step",
    "cosine": "HF get_cosine_schedule_with_warmup (num_cycles 0.5): lr_k = lr * (k/warmup if k < warmup else max(0, 0.5*(1+cos(pi*(k-warmup)/(total-warmup))))), k = 0-based step",
    "constant_with_warmup": "HF get_constant_schedule_with_warmup: lr_k = lr * (k/warmup if k < warmup else 1), k = 0-based step",
}
SCHEDULES = {
    "linear": lambda opt, warmup, total: get_linear_schedule_with_warmup(opt, warmup, total),
    "cosine": lambda opt, warmup, total: get_cosine_schedule_with_warmup(opt, warmup, total),
    "constant_with_warmup": lambda opt, warmup, total: get_constant_schedule_with_warmup(opt, warmup),
}
INIT_NOTE = (
    "HF _init_weights (normal(0, initializer_range) for Linear/Embedding weights, padding_idx rows 0), "
    "then every bias ~ normal(0, 0.1) and every LayerNorm weight ~ 1 + normal(0, 0.1), so that a "
    "swapped or dropped bias / LayerNorm affine shows in the logits"
)


# ----------------------------------------------------------------------------- inputs


def pair_batch(family, segments, seed):
    """Builds right-padded text-pair input ids with random content tokens.

    BERT:    [CLS] a [SEP] b [SEP]      token_type_ids 0 for '[CLS] a [SEP]', 1 for 'b [SEP]'
    RoBERTa: <s> a </s></s> b </s>      token_type_ids all 0 (type_vocab_size 1)
    """
    gen = torch.Generator().manual_seed(seed)
    ids = BERT_IDS if family == "bert" else ROBERTA_IDS
    input_ids = torch.full((BATCH, SEQ), ids["pad"], dtype=torch.int64)
    token_type_ids = torch.zeros((BATCH, SEQ), dtype=torch.int64)
    attention_mask = torch.zeros((BATCH, SEQ), dtype=torch.int64)
    lengths = []
    for row, (len_a, len_b) in enumerate(segments):
        a = torch.randint(ids["first_content"], SIZES["vocab_size"], (len_a,), generator=gen).tolist()
        b = torch.randint(ids["first_content"], SIZES["vocab_size"], (len_b,), generator=gen).tolist()
        if family == "bert":
            first = [ids["cls"]] + a + [ids["sep"]]
            second = b + [ids["sep"]]
            types = [0] * len(first) + [1] * len(second)
        else:
            first = [ids["bos"]] + a + [ids["eos"]]
            second = [ids["eos"]] + b + [ids["eos"]]
            types = [0] * (len(first) + len(second))
        row_ids = first + second
        n = len(row_ids)
        assert n <= SEQ
        input_ids[row, :n] = torch.tensor(row_ids)
        token_type_ids[row, :n] = torch.tensor(types)
        attention_mask[row, :n] = 1
        lengths.append(n)
    return dict(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask), lengths


def batch_info(family, lengths):
    ids = BERT_IDS if family == "bert" else ROBERTA_IDS
    fmt = "[CLS] a [SEP] b [SEP]" if family == "bert" else "<s> a </s></s> b </s>"
    return {
        "batch_size": BATCH,
        "seq_len": SEQ,
        "real_lengths": lengths,
        "format": fmt,
        "padding": "right",
        "special_ids": {k: v for k, v in ids.items() if k != "first_content"},
        "embedding_padding_idx": (
            f"word_embeddings{'' if family == 'bert' else ' and position_embeddings'} are nn.Embedding("
            f"padding_idx={ids['pad']}): that row starts at 0 and never receives a gradient"
        ),
        "position_ids": (
            "0..T-1 for every row (padded positions included)"
            if family == "bert"
            else "HF create_position_ids_from_input_ids: m = (input_ids != pad); "
            "pos = cumsum(m) * m + pad, so real tokens get pad+1, pad+2, ... and padding gets pad"
        ),
    }


# ----------------------------------------------------------------------------- models


def bert_config(num_labels, **extra):
    return BertConfig(
        **SIZES, **NO_DROPOUT, type_vocab_size=2, hidden_act="gelu", pad_token_id=BERT_IDS["pad"],
        num_labels=num_labels, **extra
    )


def roberta_config(config_cls, hidden_act, num_labels, **extra):
    return config_cls(
        **SIZES, **NO_DROPOUT, type_vocab_size=1, hidden_act=hidden_act,
        pad_token_id=ROBERTA_IDS["pad"], bos_token_id=ROBERTA_IDS["bos"], eos_token_id=ROBERTA_IDS["eos"],
        num_labels=num_labels, **extra
    )


def build(model_cls, config, seed, **kwargs):
    """Constructs a model with HF's own initialisation, then gives biases and LayerNorm weights
    non-trivial values (HF sets them to exactly 0 and 1)."""
    torch.manual_seed(seed)
    model = model_cls(config, **kwargs)
    gen = torch.Generator().manual_seed(seed + 1)
    layer_norm_weights = {
        f"{mod_name}.weight" if mod_name else "weight"
        for mod_name, mod in model.named_modules()
        if isinstance(mod, torch.nn.LayerNorm)
    }
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif name in layer_norm_weights:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
    assert model.config._attn_implementation == "eager"
    return model


def no_decay_names(model):
    """HF Trainer's grouping: everything inside a LayerNorm, and every name with 'bias' (or a
    norm pattern), gets weight decay 0. Uses transformers' own function so it stays in step."""
    decay = set(Trainer.get_decay_parameter_names(None, model))
    return [n for n, _ in model.named_parameters() if n not in decay]


def forward(model, inputs):
    """Logits and the encoder's last hidden state (all positions, padded ones too)."""
    out = model(**inputs, output_hidden_states=True)
    return out.logits, out.hidden_states[-1]


# ----------------------------------------------------------------------------- loss


def cross_entropy(logits, labels, class_weights, label_smoothing):
    weight = None if class_weights is None else torch.tensor(class_weights, dtype=torch.float32)
    loss = F.cross_entropy(logits, labels, weight=weight, label_smoothing=label_smoothing)
    # The formula written into case.json, checked here against PyTorch so that it is the truth.
    k = logits.shape[1]
    w = torch.ones(k) if weight is None else weight
    logp = torch.log_softmax(logits.detach().double(), dim=1)
    wy = w.double()[labels]
    nll = -(wy * logp[torch.arange(len(labels)), labels]).sum() / wy.sum()
    smooth = -(w.double()[None, :] * logp).sum() / wy.sum() / k
    explicit = (1 - label_smoothing) * nll + label_smoothing * smooth
    assert abs(explicit.item() - loss.item()) <= 1e-6 * max(1.0, abs(loss.item())), (explicit, loss)
    return loss


# ----------------------------------------------------------------------------- writing


def write_inputs(case_dir, inputs, labels):
    tensors = {k: v.contiguous() for k, v in inputs.items()}
    tensors["labels"] = labels.contiguous()
    save_file(tensors, str(case_dir / "inputs.safetensors"), metadata={"format": "pt"})


def write_expected(case_dir, tensors):
    out = {}
    for name, t in tensors.items():
        t = t.detach().to(torch.float32).contiguous()
        out[name] = t.reshape(1) if t.dim() == 0 else t
    save_file(out, str(case_dir / "expected.safetensors"), metadata={"format": "pt"})


def write_case_json(case_dir, info):
    check_saved_config(case_dir / "model")
    info["generator"] = {
        "script": "tools/make_engine_fixtures.py",
        "torch": torch.__version__.split("+")[0],
        "transformers": transformers.__version__,
    }
    (case_dir / "case.json").write_text(json.dumps(info, indent=2) + "\n")


def fresh_dir(path):
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def check_saved_config(model_dir):
    """The fixtures rely on dropout 0 being what config.json says, not just what ran."""
    saved = json.loads((model_dir / "config.json").read_text())
    assert all(saved[k] == 0.0 for k in NO_DROPOUT), {k: saved.get(k) for k in NO_DROPOUT}


def safetensors_dtypes(model_dir):
    dtypes = set()
    for f in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for key in st.keys():
                dtypes.add(st.get_slice(key).get_dtype())
    return dtypes


def model_common(model, config):
    return {
        "model_type": config.model_type,
        "architecture": type(model).__name__,
        "hidden_act": config.hidden_act,
        "num_labels": config.num_labels,
        "attn_implementation": "eager",
        "dropout": "all 0.0 (saved so in model/config.json)",
        "init": INIT_NOTE,
    }


# ----------------------------------------------------------------------------- training cases


def train_steps(name, model, inputs, labels, loss_cfg, opt_cfg, max_grad_norm, sched_cfg, forward_fn):
    """STEPS steps of HF Trainer's AdamW (its decay groups), clipping and schedule on one batch:
    the expected tensors (logits, hidden, loss and grad.<name> of step 1; step3.<name>; losses,
    grad_norms, lrs per step) with the per-step lists, the parameter names and the no-decay ones."""
    model.train()  # dropout probabilities are all 0, so train mode is deterministic
    param_names = [n for n, p in model.named_parameters() if p.requires_grad]  # frozen: not compared
    no_decay = no_decay_names(model)
    params = dict(model.named_parameters())
    groups = [
        {"params": [params[n] for n in param_names if n not in no_decay], "weight_decay": opt_cfg["weight_decay"]},
        {"params": [params[n] for n in param_names if n in no_decay], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(
        groups, lr=opt_cfg["lr"], betas=tuple(opt_cfg["betas"]), eps=opt_cfg["eps"], foreach=False, fused=False
    )
    scheduler = SCHEDULES[sched_cfg["type"]](optimizer, sched_cfg["warmup_steps"], sched_cfg["total_steps"])

    expected, losses, grad_norms, lrs = {}, [], [], []
    for step in range(STEPS):
        lrs.append(optimizer.param_groups[0]["lr"])
        logits, hidden = forward_fn(model, inputs)
        loss = cross_entropy(logits, labels, loss_cfg["class_weights"], loss_cfg["label_smoothing"])
        loss.backward()
        if step == 0:
            expected["logits"], expected["hidden"], expected["loss"] = logits, hidden, loss
            for n in param_names:
                assert params[n].grad is not None, f"{name}: no gradient for {n}"
                expected[f"grad.{n}"] = params[n].grad.clone()
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm, foreach=False)
        losses.append(loss.item())
        grad_norms.append(total.item())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    for n in param_names:
        expected[f"step3.{n}"] = params[n].detach().clone()
    expected["losses"] = torch.tensor(losses)
    expected["grad_norms"] = torch.tensor(grad_norms)
    expected["lrs"] = torch.tensor(lrs)
    return expected, losses, grad_norms, lrs, param_names, no_decay


def training_case(out_root, name, model, inputs, lengths, family, labels, loss_cfg, opt_cfg, max_grad_norm, sched_cfg,
                  zero_grad_suffixes=("attention.self.key.bias",)):
    """Forward, loss, gradients and three optimizer steps of `model` on one fixed batch.

    zero_grad_suffixes: the parameters whose gradient is 0 in exact arithmetic (a bias that adds
    the same amount to every score of a query row; see below)."""
    case_dir = fresh_dir(out_root / name)
    model.save_pretrained(str(case_dir / "model"), safe_serialization=True)
    write_inputs(case_dir, inputs, labels)

    expected, losses, grad_norms, lrs, param_names, no_decay = train_steps(
        name, model, inputs, labels, loss_cfg, opt_cfg, max_grad_norm, sched_cfg, forward)
    write_expected(case_dir, expected)

    # Replay check: the saved checkpoint reproduces the initial logits.
    reloaded = type(model).from_pretrained(str(case_dir / "model"), dtype=torch.float32, attn_implementation="eager")
    reloaded.train()
    with torch.no_grad():
        again, _ = forward(reloaded, inputs)
    assert torch.equal(again, expected["logits"].detach()), f"{name}: reload does not reproduce logits"

    # Key biases: each adds q.b_k to every score in a query's row and softmax ignores a shift, so
    # their gradient is exactly 0 in exact arithmetic. fp32 leaves roundoff (~1e-9), and Adam
    # scales that noise to updates of up to ~lr, so neither their gradients nor their step-3
    # values can be matched by another implementation with a relative tolerance.
    noise = [n for n in param_names if n.endswith(tuple(zero_grad_suffixes))]
    largest_grad = max(expected[f"grad.{n}"].abs().max().item() for n in param_names)
    assert all(expected[f"grad.{n}"].abs().max().item() < 1e-6 * largest_grad for n in noise), noise

    info = {"case": name, **model_common(model, model.config)}
    info.update(
        {
            "batch": batch_info(family, lengths),
            "loss": {**loss_cfg, "reduction": "mean", "computed": "outside the model", "formula": FORMULAS["loss"]},
            "optimizer": {"type": "adamw", **opt_cfg, "no_decay": no_decay, "formula": FORMULAS["adamw"]},
            "max_grad_norm": max_grad_norm,
            "grad_clip": {"formula": FORMULAS["grad_clip"], "clipped": [g > max_grad_norm for g in grad_norms]},
            "schedule": {**sched_cfg, "formula": FORMULAS[sched_cfg["type"]]},
            "steps": STEPS,
            "loop": "same batch each step: forward -> loss -> backward -> clip_grad_norm_ -> optimizer.step -> scheduler.step -> zero_grad",
            "losses": losses,
            "grad_norms": grad_norms,
            "lrs": lrs,
            "param_names": param_names,
            "expected": (
                "logits, hidden, loss: initial model, step 1 forward; grad.<name>: gradients of that loss "
                "before clipping; losses/grad_norms/lrs: per step; step3.<name>: parameters after 3 steps"
            ),
            "suggested_tolerance": {
                "rel": 1e-4,
                "rel_means": "max|got - expected| / max|expected| per tensor",
                "measured": "a float64 replay of this case is within 1.2e-5 of every tensor except those in analytically_zero_grads",
            },
            "analytically_zero_grads": {
                "names": noise,
                "why": (
                    "a key bias adds q.b_k to all scores of a query row and softmax is shift-invariant, so the "
                    "exact gradient is 0; fp32 roundoff leaves ~1e-9 noise, which Adam turns into updates of up to ~lr"
                ),
                "compare": {
                    "grad": "abs <= 1e-6",
                    "step3": "abs <= 2 * sum(lrs) around the expected value (weight decay is deterministic, the Adam part is noise)",
                },
            },
        }
    )
    write_case_json(case_dir, info)
    return expected


# ----------------------------------------------------------------------------- loading cases


def rounded_weights_case(out_root, name, model, dtype, inputs, labels, lengths, reference_logits):
    """The model stored in bf16 / f16; expected = fp32 forward of the rounded weights."""
    case_dir = fresh_dir(out_root / name)
    low = type(model)(model.config)
    low.load_state_dict(model.state_dict())
    low.to(dtype).save_pretrained(str(case_dir / "model"), safe_serialization=True)
    st_dtype = {torch.bfloat16: "BF16", torch.float16: "F16"}[dtype]
    assert safetensors_dtypes(case_dir / "model") == {st_dtype}, safetensors_dtypes(case_dir / "model")
    write_inputs(case_dir, inputs, labels)

    # transformers 5 loads with dtype="auto" by default (it would give a bf16 / f16 model):
    # ask for fp32 to get the rounded weights widened back.
    loaded = type(model).from_pretrained(str(case_dir / "model"), dtype=torch.float32, attn_implementation="eager")
    for n, p in loaded.named_parameters():
        assert torch.equal(p, dict(model.named_parameters())[n].detach().to(dtype).float()), n
    loaded.eval()
    with torch.no_grad():
        logits, hidden = forward(loaded, inputs)
    write_expected(case_dir, {"logits": logits, "hidden": hidden})
    diff = (logits - reference_logits).abs().max().item()

    info = {"case": name, **model_common(model, model.config)}
    info.update(
        {
            "batch": batch_info("bert", lengths),
            "stored_dtype": st_dtype,
            "config_dtype": json.loads((case_dir / "model" / "config.json").read_text()).get("dtype"),
            "expected": "logits, hidden: fp32 forward (eval) of the stored weights widened to fp32",
            "max_abs_logit_change_vs_fp32_model": diff,
            "same_initial_weights_as": "bert_pair",
            "suggested_tolerance": {"rel": 1e-4},
        }
    )
    write_case_json(case_dir, info)


def sharded_case(out_root, name, model, inputs, labels, lengths, reference):
    case_dir = fresh_dir(out_root / name)
    model.save_pretrained(str(case_dir / "model"), safe_serialization=True, max_shard_size="24KB")
    shards = sorted(p.name for p in (case_dir / "model").glob("*.safetensors"))
    index = case_dir / "model" / "model.safetensors.index.json"
    assert len(shards) >= 3 and index.exists(), shards
    write_inputs(case_dir, inputs, labels)
    loaded = type(model).from_pretrained(str(case_dir / "model"), dtype=torch.float32, attn_implementation="eager")
    loaded.eval()
    with torch.no_grad():
        logits, hidden = forward(loaded, inputs)
    assert torch.equal(logits, reference["logits"].detach()) and torch.equal(hidden, reference["hidden"].detach())
    write_expected(case_dir, {"logits": logits, "hidden": hidden})
    info = {"case": name, **model_common(model, model.config)}
    info.update(
        {
            "batch": batch_info("bert", lengths),
            "shards": shards,
            "index": "model.safetensors.index.json",
            "expected": "logits, hidden: identical to bert_pair's",
            "same_initial_weights_as": "bert_pair",
            "suggested_tolerance": {"rel": 1e-4},
        }
    )
    write_case_json(case_dir, info)


def head_init_description(model, head_names):
    """What HF put into the parameters it had to create: checks the documented rule."""
    params = dict(model.named_parameters())
    rng = model.config.initializer_range
    out = {}
    for n in sorted(head_names):
        p = params[n].detach()
        if n.endswith("bias"):
            assert torch.count_nonzero(p) == 0, n
            out[n] = "zeros"
        else:
            assert abs(p.mean().item()) < rng and 0.5 * rng < p.std().item() < 1.5 * rng, (n, p.std())
            out[n] = f"normal(0, initializer_range={rng}) from torch's global RNG (not reproducible in C++)"
    return out


def base_encoder_case(out_root, name, base_model, cls_model_cls, family, inputs, labels, lengths):
    """A base checkpoint (no head) loaded into a sequence classifier: HF must report the head as
    missing and initialise it; the encoder output does not depend on the head."""
    case_dir = fresh_dir(out_root / name)
    base_model.save_pretrained(str(case_dir / "model"), safe_serialization=True)
    write_inputs(case_dir, inputs, labels)
    base_model.eval()
    with torch.no_grad():
        hidden = base_model(**inputs).last_hidden_state

    torch.manual_seed(1234)
    loaded, loading = cls_model_cls.from_pretrained(
        str(case_dir / "model"), num_labels=2, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    loaded.eval()
    with torch.no_grad():
        _, hidden_loaded = forward(loaded, inputs)
    assert torch.equal(hidden, hidden_loaded), f"{name}: encoder output changed by loading"
    write_expected(case_dir, {"hidden": hidden})

    with safe_open(str(case_dir / "model" / "model.safetensors"), "pt") as st:
        keys = sorted(st.keys())
    info = {"case": name, **model_common(base_model, base_model.config)}
    info.update(
        {
            "load_as": cls_model_cls.__name__,
            "load_num_labels": 2,
            "batch": batch_info(family, lengths),
            "checkpoint_keys_have_prefix": any(k.startswith(loaded.base_model_prefix + ".") for k in keys),
            "base_model_prefix": loaded.base_model_prefix,
            "missing_keys": sorted(loading["missing_keys"]),
            "unexpected_keys": sorted(loading["unexpected_keys"]),
            "mismatched_keys": sorted(loading["mismatched_keys"]),
            "head_initialised": True,
            "head_init": head_init_description(loaded, loading["missing_keys"]),
            "expected": "hidden: encoder last_hidden_state (eval), independent of the new head",
            "suggested_tolerance": {"rel": 1e-4},
        }
    )
    write_case_json(case_dir, info)


def tied_mlm_case(out_root, name, mlm_model, inputs, labels, lengths):
    """A masked-LM checkpoint (BertForMaskedLM: no pooler, an MLM head whose decoder weight is
    tied to the word embeddings, so save_pretrained stores it once) loaded into a classifier: the
    MLM head is unexpected, the pooler and classifier are missing and initialised."""
    case_dir = fresh_dir(out_root / name)
    mlm_model.save_pretrained(str(case_dir / "model"), safe_serialization=True)
    write_inputs(case_dir, inputs, labels)
    with safe_open(str(case_dir / "model" / "model.safetensors"), "pt") as st:
        keys = sorted(st.keys())
    assert "cls.predictions.decoder.weight" not in keys, "tied decoder weight was stored"
    mlm_model.eval()
    with torch.no_grad():
        hidden = mlm_model.bert(**inputs).last_hidden_state
    torch.manual_seed(1234)
    loaded, loading = BertForSequenceClassification.from_pretrained(
        str(case_dir / "model"), num_labels=2, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    loaded.eval()
    with torch.no_grad():
        _, hidden_loaded = forward(loaded, inputs)
    assert torch.equal(hidden, hidden_loaded), f"{name}: encoder output changed by loading"
    write_expected(case_dir, {"hidden": hidden})
    info = {"case": name, **model_common(mlm_model, mlm_model.config)}
    info.update(
        {
            "load_as": "BertForSequenceClassification",
            "load_num_labels": 2,
            "batch": batch_info("bert", lengths),
            "keys_in_file": keys,
            "tied": {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight (not stored)"},
            "missing_keys": sorted(loading["missing_keys"]),
            "unexpected_keys": sorted(loading["unexpected_keys"]),
            "mismatched_keys": sorted(loading["mismatched_keys"]),
            "head_initialised": True,
            "expected": "hidden: encoder last_hidden_state (eval), independent of the new head",
            "suggested_tolerance": {"rel": 1e-4},
        }
    )
    write_case_json(case_dir, info)


def prefixless_case(out_root, name, base_model, inputs, labels, lengths):
    """A sentence-transformers style BertModel checkpoint: keys without 'bert.' and a legacy
    int64 embeddings.position_ids buffer in the file."""
    case_dir = fresh_dir(out_root / name)
    model_dir = case_dir / "model"
    base_model.save_pretrained(str(model_dir), safe_serialization=True)
    path = model_dir / "model.safetensors"
    tensors = load_file(str(path))
    assert not any(k.startswith("bert.") for k in tensors)
    n_pos = base_model.config.max_position_embeddings
    tensors["embeddings.position_ids"] = torch.arange(n_pos, dtype=torch.int64).unsqueeze(0)
    save_file(tensors, str(path), metadata={"format": "pt"})
    write_inputs(case_dir, inputs, labels)

    base_model.eval()
    with torch.no_grad():
        hidden = base_model(**inputs).last_hidden_state
    loaded, loading = BertModel.from_pretrained(
        str(model_dir), dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    loaded.eval()
    with torch.no_grad():
        assert torch.equal(loaded(**inputs).last_hidden_state, hidden)
    torch.manual_seed(1234)
    _, cls_loading = BertForSequenceClassification.from_pretrained(
        str(model_dir), num_labels=2, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    write_expected(case_dir, {"hidden": hidden})

    info = {"case": name, **model_common(base_model, base_model.config)}
    info.update(
        {
            "batch": batch_info("bert", lengths),
            "checkpoint_keys_have_prefix": False,
            "legacy_keys_in_file": {"embeddings.position_ids": {"dtype": "I64", "shape": [1, n_pos]}},
            "as_BertModel": {
                "missing_keys": sorted(loading["missing_keys"]),
                "unexpected_keys": sorted(loading["unexpected_keys"]),
                "note": "HF ignores embeddings.position_ids silently (not even reported as unexpected)",
            },
            "as_BertForSequenceClassification": {
                "missing_keys": sorted(cls_loading["missing_keys"]),
                "unexpected_keys": sorted(cls_loading["unexpected_keys"]),
                "head_initialised": True,
            },
            "expected": "hidden: BertModel last_hidden_state (eval)",
            "suggested_tolerance": {"rel": 1e-4},
        }
    )
    write_case_json(case_dir, info)


# ----------------------------------------------------------------------------- main


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "engine")
    args = parser.parse_args()

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    # 1. BERT, text pairs, weighted + smoothed loss, linear schedule, clipping active.
    bert_inputs, bert_lengths = pair_batch("bert", BERT_SEGMENTS, seed=11)
    bert_labels = torch.tensor([0, 2, 1, 2])
    bert = build(BertForSequenceClassification, bert_config(num_labels=3, attn_implementation="eager"), seed=1)
    bert_initial = {k: v.clone() for k, v in bert.state_dict().items()}
    bert_expected = training_case(
        out, "bert_pair", bert, bert_inputs, bert_lengths, "bert", bert_labels,
        loss_cfg={"class_weights": [1.0, 2.0, 0.5], "label_smoothing": 0.1},
        opt_cfg={"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01},
        max_grad_norm=0.5,
        sched_cfg={"type": "linear", "warmup_steps": 2, "total_steps": 10},
    )
    assert bert_expected["grad_norms"][0] > 0.5, "clipping must be active on step 1"

    # 2. RoBERTa: gelu_new, position ids from input_ids, pad id 1, cosine schedule.
    rob_inputs, rob_lengths = pair_batch("roberta", ROBERTA_SEGMENTS, seed=12)
    roberta = build(
        RobertaForSequenceClassification,
        roberta_config(RobertaConfig, "gelu_new", num_labels=2, attn_implementation="eager"),
        seed=2,
    )
    training_case(
        out, "roberta_pair", roberta, rob_inputs, rob_lengths, "roberta", torch.tensor([1, 0, 0, 1]),
        loss_cfg={"class_weights": None, "label_smoothing": 0.0},
        opt_cfg={"lr": 5e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1},
        max_grad_norm=1.0,
        sched_cfg={"type": "cosine", "warmup_steps": 1, "total_steps": 6},
    )

    # 3. XLM-R: gelu, 4 labels, label smoothing 0.2, constant schedule after warmup.
    xlmr_inputs, xlmr_lengths = pair_batch("roberta", ROBERTA_SEGMENTS, seed=13)
    xlmr = build(
        XLMRobertaForSequenceClassification,
        roberta_config(XLMRobertaConfig, "gelu", num_labels=4, attn_implementation="eager"),
        seed=3,
    )
    training_case(
        out, "xlmr_pair", xlmr, xlmr_inputs, xlmr_lengths, "roberta", torch.tensor([3, 0, 2, 1]),
        loss_cfg={"class_weights": None, "label_smoothing": 0.2},
        opt_cfg={"lr": 5e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1},
        max_grad_norm=1.0,
        sched_cfg={"type": "constant_with_warmup", "warmup_steps": 2, "total_steps": 6},
    )

    # 4-5. The bert_pair initial model stored in bf16, f16 and as shards.
    bert.load_state_dict(bert_initial)
    for name, dtype in (("bert_bf16", torch.bfloat16), ("bert_f16", torch.float16)):
        rounded_weights_case(out, name, bert, dtype, bert_inputs, bert_labels, bert_lengths, bert_expected["logits"])
    sharded_case(out, "bert_sharded", bert, bert_inputs, bert_labels, bert_lengths, bert_expected)

    # 6. Base checkpoints (no head) loaded into classifiers.
    base_inputs, base_lengths = pair_batch("bert", BERT_SEGMENTS, seed=14)
    bert_base = build(BertModel, bert_config(num_labels=2, attn_implementation="eager"), seed=4, add_pooling_layer=True)
    base_encoder_case(
        out, "bert_base_encoder", bert_base, BertForSequenceClassification, "bert",
        base_inputs, torch.tensor([0, 1, 1, 0]), base_lengths,
    )
    rbase_inputs, rbase_lengths = pair_batch("roberta", ROBERTA_SEGMENTS, seed=15)
    roberta_base = build(
        RobertaModel, roberta_config(RobertaConfig, "gelu_new", num_labels=2, attn_implementation="eager"),
        seed=5, add_pooling_layer=True,
    )
    base_encoder_case(
        out, "roberta_base_encoder", roberta_base, RobertaForSequenceClassification, "roberta",
        rbase_inputs, torch.tensor([1, 1, 0, 0]), rbase_lengths,
    )

    # 7. Sentence-transformers style checkpoint.
    pl_inputs, pl_lengths = pair_batch("bert", BERT_SEGMENTS, seed=16)
    prefixless = build(BertModel, bert_config(num_labels=2, attn_implementation="eager"), seed=6, add_pooling_layer=True)
    prefixless_case(out, "bert_prefixless", prefixless, pl_inputs, torch.tensor([1, 0, 1, 0]), pl_lengths)

    # 8. Masked-LM checkpoint with a tied decoder and no pooler.
    mlm_inputs, mlm_lengths = pair_batch("bert", BERT_SEGMENTS, seed=17)
    mlm = build(BertForMaskedLM, bert_config(num_labels=2, attn_implementation="eager"), seed=7)
    tied_mlm_case(out, "bert_mlm_tied", mlm, mlm_inputs, torch.tensor([0, 1, 0, 1]), mlm_lengths)

    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote {sorted(p.name for p in out.iterdir() if p.is_dir())} to {out} ({total / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
