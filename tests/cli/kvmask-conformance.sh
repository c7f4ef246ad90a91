#!/bin/sh
# kvmask-conformance.sh - kvmask against the public vectors and against the
# goldens tests/vectors/masks/gen.py computes with the upstream torch/numpy
# expressions (vllm-ascend builder, FlashAttention/FIA rules,
# FlexAttention create_block_mask, FlashInfer packbits and BSR).
. "$KV_TOP/tests/lib.sh"
M="$VEC/masks"
G="$M/gen"

# same NAME kvmask-args...: output byte-equal to gen/NAME.npy
same() {
    _name=$1; shift
    if kvmask "$@" -o "$T/out.npy" 2>"$T/err"; then
        expect_file_eq "$_name: kvmask $*" "$T/out.npy" "$G/$_name.npy"
    else
        _report 1 "$_name: kvmask $*" "$(cat "$T/err")"
    fi
}
# sum NAME kvmask-args...: cksum of the output equals golden NAME.cksum
sum() {
    _name=$1; shift
    if kvmask "$@" -o "$T/out.npy" 2>"$T/err"; then
        expect_eq "$_name: kvmask $*" "$(cksum <"$T/out.npy")" \
            "$(cat "$GOLD/kvmask/$_name.cksum")"
    else
        _report 1 "$_name: kvmask $*" "$(cat "$T/err")"
    fi
}
# part FILE OFFSET LEN: LEN bytes of FILE from OFFSET
part() { dd if="$1" bs=1 skip="$2" count="$3" 2>/dev/null; }

# ---- the public vectors ------------------------------------------------------
kvmask ascend --preset attn -n 6 --dtype f16 -o "$T/a.npy"
expect_file_eq 'public: get_attn_mask(6, f16)' "$T/a.npy" "$M/ascend_attn_mask_f16_6x6.npy"
kvmask ascend --preset attn -n 6 --dtype bf16 -o "$T/b.npy"
expect_eq 'public: get_attn_mask(6, bf16) bits (1.0 = 0x3f80)' \
    "$(part "$T/b.npy" 128 72 | od -An -tx1)" \
    "$(part "$M/ascend_attn_mask_bf16_6x6__bf16bits.npy" 128 72 | od -An -tx1)"
expect_eq 'bf16 is written as <V2' "$(head -c 25 "$T/b.npy" | tail -c 15)" \
    "{'descr': '<V2'"
kvmask ascend --preset splitfuse -n 6 -o "$T/c.npy"
expect_file_eq 'public: splitfuse int8 2048 slice 6x6' "$T/c.npy" \
    "$M/ascend_splitfuse_int8_2048_slice6x6.npy"
kvmask causal -q 2 -k 5 --keep -o "$T/d.npy"
expect_file_eq 'public: FA causal q2 kv5 keep' "$T/d.npy" "$M/fa_causal_keep_q2_kv5.npy"
kvmask band -q 3 -k 6 --pre 2 --next 0 --keep -o "$T/e.npy"
expect_file_eq 'public: FIA sparse_mode 4 band pre 2 next 0' "$T/e.npy" \
    "$M/fia_mode4_band_keep_q3_kv6_pre2_next0.npy"
kvmask window -q 3 -k 6 -w 3 --keep -o "$T/e2.npy"
expect_file_eq 'public: the same band as vLLM window W=3' "$T/e2.npy" \
    "$M/fia_mode4_band_keep_q3_kv6_pre2_next0.npy"
kvmask causal -n 6 -f bits -o "$T/f.npy"
expect_file_eq 'public: FlashInfer packbits little 6x6' "$T/f.npy" \
    "$M/flashinfer_causal6x6_packbits_little.npy"
kvmask causal -n 6 -f block --block-size 2 -o "$T/g.npy"
off=0
for fld in kv_num_blocks kv_indices full_kv_num_blocks full_kv_indices \
           q_num_blocks q_indices full_q_num_blocks full_q_indices; do
    len=$(wc -c <"$M/flex_causal_bs2_$fld.npy")
    case $fld in
    q_indices|full_q_indices)   # the public files are in Fortran order
        expect_eq "public: BlockMask $fld data (transposed file)" \
            "$(part "$T/g.npy" $((off + 128)) 36 | od -An -tx4 | tr -s ' \n' ' ')" \
            "$(part "$G/flex_causal_bs2_6.npy" $((off + 128)) 36 | od -An -tx4 | tr -s ' \n' ' ')" ;;
    *)
        part "$T/g.npy" "$off" "$len" >"$T/fld.npy"
        expect_file_eq "public: BlockMask $fld" "$T/fld.npy" "$M/flex_causal_bs2_$fld.npy" ;;
    esac
    off=$((off + len))
