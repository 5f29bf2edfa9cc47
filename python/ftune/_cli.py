"""The `ftune` console script of the wheel: runs the packaged CLI (ftune/bin/ftune), which shares
libftune.so with the Python module."""

import os
import sys


def main() -> None:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "ftune")
    if not os.path.exists(exe):
        sys.exit(f"ftune: the command-line program is not in this installation ({exe})")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
