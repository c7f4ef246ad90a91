/* kvchunk_sim.c - `kvchunk sim`: trace replay (see man 1 kvchunk). */
#include "kv.h"
#include "kvchunk_sim.h"

int kvchunk_sim_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return kv_usage("sim: not built yet");
}
