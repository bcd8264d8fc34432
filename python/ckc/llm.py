"""ctypes wrapper of a compiled language model (the ck_model ABI, runtime/include/ck_model.h).

    m = LlmModel("out/libmodel.so", "path/to/hf-folder")
    logits = m.forward([1, 2, 3])                # [3, vocab] numpy, fresh sequence
    ids = m.generate([1, 2, 3], max_new_tokens=16, temperature=0.8, top_k=40, seed=0)

Text (the tokenizer init loaded from beside the weights: tokenizer.json, tokenizer.model or the GGUF's metadata):

    m.tokenize("Hello")  /  m.detokenize(ids)
    m.generate_text("The capital of France is", max_new_tokens=16)      # plain completion
    m.chat("Write a haiku about C compilers.")                           # the model's chat template, to its end of turn
    for piece in m.stream_text("Once upon a time", max_new_tokens=64): print(piece, end="")

A library compiled with `ckc compile --train` also trains (the other builds raise CkError CK_ENOTSUP):

    m.enable_training(max_tokens=256)
    loss = m.train_step(inputs, targets, lr=3e-4)      # zero_grad, forward, backward, clip, AdamW
    m.save("finetuned/")                               # Hugging Face names, float32 safetensors (+ config.json)
"""
import ctypes
import os
import queue
import threading
import warnings

import numpy as np


