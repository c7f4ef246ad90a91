/* kvattn - reference attention on the CPU: run, merge, cmp, gen, bound,
 * mla (see man 1 kvattn).
 *
 * One program with subcommands, one file each in this folder, dispatched
 * by the table below.  Each subcommand parses its own options into a
 * struct, then reads and validates every input, computes through lib/attn
 * (attention, merge, cmp, gen, bound, mla), and writes its output once.
 * Nothing reaches stdout on an error.
 */
#include "kvattn.h"

static int usage_main(int to_stdout)
{
    FILE *f = to_stdout ? stdout : stderr;
    fprintf(f, "Usage: kvattn run -q Q -k K -v V [options]   attention (O and LSE)\n"
               "       kvattn merge OUT1 LSE1 OUT2 LSE2 ... [-o OUT] [--lse-out FILE]\n"
               "       kvattn cmp A B [--atol X --rtol Y] [--mass]\n"
               "       kvattn gen --shape B,H,S,D [--kv-heads H] [--pattern P] [--seed N]\n"
               "       kvattn bound -q Q -k K -v V [--routes N]   the documented error bound\n"
               "       kvattn mla -q Q --kv-cache C ... | --c-kv C ...   latent attention (MLA)\n"
               "       kvattn quant --kv-dtype fp8_e4m3 -k K -v V [--k-scale S --v-scale S]   FP8 cache\n"
               "       kvattn index -q Q -k K --weights W [--topk N]   DeepSeek-V3.2's indexer top-k\n"
               "'kvattn SUBCOMMAND --help' lists the options; man 1 kvattn explains them.\n");
    if (to_stdout)
        return kv_close_stdout();
    return KV_EXIT_USAGE;
}

static const struct cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
} cmds[] = {
    { "run", cmd_run },
    { "merge", cmd_merge },
    { "cmp", cmd_cmp },
    { "gen", cmd_gen },
    { "bound", cmd_bound },
    { "mla", cmd_mla },
    { "quant", cmd_quant },
    { "index", cmd_index },
};

int main(int argc, char **argv)
{
    kv_setprogname(argv[0]);
    if (argc < 2) {
        kv_warn("missing subcommand");
        return usage_main(0);
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return usage_main(1);
    if (strcmp(cmd, "--version") == 0) {
        printf("kvattn (kvtools) %s\n", KV_VERSION);
        return kv_close_stdout();
    }
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (strcmp(cmd, cmds[i].name) == 0)
            return cmds[i].fn(argc - 1, argv + 1);
    return kv_usage("unknown subcommand '%s' (run, merge, cmp, gen, bound, mla, quant, index)", cmd);
}
