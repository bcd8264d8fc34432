"""Chat formats (runtime/text/chat.c) against transformers' apply_chat_template on the families' Jinja templates
(as their tokenizer_config.json files publish them; SmolLM2's is read from its GGUF): the same string for
multi-turn conversations with and without a system prompt, with and without the generation prompt, and the
same refusals."""
import os

import pytest

from ckc.text import TokenizerError, chat_format_name, render_chat

import tokenizer_cases
from references import CACHE, llama_cpp_chat_template, smollm2_gguf

TEMPLATES = {
    "chatml_qwen2": (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou "
        "are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n'"
        " }}{% endif %}", "<|endoftext|>", "<|im_end|>"),
    "llama2": (
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
        "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
        "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
        "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
        "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
        "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
        "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
        "== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}", "<s>", "</s>"),
    "llama3": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
        "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
        "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
        "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}", "<|begin_of_text|>", "<|eot_id|>"),
    "mistral": (
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
        "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
        "message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
        "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are "
        "supported!') }}{% endif %}{% endfor %}", "<s>", "</s>"),
    "gemma": (
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% "
        "endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
        "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
        "(message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif "
        "%}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if "
        "add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}", "<bos>", "<eos>"),
    # Gemma 3's (google/gemma-3-*-it tokenizer_config.json): the system message goes before the first user turn
    "gemma3": (
        "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
        "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n    {%- else -%}\n"
        "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n    {%- endif -%}\n"
        "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
        "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
        "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
        "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
        "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
        "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
        "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
        "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
        "    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n"
        "            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n"
        "            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n"
        "            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n"
        "        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\\n' }}\n"
        "{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\\n'}}\n{%- endif -%}\n",
        "<bos>", "<eos>"),
    "phi3": (
        "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + "
        "'<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif "
        "message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% "
        "endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}",
        "<s>", "<|endoftext|>"),
}

SYSTEM = {"role": "system", "content": "You are terse.\nAnswer in one line. "}
TURNS = [{"role": "user", "content": "  Hi there!  "}, {"role": "assistant", "content": "Hello.\n"},
         {"role": "user", "content": "What is 2+2? Use ñ, 日本, 🙂."}]


def hf_render(template, bos, eos, messages, add_generation_prompt):
    from transformers import PreTrainedTokenizerFast
    path = tokenizer_cases.save_family("gpt2", os.path.join(CACHE, "tokenizers", "gpt2"))
    tok = PreTrainedTokenizerFast(tokenizer_file=path, bos_token=bos, eos_token=eos)
    tok.chat_template = template
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def conversations():
    return [TURNS, [SYSTEM] + TURNS, TURNS[:1], [SYSTEM] + TURNS[:2]]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_chat_template_matches_transformers(name):
    template, bos, eos = TEMPLATES[name]
    assert chat_format_name(template) == name.split("_")[0]
    compared = refused = 0
    for messages in conversations():
        for gen in (True, False):
            try:
                want = hf_render(template, bos, eos, messages, gen)
            except Exception as e:  # the template raises: so must ckc
                with pytest.raises(TokenizerError, match="System role not supported|roles must alternate|"
                                                         "Only user and assistant"):
                    render_chat(template, messages, gen, bos, eos)
                assert type(e).__name__ == "TemplateError"
                refused += 1
                continue
            assert render_chat(template, messages, gen, bos, eos) == want, (messages, gen)
            compared += 1
    assert compared >= 4
    if name in ("mistral", "gemma"):
        assert refused == 4  # no system role


def test_smollm2_chat_template_from_its_gguf():
    from ckc.text import Tokenizer
    tok = Tokenizer(smollm2_gguf())
    template = tok.chat_template
    assert chat_format_name(template) == "chatml"
    for messages in conversations():
        for gen in (True, False):
            want = hf_render(template, "<|im_start|>", "<|im_end|>", messages, gen)
            assert render_chat(template, messages, gen) == want
    assert "You are a helpful AI assistant named SmolLM" in render_chat(template, TURNS)


def test_qwen3_chat_template():
    """Qwen3's template (as published with Qwen3-0.6B; llama.cpp's copy): ChatML with no default system prompt, an
    empty <think> block on the assistant turn after the last user message, the reasoning of earlier turns dropped."""
    template = llama_cpp_chat_template("Qwen-Qwen3-0.6B")
    assert chat_format_name(template) == "qwen3"
    think = {"role": "assistant", "content": "<think>\nAdd them.\n\n</think>\n\n4."}
    cases = conversations() + [TURNS + [think], TURNS + [think, {"role": "user", "content": "And 3+3?"}],
                               [SYSTEM, TURNS[0], {"role": "assistant", "content": "\n\nNo think block"}],
                               [TURNS[0], {"role": "assistant", "content": "a</think>b</think>\nc"}]]
    for messages in cases:
        for gen in (True, False):
            want = hf_render(template, "<|endoftext|>", "<|im_end|>", messages, gen)
            assert render_chat(template, messages, gen, "<|endoftext|>", "<|im_end|>") == want, (messages, gen)


@pytest.mark.parametrize("source", ["llama.cpp", "published"])
def test_smollm3_chat_template(source):
    """SmolLM3's template, both as llama.cpp keeps it (the GGUFs' copy) and as HuggingFaceTB/SmolLM3-3B publishes it
    (chat_templates/: with its "Today Date" line, an empty tools section and /system_override): reasoning mode from
    the system message's /think or /no_think, those flags taken out of the custom instructions, a default system
    prompt per mode, the empty <think> block of /no_think on assistant turns."""
    here = os.path.dirname(os.path.abspath(__file__))
    template = (llama_cpp_chat_template("HuggingFaceTB-SmolLM3-3B") if source == "llama.cpp" else
                open(os.path.join(here, "chat_templates", "HuggingFaceTB-SmolLM3-3B.jinja"), encoding="utf-8").read())
    assert chat_format_name(template) == "smollm3"
    no_think = {"role": "system", "content": "Be brief. /no_think  \n"}
    flags_only = {"role": "system", "content": "/think"}
    override = {"role": "system", "content": "/system_override You are a pirate. \n"}
    cases = conversations() + [[no_think] + TURNS, [flags_only] + TURNS[:2], [override] + TURNS,
                               [TURNS[0], {"role": "assistant", "content": "\n\nlead"}]]
    for messages in cases:
        for gen in (True, False):
            want = hf_render(template, "<|im_start|>", "<|im_end|>", messages, gen)
            assert render_chat(template, messages, gen) == want, (messages, gen)
    if source == "published":
        assert "Today Date: " in render_chat(template, TURNS)


def test_bad_chat_input():
    template = TEMPLATES["llama3"][0]
    with pytest.raises(TokenizerError, match='role "tool" is not system, user or assistant'):
        render_chat(template, [{"role": "tool", "content": "x"}])
    with pytest.raises(TokenizerError, match="not one ckc knows"):
        render_chat("{{ messages }}", TURNS)
    with pytest.raises(TokenizerError, match="no chat template"):
        render_chat(None, TURNS)
    with pytest.raises(TokenizerError, match="roles must alternate"):
        render_chat(TEMPLATES["llama2"][0], [TURNS[0], TURNS[0]])
    with pytest.raises(TokenizerError, match="no messages"):  # transformers refuses an empty conversation too
        render_chat(template, [])
