"""The llama.cpp reference, run in its own process (references.LlamaCpp starts it).

llama.cpp is native code: when it crashes (a SIGSEGV in a kernel built for the
wrong CPU, an abort in an assertion) it must take down this process, not the
test runner, so that the test says "the reference crashed" instead of dying as
if ckc had. Requests and answers are pickled tuples, each preceded by its
length (8 bytes, little endian), on stdin/stdout; llama.cpp's own output goes
to stderr.
"""
import os
import pickle
import signal
import struct
import sys
import traceback


def read_message(f):
    head = f.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(f.read(n))


def write_message(f, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


class Worker:
    def __init__(self):
        import llama_cpp
        self.lc = llama_cpp
        self.models = {}  # (path, sorted kwargs) -> Llama

    def model(self, path, kw):
        key = (path, tuple(sorted(kw.items())))
        if key not in self.models:
            while len(self.models) >= 3:  # the last few stay loaded; a test process sees many files
                del self.models[next(iter(self.models))]
            self.models[key] = self.lc.Llama(path, verbose=False, **kw)
        else:
            self.models[key] = self.models.pop(key)  # most recently used last
        return self.models[key]

    # ---- the requests ----------------------------------------------------------------
    def version(self):
        return self.lc.__version__

    def logits(self, path, ids, kw):
        """Logits at every position of ids, evaluated as one batch (kw: n_ctx, type_k, n_batch, ...)."""
        import numpy as np
        L = self.model(path, dict(kw, logits_all=True))
        L.reset()
        L.eval(list(ids))
        return np.array(L.scores[:len(ids)], dtype=np.float32)

    def greedy(self, path, ids, n, kw):
        """n greedy tokens after ids."""
        import numpy as np
        L = self.model(path, dict(kw, logits_all=True))
        L.reset()
        L.eval(list(ids))
        out = []
        for _ in range(n):
            out.append(int(np.argmax(L.scores[L.n_tokens - 1])))
            L.eval([out[-1]])
        return out

    def tokenize(self, path, texts, add_bos, special):
        """Each text (bytes) as llama.cpp's tokenizer reads it."""
        L = self.model(path, dict(vocab_only=True))
        return [L.tokenize(t, add_bos=add_bos, special=special) for t in texts]

    def quantize(self, src, dst, ftype, pure, nthread):
        """llama-quantize (llama_model_quantize) from src to dst; llama.cpp's return code."""
        import ctypes
        p = self.lc.llama_model_quantize_default_params()
        p.ftype = ftype
        p.pure = pure
        p.nthread = nthread
        return int(self.lc.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)))

    def crash(self):
        """Dies as a crash in native code does (tests the crash report)."""
        os.kill(os.getpid(), signal.SIGSEGV)


def main():
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    try:
        w = Worker()
    except Exception:
        write_message(out, ("error", traceback.format_exc()))
        return
    write_message(out, ("ready", w.version()))
    while (req := read_message(inp)) is not None:
        name, args = req
        try:
            write_message(out, ("ok", getattr(w, name)(*args)))
        except Exception:
            write_message(out, ("error", traceback.format_exc()))


if __name__ == "__main__":
    main()
