#!/usr/bin/env python3
"""Reads a TensorBoard event file (or a directory of them) with TensorBoard's own
EventAccumulator and prints every scalar, so that ftune's hand-written event files are checked by
the real reader. Output: "file_version<TAB>..." then, tags sorted, each scalar event in file order
as "tag<TAB>step<TAB>wall_time(%.6f)<TAB>value(%.9g)" -- the format tests/io/
tensorboard_writer_test.cc compares against tests/fixtures/io/tensorboard_golden.expected.txt.

    pip install tensorboard
    python3 tools/check_tensorboard.py tests/fixtures/io/tensorboard/events.out.tfevents.1700000000.golden
    python3 tools/check_tensorboard.py RUN_DIR/tensorboard --expect EXPECTED.txt   # exit 1 on a difference
"""
import argparse
import sys

from tensorboard.backend.event_processing import event_accumulator


def scalars_text(path):
    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    # EventAccumulator keeps the number of "brain.Event:<n>" as a float.
    lines = [f"file_version\tbrain.Event:{acc.file_version:g}"]
    for tag in sorted(acc.Tags()["scalars"]):
        for e in acc.Scalars(tag):
            lines.append(f"{tag}\t{e.step}\t{e.wall_time:.6f}\t{e.value:.9g}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("path", help="an events.out.tfevents.* file or a directory holding one")
    ap.add_argument("--expect", help="a file with the expected output; exit 1 if it differs")
    args = ap.parse_args()
    text = scalars_text(args.path)
    sys.stdout.write(text)
    if args.expect:
        with open(args.expect, encoding="utf-8") as f:
            expected = f.read()
        if text != expected:
            print(f"MISMATCH against {args.expect}", file=sys.stderr)
            return 1
        print(f"OK: matches {args.expect}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
