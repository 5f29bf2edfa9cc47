"""`import ftune` (python/, issue 37) against the golden fixtures and the CLI, run by ctest.

Tokenizer ids equal Hugging Face tokenizers' (the golden MiniLM cases); a loaded model's logits
equal `ftune predict`'s for the same rows bit for bit, from several threads at once too; rank()
orders by the same scores; train() from a dict or a file runs as `ftune train` does, stops when
its evaluation callback says so, and names a bad key; rows given in memory (dicts, a generator,
a DataFrame, a datasets.Dataset where datasets is installed) train as the same rows in a file,
bit for bit. Needs FTUNE_MINILM_DIR and FTUNE_BINARY.
"""

import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import numpy as np

import ftune

SOURCE = os.environ["FTUNE_SOURCE_DIR"]
BINARY = os.environ["FTUNE_BINARY"]
MINILM = os.environ.get("FTUNE_MINILM_DIR", "")
FIXTURES = os.path.join(SOURCE, "tests", "fixtures", "tokenizers")

PAIRS = [
    ("a \"branch\" of Congress", "branch: a division of some larger or more complex organization"),
    ("a \"branch\" of Congress", "branch: a part of a forked or branching shape"),
    ("he sat on the river \"bank\"", "bank: sloping land beside a body of water"),
    ("he sat on the river \"bank\"", "bank: a financial institution that accepts deposits"),
    ("short", "a much longer second text that the tokenizer splits into many more word pieces"),
]


def golden(name):
    with gzip.open(os.path.join(FIXTURES, "golden", name + ".jsonl.gz"), "rt") as f:
        records = [json.loads(line) for line in f]
    with gzip.open(os.path.join(FIXTURES, "corpus.jsonl.gz"), "rt") as f:
        corpus = [json.loads(line)["t"] for line in f]
    return records[1:], corpus