done
expect_eq 'public: BlockMask stream has nothing else' "$(wc -c <"$T/g.npy")" "$off"

# ---- vllm-ascend builder ----------------------------------------------------
for dt in f16 bf16 f32 bool i8; do
    same ascend_attn_${dt}_7 ascend --preset attn -n 7 --dtype $dt
done
same ascend_attn_v0_f16_9 ascend --preset attn -n 9
same ascend_attn_cache_f16_then_bf16_5 ascend --preset attn -n 5 --dtype bf16 --cache-dtype f16
same ascend_attn_cache_bool_then_f16_5 ascend --preset attn -n 5 --dtype f16 --cache-dtype bool
same ascend_attn_cache_f16_then_bool_6 ascend --preset attn -n 6 --dtype bool --cache-dtype f16
sum ascend_splitfuse_i8_2048 ascend --preset splitfuse
same ascend_splitfuse_i8_slice9 ascend --preset splitfuse -n 9
sum ascend_pooling_bool_2048 ascend --preset pooling
sum ascend_splitfuse_as_bool_2048 ascend --preset splitfuse --dtype bool
for dt in f16 bf16; do
    sum ascend_mla_${dt}_512 ascend --preset mla --dtype $dt
    sum ascend_pcp_mla_${dt}_512 ascend --preset pcp-mla --dtype $dt
    same ascend_mla_${dt}_slice6 ascend --preset mla --dtype $dt -n 6
done
for w in 1 2 5 100; do
    sum ascend_swa_w${w}_2048 ascend --preset swa -w $w
done
same ascend_swa_w2_slice6 ascend --preset swa -w 2 -n 6
sum ascend_310p_splitfuse_f16_2048 ascend --preset splitfuse-310p
same ascend_310p_splitfuse_f16_slice6 ascend --preset splitfuse-310p -n 6
for dt in f16 bf16; do
    same ascend_splitfuse_rows_a_$dt ascend --preset splitfuse --seq-lens 5,3 --q-lens 2,3 --dtype $dt
    same ascend_splitfuse_rows_a_$dt ascend --preset splitfuse --seq-lens 5,3 --positions 3,4,0,1,2 --dtype $dt
    same ascend_splitfuse_fallback_a_$dt ascend --preset splitfuse --seq-lens 5,3 --q-lens 2,3 --fallback --dtype $dt
    same ascend_splitfuse_rows_b_$dt ascend --preset splitfuse --seq-lens 9,4,6 --q-lens 3,4,1 --dtype $dt
    same ascend_splitfuse_fallback_b_$dt ascend --preset splitfuse --seq-lens 9,4,6 --q-lens 3,4,1 --fallback --dtype $dt
done
same ascend_attn_f16_13_nz ascend --preset attn -n 13 --layout nz
same ascend_attn_f16_40_nz ascend --preset attn -n 40 --layout nz
same causal_keep_f16_q13_kv30_nz causal -q 13 -k 30 --keep --dtype f16 --layout nz

for a in 5:4:2:0:1 5:4:2:1:1 5,2,11:4,2,3:2:0:1 9,30:3,5:4:3:2 16,7:2,4:4:1:4; do
    h=$(echo "$a" | cut -d: -f1); q=$(echo "$a" | cut -d: -f2)
    cp=$(echo "$a" | cut -d: -f3); r=$(echo "$a" | cut -d: -f4); i=$(echo "$a" | cut -d: -f5)
    same "ascend_mtp_cp_h$(echo "$h" | tr , -)_q$(echo "$q" | tr , -)_cp${cp}_r${r}_i${i}" \
        ascend --preset mtp-cp --history "$h" --q-lens "$q" --cp-size "$cp" --cp-rank "$r" --interleave "$i"
