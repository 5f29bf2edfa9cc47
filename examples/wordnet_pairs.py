#!/usr/bin/env python3
"""Build a word-sense disambiguation pair task from WordNet (GlossBERT's formulation).

The task
--------
WordNet glosses hold a definition and, often, quoted example sentences:

    00001740 00 a 01 able 0 ... | having the necessary means ...; "able to swim"; "she was able ..."

For every example sentence of a synset S that contains a lemma w of S (as a whole word,
case-insensitively, in its base form or a simple inflection: -s/-es/-ies, -ed/-d/-ied, -ing,
-er/-est, doubled final consonant, or an irregular form from noun.exc/verb.exc/adj.exc/adv.exc),
where w has at least two senses of that part of speech in index.<pos>, one *group* of candidate
pairs is emitted, one pair per sense of w in WordNet sense order (sense 1 = most frequent):

    text      = the example sentence
    text_pair = "<w>: <definition of that sense>"
    label     = 1 if that sense is S, else 0          (exactly one positive per group)

A sentence-pair classifier (a cross-encoder) scores each pair; predicting the sense of w in the
sentence is picking the highest-scoring candidate of the group. Definition = the gloss before
its first quoted example, trimmed of trailing ';', ':' and spaces. When several lemmas of S occur
in a sentence, the first polysemous one in the synset's own order is the target.

Splits are by lemma: sha256("pos:lemma") decides train / validation / test, so test lemmas are
never seen in training, and a lemma's split does not depend on --seed or on subsampling.
--seed only decides which groups the subsampling keeps and the order of the training groups.
Output is byte-identical for the same WordNet files and options.

Output (in --out DIR, each file written to a temporary name and renamed into place)
------
train.jsonl, validation.jsonl, test.jsonl
    one JSON object per line, the pairs of one group on consecutive lines:
    {"text": str, "text_pair": str, "label": 0|1, "lemma": str, "pos": "n"|"v"|"a"|"r",
     "synset": "8-digit offset of the candidate sense in data.<pos>", "sense": int (1-based
     WordNet sense number of the candidate), "group": "id shared by the candidates of one
     example"}
    Training groups are in a seeded random order; validation/test groups in group-id order.
stats.json
    pairs, groups, positives, positive rate, distinct lemmas, mean candidates per group and
    mean lengths in words, per split (both the full pool and what was written), and how many
    example sentences were dropped and why.
baselines.json
    on validation and test: majority class (always 0), first sense (1 for sense 1 of the
    lemma), and lexical overlap (simplified Lesk: 1 for the candidate whose definition shares
    the most stemmed content words with the sentence, ties to the lower sense number):
    accuracy, precision/recall/F1 of the positive class, macro-F1, group accuracy (fraction of
    groups whose positive candidate is the one predicted). "chance" is the expected group
    accuracy of picking a candidate uniformly at random.

Standard library only; needs Debian's wordnet-base (/usr/share/wordnet, `man 5 wndb`).

    python3 examples/wordnet_pairs.py --out data/wordnet --seed 13
    python3 examples/wordnet_pairs.py --out /tmp/wn --check     # also asserts invariants
"""

import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
SPLITS = ("train", "validation", "test")
# Defaults are the README's main job (tools/run_main.sh): ~19k training pairs, one epoch of
# MiniLM in about five minutes on 2 cores; ~6-7k pairs per evaluation split.
DEFAULT_MAX_TRAIN_GROUPS = 7000
DEFAULT_MAX_TRAIN_NEGATIVES = 2
DEFAULT_MAX_EVAL_GROUPS = 1000


# ----------------------------------------------------------------------------------------------
# Reading WordNet (format: man 5 wndb)


