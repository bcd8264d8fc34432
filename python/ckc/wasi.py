"""Run a wasm32-wasi program (a model built with clang --target=wasm32-wasi) under wasmtime, from PyPI:

    python -m ckc.wasi [--dir FOLDER]... model.wasm ARGS...

The program sees the current folder (relative paths work) and each --dir FOLDER under its own absolute path, and
nothing else of the file system (--no-cwd: not even the current folder); stdin, stdout, stderr and the environment are this process's. The exit status
is the program's (a trap: 128 + 6, as an abort). Node's WASI (node --experimental-wasi-unstable-preview1) runs
the same file.
"""
import argparse
import os
import sys


def run(wasm, args, dirs=(), cwd=True):
    """Runs `wasm` with argv [wasm's name, *args]; returns its exit status."""
    import wasmtime
    engine = wasmtime.Engine()
    store = wasmtime.Store(engine)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    module = wasmtime.Module.from_file(engine, wasm)
    cfg = wasmtime.WasiConfig()
    cfg.argv = [os.path.basename(wasm), *args]
    if cwd:
        cfg.preopen_dir(os.getcwd(), ".")
    for d in dirs:
        cfg.preopen_dir(os.path.abspath(d), os.path.abspath(d))
    cfg.inherit_stdin()
    cfg.inherit_stdout()
    cfg.inherit_stderr()
    cfg.inherit_env()
    store.set_wasi(cfg)
    try:
        linker.instantiate(store, module).exports(store)["_start"](store)
    except wasmtime.ExitTrap as e:
        return e.code
    except wasmtime.Trap as e:
        print(f"ckc.wasi: {os.path.basename(wasm)} trapped: {e}", file=sys.stderr)
        return 128 + 6
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ckc.wasi", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", action="append", default=[], help="a folder the program may read (repeatable)")
    ap.add_argument("--no-cwd", action="store_true", help="do not open the current folder to the program")
    ap.add_argument("wasm", help="the .wasm program")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    a = ap.parse_args(argv)
    if not os.path.isfile(a.wasm):
        ap.error(f"{a.wasm}: no such file")
    sys.stdout.flush()
    return run(a.wasm, a.args, a.dir, cwd=not a.no_cwd)


if __name__ == "__main__":
    sys.exit(main())
