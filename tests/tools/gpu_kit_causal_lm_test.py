#!/usr/bin/env python3
"""The GPU kit's causal_lm stage (tools/gpu_kit/kit_causal_lm.py) without a GPU or torch: the
prompt -> completion rows both sides train on, the planned-vs-measured memory fields, the causal-LM
config of a decoder family (kit_models.py), and the HF peer's tokenization of a row
(bench/hf_peer_causal_lm.py: the completion learned, the prompt masked, EOS, cut at max_length)
with a stand-in tokenizer. Standard library only; run by ctest (tests/CMakeLists.txt). The stage's
runs are checked by `bash tools/gpu_kit.sh --selfcheck` with a Python that has torch,
transformers and peft.
"""
import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "gpu_kit"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import hf_peer_causal_lm  # noqa: E402
import kit_causal_lm  # noqa: E402
import kit_models  # noqa: E402


class Words:
    """A stand-in tokenizer: [CLS] 101, one id per word (its number + 1000), [SEP] 102."""

    def __call__(self, text):
        return {"input_ids": [101] + [1000 + int(w[1:]) for w in text.split()] + [102]}


class CausalLmStage(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.src = os.path.join(self.dir.name, "train.jsonl")
        with open(self.src, "w") as f:  # pair i: sentence t<i>, gloss g<i>
            for i in range(100):
                f.write(json.dumps({"text": "t%d" % i, "text_pair": "g%d" % i, "label": 1}) + "\n")

    def tearDown(self):
        self.dir.cleanup()

    def test_rows_are_one_sentence_then_consecutive_glosses(self):
        out = kit_causal_lm.completion_rows(self.src, os.path.join(self.dir.name, "a.jsonl"), 12)
        with open(out) as f:
            rows = [json.loads(l) for l in f]
        self.assertEqual(len(rows), 12)
        seen = []
        for r in rows:
            self.assertEqual(set(r), {"prompt", "completion"})
            self.assertTrue(r["prompt"].startswith("t") and r["prompt"].endswith("\n"))
            glosses = r["completion"].split()
            self.assertTrue(kit_causal_lm.K[0] <= len(glosses) <= kit_causal_lm.K[1])
            self.assertEqual(r["prompt"].strip()[1:], glosses[0][1:])  # the first pair's sentence
            seen += glosses
        self.assertEqual(len(set(seen[:100])), min(100, len(seen)))  # one pass of the shuffle
        again = kit_causal_lm.completion_rows(self.src, os.path.join(self.dir.name, "b.jsonl"), 12)
        with open(out) as f, open(again) as g:
            self.assertEqual(f.read(), g.read())  # seeded

    def test_memory_fields(self):
        self.assertEqual(kit_causal_lm.memory_fields({}), {})
        m = kit_causal_lm.memory_fields({"planned_total_bytes": 4 << 30,
                                         "measured_device_bytes": 3 << 30})
        self.assertEqual(m, {"planned_MiB": 4096, "measured_MiB": 3072,
                             "measured_over_planned": 0.75})

    def test_the_family_as_a_causal_lm(self):
        cfg = kit_models.family_config("qwen2.5-0.5b", causal_lm=True)
        self.assertEqual(cfg["architectures"], ["Qwen2ForCausalLM"])
        self.assertTrue(cfg["tie_word_embeddings"])
        self.assertNotIn("num_labels", cfg)
        self.assertEqual(cfg["vocab_size"], 151936)
        with self.assertRaises(ValueError):
            kit_models.family_config("modernbert-base", causal_lm=True)
        self.assertEqual(kit_models.family_config("qwen2.5-0.5b")["architectures"],
                         ["Qwen2ForSequenceClassification"])

    def test_the_peer_learns_the_completion_and_eos(self):
        items = hf_peer_causal_lm.tokenize_completions(Words(), [("t1 t2", " g3 g4")], 64, 7)
        self.assertEqual(items[0]["input_ids"], [101, 1001, 1002, 1003, 1004, 102, 7])
        # The prompt alone is [CLS] t1 t2 [SEP]: the ids part after [CLS] t1 t2 (TRL 1.16's
        # common prefix, as ftune), so g3 is learned too (len(tokenizer(prompt)) would mask it).
        self.assertEqual(items[0]["labels"], [-100] * 3 + [1003, 1004, 102, 7])
        self.assertEqual(items[0]["attention_mask"], [1] * 7)
        cut = hf_peer_causal_lm.tokenize_completions(Words(), [("t1 t2", " g3 g4")], 5, 7)[0]
        self.assertEqual(cut["input_ids"], [101, 1001, 1002, 1003, 1004])
        self.assertEqual(cut["labels"], [-100] * 3 + [1003, 1004])


if __name__ == "__main__":
    unittest.main()
