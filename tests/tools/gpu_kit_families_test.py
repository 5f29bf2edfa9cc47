#!/usr/bin/env python3
"""The GPU kit's families stage (tools/gpu_kit/kit_families.py) without a GPU or torch: the data
both sides train on (the seeded WordNet sample and the long pairs), ftune's ratio over each HF
peer (bench/gpu_vs_hf.py), the report's table per family (kit_report.py) and the stage's rows
kept in case order as runs finish in two passes (kit_stage.py). Standard library only; run by
ctest (tests/CMakeLists.txt) in well under a second. The stage's runs themselves are checked by
`bash tools/gpu_kit.sh --selfcheck` with a Python that has torch, transformers and peft.
"""
import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "gpu_kit"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import gpu_vs_hf  # noqa: E402
import kit_families  # noqa: E402
import kit_report  # noqa: E402
from kit_stage import Stage  # noqa: E402


def read(path):
    with open(path) as f:
        return [json.loads(l) for l in f]


class FamiliesData(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.src = os.path.join(self.dir.name, "train.jsonl")
        with open(self.src, "w") as f:  # pair i: one-word text t<i>, gloss g<i>, label i % 2
            for i in range(100):
                f.write(json.dumps({"text": "t%d" % i, "text_pair": "g%d" % i, "label": i % 2,
                                    "lemma": "x"}) + "\n")

    def tearDown(self):
        self.dir.cleanup()

    def test_long_pairs_join_consecutive_pairs_of_one_shuffle(self):
        out = kit_families.long_pairs(self.src, os.path.join(self.dir.name, "a.jsonl"), 12)
        rows = read(out)
        self.assertEqual(len(rows), 12)
        order = []
        for r in rows:
            texts = [int(w[1:]) for w in r["text"].split()]
            glosses = [int(w[1:]) for w in r["text_pair"].split()]
            self.assertEqual(texts, glosses)  # texts with texts, glosses with glosses, aligned
            self.assertTrue(kit_families.LONG_K[0] <= len(texts) <= kit_families.LONG_K[1])
            self.assertEqual(r["label"], texts[0] % 2)  # the first pair's label
            self.assertEqual(set(r), {"text", "text_pair", "label"})
            order += texts
        # consecutive rows continue one permutation of the pairs (wrapping after all 100)
        self.assertEqual(sorted(order[:100]), list(range(100)))
        self.assertEqual(order[100:], order[:len(order) - 100])
        self.assertNotEqual(order[:100], list(range(100)))  # shuffled
        again = kit_families.long_pairs(self.src, os.path.join(self.dir.name, "b.jsonl"), 12)
        self.assertEqual(read(again), rows)  # seeded: the same file on every machine

    def test_sample_pairs_draws_distinct_rows(self):
        rows = read(kit_families.sample_pairs(self.src, os.path.join(self.dir.name, "s.jsonl"), 40))
        self.assertEqual(len(rows), 40)
        self.assertEqual(len({r["text"] for r in rows}), 40)
        self.assertNotEqual([r["text"] for r in rows], ["t%d" % i for i in range(40)])
        self.assertEqual(set(rows[0]), {"text", "text_pair", "label"})


class FamiliesRows(unittest.TestCase):
    def test_ratio_over_each_peer_of_the_same_case(self):
        rows = [{"model": "m 128", "impl": "ftune", "precision": "bf16", "samples_per_s": 300.0},
                {"model": "m 128", "impl": "hf-eager", "precision": "bf16", "samples_per_s": 100.0},
                {"model": "m 512", "impl": "hf-eager", "precision": "bf16", "samples_per_s": 10.0},
                {"model": "m 128", "impl": "hf-compile", "precision": "bf16", "error": "exit 1"},
                {"model": "m 128", "impl": "hf-compile", "precision": "bf16+tf32",
                 "samples_per_s": 150.0}]
        self.assertEqual(gpu_vs_hf.ratios_vs_peers(rows[0], rows),
                         {"hf-eager": 3.0, "hf-compile": 2.0})
        self.assertEqual(gpu_vs_hf.ratios_vs_peers(rows[1], rows), {})

    def test_stage_keeps_case_order_and_report_has_a_table_per_family(self):
        with tempfile.TemporaryDirectory() as d:
            stage = Stage("families", d)
            order = lambda x: (x["table"], x["case"], kit_families.IMPL_ORDER.get(x["impl"], 9))
            for table, case, impl in (("deb", "deb 128", "ftune"), ("deb", "deb 128", "hf-eager"),
                                      ("qwen", "qwen 512", "ftune"),
                                      ("deb", "deb 128", "hf-compile"),
                                      ("deb", "deb 512", "ftune")):
                stage.row({"table": table, "case": case, "impl": impl}, order=order)
            rows = read_doc(stage.path)["rows"]
            self.assertEqual([(r["case"], r["impl"]) for r in rows],
                             [("deb 128", "ftune"), ("deb 128", "hf-eager"),
                              ("deb 128", "hf-compile"), ("deb 512", "ftune"),
                              ("qwen 512", "ftune")])
        md = kit_report.rows_markdown(rows)
        self.assertLess(md.index("### deb\n"), md.index("### qwen\n"))
        deb = md[md.index("### deb\n"):md.index("### qwen\n")]
        self.assertEqual(deb.count("| deb "), 4)
        self.assertNotIn("qwen 512", deb)
        self.assertNotIn("table", md)  # the grouping field is no column


def read_doc(path):
    with open(path) as f:
        return json.load(f)


if __name__ == "__main__":
    unittest.main()
