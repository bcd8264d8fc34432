"""`ckc ...` and `python -m ckc ...`: the ckc compiler (the binary inside the package, or build/ckc in a
checkout) with the same arguments, e.g. `ckc compile config.json -o out/model.c`, `ckc --include-dir`."""
import os
import sys

from .build import ckc_binary


def main():
    try:
        exe = ckc_binary()
    except FileNotFoundError as e:
        print(f"ckc: {e}", file=sys.stderr)
        return 3
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
