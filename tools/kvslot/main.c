/* kvslot - slot mapping and the per-step attention metadata of vLLM's model
 * runner, the scheduler and block allocator over many steps, and the
 * context-parallel layouts (see man 1 kvslot).
 *
 *   kvslot map    one step from a block table and token counts
 *   kvslot plan   the scheduler and block allocator, step by step
 *   kvslot pcp    the DualChunkSwap split of prefill context parallelism
 *   kvslot cplens per-rank KV lengths under interleaving
 *   kvslot reorg  MLA context parallel: the AllGatherKV index map
 *   kvslot hash   vLLM's prefix-caching block hashes of prompts
 *   kvslot groups the KV-cache groups, page and block sizes of a model
 *   kvslot step   a step's backend metadata: chunked local attention's
 *                 virtual batches, a speculative-decoding tree's positions
 *   kvslot local  the same as step --chunk-size (its older name)
 *
 * One file per subcommand in this folder, dispatched by the table below.
 * Every output is a list of named integer arrays: text `name: v v v` (a
 * 2-d array prints one such line per row) or a .npy stream with one array
 * per field in the same order (man 5 kvnpy). */
#include "kvslot.h"

static void usage_list(void)
{
    printf("Usage: %s SUBCOMMAND [options]\n"
           "  map     one step's metadata from a block table\n"
           "  plan    the scheduler and block allocator, step by step\n"
           "  pcp     the DualChunkSwap split of prefill context "
           "parallelism\n"
           "  cplens  per-rank KV lengths under interleaving\n"
           "  reorg   MLA context parallel: the AllGatherKV index map\n"
           "  groups  the KV-cache groups of a hybrid model (vLLM's builder)\n"
           "  step    a step's backend metadata: local attention's virtual "
           "batches\n"
           "          (--chunk-size), a token tree's positions (--parents)\n"
           "  local   the same as 'step --chunk-size'\n"
           "  hash    vLLM's prefix-caching block hashes of prompts\n"
           "'%s SUBCOMMAND --help' lists the options.\n",
           kv_progname(), kv_progname());
}

/* plan with --chunk-cache is seed 001's flow (plan_cc.c), else the
 * scheduler (plan.c). */
int cmd_plan(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--chunk-cache"))
            return cmd_plan_cc(argc, argv);
    return cmd_plan_sched(argc, argv);
}

static const struct cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
} cmds[] = {
    { "map", cmd_map },
    { "plan", cmd_plan },
    { "pcp", cmd_pcp },
    { "cplens", cmd_cplens },
    { "reorg", cmd_reorg },
    { "hash", cmd_hash },
    { "groups", cmd_groups },
    { "step", cmd_step },
    { "local", cmd_local },
};

int main(int argc, char **argv)
{
    kv_setprogname(argv[0]);
    if (argc < 2)
        return kv_usage("missing subcommand (map, plan, pcp or cplens)");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage_list();
        return kv_close_stdout();
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("%s (kvtools) %s\n", kv_progname(), KV_VERSION);
        return kv_close_stdout();
    }
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (strcmp(argv[1], cmds[i].name) == 0)
            return cmds[i].fn(argc - 1, argv + 1);
    return kv_usage("unknown subcommand '%s' (map, plan, pcp or cplens)",
                    argv[1]);
}
