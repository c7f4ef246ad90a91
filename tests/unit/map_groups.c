/* map_groups.c - one step with KV-cache groups (slot/map_groups.h), over
 * random spellings of groups and random steps:
 *  - each attention group's slot mapping, block numbers and offsets are
 *    the formula's in the group's own block size (slot = table[r][p / bs]
 *    * bs + p % bs, bs the group's of kv_groups_from_spec: groups of 16
 *    and 32 tokens among them), computed here by hand;
 *  - the shared fields are those of one table without groups;
 *  - a Mamba group gets no slot mapping, and its table is kept as given;
 * and the refusals of the tables, the fields and --pad-to. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "slot/map_groups.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static int64_t pick(int64_t lo, int64_t hi)   /* uniform in [lo, hi] */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

enum { NR = 4, NC = 12, NG = 8 };

static const char *const specs[] = {
    "sliding=4,full", "2*(sliding=8,full)", "chunked=8,full", "full",
    "2*(3*mamba=65536,full)", "mla,mla_sliding=4", "sliding=4:8192,full",
};

/* Whether group k of m, over tables t, has the formula's fields in block
 * size bs. */
static int group_ok(const struct kv_map_groups *m, size_t k, int64_t bs,
                    int64_t (*t)[NR][NC], const int64_t *sched,
                    const int64_t *comp, size_t n)
{
    const struct kv_map_group *q = &m->g[k];
    size_t at = 0;
    for (size_t r = 0; r < n; r++)
        for (int64_t p = comp[r]; p < comp[r] + sched[r]; p++, at++) {
            int64_t b = t[k][r][p / bs];
            if (q->st.slot_mapping[at] != b * bs + p % bs ||
                q->st.block_numbers[at] != b ||
                q->st.block_offsets[at] != p % bs)
                return 0;
        }
    return at == q->st.n_tokens;
}

static void random_steps(void)
{
    static int64_t t[NG][NR][NC];
    int bad = 0, several = 0, n_ok = 0, n_refused = 0;
    for (int trial = 0; trial < 300; trial++) {
        struct kv_map_groups_opts o;
        struct kv_map_groups m;
        struct kv_groups_opts go = { 0, 16, 64, 0, 0 };
        struct kv_groups gs;
        struct kv_err e;
        char names[NG][24];
        const char *given[NG];
        int64_t sched[NR], comp[NR];
        size_t n = (size_t)pick(1, NR);
        int usage;

        memset(&o, 0, sizeof o);
        o.kv_groups = specs[pick(0, sizeof specs / sizeof *specs - 1)];
        o.max_model_len = "64";
        o.block_size = pick(0, 1) ? "4" : NULL;
        kv_map_groups_init(&m);
        kv_groups_init(&gs);
        go.block_size = o.block_size ? 4 : 0;
        if (kv_map_groups_load(&m, &o, &usage, &e) || m.n > NG ||
            kv_groups_from_spec(&gs, o.kv_groups, &go, &e) ||
            gs.n_groups != m.n) {
            n_refused++;
            kv_map_groups_release(&m);
            kv_groups_release(&gs);
            continue;
        }
        for (size_t k = 0; k < m.n; k++) {
            snprintf(names[k], sizeof names[k], "g%zu=t", m.n - 1 - k);
            given[k] = names[k];        /* named, in reverse order */
            for (size_t r = 0; r < NR; r++)
                for (size_t c = 0; c < NC; c++)
                    t[m.n - 1 - k][r][c] = pick(0, 99);
        }
        for (size_t r = 0; r < n; r++) {
            sched[r] = pick(0, 8);
            comp[r] = pick(0, 12);
        }
        if (kv_map_groups_tables(&m, given, m.n, &e) ||
            kv_map_groups_fields(&m, NULL, &e))
            bad++;
        for (size_t k = 0; k < m.n && !bad; k++) {
            struct kv_slot_table tb = { t[k][0], NR, NC, NULL };
            if (m.g[k].table != m.n - 1 - k ||
                kv_map_groups_compute(&m, k, &tb, "t", sched, comp, n, 1,
                                      &e))
                bad++;
            else if (m.g[k].kind == KV_CACHE_MAMBA)
                bad += m.g[k].st.slot_mapping != NULL ||
                       m.g[k].t.ids != NULL;   /* block_table not written */
            else
                bad += !group_ok(&m, k, gs.group[k].block_size, t, sched,
                                 comp, n);
        }
        if (!bad && kv_map_groups_pad(&m, -1, &e) == 0) {
            /* the shared fields: one table without groups */
            const struct kv_map_group *f0 = &m.g[m.first];
            struct kv_slot_step one;
            kv_slot_step_init(&one);
            bad += kv_slot_compute(&f0->geom, &f0->t, n, sched, comp,
                                   1u << KV_SLOT_POSITIONS, &one, &e) ||
                   one.n_tokens != m.n_slots ||
                   memcmp(one.positions, f0->st.positions,
                          one.n_tokens * sizeof *one.positions) ||
                   memcmp(one.query_start_loc, f0->st.query_start_loc,
                          (n + 1) * sizeof *one.query_start_loc);
            kv_slot_step_release(&one);
            n_ok++;
            several += m.n > 1;
        }
        kv_map_groups_release(&m);
        kv_groups_release(&gs);
    }
    TAP_OK(!bad, "300 random steps: each group's slots in its block size, "
           "the shared fields one table's (%d bad)", bad);
    TAP_OK(n_ok > 200 && several > 100 && !n_refused,
           "... %d computed, %d with groups, %d specs refused", n_ok,
           several, n_refused);
}

