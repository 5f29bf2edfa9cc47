"""ftune.hpo from Python (python/ftune/hpo.py, issue 37), run by ctest.

A Python function as the objective: every trial calls it with the sampled params and the
config's fixed ones, the study's best trial is the best value the function returned, reports
reach the pruner (a pruned trial is PRUNED whether the function raises TrialPruned or returns),
an exception fails its trial and the study goes on, a trial object kept past its end refuses
reports, Ctrl-C fails the trial in flight and raises KeyboardInterrupt with Python's own SIGINT
handling back afterwards. The config's own objective (in-process training trials) runs from
Python too. Needs FTUNE_MINILM_DIR for that last test.
"""

import json
import os
import signal
import sys
import tempfile
import time
import unittest

import ftune
import ftune.hpo

MINILM = os.environ.get("FTUNE_MINILM_DIR", "")


def search(tmp, name, **extra):
    s = {"study": {"name": name, "direction": "minimize"},
         "storage": f"sqlite:///{tmp}/study.db",
         "sampler": {"type": "tpe", "n_startup_trials": 4},
         "seed": 7,
         "space": {"x": {"type": "float", "low": -10.0, "high": 10.0},
                   "kind": {"type": "categorical", "choices": ["a", "b"]}},
         "failure_backoff_s": 0.01}
    s.update(extra)
    return s


class HpoTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def test_a_function_objective_finds_the_best_of_its_values(self):
        seen = []

        def objective(trial):
            x, kind = trial.params["x"], trial.params["kind"]
            self.assertIsInstance(x, float)
            self.assertIn(kind, ("a", "b"))
            self.assertEqual(trial.params["fixed.k"], 3)  # the config's fixed values too
            value = (x - 2.0) ** 2 + (0.0 if kind == "b" else 1.0)
            seen.append((trial.number, x, kind, value))
            return value

        study = ftune.hpo.run(search(self.tmp.name, "quad", fixed={"fixed.k": 3}),
                              objective=objective, n_trials=12)
        self.assertEqual(len(seen), 12)
        self.assertEqual([s[0] for s in seen], list(range(12)))
        best = min(seen, key=lambda s: s[3])
        self.assertEqual(study.best_number, best[0])
        self.assertEqual(study.best_value, best[3])
        self.assertAlmostEqual(float(study.best_params["x"]), best[1], places=12)
        self.assertEqual(study.best_params["kind"], best[2])
        self.assertEqual(study.worker, {"complete": 12, "pruned": 0, "failed": 0})
        self.assertEqual(study.study_counts["complete"], 12)
        self.assertEqual(study.direction, "minimize")
        # A second worker continues the same study up to its budget of 15.
        more = ftune.hpo.run(search(self.tmp.name, "quad", fixed={"fixed.k": 3}),
                             objective=objective, n_trials=15)
        self.assertEqual(more.worker["complete"], 3)
        self.assertEqual(len(seen), 15)

    def test_reports_reach_the_pruner_and_pruned_trials_end_pruned(self):
        def objective(trial):
            # Trials 4, 6, 8, ... are far worse at every step: the median pruner stops them.
            worse = 100.0 if trial.number >= 4 and trial.number % 2 == 0 else 0.0
            for step in range(5):
                if trial.report(step, worse + 1.0 / (step + 1)):
                    if trial.number % 4 == 0:
                        raise ftune.hpo.TrialPruned()
                    return worse  # returning after a stop is PRUNED too
            return worse + 0.1

        cfg = search(self.tmp.name, "pruned",
                     pruner={"type": "median", "n_startup_trials": 4, "n_warmup_steps": 1})
        study = ftune.hpo.run(cfg, objective=objective, n_trials=10)
        self.assertEqual(study.worker["pruned"], 3)  # trials 4, 6 and 8
        self.assertEqual([t["state"] for t in study.trials],
                         ["COMPLETE"] * 4 + ["PRUNED", "COMPLETE"] * 3)
        self.assertAlmostEqual(study.best_value, 0.1)

    def test_a_failing_trial_fails_alone_and_a_kept_trial_refuses_reports(self):
        kept = []

        def objective(trial):
            kept.append(trial)
            if trial.number == 1:
                raise ValueError("no good at trial one")
            if trial.number == 2:
                return "not a number"
            return trial.params["x"] ** 2

        study = ftune.hpo.run(search(self.tmp.name, "fails"), objective=objective, n_trials=5)
        self.assertEqual(study.worker, {"complete": 3, "pruned": 0, "failed": 2})
        errors = [t["error"] for t in study.trials]
        self.assertIn("no good at trial one", errors[1])
        self.assertIn("returned a str, not a number", errors[2])
        with self.assertRaisesRegex(ValueError, "trial 0 has ended"):
            kept[0].report(1, 0.5)

    def test_config_errors_are_named(self):
        cfg = search(self.tmp.name, "bad", objective={"command": "true"})
        with self.assertRaisesRegex(ValueError, "key 'objective' belongs to a config's own "
                                                "objective, but the caller gives the objective"):
            ftune.hpo.run(cfg, objective=lambda t: 0.0, n_trials=1)
        cfg = search(self.tmp.name, "bad")
        cfg["space"]["x"]["type"] = "floaty"
        with self.assertRaisesRegex(ValueError, "space"):
            ftune.hpo.run(cfg, objective=lambda t: 0.0, n_trials=1)
        with self.assertRaisesRegex(ValueError, "missing key 'objective'"):
            ftune.hpo.run(search(self.tmp.name, "none"), n_trials=1)
        with self.assertRaisesRegex(ValueError, "n_trials must be at least 1"):
            ftune.hpo.run(search(self.tmp.name, "zero"), objective=lambda t: 0.0, n_trials=0)

    def test_ctrl_c_fails_the_trial_in_flight_and_raises_keyboard_interrupt(self):
        calls = []

        def objective(trial):
            calls.append(trial.number)
            if trial.number == 1:
                os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C in a terminal
                deadline = time.time() + 10
                while not trial.should_stop() and time.time() < deadline:
                    time.sleep(0.01)
                self.assertTrue(trial.should_stop())
                raise ftune.hpo.TrialPruned()
            return 1.0

        with self.assertRaises(KeyboardInterrupt):
            ftune.hpo.run(search(self.tmp.name, "ctrl-c"), objective=objective, n_trials=5)
        self.assertEqual(calls, [0, 1])  # no trial after the interrupt
        # The study as another worker finds it: trial 1 FAIL "interrupted".
        later = ftune.hpo.run(search(self.tmp.name, "ctrl-c"), objective=lambda t: 2.0,
                              n_trials=3)
        self.assertEqual([t["state"] for t in later.trials], ["COMPLETE", "FAIL", "COMPLETE"])  # Optuna's names
        self.assertIn("interrupted", later.trials[1]["error"])
        # Python's own SIGINT handling is back.
        with self.assertRaises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)

    @unittest.skipUnless(MINILM, "FTUNE_MINILM_DIR is not set")
    def test_the_configs_own_training_objective_runs_from_python(self):
        data = os.path.join(self.tmp.name, "pairs.jsonl")
        with open(data, "w") as f:
            for k in range(16):
                f.write(json.dumps({"text": f"query {k % 4}", "text_pair": f"passage {k}",
                                    "label": k % 2}) + "\n")
        train = os.path.join(self.tmp.name, "train.yaml")
        with open(train, "w") as f:
            json.dump({"model": {"path": MINILM},
                       "data": {"train": data, "validation": data, "max_length": 16},
                       "training": {"max_steps": 2, "batch_size": 8, "threads": 2},
                       "output": {"dir": os.path.join(self.tmp.name, "runs"),
                                  "progress": "plain", "tensorboard": False}}, f)
        cfg = {"study": {"name": "train", "metric": "eval.accuracy"},
               "storage": f"sqlite:///{self.tmp.name}/study.db",
               "sampler": {"type": "random"}, "seed": 3,
               "space": {"training.learning_rate": {"type": "float", "low": 1e-5,
                                                    "high": 1e-4, "log": True}},
               "objective": {"train_config": train}}
        study = ftune.hpo.run(cfg, n_trials=2)
        self.assertEqual(study.worker, {"complete": 2, "pruned": 0, "failed": 0})
        self.assertEqual(study.direction, "maximize")  # accuracy: higher is better
        self.assertIn("training.learning_rate", study.best_params)
        self.assertTrue(0.0 <= study.best_value <= 1.0)


if __name__ == "__main__":
    sys.exit(unittest.main())
