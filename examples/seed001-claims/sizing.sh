#!/bin/sh
# sizing.sh - the design's chunk pool (section 5.3: "32GB GPU, block_size=16,
# head_dim=128, num_heads=32; Chunk Pool 4.3GB; single block 256KB; ~17,000
# blocks; ~272K tokens") redone: the block arithmetic, then the tokens the
# same bytes hold with all layers, from `kvchunk sim --pool-bytes` and a
# model config.  Prints the claims table's last row.
# Usage: sh sizing.sh KVCHUNK MODEL_CONFIG
set -eu
KVCHUNK=${1:?usage: sizing.sh KVCHUNK MODEL_CONFIG}
MODEL=${2:?}
tok() { _p=$1; shift; "$KVCHUNK" sim --pool-bytes "$_p" "$@" --csv -q -p none,chunk /dev/null |
        awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $1 == "chunk" { print $c["capacity_tokens"] }'; }
t8b=$(tok 4.3G --model-config "$MODEL")
t32=$(tok 4.3G --layers 32 --kv-heads 32 --head-dim 128 --dtype f16)
awk -v t8b="$t8b" -v t32="$t32" 'BEGIN {
    blk = 16 * 32 * 128 * 2 * 2                  # one layer: 262144 bytes
    pool = 4.3 * 1024 ^ 3
    printf "| 6 | \"Chunk Pool: 4.3GB; single block: 256KB; ~17,000 blocks; ~272K tokens\" | 16 tokens x 32 heads x 128 x K,V x 2 bytes = %d bytes = 256 KiB: one layer. 4.3 GiB / 256 KiB = %d blocks = %d tokens of one layer; with all 32 layers the same bytes hold %d tokens (32 KV heads, the design'"'"'s geometry) or %d (Llama-3.1-8B, 8 KV heads); 272K all-layer tokens take %.1f GiB (8 KV heads) or %.0f GiB (32), more than the 32 GB device | does not hold (the block size is per layer) | the sizing holds per layer; a pool for all layers of 272K tokens needs a larger device, fewer KV heads or a smaller pool in tokens, and the claims 3-5 then need the pool to hold the reused documents |\n", \
        blk, int(pool / blk), int(pool / blk) * 16, t32, t8b, 272000 * 131072 / 1024 ^ 3, 272000 * 524288 / 1024 ^ 3
}'
