"""std::mt19937_64 in Python, word for word (the C++ standard's parameters and seeding), for the
benchmark peers that replay ftune's random choices: its group k-folds
(study_vs_optuna/ftune_folds.py) and its training batch order (causal_lm_vs_hf/ftune_order.py).
`python3 bench/ftune_rng.py` checks it against the standard's required value (the 10000th output
of a default-seeded mt19937_64 is 9981545732273789042)."""

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


def check():
    """Asserts the C++ standard's required value: the 10000th output of the default seed."""
    g = MT19937_64(5489)
    for _ in range(9999):
        g()
    value = g()
    assert value == 9981545732273789042, value
    print("mt19937_64: the 10000th output of the default seed is the standard's value")


if __name__ == "__main__":
    check()
