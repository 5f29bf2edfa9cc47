"""Chat rows for causal-LM training: messages rendered by the checkpoint's own chat template.

A chat template is a Jinja program (tokenizer_config.json's `chat_template`, or
chat_template.jinja). ftune's engine is C++ and runs no Jinja; this module renders the messages
with jinja2, the library transformers itself renders them with, in the same sandboxed
environment (trim_blocks, lstrip_blocks, loop controls, its `tojson`, `raise_exception`,
`strftime_now`, `namespace`, the tokenizer's named special tokens as variables), so the text is
transformers' `apply_chat_template(..., tokenize=False)` character for character (checked against
transformers' output on real templates: tests/fixtures/chat, tools/make_chat_fixtures.py).

A conversational row becomes a prompt -> completion text row as TRL's SFTTrainer makes one:

    prompt     = template(prompt messages, add_generation_prompt=True)
    completion = template(prompt + completion messages)[len(prompt):]

where a row is {"messages": [..., final assistant message]} (the prompt is every message but the
last, which must be the assistant's) or {"prompt": [messages], "completion": [messages]}. The
rendered rows train with data.add_special_tokens false (the template writes BOS itself) and
data.append_eos false (the template ends the turn), and the completion's mask starts where the
token ids of the prompt and of prompt + completion part (TRL's common prefix). Only the final
assistant turn is learned.

    python -m ftune.chat --model DIR train.jsonl train.rendered.jsonl   # for `ftune train`
    ftune.train(cfg, train=rows)     # rows with messages are rendered here (model.task causal_lm)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime
from typing import Any, Iterable, Mapping, Optional, Sequence

# The named special tokens transformers passes to every template (tokenization_utils_base's
# SPECIAL_TOKENS_ATTRIBUTES).
_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                   "mask_token")

# The keys a rendered chat data set trains with (see the module's doc).
RENDERED_DATA_KEYS = {"data.add_special_tokens": False, "data.append_eos": False}


class ChatTemplateError(ValueError):
    """A chat template that cannot be found or rendered, or a conversation it rejects."""


def _environment():
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        import jinja2.ext
    except ImportError:  # pragma: no cover - jinja2 is a dependency of the package
        raise ImportError("chat templates need jinja2 (pip install 'jinja2>=3.1.6'), the library "
                          "transformers renders them with") from None

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers' tojson: no HTML escaping, json.dumps' options
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    class Namespace(jinja2.utils.Namespace):
        # as transformers': no underscore-prefixed attributes (the sandbox's CPython internals)
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot store underscore-prefixed attributes ({name!r})")

    class Generation(jinja2.ext.Extension):
        # {% generation %}...{% endgeneration %} marks assistant text for masks; renders its body
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = dict
    env.globals["namespace"] = Namespace
    return env, jinja2


def _token_text(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]  # an AddedToken as tokenizer_config.json stores it
    return None


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ChatTemplateError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None


class ChatTemplate:
    """A chat template with the special tokens its model directory names."""

    def __init__(self, template: str, special_tokens: Optional[Mapping[str, str]] = None,
                 source: str = "template"):
        if not isinstance(template, str) or not template:
            raise ChatTemplateError(f"{source}: a chat template must be a non-empty string")
        env, jinja2 = _environment()
        self._jinja2 = jinja2
        try:
            self._compiled = env.from_string(template)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise ChatTemplateError(f"{source}:{e.lineno}: chat template syntax: {e.message}") from None
        self.template = template
        self.special_tokens = dict(special_tokens or {})
        self.source = source

    @classmethod
    def from_pretrained(cls, model_dir: str, name: Optional[str] = None) -> "ChatTemplate":
        """The template of a model directory as transformers finds it: chat_template.jinja (or
        additional_chat_templates/NAME.jinja), else tokenizer_config.json's `chat_template` (a
        string, or a list of {name, template} where `name`, else "default", is taken)."""
        model_dir = os.fspath(model_dir)
        config_path = os.path.join(model_dir, "tokenizer_config.json")
        config = _read_json(config_path) if os.path.exists(config_path) else {}
        tokens = {}
        legacy = os.path.join(model_dir, "special_tokens_map.json")
        for source in ([_read_json(legacy)] if os.path.exists(legacy) else []) + [config]:
            for key in _SPECIAL_TOKENS:
                text = _token_text(source.get(key))
                if text is not None:
                    tokens[key] = text
        if name is not None:
            path = os.path.join(model_dir, "additional_chat_templates", f"{name}.jinja")
            if os.path.exists(path):
                return cls(_read_text(path), tokens, path)
        path = os.path.join(model_dir, "chat_template.jinja")
        if name is None and os.path.exists(path):
            return cls(_read_text(path), tokens, path)
        found = config.get("chat_template")
        if isinstance(found, list):
            named = {t.get("name"): t.get("template") for t in found if isinstance(t, Mapping)}
            want = name or "default"
            if want not in named:
                raise ChatTemplateError(f"{config_path}: key 'chat_template' has no template named "
                                        f"{want!r} (it has {sorted(k for k in named if k)})")
            return cls(named[want], tokens, f"{config_path}: chat_template[{want}]")
        if isinstance(found, str) and name is None:
            return cls(found, tokens, f"{config_path}: chat_template")
        raise ChatTemplateError(
            f"{model_dir}: no chat template " + (f"named {name!r} " if name else "") +
            "(chat_template.jinja, or key 'chat_template' of tokenizer_config.json); a base "
            "model without one trains on prompt / completion text rows instead")

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = False,
               tools: Optional[Sequence[Mapping[str, Any]]] = None, **kwargs: Any) -> str:
        """The text of a conversation, as apply_chat_template(..., tokenize=False) gives it."""
        chat = [{k: v for k, v in dict(m).items() if v is not None} for m in messages]
        variables = {**self.special_tokens, **kwargs}
        try:
            return self._compiled.render(messages=chat, tools=tools, documents=None,
                                         add_generation_prompt=add_generation_prompt, **variables)
        except self._jinja2.exceptions.TemplateError as e:
            raise ChatTemplateError(f"{self.source}: the template refused the conversation: "
                                    f"{e}") from None

    def completion_row(self, row: Mapping[str, Any], where: str = "row") -> dict:
        """A conversational row as a {"prompt": text, "completion": text} row (module doc)."""
        prompt, completion = conversation_parts(row, where)
        tools = row.get("tools")
        if isinstance(tools, str):
            tools = json.loads(tools)
        kwargs = dict(row.get("chat_template_kwargs") or {})
        prompt_text = self.render(prompt, add_generation_prompt=True, tools=tools, **kwargs)
        full_text = self.render(list(prompt) + list(completion), tools=tools, **kwargs)
        # Where the template renders the prompt alone differently (a generation prompt the full
        # conversation drops), the completion starts where the two texts part.
        cut = len(os.path.commonprefix([prompt_text, full_text]))
        if cut == len(full_text):
            raise ChatTemplateError(f"{where}: the completion renders to no text after the prompt")
        return {"prompt": full_text[:cut], "completion": full_text[cut:]}


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def is_conversational(row: Any) -> bool:
    """A row of messages: "messages", or "prompt" / "completion" given as lists of messages."""
    if not isinstance(row, Mapping):
        return False
    return "messages" in row or isinstance(row.get("prompt"), list) or \
        isinstance(row.get("completion"), list)


def _check_messages(messages: Any, where: str, key: str) -> list:
    if not isinstance(messages, list) or not messages:
        raise ChatTemplateError(f"{where}: key '{key}' must be a non-empty list of messages")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ChatTemplateError(f"{where}: {key}[{i}] must be a message: an object with a "
                                    "'role' string (and its 'content')")
    return list(messages)


def conversation_parts(row: Mapping[str, Any], where: str = "row") -> tuple:
    """(prompt messages, completion messages) of a conversational row."""
    if "messages" in row:
        messages = _check_messages(row["messages"], where, "messages")
        if messages[-1]["role"] != "assistant":
            raise ChatTemplateError(f"{where}: the last message's role is "
                                    f"{messages[-1]['role']!r}; the final assistant message is the "
                                    "completion that is learned")
        if len(messages) < 2:
            raise ChatTemplateError(f"{where}: key 'messages' needs a prompt message before the "
                                    "final assistant message")
        return messages[:-1], messages[-1:]
    return (_check_messages(row.get("prompt"), where, "prompt"),
            _check_messages(row.get("completion"), where, "completion"))


def render_rows(rows: Iterable[Mapping[str, Any]], template: ChatTemplate,
                source: str = "rows") -> list:
    """Every conversational row as a prompt -> completion text row; text rows are refused (a
    data set is one or the other, as TRL's is)."""
    out = []
    for i, row in enumerate(rows):
        where = f"{source}:{i + 1}"
        if not is_conversational(row):
            raise ChatTemplateError(f"{where}: not a conversational row (messages, or prompt / "
                                    "completion as lists of messages) in a chat data set")
        out.append(template.completion_row(row, where))
    return out


def read_jsonl(path: str) -> list:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ChatTemplateError(f"{path}:{n}: not valid JSON ({e.msg})") from None
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ftune.chat",
        description="Render chat rows (JSONL) with a model's chat template into prompt -> "
                    "completion text rows for `ftune train` (with data.add_special_tokens: false "
                    "and data.append_eos: false).")
    ap.add_argument("--model", required=True, help="the model directory (its chat template)")
    ap.add_argument("--template-name", default=None, help="a named template of the model")
    ap.add_argument("input", help="JSONL rows: messages, or prompt / completion message lists")
    ap.add_argument("output", help="the rendered JSONL (written whole, or not at all)")
    args = ap.parse_args(argv)
    try:
        template = ChatTemplate.from_pretrained(args.model, args.template_name)
        rows = render_rows(read_jsonl(args.input), template, args.input)
    except (ChatTemplateError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, args.output)
    print(f"{args.output}: {len(rows)} rows rendered with {template.source}; train them with "
          "data.add_special_tokens: false and data.append_eos: false")
    return 0


if __name__ == "__main__":
    sys.exit(main())
