"""Training (ckc compile --train) against PyTorch and transformers, for every supported family.

  gradients  one forward + backward of a tiny random model (hf_cases.CASES) on a batch with an ignored
             target: the loss (with a mixture's load-balancing loss where output_router_logits) and the gradient of every parameter against transformers' autograd
             (within 1e-4 relative to the tensor's largest gradient); the parameter names are exactly
             transformers' named_parameters()
  AdamW      20 steps of ckc's optimizer_step against torch.optim.AdamW + clip_grad_norm_ on the same
             model (decay on 2-D weights only, as ckc's default): loss per step within 1e-4, gradient
             norm within 1e-4, logits of the trained models
  save       the trained weights saved by ckc load in transformers and give ckc's logits, and inference
             after disable_training runs the trained weights (every family)
  bf16       a bfloat16 checkpoint trains in float32 and saves float32
  refusals   a library without --train, bad targets, too many tokens, decode and the KV cache while training
"""
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModelForCausalLM

import ckc
from conftest import max_diff, mixture_of_experts, prompt
from hf_cases import CASES, hf_kwargs, perturb

T = 12  # tokens per step: longer than the sliding windows of the mistral / qwen2_windows / gemma2 cases
TRAINABLE = sorted(CASES)
# a mixture's experts as checkpoints name them (one tensor per expert) and as transformers 5's modules hold them
# (stacked, gate and up fused): the family's module, gate, up, down
EXPERT_NAMES = {"qwen3_moe": ("mlp", "gate_proj", "up_proj", "down_proj"), "olmoe": ("mlp", "gate_proj", "up_proj",
                "down_proj"), "mixtral": ("block_sparse_moe", "w1", "w3", "w2")}


def checkpoint_params(model):
    """{checkpoint name: (parameter, its gradient)} of a transformers model: its named parameters, a mixture's
    stacked experts split into the per-expert tensors checkpoints (and ckc) name."""
    out = {}
    names = EXPERT_NAMES.get(model.config.model_type)
    for name, p in model.named_parameters():
        grad = None if p.grad is None else p.grad.detach()
        if names and name.endswith((".mlp.experts.gate_up_proj", ".mlp.experts.down_proj", ".mlp.gate.weight")):
            prefix = name[:name.index(".mlp.")] + "." + names[0] + "."
            if name.endswith(".mlp.gate.weight"):
                out[prefix + "gate.weight"] = (p.detach(), grad)
                continue
            for e in range(p.shape[0]):
                if name.endswith("down_proj"):
                    out[f"{prefix}experts.{e}.{names[3]}.weight"] = (p[e].detach(), None if grad is None else grad[e])
                else:
                    f = p.shape[1] // 2
                    out[f"{prefix}experts.{e}.{names[1]}.weight"] = (p[e, :f].detach(),
                                                                      None if grad is None else grad[e, :f])
                    out[f"{prefix}experts.{e}.{names[2]}.weight"] = (p[e, f:].detach(),
                                                                      None if grad is None else grad[e, f:])
            continue
        out[name] = (p.detach(), grad)
    return out


class Trainee:
    """A family's tiny transformers model, its saved folder and the --train library."""

    def __init__(self, name, workdir):
        cfg = dict(CASES[name])
        model_type = cfg.pop("model_type")
        cfg.pop("architectures", None)
        self.name = name
        self.config = AutoConfig.for_model(model_type, **cfg)
        torch.manual_seed(0)
        self.folder = os.path.join(workdir, f"train-{name}")
        self.fresh().save_pretrained(self.folder)
        self.so = ckc.build_library(ckc.compile_model(os.path.join(self.folder, "config.json"),
                                                      os.path.join(workdir, f"train-{name}-c"), args=["--train"]))
        rng = np.random.default_rng(1)
        self.tokens = rng.integers(0, self.config.vocab_size, T)
        self.targets = rng.integers(0, self.config.vocab_size, T)
        self.targets[3] = ckc.llm.IGNORE_INDEX

    def fresh(self):
        """The same random model every time (the saved weights)."""
        torch.manual_seed(0)
        return perturb(AutoModelForCausalLM.from_config(self.config, **hf_kwargs(self.name)), seed=2)

    def loss(self, model):
        """transformers' training loss: the cross-entropy, + router_aux_loss_coef x the routers' load-balancing
        loss when output_router_logits (as its forward adds it with labels)."""
        out = model(torch.tensor(self.tokens[None]))
        loss = F.cross_entropy(out.logits[0], torch.tensor(self.targets), ignore_index=ckc.llm.IGNORE_INDEX)
        if getattr(self.config, "output_router_logits", False):
            loss = loss + self.config.router_aux_loss_coef * out.aux_loss
        return loss

    def ckc(self, max_tokens=32):
        m = ckc.LlmModel(self.so, self.folder)
        m.enable_training(max_tokens)
        return m