def parse_gloss(gloss):
    """Split a gloss into (definition, [example, ...]).

    An example is a double-quoted segment outside parentheses that starts a ';'/':'-separated
    part of the gloss (or, for the few glosses missing the separator, is at least four words
    long). Quoted phrases inside a definition ('in the phrase "make strides"') stay in it.
    """
    examples = []
    first = None
    for m in re.finditer(r'"([^"]*)"', gloss):
        prefix = gloss[: m.start()]
        if prefix.count("(") != prefix.count(")"):
            continue
        starts_part = prefix.rstrip() == "" or prefix.rstrip()[-1] in ";:"
        if first is None and not starts_part and len(m.group(1).split()) < 4:
            continue
        if first is None:
            first = m.start()
        text = " ".join(m.group(1).split())
        if text:
            examples.append(text)
    definition = gloss if first is None else gloss[:first]
    return " ".join(definition.split()).rstrip(" ;:"), examples


def load_wordnet(wn_dir):
    """Return (index, synsets, exceptions).

    index[pos][lemma] = [offset, ...] in sense order; synsets[(pos, offset)] = (lemmas,
    definition, examples); exceptions[pos][base] = [irregular form, ...]. pos is the index pos
    (satellite adjectives 's' count as 'a'); lemmas are lowercase with spaces for underscores.
    """
    index, synsets, exceptions = {}, {}, {}
    for pos, name in POS_FILES.items():
        index[pos] = {}
        path = os.path.join(wn_dir, "index." + name)
        with open(path, encoding="ascii") as f:
            for lineno, line in enumerate(f, 1):
                if line.startswith("  "):  # license header
                    continue
                fields = line.split()
                try:
                    synset_cnt, p_cnt = int(fields[2]), int(fields[3])
                    offsets = fields[4 + p_cnt + 2:]
                    if len(offsets) != synset_cnt:
                        raise ValueError("synset_cnt does not match the offsets")
                except (IndexError, ValueError) as e:
                    raise SystemExit(f"{path}:{lineno}: malformed index line ({e})")
                index[pos][fields[0].replace("_", " ")] = offsets
        path = os.path.join(wn_dir, "data." + name)
        with open(path, encoding="ascii") as f:
            for lineno, line in enumerate(f, 1):
                if line.startswith("  "):
                    continue
                head, sep, gloss = line.partition(" | ")
                fields = head.split()
                try:
                    offset, w_cnt = fields[0], int(fields[3], 16)
                    words = fields[4: 4 + 2 * w_cnt: 2]
                    if not sep or len(words) != w_cnt:
                        raise ValueError("expected words and ' | gloss'")
                except (IndexError, ValueError) as e:
                    raise SystemExit(f"{path}:{lineno}: malformed data line ({e})")
                # Adjective markers: galore(ip), aforesaid(p), ...
                lemmas = [re.sub(r"\((a|p|ip)\)$", "", w).replace("_", " ").lower() for w in words]
                definition, examples = parse_gloss(gloss.strip())
                synsets[(pos, offset)] = (lemmas, definition, examples)
        exceptions[pos] = {}
        path = os.path.join(wn_dir, name + ".exc")
        if os.path.exists(path):
            with open(path, encoding="ascii") as f:
                for line in f:
                    fields = line.split()
                    for base in fields[1:]:
                        exceptions[pos].setdefault(base.replace("_", " "), []).append(
                            fields[0].replace("_", " "))
    return index, synsets, exceptions


# ----------------------------------------------------------------------------------------------
# Finding a lemma in a sentence

VOWELS = set("aeiou")


def inflect(word, pos):
    """Regular inflections of one word (over-generating is harmless: a form must still occur)."""
    forms = {word}
    if not word.isalpha() or len(word) < 2:
        return forms
    last = word[-1]
    cvc = len(word) >= 3 and last not in VOWELS | set("wxy") and word[-2] in VOWELS \
        and word[-3] not in VOWELS
    if pos in ("n", "v"):
        forms |= {word + "s", word + "es"}
        if last == "y":
            forms.add(word[:-1] + "ies")
    if pos == "v":
        forms |= {word + "ed", word + "ing"}
        if last == "e":
            forms |= {word + "d", word[:-1] + "ing"}
        if last == "y":
            forms.add(word[:-1] + "ied")
        if cvc:
            forms |= {word + last + "ed", word + last + "ing"}
    if pos == "a":
        forms |= {word + "er", word + "est"}
        if last == "e":
            forms |= {word + "r", word + "st"}
        if last == "y":
            forms |= {word[:-1] + "ier", word[:-1] + "iest"}
        if cvc:
            forms |= {word + last + "er", word + last + "est"}
    return forms


