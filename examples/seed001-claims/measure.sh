#!/bin/sh
# measure.sh - the cost table of the machine it runs on (costs-machine.txt):
# kvtools' own prefill attention and chunk move, timed, turned into the
# per-token figures `kvchunk sim` takes, for the model of MODEL (a config.json).
#
#   compute  `kvattn run --causal` over one layer of the model's heads
#            (Hq query, Hkv KV heads, D) at S tokens: its FLOP rate
#            (4 * Hq * D flops per query-key pair) prices the whole model:
#            us per token = 2 * (non-embedding parameters) / rate,
#            us per pair  = 4 * Hq * D * layers / rate
#   copy     `kvchunk get` of a 4096-token chunk from a warm dir: store at
#            the position it was stored at (a copy: checksum, read, write)
#   rotate   the same at another position (K re-rotated): the extra time
#            prices the rotation of K, half of the bytes
#   decode   reads every weight once per output token (batch 1): weight
#            bytes / the copy bandwidth
#
# Best of REPS runs of each; a loaded machine gives slower, noisier figures
# (the load average is written down with them).  Usage:
#   sh measure.sh KV_BIN >costs-machine.txt
set -eu
BIN=${1:?usage: measure.sh KV_BIN}
PATH="$BIN:$PATH"
REPS=${REPS:-3}
S=${S:-2048}
# Llama-3.1-8B: 32 layers, 32 query heads, 8 KV heads, head dim 128, hidden
# 4096, MLP 14336: per layer q,o 4096^2 each, k,v 4096*1024 each, MLP
# 3 * 4096 * 14336 -> 218,103,808 parameters, 32 layers 6,979,321,856; with
# the embedding and the output matrix (128256 * 4096 each) 8,030,261,248,
# 2 bytes each
L=32 HQ=32 HKV=8 D=128
P_LAYERS=6979321856
P_ALL=8030261248
W=$(mktemp -d "${TMPDIR:-/tmp}/kvmeasure.XXXXXX")
trap 'rm -rf "$W"' EXIT
now() { date +%s.%N; }
best() {  # best of REPS wall times of "$@" (seconds)
    _b=
    for _i in $(seq "$REPS"); do
        _t0=$(now); "$@" >/dev/null 2>&1; _t1=$(now)
        _b=$(awk -v a="$_t0" -v b="$_t1" -v m="${_b:-1e9}" 'BEGIN { d = b - a; print (d < m) ? d : m }')
    done
    echo "$_b"
}

# compute: the attention's own timer (reading the inputs excluded)
kvattn gen --shape 1,$HQ,$S,$D --kv-heads $HKV --dtype bf16 --seed 1 \
    -q "$W/q.npy" -k "$W/k.npy" -v "$W/v.npy"
att=1e9
for _i in $(seq "$REPS"); do
    t=$(kvattn run -q "$W/q.npy" -k "$W/k.npy" -v "$W/v.npy" --causal \
        -o "$W/o.npy" --verbose --quiet 2>&1 | sed -n 's/.*attention \([0-9.]*\) s.*/\1/p')
    att=$(awk -v a="$t" -v m="$att" 'BEGIN { print (a < m) ? a : m }')
done

# copy and rotate: one 4096-token chunk of 8 layers, 8 KV heads, 128, bf16
# (32 KiB a token, 128 MiB)
T=4096
seq 1 $T >"$W/tok.txt"
kvchunk toy --shape 8,8,128 --dtype bf16 --tokens "$W/tok.txt" --pos 0 -o "$W/kv.npy" --quiet
kvchunk put --store "dir:$W/st" --tokens "$W/tok.txt" --kv "$W/kv.npy" --base-pos 0 >/dev/null
G="kvchunk get --store dir:$W/st --shape 8,8,128 --tokens $W/tok.txt --force -o $W/out.npy"
$G --at 0 --quiet
copy=$(best $G --at 0 --quiet)
move=$(best $G --at 1000 --quiet)

awk -v att="$att" -v S=$S -v HQ=$HQ -v D=$D -v L=$L -v pl=$P_LAYERS -v pa=$P_ALL \
    -v copy="$copy" -v move="$move" -v T=$T -v load="$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')" '
BEGIN {
    pairs = HQ * S * (S + 1) / 2                 # one layer, causal
    rate = pairs * 4 * D / att                   # flop/s
    bytes = T * 8 * 2 * 8 * 128 * 2              # the chunk: 128 MiB
    bw = bytes / copy / 1e9                      # GB/s, copy
    rot = move - copy; if (rot <= 0) rot = copy * 0.01
    bw_rope = bytes / 2 / rot / 1e9
    printf "# this machine: kvtools on the CPU (measure.sh, load average %s)\n", load
    printf "# kvattn causal prefill, 1 layer x %d heads x %d tokens: %.3f s, %.1f GFLOP/s\n", HQ, S, att, rate / 1e9
    printf "# kvchunk get of 4096 tokens (128 MiB): copy %.4f s (%.2f GB/s), moved %.4f s\n", copy, bw, move
    printf "# Llama-3.1-8B priced at that rate: %.0f us a token, %.6f us a pair;\n", 2 * pl / rate * 1e6, 4 * HQ * D * L / rate * 1e6
    printf "# decode reads %.2f GB of weights a token at %.2f GB/s\n", pa * 2 / 1e9, bw
    printf "--us-per-token %.4f --us-per-pair %.6f --bw-hbm %.3f --bw-rope %.3f --us-per-output-token %.0f\n",
        2 * pl / rate * 1e6, 4 * HQ * D * L / rate * 1e6, bw, bw_rope, pa * 2 / (bw * 1e9) * 1e6
}'