/* The refusal of tables / fields / pad_to given for "2*(sliding=8,full)",
 * or 0 when it passes; its message into msg. */
static int refused(const char *const *given, size_t n_given,
                   const char *fields, int64_t pad, char *msg)
{
    static const int64_t t[2][NC] = { { 1, 2, 3, 4 }, { 5, 6, 7, 8 } };
    const int64_t sched[2] = { 3, 5 }, comp[2] = { 2, 1 };
    struct kv_map_groups_opts o;
    struct kv_map_groups m;
    struct kv_err e;
    int usage, rc = 0;

    memset(&o, 0, sizeof o);
    o.kv_groups = "2*(sliding=8,full)";
    o.block_size = "4";
    kv_map_groups_init(&m);
    if (kv_map_groups_load(&m, &o, &usage, &e) ||
        kv_map_groups_tables(&m, given, n_given, &e) ||
        kv_map_groups_fields(&m, fields, &e))
        rc = 1;
    for (size_t k = 0; k < m.n && !rc; k++) {
        struct kv_slot_table tb = { t[0], 2, NC, NULL };
        if (kv_map_groups_compute(&m, k, &tb, "t", sched, comp, 2, 0, &e))
            rc = 1;
    }
    if (!rc && kv_map_groups_pad(&m, pad, &e))
        rc = 1;
    snprintf(msg, KV_ERR_MAX, "%s", rc ? e.msg : "");
    kv_map_groups_release(&m);
    return rc;
}

static void refusals(void)
{
    const char *two[] = { "a", "b" }, *named[] = { "g0=a", "g1=b" };
    const char *mixed[] = { "g0=a", "b" }, *twice[] = { "g1=a", "g1=b" };
    const char *past[] = { "g2=a" }, *one[] = { "g1=a" };
    char msg[KV_ERR_MAX];

    TAP_OK(!refused(two, 2, NULL, -1, msg) && !refused(named, 2, NULL, 8, msg),
           "tables in order or by name, --pad-to the tokens");
    TAP_OK(refused(two, 1, NULL, -1, msg) &&
           !strcmp(msg, "--block-table: 1 tables for 2 groups (name them "
                        "gK=FILE to give some)"), "too few tables: %s", msg);
    TAP_OK(refused(mixed, 2, NULL, -1, msg) && strstr(msg, "every table as"),
           "named and unnamed: %s", msg);
    TAP_OK(refused(twice, 2, NULL, -1, msg) &&
           !strcmp(msg, "--block-table: two tables for group 1"),
           "two for one group: %s", msg);
    TAP_OK(refused(past, 1, NULL, -1, msg) &&
           !strcmp(msg, "--block-table: 'g2=a': the groups are g0 to g1"),
           "past the last group: %s", msg);
    TAP_OK(refused(one, 1, NULL, -1, msg) &&
           !strcmp(msg, "--block-table: none for group 0 (sliding_window)"),
           "a group without one: %s", msg);
    TAP_OK(refused(two, 2, "positions.g0", -1, msg) &&
           !strcmp(msg, "--fields: 'positions.g0': positions is one for "
                        "every group"), "a shared field per group: %s", msg);
    TAP_OK(refused(two, 2, "slot_mapping.x", -1, msg) &&
           !strcmp(msg, "--fields: 'slot_mapping.x': expected NAME.gK"),
           "not NAME.gK: %s", msg);
    TAP_OK(refused(two, 2, "slot_mapping,,positions", -1, msg) &&
           !strcmp(msg, "--fields: empty name in ',positions'"),
           "an empty name: %s", msg);
    TAP_OK(refused(two, 2, "slots", -1, msg) &&
           !strncmp(msg, "--fields: unknown field 'slots' for map; valid: "
                         "query_start_loc seq_lens ", 73),
           "an unknown name: %s", msg);
    TAP_OK(refused(two, 2, NULL, 7, msg) &&
           !strcmp(msg, "--pad-to 7 is less than the 8 scheduled tokens"),
           "--pad-to below the tokens: %s", msg);
}

static void fields_once(void)
{
    struct kv_map_groups_opts o;
    struct kv_map_groups m;
    struct kv_err e;
    const char *two[] = { "a", "b" };
    int usage;

    memset(&o, 0, sizeof o);
    o.kv_groups = "2*(sliding=8,full)";
    kv_map_groups_init(&m);
    TAP_OK(!kv_map_groups_load(&m, &o, &usage, &e) &&
           !kv_map_groups_tables(&m, two, 2, &e) &&
           !kv_map_groups_fields(&m, "block_numbers.g1,positions,"
                                     "block_numbers,slot_mapping.g0", &e) &&
           m.nf == 3 && m.fl[0] == KV_SLOT_BLOCK_NUMBERS &&
           m.fl[1] == KV_SLOT_POSITIONS && m.fl[2] == KV_SLOT_SLOT_MAPPING &&
           m.g[0].sel[KV_SLOT_BLOCK_NUMBERS] &&
           m.g[1].sel[KV_SLOT_BLOCK_NUMBERS] &&
           m.g[0].sel[KV_SLOT_SLOT_MAPPING] &&
           !m.g[1].sel[KV_SLOT_SLOT_MAPPING],
           "each name once, at its first place; NAME.gK selects group K");
    kv_map_groups_release(&m);
}

int main(void)
{
    random_steps();
    refusals();
    fields_once();
    return tap_done();
}
