"""The tokenizer tests' corpus, written by the project (deterministic, ~80 KB): English prose and C / Python
code, whitespace runs, tabs and newlines, digits and long numbers, punctuation clusters, contractions in any
case, CJK, Arabic, Devanagari, emoji incl. ZWJ sequences and skin tones, combining marks (decomposed and
precomposed), and a few odd code points. `documents()` yields it in pieces of a few hundred bytes to a few
KB; `invalid_utf8()` gives byte strings that are not UTF-8 (for the C side only: Python's reference
libraries take str)."""
import random

PROSE = [
    "The quick brown fox jumps over the lazy dog.", "It's what they'd said: we'll see, you're right, I've gone.",
    "SHE'S HERE, THEY'RE GONE, WE'LL WAIT, I'D GO.", "A compiler reads a model and writes C; the C is the model.",
    "Mr. O'Neil paid $1,234,567.89 on 2026-11-23 at 07:45 (UTC+01:00).", "E = mc^2, and 3.14159265358979 is pi.",
    "Hello,world!How are you?Fine...thanks!!!", "\"Quoted,\" she said — 'single quotes' too… and «guillemets».",
    "Email me at someone@example.com or visit https://example.org/path?q=1&r=2#frag.",
    "Numbers: 0 1 12 123 1234 12345 123456 1234567 12345678901234567890 and 3.0e-10, -42, +7, 1_000_000.",
    "Tabs\tbetween\t\twords\t\t\tand trailing tabs\t", "Line one\nLine two\n\nLine four\r\nWindows line\r\n",
    "   leading spaces and trailing spaces   ", "many     spaces      between     words",
    "Punctuation clusters: ?!?!... ;;; ::: ((())) [[[]]] {{{}}} <<<>>> --- ___ *** ### @@@ %%% ^^^ ~~~ |||",
    "Don't, WON'T, can'T, It'S, we'Re, they'VE, I'M, you'LL, he'D.",
]
CODE = [
    "int main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++) printf(\"%s\\n\", argv[i]);\n    return 0;\n}\n",
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\nprint(fib(90))\n",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\nstatic const float k[4] = {0.5f, -1e-3f, 2.f, 3};\n",
    "if (x != y && z >= 0x7fffffff || !ok) { y <<= 2; z ^= ~x; } else return -1;\n",
    "    \tmixed indentation\n\t    more mixed\n        eight spaces\n\t\t\ttwo tabs\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;\n",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>\n", "{\"key\": [1, 2.5, null, true], \"k2\": {\"a\": \"b\"}}\n",
]
WORLD = [
    "日本語の文章です。東京は大きな都市です。", "中文文本，包括标点符号。我们喜欢编译器！", "한국어 텍스트도 있습니다.",
    "مرحبا بالعالم، هذه جملة عربية. الأرقام ١٢٣٤٥٦٧٨٩٠", "עברית: שלום עולם", "Русский текст: Привет, мир! Ёжик.",
    "Ελληνικά: Γειά σου Κόσμε", "हिन्दी पाठ: नमस्ते दुनिया", "ไทย: สวัสดีชาวโลก", "Tiếng Việt: Xin chào thế giới",
    "Emoji: 🙂 😀😃 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️ 🧑🏿‍💻 ✌🏻", "Combining: e\u0301 a\u0300 o\u0308 n\u0303 Z\u0335\u0321\u0317a\u0337lgo",
    "Precomposed: é à ö ñ Å ǅ ﬁ ℃ ½ ² ⅷ", "Math: ∑ ∫ √ ∞ ≈ ≠ ≤ ≥ ∀ ∃ ∈ ∉ ⊂ ⊃ ∧ ∨ ¬ → ⇒",
    "Odd spaces:\u00a0nbsp\u2009thin\u3000ideographic\u2028line sep\u0085nel end",
    "Full-width: ＡＢＣ１２３！？", "Zero width: a\u200bb\u200cc\u200dd\ufeffe", "Currency: €100 £20 ¥3000 ₹50 ₿0.1",
]


def documents(seed=0, size=80_000):
    """Documents of mixed content, together at least `size` characters."""
    rng = random.Random(seed)
    pools = [PROSE, CODE, WORLD]
    docs, total = [], 0
    # every fragment at least once on its own
    for pool in pools:
        for s in pool:
            docs.append(s)
            total += len(s)
    while total < size:
        parts = []
        for _ in range(rng.randint(3, 30)):
            s = rng.choice(rng.choice(pools))
            if rng.random() < 0.3:  # cut in the middle of a fragment
                a = rng.randint(0, len(s))
                s = s[a:a + rng.randint(1, 40)]
            parts.append(s)
            parts.append(rng.choice([" ", "  ", "\n", "\n\n", "\t", "", " \n", "\r\n", "   \n  "]))
        if rng.random() < 0.2:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 25))))
        d = "".join(parts)
        docs.append(d)
        total += len(d)
    return docs


def text(seed=0, size=80_000):
    return "\n".join(documents(seed, size))


def invalid_utf8():
    return [b"\xff", b"abc\x80def", b"\xc3", b"\xe2\x82", b"ok \xf0\x9f\x99 end", b"\xed\xa0\x80 surrogate",
            b"\xc0\xaf overlong", b"\xf5\x80\x80\x80 beyond", b"\x00 nul \x00", b"caf\xc3\xa9 \xe9t\xe9"]