_trainees = {}


def trainee(name, workdir):
    if name not in _trainees:
        _trainees[name] = Trainee(name, workdir)
    return _trainees[name]


def rel_err(ours, theirs):
    theirs = np.asarray(theirs, dtype=np.float64).reshape(-1)
    return float(np.abs(np.asarray(ours, dtype=np.float64) - theirs).max() / max(np.abs(theirs).max(), 1e-30))


@pytest.mark.parametrize("name", TRAINABLE)
def test_gradients_match_transformers(name, workdir):
    t = trainee(name, workdir)
    m = t.ckc()
    m.zero_grad()
    m.embed(t.tokens)
    m._check(m.lib.ck_model_forward(m.h))
    loss = m.backward(t.targets)

    ref = t.fresh()
    ref_loss = t.loss(ref)
    ref_loss.backward()
    assert loss == pytest.approx(ref_loss.item(), rel=1e-5)
    params = {n: g for n, (_, g) in checkpoint_params(ref).items()}
    assert sorted(m.param_names()) == sorted(params)
    # a gradient that is exactly zero in real numbers is rounding noise in both (the key bias of a layer without
    # RoPE: softmax ignores a shift of all a row's scores by q . b): there, both must stay below 1e-6 of the largest
    zero = 1e-6 * max(float(g.abs().max()) for g in params.values())
    errs = {}
    for n, g in params.items():
        ours = np.abs(m.grad(n)).max()
        if float(g.abs().max()) < zero:
            errs[n] = 0.0 if ours < zero else float("inf")
        else:
            errs[n] = rel_err(m.grad(n), g)
    worst = max(errs, key=errs.get)
    print(f"{name}: loss {loss:.6f}, worst gradient {worst} {errs[worst]:.2e}")
    assert errs[worst] < 1e-4, f"{worst}: relative error {errs[worst]:.2e}"

    # gradients accumulate over backward calls, as PyTorch's .grad does; zero_grad clears them
    g1 = m.grad(worst)
    m.embed(t.tokens)
    m._check(m.lib.ck_model_forward(m.h))
    m.backward(t.targets)
    assert max_diff(m.grad(worst), 2 * g1) <= 1e-5 * max(np.abs(g1).max(), 1)
    m.zero_grad()
    assert not np.any(m.grad(worst))


