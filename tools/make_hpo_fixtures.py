#!/usr/bin/env python3
"""Golden cases for ftune's hyperparameter search, generated with Optuna (developer-only; CI
reads the committed JSON under tests/fixtures/hpo/).

  python3 -m pip install optuna==5.0.0 numpy
  python3 tools/make_hpo_fixtures.py

pruners.json: random study scenarios (trials starting, reporting, being pruned, completing and
failing in interleaved order) replayed through Optuna's pruners; every should_prune decision is
recorded next to the event that asked for it, for none/median/percentile/successive halving/
hyperband/threshold in both directions.
parzen.json: log-densities of Optuna's _ParzenEstimator (the core of TPE) for fixed observations
at fixed points, over float/log/int/log-int/stepped/categorical dimensions and several options.
grid.json: the order of Optuna's GridSampler grid points for a few spaces.
"""
import itertools
import json
import warnings
import math
import os
import random

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters
from optuna.samplers._tpe.sampler import default_weights
from optuna.trial import TrialState

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.filterwarnings("ignore")
OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "hpo")
STUDY_NAME = "golden"


def num(v):
    return None if isinstance(v, float) and math.isnan(v) else v


def make_pruner(cfg):
    t = cfg["type"]
    kw = {k: v for k, v in cfg.items() if k != "type"}
    if t == "none":
        return optuna.pruners.NopPruner()
    if t == "median":
        return optuna.pruners.MedianPruner(**kw)
    if t == "percentile":
        return optuna.pruners.PercentilePruner(**kw)
    if t == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(**kw)
    if t == "hyperband":
        return optuna.pruners.HyperbandPruner(**kw)
    if t == "threshold":
        return optuna.pruners.ThresholdPruner(**kw)
    raise ValueError(t)


def random_config(rng, t):
    if t == "none":
        return {"type": "none"}
    if t in ("median", "percentile"):
        cfg = {"type": t}
        if t == "percentile":
            cfg["percentile"] = rng.choice([10.0, 25.0, 33.3, 50.0, 75.0, 90.0])
        for key, choices in [("n_startup_trials", [0, 1, 2, 3, 5]), ("n_warmup_steps", [0, 0, 1, 2, 3]),
                             ("interval_steps", [1, 1, 2, 3]), ("n_min_trials", [1, 1, 2, 3])]:
            if rng.random() < 0.7:
                cfg[key] = rng.choice(choices)
        return cfg
    if t == "threshold":
        cfg = {"type": t}
        bounds = rng.choice(["lower", "upper", "both"])
        if bounds in ("lower", "both"):
            cfg["lower"] = rng.choice([-0.5, -0.2, 0.0, 0.26])
        if bounds in ("upper", "both"):
            cfg["upper"] = rng.choice([0.3, 0.5, 0.8])
        for key, choices in [("n_warmup_steps", [0, 0, 1, 2, 3]), ("interval_steps", [1, 1, 2, 3])]:
            if rng.random() < 0.7:
                cfg[key] = rng.choice(choices)
        return cfg
    if t == "asha":
        cfg = {"type": t, "min_resource": rng.choice(["auto", 1, 1, 2, 3]),
               "reduction_factor": rng.choice([2, 3, 4]),
               "min_early_stopping_rate": rng.choice([0, 0, 1])}
        if cfg["min_resource"] != "auto":
            cfg["bootstrap_count"] = rng.choice([0, 0, 1, 2])
        return cfg
    cfg = {"type": t, "min_resource": rng.choice([1, 1, 2]),
           "max_resource": rng.choice(["auto", 9, 12, 27]), "reduction_factor": rng.choice([2, 3, 4])}
    if cfg["max_resource"] != "auto":
        cfg["bootstrap_count"] = rng.choice([0, 0, 1])
        cfg["max_resource"] = max(cfg["max_resource"], cfg["min_resource"])
    return cfg


