/*
 * tools/tools.h: the commands of the specdec program (not part of the library; the .c
 * files of tools/ and tools/common/ are built as specdec_cli so tests can call their
 * pieces, tools/main.c alone is the executable). The commands may include every face, the
 * server's and what they share (tools/common/sd_cli.h); nothing in the library includes
 * them. Private to tools/ (and the tests).
 * Each command takes the arguments after "specdec" (argv[0] is the command name) and
 * returns the process exit status: 0 ok, 1 error (one line "specdec: ..." on stderr),
 * 2 usage error. `specdec CMD --help` prints each command's options.
 *
 *   generate    cmd_generate.c   speculative (or target-alone) generation
 *   convert     cmd_model.c      llama2.c checkpoint -> GGUF
 *   quantize    cmd_model.c      a quantized copy of a GGUF model
 *   info        cmd_model.c      what a GGUF file holds
 *   tokenize    cmd_tokenize.c   token ids (or "id -> 'piece'" lines) of a text
 *   bench       bench.c          A/B benchmark (target alone vs speculative, ABAB, same
 *               bench_ab.c       seeds) with measured vs predicted speedup; --kernels
 *               bench_kernels.c  (bandwidth, verification-pass cost, prefill)
 *   synth       synth.c          llama-shaped GGUF pairs of real shapes with seeded
 *               synth_weights.c  random weights (a target that grows a draft + noise)
 *               roof.c           --roof / the roof of --kernels: best streaming read
 *   perplexity  perplexity.c     mean NLL (nats/token) and perplexity over stories
 *   compare     compare.c        logits of one model on two devices (or split)
 *   serve       cmd_serve.c      the OpenAI-compatible HTTP server (runtime/server)
 *
 * Below them, the pieces the commands share: tools/common/sd_cli.h.
 */
#ifndef SD_TOOLS_H
#define SD_TOOLS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/base/sd_base.h"
#include "tools/common/sd_cli.h"

#ifdef __cplusplus
extern "C" {
#endif

int sd_cmd_generate(int argc, char **argv);   /* tools/cmd_generate.c */
int sd_cmd_convert(int argc, char **argv);    /* tools/cmd_model.c */
int sd_cmd_quantize(int argc, char **argv);   /* tools/cmd_model.c */
int sd_cmd_info(int argc, char **argv);       /* tools/cmd_model.c */
int sd_cmd_tokenize(int argc, char **argv);   /* tools/cmd_tokenize.c */
int sd_cmd_synth(int argc, char **argv);      /* tools/synth.c */
int sd_cmd_compare(int argc, char **argv);    /* tools/compare.c */
int sd_cmd_bench(int argc, char **argv);      /* tools/bench.c */
int sd_cmd_perplexity(int argc, char **argv); /* tools/perplexity.c */
int sd_cmd_serve(int argc, char **argv);      /* tools/cmd_serve.c */

/* The options of `specdec generate` (its --help; also part of `specdec --help`). */
void sd_cli_generate_help(FILE *f);

/* ---- the memory roof (tools/roof.c) ---- */

typedef struct sd_cli_roof {
    int32_t threads, passes;
    size_t bytes;       /* buffer size */
    const char *kernel; /* loads used: "avx512", "avx2" or "scalar" (static strings) */
    double gbps;        /* best pass, 1e9 bytes/s */
    double gbps_median; /* median pass */
} sd_cli_roof;

/*
 * The best streaming read of a mib MiB buffer (huge pages requested) by `threads`
 * threads, each reading its own contiguous slice with the widest loads the CPU has
 * (kernel NULL) or the named ones ("avx512", "avx2", "scalar"); best and median of
 * `passes` timed passes after one untimed pass. Errors: SD_ERR_ARG (ranges: mib 1..2^24,
 * threads 1..4096, passes >= 1), SD_ERR_UNSUPPORTED (kernel not available), SD_ERR_OOM,
 * SD_ERR_IO (a thread could not start). Method: the comment at the top of roof.c.
 */
int sd_cli_roof_measure(int64_t mib, int32_t threads, int32_t passes, const char *kernel,
                        sd_cli_roof *out, sd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* SD_TOOLS_H */
