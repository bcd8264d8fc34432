"""Every supported family against Hugging Face transformers itself.

For each case, transformers builds the real model class from a tiny config
shaped like the published one (AutoModelForCausalLM.from_config), with random
weights whose norms and biases are perturbed (so that dropping one fails),
and writes it with save_pretrained three ways: float32, bfloat16 and sharded
(model.safetensors.index.json). ckc compiles the saved config.json once; the
library loads each folder and is compared with transformers:

  prefill   logits of every position, within 1e-4
  decode    KV-cache decode logits against transformers' own cached decoding
  greedy    32 greedy tokens identical to generate(do_sample=False)
  trace     every intermediate tensor ckc can name (its Tensor::reference: an HF module
            whose output it is) against that module's output, via the -DCK_TRACE hooks;
            a failing prefill names the first tensor that diverges

The bf16 reference is transformers loading the bf16 folder into float32: the
same rounded weights, computed in float32 as ckc does.
"""
import os
import re
import shutil

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

import ckc
from conftest import max_diff, prompt
from hf_cases import CASES, hf_kwargs, perturb

VARIANTS = ("f32", "bf16", "sharded")


class Case:
    """One config: the transformers model (float32), its saved folders, the compiled library."""

    def __init__(self, name, workdir):
        self.name = name
        cfg = dict(CASES[name])
        model_type = cfg.pop("model_type")
        cfg.pop("architectures", None)
        config = AutoConfig.for_model(model_type, **cfg)
        torch.manual_seed(0)
        model = perturb(AutoModelForCausalLM.from_config(config, **hf_kwargs(name)), seed=2)
        self.vocab = config.vocab_size
        self.folders = {v: os.path.join(workdir, f"hf-{name}-{v}") for v in VARIANTS}
        model.save_pretrained(self.folders["f32"])
        model.save_pretrained(self.folders["sharded"], max_shard_size="40KB")
        model.to(torch.bfloat16).save_pretrained(self.folders["bf16"])
        self.so = ckc.build_library(ckc.compile_model(os.path.join(self.folders["f32"], "config.json"),
                                                      os.path.join(workdir, f"hf-{name}-c")))
        self.refs = {}
        self.traced = None

    def reference(self, variant):
        """transformers reading the saved folder back, in float32."""
        if variant not in self.refs:
            m = AutoModelForCausalLM.from_pretrained(self.folders[variant], dtype=torch.float32, **hf_kwargs(self.name))
            m.generation_config.eos_token_id = None  # generate exactly max_new_tokens
            m.generation_config.pad_token_id = 0
            self.refs[variant] = m.eval()
        return self.refs[variant]

    def ckc(self, variant):
        return ckc.LlmModel(self.so, self.folders[variant])

    def trace_library(self):
        """The same model.c built with -DCK_TRACE (once)."""
        if self.traced is None:
            c_path = os.path.join(os.path.dirname(self.so), "model.c")
            self.traced = ckc.build_library(c_path, os.path.join(os.path.dirname(self.so), "libtraced.so"),
                                            extra_flags=["-DCK_TRACE", "-O1"])
        return self.traced

    def trace(self, toks, folder, reference):
        """ckc's traced forward on `folder` compared with `reference`'s module outputs:
        (ckc.trace.compare rows, first divergence or None)."""
        m = ckc.LlmModel(self.trace_library(), folder)
        with ckc.trace.recording(m) as events:
            m.forward(toks)
        refs = ckc.trace.transformers_outputs(reference, toks)
        return ckc.trace.compare(events, refs), ckc.trace.first_divergence(events, refs)

    def divergence(self, variant, toks):
        """What a failing parity assertion prints: where the numbers first part."""
        return str(self.trace(toks, self.folders[variant], self.reference(variant))[1] or "no traced tensor diverges")


@pytest.fixture(scope="module")
def cases(workdir):
    made = {}

    def get(name):
        if name not in made:
            made[name] = Case(name, workdir)
        return made[name]
    return get


MATRIX = [(name, v) for name in sorted(CASES) for v in VARIANTS]


def test_saved_folders_are_what_they_claim(cases):
    c = cases("llama")
    assert "model.safetensors.index.json" in os.listdir(c.folders["sharded"])
    assert len([f for f in os.listdir(c.folders["sharded"]) if f.endswith(".safetensors")]) > 2
    from ckc import safetensors as st
    header = st.read_header(os.path.join(c.folders["bf16"], "model.safetensors"))
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16"}


