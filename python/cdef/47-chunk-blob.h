/* chunk blob headers (chunk/blob.h), to store a chunk built by hand */
#define KV_BLOB_LAYOUT_KV ...
int kv_blob_header(struct kv_blob_meta *m, const int32_t *tokens,
                   uint8_t **hdr, struct kv_err *e);
uint64_t kv_blob_checksum(const void *p, size_t n);
