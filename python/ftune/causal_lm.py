"""A fine-tuned causal LM from Python: scoring candidate completions, as `ftune predict
--candidates` scores them (docs/causal-lm.md).

    lm = ftune.load("runs/sft/model")                  # a *ForCausalLM directory -> CausalLM
    lm.log_likelihoods("Is the sky blue?\\nAnswer:", [" yes", " no"])   # log p, one per candidate
    lm.choose(["q1", "q2"], [" yes", " no"])            # the most likely candidate per prompt
    lm.probabilities(prompts, candidates)               # their softmax over each prompt's list

A prompt may be a list of chat messages: it is rendered by the model's chat template with the
generation prompt (ftune.chat) and tokenized without the tokenizer's special tokens, as the
model was trained on rendered chat rows.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Union

import numpy as np

from ._ftune import CausalLm as _CausalLm

Prompt = Union[str, Sequence[Any]]  # text, or a list of chat messages


class CausalLM:
    """A causal LM loaded for scoring; calls on one model run one at a time, GIL released."""

    def __init__(self, model_dir: Union[str, os.PathLike], device: str = "cpu"):
        self.model_dir = os.fspath(model_dir)
        self._m = _CausalLm(self.model_dir, device)
        self._template = None

    @property
    def architecture(self) -> str:
        return self._m.architecture

    @property
    def max_length(self) -> int:
        return self._m.max_length

    def log_likelihoods(self, prompts: Union[Prompt, Sequence[Prompt]],
                        candidates: Sequence[Any]) -> np.ndarray:
        """log p(candidate | prompt) summed over the candidate's tokens (no EOS): one row per
        prompt (a 1-D array for one prompt). `candidates` is one list for every prompt, or one
        list per prompt (of equal lengths)."""
        single = isinstance(prompts, str) or _is_messages(prompts)
        plist = [prompts] if single else list(prompts)
        if not plist:
            raise ValueError("no prompt given")
        per_prompt = bool(candidates) and not isinstance(candidates[0], str)
        clists = [list(c) for c in candidates] if per_prompt else [list(candidates)] * len(plist)
        if len(clists) != len(plist):
            raise ValueError(f"{len(clists)} candidate lists for {len(plist)} prompts")
        if len({len(c) for c in clists}) > 1:
            raise ValueError("every prompt needs the same number of candidates for an array; "
                             "score prompts with different lists one at a time")
        chat_rows = [_is_messages(p) for p in plist]
        if any(chat_rows) and not all(chat_rows):
            raise ValueError("give every prompt as text or every prompt as chat messages")
        special_tokens = not chat_rows[0]
        if not special_tokens:
            plist = [self._render(p) for p in plist]
        out = np.asarray(self._m.log_likelihoods(plist, clists, special_tokens), dtype=np.float64)
        return out[0] if single else out

    def probabilities(self, prompts: Union[Prompt, Sequence[Prompt]],
                      candidates: Sequence[Any]) -> np.ndarray:
        """The softmax of each prompt's log-likelihoods over its candidates."""
        ll = self.log_likelihoods(prompts, candidates)
        z = np.exp(ll - ll.max(axis=-1, keepdims=True))
        return z / z.sum(axis=-1, keepdims=True)

    def choose(self, prompts: Union[Prompt, Sequence[Prompt]], candidates: Sequence[Any]):
        """The most likely candidate of each prompt (one str for one prompt)."""
        ll = self.log_likelihoods(prompts, candidates)
        single = ll.ndim == 1
        per_prompt = bool(candidates) and not isinstance(candidates[0], str)
        rows = [ll] if single else list(ll)
        lists = candidates if per_prompt else [candidates] * len(rows)
        picks = [lists[i][int(np.argmax(r))] for i, r in enumerate(rows)]
        return picks[0] if single else picks

    def _render(self, messages: Sequence[Any]) -> str:
        from .chat import ChatTemplate
        if self._template is None:
            self._template = ChatTemplate.from_pretrained(self.model_dir)
        return self._template.render(list(messages), add_generation_prompt=True)


def _is_messages(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and bool(x) and isinstance(x[0], dict)


def is_causal_lm_dir(model_dir: str) -> bool:
    """Whether config.json names a *ForCausalLM architecture."""
    import json
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            archs = json.load(f).get("architectures") or []
    except (OSError, ValueError):
        return False  # the engine names what is wrong when the directory is loaded
    return any(isinstance(a, str) and a.endswith("ForCausalLM") for a in archs)
