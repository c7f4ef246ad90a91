/* kvslot map's output against --max-mem (slot/map_groups.h) */
size_t kv_map_entries(const enum kv_slot_field *fl, size_t nf, size_t n_tokens,
                      size_t n_sched, size_t n_cols, size_t n_ranks, size_t n_slots);
size_t kv_map_groups_entries(const struct kv_map_groups *m, size_t n_sched);
int kv_map_output_check(size_t entries, size_t entry_size, size_t max_mem,
                        struct kv_err *e);