@pytest.mark.parametrize("name,variant", MATRIX)
def test_prefill_logits_match_transformers(cases, name, variant):
    c = cases(name)
    toks = prompt(40, c.vocab, seed=1)
    with torch.no_grad():
        theirs = c.reference(variant)(torch.tensor([toks])).logits[0].numpy()
    ours = c.ckc(variant).forward(toks)
    assert theirs.std() > 0.05, "logits too flat to test anything"
    d = max_diff(ours, theirs)
    assert d < 1e-4, f"{name} {variant}: max |diff| {d}; {c.divergence(variant, toks)}"


def test_layers_of_two_kinds_in_a_stored_format(cases, workdir):
    """Qwen3-MoE with dense layers, its matrices kept in q8_0 (ckc compile --weights): each kind of layer reads its
    own (the experts per expert, the dense MLP's as GEMM weights, the attention's in both). These random tiny
    models amplify rounding (measured on this case: 3.7% of the largest logit; the dense qwen3 case 3.2%); a layer
    reading another's weights, or none, is off by the logits' whole scale."""
    c = cases("qwen3_moe_dense_layers")
    so = ckc.build_library(ckc.compile_model(os.path.join(c.folders["f32"], "config.json"),
                                             os.path.join(workdir, "hf-two-kinds-q8_0"), args=["--weights", "q8_0"]))
    toks = prompt(40, c.vocab, seed=1)
    with torch.no_grad():
        theirs = c.reference("f32")(torch.tensor([toks])).logits[0].numpy()
    ours = ckc.LlmModel(so, c.folders["f32"]).forward(toks)
    rel = max_diff(ours, theirs) / np.abs(theirs).max()
    agree = (ours.argmax(-1) == theirs.argmax(-1)).mean()
    assert 0 < rel < 0.1 and agree >= 0.9, f"max |diff| / max |logit| {rel}, top-1 agreement {agree}"


