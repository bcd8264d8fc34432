// wasi.js — the part of WASI (wasi_snapshot_preview1) that a ckc --standalone model.c built for wasm32-wasi
// calls, for a browser: arguments, a clock, stdout/stderr to callbacks, and a read-only folder "/" of files held
// in memory (the GGUF the page fetched). Every import the program has is here; anything else is ENOSYS.
"use strict";

const ERRNO = { SUCCESS: 0, BADF: 8, INVAL: 28, NOENT: 44, NOSYS: 52, NOTDIR: 54, SPIPE: 70, NOTCAPABLE: 76 };
const FILETYPE = { CHARACTER_DEVICE: 2, DIRECTORY: 3, REGULAR_FILE: 4 };
const ALL_RIGHTS = 0xffffffffffffffffn;

class WasiExit extends Error {
  constructor(code) {
    super(`exit ${code}`);
    this.code = code;
  }
}

// files: {name: Uint8Array}; out(fd, bytes) receives what the program writes to stdout (1) and stderr (2).
function makeWasi(args, files, out) {
  let memory = null;
  const fds = new Map(); // fd -> {kind: "stdio" | "dir" | "file", data, pos}
  fds.set(0, { kind: "stdio" });
  fds.set(1, { kind: "stdio" });
  fds.set(2, { kind: "stdio" });
  fds.set(3, { kind: "dir", name: "/" }); // the one preopened folder
  let nextFd = 4;
  const enc = new TextEncoder(), dec = new TextDecoder();
  const argBytes = args.map((a) => enc.encode(a + "\0"));

  const view = () => new DataView(memory.buffer);
  const bytes = () => new Uint8Array(memory.buffer);
  const str = (ptr, len) => dec.decode(bytes().subarray(ptr, ptr + len));
  const lookup = (path) => {
    const name = path.replace(/^(\.\/|\/)+/, "");
    if (name === "" || name === ".") return { kind: "dir", name: "/" };
    return Object.prototype.hasOwnProperty.call(files, name) ? { kind: "file", data: files[name], pos: 0 } : null;
  };
  const writeStat = (buf, f) => {
    const v = view();
    for (let i = 0; i < 64; i += 8) v.setBigUint64(buf + i, 0n, true);
    v.setUint8(buf + 16, f.kind === "dir" ? FILETYPE.DIRECTORY : f.kind === "file" ? FILETYPE.REGULAR_FILE
                                                                                : FILETYPE.CHARACTER_DEVICE);
    v.setBigUint64(buf + 24, 1n, true);
    v.setBigUint64(buf + 32, BigInt(f.kind === "file" ? f.data.length : 0), true);
  };
  const iovecs = (iovs, n) => {
    const v = view(), list = [];
    for (let i = 0; i < n; i++) list.push([v.getUint32(iovs + 8 * i, true), v.getUint32(iovs + 8 * i + 4, true)]);
    return list;
  };

  const imports = {
    args_sizes_get(argc, size) {
      view().setUint32(argc, args.length, true);
      view().setUint32(size, argBytes.reduce((s, b) => s + b.length, 0), true);
      return ERRNO.SUCCESS;
    },
    args_get(argv, buf) {
      let at = buf;
      argBytes.forEach((b, i) => {
        view().setUint32(argv + 4 * i, at, true);
        bytes().set(b, at);
        at += b.length;
      });
      return ERRNO.SUCCESS;
    },
    environ_sizes_get(count, size) {
      view().setUint32(count, 0, true);
      view().setUint32(size, 0, true);
      return ERRNO.SUCCESS;
    },
    environ_get() { return ERRNO.SUCCESS; },
    clock_time_get(id, precision, time) {
      const ns = id === 0 ? BigInt(Date.now()) * 1000000n : BigInt(Math.round(performance.now() * 1e6));
      view().setBigUint64(time, ns, true);
      return ERRNO.SUCCESS;
    },
    fd_prestat_get(fd, buf) {
      const f = fds.get(fd);
      if (fd !== 3 || !f) return ERRNO.BADF;
      view().setUint8(buf, 0);
      view().setUint32(buf + 4, enc.encode(f.name).length, true);
      return ERRNO.SUCCESS;
    },
    fd_prestat_dir_name(fd, path, len) {
      if (fd !== 3) return ERRNO.BADF;
      bytes().set(enc.encode("/").subarray(0, len), path);
      return ERRNO.SUCCESS;
    },
    fd_fdstat_get(fd, buf) {
      const f = fds.get(fd);
      if (!f) return ERRNO.BADF;
      const v = view();
      v.setUint8(buf, f.kind === "dir" ? FILETYPE.DIRECTORY : f.kind === "file" ? FILETYPE.REGULAR_FILE
                                                                              : FILETYPE.CHARACTER_DEVICE);
      v.setUint16(buf + 2, 0, true);
      v.setBigUint64(buf + 8, ALL_RIGHTS, true);
      v.setBigUint64(buf + 16, ALL_RIGHTS, true);
      return ERRNO.SUCCESS;
    },
    fd_fdstat_set_flags(fd) { return fds.has(fd) ? ERRNO.SUCCESS : ERRNO.BADF; },
    fd_filestat_get(fd, buf) {
      const f = fds.get(fd);
      if (!f) return ERRNO.BADF;
      writeStat(buf, f);
      return ERRNO.SUCCESS;
    },
    path_filestat_get(fd, flags, path, len, buf) {
      if (!fds.has(fd) || fds.get(fd).kind !== "dir") return ERRNO.NOTDIR;
      const f = lookup(str(path, len));
      if (!f) return ERRNO.NOENT;
      writeStat(buf, f);
      return ERRNO.SUCCESS;
    },
    path_open(fd, dirflags, path, len, oflags, rightsBase, rightsInheriting, fdflags, opened) {
      if (!fds.has(fd) || fds.get(fd).kind !== "dir") return ERRNO.NOTDIR;
      if (oflags & (1 | 4 | 8)) return ERRNO.NOTCAPABLE; // O_CREAT, O_EXCL, O_TRUNC: the folder is read-only
      const f = lookup(str(path, len));
      if (!f) return ERRNO.NOENT;
      if ((oflags & 2) && f.kind !== "dir") return ERRNO.NOTDIR; // O_DIRECTORY
      fds.set(nextFd, f);
      view().setUint32(opened, nextFd++, true);
      return ERRNO.SUCCESS;
    },
    fd_close(fd) { return fds.delete(fd) ? ERRNO.SUCCESS : ERRNO.BADF; },
    fd_seek(fd, offset, whence, result) {
      const f = fds.get(fd);
      if (!f) return ERRNO.BADF;
      if (f.kind !== "file") return ERRNO.SPIPE;
      const base = whence === 0 ? 0 : whence === 1 ? f.pos : whence === 2 ? f.data.length : -1;
      const pos = base + Number(offset);
      if (base < 0 || pos < 0) return ERRNO.INVAL;
      f.pos = pos;
      view().setBigUint64(result, BigInt(pos), true);
      return ERRNO.SUCCESS;
    },
    fd_read(fd, iovs, n, nread) {
      const f = fds.get(fd);
      if (!f) return ERRNO.BADF;
      let total = 0;
      if (f.kind === "file") {
        for (const [ptr, len] of iovecs(iovs, n)) {
          const chunk = f.data.subarray(f.pos, Math.min(f.pos + len, f.data.length));
          bytes().set(chunk, ptr);
          f.pos += chunk.length;
          total += chunk.length;
          if (chunk.length < len) break;
        }
      } // stdin: end of file
      view().setUint32(nread, total, true);
      return ERRNO.SUCCESS;
    },
    fd_write(fd, iovs, n, nwritten) {
      if (fd !== 1 && fd !== 2) return ERRNO.BADF;
      let total = 0;
      for (const [ptr, len] of iovecs(iovs, n)) {
        out(fd, bytes().slice(ptr, ptr + len));
        total += len;
      }
      view().setUint32(nwritten, total, true);
      return ERRNO.SUCCESS;
    },
    proc_exit(code) { throw new WasiExit(code); },
  };
  const proxy = new Proxy(imports, {
    get: (target, name) => target[name] || (() => ERRNO.NOSYS),
  });
  return {
    imports: { wasi_snapshot_preview1: proxy },
    // Runs the program's _start; returns its exit code.
    start(instance) {
      memory = instance.exports.memory;
      try {
        instance.exports._start();
        return 0;
      } catch (e) {
        if (e instanceof WasiExit) return e.code;
        throw e;
      }
    },
  };
}

if (typeof self !== "undefined") self.makeWasi = makeWasi;
if (typeof module !== "undefined") module.exports = { makeWasi };