@pytest.mark.parametrize("name", TRAINABLE)
def test_adamw_matches_torch(name, workdir):
    t = trainee(name, workdir)
    lr, betas, eps, wd, clip = 3e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
    m = t.ckc()
    ref = t.fresh()
    decay = [p for p in ref.parameters() if p.dim() >= 2]
    no_decay = [p for p in ref.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=eps)
    ours, theirs = [], []
    moe = mixture_of_experts(CASES[name])
    for step in range(20):
        if moe:
            # a mixture's top-k choice is discontinuous: once one side's rounding flips a token's choice at a tie
            # (CPU-dependent: AVX-512 vs AVX2 sum in different orders), the two runs follow different paths
            # (measured on a Zen 3: 5% apart in gradient norm 1 step later). So torch starts every step from
            # ckc's parameters: each step's gradients, clipping and AdamW update are compared, not the chaos.
            with torch.no_grad():
                params = checkpoint_params(ref)
                for pname in m.param_names():
                    if pname in params:
                        params[pname][0].copy_(torch.from_numpy(m.weight(pname)).view_as(params[pname][0]))
        ours.append(m.train_step(t.tokens, t.targets, lr, betas=betas, eps=eps, weight_decay=wd, clip=clip))
        opt.zero_grad()
        loss = t.loss(ref)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), clip)
        # relative to this step's norm, or to 1e-5 of the first: a model that learns the batch in a few steps
        # (Gemma 3's six layers: loss 6.8 -> 0.006 in 8) ends with gradients 1000x smaller, whose last digits
        # carry the rounding of every step before
        first_norm = first_norm if step else norm.item()
        # (a mixture: measured 1.4e-4 .. 5.6e-4 at some steps before the parameters were synchronized)
        rel = 2e-3 if moe else 1e-4
        assert m.lib.ck_model_get_grad_norm(m.h) == pytest.approx(norm.item(), rel=rel, abs=1e-5 * first_norm)
        opt.step()
        theirs.append(loss.item())
    print(f"{name}: loss {ours[0]:.4f} -> {ours[-1]:.4f} (torch {theirs[-1]:.4f})")
    assert ours[-1] < ours[0] - 0.5  # it learns the batch
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5 * theirs[0])
    # the trained models agree (not every weight does: a key bias has no true gradient, only rounding noise,
    # which Adam scales up to lr-sized steps of either sign; the logits do not depend on it)
    m.disable_training()
    with torch.no_grad():
        ref_logits = ref(torch.tensor(t.tokens[None])).logits[0].numpy()
    err = max_diff(m.forward(t.tokens), ref_logits)
    print(f"{name}: logits after 20 steps within {err:.2e}")
    # measured 8e-6 (olmo2) .. 1.3e-4 (gpt2) for 2-4 layers that end at loss ~0.005; 8e-4 and 1.6e-3 for Gemma 3's
    # six layers, which end at 0.0005: gradients 10x smaller still, so more of Adam's steps follow rounding noise
    # (a wrong update rule is off by O(1))
    assert err < 3e-3


@pytest.mark.parametrize("name", TRAINABLE)
def test_save_reloads_in_transformers_and_inference_runs_trained_weights(name, workdir):
    t = trainee(name, workdir)
    m = t.ckc()
    for _ in range(5):
        m.train_step(t.tokens, t.targets, 1e-2)
    trained = os.path.join(workdir, f"trained-{name}")
    m.save(trained)
    assert not [f for f in os.listdir(trained) if ".tmp" in f]
    m.disable_training()
    assert not m.training
    toks = prompt(9, t.config.vocab_size, seed=3)
    ours = m.forward(toks)
    hf = AutoModelForCausalLM.from_pretrained(trained, dtype=torch.float32, **hf_kwargs(name)).eval()
    with torch.no_grad():
        theirs = hf(torch.tensor([toks])).logits[0].numpy()
    assert max_diff(ours, theirs) < 1e-4
    before = ckc.LlmModel(t.so, t.folder).forward(toks)
    assert max_diff(before, ours) > 1e-2  # the steps changed the model
    # and a fresh library loads the saved folder to the same logits
    assert max_diff(ckc.LlmModel(t.so, trained).forward(toks), ours) < 1e-5


def test_bf16_checkpoint_trains_in_float32(workdir):
    """A bfloat16 folder: enable_training copies the weights to float32, the gradients are those of the
    float32 model with the rounded weights, and save writes float32."""
    from safetensors import safe_open
    t = trainee("llama", workdir)
    folder = os.path.join(workdir, "train-llama-bf16")
    t.fresh().to(torch.bfloat16).save_pretrained(folder)
    m = ckc.LlmModel(t.so, folder)
    m.enable_training(16)
    m.zero_grad()
    m.embed(t.tokens)
    m._check(m.lib.ck_model_forward(m.h))
    loss = m.backward(t.targets)
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    ref_loss = t.loss(ref)
    ref_loss.backward()
    assert loss == pytest.approx(ref_loss.item(), rel=1e-5)
    params = dict(ref.named_parameters())
    assert max(rel_err(m.grad(n), params[n].grad) for n in params) < 1e-4
    m.optimizer_step(1e-3)
    out = os.path.join(workdir, "train-llama-bf16-saved")
    m.save(out)
    with safe_open(os.path.join(out, "model.safetensors"), "np") as f:
        assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"float32"}


