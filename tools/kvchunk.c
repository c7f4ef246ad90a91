/* kvchunk - the position-independent chunk cache (see man 1 kvchunk).
 *
 * One program with subcommands; `kvchunk sim ...` lives in kvchunk_sim.c. */
#include <string.h>
#include "kv.h"
#include "kvchunk_sim.h"

int main(int argc, char **argv)
{
    kv_setprogname(argv[0]);
    if (argc < 2)
        return kv_usage("missing subcommand");
    if (strcmp(argv[1], "sim") == 0)
        return kvchunk_sim_main(argc - 1, argv + 1);
    return kv_usage("unknown subcommand '%s'", argv[1]);
}
