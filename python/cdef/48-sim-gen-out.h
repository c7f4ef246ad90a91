/* kvchunk.sim_gen(out=...): the trace streamed into a file as -o FILE
 * writes it (a temporary file beside it, renamed on success), or into a
 * pipe that a Python thread copies into a file object */
FILE *fdopen(int fd, const char *mode);
struct kv_out { FILE *f; ...; };
int kv_out_open(struct kv_out *o, const char *path, struct kv_err *e);
int kv_out_commit(struct kv_out *o, struct kv_err *e);
void kv_out_abort(struct kv_out *o);