def test_training_refusals(workdir):
    t = trainee("llama", workdir)
    plain = ckc.LlmModel(ckc.build_library(ckc.compile_model(os.path.join(t.folder, "config.json"),
                                                             os.path.join(workdir, "train-llama-plain"))), t.folder)
    with pytest.raises(ckc.CkError, match=r"compiled without training \(ckc compile --train\)"):
        plain.enable_training(8)

    m = ckc.LlmModel(t.so, t.folder)
    with pytest.raises(ckc.CkError, match="training is off"):
        m.backward(t.targets)
    with pytest.raises(ckc.CkError, match="max_tokens 0 outside"):
        m.enable_training(0)
    m.enable_training(8)
    with pytest.raises(ckc.CkError, match="12 tokens; training was enabled for at most 8"):
        m.forward(t.tokens)
    m.disable_training()
    m.enable_training(16)
    with pytest.raises(ckc.CkError, match="no training forward"):
        m.backward(t.targets)
    m.embed(t.tokens)
    m._check(m.lib.ck_model_forward(m.h))
    with pytest.raises(ckc.CkError, match="11 targets for a forward of 12 tokens"):
        m.backward(t.targets[:11])
    bad = t.targets.copy()
    bad[5] = t.config.vocab_size
    with pytest.raises(ckc.CkError, match=r"target 256 at index 5 is outside the vocabulary \[0, 256\)"):
        m.backward(bad)
    with pytest.raises(ckc.CkError, match="ck_model_decode: training is on"):
        m.decode(1)
    with pytest.raises(ckc.CkError, match="ck_model_kv_cache_enable: training is on"):
        m.kv_cache_enable(8)
    with pytest.raises(ckc.CkError, match="no parameter named 'nope'"):
        m.grad("nope")
    with pytest.raises(ckc.CkError, match="betas in"):
        m.optimizer_step(1e-3, betas=(1.0, 0.9))
    m.backward(t.targets)  # the forward is still there after the refused calls
    assert np.isfinite(m.lib.ck_model_get_grad_norm(m.h))


def test_non_finite_loss_is_an_error_and_accumulates_nothing(workdir):
    from safetensors.torch import load_file, save_file
    t = trainee("llama", workdir)
    folder = os.path.join(workdir, "train-llama-inf")
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(t.folder):
        if f != "model.safetensors":
            with open(os.path.join(t.folder, f), "rb") as a, open(os.path.join(folder, f), "wb") as b:
                b.write(a.read())
    state = load_file(os.path.join(t.folder, "model.safetensors"))
    state["lm_head.weight"][7, 3] = float("inf")
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    m = ckc.LlmModel(t.so, folder)
    m.enable_training(16)
    m.embed(t.tokens)
    m._check(m.lib.ck_model_forward(m.h))
    with pytest.raises(ckc.CkError, match="the loss is (NaN|Inf); no gradient was accumulated") as e:
        m.backward(t.targets)
    assert e.value.code == -2
    assert not np.any(m.grad("lm_head.weight"))


def test_text_run_learns_and_generates(workdir):
    """scripts/train_text.py: a byte-level Llama trained on the project's corpus; the loss falls from ln 256
    and the trained model generates (the closing notes show the long run)."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, os.path.join(ckc.ROOT, "scripts", "train_text.py"), "--steps", "120",
                          "--dim", "64", "--layers", "2", "--generate", "40", "--json", "--out",
                          os.path.join(workdir, "train-text")], capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    assert r["first_loss"] == pytest.approx(np.log(256), abs=0.3)
    assert r["last_loss"] < r["first_loss"] - 2.0, out
    assert r["text"].startswith("A compiler") and len(r["text"]) > len("A compiler") + 20  # 40 bytes, UTF-8 decoded
    assert "step   120" in out and "|" in out  # the progress lines and the printed curve

