"""Optuna peer of bench/hpo_systems.cc: trials/s with 1, 4 and 16 worker processes sharing one
SQLite storage (Optuna's RDBStorage through SQLAlchemy), trivial objective (one report, value
x^2 + y), random sampler, study-wide budget via MaxTrialsCallback. Counts failures: workers that
died with an exception (e.g. "database is locked") and trials not COMPLETE. Then the time from a
kill -9 of a worker mid-trial to its trial being retried (heartbeat_interval / grace_period with
RetryFailedTrialCallback), like ftune's measurement.

    pip install optuna
    python3 bench/optuna_systems.py --storage sqlite:////tmp/optuna_bench.db --trials 400
"""
import argparse
import warnings
import multiprocessing as mp
import os
import signal
import time
import traceback

import optuna
from optuna.storages import RDBStorage, RetryFailedTrialCallback
from optuna.study import MaxTrialsCallback
from optuna.trial import TrialState


def objective(trial, block=False):
    x = trial.suggest_float("x", -3, 3)
    y = trial.suggest_int("y", 0, 4)
    v = x * x + y
    trial.report(v, 0)
    while block:
        time.sleep(1)
    return v


def worker(url, study_name, trials, errors, heartbeat=None, grace=None, block=False):
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    try:
        if heartbeat:
            try:  # Optuna >= 4.9 renamed the callback
                from optuna.storages import RetryHeartbeatStaleTrialCallback
                storage = RDBStorage(
                    url, heartbeat_interval=heartbeat, grace_period=grace,
                    heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1))
            except (ImportError, TypeError):
                storage = RDBStorage(url, heartbeat_interval=heartbeat, grace_period=grace,
                                     failed_trial_callback=RetryFailedTrialCallback(max_retry=1))
        else:
            storage = url
        study = optuna.load_study(study_name=study_name, storage=storage,
                                  sampler=optuna.samplers.RandomSampler())
        study.optimize(lambda t: objective(t, block),
                       callbacks=[MaxTrialsCallback(trials, states=None)])
    except Exception:  # noqa: BLE001 - counted, like a user would see it
        errors.put(traceback.format_exc().strip().splitlines()[-1])


def main():
    warnings.simplefilter("ignore")  # Optuna's experimental / deprecation notices
    ap = argparse.ArgumentParser()
    ap.add_argument("--storage", required=True)
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--workers", default="1,4,16")
    ap.add_argument("--heartbeat", type=float, default=1.0)  # Optuna's minimum is 1 s
    ap.add_argument("--grace", type=float, default=2.0)
    a = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    tag = os.getpid()
    print("| system | storage | workers | trials | wall s | trials/s | failed | duplicates |")
    print("|---|---|---|---|---|---|---|---|")
    for w in [int(s) for s in a.workers.split(",")]:
        name = f"throughput_{w}_{tag}"
        optuna.create_study(study_name=name, storage=a.storage, direction="minimize")
        errors = mp.Queue()
        start = time.perf_counter()
        procs = [mp.Process(target=worker, args=(a.storage, name, a.trials, errors))
                 for _ in range(w)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        wall = time.perf_counter() - start
        trials = optuna.load_study(study_name=name, storage=a.storage).get_trials(deepcopy=False)
        complete = sum(t.state == TrialState.COMPLETE for t in trials)
        failed = len(trials) - complete
        messages = []
        while not errors.empty():
            messages.append(errors.get())
        numbers = [t.number for t in trials]
        print(f"| optuna {optuna.__version__} | SQLite | {w} | {complete} | {wall:.2f} | "
              f"{complete / wall:.1f} | {failed} trials + {len(messages)} workers died | "
              f"{len(numbers) - len(set(numbers))} |", flush=True)
        for m in sorted(set(messages)):
            print(f"  worker error: {m}")

    name = f"kill_{tag}"
    optuna.create_study(study_name=name, storage=a.storage, direction="minimize")
    errors = mp.Queue()
    pa = mp.Process(target=worker, args=(a.storage, name, 1, errors, a.heartbeat, a.grace, True))
    pa.start()
    study = optuna.load_study(study_name=name, storage=a.storage)
    while not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        time.sleep(0.005)
    time.sleep(0.3)
    os.kill(pa.pid, signal.SIGKILL)
    pa.join()
    killed = time.perf_counter()
    # Optuna looks for stale trials only when a worker starts a new trial, so the second worker
    # keeps running trials (no budget) until the retry of the killed one is complete.
    pb = mp.Process(target=worker,
                    args=(a.storage, name, 10**9, errors, a.heartbeat, a.grace, False))
    pb.start()
    retried = done = None
    while done is None and time.perf_counter() - killed < 120:
        for t in study.get_trials(deepcopy=False):
            if "retry_history" in t.system_attrs or "failed_trial" in t.system_attrs:
                if retried is None and t.state != TrialState.WAITING:
                    retried = time.perf_counter() - killed
                if t.state == TrialState.COMPLETE:
                    done = time.perf_counter() - killed
        time.sleep(0.005)
    pb.terminate()
    pb.join()
    fmt = lambda v: "never" if v is None else f"{v:.2f} s"  # noqa: E731
    print(f"\nkill -9 mid-trial (optuna SQLite, heartbeat_interval {a.heartbeat}, grace_period "
          f"{a.grace}): retry running after {fmt(retried)}, complete after {fmt(done)}")


if __name__ == "__main__":
    main()
