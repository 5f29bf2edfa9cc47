"""ftune's training batch order (src/data/batcher.cc LengthBucketedBatcher::epoch) in Python, so
the transformers peer steps through the same rows in the same batches: a Fisher-Yates shuffle
over std::mt19937_64 seeded with seed * 0x9E3779B97F4A7C15 + epoch + 1 (mod 2^64), pools of
batch * 32 rows each stable-sorted by token count and cut into batches, then the batches
shuffled by the same generator. Needs each row's token count as ftune counts it (the same
tokenization: prompt + completion + EOS)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: ftune_rng
from ftune_rng import MASK as M64, MT19937_64  # noqa: E402,F401  (std::mt19937_64)


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