class TypingTest(unittest.TestCase):
    def test_the_extension_has_type_stubs_for_what_the_package_uses(self):
        import ast
        import ftune._ftune as ext
        here = os.path.dirname(ext.__file__)
        self.assertTrue(os.path.isfile(os.path.join(here, "py.typed")))  # PEP 561
        with open(os.path.join(here, "_ftune.pyi")) as f:
            tree = ast.parse(f.read())
        declared = {node.name for node in tree.body
                    if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
        for name in ("Encoding", "Tokenizer", "Model", "MemorySource", "train", "config_keys",
                     "set_threads", "threads"):
            self.assertIn(name, declared)
            self.assertTrue(hasattr(ext, name), name)


class TokenizerTest(unittest.TestCase):
    def test_encode_batch_gives_hugging_faces_ids(self):
        tok = ftune.Tokenizer.from_file(os.path.join(FIXTURES, "minilm", "tokenizer.json"))
        cases, corpus = golden("minilm")
        cases = [c for c in cases if c["k"] in ("s", "p")]
        inputs = [corpus[c["i"]] if c["k"] == "s" else (corpus[c["i"]], corpus[c["j"]])
                  for c in cases]
        encodings = tok.encode_batch(inputs)
        self.assertEqual(len(encodings), len(cases))
        for c, e in zip(cases, encodings):
            self.assertEqual(list(e.ids), c["ids"], c)
        self.assertGreater(len(cases), 5000)

    def test_bad_input_is_named(self):
        tok = ftune.Tokenizer.from_file(os.path.join(FIXTURES, "minilm", "tokenizer.json"))
        with self.assertRaisesRegex(TypeError, "input 1: expected a str or a"):
            tok.encode_batch(["fine", 42])
        with self.assertRaisesRegex(ValueError, "no-such-file.json"):
            ftune.Tokenizer.from_file("no-such-file.json")


@unittest.skipUnless(MINILM and os.path.isdir(MINILM), "FTUNE_MINILM_DIR not set")
class ModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # A two-label classifier from MiniLM (a new head, seeded): trained two steps so that the
        # model directory is one ftune wrote, as users load it.
        cls.trained = ftune.train(train_config(cls.tmp.name, "run"))
        cls.model_dir = cls.trained.model_path

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def cli_logits(self, rows, batch_size):
        data = os.path.join(self.tmp.name, "rows.jsonl")
        out = os.path.join(self.tmp.name, "pred.jsonl")
        with open(data, "w") as f:
            for r in rows:
                f.write(json.dumps({"text": r[0], "text_pair": r[1]} if isinstance(r, tuple)
                                   else {"text": r}) + "\n")
        subprocess.run([BINARY, "predict", "--model", self.model_dir, "--data", data,
                        "--output", out, "--batch-size", str(batch_size)], check=True,
                       capture_output=True)
        with open(out) as f:
            return np.array([json.loads(line)["logits"] for line in f], dtype=np.float32)

    def test_predict_equals_the_cli_bit_for_bit(self):
        m = ftune.load(self.model_dir)
        self.assertEqual(m.num_labels, 2)
        rows = PAIRS + ["a single text"]
        logits = m.predict(rows, batch_size=2)
        self.assertEqual(logits.dtype, np.float32)
        self.assertEqual(logits.shape, (len(rows), 2))
        self.assertTrue(logits.flags["C_CONTIGUOUS"])
        np.testing.assert_array_equal(logits, self.cli_logits(rows, 2))
        np.testing.assert_array_equal(m.predict(rows, batch_size=32), self.cli_logits(rows, 32))
        # Another batch size pads rows to other lengths and cuts GEMMs otherwise: the same numbers
        # within float summation order.
        np.testing.assert_allclose(m.predict(rows, batch_size=32), logits, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(m.predict(PAIRS[4]), logits[4], rtol=1e-5, atol=1e-7)
        probs = m.predict(rows, batch_size=2, output="probabilities")
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-6)
        np.testing.assert_array_equal(m.predict(rows, batch_size=2, output="scores"),
                                      logits[:, 1] - logits[:, 0])

    def test_rank_orders_by_the_score(self):
        m = ftune.load(self.model_dir)
        docs = [p[1] for p in PAIRS[:2]]
        ranked = m.rank(PAIRS[0][0], docs)
        scores = m.predict([(PAIRS[0][0], d) for d in docs], output="scores")
        self.assertEqual(sorted(i for i, _ in ranked), [0, 1])
        self.assertEqual([i for i, _ in ranked], list(np.argsort(-scores, kind="stable")))
        for i, s in ranked:
            self.assertAlmostEqual(s, float(scores[i]), places=5)

    def test_threads_share_a_model(self):
        m = ftune.load(self.model_dir)
        # Threads asking for other batch sizes make the model's arena grow while others wait.
        want = {b: m.predict(PAIRS, batch_size=b) for b in (1, 2, 3)}
        m = ftune.load(self.model_dir)
        results, errors = [None] * 6, []

        def work(k):
            try:
                for _ in range(3):
                    results[k] = m.predict(PAIRS, batch_size=1 + k % 3)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        for k, r in enumerate(results):
            np.testing.assert_array_equal(r, want[1 + k % 3])

    def test_set_threads_changes_the_compute_threads_not_the_scores(self):
        m = ftune.load(self.model_dir)
        before = ftune.threads()
        try:
            ftune.set_threads(2)
            self.assertEqual(ftune.threads(), 2)
            two = m.predict(PAIRS)
            ftune.set_threads(1)
            self.assertEqual(ftune.threads(), 1)
            np.testing.assert_allclose(m.predict(PAIRS), two, rtol=1e-5, atol=1e-6)
        finally:
            ftune.set_threads(before)

    def test_predict_on_token_ids_equals_predict_on_the_texts(self):
        m = ftune.load(self.model_dir)
        ids = m.tokenize(PAIRS)
        tok = ftune.Tokenizer.from_pretrained(self.model_dir)
        types = [list(e.type_ids) for e in tok.encode_batch(PAIRS, max_length=m.max_length)]
        np.testing.assert_array_equal(m.predict_ids(ids, types, batch_size=2),
                                      m.predict(PAIRS, batch_size=2))
        np.testing.assert_array_equal(m.predict_ids([np.array(r) for r in ids], types,
                                                    batch_size=2, output="scores"),
                                      m.predict(PAIRS, batch_size=2, output="scores"))
        with self.assertRaisesRegex(ValueError, r"input_ids row 2: expected ints, got a str"):
            m.predict_ids([[101, 102], [101, "x"]])
        with self.assertRaisesRegex(ValueError, r"token_type_ids row 1: 1 ids for 2 input_ids"):
            m.predict_ids([[101, 102]], [[0]])
        with self.assertRaisesRegex(ValueError, r"row 1.*40000"):
            m.predict_ids([[101, 40000, 102]])  # past MiniLM's 30522 ids
        with self.assertRaisesRegex(ValueError, r"row 1"):
            m.predict_ids([[101] + [1000] * 600 + [102]])  # past its 512 positions

    def test_a_model_directory_without_a_model_is_named(self):
        with self.assertRaisesRegex(ValueError, "config.json"):
            ftune.load(self.tmp.name)

    def test_train_from_a_file_with_keyword_overrides_and_a_stopping_callback(self):
        path = os.path.join(self.tmp.name, "cfg.yaml")
        with open(path, "w") as f:
            json.dump(train_config(self.tmp.name, "file-run"), f)  # JSON is YAML
        seen = []

        def on_eval(step, metrics):
            seen.append((step, metrics))
            return True  # stop at the first evaluation

        run = ftune.train(path, on_eval=on_eval, eval__every_steps=1, max_steps=3)
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0][0], 1)
        self.assertIn("accuracy", seen[0][1])
        self.assertEqual(run.summary["steps"], 1)
        self.assertEqual(run.run_dir, os.path.join(self.tmp.name, "file-run"))
        self.assertTrue(os.path.isfile(os.path.join(run.run_dir, "summary.json")))

    def test_on_log_sees_every_metrics_line_as_written(self):
        seen = []
        run = ftune.train(train_config(self.tmp.name, "on-log"), on_log=seen.append,
                          eval__every_steps=1)
        with open(os.path.join(run.run_dir, "metrics.jsonl")) as f:
            written = [json.loads(line) for line in f]
        self.assertEqual(seen, written)
        self.assertEqual([line["split"] for line in seen],
                         ["train", "validation", "train", "validation"])

        def fail(line):
            if line["split"] == "validation":
                raise RuntimeError("the caller stops here")

        cfg = train_config(self.tmp.name, "on-log-raises")
        with self.assertRaisesRegex(RuntimeError, "the caller stops here"):
            ftune.train(cfg, on_log=fail, eval__every_steps=1)
        # The run directory is free again (its lock released): the run can start over.
        cfg["output"]["overwrite"] = True
        self.assertEqual(ftune.train(cfg).status, "completed")

    def test_ctrl_c_stops_at_the_next_step_with_a_checkpoint_and_resume_completes(self):
        cfg = train_config(self.tmp.name, "interrupted")
        cfg["training"]["max_steps"] = 6
        steps = []

        def interrupt_once(line):
            steps.append(line["step"])
            if line["split"] == "train" and line["step"] == 2:
                os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C in a terminal

        with self.assertRaises(KeyboardInterrupt):
            ftune.train(cfg, on_log=interrupt_once)
        self.assertLess(max(steps), 6)
        run_dir = cfg["output"]["dir"]
        checkpoints = os.listdir(os.path.join(run_dir, "checkpoints"))
        self.assertTrue(any(c.startswith("step-") for c in checkpoints), checkpoints)
        resumed = ftune.train(cfg, resume=True)
        self.assertEqual(resumed.status, "completed")
        self.assertEqual(resumed.summary["steps"], 6)
        # Python's own SIGINT handling is back after the run.
        with self.assertRaises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)

    def test_signals_during_training_leave_the_run_and_the_process_whole(self):
        # oneDNN's sgemm kernels (training's gradients) point the stack pointer into the heap
        # while they run, so a handler run on the interrupted stack corrupted the heap
        # (docs/reliability.md). The interpreter's own handler (SA_ONSTACK since Python 3.10)
        # must run on the alternate stack ftune gives every thread that runs them: here another
        # thread sends the process signals as fast as it can during a run, which must log the
        # same losses, bit for bit, as the run without them.
        def run(name, hammer):
            cfg = train_config(self.tmp.name, name)
            cfg["training"].update(max_steps=8, batch_size=16, threads=1)
            cfg["data"]["max_length"] = 128
            if not hammer:
                return ftune.train(cfg), 0, 0
            handled, sent = [], [0]
            old = signal.signal(signal.SIGUSR1, lambda *_: handled.append(1))
            done = threading.Event()

            def send():
                while not done.is_set():
                    os.kill(os.getpid(), signal.SIGUSR1)
                    sent[0] += 1
                    time.sleep(0.0001)

            sender = threading.Thread(target=send)
            sender.start()
            try:
                return ftune.train(cfg), sent[0], len(handled)
            finally:
                done.set()
                sender.join()
                signal.signal(signal.SIGUSR1, old)

        quiet, _, _ = run("no-signals", False)
        loud, sent, handled = run("signals", True)
        self.assertEqual(loud.status, "completed")
        self.assertEqual(losses(loud.run_dir), losses(quiet.run_dir))
        # The interpreter runs the Python handler once per signal pending when it next runs
        # bytecode (after train() returns, in the callbacks): what counts is the thousands its C
        # handler took on ftune's threads while they trained.
        self.assertGreater(sent, 1000)
        self.assertGreater(handled, 0)

    def test_a_bad_key_is_named(self):
        cfg = train_config(self.tmp.name, "bad")
        cfg["training"]["lerning_rate"] = 1e-4
        with self.assertRaisesRegex(ValueError, r"unknown key 'training.lerning_rate' \(did you "
                                                r"mean 'training.learning_rate'\?\)"):
            ftune.train(cfg)
        with self.assertRaisesRegex(ValueError, "several keys"):
            ftune.train(train_config(self.tmp.name, "bad2"), batch_size=4)

    def test_rows_in_memory_train_as_the_same_rows_in_a_file(self):
        file_run = ftune.train(train_config(self.tmp.name, "rows-file"))
        rows = pair_rows()
        cfg = train_config(self.tmp.name, "rows-list")
        del cfg["data"]["train"], cfg["data"]["validation"]
        list_run = ftune.train(cfg, train=rows, validation=iter(rows))  # a list and a generator
        cfg = train_config(self.tmp.name, "rows-dict")
        cfg["data"]["train"] = rows
        cfg["data"]["validation"] = rows
        dict_run = ftune.train(cfg)
        want = losses(file_run.run_dir)
        self.assertEqual(len(want), 2)
        for run in (list_run, dict_run):
            self.assertEqual(losses(run.run_dir), want)  # the same arithmetic, bit for bit
            self.assertEqual(run.summary["best_eval"]["accuracy"],
                             file_run.summary["best_eval"]["accuracy"])
            np.testing.assert_array_equal(ftune.load(run.model_path).predict(PAIRS),
                                          ftune.load(file_run.model_path).predict(PAIRS))
            with open(os.path.join(run.run_dir, "config.yaml")) as f:
                self.assertIn("memory:train.jsonl", f.read())

    def test_a_data_frame_trains_as_its_rows(self):
        import pandas as pd  # tools/install_deps.sh installs it into .cache/pydeps
        rows = pair_rows()
        frame = pd.DataFrame(rows)
        cfg = train_config(self.tmp.name, "frame-list")
        a = ftune.train(cfg, train=rows, validation=rows)
        cfg = train_config(self.tmp.name, "frame")
        b = ftune.train(cfg, train=frame, validation=frame)
        self.assertEqual(losses(a.run_dir), losses(b.run_dir))

    def test_a_hugging_face_dataset_trains_as_its_rows(self):
        try:
            import datasets  # not in the test command's dependencies (pyarrow alone is ~40 MB)
        except ImportError:
            self.skipTest("datasets is not installed")
        rows = pair_rows()
        table = datasets.Dataset.from_list(rows)
        cfg = train_config(self.tmp.name, "hf-list")
        a = ftune.train(cfg, train=rows, validation=rows)
        cfg = train_config(self.tmp.name, "hf-dataset")
        b = ftune.train(cfg, train=table, validation=table.select(range(len(rows))))
        self.assertEqual(losses(a.run_dir), losses(b.run_dir))

    def test_a_bad_row_in_memory_is_named_by_its_number(self):
        rows = pair_rows()
        rows[4] = {"text": "", "text_pair": "x", "label": 1}
        cfg = train_config(self.tmp.name, "bad-row")
        cfg["data"]["bad_rows"] = "fail"
        with self.assertRaisesRegex(ValueError, r"memory:train\.jsonl:5: .*text"):
            ftune.train(cfg, train=rows)
        with self.assertRaisesRegex(TypeError, r"data\.train: row 2 is a str"):
            ftune.train(cfg, train=[rows[0], "not a dict"])
        with self.assertRaisesRegex(ValueError, r"data\.validation: no rows given"):
            ftune.train(cfg, validation=[])
        # The names were released after each failure: a run may use them again.
        run = ftune.train(train_config(self.tmp.name, "after-bad"), train=pair_rows())
        self.assertEqual(run.status, "completed")

    def test_a_memory_path_nobody_registered_is_named(self):
        cfg = train_config(self.tmp.name, "unregistered")
        cfg["data"]["train"] = "memory:train.jsonl"
        with self.assertRaisesRegex(ValueError, r"memory:train\.jsonl: no in-memory rows are "
                                                r"registered under this name"):
            ftune.train(cfg)

    def test_the_run_reports_its_outcome(self):
        self.assertEqual(self.trained.status, "completed")
        self.assertEqual(self.trained.summary["steps"], 2)
        self.assertTrue(os.path.isfile(os.path.join(self.model_dir, "model.safetensors")))
        self.assertIsNotNone(self.trained.best_metric)


def pair_rows():
    return [{"text": PAIRS[k % len(PAIRS)][0], "text_pair": PAIRS[k % len(PAIRS)][1],
             "label": k % 2} for k in range(16)]


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    return [line["loss"] for line in lines if line.get("split") == "train"]


def train_config(tmp, name):
    data = os.path.join(tmp, "pairs.jsonl")
    if not os.path.exists(data):
        with open(data, "w") as f:
            for row in pair_rows():
                f.write(json.dumps(row) + "\n")
    return {
        "model": {"path": MINILM},
        "data": {"train": data, "validation": data, "max_length": 32},
        "training": {"max_steps": 2, "batch_size": 8, "learning_rate": 1e-4, "threads": 2,
                     "log_every": 1},
        "output": {"dir": os.path.join(tmp, name), "progress": "plain", "tensorboard": False},
    }


if __name__ == "__main__":
    sys.exit(unittest.main())
