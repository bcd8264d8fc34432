"""Tokenizers through ctypes (the C runtime's ck_tokenizer.h).

    tok = Tokenizer("path/to/hf-folder")        # or a .gguf file, a tokenizer.json, a tokenizer.model
    ids = tok.encode("Hello world")             # special tokens added as the tokenizer's config says
    text = tok.decode(ids)

A model library carries the same functions: LlmModel(...).tokenizer is the tokenizer its init loaded. Standing
alone, Tokenizer builds a small library from runtime/text and runtime/io once (cached in the ckc cache folder,
keyed by the sources' hash).
"""
import ctypes
import hashlib
import os
import shutil
import subprocess

from .build import cache_dir, include_dir

_SIGNATURES = {
    "ck_tokenizer_load": (ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "ck_tokenizer_free": (None, [ctypes.c_void_p]),
    "ck_tokenizer_vocab_size": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_tokenizer_encode": (ctypes.c_long, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_int32), ctypes.c_long]),
    "ck_tokenizer_decode": (ctypes.c_long, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_long, ctypes.c_int,
                                            ctypes.c_char_p, ctypes.c_long]),
    "ck_tokenizer_piece": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_size_t)]),
    "ck_tokenizer_is_special": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32]),
    "ck_tokenizer_find": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_char_p]),
    "ck_tokenizer_bos": (ctypes.c_int32, [ctypes.c_void_p]),
    "ck_tokenizer_eos": (ctypes.c_int32, [ctypes.c_void_p]),
    "ck_tokenizer_eot": (ctypes.c_int32, [ctypes.c_void_p]),
    "ck_tokenizer_is_eog": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32]),
    "ck_tokenizer_chat_template": (ctypes.c_char_p, [ctypes.c_void_p]),
    "ck_tokenizer_describe": (ctypes.c_char_p, [ctypes.c_void_p]),
    "ck_token_stream_push": (ctypes.c_long, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int,
                                             ctypes.c_char_p, ctypes.c_long]),
    "ck_token_stream_flush": (ctypes.c_long, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_long]),
}


class TokenStream(ctypes.Structure):
    """ck_token_stream: the UTF-8 bytes held back between tokens."""
    _fields_ = [("pending", ctypes.c_ubyte * 4), ("npending", ctypes.c_int), ("started", ctypes.c_int)]


class TokenizerError(RuntimeError):
    pass


class ChatMessage(ctypes.Structure):  # ck_chat_message (ck_generate.h)
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


_CHAT_SIGNATURES = {
    "ck_chat_render": (ctypes.c_long, [ctypes.c_char_p, ctypes.POINTER(ChatMessage), ctypes.c_int, ctypes.c_int,
                                       ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_long,
                                       ctypes.c_char_p, ctypes.c_size_t]),
    "ck_chat_format_name": (ctypes.c_char_p, [ctypes.c_char_p]),
}


def chat_format_name(template, lib=None):
    """"chatml", "qwen3", "smollm3", "llama2", "llama3", "mistral", "gemma", "gemma3", "phi3", or None: which format ckc renders template as."""
    lib = bind(lib or tokenizer_library())
    v = lib.ck_chat_format_name(template.encode() if template else None)
    return v.decode() if v else None


def render_chat(template, messages, add_generation_prompt=True, bos="", eos="", lib=None):
    """messages ([{"role", "content"}]) under a chat template, as transformers' apply_chat_template(tokenize=False)
    renders it (runtime/text/chat.c). Raises TokenizerError for what the template refuses."""
    lib = bind(lib or tokenizer_library())
    msgs = (ChatMessage * max(len(messages), 1))(*[ChatMessage(m["role"].encode(), m["content"].encode())
                                                   for m in messages])
    b, e = bos.encode() if isinstance(bos, str) else bos, eos.encode() if isinstance(eos, str) else eos
    err = ctypes.create_string_buffer(256)
    args = (template.encode() if template else None, msgs, len(messages), int(bool(add_generation_prompt)), b, e)
    n = lib.ck_chat_render(*args, None, 0, err, len(err))
    if n < 0:
        raise TokenizerError(f"chat template: {err.value.decode()}")
    buf = ctypes.create_string_buffer(n + 1)
    lib.ck_chat_render(*args, buf, n + 1, err, len(err))
    return buf.raw[:n].decode()


def bind(lib):
    for name, (res, args) in list(_SIGNATURES.items()) + list(_CHAT_SIGNATURES.items()):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


# runtime/text without what needs a model (generate.c, cli.c), and the checkpoint readers GGUF needs
_TEXT_FILES = ("tokenizer.c", "tokenizer_load.c", "pretokenize.c", "normalize.c", "unicode.c", "chat.c")


def _sources():
    runtime = os.path.dirname(include_dir())
    text = os.path.join(runtime, "text")
    files = [os.path.join(text, f) for f in _TEXT_FILES] + sorted(
        os.path.join(text, f) for f in os.listdir(text) if f.endswith(".h"))
    io = os.path.join(runtime, "io")
    files += sorted(os.path.join(io, f) for f in os.listdir(io) if f.endswith((".c", ".h")))
    return files + sorted(os.path.join(include_dir(), f) for f in os.listdir(include_dir()))


_LIB = None


