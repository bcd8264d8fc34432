// worker.js — runs the model off the page's thread: fetches model.wasm and model.gguf once, then runs the
// program's command line (the same as `./model model.gguf --prompt ... -n N`) once per request, posting what it
// writes to stdout as it comes (the answer, streamed) and stderr at the end.
"use strict";
importScripts("wasi.js");

let loaded = null; // {module, gguf}

async function load() {
  if (loaded) return loaded;
  postMessage({ type: "status", text: "loading model.wasm and model.gguf ..." });
  const [module, gguf] = await Promise.all([
    WebAssembly.compileStreaming(fetch("model.wasm")),
    fetch("model.gguf").then((r) => {
      if (!r.ok) throw new Error(`model.gguf: HTTP ${r.status}`);
      return r.arrayBuffer();
    }),
  ]);
  loaded = { module, gguf: new Uint8Array(gguf) };
  return loaded;
}

onmessage = async (e) => {
  const { prompt, n, temp } = e.data;
  try {
    const { module, gguf } = await load();
    postMessage({ type: "status", text: "running ..." });
    const args = ["model", "model.gguf", "--prompt", prompt, "-n", String(n), "--temp", String(temp)];
    const decoders = { 1: new TextDecoder(), 2: new TextDecoder() };
    let stderr = "";
    const wasi = makeWasi(args, { "model.gguf": gguf }, (fd, bytes) => {
      const text = decoders[fd].decode(bytes, { stream: true });
      if (fd === 1) postMessage({ type: "out", text });
      else stderr += text;
    });
    const instance = await WebAssembly.instantiate(module, wasi.imports);
    const code = wasi.start(instance);
    postMessage({ type: "out", text: decoders[1].decode() });
    postMessage({ type: "done", code, stderr: stderr + decoders[2].decode() });
  } catch (err) {
    postMessage({ type: "done", code: -1, stderr: String(err && err.stack ? err.stack : err) });
  }
};
