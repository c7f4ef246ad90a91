#!/bin/sh
# kvattn-defects.sh - kvattn gen and mla at their edges: the MLA softmax
# scale bit-equal to Python's float arithmetic of transformers' expression,
# gen's MLA form refusing the options it does not use, a failed gen leaving
# the old set whole, outputs that would share a file refused, mla -v's bound
# over the rows the requests read, loose MLA configs read as transformers
# reads them.
. "$KV_TOP/tests/lib.sh"
C2="$KV_TOP/tests/configs/deepseek-v2-lite.json"
bound() {   # the bound kvattn mla -v printed last
    sed -n 's/.*error bound \([^ ]*\)$/\1/p' "$T/.err"
}
has_python=0
command -v python3 >/dev/null 2>&1 && has_python=1

# --- the scale: transformers' DeepseekV2/V3 Attention.scaling is
# yarn_apply_mscale(rope_parameters, qk_head_dim ** -0.5): scaling * mscale
# * mscale, left to right, mscale = 0.1 * mscale_all_dim * log(factor) + 1.
# Python evaluates the same expression here (its float power is the C
# library's pow, its products IEEE doubles): the reference.
expect_out 'gen: DeepSeek-V2-Lite scale as Python prints transformers'"'"' value' \
    '0.1147213867929261' sh -c "kvattn gen --model-config '$C2' --shape 1,1,1 --dir '$T/s2' && cat '$T/s2/scale'"
if [ "$has_python" = 1 ]; then
    cat >"$T/ref.py" <<'EOF'
import json, math, random, sys

def yarn_get_mscale(scale=1, mscale=1):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0

def scaling(cfg):
    rp = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    s = (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) ** (-0.5)
    if rp.get("rope_type", rp.get("type", "default")) != "default":
        ms_all = rp.get("mscale_all_dim", 0)
        if ms_all:
            m = yarn_get_mscale(rp["factor"], ms_all)
            s = s * m * m
    return s

if sys.argv[1] == "random":
    # random MLA configs: head dims, yarn factors (integers and reals),
    # mscale_all_dim, some without scaling; one per line: file, scale
    rng = random.Random(33)
    for k in range(int(sys.argv[3])):
        c = {"model_type": "deepseek_v3", "num_hidden_layers": 1, "num_attention_heads": 2,
             "kv_lora_rank": rng.choice([16, 64, 512]),
             "qk_rope_head_dim": rng.choice([2, 16, 32, 64, 128]),
             "qk_nope_head_dim": rng.choice([0, 1, 7, 64, 96, 128, 192, 255]),
             "v_head_dim": rng.choice([16, 128])}
        r = rng.random()
        if r < 0.8:
            f = rng.choice([rng.randint(1, 128), round(rng.uniform(0.5, 100), rng.randint(0, 6))])
            c["rope_scaling"] = {"type": rng.choice(["yarn", "yarn", "linear", "default"]),
                                 "factor": f,
                                 "mscale_all_dim": rng.choice([0, 0.707, 1, 1.0, 0.5, 2,
                                                               round(rng.uniform(0.01, 3), 4)]),
                                 "original_max_position_embeddings": 4096}
            c["max_position_embeddings"] = 4096 * 128
        path = "%s/r%03d.json" % (sys.argv[2], k)
        with open(path, "w") as fh:
            json.dump(c, fh)
        print(path, repr(scaling(c)))
else:
    for path in sys.argv[2:]:
        with open(path) as fh:
            c = json.load(fh)
        if c.get("kv_lora_rank"):
            print(path, repr(scaling(c)))
