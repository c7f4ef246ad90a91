#!/usr/bin/env python3
"""apc_ref.py - an independent transcription of the rules kvslot plan
--enable-prefix-caching follows (vLLM v1's scheduler, KV cache manager and
block pool; kvslot(1), "The plan", "Prefix caching" and "The vLLM release
the plan follows": admission by the whole prompt or the chunk, the
synchronous or the asynchronous engine), for
tests/cli/kvslot-apc-ref.sh.

    apc_ref.py gen SEED DIR   write DIR/prompts.txt and DIR/args (kvslot's
                              options for the trace)
    apc_ref.py check DIR OUT  replay DIR's trace here and compare with OUT,
                              kvslot plan's text output; exit 1 on the first
                              difference, printed
    apc_ref.py gen-all N DIR  traces 1..N in DIR/t1 .. DIR/tN
    apc_ref.py check-all N DIR  check DIR/tK against DIR/tK/out.txt; prints
                              how many differ and the first difference

Blocks are matched by their exact content chain (a tuple of every token up
to the block's end, plus the extra keys), not by a hash, so a hash
collision in kvslot would show here as a difference.
"""
import random
import sys


def gen(seed, d):
    r = random.Random(seed)
    pre = [[r.randrange(6) for _ in range(r.randrange(25))] for _ in range(3)]
    n = r.randrange(2, 10)
    prompts = []
    for _ in range(n):
        p = pre[r.randrange(3)] + [r.randrange(8) for _ in range(r.randrange(1, 17))]
        prompts.append(p)
    bs = 1 << r.randrange(4)
    out = [r.randrange(1, 7) for _ in range(n)]
    arr = [r.randrange(1, 5) for _ in range(n)]
    need = max((len(p) + o - 1 + bs - 1) // bs for p, o in zip(prompts, out))
    args = ["-B", str(bs), "--max-model-len", "64",
            "--max-tokens", str(r.randrange(4, 49)),
            "--max-num-seqs", str(r.randrange(1, 9)),
            "--num-blocks", str(need + 1 + r.randrange(25)),
            "--output-lens", ",".join(map(str, out)),
            "--arrivals", ",".join(map(str, arr))]
    if seed % 2:
        args.append("--no-reserve-full-isl")   # admission by this step's chunk
    if seed % 3 == 0:
        args.append("--async-scheduling")
    with open(d + "/prompts.txt", "w") as f:
        for p in prompts:
            f.write(" ".join(map(str, p)) + "\n")
    with open(d + "/args", "w") as f:
        f.write(" ".join(args) + "\n")


class Req:
    def __init__(self, i, prompt, out_max, arrival):
        self.i, self.prompt, self.out_max, self.arrival = i, prompt, out_max, arrival
        self.n_out = self.computed = self.sched = 0
        self.blocks, self.n_cached_blocks = [], 0
        self.num_cached, self.state = -1, "waiting"
        self.ph = self.inflight = self.stale = 0
        self.ending = False

    def ntok(self):
        return len(self.prompt) + self.n_out

    def tok(self, j):
        return self.prompt[j] if j < len(self.prompt) else ("out", self.i, j)

    def key(self, k, bs):
        """The content chain of block k: every token up to its end."""
        return tuple(self.tok(j) for j in range((k + 1) * bs))


def replay(d):
    args = open(d + "/args").read().split()
    # by default a waiting request is admitted only if its whole sequence,
    # min(tokens, max model len), fits the free blocks
    full_isl = "--no-reserve-full-isl" not in args
    # asynchronous scheduling: step k+1 is scheduled before step k's output
    # is processed (computed tokens advance at scheduling, placeholders)
    asyn = "--async-scheduling" in args
    args = [a for a in args if a not in ("--no-reserve-full-isl", "--async-scheduling")]
    opt = dict(zip(args[0::2], args[1::2]))
    bs, mml = int(opt["-B"]), int(opt["--max-model-len"])
    budget0, max_seqs = int(opt["--max-tokens"]), int(opt["--max-num-seqs"])
    nblocks = int(opt["--num-blocks"])
    outs = list(map(int, opt["--output-lens"].split(",")))
    arrs = list(map(int, opt["--arrivals"].split(",")))
    prompts = [list(map(int, l.split())) for l in open(d + "/prompts.txt")]
    reqs = [Req(i, p, outs[i], arrs[i]) for i, p in enumerate(prompts)]
    free = list(range(1, nblocks))          # the free queue, head first
    ref = [0] * nblocks
    cached = {}                             # content key -> blocks, oldest first
    bkey = {}                               # block -> its content key
    waiting = sorted(range(len(reqs)), key=lambda i: (reqs[i].arrival, i))
    running, steps, step = [], [], 0

    def pop_free():
        b = free.pop(0)
        if b in bkey:
            cached[bkey[b]].remove(b)
            del bkey[b]
        ref[b] = 1
        return b

    def allocate(r, tokens):
        need = -(-tokens // bs) - len(r.blocks)
        if need > len(free):
            return False
        for _ in range(max(need, 0)):
            r.blocks.append(pop_free())
        return True

    def free_blocks(r):
        for b in reversed(r.blocks):
            ref[b] -= 1
            if ref[b] == 0:
                free.append(b)
        r.blocks, r.n_cached_blocks = [], 0

    def cache_full(r, upto=None):
        if upto is None:
            upto = r.computed + r.sched
        upto = min(upto, r.ntok())
        while r.n_cached_blocks < upto // bs:
            b = r.blocks[r.n_cached_blocks]
            if b not in bkey:
                k = r.key(r.n_cached_blocks, bs)
                bkey[b] = k
                cached.setdefault(k, []).append(b)
            r.n_cached_blocks += 1

    def finish(r):
        if r.state == "preempted":
            waiting.remove(r.i)
        r.state = "finished"
        free_blocks(r)

    def update(entries):
        nonlocal running
        for i, n, samples in entries:
            r = reqs[i]
            r.inflight -= n
            stale = r.stale > 0
            if stale:
                r.stale -= n
            if r.state == "finished" or not samples:
                continue
            r.n_out += 1
            if not stale and r.ph > 0:
                r.ph -= 1
                if r.state == "running":
                    cache_full(r, r.computed - r.inflight)
            if r.ntok() >= mml or r.n_out >= r.out_max:
                finish(r)
        running = [i for i in running if reqs[i].state != "finished"]

    pending = None
    while (not all(r.ending for r in reqs)) if asyn else \
            any(r.state != "finished" for r in reqs):
        # no step runs with nothing to schedule: on to the next arrival
        if not running and pending is None and waiting and \
                reqs[waiting[0]].arrival > step + 1:
            step = reqs[waiting[0]].arrival - 1
        step += 1
        budget, order, blocked, preempted, finished = budget0, [], [], [], []
        k = 0
        while k < len(running) and budget > 0:
            r = reqs[running[k]]
            # (asynchronous) its last token is in flight: not scheduled
            if r.ph > 0 and r.computed + 2 - r.ph >= len(r.prompt) + r.out_max:
                k += 1
                continue
            want = min(r.ntok() + r.ph - r.computed, budget, mml - r.computed - 1)
            if want <= 0:
                k += 1
                continue
            ok = True
            while not allocate(r, r.computed + want):
                v = reqs[running.pop()]
                free_blocks(v)
                v.computed, v.state = 0, "preempted"
                v.stale, v.ph = v.inflight, 0
                waiting.insert(0, v.i)
                preempted.append(v.i)
                if v is r:
                    ok = False
                    break
            if not ok:
                blocked.append(r.i)
                break
            r.sched = want
            cache_full(r)
            order.append(r.i)
            budget -= want
            k += 1
        while not preempted and waiting and budget > 0:
            if len(running) >= max_seqs:
                break
            r = reqs[waiting[0]]
            if r.arrival > step:
                break
            nh = 0
            if r.computed == 0:
                hits = []
                for kk in range((r.ntok() - 1) // bs):
                    c = cached.get(r.key(kk, bs))
                    if not c:
                        break
                    hits.append(c[0])
                nh = len(hits)
                evictable = sum(1 for b in hits if ref[b] == 0)
                want = min(r.ntok() - nh * bs, budget)
                whole = -(-min(r.ntok(), mml) // bs) - nh
                if full_isl and whole > len(free) - evictable:
                    blocked.append(r.i)
                    break
                if -(-(nh * bs + want) // bs) - nh > len(free) - evictable:
                    blocked.append(r.i)
                    break
                for b in hits:
                    if ref[b] == 0:
                        free.remove(b)
                    ref[b] += 1
                    r.blocks.append(b)
                r.computed, r.n_cached_blocks = nh * bs, nh
            want = min(r.ntok() - r.computed, budget)
            if not allocate(r, r.computed + want):
                blocked.append(r.i)
                break
            waiting.pop(0)
            if r.num_cached < 0:
                r.num_cached = nh * bs
            r.state, r.sched = "running", want
            cache_full(r)
            running.append(r.i)
            order.append(r.i)
            budget -= want
        rows = {}
        for i in order:
            r = reqs[i]
            rows[i] = (r.sched, r.computed, r.num_cached, tuple(r.blocks))
        wait_out = [i for i in waiting if reqs[i].arrival <= step]
        free_n = len(free)
        if asyn:
            if not order and pending is None:
                raise SystemExit("apc_ref: nothing can be scheduled")
            if pending:
                update(pending)
            pending = []
            for i in order:
                r = reqs[i]
                r.computed += r.sched
                r.inflight += r.sched
                samples = r.computed >= r.ntok() + r.ph
                pending.append((i, r.sched, samples))
                r.sched = 0
                if samples:
                    r.ph += 1
                    if not r.ending and (r.ntok() + r.ph >= mml or
                                         r.n_out + r.ph >= r.out_max):
                        r.ending = True
                        finished.append(i)
            pending = pending or None
            steps.append((rows, wait_out, blocked, preempted, finished, free_n))
            if step > 10000:
                raise SystemExit("apc_ref: no end")
            continue
        for i in order:
            r = reqs[i]
            r.computed += r.sched
            r.sched = 0
            if r.computed < r.ntok():
                continue
            r.n_out += 1
            if r.ntok() >= mml or r.n_out >= r.out_max:
                r.state = "finished"
                free_blocks(r)
                finished.append(i)
        running = [i for i in running if reqs[i].state != "finished"]
        steps.append((rows, wait_out, blocked, preempted, finished, free_n))
        if step > 10000:
            raise SystemExit("apc_ref: no end")
    return steps


def parse(path):
    steps, cur = [], None
    for line in open(path):
        name, _, val = line.rstrip("\n").partition(":")
        v = [int(x) for x in val.split()]
        if name == "step":
            cur = {"block_table": []}
            steps.append(cur)
        elif name == "block_table":
            cur["block_table"].append(v)
        else:
            cur[name] = v
    out = []
    for s in steps:
        rows = {}
        for k, i in enumerate(s["req_ids"]):
            blocks = tuple(b for b in s["block_table"][k] if b)
            rows[i] = (s["num_scheduled_tokens"][k], s["num_computed_tokens"][k],
                       s["num_cached_tokens"][k], blocks)
        out.append((rows, s["waiting"], s["blocked"], s["preempted"],
                    s["finished"], s["free_blocks"][0]))
    return out


def check(d, path):
    want, got = replay(d), parse(path)
    names = ("rows", "waiting", "blocked", "preempted", "finished", "free_blocks")
    for n, (w, g) in enumerate(zip(want, got), 1):
        for name, a, b in zip(names, w, g):
            if (sorted(a) if name == "finished" else a) != (sorted(b) if name == "finished" else b):
                print("step %d %s: reference %r, kvslot %r" % (n, name, a, b))
                return 1
    if len(want) != len(got):
        print("steps: reference %d, kvslot %d" % (len(want), len(got)))
        return 1
    return 0


def check_all(n, d):
    import io
    import contextlib
    bad, first = 0, ""
    for k in range(1, n + 1):
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                rc = check("%s/t%d" % (d, k), "%s/t%d/out.txt" % (d, k))
        except (OSError, KeyError, IndexError, ValueError) as e:
            rc, buf = 1, io.StringIO(str(e))
        if rc:
            bad += 1
            first = first or "trace %d: %s" % (k, buf.getvalue().strip())
    print("%d %s" % (bad, first))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "gen-all":
        import os
        for k in range(1, int(sys.argv[2]) + 1):
            os.makedirs("%s/t%d" % (sys.argv[3], k), exist_ok=True)
            gen(k, "%s/t%d" % (sys.argv[3], k))
    elif len(sys.argv) == 4 and sys.argv[1] == "check-all":
        sys.exit(check_all(int(sys.argv[2]), sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "gen":
        gen(int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
