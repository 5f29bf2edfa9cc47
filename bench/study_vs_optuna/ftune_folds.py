"""ftune's group k-fold (src/data/group_splits.cc) in Python, so the peer trains on the same folds.

Groups in first-appearance order (an example without a group is a group of its own), shuffled by
a Fisher-Yates walk over std::mt19937_64 seeded with seed * 0x9E3779B97F4A7C15 + 0xBF58476D1CE4E5B9
(mod 2**64), each group then dealt to the fold holding the fewest examples so far (the lowest fold
on ties). `python3 ftune_folds.py --check` tests the generator against the C++ standard's
required value (the 10000th output of a default-seeded mt19937_64 is 9981545732273789042).
"""

import sys

MASK = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64, word for word (the C++ standard's parameters)."""

    def __init__(self, seed):
        self.mt = [0] * 312
        self.mt[0] = seed & MASK
        for i in range(1, 312):
            prev = self.mt[i - 1]
            self.mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK
        self.index = 312

    def _twist(self):
        mt = self.mt
        for i in range(312):
            x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % 312] & 0x7FFFFFFF)
            xa = x >> 1
            if x & 1:
                xa ^= 0xB5026F5AA96619E9
            mt[i] = mt[(i + 156) % 312] ^ xa
        self.index = 0

    def __call__(self):
        if self.index >= 312:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK


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
    rng = MT19937_64(5489)
    for _ in range(9999):
        rng()
    value = rng()
    assert value == 9981545732273789042, value
    print("mt19937_64: the 10000th output of the default seed is the standard's value")
