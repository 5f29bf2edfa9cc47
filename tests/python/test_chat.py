"""ftune.chat (python/ftune/chat.py): chat rows rendered by a model's chat template, run by ctest.

Every golden case of tests/fixtures/chat (tools/make_chat_fixtures.py: transformers'
apply_chat_template on ChatML, Llama 3, Gemma and a thinking template, with tools, kwargs and a
template that refuses a system message) renders to transformers' text exactly, and splits into
the prompt / completion rows that the C++ tokenization turns into TRL's ids
(tests/data/completions_test.cc). Templates are found in a model directory as transformers finds
them. A causal LM trained from chat rows in memory by ftune.train equals the same rows rendered
by `python -m ftune.chat` and trained by `ftune train` with the two keys of rendered text, step
for step; the command refuses unrendered chat rows, and rendered rows without those keys (a
doubled BOS), naming file:line. ftune.load on a causal LM gives a CausalLM whose candidate
log-likelihoods and choices are `ftune predict --candidates`'s bit for bit, and whose chat prompts
score as their rendered text. Needs FTUNE_BINARY.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import ftune
from ftune import chat

SOURCE = os.environ["FTUNE_SOURCE_DIR"]
BINARY = os.environ["FTUNE_BINARY"]
FIXTURE = os.path.join(SOURCE, "tests", "fixtures", "chat", "chat_cases.json")
TINY_LLAMA = os.path.join(SOURCE, "tests", "fixtures", "causal_lm", "llama_clm", "model")


def load_fixture():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


class RenderTest(unittest.TestCase):
    def test_every_case_renders_as_transformers(self):
        fx = load_fixture()
        rendered = refused = parted = 0
        for case in fx["cases"]:
            what = f"{case['template']} row {case['index']}"
            template = chat.ChatTemplate(fx["templates"][case["template"]],
                                         fx["special_tokens"][case["tokenizer"]], what)
            row = case["row"]
            prompt, completion = chat.conversation_parts(row)
            kwargs = {"tools": row.get("tools"), **row.get("chat_template_kwargs", {})}
            if "error" in case:
                with self.assertRaisesRegex(chat.ChatTemplateError, case["error"]):
                    template.completion_row(row, what)
                refused += 1
                continue
            self.assertEqual(template.render(prompt, add_generation_prompt=True, **kwargs),
                             case["prompt_text"], what)
            self.assertEqual(template.render(prompt + completion, **kwargs), case["full_text"],
                             what)
            out = template.completion_row(row, what)
            self.assertEqual(out["prompt"] + out["completion"], case["full_text"], what)
            parted += not case["full_text"].startswith(case["prompt_text"])
            if case["full_text"].startswith(case["prompt_text"]):
                self.assertEqual(out["prompt"], case["prompt_text"], what)
            rendered += 1
        self.assertEqual((rendered, refused, parted), (23, 1, 1))

    def test_templates_are_found_as_transformers_finds_them(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(chat.ChatTemplateError, "no chat template"):
                chat.ChatTemplate.from_pretrained(d)
            config = {"bos_token": {"content": "<s>", "special": True}, "eos_token": "</s>",
                      "chat_template": "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}"}
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump(config, f)
            t = chat.ChatTemplate.from_pretrained(d)
            self.assertEqual(t.render([{"role": "user", "content": "x"}]), "<s>x</s>")
            with open(os.path.join(d, "chat_template.jinja"), "w") as f:
                f.write("[{{ messages | length }}]")
            self.assertEqual(chat.ChatTemplate.from_pretrained(d).render([{"role": "user"}]), "[1]")
            os.remove(os.path.join(d, "chat_template.jinja"))
            config["chat_template"] = [{"name": "default", "template": "D"},
                                       {"name": "tool_use", "template": "T"}]
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump(config, f)
            self.assertEqual(chat.ChatTemplate.from_pretrained(d).render([]), "D")
            self.assertEqual(chat.ChatTemplate.from_pretrained(d, "tool_use").render([]), "T")
            with self.assertRaisesRegex(chat.ChatTemplateError, "no template named 'rag'"):
                chat.ChatTemplate.from_pretrained(d, "rag")
        with self.assertRaisesRegex(chat.ChatTemplateError, "template:1: chat template syntax"):
            chat.ChatTemplate("{% for m in messages %}")

    def test_bad_rows_name_the_row(self):
        t = chat.ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
        user = {"role": "user", "content": "q"}
        for row, message in [
            ({"messages": [user, user]}, "rows:2: the last message's role is 'user'"),
            ({"messages": [{"role": "assistant", "content": "a"}]}, "rows:2: key 'messages' needs"),
            ({"messages": "hi"}, "rows:2: key 'messages' must be a non-empty list"),
            ({"prompt": [user], "completion": [{"content": "a"}]}, r"rows:2: completion\[0\]"),
            ({"prompt": "p", "completion": "c"}, "rows:2: not a conversational row"),
        ]:
            good = {"messages": [user, {"role": "assistant", "content": "a"}]}
            with self.assertRaisesRegex(chat.ChatTemplateError, message):
                chat.render_rows([good, row], t)

    def test_the_command_renders_a_file_whole_or_not_at_all(self):
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "model")
            os.mkdir(model)
            with open(os.path.join(model, "chat_template.jinja"), "w") as f:
                f.write("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                        "{% if add_generation_prompt %}<assistant>{% endif %}")
            src, out = os.path.join(d, "chat.jsonl"), os.path.join(d, "out.jsonl")
            rows = [{"messages": [{"role": "user", "content": "hi"},
                                  {"role": "assistant", "content": "yo"}]}]
            with open(src, "w") as f:
                f.write(json.dumps(rows[0]) + "\n")
            r = subprocess.run([sys.executable, "-m", "ftune.chat", "--model", model, src, out],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                self.assertEqual(json.loads(f.read()),
                                 {"prompt": "<user>hi<assistant>", "completion": "yo"})
            os.remove(out)
            with open(src, "a") as f:
                f.write('{"messages": [{"role": "user", "content": "no reply"}]}\n')
            r = subprocess.run([sys.executable, "-m", "ftune.chat", "--model", model, src, out],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertIn(f"{src}:2: the last message's role is 'user'", r.stderr)
            self.assertFalse(os.path.exists(out))


WORDS = ["red", "green", "blue", "cat", "dog", "house", "tree", "water"]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
            "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
            "{% endif %}")


def tiny_chat_model(d):
    """The tiny random LlamaForCausalLM fixture with a word-level tokenizer (its 97 ids) that
    adds <s>, and a ChatML-like chat template that writes <s> itself."""
    model = os.path.join(d, "model")
    shutil.copytree(TINY_LLAMA, model)
    specials = ["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate(specials + ["user", "assistant", "repeat", "1:", "2:"] +
                                         WORDS)}
    added = [{"id": i, "content": t, "special": True, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False} for i, t in enumerate(specials)]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 0}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": None, "model": {"type": "WordLevel", "unk_token": "<pad>", "vocab": vocab}}
    with open(os.path.join(model, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f)
    with open(os.path.join(model, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
                   "chat_template": TEMPLATE}, f)
    return model


def chat_rows(n, seed):
    import random
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        w = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 2)))
        times = rng.randint(1, 2)
        rows.append({"messages": [{"role": "user", "content": f"repeat {times}: {w}"},
                                  {"role": "assistant", "content": " ".join([w] * times)}]})
    return rows


def write_jsonl(path, rows):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        lines = [json.loads(l) for l in f]
    return [(l.get("split"), l.get("step"), l.get("loss")) for l in lines if "loss" in l]


class TrainTest(unittest.TestCase):
    def test_chat_rows_train_as_their_rendered_text(self):
        with tempfile.TemporaryDirectory() as d:
            model = tiny_chat_model(d)
            train_rows, val_rows = chat_rows(16, 1), chat_rows(6, 2)
            val = os.path.join(d, "val.jsonl")
            write_jsonl(val, val_rows)
            cfg = {"model": {"path": model, "task": "causal_lm"},
                   "data": {"train": train_rows, "validation": val, "max_length": 40},
                   "training": {"epochs": 2, "batch_size": 4, "threads": 1, "log_every": 1,
                                "learning_rate": 3e-3, "warmup_steps": 0,
                                "memory_budget": "1GiB"},
                   "output": {"dir": os.path.join(d, "py")}}
            run = ftune.train(cfg)
            self.assertEqual(run.status, "completed")
            from_python = metrics(run.run_dir)
            self.assertGreater(len(from_python), 8)

            # The command: unrendered chat rows are refused, naming the renderer.
            src = os.path.join(d, "train.jsonl")
            write_jsonl(src, train_rows)
            cli = [BINARY, "train", "--config", os.path.join(d, "cli.yaml")]
            cli_cfg = dict(cfg, data=dict(cfg["data"], train=src),
                           output={"dir": os.path.join(d, "cli")})
            with open(os.path.join(d, "cli.yaml"), "w") as f:
                json.dump(cli_cfg, f)  # JSON is YAML
            r = subprocess.run(cli, capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn(f"{src}:1: key 'messages' holds chat messages", r.stderr)
            self.assertIn("python -m ftune.chat", r.stderr)

            # Rendered by the command of ftune.chat; without the keys of rendered text, <s> twice.
            for name, rows in (("train", src), ("val", val)):
                r = subprocess.run([sys.executable, "-m", "ftune.chat", "--model", model, rows,
                                    os.path.join(d, f"{name}.rendered.jsonl")],
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
            cli_cfg["data"] = dict(cfg["data"], train=os.path.join(d, "train.rendered.jsonl"),
                                   validation=os.path.join(d, "val.rendered.jsonl"))
            with open(os.path.join(d, "cli.yaml"), "w") as f:
                json.dump(cli_cfg, f)
            r = subprocess.run(cli, capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("train.rendered.jsonl:1: the row's text begins with '<s>'", r.stderr)

            cli_cfg["data"].update(add_special_tokens=False, append_eos=False)
            with open(os.path.join(d, "cli.yaml"), "w") as f:
                json.dump(cli_cfg, f)
            r = subprocess.run(cli, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(metrics(os.path.join(d, "cli")), from_python)

            # ftune eval on the rendered validation rows: the run's last validation loss with
            # --rendered-chat; without it, the doubled BOS is refused.
            val_rendered = os.path.join(d, "val.rendered.jsonl")
            eval_cmd = [BINARY, "eval", "--model", os.path.join(d, "cli", "model"), "--data",
                        val_rendered, "--max-length", "40"]
            r = subprocess.run(eval_cmd + ["--rendered-chat"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            last_val = [l for l in metrics(os.path.join(d, "cli")) if l[0] == "validation"][-1]
            self.assertAlmostEqual(json.loads(r.stdout)["loss"], last_val[2], delta=1e-5)
            r = subprocess.run(eval_cmd, capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("data.add_special_tokens: false", r.stderr)


class CausalLmScoringTest(unittest.TestCase):
    def test_scores_are_the_commands_and_chat_prompts_score_as_their_text(self):
        with tempfile.TemporaryDirectory() as d:
            model = tiny_chat_model(d)
            lm = ftune.load(model)
            self.assertIsInstance(lm, ftune.CausalLM)
            self.assertEqual(lm.architecture, "LlamaForCausalLM")
            prompts = ["repeat 1: red", "repeat 2: cat dog", "repeat 1: tree"]
            candidates = [" red", " cat dog cat dog", " water"]
            ll = lm.log_likelihoods(prompts, candidates)
            self.assertEqual(ll.shape, (3, 3))
            rows = os.path.join(d, "rows.jsonl")
            write_jsonl(rows, [{"prompt": p} for p in prompts])
            out = os.path.join(d, "scores.jsonl")
            r = subprocess.run([BINARY, "predict", "--model", model, "--data", rows, "--output",
                                out, "--candidates", ",".join(candidates)],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                cli = [json.loads(line) for line in f]
            self.assertEqual(ll.tolist(), [c["log_likelihoods"] for c in cli])
            self.assertEqual(lm.choose(prompts, candidates), [c["prediction"] for c in cli])
            self.assertEqual(lm.probabilities(prompts, candidates).tolist(),
                             [c["probabilities"] for c in cli])
            # One prompt: a 1-D row; per-prompt lists.
            self.assertEqual(lm.log_likelihoods(prompts[1], candidates).tolist(), ll[1].tolist())
            per = lm.log_likelihoods(prompts[:2], [candidates[:2], candidates[1:]])
            self.assertEqual(per.tolist(), [ll[0][:2].tolist(), ll[1][1:].tolist()])
            # A chat prompt is its rendered text (which writes <s> itself), without the
            # tokenizer's special tokens: the same as the text after <s> with them.
            messages = [{"role": "user", "content": "repeat 1: red"}]
            text = "<|im_start|>user\nrepeat 1: red<|im_end|>\n<|im_start|>assistant\n"
            self.assertEqual(lm.log_likelihoods(messages, ["red", "cat"]).tolist(),
                             lm.log_likelihoods(text, ["red", "cat"]).tolist())
            for bad, message in [((prompts, [candidates, candidates]), "2 candidate lists"),
                                 ((prompts[:2], [[" a"], [" a", " b"]]), "same number"),
                                 ((prompts[0], [""]), "empty candidate")]:
                with self.assertRaisesRegex(ValueError, message):
                    lm.log_likelihoods(*bad)


if __name__ == "__main__":
    unittest.main()
