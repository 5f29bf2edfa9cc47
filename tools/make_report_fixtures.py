#!/usr/bin/env python3
"""Golden cases for the study report's hyperparameter importances, generated with Optuna
(developer-only; CI reads the committed tests/fixtures/report/ped_anova.json).

  /work/venv-oracle/bin/python -m pip install optuna==5.0.0 numpy
  python3 tools/make_report_fixtures.py

Each case is a study run with Optuna's RandomSampler on an objective where some parameters
matter much more than others, over float, log-float, stepped float, int, log-int and categorical
distributions; the file holds every trial (state, value, params in Optuna's internal
representation, distributions as ftune's search space writes them) and the importances of
optuna.importance.get_param_importances(study, evaluator=PedAnovaImportanceEvaluator()).
"""
import json
import math
import os
import warnings

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.importance import PedAnovaImportanceEvaluator
from optuna.trial import TrialState

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.simplefilter("ignore")


def dist_json(d):
    """As ftune's storage writes a distribution (src/hpo/trial_json.cc)."""
    if isinstance(d, CategoricalDistribution):
        return {"kind": "categorical", "choices": [str(c) for c in d.choices]}
    kind = "int" if isinstance(d, IntDistribution) else "float"
    return {"kind": kind, "low": d.low, "high": d.high, "log": d.log,
            "step": 0.0 if d.step is None else d.step}


def objective_a(trial):
    lr = trial.suggest_float("lr", 1e-5, 1e-2, log=True)
    wd = trial.suggest_float("wd", 0.0, 0.3)
    bs = trial.suggest_categorical("bs", [8, 16, 32, 64])
    layers = trial.suggest_int("layers", 1, 12)
    if trial.number % 9 == 4:
        raise optuna.TrialPruned()
    return (math.log10(lr) + 3.5) ** 2 + 0.05 * wd + 0.01 * (bs == 64) + 0.002 * layers


def objective_b(trial):
    x = trial.suggest_float("x", -5.0, 5.0, step=0.5)
    y = trial.suggest_int("y", 1, 1024, log=True)
    c = trial.suggest_categorical("c", ["relu", "gelu", "tanh"])
    z = trial.suggest_float("z", 0.0, 1.0)
    return -(x - 1.0) ** 2 + 3.0 * (c == "gelu") + 0.1 * math.log2(y) + 0.01 * z


CASES = [
    ("minimize_mixed", "minimize", objective_a, 60, 11),
    ("maximize_stepped", "maximize", objective_b, 45, 5),
]


def main():
    out = {"optuna_version": optuna.__version__, "cases": []}
    for name, direction, objective, n, seed in CASES:
        study = optuna.create_study(direction=direction,
                                    sampler=optuna.samplers.RandomSampler(seed=seed))
        study.optimize(objective, n_trials=n, catch=())
        trials = []
        for t in study.get_trials(deepcopy=False):
            trials.append({
                "number": t.number,
                "state": {TrialState.COMPLETE: "COMPLETE", TrialState.PRUNED: "PRUNED",
                          TrialState.FAIL: "FAIL"}[t.state],
                "value": t.value,
                "params": {k: t.distributions[k].to_internal_repr(v) for k, v in t.params.items()},
                "distributions": {k: dist_json(d) for k, d in t.distributions.items()},
            })
        imp = optuna.importance.get_param_importances(
            study, evaluator=PedAnovaImportanceEvaluator())
        out["cases"].append({"name": name, "direction": direction, "trials": trials,
                             "importances": [[k, v] for k, v in imp.items()]})
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "report",
                        "ped_anova.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(path, [(c["name"], c["importances"]) for c in out["cases"]])


if __name__ == "__main__":
    main()