EOF
    mkdir -p "$T/rnd"
    # every shipped MLA config, then random ones
    python3 "$T/ref.py" shipped "$KV_TOP"/tests/configs/*.json >"$T/want.txt"
    python3 "$T/ref.py" random "$T/rnd" 60 >>"$T/want.txt"
    n=0
    while read -r f want; do
        n=$((n + 1))
        rm -rf "$T/g"
        if kvattn gen --model-config "$f" --shape 1,1,1 --dtype f32 --dir "$T/g" 2>>"$T/gen.err"; then
            echo "$f $want $(cat "$T/g/scale")"
        else
            echo "$f $want gen-failed"
        fi
    done <"$T/want.txt" >"$T/got.txt"
    # equal as doubles (both texts round-trip)
    expect_out "scale bit-equal to Python's float arithmetic on $n configs (shipped and random)" '' \
        python3 -c 'import sys
for l in open(sys.argv[1]):
    f, want, got = l.split()
    if got == "gen-failed" or float(got) != float(want):
        print(f, got, "!=", want)' "$T/got.txt"
    expect_eq 'the shipped MLA configs are among them' \
        "$(grep -c configs/ "$T/want.txt")" "$(grep -l kv_lora_rank "$KV_TOP"/tests/configs/*.json | wc -l)"
else
    echo "ok 2 # SKIP no python3"; _n=$((_n + 1)); _pass=$((_pass + 1))
fi
ok 'mla -v prints the same scale text' kvattn mla -v -q "$T/s2/q_absorbed.npy" \
    --kv-cache "$T/s2/kv_cache.npy" --block-table "$T/s2/block_table.npy" --seq-lens 1 \
    --model-config "$C2" -o "$T/s2.npy"
expect_eq '... 0.1147213867929261' "$(sed -n 's/.*scale \([^,]*\),.*/\1/p' "$T/.err")" 0.1147213867929261

# --- gen with an MLA config refuses what that form does not use, by name,
# before it asks for --dir
for opt in '--toy' '--tokens t.txt' '--pos 500' '--kv-heads 2' '--pattern local' \
           '--layout thd' '--sinks 2' '-q q.npy' '--kv kv.npy' '-j 2' '-f text' \
           '--layers 2' '--rope gptj' '--embed-dim 8'; do
    name=${opt%% *}
    expect_fail 2 "gen MLA: $name is refused" kvattn gen --model-config "$C2" --shape 1,4 $opt
    expect_eq "... naming $name, not asking for --dir" \
        "$(grep -c -- "^kvattn gen: $name: not used with an MLA" "$T/.err") $(grep -c 'give --dir' "$T/.err")" '1 0'
done
expect_fail 2 'gen MLA with --dir and --toy: refused' \
    kvattn gen --model-config "$C2" --shape 1,4 --toy --dir "$T/toy"
[ -e "$T/toy" ]; expect_eq '... and no folder made' "$?" 1
expect_fail 2 'gen MLA without --dir: asks for it' kvattn gen --model-config "$C2" --shape 1,4
expect_eq '... naming --dir' "$(grep -c 'give --dir DIR' "$T/.err")" 1

# --- a failed gen leaves the old set whole
ok 'gen: a set in d (S 10)' kvattn gen --model-config "$C2" --shape 2,10 --dtype f32 --dir "$T/d"
cp -r "$T/d" "$T/d.old"
expect_fail 1 'gen over it: refused by --max-mem' \
    kvattn gen --model-config "$C2" --shape 2,200 --dtype f32 --max-mem 1M --dir "$T/d"
# --max-mem holds every array at once: c_kv (41 MB) and the cache (46 MB)
# each fit in 60M, together they do not
expect_fail 1 'gen: --max-mem counts all the arrays together' \
    kvattn gen --model-config "$C2" --shape 1,1 --kv-len 20000 --dtype f32 --max-mem 60M --dir "$T/d"
expect_eq '... the size it needed named' "$(grep -c 'need [0-9]* bytes, more than the limit' "$T/.err")" 1
# a file size limit lets q.npy and q_absorbed.npy be written, then fails
# c_kv.npy: the old code had replaced two files of the set by then
expect_fail 1 'gen over it: fails while writing (file size limit)' \
    sh -c "trap '' XFSZ; ulimit -f 100; exec kvattn gen --model-config '$C2' --shape 1,1 --kv-len 200 --dtype f32 --dir '$T/d'"
