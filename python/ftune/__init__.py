"""ftune from Python: the same engine as the `ftune` command, without files in between.

    import ftune
    m = ftune.load("runs/rerank/model")             # a model directory (HF format)
    m.predict([("a query", "a passage"), ...])      # numpy float32 logits, one row per input
    m.rank("a query", ["passage 1", "passage 2"])   # [(index, score), ...], best first
    lm = ftune.load("runs/sft/model")               # a *ForCausalLM directory: a CausalLM
    lm.choose("Is the sky blue?\nAnswer:", [" yes", " no"])   # the most likely completion
    tok = ftune.Tokenizer.from_file("tokenizer.json")
    tok.encode_batch(["text", ("text", "pair")])     # as Hugging Face tokenizers encodes
    run = ftune.train("train.yaml", learning_rate=2e-5)   # or a dict; -> Run
    run = ftune.train(cfg, train=df, validation=rows)     # rows in memory: a DataFrame, dicts

Compute runs with the GIL released and a Model may be shared by threads. Bad input raises
ValueError naming the file, line or key; Ctrl-C during train() stops at the next step with a
checkpoint (resume=True continues) and raises KeyboardInterrupt.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

from ._ftune import Encoding, Tokenizer
from ._ftune import MemorySource as _MemorySource
from ._ftune import Model as _Model
from ._ftune import set_threads, threads
from ._ftune import train as _train

__all__ = ["CausalLM", "Encoding", "Model", "Run", "Tokenizer", "chat", "hpo", "load", "set_threads", "threads",
           "train"]

Input = Union[str, Sequence[str]]


class Model:
    """A model directory loaded for scoring: its classifier, tokenizer and truncation length."""

    def __init__(self, model_dir: str, device: str = "cpu", max_length: Optional[int] = None,
                 pair_template: str = ""):
        self._m = _Model(os.fspath(model_dir), device, max_length, pair_template)
        self.model_dir = os.fspath(model_dir)

    @property
    def labels(self) -> list:
        return self._m.labels

    @property
    def num_labels(self) -> int:
        return self._m.num_labels

    @property
    def max_length(self) -> int:
        return self._m.max_length

    @property
    def problem_type(self) -> str:
        return self._m.problem_type

    def predict(self, inputs: Sequence[Input], batch_size: int = 32,
                output: str = "logits") -> np.ndarray:
        """Logits (rows x num_labels) of a list of inputs (each a str or a (str, str) pair; one
        str or one tuple of two str gives that row alone), or output="probabilities" (softmax over labels; sigmoid for
        one score or multi-label), or output="scores" (one number a row: the logit of a
        one-score model, logit[1] - logit[0] of a two-label one, as ftune ranks)."""
        single = isinstance(inputs, str) or _is_pair(inputs)
        logits = self._m.predict([inputs] if single else list(inputs), batch_size)
        out = self._output(logits, output)
        return out[0] if single else out

    def predict_ids(self, input_ids: Sequence[Sequence[int]],
                    token_type_ids: Optional[Sequence[Sequence[int]]] = None,
                    batch_size: int = 32, output: str = "logits") -> np.ndarray:
        """predict() on rows already tokenized: token ids as the model reads them (special tokens
        included, e.g. from Model.tokenize or a tokenizer), rows of any lengths, and optional
        token type ids of the same lengths. No truncation: a row longer than the model's
        positions, or an id outside its vocabulary, is a ValueError naming the row."""
        return self._output(self._m.predict_ids(list(input_ids), token_type_ids, batch_size),
                            output)

    def _output(self, logits: np.ndarray, output: str) -> np.ndarray:
        if output == "logits":
            out = logits
        elif output == "probabilities":
            if self.num_labels == 1 or self.problem_type == "multi_label_classification":
                out = 1.0 / (1.0 + np.exp(-logits))
            else:
                z = np.exp(logits - logits.max(axis=1, keepdims=True))
                out = z / z.sum(axis=1, keepdims=True)
        elif output == "scores":
            if self.num_labels == 1:
                out = logits[:, 0]
            elif self.num_labels == 2:
                out = logits[:, 1] - logits[:, 0]
            else:
                raise ValueError("output='scores' needs a one-score or two-label model; "
                                 f"this one has {self.num_labels} labels")
        else:
            raise ValueError("output must be 'logits', 'probabilities' or 'scores', "
                             f"got {output!r}")
        return out

    def rank(self, query: str, documents: Sequence[str], batch_size: int = 32) -> list:
        """(index, score) of each document for the query, best first."""
        return self._m.rank(query, list(documents), batch_size)

    def tokenize(self, inputs: Sequence[Input]) -> list:
        """The token ids the model reads for each input."""
        return self._m.tokenize(list(inputs))


def _is_pair(x: Any) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and all(isinstance(t, str) for t in x)


def load(model_dir: Union[str, os.PathLike], device: str = "cpu",
         max_length: Optional[int] = None, pair_template: str = "") -> Union[Model, "CausalLM"]:
    """Loads a model directory (config.json, weights, tokenizer.json) for scoring: a Model, or a
    CausalLM where config.json names a *ForCausalLM architecture (ftune/causal_lm.py)."""
    if is_causal_lm_dir(os.fspath(model_dir)):
        if max_length is not None or pair_template:
            raise ValueError("a causal LM scores prompt + candidate as written: max_length and "
                             "pair_template do not apply")
        return CausalLM(model_dir, device)
    return Model(model_dir, device, max_length, pair_template)


@dataclass
class Run:
    """What a training run left: its directory, summary.json, and where the model is."""
    run_dir: str
    summary: dict

    @property
    def model_path(self) -> str:
        return os.path.join(self.run_dir, "model")

    @property
    def best_metric(self) -> Optional[float]:
        """The best evaluation's value of the run's eval.metric (None without evaluation)."""
        best = self.summary.get("best_eval") or {}
        return best.get(self.summary.get("eval_metric", "")) if isinstance(best, dict) else None

    @property
    def status(self) -> str:
        return self.summary.get("status", "")


def _override(key: str, value: Any) -> str:
    return f"{key}={json.dumps(value)}"


def train(config: Union[str, os.PathLike, Mapping[str, Any]],
          overrides: Optional[Mapping[str, Any]] = None, resume: bool = False,
          on_eval: Optional[Callable[[int, dict], bool]] = None,
          on_log: Optional[Callable[[dict], None]] = None, **keys: Any) -> Run:
    """Trains as `ftune train` does: `config` is a YAML file or a dict of the same sections.

    `overrides` maps dotted keys to values ({"training.learning_rate": 2e-5}); keyword arguments
    name a key by its last part when that is unambiguous (learning_rate=2e-5) or with "__" for
    the dot (training__learning_rate=2e-5). `on_eval(step, metrics)` is called after each
    evaluation; returning True stops the run there (with a checkpoint). `on_log(line)` receives
    each line the run writes to metrics.jsonl as it is written ({"split": "train", "step",
    "loss", "lr", ...} every training.log_every steps, and each evaluation's line); an exception
    it raises stops the run and reaches the caller.

    With model.task causal_lm, rows of chat messages ({"messages": [...]}, or "prompt" /
    "completion" as lists of messages; in memory or in a JSONL file) are rendered by the model's
    chat template (ftune.chat, as transformers renders them) into prompt -> completion text,
    trained with data.add_special_tokens and data.append_eos false (the template writes both).

    data.train, data.validation and data.test take a file path or rows in memory: a pandas
    DataFrame, a list of dicts, a `datasets.Dataset` or any iterable of mappings, each row the
    fields a JSONL line would have ({"text": ..., "text_pair": ..., "label": ...}). They are
    read as JSONL named "memory:train.jsonl" (validation, test alike) and never written to disk;
    a bad row is named "memory:train.jsonl:N", the N-th row counting from 1. A resumed run needs
    the same rows again.
    """
    given = dict(overrides or {})
    given.update({_dotted(k): v for k, v in keys.items()})
    sources = []
    try:
        if isinstance(config, Mapping):
            config = dict(config)
            data = dict(config.get("data") or {})
            for split in _SPLITS:
                if split in data and not _is_path(data[split]):
                    data[split] = _in_memory(split, data[split], sources)
            if data:
                config["data"] = data
            text, is_path = json.dumps(config), False
        else:
            text, is_path = os.fspath(config), True
        for key, value in list(given.items()):
            split = key[len("data."):] if key.startswith("data.") else ""
            if split in _SPLITS and not _is_path(value):
                given[key] = _in_memory(split, value, sources)
        items = [_override(k, v) for k, v in given.items()]
        items += _rendered_chat_splits(text, is_path, items, sources)
        summary, run_dir = _train(text, is_path, items, resume, on_eval, on_log)
    finally:
        for source in sources:
            source.release()
    return Run(run_dir=run_dir, summary=json.loads(summary))


_SPLITS = ("train", "validation", "test")


def _is_path(value: Any) -> bool:
    return value is None or isinstance(value, (str, os.PathLike))


def _in_memory(split: str, rows: Any, sources: list, name: str = "") -> str:
    """Registers rows as the JSONL text "memory:<split>.jsonl" (or memory:<name>) for one run;
    returns that path."""
    source = _Rows(name or f"{split}.jsonl", _jsonl_text(f"data.{split}", rows))
    sources.append(source)
    return source.path


class _Rows:
    """One split's rows registered in memory, with their JSONL text."""

    def __init__(self, name: str, text: str):
        self._source = _MemorySource(name, text)
        self.path, self.text = self._source.path, text

    def release(self) -> None:
        self._source.release()


def _first_jsonl_row(path: str, text: Optional[str]) -> Any:
    """The first non-blank row of JSONL text (or of the file when text is None); None when there
    is none or it is not JSON (the engine names the bad line)."""
    lines = iter(text.splitlines()) if text is not None else open(path, encoding="utf-8")
    try:
        for line in lines:
            if line.strip():
                return json.loads(line)
    except json.JSONDecodeError:
        return None
    finally:
        if text is None:
            lines.close()
    return None


def _rendered_chat_splits(text: str, is_path: bool, items: list, sources: list) -> list:
    """Overrides that train a causal LM's chat rows (messages) as their rendered text rows: each
    split of chat rows registered again, rendered (ftune.chat), and the two data keys of
    rendered text. [] for any other run."""
    from . import chat
    from ._ftune import config_values
    values = config_values(text, is_path, items)
    if values.get("model.task") != "causal_lm":
        return []
    in_memory = {s.path: s.text for s in sources}
    out, template = [], None
    for split in _SPLITS:
        path = values.get(f"data.{split}", "")
        if not path:
            continue
        if path in in_memory:
            text = in_memory[path]
        elif path.endswith(".jsonl") and os.path.isfile(path):
            text = None  # read whole only when its first row is a chat row
        else:
            continue
        first = _first_jsonl_row(path, text)
        if not chat.is_conversational(first):
            continue
        if text is None:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        lines = [line for line in text.splitlines() if line.strip()]
        if template is None:
            template = chat.ChatTemplate.from_pretrained(values["model.path"])
        rows = []
        for n, line in enumerate(lines, 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        rendered = chat.render_rows(rows, template, source=path)
        out.append(_override(f"data.{split}",
                             _in_memory(split, rendered, sources, f"{split}.rendered.jsonl")))
    if out:
        out += [_override(k, v) for k, v in chat.RENDERED_DATA_KEYS.items()]
    return out


def _jsonl_text(key: str, rows: Any) -> str:
    if hasattr(rows, "to_json") and hasattr(rows, "columns"):  # a pandas DataFrame
        text = rows.to_json(orient="records", lines=True, force_ascii=False)
    else:
        if isinstance(rows, (Mapping, bytes)):
            raise TypeError(f"{key}: expected a file path or rows (a DataFrame, a list of dicts), "
                            f"got {type(rows).__name__}")
        try:
            iterator = iter(rows)
        except TypeError:
            raise TypeError(f"{key}: expected a file path or rows (a DataFrame, a list of "
                            f"dicts), got {type(rows).__name__}") from None
        lines = []
        for i, row in enumerate(iterator):  # a datasets.Dataset yields its rows as dicts
            if not isinstance(row, Mapping):
                raise TypeError(f"{key}: row {i + 1} is a {type(row).__name__}, expected a dict "
                                "of fields (text, text_pair, label, ...)")
            lines.append(json.dumps(dict(row), ensure_ascii=False, default=_plain))
        text = "\n".join(lines)
    if not text.strip():
        raise ValueError(f"{key}: no rows given")
    return text


def _plain(value: Any) -> Any:
    """numpy scalars and arrays (pandas and datasets hand them out) as JSON values."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"a row field of type {type(value).__name__} is not a JSON value")


def _dotted(key: str) -> str:
    if "__" in key:
        return key.replace("__", ".")
    from ._ftune import config_keys  # the key table (train/config_keys.h)
    matches = [k for k in config_keys() if k.rsplit(".", 1)[-1] == key]
    if len(matches) != 1:
        raise ValueError(f"keyword {key!r} names " +
                         ("no config key" if not matches else f"several keys: {matches}") +
                         "; pass overrides={'section.key': value}")
    return matches[0]
from . import chat  # noqa: E402  (ftune.chat: chat templates, python/ftune/chat.py)
from .causal_lm import CausalLM, is_causal_lm_dir  # noqa: E402  (scoring completions)
from . import hpo  # noqa: E402  (ftune.hpo: the search, python/ftune/hpo.py)
