/* kvchunk - the position-independent chunk cache (see man 1 kvchunk).
 *
 * One program with subcommands, one file each in this folder, dispatched
 * by the table below.  Every computation is in lib/ (chunk, blob, store,
 * rope, toy, sim, trace); the subcommands parse options, validate, call,
 * and write once. */
#include "kvchunk.h"

static int usage_all(FILE *f)
{
    fprintf(f, "Usage: %s SUBCOMMAND [options]\n\n"
            "  split     prompt -> segments sys, chunks, question (+ keys)\n"
            "  key       content key of a chunk\n"
            "  info      what kvchunk understood of a model (--model-config)\n"
            "  put       store a chunk's KV\n"
            "  get       a cached chunk's KV moved to --at (exit 3: miss)\n"
            "  assemble  a prompt's KV from the store, misses listed\n"
            "  ls        list entries\n"
            "  stat      counters\n"
            "  evict     evict to --max-size\n"
            "  fsck      check (and --repair) the store\n"
            "  rm        remove entries\n"
            "  pin, unpin  keep entries from eviction\n"
            "  toy       the toy projection: token ids -> KV\n"
            "  slice     one layer's K or V for kvattn\n"
            "  selftest-rope  moves of this RoPE against the exact rotation\n"
            "  sim       trace simulation (kvchunk sim --help)\n\n"
            "'%s SUBCOMMAND --help' lists its options; see man 1 kvchunk.\n",
            kv_progname(), kv_progname());
    return 0;
}

static const struct cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
} cmds[] = {
    { "sim", cmd_sim },
    { "split", cmd_split },
    { "key", cmd_key },
    { "info", cmd_info },
    { "put", cmd_put },
    { "get", cmd_get },
    { "assemble", cmd_assemble },
    { "toy", cmd_toy },
    { "slice", cmd_slice },
    { "selftest-rope", cmd_selftest_rope },
    { "ls", cmd_ls },
    { "stat", cmd_stat },
    { "evict", cmd_evict },
    { "fsck", cmd_fsck },
    { "rm", cmd_rm },
    { "pin", cmd_pin },
    { "unpin", cmd_unpin },
};

int main(int argc, char **argv)
{
    kv_setprogname(argv[0]);
    /* a file size limit is an error to report, not a signal to die of */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2)
        return kv_usage("missing subcommand");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
        usage_all(stdout);
        return kv_close_stdout();
    }
    if (!strcmp(cmd, "--version")) {
        printf("%s (kvtools) %s\n", kv_progname(), KV_VERSION);
        return kv_close_stdout();
    }
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (!strcmp(cmd, cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
    return kv_usage("unknown subcommand '%s'", cmd);
}
