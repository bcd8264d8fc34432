"""ctypes wrapper of a compiled language model (the ck_model ABI, runtime/include/ck_model.h).

    m = LlmModel("out/libmodel.so", "path/to/hf-folder")
    logits = m.forward([1, 2, 3])                # [3, vocab] numpy, fresh sequence
    ids = m.generate([1, 2, 3], max_new_tokens=16, temperature=0.8, top_k=40, seed=0)

A library compiled with `ckc compile --train` also trains (the other builds raise CkError CK_ENOTSUP):

    m.enable_training(max_tokens=256)
    loss = m.train_step(inputs, targets, lr=3e-4)      # zero_grad, forward, backward, clip, AdamW
    m.save("finetuned/")                               # Hugging Face names, float32 safetensors (+ config.json)
"""
import ctypes
import os
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
    return lib


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

    def generate(self, prompt_tokens, max_new_tokens, temperature=0.0, top_k=None, top_p=None, seed=None):
        """Prompt ids + up to max_new_tokens sampled ids (greedy when temperature == 0), via the KV cache."""
        prompt = [int(t) for t in as_numpy(prompt_tokens).reshape(-1)]
        if not prompt:
            raise ValueError("generate: the prompt needs at least one token")
        steps = min(max_new_tokens, self.context_length - len(prompt))
        if steps < 0:
            raise ValueError(f"generate: prompt of {len(prompt)} tokens exceeds the context {self.context_length}")
        if steps < max_new_tokens:
            warnings.warn(f"generate: the context holds {self.context_length} tokens: {steps} new tokens after the "
                          f"{len(prompt)}-token prompt, not {max_new_tokens}", stacklevel=2)
        self.kv_cache_enable(min(self.context_length, len(prompt) + max(steps, 1)))
        rng = np.random.default_rng(seed)
        row = self.forward(prompt, last_only=True)[-1]
        out = list(prompt)
        for i in range(steps):
            nxt = sample(row, temperature, top_k, top_p, rng)
            out.append(nxt)
            if i + 1 < steps:
                row = self.decode(nxt)
        return out


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


def sample(logits, temperature=0.0, top_k=None, top_p=None, rng=None):
    """Greedy when temperature <= 0; otherwise softmax(logits / T) restricted to top-k and the top-p nucleus."""
    if temperature is None or temperature <= 0:
        return int(np.argmax(logits))
    rng = rng or np.random.default_rng()
    z = np.asarray(logits, dtype=np.float64) / temperature
    order = np.argsort(-z, kind="stable")
    if top_k:
        order = order[:top_k]
    p = np.exp(z[order] - z[order[0]])
    p /= p.sum()
    if top_p is not None and top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(p), top_p) + 1)
        order, p = order[:keep], p[:keep] / p[:keep].sum()
    return int(order[rng.choice(len(order), p=p)])