def scenario(rng, cfg, direction):
    """Plays one random study and returns its event log with Optuna's decisions."""
    study = optuna.create_study(study_name=STUDY_NAME, direction=direction, pruner=make_pruner(cfg))
    auto = cfg.get("min_resource") == "auto" or cfg.get("max_resource") == "auto"
    n_trials = rng.randint(4, 24)
    max_steps = rng.randint(1, 20) if cfg["type"] in ("asha", "hyperband") else rng.randint(1, 10)
    # Successive halving / Hyperband: ftune's worker stops a trial when told to, and with an
    # "auto" resource the golden cases are sequential (see src/hpo/pruner.h for why).
    halving = cfg["type"] in ("asha", "hyperband")
    concurrency = 1 if halving and auto else rng.choice([1, 1, 2, 3, 5])
    value_pool = [round(rng.uniform(-1, 1), 2) for _ in range(4)]  # ties on purpose
    events, running, started = [], {}, 0
    while started < n_trials or running:
        if started < n_trials and (len(running) < concurrency and (not running or rng.random() < 0.4)):
            trial = study.ask()
            plan = max_steps if auto or rng.random() < 0.7 else rng.randint(1, max_steps)
            running[trial.number] = {"trial": trial, "step": rng.choice([0, 0, 0, 1]), "plan": plan,
                                     "level": rng.uniform(-1, 1),
                                     "obey": halving or rng.random() < 0.85}
            events.append({"op": "ask", "number": trial.number})
            started += 1
            continue
        number = rng.choice(sorted(running))
        r = running[number]
        trial = r["trial"]
        if r["step"] >= r["plan"]:
            u = rng.random()
            if u < 0.1:
                study.tell(trial, state=TrialState.FAIL)
                events.append({"op": "tell", "number": number, "state": "FAIL"})
            else:
                value = r["last"] if "last" in r else rng.uniform(-1, 1)
                frozen = study.tell(trial, value)  # a NaN objective makes it FAIL
                if frozen.state == TrialState.COMPLETE:
                    events.append({"op": "tell", "number": number, "state": "COMPLETE", "value": value})
                else:
                    events.append({"op": "tell", "number": number, "state": frozen.state.name})
            del running[number]
            continue
        u = rng.random()
        if u < 0.05:
            value = float("nan")
        elif u < 0.25:
            value = rng.choice(value_pool)
        else:
            value = r["level"] + rng.gauss(0, 0.3) - 0.02 * r["step"]
        trial.report(value, r["step"])
        decision = bool(trial.should_prune())
        events.append({"op": "report", "number": number, "step": r["step"], "value": num(value),
                       "prune": decision})
        r["last"] = value
        r["step"] += 1
        if decision and r["obey"]:
            study.tell(trial, state=TrialState.PRUNED)
            events.append({"op": "tell", "number": number, "state": "PRUNED"})
            del running[number]
    return events


def pruner_cases():
    rng = random.Random(20261122)
    cases = []
    # threshold last: the earlier types' cases keep their random draws.
    for t, n in [("none", 10), ("median", 120), ("percentile", 120), ("asha", 150), ("hyperband", 150),
                 ("threshold", 60)]:
        for i in range(n):
            cfg = random_config(rng, t)
            direction = "minimize" if i % 2 == 0 else "maximize"
            cases.append({"config": cfg, "direction": direction,
                          "events": scenario(rng, cfg, direction)})
    return cases


def dist_json(name, d):
    if isinstance(d, CategoricalDistribution):
        return {"name": name, "type": "categorical", "choices": [str(c) for c in d.choices]}
    j = {"name": name, "type": "int" if isinstance(d, IntDistribution) else "float",
         "low": d.low, "high": d.high, "log": d.log}
    if d.step is not None:
        j["step"] = d.step
    return j


