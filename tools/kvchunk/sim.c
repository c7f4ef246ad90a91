/* kvchunk sim: trace replay, gen and from-split (lib/chunk/chunk_sim,
 * lib/sim); the dispatch. */
#include "kvchunk.h"

int cmd_sim(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "gen"))
        return cmd_sim_gen(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "from-split"))
        return cmd_sim_from_split(argc - 1, argv + 1);
    return cmd_sim_replay(argc, argv);
}