def tokenizer_library():
    """libck_tokenizer.so built from the runtime's text + io sources (once per source version)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    srcs = _sources()
    h = hashlib.sha256()
    for f in srcs:
        h.update(f.encode())
        with open(f, "rb") as fh:
            h.update(fh.read())
    out_dir = os.path.join(cache_dir(), "tokenizer", h.hexdigest()[:16])
    so = os.path.join(out_dir, "libck_tokenizer.so")
    if not os.path.exists(so):
        if shutil.which("cc") is None:
            raise TokenizerError("no C compiler (cc) to build the tokenizer library")
        os.makedirs(out_dir, exist_ok=True)
        tmp = f"{so}.{os.getpid()}.tmp"
        cmd = ["cc", "-O2", "-fPIC", "-shared", "-I", include_dir(), *[f for f in srcs if f.endswith(".c")], "-lm",
               "-o", tmp]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            raise TokenizerError(f"building the tokenizer library failed:\n{p.stderr}")
        os.replace(tmp, so)
    _LIB = bind(ctypes.CDLL(so))
    return _LIB


class Tokenizer:
    """A ck_tokenizer. Tokenizer(path) loads one (and frees it); Tokenizer.borrow(lib, handle) wraps the one a
    model owns."""

    def __init__(self, path=None, lib=None):
        self.lib = lib or tokenizer_library()
        self.h = None
        self._owned = False
        if path is not None:
            err = ctypes.create_string_buffer(512)
            h = self.lib.ck_tokenizer_load(os.fsencode(str(path)), err, len(err))
            if not h:
                raise TokenizerError(err.value.decode(errors="replace"))
            self.h, self._owned = h, True

    @classmethod
    def borrow(cls, lib, handle):
        t = cls.__new__(cls)
        t.lib, t.h, t._owned = bind(lib), handle, False
        return t

    def close(self):
        if self.h and self._owned:
            self.lib.ck_tokenizer_free(self.h)
        self.h = None

    def __del__(self):
        self.close()

    @property
    def vocab_size(self):
        return self.lib.ck_tokenizer_vocab_size(self.h)

    def encode(self, text, add_special=True):
        """ids of text (str, or bytes taken as they are, even when they are not UTF-8)."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        cap = len(data) + 8
        while True:
            out = (ctypes.c_int32 * cap)()
            n = self.lib.ck_tokenizer_encode(self.h, data, len(data), int(bool(add_special)), out, cap)
            if n < 0:
                raise TokenizerError(f"encode failed ({n})")
            if n <= cap:
                return list(out[:n])
            cap = n

    def decode_bytes(self, ids, skip_special=False):
        ids = [int(i) for i in ids]
        arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        n = self.lib.ck_tokenizer_decode(self.h, arr, len(ids), int(bool(skip_special)), None, 0)
        if n < 0:
            raise TokenizerError(f"decode failed ({n})")
        buf = ctypes.create_string_buffer(n + 1)
        self.lib.ck_tokenizer_decode(self.h, arr, len(ids), int(bool(skip_special)), buf, n + 1)
        return buf.raw[:n]

    def decode(self, ids, skip_special=False):
        """Text of ids; bytes that are not UTF-8 become U+FFFD (as Hugging Face's decode does)."""
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")

    def stream(self, ids, skip_special=False):
        """Yields the text each id completes (the C streaming decoder: whole UTF-8 characters only), then
        whatever is left pending."""
        st = TokenStream()
        buf = ctypes.create_string_buffer(256)
        for i in ids:
            n = self.lib.ck_token_stream_push(self.h, ctypes.byref(st), int(i), int(bool(skip_special)), buf, len(buf))
            if n < 0:
                raise TokenizerError(f"streaming decode failed ({n})")
            if n + 1 > len(buf):
                buf = ctypes.create_string_buffer(n + 1)
                n = self.lib.ck_token_stream_push(self.h, ctypes.byref(st), int(i), int(bool(skip_special)), buf, len(buf))
            yield buf.raw[:n].decode("utf-8")
        n = self.lib.ck_token_stream_flush(ctypes.byref(st), buf, len(buf))
        if n:
            yield buf.raw[:n].decode("utf-8")

    def piece(self, token):
        n = ctypes.c_size_t()
        p = self.lib.ck_tokenizer_piece(self.h, int(token), ctypes.byref(n))
        if not p:
            raise TokenizerError(f"token {token} is out of range")
        return ctypes.string_at(p, n.value)

    def find(self, text):
        return self.lib.ck_tokenizer_find(self.h, text.encode())

    def is_special(self, token):
        return bool(self.lib.ck_tokenizer_is_special(self.h, int(token)))

    def is_eog(self, token):
        return bool(self.lib.ck_tokenizer_is_eog(self.h, int(token)))

    @property
    def bos(self):
        return self.lib.ck_tokenizer_bos(self.h)

    @property
    def eos(self):
        return self.lib.ck_tokenizer_eos(self.h)

    @property
    def eot(self):
        return self.lib.ck_tokenizer_eot(self.h)

    @property
    def chat_template(self):
        v = self.lib.ck_tokenizer_chat_template(self.h)
        return v.decode() if v else None

    def __repr__(self):
        return f"<ckc Tokenizer: {self.lib.ck_tokenizer_describe(self.h).decode()}, {self.vocab_size} tokens>"
