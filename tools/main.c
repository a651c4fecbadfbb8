/*
 * specdec command-line interface.
 *
 *   specdec generate  [--config F] -m TARGET [-md DRAFT] [-p TEXT | -f FILE] [options]
 *   specdec convert   CKPT.bin TOKENIZER.bin OUT.gguf
 *   specdec quantize  IN.gguf OUT.gguf TYPE   (q8_0, q4_0, q4_1, q5_0, q5_1, q2_k ... q6_k,
 *                                              q4_k_m, q5_k_m)
 *   specdec info      FILE.gguf
 *   specdec tokenize  -m FILE.gguf [--no-bos] [--special] (-p TEXT | -f FILE)
 *   specdec serve     -m TARGET [-md DRAFT] [--host H --port N -np N]   (HTTP server)
 *   specdec --version
 *
 * Errors print one line "specdec: <what>" to stderr and exit 1 (2 for usage errors).
 * Each command lives in its own file (tools/common/sd_cli.h lists them); this one dispatches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"
#include "sd_version.h" /* generated at build time (scripts/version.cmake) */

#define HINT "see 'specdec --help'"

static int usage_error(const char *fmt, const char *arg) {
    return sd_cli_usage(HINT, fmt, arg);
}

static void print_help(FILE *f) {
    fprintf(f, "usage: specdec <command> [options]   (specdec <command> --help: its options;\n"
               "                                      specdec --version)\n"
               "\n"
               "commands:\n"
               "  generate   speculative (or target-alone) generation\n"
               "  convert    CKPT.bin TOKENIZER.bin OUT.gguf   llama2.c checkpoint -> GGUF (f32)\n"
               "  quantize   IN.gguf OUT.gguf TYPE             quantized copy (q8_0, q4_k_m, ...)\n"
               "  info       FILE.gguf                         architecture, sizes, types, vocab\n"
               "  tokenize   -m FILE.gguf [--no-bos] [--special] (-p TEXT | -f FILE)  token ids\n"
               "  bench      A/B benchmark, target alone vs speculative (--kernels: bandwidth)\n"
               "  synth      -o DIR [--preset P --type T --noise S]  synthetic target/draft pair\n"
               "  perplexity -m FILE.gguf -f TEXT [--ctx N]   mean NLL (nats/token) over stories\n"
               "  compare    -m FILE.gguf [--device cuda]    logits on two devices (or split)\n"
               "  serve      -m TARGET [-md DRAFT] [--port N]  OpenAI-compatible HTTP server\n"
               "\n");
    sd_cli_generate_help(f);
}

static int dispatch(int argc, char **argv) {
    const char *cmd = argv[1];
    if (!strcmp(cmd, "generate")) return sd_cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert")) return sd_cmd_convert(argc - 1, argv + 1);
    if (!strcmp(cmd, "quantize")) return sd_cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return sd_cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return sd_cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return sd_cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return sd_cmd_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "perplexity")) return sd_cmd_perplexity(argc - 1, argv + 1);
    if (!strcmp(cmd, "compare")) return sd_cmd_compare(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return sd_cmd_serve(argc - 1, argv + 1);
    return usage_error("unknown command '%s'", cmd);
}

int main(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version"))) {
        printf("specdec %s\n", SD_VERSION_STRING);
        return sd_cli_finish_stdout(EXIT_SUCCESS);
    }
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        print_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? SD_EXIT_USAGE : sd_cli_finish_stdout(EXIT_SUCCESS);
    }
    /* A fatal signal removes the temporary file being written (tools/common/outfile.c). */
    sd_cli_signals_install();
    /* Everything written to stdout must have got there (a full disk, /dev/full). */
    return sd_cli_finish_stdout(dispatch(argc, argv));
}
