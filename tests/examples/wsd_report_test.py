#!/usr/bin/env python3
"""Checks the main job's report (tools/wsd_report.py) on a hand-computed example.

Three test sentences (groups) of 3, 2 and 3 candidates, with `ftune predict`-style rows whose
threshold decisions and logits are chosen so that both of the report's decision rules have known
answers: at the threshold, 2 true positives, 2 false positives, 1 false negative; one sense per
sentence (the top-scoring candidate, ties to the lower sense), 2 of 3 sentences right, so pair
precision = recall = F1 = group accuracy = 2/3. Also: the margin over the best baseline, the
--json file, and a refusal when the predictions do not line up with the test rows.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT = os.path.join(SOURCE, "tools", "wsd_report.py")

# (group, gold label, predicted label at the threshold, logit of class 1 minus class 0)
ROWS = [
    ("g1", 0, "1", 2.0),   # group 1: the top candidate (sense 1) is wrong -> group missed
    ("g1", 1, "1", 1.0),
    ("g1", 0, "0", -1.0),
    ("g2", 1, "0", 0.5),   # group 2: tie at 0.5 goes to sense 1, the gold one -> group right
    ("g2", 0, "0", 0.5),
    ("g3", 0, "0", -2.0),  # group 3: top candidate (sense 3) is gold -> group right
    ("g3", 0, "1", 0.1),
    ("g3", 1, "1", 3.0),
]
BASELINES = {"test": {
    "majority": {"accuracy": 0.625, "precision": 0.0, "recall": 0.0, "f1": 0.0,
                 "macro_f1": 0.3846, "group_accuracy": 0.0},
    "first_sense": {"accuracy": 0.75, "precision": 0.3333, "recall": 0.3333, "f1": 0.3333,
                    "macro_f1": 0.5667, "group_accuracy": 0.3333},
    "lexical_overlap": {"accuracy": 0.5, "precision": 0.3, "recall": 0.3, "f1": 0.3,
                        "macro_f1": 0.45, "group_accuracy": 0.5},
    "chance_group_accuracy": 0.3889}}


class WsdReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = self.tmp.name
        self.test = os.path.join(d, "test.jsonl")
        self.preds = os.path.join(d, "preds.jsonl")
        self.baselines = os.path.join(d, "baselines.json")
        self.json = os.path.join(d, "report.json")
        with open(self.test, "w") as t, open(self.preds, "w") as p:
            for group, gold, label, margin in ROWS:
                t.write(json.dumps({"text": "s", "text_pair": "w: d", "label": gold,
                                    "group": group}) + "\n")
                p.write(json.dumps({"label": label, "logits": [0.0, margin]}) + "\n")
        with open(self.baselines, "w") as f:
            json.dump(BASELINES, f)

    def tearDown(self):
        self.tmp.cleanup()

    def run_report(self, *extra):
        return subprocess.run([sys.executable, REPORT, self.test, self.preds, self.baselines,
                               *extra], capture_output=True, text=True)

    def test_both_decision_rules_and_margins(self):
        run = self.run_report("--json", self.json)
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(self.json) as f:
            r = json.load(f)
        self.assertEqual((r["pairs"], r["groups"]), (8, 3))
        t = r["threshold"]  # tp 2, fp 2, fn 1, tn 3
        self.assertAlmostEqual(t["accuracy"], 5 / 8)
        self.assertAlmostEqual(t["precision"], 2 / 4)
        self.assertAlmostEqual(t["recall"], 2 / 3)
        self.assertAlmostEqual(t["f1"], 2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
        neg_f1 = 2 * 0.75 * 0.6 / (0.75 + 0.6)  # negatives: precision 3/4, recall 3/5
        self.assertAlmostEqual(t["macro_f1"], (t["f1"] + neg_f1) / 2)
        o = r["one_sense"]  # one positive per group: 2 right, 1 wrong
        for key in ("precision", "recall", "f1", "group_accuracy"):
            self.assertAlmostEqual(o[key], 2 / 3, msg=key)
        self.assertAlmostEqual(o["accuracy"], 6 / 8)
        self.assertAlmostEqual(t["group_accuracy"], 2 / 3)
        m = r["margins"]
        self.assertEqual(m["group_accuracy"]["best_baseline"], "lexical_overlap")
        self.assertAlmostEqual(m["group_accuracy"]["margin"], 2 / 3 - 0.5)
        self.assertEqual(m["f1"]["best_baseline"], "first_sense")
        self.assertAlmostEqual(m["f1"]["margin"], t["f1"] - 0.3333)
        self.assertIn("ftune, one sense", run.stdout)
        self.assertIn("+16.7 points", run.stdout)

    def test_predictions_that_do_not_line_up_are_refused(self):
        with open(self.preds) as f:
            lines = f.readlines()
        with open(self.preds, "w") as f:
            f.writelines(lines[:-1])
        run = self.run_report()
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("7 predictions for 8 test rows", run.stderr)


if __name__ == "__main__":
    unittest.main()
