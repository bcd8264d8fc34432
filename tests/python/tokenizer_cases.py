"""Tokenizers to test ckc's C tokenizer against: each family's real tokenizer.json settings (normalizer,
pre-tokenizer, decoder, post-processor, model flags, as the published files of those models have them),
trained with Hugging Face `tokenizers` on the project's corpus at a small vocabulary; and a SentencePiece BPE
model trained with `sentencepiece` the way Llama-2's was set up."""
import json
import os

import text_corpus

SPM_BYTES = [f"<0x{b:02X}>" for b in range(256)]
LLAMA3_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
             "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN2_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
            "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def _byte_level(pre, specials, vocab, post=None, normalizer=None, ignore_merges=False, seed=0):
    from tokenizers import Tokenizer, decoders, models, trainers, pre_tokenizers
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator(text_corpus.documents(seed), tr)
    if post is not None:
        tok.post_processor = post
    return tok


def _spm_style(normalizer, pre, decoder, bos, specials, vocab=800):
    """BPE over characters with byte fallback, as Llama-2 / Mistral / Gemma / Phi-3 ship it: the 256 <0xXX>
    tokens in the vocabulary, characters the training did not keep fall back to them."""
    from tokenizers import Tokenizer, models, trainers, processors
    tok = Tokenizer(models.BPE(unk_token=specials[0], byte_fallback=True, fuse_unk=True))
    if normalizer is not None:
        tok.normalizer = normalizer
    if pre is not None:
        tok.pre_tokenizer = pre
    tok.decoder = decoder
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(text_corpus.documents(0), tr)
    j = json.loads(tok.to_str())
    n = max(j["model"]["vocab"].values()) + 1
    for i, b in enumerate(SPM_BYTES):  # appended: ids after the trained pieces
        j["model"]["vocab"][b] = n + i
    tok = Tokenizer.from_str(json.dumps(j))
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def family(name):
    """A `tokenizers.Tokenizer` with family `name`'s settings."""
    from tokenizers import AddedToken, decoders, normalizers, pre_tokenizers, processors, Regex
    bl = pre_tokenizers.ByteLevel
    if name == "gpt2":  # also phi-2 (CodeGen's tokenizer)
        return _byte_level(bl(add_prefix_space=False), ["<|endoftext|>"], 1200)
    if name == "smollm2":
        return _byte_level(pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl(add_prefix_space=False)]),
                           ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 1200)
    if name == "llama3":
        pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_RE), "isolated"),
                                       bl(add_prefix_space=False, use_regex=False)])
        tok = _byte_level(pre, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], 1200, ignore_merges=True)
        tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])])
        return tok
    if name == "qwen2":
        pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_RE), "isolated"),
                                       bl(add_prefix_space=False, use_regex=False)])
        return _byte_level(pre, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 1200, normalizer=normalizers.NFC())
    spm_decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    if name == "llama2":  # also Mistral v0.1, TinyLlama, Phi-3
        norm = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        return _spm_style(norm, None, spm_decoder, "<s>", ["<unk>", "<s>", "</s>"])
    if name == "mistral":  # the Metaspace form of the newer Mistral / Llama tokenizer.json files
        pre = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        return _spm_style(None, pre, spm_decoder, "<s>", ["<unk>", "<s>", "</s>"])
    if name == "gemma":  # gemma, gemma2
        norm = normalizers.Replace(" ", "▁")
        dec = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
        return _spm_style(norm, None, dec, "<bos>", ["<unk>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"])
    if name == "phi3":  # Llama-2's settings, and chat tokens that take the whitespace after them (rstrip)
        tok = family("llama2")
        tok.add_special_tokens([AddedToken(t, rstrip=True, special=True, normalized=False)
                                for t in ("<|end|>", "<|user|>", "<|assistant|>", "<|system|>")])
        return tok
    if name == "phi2":  # CodeGen's tokenizer: GPT-2's, plus tokens for runs of spaces (not special, normalized)
        tok = family("gpt2")
        tok.add_tokens([AddedToken(" " * k, normalized=True) for k in range(2, 32)] +
                       [AddedToken("\t" * k, normalized=True) for k in range(2, 10)])
        return tok
    raise KeyError(name)


FAMILIES = ["gpt2", "phi2", "smollm2", "llama3", "qwen2", "llama2", "phi3", "mistral", "gemma"]


def save_family(name, folder):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.exists(path):
        family(name).save(path + ".tmp")
        os.replace(path + ".tmp", path)
    return path


def sentencepiece_model(folder):
    """tokenizer.model: SentencePiece BPE with Llama-2's settings (identity normalization, byte fallback, split
    digits, a dummy prefix, whitespace kept)."""
    import sentencepiece as spm
    path = os.path.join(folder, "tokenizer.model")
    if os.path.exists(path):
        return path
    os.makedirs(folder, exist_ok=True)
    corpus = os.path.join(folder, "corpus.txt")
    with open(corpus, "w") as f:
        f.write(text_corpus.text(0).replace("\r", ""))
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(folder, "sp"), vocab_size=1000,
                                   model_type="bpe", byte_fallback=True, split_digits=True,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   add_dummy_prefix=True, allow_whitespace_only_pieces=True, character_coverage=0.995,
                                   user_defined_symbols=["<tool>"], max_sentence_length=100000,
                                   minloglevel=2)
    os.replace(os.path.join(folder, "sp.model"), path)
    return path