done
expect_out 'A.5: CP MTP decode mask, history 5, q 4, cp 2, rank 1' '# 0 = attend, 1 = masked (vllm-ascend'\''s values)
0 0 0 1
0 0 0 1
0 0 0 0
0 0 0 0' kvmask ascend --preset mtp-cp --history 5 --q-lens 4 --cp-size 2 --cp-rank 1 -f text

# ---- FlashAttention / FIA / attention-gym rules -------------------------------
for qk in 2,5 5,2 7,7 3,9; do
    q=${qk%,*}; k=${qk#*,}
    same fa_causal_q${q}_kv${k} causal -q $q -k $k --keep
done
for w in 1 2 3 5; do
    for qk in 4,9 9,9 6,3; do
        q=${qk%,*}; k=${qk#*,}
        same fa_window_w${w}_q${q}_kv${k} window -w $w -q $q -k $k --keep
    done
done
for pn in 2,0 0,2 3,1 1,4; do
    p=${pn%,*}; n=${pn#*,}
    for qk in 3,6 6,6 7,4; do
        q=${qk%,*}; k=${qk#*,}
        same fia_band_pre${p}_next${n}_q${q}_kv${k} band --pre $p --next $n -q $q -k $k --keep
    done
done
same fia_top_left_q3_kv6 causal -q 3 -k 6 --align top-left --keep
same fia_top_left_q6_kv4 causal -q 6 -k 4 --align top-left --keep
same flex_prefix_p3_6 prefix -p 3 -n 6 --keep
same flex_prefix_p4_9 prefix -p 4 -n 9 --keep
same flex_prefix_p5_q4_kv9 prefix -p 5 -q 4 -k 9 --align top-left --keep
same fa_varlen_q2-3_kv5-3 varlen --q-lens 2,3 --kv-lens 5,3 --keep
same fa_varlen_q1-1-1_kv4-2-7 varlen --q-lens 1,1,1 --kv-lens 4,2,7 --keep
same fa_varlen_q3-2 varlen --q-lens 3,2 --keep
same fa_varlen_w2_q3-4_kv6-4 varlen --q-lens 3,4 --kv-lens 6,4 -w 2 --keep
same chunk_s3_c2-3_q2 chunk --sys 3 --chunks 2,3 --question 2 --keep
same chunk_s0_c2-2_q1 chunk --chunks 2,2 --question 1 --keep
same chunk_s2_c3_q0 chunk --sys 2 --chunks 3 --keep

# ---- FlexAttention BlockMask ---------------------------------------------------
same flex_causal_bs2_6 causal -n 6 -f block --block-size 2
same flex_causal_bs2_5 causal -n 5 -f block --block-size 2
same flex_causal_tl_q10_kv13_bs4x3 causal -q 10 -k 13 --align top-left -f block --block-size 4,3
same flex_causal_br_q10_kv13_bs4x3 causal -q 10 -k 13 -f block --block-size 4,3
same flex_window_w3_11_bs4 band --pre 3 --next 0 -n 11 -f block --block-size 4
same flex_prefix_p5_13_bs4 prefix -p 5 -n 13 -f block --block-size 4
same flex_document_3-5-4_bs4 varlen --q-lens 3,5,4 -f block --block-size 4
same flex_causal_b2_h3_7_bs3 causal -n 7 --batch 2 --heads 3 -f block --block-size 3
same flex_chunk_s3_c2-3_q2_bs2 chunk --sys 3 --chunks 2,3 --question 2 -f block --block-size 2

# ---- FlashInfer ---------------------------------------------------------------
same flashinfer_causal_6_bits causal -n 6 -f bits
same flashinfer_varlen_q2-3_kv5-3_bits varlen --q-lens 2,3 --kv-lens 5,3 -f bits
same flashinfer_window_w3_q5_kv11_bits window -w 3 -q 5 -k 11 -f bits
same flashinfer_bsr_causal_6_r2c2 causal -n 6 -f bsr --block-size 2
same flashinfer_bsr_causal_q10_kv12_r4c3 causal -q 10 -k 12 -f bsr --block-size 4,3
same flashinfer_bsr_window_w5_16_r4c4 window -w 5 -n 16 -f bsr --block-size 4
same flashinfer_bsr_varlen_q3-5_kv4-8_r2c4 varlen --q-lens 3,5 --kv-lens 4,8 -f bsr --block-size 2,4

# ---- worked examples of the spec in text ----------------------------------------
expect_out 'F: FA causal q5 kv2 (empty rows first)' '# 1 = attend, 0 = masked (--keep: FlexAttention'\''s and FlashInfer'\''s convention)
0 0
0 0
0 0
1 0
1 1' kvmask causal -q 5 -k 2 --keep -f text
expect_out 'A.2: splitfuse rows seq [5,3] bf16 hold -0 and -9984' '# -0 = attend, -9984 = masked (vllm-ascend'\''s values)
-0 -0 -0 -0 -9984
-0 -0 -0 -0 -0
-0 -9984 -9984 -9984 -9984
-0 -0 -9984 -9984 -9984
-0 -0 -0 -9984 -9984' kvmask ascend --preset splitfuse --seq-lens 5,3 --q-lens 2,3 --dtype bf16 -f text
expect_out 'A.2: 2025-07 fallback fp16 -10000' '# 0 = attend, -10000 = masked (vllm-ascend'\''s values)
0 0 0 0 -10000
0 0 0 0 0
0 -10000 -10000 -10000 -10000
0 0 -10000 -10000 -10000
0 0 0 -10000 -10000' kvmask ascend --preset splitfuse --seq-lens 5,3 --q-lens 2,3 --fallback -f text
expect_out 'E.1: causal 5x5 BS2 counts' 'kv_num_blocks:
1 1 3
full_kv_num_blocks:
0 1 0' sh -c "kvmask causal -n 5 -f block --block-size 2 --text | sed -n '/kv_num_blocks:/,+1p'"
expect_out 'E.2: BSR 6x6 R=C=2' 'indptr: 0 1 3 6
indices: 0 0 1 0 1 2
packed_mask: 13 247 223 15' kvmask causal -n 6 -f bsr --block-size 2 --text
expect_out 'E.2: FlashInfer batch packbits (ef 03 | d9 01)' 'packed: 239 3 217 1
indptr: 0 2 4' kvmask varlen --q-lens 2,3 --kv-lens 5,3 -f bits --text
# a padded slot (0 queries) and a request with no cached keys yet repeat an
# indptr entry, as FlashInfer's cumsum of empty segments does; a batch of one
# request still has its indptr
expect_out 'E.2: empty requests keep their indptr entries' 'packed: 239 3 217 1
indptr: 0 2 2 4 4' kvmask varlen --q-lens 2,0,3,2 --kv-lens 5,4,3,0 -f bits --text
expect_out 'E.2: one request: packed and indptr' 'packed: 239 3
indptr: 0 2' kvmask varlen --q-lens 2 --kv-lens 5 -f bits --text
expect_out 'empty requests: dense text' '# 0 = attend, 1 = masked (Ascend'\''s convention; --keep: 1 = attend)
0 0 0 0 1 1 1 1 1 1 1 1
0 0 0 0 0 1 1 1 1 1 1 1
1 1 1 1 1 1 1 1 1 0 1 1
1 1 1 1 1 1 1 1 1 0 0 1
1 1 1 1 1 1 1 1 1 0 0 0
1 1 1 1 1 1 1 1 1 1 1 1
1 1 1 1 1 1 1 1 1 1 1 1' kvmask varlen --q-lens 2,0,3,2 --kv-lens 5,4,3,0 -f text

expect_out 'E.2: packbits big-endian (83 0e 3c fb f0)' 'packed: 131 14 60 251 240' \
    kvmask causal -n 6 -f bits --text --bitorder big
kvmask causal -n 6 -f bits --bitorder big -o "$T/big.npy"
expect_eq 'E.2: big-endian .npy bytes' "$(tail -c 5 "$T/big.npy" | od -An -tx1 | tr -d ' ')" 830e3cfbf0
kvmask causal -n 6 -f bsr --block-size 2 --bitorder big -o "$T/bsrbig.npy"
expect_eq 'E.2: BSR mask big-endian = little with each byte reversed (0d f7 df 0f)' \
    "$(tail -c 4 "$T/bsrbig.npy" | od -An -tx1 | tr -d ' ')" b0effbf0

done_testing
