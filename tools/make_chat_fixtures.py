#!/usr/bin/env python3
"""Golden chat-template cases for ftune.chat and the C++ tokenization of rendered rows
(tests/fixtures/chat/chat_cases.json), made with transformers' apply_chat_template and TRL's
conversational prompt-completion recipe:

    prompt_ids     = apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    ids            = apply_chat_template(prompt + completion, tokenize=True)   # no EOS appended
    completion mask from trl.data_utils.common_prefix_length(prompt_ids, ids)

Each case keeps transformers' two texts (the prompt with its generation prompt, and the whole
conversation), the ids and shifted labels, or the error a template raises. The templates below
are written in the forms the model families publish (ChatML as SmolLM2 / Qwen2.5 use it, Llama
3.1's headers with its tools block, Gemma's with role alternation and raise_exception, a Qwen3-
like template whose generation prompt adds an empty thinking block the conversation does not
have): they exercise what the published ones use (trim_blocks / lstrip_blocks, loop variables,
namespace, tojson with indent, bos_token, raise_exception, `is defined`). Tokenizers: the shared
Llama 3 and Gemma 3 tokenizer.json files (FTUNE_SHARED_DIR).

    python tools/make_chat_fixtures.py            # needs transformers, trl, jinja2
"""

import json
import os
from pathlib import Path

import transformers
import trl
from transformers import PreTrainedTokenizerFast
from trl.data_utils import common_prefix_length

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("FTUNE_SHARED_DIR", REPO.parent / "shared")) / "fixtures" / "tokenizers"

CHATML = (
    "{%- for message in messages %}\n"
    "{%- if loop.first and message['role'] != 'system' %}\n"
    "{{- '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n")

LLAMA3 = (
    "{{- bos_token }}\n"
    "{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set system_message = \"\" %}\n"
    "{%- endif %}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{%- if tools is not none %}{{- \"Environment: ipython\\n\" }}{%- endif %}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{%- if tools is not none %}\n"
    "    {{- \"You have access to the following functions:\\n\\n\" }}\n"
    "    {%- for t in tools %}\n"
    "        {{- t | tojson(indent=4) }}\n"
    "        {{- \"\\n\\n\" }}\n"
    "    {%- endfor %}\n"
    "{%- endif %}\n"
    "{{- system_message }}\n"
    "{{- \"<|eot_id|>\" }}\n"
    "{%- set ns = namespace(turns=0) %}\n"
    "{%- for message in messages %}\n"
    "    {%- set ns.turns = ns.turns + 1 %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n")

GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")

THINKING = (
    "{%- for message in messages %}\n"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}\n"
    "{%- endif %}\n")

TEMPLATES = {"chatml": CHATML, "llama3": LLAMA3, "gemma": GEMMA, "thinking": THINKING}
TOKENIZERS = {  # tokenizer file, its named special tokens
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
    "gemma3": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
               "unk_token": "<unk>"},
}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, «now».",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}

ROWS = [
    {"messages": [{"role": "user", "content": "What is the capital of France?"},
                  {"role": "assistant", "content": "Paris."}]},
    {"messages": [{"role": "system", "content": "  You answer briefly.  "},
                  {"role": "user", "content": "2+2?"},
                  {"role": "assistant", "content": " 4 "}]},
    {"messages": [{"role": "user", "content": "Traduis «café».\n"},
                  {"role": "assistant", "content": "coffee"},
                  {"role": "user", "content": "Et « naïf » ?"},
                  {"role": "assistant", "content": "naive", "tool_calls": None}]},
    {"prompt": [{"role": "user", "content": "Is the sky blue? Answer yes or no."}],
     "completion": [{"role": "assistant", "content": "yes"}]},
    {"messages": [{"role": "user", "content": "Weather in Oslo?"},
                  {"role": "assistant", "content": "It is cold."}],
     "tools": [WEATHER]},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
     "chat_template_kwargs": {"enable_thinking": False}},
]

CASES = [("chatml", "llama3"), ("llama3", "llama3"), ("gemma", "gemma3"), ("thinking", "llama3")]


def parts(row):
    if "messages" in row:
        return row["messages"][:-1], row["messages"][-1:]
    return row["prompt"], row["completion"]


def main():
    cases = []
    for template_name, tok_name in CASES:
        tok = PreTrainedTokenizerFast(tokenizer_file=str(SHARED / f"{tok_name}.tokenizer.json"),
                                      **TOKENIZERS[tok_name])
        tok.chat_template = TEMPLATES[template_name]
        for i, row in enumerate(ROWS):
            prompt, completion = parts(row)
            kwargs = {"tools": row.get("tools"), **row.get("chat_template_kwargs", {})}
            case = {"template": template_name, "tokenizer": tok_name, "row": row, "index": i}
            try:
                prompt_text = tok.apply_chat_template(prompt, add_generation_prompt=True,
                                                      tokenize=False, **kwargs)
                full_text = tok.apply_chat_template(prompt + completion, tokenize=False, **kwargs)
            except Exception as e:  # the template's raise_exception
                case["error"] = str(e)
                cases.append(case)
                continue
            prompt_ids = tok.apply_chat_template(prompt, add_generation_prompt=True,
                                                 tokenize=True, return_dict=True,
                                                 **kwargs)["input_ids"]
            ids = tok.apply_chat_template(prompt + completion, tokenize=True, return_dict=True,
                                          **kwargs)["input_ids"]
            n = common_prefix_length(prompt_ids, ids)
            labels = [t if k >= n else -100 for k, t in enumerate(ids)]
            case.update(prompt_text=prompt_text, full_text=full_text, input_ids=ids,
                        prompt_tokens=n, token_labels=labels[1:] + [-100])
            cases.append(case)
    out = REPO / "tests" / "fixtures" / "chat"
    out.mkdir(parents=True, exist_ok=True)
    (out / "chat_cases.json").write_text(json.dumps(
        {"generator": {"script": "tools/make_chat_fixtures.py",
                       "transformers": transformers.__version__, "trl": trl.__version__},
         "templates": TEMPLATES, "special_tokens": TOKENIZERS, "cases": cases},
        indent=1, ensure_ascii=False) + "\n")
    print(f"chat_cases.json: {len(cases)} cases, "
          f"{sum('error' in c for c in cases)} refused by their template")


if __name__ == "__main__":
    main()
