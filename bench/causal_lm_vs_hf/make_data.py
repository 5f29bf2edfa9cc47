#!/usr/bin/env python3
"""A small prompt -> completion task from Debian's WordNet (/usr/share/wordnet, wordnet-base):
name the supersense (WordNet's lexicographer file, e.g. noun.animal -> "animal") of a noun from
its lemma and definition.

    prompt      "Word: <lemma>\\nMeaning: <definition>\\nCategory:"
    completion  " <category>"        one of 25 words: act, animal, artifact, ..., time

The untuned model does not know this label set; a tuned one picks the category of held-out
nouns among a few candidates (test.jsonl: the right one and 3 others, seeded, in random order;
chance 25 %). Synsets are dealt round-robin over the categories (seeded order), so every
category has about the same number of rows; the splits hold disjoint synsets and disjoint
lemmas. Definition = the gloss before its first quoted example, at most --max-words words.
Standard library only; output is byte-identical for the same WordNet files and options.

    python3 bench/causal_lm_vs_hf/make_data.py --out DIR [--train 800 --validation 96 --test 120]

Writes DIR/train.jsonl, validation.jsonl ({"prompt", "completion"}), test.jsonl ({"prompt",
"completion", "candidates": [4 texts], "answer": index}) and stats.json.
"""
import argparse
import json
import os
import random

# Lexicographer files 4..28 of lexnames(5WN) (noun.Tops, 3, left out: it holds a few dozen roots).
NOUN_CATEGORIES = {
    4: "act", 5: "animal", 6: "artifact", 7: "attribute", 8: "body", 9: "cognition",
    10: "communication", 11: "event", 12: "feeling", 13: "food", 14: "group", 15: "location",
    16: "motive", 17: "object", 18: "person", 19: "phenomenon", 20: "plant", 21: "possession",
    22: "process", 23: "quantity", 24: "relation", 25: "shape", 26: "state", 27: "substance",
    28: "time",
}


def read_nouns(path, max_words):
    """(lemma, definition, category) of every noun synset with a short definition."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("  "):
                continue  # the licence header
            head, _, gloss = line.partition(" | ")
            fields = head.split()
            lex = int(fields[1])
            if lex not in NOUN_CATEGORIES:
                continue
            lemma = fields[4].replace("_", " ")
            if "(" in lemma:
                lemma = lemma[: lemma.index("(")]
            definition = gloss.split('"')[0].strip().rstrip(";:, ").strip()
            words = definition.split()
            if not definition or len(words) > max_words:
                continue
            out.append((lemma, definition, NOUN_CATEGORIES[lex]))
    return out


def write_jsonl(path, rows):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--wordnet", default="/usr/share/wordnet")
    ap.add_argument("--train", type=int, default=800)
    ap.add_argument("--validation", type=int, default=96)
    ap.add_argument("--test", type=int, default=120)
    ap.add_argument("--max-words", type=int, default=20)
    ap.add_argument("--candidates", type=int, default=4)
    ap.add_argument("--seed", type=int, default=13)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    nouns = read_nouns(os.path.join(a.wordnet, "data.noun"), a.max_words)
    by_cat = {c: [] for c in NOUN_CATEGORIES.values()}
    for n in nouns:
        by_cat[n[2]].append(n)
    for rows in by_cat.values():
        rng.shuffle(rows)
    # Round-robin over the categories: the first `need` synsets, each lemma used once.
    need = a.train + a.validation + a.test
    picked, seen, pos = [], set(), {c: 0 for c in by_cat}
    while len(picked) < need:
        progressed = False
        for c in sorted(by_cat):
            rows = by_cat[c]
            while pos[c] < len(rows) and rows[pos[c]][0].lower() in seen:
                pos[c] += 1
            if pos[c] < len(rows) and len(picked) < need:
                picked.append(rows[pos[c]])
                seen.add(rows[pos[c]][0].lower())
                pos[c] += 1
                progressed = True
        if not progressed:
            raise SystemExit(f"only {len(picked)} usable synsets; asked for {need}")
    rng.shuffle(picked)
    labels = sorted(by_cat)

    def row(n):
        return {"prompt": f"Word: {n[0]}\nMeaning: {n[1]}\nCategory:", "completion": " " + n[2]}

    train = [row(n) for n in picked[: a.train]]
    validation = [row(n) for n in picked[a.train: a.train + a.validation]]
    test = []
    for n in picked[a.train + a.validation:]:
        others = rng.sample([c for c in labels if c != n[2]], a.candidates - 1)
        cands = [n[2]] + others
        rng.shuffle(cands)
        r = row(n)
        r["candidates"] = [" " + c for c in cands]
        r["answer"] = cands.index(n[2])
        test.append(r)
    os.makedirs(a.out, exist_ok=True)
    write_jsonl(os.path.join(a.out, "train.jsonl"), train)
    write_jsonl(os.path.join(a.out, "validation.jsonl"), validation)
    write_jsonl(os.path.join(a.out, "test.jsonl"), test)
    stats = {"nouns_usable": len(nouns), "categories": labels,
             "per_category_usable": {c: len(v) for c, v in sorted(by_cat.items())},
             "train": len(train), "validation": len(validation), "test": len(test),
             "candidates": a.candidates, "chance": 1.0 / a.candidates, "seed": a.seed}
    with open(os.path.join(a.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps({k: stats[k] for k in ("nouns_usable", "train", "validation", "test")}))


if __name__ == "__main__":
    main()