def surface_forms(lemma, pos, exceptions):
    """All forms of a (possibly multi-word) lemma: verbs inflect their first word ('took a
    breath'), nouns their last ('attorneys general' aside), adjectives a single word."""
    words = lemma.split(" ")
    forms = {lemma} | set(exceptions[pos].get(lemma, ()))
    if pos == "v":
        head = 0
    elif pos == "n" or len(words) == 1:
        head = len(words) - 1
    else:
        return forms
    for form in inflect(words[head], pos) | set(exceptions[pos].get(words[head], ())):
        forms.add(" ".join(words[:head] + [form] + words[head + 1:]))
    return forms


_pattern_cache = {}


def lemma_pattern(lemma, pos, exceptions):
    key = (lemma, pos)
    if key not in _pattern_cache:
        forms = sorted(surface_forms(lemma, pos, exceptions), key=lambda s: (-len(s), s))
        alternation = "|".join(re.escape(f) for f in forms)
        # Whole words: no letter, digit or hyphen on either side ("well-known" is not "known").
        _pattern_cache[key] = re.compile(r"(?<![\w-])(?:%s)(?![\w-])" % alternation, re.IGNORECASE)
    return _pattern_cache[key]


# ----------------------------------------------------------------------------------------------
# Building groups


def build_groups(index, synsets, exceptions):
    """Return (groups, drop counts). A group is one example sentence with its candidates."""
    drops = {"examples": 0, "no_polysemous_lemma_in_synset": 0, "lemma_not_in_sentence": 0,
             "same_sentence_lemma_in_two_senses": 0, "duplicate_sentence": 0,
             "candidate_definitions_not_distinct": 0}
    raw = []
    for (pos, offset) in sorted(synsets):
        lemmas, _, examples = synsets[(pos, offset)]
        polysemous = [w for w in lemmas if len(index[pos].get(w, ())) >= 2]
        for k, sentence in enumerate(examples):
            drops["examples"] += 1
            if not polysemous:
                drops["no_polysemous_lemma_in_synset"] += 1
                continue
            match, target = None, None
            for w in polysemous:
                match = lemma_pattern(w, pos, exceptions).search(sentence)
                if match:
                    target = w
                    break
            if target is None:
                drops["lemma_not_in_sentence"] += 1
                continue
            # GlossBERT's weak supervision: the target occurrence is put in quotation marks, so
            # the model knows which word of the sentence the candidate definitions are about.
            marked = (sentence[:match.start()] + '"' + sentence[match.start():match.end()] + '"'
                      + sentence[match.end():])
            raw.append({"pos": pos, "lemma": target, "synset": offset, "text": marked,
                        "group": f"{pos}{offset}.{k + 1}"})
    # The same sentence for the same lemma under two different senses would be the same input
    # with two labels: drop all of its copies. Exact repeats under one sense keep one copy.
    senses_of = {}
    for g in raw:
        senses_of.setdefault((g["pos"], g["lemma"], g["text"].lower()), set()).add(g["synset"])
    seen, groups = set(), []
    for g in raw:
        key = (g["pos"], g["lemma"], g["text"].lower())
        if len(senses_of[key]) > 1:
            drops["same_sentence_lemma_in_two_senses"] += 1
            continue
        if key in seen:
            drops["duplicate_sentence"] += 1
            continue
        seen.add(key)
        offsets = index[g["pos"]][g["lemma"]]
        definitions = [synsets[(g["pos"], o)][1] for o in offsets]
        gold = offsets.index(g["synset"])
        if len(set(definitions)) != len(definitions) or not all(definitions):
            drops["candidate_definitions_not_distinct"] += 1
            continue
        g["candidates"] = list(zip(offsets, definitions))
        g["gold"] = gold
        groups.append(g)
    drops["kept"] = len(groups)
    return groups, drops