expect_eq '... the old set is whole, nothing else left in d' \
    "$(cd "$T/d.old" && for f in * .*; do [ -f "$f" ] && { cmp -s "$f" "$T/d/$f" && echo "$f"; }; done | wc -l) $(ls -A "$T/d" | wc -l)" \
    '11 11'
ls -A "$T" | grep -c 'kvattn-gen' >"$T/left" || true
expect_eq '... and no temporary folder beside it' "$(cat "$T/left")" 0
ok 'gen over it with new numbers: replaced' \
    kvattn gen --model-config "$C2" --shape 3,5 --kv-len 20 --dtype f32 --dir "$T/d"
expect_eq '... every file of the new run' "$(cat "$T/d/seq_lens") $(cat "$T/d/q_lens") $(ls -A "$T/d" | wc -l)" \
    '20,20,20 5,5,5 11'
printf 'x\n' >"$T/notdir"
expect_fail 1 'gen --dir naming a file: refused' \
    kvattn gen --model-config "$C2" --shape 1,1 --dir "$T/notdir"
expect_eq '... the file untouched' "$(cat "$T/notdir")" x

# --- two outputs naming one file
ok 'gen: inputs for run' kvattn gen --shape 1,2,8,16 -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy"
expect_fail 2 'mla: -o and --lse one file' kvattn mla -q "$T/s2/q_absorbed.npy" \
    --kv-cache "$T/s2/kv_cache.npy" --block-table "$T/s2/block_table.npy" --seq-lens 1 \
    --model-config "$C2" -o "$T/x.npy" --lse "$T/x.npy"
expect_eq '... named in the message' "$(grep -c -- "-o and --lse both write" "$T/.err")" 1
[ -e "$T/x.npy" ]; expect_eq '... nothing written' "$?" 1
expect_fail 2 'mla: --lse - with the output on stdout' kvattn mla -q "$T/s2/q_absorbed.npy" \
    --kv-cache "$T/s2/kv_cache.npy" --block-table "$T/s2/block_table.npy" --seq-lens 1 \
    --model-config "$C2" --lse -
expect_fail 2 'mla: one file through another path' kvattn mla -q "$T/s2/q_absorbed.npy" \
    --kv-cache "$T/s2/kv_cache.npy" --block-table "$T/s2/block_table.npy" --seq-lens 1 \
    --model-config "$C2" -o "$T/x.npy" --lse "$T/../$(basename "$T")/x.npy"
expect_fail 2 'run: -o and --lse one file through another path' kvattn run -q "$T/q.npy" \
    -k "$T/k.npy" -v "$T/v.npy" -o "$T/o.npy" --lse "$T/./o.npy"
ok 'run: --lse /dev/null beside -o /dev/null (a device takes both)' kvattn run -q "$T/q.npy" \
    -k "$T/k.npy" -v "$T/v.npy" -o /dev/null --lse /dev/null
ok 'run: O and LSE for merge' kvattn run -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" \
    -o "$T/o.npy" --lse "$T/l.npy"
expect_fail 2 'merge: -o and --lse-out one file' kvattn merge "$T/o.npy" "$T/l.npy" \
    "$T/o.npy" "$T/l.npy" -o "$T/m.npy" --lse-out "$T/m.npy"
expect_fail 2 'merge: --lse-out - with the output on stdout' kvattn merge "$T/o.npy" "$T/l.npy" \
    "$T/o.npy" "$T/l.npy" --lse-out -
expect_fail 2 'gen: -q and -k one file' kvattn gen --shape 1,2,8,16 -q "$T/a.npy" -k "$T/a.npy" \
    -v "$T/b.npy"
printf '1 2 3 4\n' >"$T/tok.txt"
expect_fail 2 'gen: -f with -q, -k, -v (no stream on stdout)' kvattn gen --shape 1,2,8,16 \
    -q "$T/a.npy" -k "$T/b.npy" -v "$T/c.npy" -f text

expect_fail 2 'gen --toy: --force with --kv alone' kvattn gen --toy --tokens "$T/tok.txt" \
    --shape 1,2,4,8 --kv "$T/kv.npy" --force
