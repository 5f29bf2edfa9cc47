#!/usr/bin/env python3
"""Keeps the main job's data builder (examples/wordnet_pairs.py) honest, on a small real slice.

The slice is Debian's WordNet with only its adverbs (index.adv, data.adv, adv.exc; empty noun,
verb and adjective files): ~1,700 groups, built in about a second. Checked: the builder's own
--check (one positive per group, every sense a candidate, a byte-identical second run under
another hash seed); splits that are disjoint by lemma and do not move when --seed or the
subsampling changes, so validation never leaks into test; stats.json describing exactly the
files written; the formulation (target marked in the sentence, lemma before the definition);
and the first-sense baseline recomputed from the test file. Exit status 77 (CTest: skipped) when
WordNet is not installed (apt-get install wordnet-base).
"""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILDER = os.path.join(SOURCE, "examples", "wordnet_pairs.py")
WORDNET = os.environ.get("WNSEARCHDIR", "/usr/share/wordnet")
SPLITS = ("train", "validation", "test")


def read_groups(path):
    groups = collections.OrderedDict()
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            groups.setdefault(row["group"], []).append(row)
    return groups


class WordnetPairsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="wordnet_pairs_test.")
        cls.slice = os.path.join(cls.tmp, "wordnet")
        os.makedirs(cls.slice)
        for name in ("noun", "verb", "adj"):
            for kind in ("index", "data"):
                open(os.path.join(cls.slice, f"{kind}.{name}"), "w").close()
        for name in ("index.adv", "data.adv", "adv.exc"):
            shutil.copy(os.path.join(WORDNET, name), cls.slice)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def build(self, name, *options, check=False):
        out = os.path.join(self.tmp, name)
        cmd = [sys.executable, BUILDER, "--out", out, "--wordnet-dir", self.slice, "--quiet",
               *options] + (["--check"] if check else [])
        run = subprocess.run(cmd, capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        return out

    def lemma_splits(self, out):
        where = {}
        for split in SPLITS:
            for rows in read_groups(os.path.join(out, f"{split}.jsonl")).values():
                key = (rows[0]["pos"], rows[0]["lemma"])
                self.assertEqual(where.setdefault(key, split), split,
                                 f"lemma {key} is in {where[key]} and {split}")
        return where

    def test_check_passes(self):
        self.build("checked", "--max-train-groups", "300", "--max-eval-groups", "60",
                   check=True)

    def test_splits_are_by_lemma_whatever_the_seed_and_subsampling(self):
        runs = [self.build("seed1", "--seed", "1", "--max-train-groups", "200"),
                self.build("seed2", "--seed", "2", "--max-train-groups", "200"),
                self.build("full", "--seed", "1", "--full")]
        maps = [self.lemma_splits(out) for out in runs]
        full = maps[2]
        for m in maps[:2]:
            for key, split in m.items():
                self.assertEqual(full[key], split, f"lemma {key} moved between splits")
        self.assertEqual(set(full.values()), set(SPLITS))
        # Different seeds keep different training groups from the same lemma pool.
        train = [set(read_groups(os.path.join(out, "train.jsonl"))) for out in runs[:2]]
        self.assertNotEqual(train[0], train[1])

    def test_stats_describe_the_written_files(self):
        out = self.build("stats", "--max-train-groups", "150", "--max-eval-groups", "40",
                         "--max-train-negatives", "1")
        with open(os.path.join(out, "stats.json"), encoding="utf-8") as f:
            written = json.load(f)["written"]
        for split in SPLITS:
            groups = read_groups(os.path.join(out, f"{split}.jsonl"))
            rows = [r for g in groups.values() for r in g]
            self.assertEqual(written[split]["groups"], len(groups), split)
            self.assertEqual(written[split]["pairs"], len(rows), split)
            self.assertEqual(written[split]["positives"], sum(r["label"] for r in rows), split)
        self.assertTrue(all(len(g) == 2 for g in read_groups(
            os.path.join(out, "train.jsonl")).values()))

    def test_formulation_and_first_sense_baseline(self):
        out = self.build("formulation", "--max-eval-groups", "60")
        groups = read_groups(os.path.join(out, "test.jsonl"))
        for rows in groups.values():
            self.assertEqual(sum(r["label"] for r in rows), 1)
            self.assertEqual([r["sense"] for r in rows], list(range(1, len(rows) + 1)))
            for r in rows:
                self.assertTrue(r["text_pair"].startswith(r["lemma"] + ": "), r)
                self.assertEqual(r["text"].count('"'), 2, r)
        with open(os.path.join(out, "baselines.json"), encoding="utf-8") as f:
            first_sense = json.load(f)["test"]["first_sense"]["group_accuracy"]
        gold_is_first = sum(rows[0]["label"] for rows in groups.values()) / len(groups)
        self.assertAlmostEqual(first_sense, round(gold_is_first, 4))


if __name__ == "__main__":
    if not os.path.exists(os.path.join(WORDNET, "data.adv")):
        print(f"skipped: no WordNet in {WORDNET} (apt-get install wordnet-base)")
        sys.exit(77)
    unittest.main()
