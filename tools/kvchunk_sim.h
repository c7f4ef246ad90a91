/* kvchunk_sim.h - the `kvchunk sim` subcommands, a second part of the
 * kvchunk program (tools/kvchunk_sim.c). */
#ifndef KVCHUNK_SIM_H
#define KVCHUNK_SIM_H
/* argv[0] is "sim"; returns the exit status. */
int kvchunk_sim_main(int argc, char **argv);
#endif