expect_fail 2 'gen --toy: --kv and -v one file' kvattn gen --toy --tokens "$T/tok.txt" \
    --shape 1,2,4,8 -q "$T/a.npy" -k "$T/b.npy" -v "$T/c.npy" --kv "$T/c.npy"

# -f text reaches --lse as in run (it was written as .npy whatever -f said)
ok 'mla -f text --lse: text' kvattn mla -q "$T/s2/q_absorbed.npy" --kv-cache "$T/s2/kv_cache.npy" \
    --block-table "$T/s2/block_table.npy" --seq-lens 1 --model-config "$C2" -f text \
    -o "$T/ot.txt" --lse "$T/lt.txt"
expect_eq '... a number, not .npy' "$(grep -c NUMPY "$T/lt.txt") $(awk '{ print NF }' "$T/lt.txt")" '0 1'

# --- mla -v: the bound is over the rows the requests read.  gen leaves
# block 0 of the cache unused: filling it with 100 changes neither the
# output nor the bound.
ok 'gen: two decodes over 100 keys' \
    kvattn gen --model-config "$C2" --shape 2,1 --kv-len 100 --dtype f32 --seed 5 --dir "$T/b"
ok 'mla -v' kvattn mla -v -q "$T/b/q_absorbed.npy" --kv-cache "$T/b/kv_cache.npy" \
    --block-table "$T/b/block_table.npy" --seq-lens 100,100 --causal --model-config "$C2" \
    -o "$T/b1.npy"
b1=$(bound)
if [ "$has_python" = 1 ]; then
    python3 - "$T/b/kv_cache.npy" "$T/b/kv_cache100.npy" <<'EOF'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
assert data[:6] == b"\x93NUMPY" and data[6] == 1
off = 10 + struct.unpack("<H", data[8:10])[0]
assert b"'descr': '<f4'" in data[:off] and b"(5, 64, 1, 576)" in data[:off]
data[off:off + 64 * 576 * 4] = struct.pack("<f", 100.0) * (64 * 576)
open(sys.argv[2], "wb").write(data)
EOF
    ok 'mla -v, block 0 (read by no request) filled with 100' kvattn mla -v \
        -q "$T/b/q_absorbed.npy" --kv-cache "$T/b/kv_cache100.npy" \
        --block-table "$T/b/block_table.npy" --seq-lens 100,100 --causal \
        --model-config "$C2" -o "$T/b2.npy"
    expect_file_eq '... the same output' "$T/b2.npy" "$T/b1.npy"
    expect_eq '... and the same bound' "$(bound)" "$b1"
else
    echo "ok $((_n + 1)) # SKIP no python3"; _n=$((_n + 1)); _pass=$((_pass + 1))
fi

# --- --max-mem holds everything mla keeps at once: the inputs (17 MB
# here), their f32 copies, the partial results and the output, not each
# allocation on its own (the naive form's f32 copies were not counted)
ok 'gen: one decode over 2000 keys' \
    kvattn gen --model-config "$C2" --shape 1,1 --kv-len 2000 --dtype f32 --dir "$T/mm"
naive="-q $T/mm/q.npy --c-kv $T/mm/c_kv.npy --k-pe $T/mm/k_pe.npy --w-uk $T/mm/w_uk.npy
       --w-uv $T/mm/w_uv.npy --q-lens 1 --kv-lens 2000 --causal --model-config $C2"
expect_fail 1 'mla naive --max-mem 20M: inputs and their f32 copies do not fit' \
    kvattn mla $naive --max-mem 20M -o "$T/mm.npy"
expect_eq '... the copies named' "$(grep -c 'f32 copies of the five inputs need' "$T/.err")" 1
expect_fail 1 'mla naive --max-mem 10M: the inputs alone do not fit' \
    kvattn mla $naive --max-mem 10M -o "$T/mm.npy"
