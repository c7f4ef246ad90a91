#!/usr/bin/env python3
"""mooncake_ref.py - an independent count of what an unbounded prefix cache
serves on a Mooncake-format trace (kvchunk(1), "Mooncake traces"), for
tests/cli/kvchunk-mooncake.sh.  Standard library only.

    mooncake_ref.py gen SEED N OUT    write a random trace of N requests
                                      (512-token blocks, shared prefixes,
                                      repeated prompts, bursts of equal
                                      timestamps)
    mooncake_ref.py prefix B FILE     "HIT PROMPT": tokens vLLM's prefix
                                      caching at block size B would hit
                                      with room for every block, and all
                                      prompt tokens
    mooncake_ref.py radix FILE        "HIT PROMPT" for a token-granular
                                      radix tree with room for everything

The trace's blocks are TB = 512 tokens.  Token t of a prompt is named by
the tuple of hash_ids up to its block and its offset in that block, so a
prefix of m tokens is (ids[:ceil(m / TB)], m).  Only prompts are cached
(the trace names no block of an output).  A hit never covers the last
prompt token: at most floor((n - 1) / B) blocks of B.
"""
import json
import random
import sys

TB = 512


def gen(seed, n, out):
    r = random.Random(seed)
    prompts = []          # (ids, input_length) seen so far
    next_id = 0
    t = 0
    with open(out, "w") as f:
        for _ in range(n):
            if r.random() < 0.3:
                t += r.choice([0, 0, 1, 7, 250])
            else:
                t += r.randrange(0, 3000)
            if prompts and r.random() < 0.1:
                ids, length = r.choice(prompts)          # the same prompt
            else:
                ids = []
                if prompts and r.random() < 0.75:
                    pids, plen = r.choice(prompts)
                    full = plen // TB
                    ids = list(pids[:r.randrange(0, full + 1)])
                length = len(ids) * TB + r.randrange(1, 6 * TB)
                while len(ids) < (length + TB - 1) // TB:
                    ids.append(next_id)
                    next_id += 1
                prompts.append((ids, length))
            rec = {"timestamp": t, "input_length": length,
                   "output_length": r.randrange(0, 700), "hash_ids": ids}
            f.write(json.dumps(rec) + "\n")


def requests(path):
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                yield r["hash_ids"], r["input_length"]


def prefix_key(ids, m):
    return (tuple(ids[:(m - 1) // TB + 1]), m)


def prefix(B, path):
    cached = set()
    hit = total = 0
    for ids, n in requests(path):
        total += n
        k = 0
        while k < (n - 1) // B and prefix_key(ids, (k + 1) * B) in cached:
            k += 1
        hit += k * B
        for j in range(1, n // B + 1):
            cached.add(prefix_key(ids, j * B))
    print(hit, total)


def radix(path):
    longest = {}          # ids[:c] -> the longest prompt through it
    hit = total = 0
    for ids, n in requests(path):
        total += n
        best = 0
        for c in range(1, len(ids) + 1):
            m = longest.get(tuple(ids[:c]))
            if m is None:
                break
            best = max(best, min(c * TB, n, m))
        hit += min(best, n - 1)
        for c in range(1, len(ids) + 1):
            key = tuple(ids[:c])
            longest[key] = max(longest.get(key, 0), n)
    print(hit, total)


def main(argv):
    if len(argv) == 5 and argv[1] == "gen":
        gen(int(argv[2]), int(argv[3]), argv[4])
    elif len(argv) == 4 and argv[1] == "prefix":
        prefix(int(argv[2]), argv[3])
    elif len(argv) == 3 and argv[1] == "radix":
        radix(argv[2])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
