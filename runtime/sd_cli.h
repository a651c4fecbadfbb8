/*
 * Sub-commands of the specdec CLI that live in their own files. Each takes the
 * arguments after "specdec" (argv[0] is the command name) and returns the process exit
 * status: 0 ok, 1 error (one line "specdec: ..." on stderr), 2 usage error.
 *
 *   specdec synth  (runtime/synth.c)  llama-shaped GGUF pairs of real shapes with seeded
 *                                     random weights: a draft and a target that is a
 *                                     grown copy of it plus noise (--noise dials how
 *                                     often they agree)
 *   specdec bench  (runtime/bench.c)  A/B benchmark (target alone vs speculative, ABAB,
 *                                     same seeds) with measured vs predicted speedup;
 *                                     --kernels: bandwidth, verification-pass cost,
 *                                     prefill throughput
 *   specdec perplexity (runtime/perplexity.c)  mean NLL (nats/token) and perplexity of
 *                                     a model over the stories of a text file
 */
#ifndef SD_CLI_H
#define SD_CLI_H

#ifdef __cplusplus
extern "C" {
#endif

int sd_cmd_synth(int argc, char **argv);
int sd_cmd_bench(int argc, char **argv);
int sd_cmd_perplexity(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif /* SD_CLI_H */
