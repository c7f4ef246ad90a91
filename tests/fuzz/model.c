/* model.c - libFuzzer entry for the config.json reader (make fuzz): any
 * input is either refused with a message or gives a geometry that passes
 * the reader's own checks (NoPE and local layers in order and in range), and
 * describing it fits and terminates. */
#include <stdlib.h>
#include <string.h>
#include "chunk/model.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    struct kv_model m;
    struct kv_err e;
    char buf[2048];

    e.msg[0] = 0;
    if (kv_model_parse((const char *)data, size, "fuzz", &m, &e) != 0) {
        if (!e.msg[0])
            abort();        /* every refusal says why */
        return 0;
    }
    /* an MLA config's KV heads play no part (one latent per layer), so
     * transformers' own acceptance of any head counts there holds */
    if (m.n_layers < 1 || m.n_heads < 1 || m.n_kv_heads < 1 ||
        (m.n_heads % m.n_kv_heads && !m.kv_lora_rank) || m.head_dim < 1 ||
        m.head_dim > 65536 ||
        kv_rope_check(&m.rope, &e) != 0)
        abort();
    /* NoPE layers (no_rope_layers) ascending and inside the model; a
     * sliding layers' base of its own is a real base */
    for (int i = 0; i < m.rope.n_nope; i++)
        if (m.rope.nope_layers[i] >= m.n_layers ||
            (i && m.rope.nope_layers[i] <= m.rope.nope_layers[i - 1]))
            abort();
    for (int i = 0; i < m.rope.n_local; i++)
        if (m.rope.local_layers[i] >= m.n_layers ||
            (i && m.rope.local_layers[i] <= m.rope.local_layers[i - 1]))
            abort();
    if (m.rope.n_local && !(m.rope.local_theta > 1))
        abort();
    if (kv_model_describe(&m, buf, sizeof buf) <= 0)
        abort();
    return 0;
}
