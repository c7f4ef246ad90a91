"""kvtools.kvslot.hash against kvslot hash -f json on random prompt files
(token ids and JSON lines with salts and LoRA adapters, shared prefixes),
with every algorithm, --int and --cacheability: the records equal the
program's value for value, and the refusals are the program's."""
import json

import numpy as np

from kvtools import kvslot
from conftest import CASES, same_refusal

ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")


def prompt_lines(rng):
    """Lines of a prompt file, and the token lists of its plain lines
    (None where a line is JSON or empty)."""
    base = [int(x) for x in rng.integers(0, 50000, 40)]
    lines, toks = [], []
    for _ in range(int(rng.integers(0, 6))):
        n = int(rng.integers(0, 40))
        t = base[:n] if rng.random() < 0.75 else \
            [int(x) for x in rng.integers(0, 2**31, n)]
        r = rng.random()
        if r < 0.25:
            o = {"token_ids": t}
            if rng.random() < 0.5:
                o["cache_salt"] = "s%d" % int(rng.integers(0, 3))
            if rng.random() < 0.4:
                o["lora_name"] = "ad%d" % int(rng.integers(0, 2))
                o["lora_path"] = "/p/ad"
            lines.append(json.dumps(o))
            toks.append(None)
        elif r < 0.3:
            lines.append("")
            toks.append(None)
        else:
            lines.append(" ".join(map(str, t)))
            toks.append(t)
    return lines, toks


def case(rng, path):
    lines, toks = prompt_lines(rng)
    if rng.random() < 0.03:
        lines.append("1 2 x")                   # refused, naming the line
    with open(path, "w") as f:
        f.write("".join(ln + "\n" for ln in lines))
    kw, args = {}, ["hash", "-f", "json", path]
    algo = ALGOS[int(rng.integers(0, 4))]
    kw["algo"] = algo
    args.append("--algo=" + algo)
    if algo.startswith("xxhash") or rng.random() < 0.3:
        if rng.random() < 0.97:
            kw["hash_seed"] = str(int(rng.integers(0, 100)))
            args.append("--hash-seed=" + kw["hash_seed"])
    if rng.random() < 0.2:
        kw["salt"] = "salt"
        args.append("--salt=salt")
    if rng.random() < 0.2:
        kw["lora_name"], kw["lora_path"] = "a", "/l/a"
        args += ["--lora-name=a", "--lora-path=/l/a"]
    if rng.random() < 0.3:
        kw["cacheability"] = True
        args.append("--cacheability")
        if rng.random() < 0.6:
            kw["block_sizes"] = [int(x) for x in
                                 rng.integers(1, 20, int(rng.integers(1, 4)))]
            args.append("--block-sizes=" + ",".join(map(str,
                                                        kw["block_sizes"])))
    else:
        if rng.random() < 0.8:
            kw["block_size"] = int(rng.choice([1, 2, 3, 4, 16]))
            args.append("-B%d" % kw["block_size"])
        if rng.random() < 0.3:
            kw["int"] = True
            args.append("--int")
    # the prompts as a list where every line is plain token ids
    if rng.random() < 0.3 and all(t is not None for t in toks) and \
            len(toks) == len(lines):
        kw["prompts"] = toks
    else:
        kw["prompts"] = path
    return kw, args


def test_random_against_program(cli, tmp_path):
    rng = np.random.default_rng(777)
    cases = [case(rng, str(tmp_path / ("p%d.txt" % c)))
             for c in range(CASES)]
    results = cli.many([("kvslot",) + tuple(a) for _, a in cases])
    ok = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvslot " + " ".join(args)
        if status:
            assert out == b"", what
            same_refusal(lambda: kvslot.hash(**kw), status, err, what)
            continue
        ref = [json.loads(ln) for ln in out.decode().splitlines()]
        assert kvslot.hash(**kw) == ref, what
        ok += 1
    assert ok >= len(cases) // 2


def test_refusals(cli, tmp_path):
    path = str(tmp_path / "p.txt")
    with open(path, "w") as f:
        f.write("1 2 3\n{\"tokens\": [1]}\n")
    good = str(tmp_path / "g.txt")
    with open(good, "w") as f:
        f.write("1 2 3\n")
    cases = (
        ({"prompts": good, "block_size": 0}, ("-B0",)),
        ({"prompts": good, "algo": "md5"}, ("--algo=md5",)),
        ({"prompts": good, "algo": "xxhash"}, ("--algo=xxhash",)),
        ({"prompts": good, "lora_path": "/p"}, ("--lora-path=/p",)),
        ({"prompts": good, "block_sizes": [4]}, ("--block-sizes=4",)),
        ({"prompts": good, "cacheability": True, "int": True},
         ("--cacheability", "--int")),
        ({"prompts": good, "cacheability": True, "block_size": 4},
         ("--cacheability", "-B4")),
        ({"prompts": good, "cacheability": True, "block_sizes": "4,0"},
         ("--cacheability", "--block-sizes=4,0")),
        ({"prompts": good, "cacheability": True, "block_sizes": [2**24 + 1]},
         ("--cacheability", "--block-sizes=%d" % (2**24 + 1))),
        ({"prompts": path}, ()),
        ({"prompts": path + ".none"}, ()),
    )
    for kw, args in cases:
        p = kw["prompts"]
        status, out, err = cli("kvslot", "hash", "-f", "json", p, *args)
        assert status != 0 and out == b"", args
        same_refusal(lambda: kvslot.hash(**kw), status, err, " ".join(args))
