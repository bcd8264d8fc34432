"""build_examples/web: the browser demo. SmolLM2-135M-Instruct Q4_1 (the demo's GGUF), compiled to one standalone
model.c and built for wasm32-wasi by build_examples/web/build.sh, answers a prompt in Debian's chromium, headless:
the page runs the program in a worker through its own WASI (wasi.js) and streams the answer, and its first 16
greedy tokens are the native build's (the same C on x86, CK_KERNELS=portable: the AVX-512 bodies quantize prefill's
activations to 8 bits)."""
import http.server
import json
import os
import shutil
import subprocess
import threading
import urllib.parse

import pytest

import ckc
from ckc import cross

PROMPT = "Why is the sky blue?"
WEB = os.path.join(ckc.ROOT, "build_examples", "web")


def serve(folder):
    """A local server of the folder that takes the page's report (POST /result); returns (server, url, results)."""
    results, got = [], threading.Event()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=folder, **k)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            results.append(json.loads(body))
            got.set()
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/", results, got


@pytest.mark.slow
def test_the_page_answers_as_the_native_build(tmp_path):
    from references import smollm2_gguf
    chromium = shutil.which("chromium")
    assert chromium, "chromium missing (scripts/install_deps.sh installs it)"
    assert not cross.missing_tools("wasm32"), cross.missing_tools("wasm32")
    gguf = smollm2_gguf()
    out = tmp_path / "web"
    p = subprocess.run([os.path.join(WEB, "build.sh"), gguf, str(out)], capture_output=True, text=True,
                       env=dict(os.environ, CKC_BIN=ckc.ckc_binary()), timeout=600)
    assert p.returncode == 0, p.stderr
    assert {"index.html", "worker.js", "wasi.js", "model.wasm", "model.gguf"} <= set(os.listdir(out))

    args = ["--prompt", PROMPT, "-n", "16", "--temp", "0"]
    native = cross.build(str(out / "model.c"), str(tmp_path / "model"), opt="-O1")
    want = subprocess.run([native, gguf, *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, CK_KERNELS="portable"))
    assert want.returncode == 0 and len(want.stdout.split()) >= 8, want.stderr

    server, url, results, got = serve(str(out))
    query = urllib.parse.urlencode({"prompt": PROMPT, "n": 16, "report": "/result"})
    browser = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", url + "?" + query],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert got.wait(300), "the page did not report within 300 s"
    finally:
        browser.kill()
        browser.wait()
        server.shutdown()
    r = results[0]
    assert r["code"] == 0, r["stderr"]
    print(f"page: {r['answer']!r}\n{r['stderr'].strip()}")
    assert r["answer"] == want.stdout, (r["answer"], want.stdout)
    assert "[prompt" in r["stderr"] and "generated 16 tokens" in r["stderr"], r["stderr"]
