"""ftune's training batch order (src/data/batcher.cc LengthBucketedBatcher::epoch) in Python, so
the transformers peer steps through the same rows in the same batches: a Fisher-Yates shuffle
over std::mt19937_64 seeded with seed * 0x9E3779B97F4A7C15 + epoch + 1 (mod 2^64), pools of
batch * 32 rows each stable-sorted by token count and cut into batches, then the batches
shuffled by the same generator. Needs each row's token count as ftune counts it (the same
tokenization: prompt + completion + EOS)."""

M64 = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64 (the C++ standard's parameters and seeding)."""

    def __init__(self, seed):
        self.mt = [0] * 312
        self.mt[0] = seed & M64
        for i in range(1, 312):
            prev = self.mt[i - 1]
            self.mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & M64
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
        return y & M64


def epoch_batches(lengths, batch_size, seed, epoch=0, pool_batches=32):
    n = len(lengths)
    order = list(range(n))
    rng = MT19937_64((seed * 0x9E3779B97F4A7C15 + epoch + 1) & M64)

    def fisher_yates(v):
        for i in range(len(v) - 1, 0, -1):
            j = rng() % (i + 1)
            v[i], v[j] = v[j], v[i]

    fisher_yates(order)
    pool = batch_size * pool_batches
    batches = []
    for start in range(0, n, pool):
        part = sorted(order[start:start + pool], key=lambda i: lengths[i])  # stable
        batches += [part[b:b + batch_size] for b in range(0, len(part), batch_size)]
    fisher_yates(batches)
    return batches


if __name__ == "__main__":
    g = MT19937_64(5489)
    for _ in range(9999):
        g()
    assert g() == 9981545732273789042, "mt19937_64 does not match the C++ standard's 10000th value"
    print("mt19937_64 ok")
