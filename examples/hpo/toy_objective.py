"""A stand-in for a training script, to try `ftune hpo` in seconds: takes the trial's params as
--name=value arguments (they are also in $FTUNE_TRIAL_PARAMS as JSON), "trains" k folds of a few
epochs of a noisy quadratic, prints `intermediate STEP VALUE` after each epoch of the first fold
(so the pruner can stop a bad trial early), `fold K VALUE` after each fold and `value V` at the
end. Python standard library only. A real script prints the same lines from its training loop.
"""
import json
import math
import os
import random
import sys
import time

args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
assert json.loads(os.environ["FTUNE_TRIAL_PARAMS"])["learning_rate"] == float(args["learning_rate"])
lr = float(args["learning_rate"])
warmup = float(args["warmup_ratio"])
optimizer = args["optimizer"]
epochs = int(args.get("epochs", 3))
folds = int(os.environ.get("FTUNE_FOLDS", "1"))
rng = random.Random(int(os.environ["FTUNE_TRIAL_NUMBER"]))

# The "validation loss" is lowest near lr = 3e-5, warmup 0.1, and worse with sgd.
best = (math.log10(lr) - math.log10(3e-5)) ** 2 + (warmup - 0.1) ** 2
best += 0.3 if optimizer == "sgd" else 0.0
fold_values = []
for k in range(folds):
    for epoch in range(epochs):
        loss = best + 1.0 / (epoch + 1) + rng.gauss(0, 0.01)
        if k == 0:
            print(f"intermediate {epoch} {loss}", flush=True)
        time.sleep(0.01)
    fold_values.append(loss)
    print(f"fold {k} {loss}", flush=True)
print(f"value {sum(fold_values) / len(fold_values)}")