def layer_modules(model):
    return [n for n, _ in model.named_modules() if re.fullmatch(r"(model\.layers|transformer\.h)\.\d+", n)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_trace_matches_transformers_module_by_module(cases, name):
    """Every tensor ckc names a reference for equals that module's output in transformers, and the names
    cover the embedding, every decoder layer's output and the head."""
    c = cases(name)
    ref = c.reference("f32")
    rows, first = c.trace(prompt(12, c.vocab, seed=3), c.folders["f32"], ref)
    assert first is None, str(first)
    compared = [e.reference for e, *_ in rows]
    layers = layer_modules(ref)
    assert len(layers) == ref.config.num_hidden_layers and set(layers) <= set(compared), (layers, compared)
    assert "lm_head" in compared and any("emb" in r or "wte" in r for r in compared), compared
    assert len(compared) >= 4 * len(layers) + 3, compared


def perturbed_folder(src, dst, tensor, delta):
    """A copy of the HF folder `src` with `delta` added to one row of `tensor`."""
    from safetensors.torch import load_file, save_file
    shutil.copytree(src, dst, dirs_exist_ok=True)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    t = tensors[tensor].clone()
    t[0] += delta
    tensors[tensor] = t
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return dst


@pytest.mark.parametrize("tensor,where", [
    ("model.layers.1.post_attention_layernorm.weight", "first divergence at model.layers.1.post_attention_layernorm ("),
    # down_proj's GEMM also adds the residual (one fused node): the layer's output is where it shows, and the
    # message names the node's source module
    ("model.layers.1.mlp.down_proj.weight", "first divergence at model.layers.1 (block layer 1 node x_out (MATMUL_ADD "
                                            "from model.layers.1.mlp.down_proj))"),
])
def test_trace_names_the_first_divergence(cases, workdir, tensor, where):
    c = cases("llama")
    bad = perturbed_folder(c.folders["f32"], os.path.join(workdir, "hf-llama-perturbed-" + tensor), tensor, 0.5)
    rows, first = c.trace(prompt(12, c.vocab, seed=3), bad, c.reference("f32"))
    assert first is not None and str(first).startswith(where), str(first)
    assert first.compared >= 9, str(first)  # the embedding and layer 0 agree
    assert first.max_diff > 1e-2


@pytest.mark.parametrize("name,variant", MATRIX)
def test_kv_cache_decode_matches_transformers_cached_decoding(cases, name, variant):
    c = cases(name)
    toks = prompt(30, c.vocab, seed=2)
    ref = c.reference(variant)
    theirs = []
    with torch.no_grad():
        out = ref(torch.tensor([toks[:7]]), use_cache=True)
        theirs.append(out.logits[0].numpy())
        past = out.past_key_values
        for t in toks[7:]:
            out = ref(torch.tensor([[t]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            theirs.append(out.logits[0].numpy())
    m = c.ckc(variant)
    m.kv_cache_enable(48)
    ours = [m.forward(toks[:7])] + [m.decode(t)[None, :] for t in toks[7:]]
    d = max_diff(np.concatenate(ours), np.concatenate(theirs))
    assert d < 1e-4, (name, variant, d)


@pytest.mark.parametrize("name,variant", MATRIX)
def test_greedy_generation_identical_to_transformers_generate(cases, name, variant):
    c = cases(name)
    p = prompt(5, c.vocab, seed=4)
    with torch.no_grad():
        theirs = c.reference(variant).generate(torch.tensor([p]), attention_mask=torch.ones(1, 5, dtype=torch.long),
                                               max_new_tokens=32, do_sample=False)[0].tolist()
    ours = c.ckc(variant).generate(p, 32)
    assert ours == theirs, name
    assert len(set(ours[5:])) > 3, "degenerate generation does not test much"


def test_window_really_limits_attention(cases):
    """Mistral's window (8) is shorter than the sequence: dropping it changes the logits past position 8,
    so the parity above really checks the window."""
    c = cases("mistral")
    toks = prompt(30, c.vocab, seed=6)
    ours = c.ckc("f32").forward(toks)
    ref = c.reference("f32")
    ref.config.sliding_window = None
    try:
        with torch.no_grad():
            full = ref(torch.tensor([toks])).logits[0].numpy()
    finally:
        ref.config.sliding_window = CASES["mistral"]["sliding_window"]
    assert max_diff(ours[:8], full[:8]) < 1e-4
    assert max_diff(ours[8:], full[8:]) > 1e-2


def test_gemma3_multimodal_checkpoint_runs_its_language_model(workdir):
    """model_type "gemma3" (Gemma3ForConditionalGeneration: gemma-3-4b and larger) nests Gemma 3's language model
    under text_config and names its tensors language_model.model.*: ckc compiles that language model (the vision
    tower is not read) and gives the multimodal model's logits on text, prefill and greedy; `ckc quantize` writes
    the language model's GGUF (llama.cpp's gemma3, whose vision part lives in a separate mmproj file)."""
    import subprocess
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration
    text = {k: v for k, v in CASES["gemma3"].items() if k not in ("model_type", "architectures")}
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    torch.manual_seed(0)
    model = perturb(Gemma3ForConditionalGeneration(Gemma3Config(text_config=text, vision_config=vision,
                                                                mm_tokens_per_image=4)), seed=3)
    folder = os.path.join(workdir, "hf-gemma3-multimodal")
    model.save_pretrained(folder)
    from ckc import safetensors as st
    names = st.read_header(os.path.join(folder, "model.safetensors"))
    assert "language_model.model.layers.0.self_attn.q_norm.weight" in names and any("vision_tower" in n for n in names)
    so = ckc.build_library(ckc.compile_model(os.path.join(folder, "config.json"), os.path.join(workdir, "hf-gemma3-mm-c")))
    toks = prompt(40, text["vocab_size"], seed=1)  # past the window (8) of the local layers
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor([toks])).logits[0].numpy()
    m = ckc.LlmModel(so, folder)
    d = max_diff(m.forward(toks), theirs)
    assert theirs.std() > 0.05 and d < 1e-4, d
    p = prompt(5, text["vocab_size"], seed=4)
    with torch.no_grad():
        want = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, 5, dtype=torch.long), max_new_tokens=16,
                              do_sample=False, eos_token_id=None, pad_token_id=0)[0].tolist()
    assert m.generate(p, 16) == want
    listed = subprocess.run([ckc.ckc_binary(), "list", "families", "--json"], capture_output=True, text=True)
    assert {"model_type": "gemma3", "language_model": "gemma3_text"} in __import__("json").loads(listed.stdout)["multimodal"]
    g = os.path.join(workdir, "hf-gemma3-multimodal.gguf")
    r = subprocess.run([ckc.ckc_binary(), "quantize", folder, "-o", g, "--type", "f32"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    gso = ckc.build_library(ckc.compile_model(g, os.path.join(workdir, "hf-gemma3-mm-gguf-c")))
    assert max_diff(ckc.LlmModel(gso, g).forward(toks), theirs) < 1e-4
