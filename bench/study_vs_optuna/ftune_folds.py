"""ftune's group k-fold (src/data/group_splits.cc) in Python, so the peer trains on the same folds.

Groups in first-appearance order (an example without a group is a group of its own), shuffled by
a Fisher-Yates walk over std::mt19937_64 seeded with seed * 0x9E3779B97F4A7C15 + 0xBF58476D1CE4E5B9
(mod 2**64), each group then dealt to the fold holding the fewest examples so far (the lowest fold
on ties). `python3 ftune_folds.py --check` tests the generator against the C++ standard's
required value (the 10000th output of a default-seeded mt19937_64 is 9981545732273789042).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: ftune_rng
from ftune_rng import MASK, MT19937_64, check  # noqa: E402,F401  (std::mt19937_64)


def group_fold_ids(group_keys, k, seed):
    """The fold (0..k-1) of every example; group_keys[i] is None for an example without a group."""
    groups, index = [], {}
    for i, key in enumerate(group_keys):
        if key is None:
            groups.append([i])
            continue
        if key not in index:
            index[key] = len(groups)
            groups.append([])
        groups[index[key]].append(i)
    rng = MT19937_64((seed * 0x9E3779B97F4A7C15 + 0xBF58476D1CE4E5B9) & MASK)
    for i in range(len(groups) - 1, 0, -1):
        j = rng() % (i + 1)
        groups[i], groups[j] = groups[j], groups[i]
    if k < 2 or k > len(groups):
        raise ValueError(f"k-fold: k = {k} folds for {len(groups)} groups")
    fold, size = [-1] * len(group_keys), [0] * k
    for g in groups:
        f = min(range(k), key=lambda c: (size[c], c))
        size[f] += len(g)
        for i in g:
            fold[i] = f
    return fold


if __name__ == "__main__" and "--check" in sys.argv:
    check()