expect_eq '... the inputs named' "$(grep -c 'the inputs take [0-9]* bytes, more than the limit of 10485760' "$T/.err")" 1
ok 'mla naive --max-mem 100M: fits' kvattn mla $naive --max-mem 100M -o "$T/mm.npy"

# gen holds Q, K and V (4 MB each here) at once; --toy the whole KV
# (33 MB), Q and the three layouts (49 MB)
expect_fail 1 'gen --max-mem 5M: Q, K, V together do not fit' \
    kvattn gen --shape 1,8,1000,128 --max-mem 5M -q "$T/a.npy" -k "$T/b.npy" -v "$T/c.npy"
expect_eq '... the size named' "$(grep -c 'need 12288000 bytes, more than the limit' "$T/.err")" 1
seq 1 1000 >"$T/tok1k.txt"
expect_fail 1 'gen --toy --max-mem 40M: the KV and Q, K, V together do not fit' \
    kvattn gen --toy --tokens "$T/tok1k.txt" --shape 1,8,1000,128 --layers 4 --max-mem 40M \
    -q "$T/a.npy" -k "$T/b.npy" -v "$T/c.npy"
ok 'gen --toy --max-mem 50M: fits' \
    kvattn gen --toy --tokens "$T/tok1k.txt" --shape 1,8,1000,128 --layers 4 --max-mem 50M \
    -q "$T/a.npy" -k "$T/b.npy" -v "$T/c.npy"

# run, merge, cmp and bound hold all their inputs at once (4 MB each here)
ok 'gen: Q, K, V of 4 MB each' kvattn gen --shape 1,8,1000,128 -q "$T/q4.npy" -k "$T/k4.npy" -v "$T/v4.npy"
expect_fail 1 'run --max-mem 10M: Q, K, V together do not fit' \
    kvattn run -q "$T/q4.npy" -k "$T/k4.npy" -v "$T/v4.npy" --max-mem 10M -o "$T/o4.npy"
expect_eq '... the inputs named' "$(grep -c 'the inputs take 12288000 bytes, more than the limit' "$T/.err")" 1
expect_fail 1 'bound --max-mem 10M: the same' \
    kvattn bound -q "$T/q4.npy" -k "$T/k4.npy" -v "$T/v4.npy" --max-mem 10M
expect_fail 2 'cmp --max-mem 6M: A and B together do not fit (trouble: 2)' \
    kvattn cmp --max-mem 6M "$T/q4.npy" "$T/k4.npy"
ok 'run: O and LSE of 4 MB' kvattn run -q "$T/q4.npy" -k "$T/k4.npy" -v "$T/v4.npy" \
    -o "$T/o4.npy" --lse "$T/l4.npy"
expect_fail 1 'merge --max-mem 6M: two parts do not fit' \
    kvattn merge --max-mem 6M "$T/o4.npy" "$T/l4.npy" "$T/o4.npy" "$T/l4.npy" -o "$T/m4.npy"
ok 'merge --max-mem 20M: they fit' \
    kvattn merge --max-mem 20M "$T/o4.npy" "$T/l4.npy" "$T/o4.npy" "$T/l4.npy" -o "$T/m4.npy"

# --- configs transformers accepts: hidden_size not a multiple of the heads
# (DeepseekV3Config does not check it), no num_hidden_layers (its default)
cat >"$T/loose.json" <<'EOF'
{"model_type": "deepseek_v3", "hidden_size": 1000, "num_attention_heads": 3,
 "kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 24,
 "torch_dtype": "float32",
 "rope_scaling": {"type": "yarn", "factor": 4, "mscale": 1.0, "mscale_all_dim": 1.0,
                  "original_max_position_embeddings": 4096}}
EOF
ok 'gen: a loose MLA config' kvattn gen --model-config "$T/loose.json" --shape 2,3 --kv-len 9 \
    --dir "$T/l"
ok 'mla: the absorbed form with it' kvattn mla -q "$T/l/q_absorbed.npy" \
    --kv-cache "$T/l/kv_cache.npy" --block-table "$T/l/block_table.npy" --seq-lens 9,9 \
    --q-lens 3,3 --causal --model-config "$T/loose.json" -o "$T/la.npy"