def parzen_cases():
    rng = np.random.RandomState(7)
    spaces = [
        {"x": FloatDistribution(-5.0, 10.0)},
        {"lr": FloatDistribution(1e-5, 1e-1, log=True)},
        {"n": IntDistribution(1, 64)},
        {"n": IntDistribution(1, 1024, log=True)},
        {"d": FloatDistribution(0.0, 0.5, step=0.05)},
        {"c": CategoricalDistribution(["a", "b", "c", "d"])},
        {"x": FloatDistribution(-5.0, 10.0), "lr": FloatDistribution(1e-5, 1e-1, log=True),
         "n": IntDistribution(2, 40, step=2), "c": CategoricalDistribution(["lora", "full", "none"])},
    ]
    options = [
        dict(prior_weight=1.0, consider_magic_clip=True, consider_endpoints=False),
        dict(prior_weight=0.5, consider_magic_clip=False, consider_endpoints=True),
        dict(prior_weight=2.0, consider_magic_clip=True, consider_endpoints=True),
    ]
    cases = []
    for space in spaces:
        for opt in options:
            for n_obs in [0, 1, 2, 5, 30, 60]:
                obs = {}
                for name, d in space.items():
                    if isinstance(d, CategoricalDistribution):
                        obs[name] = rng.randint(0, len(d.choices), size=n_obs).astype(float)
                    elif isinstance(d, IntDistribution):
                        # Distinct integers: numpy's argsort is not stable for ties.
                        vals = np.arange(d.low, d.high + 1, d.step)
                        obs[name] = rng.choice(vals, size=min(n_obs, len(vals)), replace=False).astype(float)
                    elif d.step is not None:
                        vals = np.arange(0, round((d.high - d.low) / d.step) + 1) * d.step + d.low
                        obs[name] = rng.choice(vals, size=min(n_obs, len(vals)), replace=False)
                    elif d.log:
                        obs[name] = np.exp(rng.uniform(np.log(d.low), np.log(d.high), size=n_obs))
                    else:
                        obs[name] = rng.uniform(d.low, d.high, size=n_obs)
                m = min(len(v) for v in obs.values())
                obs = {k: v[:m] for k, v in obs.items()}
                params = _ParzenEstimatorParameters(weights=default_weights, multivariate=True, **opt)
                pe = _ParzenEstimator(obs, space, params)
                points = pe.sample(rng, 16)
                logp = pe.log_pdf(points)
                cases.append({
                    "space": [dist_json(k, d) for k, d in space.items()],
                    "options": opt,
                    "observations": {k: v.tolist() for k, v in obs.items()},
                    "points": {k: v.tolist() for k, v in points.items()},
                    "log_pdf": logp.tolist(),
                })
    return cases


def grid_cases():
    spaces = [
        {"b": [1, 2, 3], "a": ["x", "y"]},
        {"lr": [0.1, 0.2], "n": [8, 16, 32], "m": ["p", "q"]},
    ]
    out = []
    for s in spaces:
        sampler = optuna.samplers.GridSampler(s, seed=0)
        # The grid before Optuna shuffles it (product over the sorted names), and the points a
        # study with the grid sampler visits until it stops by itself.
        product = [list(g) for g in itertools.product(*sampler._search_space.values())]
        study = optuna.create_study(sampler=sampler)
        study.optimize(lambda t: sum(hash(str(t.suggest_categorical(k, v))) % 7 for k, v in s.items()),
                       n_trials=10 * len(product))
        visited = [[t.params[k] for k in sorted(s)] for t in study.trials]
        out.append({"space": s, "grids": product, "visited": visited})
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in [("pruners.json", {"study_name": STUDY_NAME, "optuna": optuna.__version__,
                                         "cases": pruner_cases()}),
                       ("parzen.json", {"optuna": optuna.__version__, "cases": parzen_cases()}),
                       ("grid.json", {"optuna": optuna.__version__, "cases": grid_cases()})]:
        with open(os.path.join(OUT, name), "w") as f:
            json.dump(data, f, allow_nan=False, separators=(",", ":"))
            f.write("\n")
        print(name, os.path.getsize(os.path.join(OUT, name)), "bytes")


if __name__ == "__main__":
    main()
