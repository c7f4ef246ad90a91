/* the largest tile scale of an fp8_ds_mla cache (attn/mla_ds.h), which
 * with kv_attn_fp8_v_exp chooses kv_mla_req.v_exp */
float kv_ds_mla_max_scale(const struct kv_tensor *q);
