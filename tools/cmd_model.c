/*
 * The model-file commands of the specdec CLI: convert (llama2.c -> GGUF), quantize and
 * info (tokenize: cmd_tokenize.c). Outputs are written only over regular files, never
 * over an input (runtime/convert checks), and their temporary is removed by a fatal
 * signal (armed here).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/sd_quant.h"
#include "tools/tools.h"
#include "runtime/convert/sd_convert.h"
#include "runtime/gguf/sd_gguf.h"
#include "runtime/tokenizer/sd_vocab.h"

#define HINT "see 'specdec --help'"

static int usage_error(const char *fmt, const char *arg) {
    return sd_cli_usage(HINT, fmt, arg);
}

/* A single argument -h / --help. */
static int wants_help(int argc, char **argv) {
    return argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"));
}

static const char k_convert_help[] =
    "usage: specdec convert CKPT.bin TOKENIZER.bin OUT.gguf\n"
    "  a llama2.c checkpoint (export.py legacy format) and its tokenizer.bin -> a GGUF\n"
    "  model (architecture llama, SentencePiece vocabulary, F32). OUT is written\n"
    "  atomically; it must be a new or regular file, not one of the inputs.\n";

static const char k_quantize_help[] =
    "usage: specdec quantize IN.gguf OUT.gguf TYPE\n"
    "  a copy of IN with its 2-D weight matrices in TYPE: f32, f16, bf16, q8_0, q4_0,\n"
    "  q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k (all matrices, as llama-quantize\n"
    "  --pure), or the mixes q4_k_m, q5_k_m (classifier and some attn_v / ffn_down in\n"
    "  q6_k, as llama-quantize). Rows whose length is not a multiple of the block fall\n"
    "  back as llama.cpp does (K-quants to q5_0/q5_1/q8_0/q4_0, then f16); norms stay\n"
    "  f32; a NaN or infinity in IN is refused. OUT is written atomically; it must be a\n"
    "  new or regular file, not IN.\n";

static const char k_info_help[] = "usage: specdec info FILE.gguf\n"
                                  "  GGUF version, architecture and hyper-parameters, tensor\n"
                                  "  types and sizes, vocabulary\n";

/* Quantize progress on a terminal: the tensor count, rewritten in place. */
static void quantize_progress(void *user, int64_t done, int64_t total, const char *name) {
    (void)user;
    sd_cli_progress("\rspecdec quantize: tensor %lld/%lld %-40.40s", (long long)done,
                    (long long)total, name);
    if (done == total) sd_cli_progress("\n");
}

int sd_cmd_convert(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(k_convert_help, stdout);
        return EXIT_SUCCESS;
    }
    if (argc != 4)
        return usage_error("%s", "usage: specdec convert CKPT.bin TOKENIZER.bin OUT.gguf");
    sd_error err = {0};
    sd_cli_temp_arm(argv[3]); /* a fatal signal removes the temporary */
    int rc = sd_convert_llama2c(argv[1], argv[2], argv[3], &err);
    sd_cli_temp_disarm();
    if (rc) return sd_cli_fail(&err);
    fprintf(stderr, "specdec: wrote %s\n", argv[3]);
    return EXIT_SUCCESS;
}

int sd_cmd_quantize(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(k_quantize_help, stdout);
        return EXIT_SUCCESS;
    }
    if (argc != 4)
        return usage_error("usage: specdec quantize IN.gguf OUT.gguf TYPE, TYPE one of %s",
                           sd_quant_recipe_names());
    sd_quant_recipe r;
    if (sd_quant_recipe_from_name(argv[3], &r)) {
        char msg[256];
        snprintf(msg, sizeof msg, "quantize: TYPE: expected one of %s, found '%%s'",
                 sd_quant_recipe_names());
        return usage_error(msg, argv[3]);
    }
    sd_error err = {0};
    sd_cli_temp_arm(argv[2]); /* a fatal signal removes the temporary */
    int rc = sd_quantize_file_recipe(argv[1], argv[2], &r, stderr, quantize_progress, NULL, &err);
    sd_cli_temp_disarm();
    if (rc) return sd_cli_fail(&err);
    fprintf(stderr, "specdec: wrote %s\n", argv[2]);
    return EXIT_SUCCESS;
}

/* ---- info ---- */

int sd_cmd_info(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(k_info_help, stdout);
        return EXIT_SUCCESS;
    }
    if (argc != 2) return usage_error("%s", "usage: specdec info FILE.gguf");
    sd_error err = {0};
    sd_gguf *g = NULL;
    if (sd_gguf_open(argv[1], &g, &err)) return sd_cli_fail(&err);
    printf("file            %s\n", argv[1]);
    printf("gguf version    %u, alignment %u, %lld metadata keys, %lld tensors\n",
           sd_gguf_version(g), sd_gguf_alignment(g), (long long)sd_gguf_n_kv(g),
           (long long)sd_gguf_n_tensors(g));
    const char *arch = NULL;
    size_t arch_len = 0;
    if (sd_gguf_get_str(g, "general.architecture", &arch, &arch_len, NULL) == SD_OK)
        printf("architecture    %.*s\n", (int)arch_len, arch);
    static const char *keys[] = {
        "llama.context_length",       "llama.embedding_length",     "llama.block_count",
        "llama.feed_forward_length",  "llama.attention.head_count", "llama.attention.head_count_kv",
        "llama.rope.dimension_count",
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int64_t v;
        if (sd_gguf_get_i64(g, keys[i], &v, NULL) == SD_OK)
            printf("%-31s %lld\n", keys[i], (long long)v);
    }
    float f;
    if (sd_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f, NULL) == SD_OK)
        printf("%-31s %g\n", "llama.attention.layer_norm_rms_epsilon", f);
    if (sd_gguf_get_f32(g, "llama.rope.freq_base", &f, NULL) == SD_OK)
        printf("%-31s %g\n", "llama.rope.freq_base", f);
    /* Tensor types and bytes. */
    size_t bytes_by_type[64] = {0};
    int64_t count_by_type[64] = {0};
    size_t total = 0;
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        if (t->type < 64) {
            bytes_by_type[t->type] += t->nbytes;
            count_by_type[t->type]++;
        }
        total += t->nbytes;
    }
    printf("tensor data     %.2f MiB:", total / 1048576.0);
    for (int t = 0; t < 64; t++)
        if (count_by_type[t])
            printf(" %s x%lld (%.2f MiB)", sd_type_name((uint32_t)t), (long long)count_by_type[t],
                   bytes_by_type[t] / 1048576.0);
    printf("\n");
    sd_vocab *v = NULL;
    if (sd_vocab_load(g, &v, &err) == SD_OK) {
        printf("vocab           %s, %d tokens, bos %d, eos %d, unk %d, add_bos %d\n",
               sd_vocab_model_name(v), sd_vocab_n_tokens(v), sd_vocab_bos(v), sd_vocab_eos(v),
               sd_vocab_unk(v), sd_vocab_add_bos(v));
        sd_vocab_free(v);
    } else {
        printf("vocab           none (%s)\n", err.msg);
    }
    sd_gguf_close(g);
    return EXIT_SUCCESS;
}
