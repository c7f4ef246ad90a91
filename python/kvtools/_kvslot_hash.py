"""kvslot hash in-process: vLLM's prefix-caching block hashes of prompts
(libkv's kv_hash_blocks), or with cacheability=True the share of their
tokens an unbounded prefix cache serves (kv_hash_set_feed); the records
kvslot hash -f json prints, as a list of dicts."""
import builtins
import os

import numpy as np

from ._core import ffi, lib, new_err, err_text, usage, fail, int_opt, _text

PROG = "kvslot hash"
DEFAULT_SIZES = (16, 32, 64, 128, 256, 512)


def _cstr(keep, s):
    if s is None:
        return ffi.NULL
    b = ffi.new("char[]", os.fsencode(s) if not isinstance(s, str)
                else s.encode())
    keep.append(b)
    return b


def _lines(prompts):
    """(name, [line bytes]) of the input: a file read as the program reads
    it (one prompt a line, '\\n' or '\\r\\n'), or a list whose items are
    lines (str: token ids or a JSON object) or token ids."""
    if isinstance(prompts, (str, bytes, os.PathLike)):
        path = os.fsdecode(prompts)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as ex:
            fail(PROG, "cannot open '%s': %s" % (path, os.strerror(ex.errno)))
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        return path, [ln.rstrip(b"\r\n") for ln in lines]
    out = []
    for p in prompts:
        if isinstance(p, str):
            out.append(p.encode())
        elif isinstance(p, bytes):
            out.append(p)
        else:
            out.append(" ".join(str(builtins.int(x)) for x in
                                np.asarray(p).reshape(-1)).encode())
    return "<prompts>", out


def _read(name, lines, keep):
    """kv_hash_prompt structs of every line (the caller releases them)."""
    ps = []
    e = new_err()
    for no, ln in enumerate(lines, 1):
        p = ffi.new("struct kv_hash_prompt *")
        ps.append(p)
        if lib.kv_hash_prompt_parse(p, ln, len(ln), e) < 0:
            fail(PROG, "'%s' line %d: %s" % (name, no, err_text(e)))
    return ps


def _block_hashes(h, p, B, hl, name, i):
    nb = p.n // B
    buf = ffi.new("uint8_t[]", max(nb, 1) * hl)
    e = new_err()
    if lib.kv_hash_blocks(h, p.tok, p.n, p.salt, p.lora_name, p.lora_path,
                          buf, e) < 0:
        fail(PROG, "'%s' line %d: %s" % (name, i + 1, err_text(e)))
    return nb, buf


def hash(prompts, block_size=None, algo="sha256", hash_seed=None, salt=None,
         lora_name=None, lora_path=None, int=False, cacheability=False,
         block_sizes=None):
    """kvslot hash -f json [FILE]: prompts is a file (one prompt a line:
    token ids, or JSON lines with token_ids and cache_salt, lora_name,
    lora_path) or a list of such lines or of token-id lists.  Returns one
    dict a prompt (prompt, tokens, block_size, algo, hashes: hex strings,
    or with int=True the 64-bit integers of --int); with
    cacheability=True one dict a block size (block_size, prompts, tokens,
    hit_tokens, share as the program prints it, six decimals)."""
    B = 16 if block_size is None else \
        int_opt(PROG, "--block-size", block_size, 1, 1 << 24)
    o = ffi.new("struct kv_hash_opts *")
    o.block_size = B
    e = new_err()
    keep = []
    if algo is not None:
        a = ffi.new("int *")
        if lib.kv_hash_algo_parse(_text(algo).encode(), a, e) < 0:
            usage(PROG, "--algo: " + err_text(e))
        o.algo = a[0]
    o.seed = _cstr(keep, hash_seed if hash_seed is None else _text(hash_seed))
    o.cache_salt = _cstr(keep, salt if salt is None else _text(salt))
    o.lora_name = _cstr(keep, lora_name if lora_name is None
                        else _text(lora_name))
    o.lora_path = _cstr(keep, lora_path)
    if lora_path is not None and lora_name is None:
        usage(PROG, "--lora-path without --lora-name")
    if block_sizes is not None and not cacheability:
        usage(PROG, "--block-sizes goes with --cacheability")
    if cacheability and (int or block_size is not None):
        usage(PROG, "--cacheability takes --block-sizes, not %s"
              % ("--int" if int else "--block-size"))
    sizes = DEFAULT_SIZES
    if cacheability and block_sizes is not None:
        from ._kvslot_step import req_list
        sizes = [builtins.int(x) for x in
                 req_list(PROG, "--block-sizes", block_sizes, 1)]
        for s in sizes:
            if s > 1 << 24:
                usage(PROG, "--block-sizes: %d is above 2^24" % s)
    h = ffi.new("struct kv_hash **")
    if lib.kv_hash_create(h, o, e) < 0:
        usage(PROG, err_text(e))
    lib.kv_hash_free(h[0])
    name, lines = _lines(prompts)
    ps = _read(name, lines, keep)
    try:
        if cacheability:
            return _cacheability(o, ps, sizes, name)
        return _hashes(o, ps, name, int)
    finally:
        for p in ps:
            lib.kv_hash_prompt_release(p)


def _hashes(o, ps, name, as_int):
    e = new_err()
    hp = ffi.new("struct kv_hash **")
    if lib.kv_hash_create(hp, o, e) < 0:
        usage(PROG, err_text(e))
    h = hp[0]
    hl = lib.kv_hash_len(o.algo)
    algo = ffi.string(lib.kv_hash_algo_name(o.algo)).decode()
    out = []
    try:
        for i, p in enumerate(ps):
            nb, buf = _block_hashes(h, p, o.block_size, hl, name, i)
            raw = bytes(ffi.buffer(buf, nb * hl))
            blocks = [raw[b * hl:(b + 1) * hl] for b in range(nb)]
            hashes = [builtins.int.from_bytes(x[-8:], "big") for x in blocks] \
                if as_int else [x.hex() for x in blocks]
            out.append({"prompt": i, "tokens": p.n,
                        "block_size": o.block_size, "algo": algo,
                        "hashes": hashes})
    finally:
        lib.kv_hash_free(h)
    return out


def _cacheability(o, ps, sizes, name):
    e = new_err()
    hl = lib.kv_hash_len(o.algo)
    out = []
    for B in sizes:
        o.block_size = B
        hp = ffi.new("struct kv_hash **")
        sp = ffi.new("struct kv_hash_set **")
        if lib.kv_hash_create(hp, o, e) < 0:
            usage(PROG, err_text(e))
        if lib.kv_hash_set_create(sp, e) < 0:
            lib.kv_hash_free(hp[0])
            usage(PROG, err_text(e))
        tokens = hits = 0
        hit = ffi.new("int64_t *")
        try:
            for i, p in enumerate(ps):
                nb, buf = _block_hashes(hp[0], p, B, hl, name, i)
                if lib.kv_hash_set_feed(sp[0], buf, hl, p.n, B, hit, e) < 0:
                    fail(PROG, "'%s' line %d: %s" % (name, i + 1,
                                                     err_text(e)))
                tokens += p.n
                hits += hit[0]
        finally:
            lib.kv_hash_set_free(sp[0])
            lib.kv_hash_free(hp[0])
        share = hits / tokens if tokens else 0.0
        out.append({"block_size": B, "prompts": len(ps), "tokens": tokens,
                    "hit_tokens": hits, "share": float("%.6f" % share)})
    return out