class CkError(RuntimeError):
    """A failed call: `code` is the negative CK_E* value, the message comes from ck_last_error()."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


_SIGNATURES = {
    "ck_model_init": (ctypes.c_void_p, [ctypes.c_char_p]),
    "ck_model_free": (None, [ctypes.c_void_p]),
    "ck_last_error": (ctypes.c_char_p, []),
    "ck_last_error_code": (ctypes.c_int, []),
    "ck_model_embed_tokens": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int]),
    "ck_model_forward": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_model_get_logits": (ctypes.POINTER(ctypes.c_float), [ctypes.c_void_p]),
    "ck_model_get_active_tokens": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_model_get_logits_rows": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_model_set_logits_all": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "ck_model_kv_cache_enable": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "ck_model_kv_cache_disable": (None, [ctypes.c_void_p]),
    "ck_model_kv_cache_reset": (None, [ctypes.c_void_p]),
    "ck_model_kv_cache_get_tokens": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_model_decode": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32]),
    "ck_model_get_vocab_size": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_model_get_context_length": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_model_get_num_layers": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_model_set_threads": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "ck_model_get_threads": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_model_enable_training": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "ck_model_disable_training": (None, [ctypes.c_void_p]),
    "ck_model_is_training": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_model_backward": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int,
                                         ctypes.POINTER(ctypes.c_float)]),
    "ck_model_zero_grad": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_model_optimizer_step": (ctypes.c_int, [ctypes.c_void_p] + [ctypes.c_float] * 6),
    "ck_model_get_grad_norm": (ctypes.c_double, [ctypes.c_void_p]),
    "ck_model_set_weight_decay": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]),
    "ck_model_get_param_count": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_model_get_param_name": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int]),
    "ck_model_get_weight": (ctypes.c_long, [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_float),
                                            ctypes.c_long]),
    "ck_model_get_grad": (ctypes.c_long, [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_float),
                                          ctypes.c_long]),
    "ck_model_save": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
    "ck_model_kv_cache_get_capacity": (ctypes.c_int, [ctypes.c_void_p]),
    "ck_model_kv_cache_truncate": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "ck_model_kv_cache_enable_batch": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]),
    "ck_model_batch": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                                      ctypes.c_int]),
    "ck_model_seq_reset": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "ck_model_seq_get_tokens": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "ck_model_get_tokenizer": (ctypes.c_void_p, [ctypes.c_void_p]),
    "ck_model_get_tokenizer_error": (ctypes.c_char_p, [ctypes.c_void_p]),
}


class Sampling(ctypes.Structure):  # ck_sampling (ck_generate.h)
    _fields_ = [("temperature", ctypes.c_float), ("top_k", ctypes.c_int), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float), ("repeat_penalty", ctypes.c_float), ("repeat_last_n", ctypes.c_int),
                ("seed", ctypes.c_uint64)]


class GenerateOpts(ctypes.Structure):  # ck_generate_opts
    _fields_ = [("max_new_tokens", ctypes.c_int), ("sampling", Sampling), ("stop", ctypes.POINTER(ctypes.c_char_p)),
                ("n_stop", ctypes.c_int), ("ignore_eos", ctypes.c_int), ("keep_cache", ctypes.c_int)]


class GenerateResult(ctypes.Structure):  # ck_generate_result
    _fields_ = [("n_prompt", ctypes.c_int), ("n_new", ctypes.c_int), ("stop", ctypes.c_int),
                ("prefill_seconds", ctypes.c_double), ("decode_seconds", ctypes.c_double)]


TOKEN_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_size_t)
STOP_REASONS = ["length", "eog", "stop_string", "callback", "context"]

_TEXT_SIGNATURES = {
    "ck_generate": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int,
                                   ctypes.POINTER(GenerateOpts), ctypes.POINTER(ctypes.c_int32), ctypes.c_int,
                                   TOKEN_CALLBACK, ctypes.c_void_p, ctypes.POINTER(GenerateResult)]),
    "ck_sampler_new": (ctypes.c_void_p, [ctypes.POINTER(Sampling), ctypes.c_int]),
    "ck_sampler_free": (None, [ctypes.c_void_p]),
    "ck_sampler_sample": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_float),
                                           ctypes.POINTER(ctypes.c_int32), ctypes.c_int]),
}


IGNORE_INDEX = -100  # a target that does not count (CK_IGNORE_INDEX; PyTorch's cross_entropy default)


def is_torch(x):
    t = type(x)
    return t.__module__.startswith("torch") and t.__name__ in ("Tensor", "Parameter")


def as_numpy(x):
    """numpy view of x: numpy arrays as they are, torch tensors through .numpy() (the same memory for a
    CPU tensor), anything else through np.asarray."""
    if is_torch(x):
        x = x.detach()
        if x.device.type != "cpu":
            raise CkError(-1, f"a {x.device} tensor: ckc runs on the CPU, pass tensor.cpu()")
        return x.numpy()
    return np.asarray(x)


class _Handle:
    """A C handle freed by `_free` on close(), on `with` exit and on garbage collection."""
    h = None
    _free = None

    def close(self):
        if self.h:
            self._free(self.h)
            self.h = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def spin_then_sleep():
    """OpenMP threads spin briefly, then sleep between parallel regions (GOMP_SPINCOUNT=10000, as
    CK_GOMP_SPINCOUNT in ck_kernels.h): libgomp's default spin collapses throughput when other programs keep
    the cores busy. libgomp reads it when it loads, so this runs before the first model library loads; a wait
    policy the user set is kept."""
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", "10000")


def load_library(path):
    spin_then_sleep()
    lib = ctypes.CDLL(path)
    for name, (res, args) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    for name, (res, args) in _TEXT_SIGNATURES.items():  # language-model libraries built before text support lack these
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = res, args
    return lib


def _sampling(temperature=0.0, top_k=None, top_p=None, min_p=None, repetition_penalty=None, seed=None,
              repeat_last_n=64):
    return Sampling(temperature=temperature or 0.0, top_k=top_k or 0, top_p=1.0 if top_p is None else top_p,
                    min_p=min_p or 0.0, repeat_penalty=repetition_penalty or 1.0, repeat_last_n=repeat_last_n,
                    seed=int(seed or 0) & (2 ** 64 - 1))


class Sampler(_Handle):
    """The C sampler (ck_sampler): sample(logits, history) -> token id, seeded and reproducible."""

    def __init__(self, lib, vocab_size, **sampling):
        self.lib, self.vocab_size = lib, vocab_size
        self._free = lib.ck_sampler_free
        s = _sampling(**sampling)
        self.h = lib.ck_sampler_new(ctypes.byref(s), vocab_size)
        if not self.h:
            raise ValueError(f"bad sampling parameters {sampling} (top_p in (0, 1], min_p in [0, 1], top_k >= 0, "
                             "repetition_penalty > 0)")

    def sample(self, logits, history=()):
        z = np.ascontiguousarray(logits, dtype=np.float32).reshape(-1)
        if z.size != self.vocab_size:
            raise ValueError(f"logits have {z.size} entries, the vocabulary {self.vocab_size}")
        h = (ctypes.c_int32 * max(len(history), 1))(*[int(t) for t in history])
        return int(self.lib.ck_sampler_sample(self.h, z.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), h, len(history)))


class LlmModel(_Handle):
    def __init__(self, lib_path, weights_path, threads=None):
        self.weights_path = str(weights_path)
        self.lib = load_library(lib_path)
        self._free = self.lib.ck_model_free
        self.h = self.lib.ck_model_init(str(weights_path).encode())
        if not self.h:
            raise CkError(self.lib.ck_last_error_code(), self.lib.ck_last_error().decode())
        self.vocab_size = self.lib.ck_model_get_vocab_size(self.h)
        self.context_length = self.lib.ck_model_get_context_length(self.h)
        self.num_layers = self.lib.ck_model_get_num_layers(self.h)
        why = self.lib.ck_model_get_tokenizer_error(self.h).decode()
        if why and "no tokenizer" not in why:  # there is one, and it is broken: say so; ids still work
            warnings.warn(f"the tokenizer did not load ({why}); the model works on token ids", stacklevel=2)
        if threads:
            self.set_threads(threads)

    def _check(self, rc):
        if rc < 0:
            raise CkError(rc, self.lib.ck_last_error().decode())
        return rc

    def set_threads(self, n):
        self._check(self.lib.ck_model_set_threads(self.h, int(n)))

    @property
    def threads(self):
        return self._check(self.lib.ck_model_get_threads(self.h))

    def embed(self, tokens):
        arr = np.ascontiguousarray(as_numpy(tokens), dtype=np.int32)
        self._check(self.lib.ck_model_embed_tokens(self.h, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), arr.size))

    def logits(self):
        """The last run's logits rows: every position after forward(), the last one after decode() or
        forward(..., last_only=True)."""
        n = self._check(self.lib.ck_model_get_logits_rows(self.h))
        ptr = self.lib.ck_model_get_logits(self.h)
        if not ptr:
            raise CkError(-3, self.lib.ck_last_error().decode())
        return np.ctypeslib.as_array(ptr, shape=(n, self.vocab_size)).copy()

    def forward(self, tokens, last_only=False):
        """Logits [len(tokens), vocab] for every position (a torch tensor when `tokens` is one, else numpy);
        last_only: [1, vocab] of the last position, skipping the lm_head of the others. Appends to the KV cache
        when it is enabled."""
        self.embed(tokens)
        self._check(self.lib.ck_model_set_logits_all(self.h, 0 if last_only else 1))
        self._check(self.lib.ck_model_forward(self.h))
        out = self.logits()
        if is_torch(tokens):
            import torch
            return torch.from_numpy(out)
        return out

    def kv_cache_enable(self, capacity):
        self._check(self.lib.ck_model_kv_cache_enable(self.h, int(capacity)))

    def kv_cache_disable(self):
        """Frees the cache: forward() treats its tokens as a fresh sequence again."""
        self.lib.ck_model_kv_cache_disable(self.h)

    def kv_cache_reset(self):
        self.lib.ck_model_kv_cache_reset(self.h)

    @property
    def kv_cache_tokens(self):
        return self._check(self.lib.ck_model_kv_cache_get_tokens(self.h))

    def decode(self, token):
        """One step through the KV cache; returns the logits row [vocab]."""
        self._check(self.lib.ck_model_decode(self.h, int(token)))
        return self.logits()[0]

    def generate(self, prompt_tokens, max_new_tokens, temperature=0.0, top_k=None, top_p=None, seed=None,
                 min_p=None, repetition_penalty=None, stop_at_eos=True):
        """Prompt ids + up to max_new_tokens sampled ids (greedy when temperature == 0), via the KV cache, by the C
        sampler and loop (ck_generate): repetition penalty, temperature, top-k, top-p, min-p, in that order;
        stops at the tokenizer's end-of-generation ids unless stop_at_eos is False. The cache is released
        after, so forward() starts a fresh sequence again."""
        prompt = [int(t) for t in as_numpy(prompt_tokens).reshape(-1)]
        if not prompt:
            raise ValueError("generate: the prompt needs at least one token")
        steps = min(max_new_tokens, self.context_length - len(prompt))
        if steps < 0:
            raise ValueError(f"generate: prompt of {len(prompt)} tokens exceeds the context {self.context_length}")
        if steps < max_new_tokens:
            warnings.warn(f"generate: the context holds {self.context_length} tokens: {steps} new tokens after the "
                          f"{len(prompt)}-token prompt, not {max_new_tokens}", stacklevel=2)
        ids, _, _ = self._generate(prompt, steps, None, dict(temperature=temperature, top_k=top_k, top_p=top_p,
                                   seed=seed, min_p=min_p, repetition_penalty=repetition_penalty),
                                   ignore_eos=not stop_at_eos)
        return prompt + ids

    # ---- several sequences ---------------------------------------------------------------------------

    def kv_cache_enable_batch(self, capacity, n_seqs):
        """One cache for n_seqs sequences of `capacity` positions each (batch(); the single-sequence calls are
        refused until kv_cache_enable)."""
        self._check(self.lib.ck_model_kv_cache_enable_batch(self.h, int(capacity), int(n_seqs)))
        self.n_seqs = int(n_seqs)

    def batch(self, tokens, seqs):
        """Appends tokens[i] to sequence seqs[i], all in one pass (ck_model_batch); returns {sequence: logits row}
        for the last token of each sequence in the call."""
        t = np.ascontiguousarray(as_numpy(tokens), dtype=np.int32).reshape(-1)
        q = np.ascontiguousarray(as_numpy(seqs), dtype=np.int32).reshape(-1)
        if t.size != q.size:
            raise ValueError(f"batch: {t.size} tokens but {q.size} sequence ids")
        if t.size == 0:
            raise ValueError("batch: no tokens")
        self._check(self.lib.ck_model_batch(self.h, t.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                                            q.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), t.size))
        last = {int(seq): i for i, seq in enumerate(q)}  # each sequence's last token: the rows come in its order
        rows = self.logits()
        return {seq: rows[r] for r, seq in enumerate(sorted(last, key=last.get))}

    def seq_reset(self, seq):
        self._check(self.lib.ck_model_seq_reset(self.h, int(seq)))

    def seq_tokens(self, seq):
        return self._check(self.lib.ck_model_seq_get_tokens(self.h, int(seq)))

    def generate_batch(self, prompts, max_new_tokens, max_batch=8, stop_at_eos=True, eos=None, prefill_chunk=512,
                       **sampling):
        """Greedy (or sampled: the ck_sampler options of generate) continuations of several prompts (lists of
        ids), max_batch at a time in one handle: the prompts' prefill in one call, then one decode step for
        every live sequence per call, each sequence stopping on its own (an end-of-generation id, or
        max_new_tokens); a finished sequence's place goes to the next waiting prompt. Returns each prompt's new
        ids, in the prompts' order. `eos`: the ids that end a sequence (default: the tokenizer's)."""
        prompts = [[int(t) for t in as_numpy(p).reshape(-1)] for p in prompts]
        if not prompts:
            return []
        for i, p in enumerate(prompts):
            if not p:
                raise ValueError(f"generate_batch: prompt {i} is empty")
            if len(p) + max_new_tokens > self.context_length:
                raise ValueError(f"generate_batch: prompt {i} ({len(p)} tokens) + {max_new_tokens} new exceeds the "
                                 f"context {self.context_length}")
        if not stop_at_eos:
            def ends(_t):
                return False
        elif eos is not None:
            eos_ids = {int(t) for t in eos}

            def ends(t):
                return t in eos_ids
        else:
            tok = self.tokenizer
            ends = tok.is_eog if tok is not None else (lambda _t: False)
        width = min(int(max_batch), len(prompts))
        capacity = max(len(p) for p in prompts) + max_new_tokens
        self.kv_cache_enable_batch(capacity, width)
        samplers = {}  # one per prompt (sampled only): its draws do not depend on which prompts share its steps
        out = [[] for _ in prompts]
        waiting = list(range(len(prompts)))
        live = {}  # sequence slot -> prompt index
        try:
            while waiting or live:
                # free slots take waiting prompts: their prefill (in chunks) in one call with the others' step
                for slot in range(width):
                    if slot not in live and waiting:
                        live[slot] = waiting.pop(0)
                        self.seq_reset(slot)
                pending = {slot: (prompts[i] if self.seq_tokens(slot) == 0 and not out[i] else [out[i][-1]])
                           for slot, i in live.items()}
                rows = {}  # each sequence's logits after its last pending token (long prompts: several calls)
                while pending:
                    tokens, seqs = [], []
                    for slot in sorted(pending):
                        part = pending[slot][:prefill_chunk]
                        pending[slot] = pending[slot][len(part):]
                        tokens += part
                        seqs += [slot] * len(part)
                    rows.update(self.batch(tokens, seqs))
                    pending = {k: v for k, v in pending.items() if v}
                for slot in sorted(rows):
                    i = live[slot]
                    history = prompts[i] + out[i]
                    if sampling.get("temperature"):
                        if i not in samplers:
                            samplers[i] = self.sampler(**sampling)
                        nxt = samplers[i].sample(rows[slot], history)
                    else:
                        nxt = int(np.argmax(rows[slot]))
                    out[i].append(nxt)
                    if ends(nxt) or len(out[i]) >= max_new_tokens:
                        del live[slot]
                        samplers.pop(i, None)
        finally:
            self.kv_cache_disable()
        return out

    def generate_text_batch(self, prompts, max_new_tokens=256, chat=False, **kw):
        """generate_batch over texts (chat=True: each as one user message through the chat template); returns the
        texts generated, in the prompts' order."""
        ids = [self._prompt_ids(p, chat) for p in prompts]
        new = self.generate_batch(ids, max_new_tokens, **kw)
        return [self.detokenize(n, skip_special=True) for n in new]

    # ---- text ----------------------------------------------------------------------------------------

    @property
    def tokenizer(self):
        """The ckc.text.Tokenizer the library loaded (shared with the model), or None."""
        h = self.lib.ck_model_get_tokenizer(self.h)
        if not h:
            return None
        from .text import Tokenizer
        return Tokenizer.borrow(self.lib, h)

    def _tok(self):
        t = self.tokenizer
        if t is None:
            raise CkError(-7, "no tokenizer: " + self.lib.ck_model_get_tokenizer_error(self.h).decode() +
                          " (the model still takes token ids)")
        return t

    def sampler(self, **sampling):
        """A Sampler over this model's vocabulary (temperature, top_k, top_p, min_p, repetition_penalty, seed)."""
        return Sampler(self.lib, self.vocab_size, **sampling)

    def tokenize(self, text, add_special=True):
        """Token ids of text, special tokens added as the tokenizer's configuration says (like HF tok(text))."""
        return self._tok().encode(text, add_special=add_special)

    def detokenize(self, ids, skip_special=False):
        return self._tok().decode(ids, skip_special=skip_special)

    def apply_chat_template(self, messages, add_generation_prompt=True):
        """The model's chat template rendered for messages ([{"role": ..., "content": ...}]), as transformers'
        apply_chat_template(tokenize=False) renders it (runtime/text/chat.c)."""
        from .text import TokenizerError, render_chat
        t = self._tok()
        try:
            return render_chat(t.chat_template, messages, add_generation_prompt, t.piece(t.bos) if t.bos >= 0 else b"",
                               t.piece(t.eos) if t.eos >= 0 else b"", lib=self.lib)
        except TokenizerError as e:
            raise CkError(-1, str(e)) from None

    def _prompt_ids(self, prompt, chat):
        if chat:
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            return self.tokenize(self.apply_chat_template(messages), add_special=False)
        if isinstance(prompt, str):
            return self.tokenize(prompt)
        return [int(t) for t in prompt]

    def _generate(self, prompt, max_new_tokens, on_text, sampling, stop=(), ignore_eos=False):
        """Runs ck_generate; on_text(str) gets the streamed text (and returns True to stop). Returns (new ids,
        stop reason, GenerateResult)."""
        s = _sampling(**sampling)
        stops = (ctypes.c_char_p * max(len(stop), 1))(*[x.encode() for x in stop])
        o = GenerateOpts(max_new_tokens=int(max_new_tokens), sampling=s, stop=stops, n_stop=len(stop),
                         ignore_eos=int(bool(ignore_eos)), keep_cache=0)
        arr = (ctypes.c_int32 * max(len(prompt), 1))(*prompt)
        out = (ctypes.c_int32 * max(int(max_new_tokens), 1))()
        res = GenerateResult()

        def cb(user, token, text, n):
            if on_text is not None and text and n:
                return 1 if on_text(ctypes.string_at(text, n).decode("utf-8", errors="replace")) else 0
            return 0
        tok = self.lib.ck_model_get_tokenizer(self.h)
        rc = self.lib.ck_generate(self.h, tok, arr, len(prompt), ctypes.byref(o), out, int(max_new_tokens),
                                  TOKEN_CALLBACK(cb), None, ctypes.byref(res))
        self._check(rc)
        return list(out[:res.n_new]), STOP_REASONS[res.stop], res

    def stream_text(self, prompt, max_new_tokens=256, chat=False, stop=(), temperature=0.0, top_k=None, top_p=None,
                    min_p=None, repetition_penalty=None, seed=None):
        """Yields the generated text piece by piece (whole UTF-8 characters) while the C loop runs in a worker
        thread; stops at the end of generation / turn, a stop string, max_new_tokens, or when the caller stops
        iterating. prompt: text (a completion), ids, or with chat=True a user message or a message list."""
        ids = self._prompt_ids(prompt, chat)
        q, cancel = queue.Queue(), threading.Event()
        sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                        repetition_penalty=repetition_penalty, seed=seed)

        def on_text(t):
            q.put(t)
            return cancel.is_set()

        def work():
            try:
                q.put(("done", self._generate(ids, max_new_tokens, on_text, sampling, tuple(stop))))
            except BaseException as e:  # handed to the consumer
                q.put(("error", e))
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        try:
            while True:
                item = q.get()
                if isinstance(item, str):
                    yield item
                    continue
                if item[0] == "error":
                    raise item[1]
                self.last_generation = item[1]
                return
        finally:
            cancel.set()
            worker.join()

    def generate_text(self, prompt, max_new_tokens=256, **kw):
        """The generated text for prompt (see stream_text); the ids, stop reason and timings are in
        self.last_generation afterwards."""
        return "".join(self.stream_text(prompt, max_new_tokens, **kw))

    def chat(self, message, max_new_tokens=256, **kw):
        """The assistant's answer to a user message (or a list of messages) under the model's chat template."""
        return self.generate_text(message, max_new_tokens, chat=True, **kw)

    # ---- training (ckc compile --train) ----------------------------------------------------------------

    def enable_training(self, max_tokens):
        """Saved activations, gradients and a writable float32 copy of the weights for steps of up to
        max_tokens tokens. Turns the KV cache off (training runs whole sequences)."""
        self.kv_cache_disable()
        self._check(self.lib.ck_model_enable_training(self.h, int(max_tokens)))

    def disable_training(self):
        """Frees what training allocated; inference then runs the trained weights."""
        self.lib.ck_model_disable_training(self.h)

    @property
    def training(self):
        return bool(self.lib.ck_model_is_training(self.h))

    def backward(self, targets):
        """The mean cross-entropy of the last forward's logits against targets (IGNORE_INDEX rows do not
        count); its gradients are added to every parameter's. Returns the loss."""
        arr = np.ascontiguousarray(as_numpy(targets), dtype=np.int32).reshape(-1)
        loss = ctypes.c_float()
        self._check(self.lib.ck_model_backward(self.h, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), arr.size,
                                               ctypes.byref(loss)))
        return loss.value

    def zero_grad(self):
        self._check(self.lib.ck_model_zero_grad(self.h))

    def optimizer_step(self, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, clip=1.0):
        """One AdamW step (torch.optim.AdamW's defaults) after clipping the global gradient norm to clip
        (0: none); returns the norm before clipping."""
        self._check(self.lib.ck_model_optimizer_step(self.h, lr, betas[0], betas[1], eps, weight_decay, clip))
        return self.lib.ck_model_get_grad_norm(self.h)

    def train_step(self, inputs, targets, lr, **adamw):
        """zero_grad, forward(inputs), backward(targets), optimizer_step(lr, **adamw); returns the loss."""
        self.zero_grad()
        self.embed(inputs)
        self._check(self.lib.ck_model_forward(self.h))
        loss = self.backward(targets)
        self.optimizer_step(lr, **adamw)
        return loss

    def set_weight_decay(self, name, on):
        self._check(self.lib.ck_model_set_weight_decay(self.h, name.encode(), int(bool(on))))

    def param_names(self):
        """Every parameter's checkpoint (Hugging Face) name."""
        n = self._check(self.lib.ck_model_get_param_count(self.h))
        return [self.lib.ck_model_get_param_name(self.h, i).decode() for i in range(n)]

    def _param(self, fn, name):
        size = self._check(fn(self.h, name.encode(), None, 0))  # the element count
        buf = np.empty(size, dtype=np.float32)
        self._check(fn(self.h, name.encode(), buf.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), size))
        return buf

    def weight(self, name):
        """A parameter by checkpoint name, flat float32 (the checkpoint's layout)."""
        return self._param(self.lib.ck_model_get_weight, name)

    def grad(self, name):
        """Its accumulated gradient, flat float32."""
        return self._param(self.lib.ck_model_get_grad, name)

    def save(self, path):
        """float32 safetensors under the checkpoint names: PATH/model.safetensors, with the model folder's
        config.json (and tokenizer files) copied beside it, so transformers' from_pretrained loads it; or
        PATH itself when it ends in .safetensors."""
        import shutil
        self._check(self.lib.ck_model_save(self.h, str(path).encode()))
        if str(path).endswith(".safetensors"):
            return
        src = self.weights_path if os.path.isdir(self.weights_path) else os.path.dirname(self.weights_path)
        for f in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                  "tokenizer.model", "special_tokens_map.json"):
            if os.path.exists(os.path.join(src, f)) and os.path.abspath(src) != os.path.abspath(str(path)):
                shutil.copyfile(os.path.join(src, f), os.path.join(str(path), f))
