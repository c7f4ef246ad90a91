#!/bin/sh
# bench-kvchunk-sim.sh - kvchunk sim on a 1,000,000-request generated trace
# (top-5 over 10,000 documents) under none, prefix, chunk and oracle: the
# target is under 30 s with memory bounded by the cache model (max RSS
# reported), also in the flow that copies every chunk (--max-chunks,
# --rotate always, --miss-copy, --warmup).  The peer is the replay a user
# would otherwise write: a plain Python prefix-block and chunk LRU over the
# same trace, timed in-process on the first 50,000 requests against kvtools
# on the same slice.
: "${KV_BIN:?}"
PATH="$KV_BIN:$PATH"
PY=${PY:-python3}
W=$(mktemp -d "${TMPDIR:-/tmp}/kvbench-sim.XXXXXX")
trap 'rm -rf "$W"' EXIT
REQ=${SIM_REQUESTS:-1000000}
CAP=2000000     # tokens: 2M x 128 KiB = 250 GiB of Llama-3.1-8B bf16 KV

best() {   # runs cmd... 3 times, prints the best wall time in seconds
    b=
    for i in 1 2 3; do
        s=$(date +%s.%N)
        "$@" >/dev/null 2>&1 || { echo fail; return; }
        e=$(date +%s.%N)
        b=$(echo "$s $e ${b:-1e9}" | awk '{ t = $2 - $1; print (t < $3) ? t : $3 }')
    done
    echo "$b"
}

kvchunk sim gen --seed 1 --requests "$REQ" --docs 10000 --topk 5 --zipf 1.0 -o "$W/trace.txt" || exit 1
t_gen=$(best kvchunk sim gen --seed 1 --requests "$REQ" --docs 10000 --topk 5 --zipf 1.0 -o "$W/trace2.txt")
printf '%-48s %10s %10s %8s  %s\n' case peer_s kvtools_s ratio target
printf '%-48s %10s %10.2f %8s  %s\n' "sim gen $REQ requests" - "$t_gen" - "-"

# the full replay: time and peak memory
t_sim=$(best kvchunk sim -q --capacity-tokens $CAP -p none,prefix,chunk,oracle "$W/trace.txt")
rss=-
if [ -x /usr/bin/time ]; then
    /usr/bin/time -v kvchunk sim -q --capacity-tokens $CAP -p none,prefix,chunk,oracle \
        "$W/trace.txt" >"$W/out.txt" 2>"$W/time.txt"
    rss=$(awk -F': ' '/Maximum resident set size/ { printf "%.1f MiB", $2 / 1024 }' "$W/time.txt")
else
    kvchunk sim -q --capacity-tokens $CAP "$W/trace.txt" >"$W/out.txt"
fi
printf '%-48s %10s %10.2f %8s  %s\n' "sim $REQ req, 4 policies (max RSS $rss)" - "$t_sim" - "< 30 s"
# the same in a flow that copies and rotates every chunk, hit or miss, at
# most 500 entries, the first tenth as warm-up, decode priced
t_flow=$(best kvchunk sim -q --capacity-tokens $CAP -p none,prefix,chunk,oracle \
    --max-chunks 500 --rotate always --miss-copy --warmup $((REQ / 10)) \
    --us-per-output-token 13384 "$W/trace.txt")
printf '%-48s %10s %10.2f %8s  %s\n' "sim $REQ req, the copy-always flow" - "$t_flow" - "< 30 s"
# memory must not grow with the trace: a tenth of it needs as much
head -n $((REQ / 10)) "$W/trace.txt" >"$W/tenth.txt"
if [ -x /usr/bin/time ]; then
    /usr/bin/time -v kvchunk sim -q --capacity-tokens $CAP "$W/tenth.txt" >/dev/null 2>"$W/time10.txt"
    rss10=$(awk -F': ' '/Maximum resident set size/ { printf "%.1f MiB", $2 / 1024 }' "$W/time10.txt")
    printf '%-48s %10s %10s %8s  %s\n' "max RSS at $((REQ / 10)) requests" - "$rss10" - "same as at $REQ"
fi
cat "$W/out.txt"

# the peer: plain Python on the first 50,000 requests
head -n 50000 "$W/trace.txt" >"$W/slice.txt"
t_kv=$(best kvchunk sim -q --capacity-tokens $CAP -p none,prefix,chunk,oracle "$W/slice.txt")
t_py=$("$PY" - "$W/slice.txt" $CAP <<'EOF'
import sys, time
from collections import OrderedDict
path, cap = sys.argv[1], int(sys.argv[2])
lines = open(path).read().split("\n")
B = 16
t0 = time.perf_counter()
blocks = OrderedDict()          # prefix: block hash -> None, LRU order
nblocks = cap // B
chunks = OrderedDict()          # chunk: key -> length, LRU order
used = 0
oracle = set()
hit = {"prefix": 0, "chunk": 0, "oracle": 0}
for r, line in enumerate(lines):
    if not line or line[0] == "#":
        continue
    f = line.split()
    segs = []
    sys_id = None
    if f[2] != "-":
        i, n = f[2].split(":")
        segs.append((i, int(n)))
        sys_id = i
    cl = [] if f[3] == "-" else [c.split(":") for c in f[3].split(",")]
    for i, n in cl:
        segs.append((i, int(n)))
    segs.append(("q%d" % r, int(f[4])))
    segs.append(("o%d" % r, int(f[5])))
    n_prompt = sum(n for _, n in segs[:-1])
    kv = n_prompt + max(int(f[5]) - 1, 0)
    # prefix: chained hashes over full blocks of (id, offset, take) runs
    hs, parent, si, off = [], None, 0, 0
    for b in range(kv // B):
        need, runs = B, []
        while need:
            while segs[si][1] - off == 0:
                si += 1; off = 0
            take = min(segs[si][1] - off, need)
            runs.append((segs[si][0], off, take))
            off += take; need -= take
        parent = hash((parent, tuple(runs)))
        hs.append(parent)
    h = 0
    for b in range((n_prompt - 1) // B):
        if hs[b] not in blocks:
            break
        h += 1
    hit["prefix"] += h * B
    for x in hs:
        if x in blocks:
            blocks.move_to_end(x)
        else:
            blocks[x] = None
            if len(blocks) > nblocks:
                blocks.popitem(last=False)
    # chunk (LRU by tokens) and oracle
    for i, n in ([(sys_id, segs[0][1])] if sys_id else []) + [(i, int(n)) for i, n in cl]:
        key = (sys_id, i)
        if key in chunks:
            chunks.move_to_end(key); hit["chunk"] += n
        else:
            chunks[key] = n; used += n
            while used > cap:
                _, m = chunks.popitem(last=False); used -= m
        if key in oracle:
            hit["oracle"] += n
        else:
            oracle.add(key)
print("%.3f" % (time.perf_counter() - t0))
EOF
)
ratio=$(echo "$t_py $t_kv" | awk '{ printf "%.1f", $1 / $2 }')
printf '%-48s %10s %10.2f %8s  %s\n' "sim 50000 req vs plain Python replay" "$t_py" "$t_kv" "${ratio}x" "faster than Python"