ok 'mla: the naive form with it' kvattn mla -q "$T/l/q.npy" --c-kv "$T/l/c_kv.npy" \
    --k-pe "$T/l/k_pe.npy" --w-uk "$T/l/w_uk.npy" --w-uv "$T/l/w_uv.npy" --q-lens 3,3 \
    --kv-lens 9,9 --causal --model-config "$T/loose.json" -o "$T/ln.npy"
# the config the scale comes from must be the inputs' model
expect_fail 1 'mla: absorbed inputs of another latent width than the config: refused' \
    kvattn mla -q "$T/s2/q_absorbed.npy" --kv-cache "$T/s2/kv_cache.npy" \
    --block-table "$T/s2/block_table.npy" --seq-lens 1 --model-config "$T/loose.json"
expect_eq '... naming both' "$(grep -c "latent rows of 576 values, but .*loose.json' has kv_lora_rank + qk_rope_head_dim = 48" "$T/.err")" 1
expect_fail 1 'mla: naive inputs of another geometry than the config: refused' \
    kvattn mla -q "$T/s2/q.npy" --c-kv "$T/s2/c_kv.npy" --k-pe "$T/s2/k_pe.npy" \
    --w-uk "$T/s2/w_uk.npy" --w-uv "$T/s2/w_uv.npy" --model-config "$T/loose.json"
ok 'mla: --kv-lora-rank given: no latent width asked of the file' \
    kvattn mla -q "$T/s2/q_absorbed.npy" --kv-cache "$T/s2/kv_cache.npy" \
    --block-table "$T/s2/block_table.npy" --seq-lens 1 --model-config "$T/loose.json" \
    --kv-lora-rank 512 -o /dev/null
cat >"$T/nop.json" <<'EOF'
{"model_type": "deepseek_v3", "num_attention_heads": 2, "kv_lora_rank": 32,
 "qk_rope_head_dim": 16, "v_head_dim": 24}
EOF
expect_fail 2 'mla: a config without qk_nope_head_dim is refused, naming it' \
    kvattn gen --model-config "$T/nop.json" --shape 1,1 --dir "$T/nop"
expect_eq '... named' "$(grep -c qk_nope_head_dim "$T/.err")" 1

# --- the synopsis: the absorbed form with --scale also needs --kv-lora-rank
expect_out 'mla --help: --scale S --kv-lora-rank Dl in the absorbed form' 1 \
    sh -c "kvattn mla --help | grep -c -- '--scale S --kv-lora-rank Dl'"

# --- a bad --max-mem: the option named once, as the other programs name it
kvattn gen --shape 1,2,3,4 -q "$T/mq.npy" -k "$T/mk.npy" -v "$T/mv.npy"
kvattn run -q "$T/mq.npy" -k "$T/mk.npy" -v "$T/mv.npy" -o "$T/mo.npy" --lse "$T/ml.npy"
kvattn gen --model-config "$C2" --shape 1,2 --dir "$T/mm2"
for c in "gen --shape 1,2,3,4" "gen --model-config $C2 --shape 1,2 --dir $T/mm3" \
    "run -q $T/mq.npy -k $T/mk.npy -v $T/mv.npy" "cmp $T/mq.npy $T/mq.npy" \
    "merge $T/mo.npy $T/ml.npy $T/mo.npy $T/ml.npy -o $T/mx.npy" \
    "bound -q $T/mq.npy -k $T/mk.npy -v $T/mv.npy" \
    "mla -q $T/mm2/q_absorbed.npy --kv-cache $T/mm2/kv_cache.npy --block-table $T/mm2/block_table.npy --seq-lens 2 --model-config $C2"; do
    sub=${c%% *}
    # shellcheck disable=SC2086
    expect_fail 2 "$sub --max-mem x: refused" kvattn $c --max-mem x
    expect_eq "... naming --max-mem once" "$(head -n 1 "$T/.err")" \
        "kvattn $sub: --max-mem: bad size 'x'"
done
done_testing
