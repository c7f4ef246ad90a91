/* kvxattn - XAttention sparse block selection (see man 1 kvxattn).
 *
 *   kvxattn estimate -q Q -k K [options]   the block mask (and block sums)
 *   kvxattn recall -q Q -k K --mask M      exact mass the kept blocks cover
 *
 * Thin: options -> lib/attn/xattn.c -> output.  One file per subcommand in
 * this folder, dispatched by the table below. */
#include "kvxattn.h"

static const struct cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
} cmds[] = {
    { "estimate", cmd_estimate },
    { "recall", cmd_recall },
};

int main(int argc, char **argv)
{
    kv_setprogname(argv[0]);
    if (argc < 2)
        return kv_usage("missing subcommand (estimate or recall)");
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (strcmp(argv[1], cmds[i].name) == 0)
            return cmds[i].fn(argc - 1, argv + 1);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        printf("Usage: %s estimate|recall [options]\n"
               "  estimate  the XAttention block mask of Q and K\n"
               "  recall    the exact attention mass a block mask covers\n"
               "'%s SUBCOMMAND --help' lists the options.\n",
               kv_progname(), kv_progname());
        return kv_close_stdout();
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("%s (kvtools) %s\n", kv_progname(), KV_VERSION);
        return kv_close_stdout();
    }
    return kv_usage("unknown subcommand '%s' (estimate or recall)", argv[1]);
}
