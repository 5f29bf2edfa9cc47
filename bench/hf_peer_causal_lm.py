"""The causal-LM side of bench/hf_peer_train.py (--causal-lm): prompt -> completion rows read,
tokenized and batched as `ftune train` with model.task causal_lm reads them (docs/causal-lm.md),
which is TRL's SFTTrainer recipe for a prompt-completion data set: tokenizer(prompt + completion)
with the tokenizer's special tokens, then EOS; the tokens before the point where
tokenizer(prompt) and tokenizer(prompt + completion) part masked (-100); rows longer than max_length cut at the end. The model is an AutoModelForCausalLM; its
loss is transformers' ForCausalLMLoss (labels shifted inside the model), LoRA's task CAUSAL_LM
(lm_head frozen, as ftune). Imported by hf_peer_train.py only; needs torch and transformers.
"""
import json


def read_completions(path, fields):
    """[(prompt, completion)] of a JSONL file; fields: (prompt key, completion key)."""
    prompt_f, completion_f = fields
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                rows.append((str(obj[prompt_f]), str(obj[completion_f])))
            except (ValueError, KeyError) as e:
                raise SystemExit("%s:%d: %s (expected a JSON object with %r and %r)" %
                                 (path, n, e, prompt_f, completion_f))
    if not rows:
        raise SystemExit("%s: no rows" % path)
    return rows


def prompt_tokens(prompt_ids, ids):
    """Where the completion starts: where the ids of the prompt and of prompt + completion part
    (TRL 1.16's common_prefix_length; the prompt's length unless tokens merge at the boundary)."""
    return next((k for k, (x, y) in enumerate(zip(prompt_ids, ids)) if x != y),
                min(len(prompt_ids), len(ids)))


def tokenize_completions(tokenizer, rows, max_length, eos_id):
    """Items of input_ids, attention_mask and labels (-100 over the prompt), cut at max_length."""
    out = []
    for prompt, completion in rows:
        full = tokenizer(prompt + completion)["input_ids"] + [eos_id]
        n_prompt = prompt_tokens(tokenizer(prompt)["input_ids"], full)
        labels = [-100] * n_prompt + full[n_prompt:]
        full, labels = full[:max_length], labels[:max_length]
        out.append({"input_ids": full, "attention_mask": [1] * len(full), "labels": labels})
    return out


def eos_token_id(model_dir, tokenizer):
    """The checkpoint's EOS (config.json's eos_token_id, as ftune reads it), else the
    tokenizer's."""
    try:
        with open(model_dir + "/config.json") as f:
            eos = json.load(f).get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0]
        if isinstance(eos, int):
            return eos
    except (OSError, ValueError):
        pass
    return tokenizer.eos_token_id


class CompletionCollator:
    """Right-pads a list of items to its longest row (or to max_length without dynamic
    padding): pad id for the inputs, 0 for the mask, -100 for the labels."""

    def __init__(self, pad_id, max_length=None):
        self.pad_id, self.max_length = pad_id, max_length

    def __call__(self, items):
        import torch
        T = self.max_length or max(len(x["input_ids"]) for x in items)
        def padded(key, value):
            return torch.tensor([x[key] + [value] * (T - len(x[key])) for x in items])
        return {"input_ids": padded("input_ids", self.pad_id),
                "attention_mask": padded("attention_mask", 0), "labels": padded("labels", -100)}