def split_of(pos, lemma, val_frac, test_frac):
    h = int.from_bytes(hashlib.sha256(f"{pos}:{lemma}".encode()).digest()[:8], "big") / 2.0 ** 64
    if h < test_frac:
        return "test"
    if h < test_frac + val_frac:
        return "validation"
    return "train"


def subsample(groups, limit, seed, split):
    """Keep `limit` groups chosen by a seeded generator (all when limit is None)."""
    rng = random.Random(f"{seed}:{split}")  # str seeds hash with sha512: stable across runs
    groups = sorted(groups, key=lambda g: g["group"])
    if limit is not None and limit < len(groups):
        groups = rng.sample(groups, limit)
    if split == "train":
        rng.shuffle(groups)
    else:
        groups.sort(key=lambda g: g["group"])
    return groups


def pairs_of(group, max_negatives=0):
    """The candidate pairs of a group in sense order; with max_negatives > 0, the gold sense and
    at most that many other senses, chosen by a generator seeded with the group id."""
    ranks = list(range(len(group["candidates"])))
    if max_negatives and len(ranks) - 1 > max_negatives:
        others = [r for r in ranks if r != group["gold"]]
        keep = set(random.Random(f"negatives:{group['group']}").sample(others, max_negatives))
        ranks = [r for r in ranks if r == group["gold"] or r in keep]
    for rank in ranks:
        offset, definition = group["candidates"][rank]
        yield {"text": group["text"], "text_pair": f"{group['lemma']}: {definition}",
               "label": int(rank == group["gold"]), "lemma": group["lemma"], "pos": group["pos"],
               "synset": offset, "sense": rank + 1, "group": group["group"]}


# ----------------------------------------------------------------------------------------------
# Baselines

STOP_WORDS = set("""
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing done down during each either else etc
even ever every few for from further had has have having he her here hers herself him himself
his how i if in into is it its itself just less many may me might more most much must my myself
no nor not now of off often on once one only or other others our ours ourselves out over own
per perhaps rather same shall she should since so some something such than that the their
theirs them themselves then there these they thing things this those though through thus to
too under until up upon us usually very was way we well were what when where whether which
while who whom whose why will with within without would yet you your yours yourself
especially use used using someone somebody sometimes
""".split())


