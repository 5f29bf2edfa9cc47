"""Hyperparameter search from Python: one worker of a study, as `ftune hpo run` runs it.

    import ftune, ftune.hpo

    def objective(trial):                       # trial.params: {"training.learning_rate": 3e-5, ...}
        run = ftune.train("train.yaml", overrides=trial.params, output__dir=f"runs/t{trial.number}",
                          on_eval=lambda step, m: trial.report(step, m["f1"]))
        return run.best_metric

    study = ftune.hpo.run({"study": {"name": "lr", "direction": "maximize"},
                           "storage": "sqlite:///study.db",
                           "space": {"training.learning_rate": {"type": "float", "low": 1e-5,
                                                                "high": 1e-4, "log": True}}},
                          objective=objective, n_trials=20)
    study.best_value, study.best_params

Without `objective` the config's own objective runs (`objective: {train_config: ...}` or a
command). With one, the config has no `objective`, `folds` or `trial_ranks`: the function runs
its folds itself and reports each with `trial.report_fold(k, value)`. `trial.report(step, value)`
returns True when the pruner says stop: return then, or raise TrialPruned. The same storages,
samplers and pruners as the CLI; several processes may run workers of one study side by side.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Union

from ._ftune import Trial
from ._ftune import hpo_run as _hpo_run

__all__ = ["Study", "Trial", "TrialPruned", "run"]


class TrialPruned(Exception):
    """Raised by an objective to end its trial as PRUNED (after a report returned True)."""


@dataclass
class Study:
    """What one worker's run of a study left: the study's best trial and the trial counts."""
    name: str
    direction: str
    worker: dict = field(default_factory=dict)        # this worker's complete / pruned / failed
    study_counts: dict = field(default_factory=dict)  # the whole study's trials by state
    best_number: Optional[int] = None
    best_value: Optional[float] = None
    best_params: dict = field(default_factory=dict)   # as config overrides take them (text)
    # Every trial of the study when the worker ended, in number order: {"number", "state",
    # "value", "params", "error"}.
    trials: list = field(default_factory=list)


def run(search: Union[str, os.PathLike, Mapping[str, Any]],
        objective: Optional[Callable[[Trial], float]] = None, n_trials: Optional[int] = None,
        timeout: Optional[float] = None, storage: Optional[str] = None,
        study: Optional[str] = None) -> Study:
    """Runs one worker of the study that `search` (a YAML file or a dict of the same keys)
    describes, until n_trials trials of the study are done or `timeout` seconds have passed.

    Ctrl-C fails the trial in flight, starts no other and raises KeyboardInterrupt; bad keys
    raise ValueError naming them. A trial whose objective raises is FAILED with its message
    (the study goes on; `worker["failed"]` counts them).
    """
    if n_trials is not None and n_trials < 1:
        raise ValueError(f"n_trials must be at least 1, got {n_trials}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
    if isinstance(search, Mapping):
        text, is_path = json.dumps(dict(search)), False
    else:
        text, is_path = os.fspath(search), True
    out = json.loads(_hpo_run(text, is_path, objective, TrialPruned, n_trials or -1,
                              timeout or 0.0, storage or "", study or ""))
    best = out.get("best") or {}
    return Study(name=out["study"], direction=out["direction"], worker=out["worker"],
                 study_counts=out["study_counts"], best_number=best.get("number"),
                 best_value=best.get("value"), best_params=best.get("params", {}),
                 trials=sorted(out["trials"], key=lambda t: t["number"]))