def stem(word):
    """A few suffix rules, enough to match 'swimming'/'swim', 'parties'/'party', 'making'/'make'."""
    for suffix, repl in (("ies", "y"), ("ied", "y"), ("ing", ""), ("edly", ""), ("ed", ""),
                         ("ly", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= (2 if repl else 3):
            word = word[: len(word) - len(suffix)] + repl
            break
    if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]  # swimm -> swim
    if len(word) >= 4 and word.endswith("e"):
        word = word[:-1]  # make / mak(ing)
    return word


def content_words(text, exclude):
    return {stem(t) for t in re.findall(r"[a-z0-9]+", text.lower())
            if t not in STOP_WORDS and len(t) > 1} - exclude


def predict_overlap(group):
    """Simplified Lesk: index of the candidate sharing the most content words with the text."""
    exclude = {stem(t) for t in re.findall(r"[a-z0-9]+", group["lemma"])}
    context = content_words(group["text"], exclude)
    scores = [len(context & content_words(d, exclude)) for _, d in group["candidates"]]
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def metrics(groups, choose):
    """Pair metrics when the candidate choose(group) is predicted 1 (None: all 0)."""
    tp = fp = fn = tn = hits = 0
    for g in groups:
        pick = choose(g)
        hits += pick == g["gold"]
        for i in range(len(g["candidates"])):
            pred, gold = int(i == pick), int(i == g["gold"])
            tp += pred and gold
            fp += pred and not gold
            fn += gold and not pred
            tn += not pred and not gold
    def f1(p, r):
        return 2 * p * r / (p + r) if p + r else 0.0
    n = tp + fp + fn + tn
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    precision0 = tn / (tn + fn) if tn + fn else 0.0
    recall0 = tn / (tn + fp) if tn + fp else 0.0
    out = {"accuracy": (tp + tn) / n if n else 0.0, "precision": precision, "recall": recall,
           "f1": f1(precision, recall),
           "macro_f1": (f1(precision, recall) + f1(precision0, recall0)) / 2,
           "group_accuracy": hits / len(groups) if groups else 0.0}
    return {k: round(v, 4) for k, v in out.items()}


def baselines(split_groups):
    out = {}
    for split in ("validation", "test"):
        groups = split_groups[split]
        out[split] = {
            "majority": metrics(groups, lambda g: None),
            "first_sense": metrics(groups, lambda g: 0),
            "lexical_overlap": metrics(groups, predict_overlap),
            "chance_group_accuracy": round(
                sum(1 / len(g["candidates"]) for g in groups) / len(groups), 4) if groups else 0.0,
        }
    return out


def format_table(results):
    cols = ("accuracy", "precision", "recall", "f1", "macro_f1", "group_accuracy")
    lines = [f"{'split':<11} {'baseline':<16}" + "".join(f"{c:>15}" for c in cols)]
    for split, r in results.items():
        for name in ("majority", "first_sense", "lexical_overlap"):
            lines.append(f"{split:<11} {name:<16}" + "".join(f"{r[name][c]:>15.4f}" for c in cols))
        lines.append(f"{split:<11} {'chance':<16}" + " " * 15 * 5 +
                     f"{r['chance_group_accuracy']:>15.4f}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Statistics and output


def describe(groups, max_negatives=0):
    """Counts and mean lengths of the pairs that pairs_of(group, max_negatives) yields."""
    rows = [p for g in groups for p in pairs_of(g, max_negatives)]
    pairs = len(rows)
    return {"groups": len(groups), "pairs": pairs, "positives": len(groups),
            "positive_rate": round(len(groups) / pairs, 4) if pairs else 0.0,
            "lemmas": len({(g["pos"], g["lemma"]) for g in groups}),
            "groups_by_pos": {p: sum(g["pos"] == p for g in groups) for p in POS_FILES},
            "mean_candidates": round(pairs / len(groups), 3) if groups else 0.0,
            "mean_text_words": round(sum(len(r["text"].split()) for r in rows) / pairs, 2)
            if pairs else 0.0,
            "mean_text_pair_words": round(sum(len(r["text_pair"].split()) for r in rows) / pairs,
                                          2) if pairs else 0.0}


def write_atomic(path, text):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def jsonl(groups, max_negatives=0):
    return "".join(json.dumps(p, ensure_ascii=False) + "\n"
                   for g in groups for p in pairs_of(g, max_negatives))


def build(args):
    index, synsets, exceptions = load_wordnet(args.wordnet_dir)
    groups, drops = build_groups(index, synsets, exceptions)
    pools = {s: [] for s in SPLITS}
    for g in groups:
        pools[split_of(g["pos"], g["lemma"], args.val_frac, args.test_frac)].append(g)
    if args.max_senses:
        pools = {s: [g for g in pools[s] if len(g["candidates"]) <= args.max_senses]
                 for s in SPLITS}
    limits = {"train": args.max_train_groups, "validation": args.max_eval_groups,
              "test": args.max_eval_groups}
    chosen = {s: subsample(pools[s], None if args.full else limits[s], args.seed, s)
              for s in SPLITS}
    negatives = {s: args.max_train_negatives if s == "train" else 0 for s in SPLITS}
    files = {f"{s}.jsonl": jsonl(chosen[s], negatives[s]) for s in SPLITS}
    stats = {
        "source": {"wordnet_dir": args.wordnet_dir, "synsets": len(synsets),
                   "examples": drops["examples"]},
        "options": {"seed": args.seed, "full": args.full,
                    "max_train_groups": args.max_train_groups,
                    "max_eval_groups": args.max_eval_groups, "max_senses": args.max_senses,
                    "max_train_negatives": args.max_train_negatives,
                    "val_frac": args.val_frac, "test_frac": args.test_frac},
        "examples_dropped": {k: v for k, v in drops.items() if k not in ("examples", "kept")},
        "groups_built": drops["kept"],
        "pool": {s: describe(pools[s]) for s in SPLITS},
        "written": {s: describe(chosen[s], negatives[s]) for s in SPLITS},
        "sha256": {name: hashlib.sha256(text.encode()).hexdigest()
                   for name, text in files.items()},
    }
    return files, stats, baselines(chosen)


# ----------------------------------------------------------------------------------------------
# --check: invariants on the written files, and a second run in a fresh interpreter


def check(args, out_dir):
    failures = []
    lemma_split = {}
    for split in SPLITS:
        path = os.path.join(out_dir, f"{split}.jsonl")
        groups = {}
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                try:
                    row = json.loads(line)
                except ValueError as e:
                    failures.append(f"{path}:{lineno}: not JSON ({e})")
                    continue
                keys = {"text", "text_pair", "label", "lemma", "pos", "synset", "sense", "group"}
                if set(row) != keys or row["label"] not in (0, 1):
                    failures.append(f"{path}:{lineno}: bad row {row}")
                    continue
                if not row["text_pair"].startswith(row["lemma"] + ": "):
                    failures.append(f"{path}:{lineno}: text_pair does not start with the lemma")
                groups.setdefault(row["group"], []).append(row)
                key = (row["pos"], row["lemma"])
                if lemma_split.setdefault(key, split) != split:
                    failures.append(
                        f"{path}:{lineno}: lemma {key} in {lemma_split[key]} and {split}")
        if not groups:
            failures.append(f"{path}: no groups")
        for gid, rows in groups.items():
            if sum(r["label"] for r in rows) != 1:
                positives = sum(r["label"] for r in rows)
                failures.append(f"{path}: group {gid} has {positives} positives")
            if len(rows) < 2 or len({(r["text"], r["lemma"], r["pos"]) for r in rows}) != 1:
                failures.append(f"{path}: group {gid} is not one sentence with >= 2 candidates")
            senses = [r["sense"] for r in rows]
            if split == "train" and args.max_train_negatives:
                if senses != sorted(set(senses)) or len(rows) > args.max_train_negatives + 1:
                    failures.append(f"{path}: group {gid} senses {senses} are not a capped subset")
            elif senses != list(range(1, len(rows) + 1)):
                failures.append(f"{path}: group {gid} candidates are not senses 1..{len(rows)}")
            if len({r["text_pair"] for r in rows}) != len(rows):
                failures.append(f"{path}: group {gid} has repeated candidates")
    # Same options, other hash seed, fresh process: the files must be byte-identical.
    with tempfile.TemporaryDirectory() as other:
        cmd = [sys.executable, os.path.abspath(__file__), "--out", other, "--quiet",
               "--seed", str(args.seed), "--wordnet-dir", args.wordnet_dir,
               "--max-train-groups", str(args.max_train_groups),
               "--max-eval-groups", str(args.max_eval_groups),
               "--max-senses", str(args.max_senses),
               "--max-train-negatives", str(args.max_train_negatives),
               "--val-frac", repr(args.val_frac), "--test-frac", repr(args.test_frac)]
        if args.full:
            cmd.append("--full")
        hash_seed = "12345" if os.environ.get("PYTHONHASHSEED") != "12345" else "54321"
        run = subprocess.run(cmd, env=dict(os.environ, PYTHONHASHSEED=hash_seed))
        if run.returncode != 0:
            return failures + [f"second run failed with exit code {run.returncode}"]
        for name in [f"{s}.jsonl" for s in SPLITS] + ["stats.json", "baselines.json"]:
            digests = []
            for d in (out_dir, other):
                with open(os.path.join(d, name), "rb") as f:
                    digests.append(hashlib.sha256(f.read()).hexdigest())
            if digests[0] != digests[1]:
                failures.append(
                    f"{name}: differs between two runs ({digests[0][:12]} vs {digests[1][:12]})")
    return failures


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", required=True, help="output directory (created if missing)")
    p.add_argument("--seed", type=int, default=13, help="seed for subsampling and training order")
    p.add_argument("--max-train-groups", type=int, default=DEFAULT_MAX_TRAIN_GROUPS,
                   help="training examples (groups) kept; all their candidates are kept")
    p.add_argument("--max-eval-groups", type=int, default=DEFAULT_MAX_EVAL_GROUPS,
                   help="validation and test examples (groups) kept, each")
    p.add_argument("--max-senses", type=int, default=0,
                   help="drop groups whose lemma has more senses than this (0: keep all)")
    p.add_argument("--max-train-negatives", type=int, default=DEFAULT_MAX_TRAIN_NEGATIVES,
                   help="training groups keep the gold sense and at most this many others (0: all)")
    p.add_argument("--full", action="store_true", help="no subsampling: every group of the pool")
    p.add_argument("--val-frac", type=float, default=0.1, help="share of lemmas for validation")
    p.add_argument("--test-frac", type=float, default=0.1, help="share of lemmas for test")
    p.add_argument("--wordnet-dir", default=os.environ.get("WNSEARCHDIR", "/usr/share/wordnet"),
                   help="WordNet database directory (Debian: apt-get install wordnet-base)")
    p.add_argument("--check", action="store_true",
                   help="after writing, assert invariants and byte-identical output of a second "
                        "run; exit 1 on failure")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    args = p.parse_args(argv)
    if not os.path.exists(os.path.join(args.wordnet_dir, "data.noun")):
        p.error(f"no WordNet database in {args.wordnet_dir} (expected data.noun etc.; on Debian: "
                "apt-get install wordnet-base, or pass --wordnet-dir)")
    for name in ("max_train_groups", "max_eval_groups", "max_senses"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    if not (0 <= args.val_frac and 0 <= args.test_frac and args.val_frac + args.test_frac < 1):
        p.error("--val-frac and --test-frac must be >= 0 and sum to less than 1")

    start = time.time()
    files, stats, results = build(args)
    os.makedirs(args.out, exist_ok=True)
    for name, text in files.items():
        write_atomic(os.path.join(args.out, name), text)
    write_atomic(os.path.join(args.out, "stats.json"), json.dumps(stats, indent=2) + "\n")
    write_atomic(os.path.join(args.out, "baselines.json"), json.dumps(results, indent=2) + "\n")
    elapsed = time.time() - start

    if not args.quiet:
        print(f"wrote {args.out} in {elapsed:.1f}s: "
              f"{stats['source']['examples']} example sentences -> {stats['groups_built']} groups")
        print("dropped: " + ", ".join(f"{k} {v}" for k, v in stats["examples_dropped"].items()))
        print(f"{'split':<11}{'pool groups':>12}{'pool pairs':>11}{'groups':>8}{'pairs':>7}"
              f"{'pos rate':>9}{'lemmas':>8}{'cands':>7}{'text w':>8}{'pair w':>8}")
        for s in SPLITS:
            pool, w = stats["pool"][s], stats["written"][s]
            print(f"{s:<11}{pool['groups']:>12}{pool['pairs']:>11}{w['groups']:>8}{w['pairs']:>7}"
                  f"{w['positive_rate']:>9.3f}{w['lemmas']:>8}{w['mean_candidates']:>7.2f}"
                  f"{w['mean_text_words']:>8.1f}{w['mean_text_pair_words']:>8.1f}")
        print(format_table(results))
    if args.check:
        failures = check(args, args.out)
        for f in failures[:50]:
            print("CHECK FAILED: " + f, file=sys.stderr)
        if failures:
            print(f"{len(failures)} check failures", file=sys.stderr)
            return 1
        if not args.quiet:
            print("check: ok (one positive per group, lemmas disjoint across splits, "
                  "byte-identical second run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
