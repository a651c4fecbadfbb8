/*
 * The model-file commands of the specdec CLI: convert (llama2.c -> GGUF), quantize,
 * info and tokenize.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/sd_quant.h"
#include "runtime/cli/cli.h"
#include "runtime/convert/sd_convert.h"
#include "runtime/gguf/sd_gguf.h"
#include "runtime/tokenizer/sd_vocab.h"

#define HINT "see 'specdec --help'"

static int usage_error(const char *fmt, const char *arg) {
    return sd_cli_usage(HINT, fmt, arg);
}

int sd_cmd_convert(int argc, char **argv) {
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
    if (argc != 4) return usage_error("%s", "usage: specdec quantize IN.gguf OUT.gguf q8_0|q4_0");
    sd_type t;
    if (sd_type_from_name(argv[3], &t) || (t != SD_TYPE_Q8_0 && t != SD_TYPE_Q4_0))
        return usage_error("quantize: type must be q8_0 or q4_0, found '%s'", argv[3]);
    sd_error err = {0};
    sd_cli_temp_arm(argv[2]); /* a fatal signal removes the temporary */
    int rc = sd_quantize_file(argv[1], argv[2], t, stderr, &err);
    sd_cli_temp_disarm();
    if (rc) return sd_cli_fail(&err);
    fprintf(stderr, "specdec: wrote %s\n", argv[2]);
    return EXIT_SUCCESS;
}

/* ---- info ---- */

int sd_cmd_info(int argc, char **argv) {
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

/* ---- tokenize ---- */

int sd_cmd_tokenize(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},          {"prompt", required_argument, 0, 'p'},
        {"file", required_argument, 0, 'f'},           {"prompt-file", required_argument, 0, 'f'},
        {"no-bos", no_argument, 0, SD_CLI_OPT_NO_BOS}, {0, 0, 0, 0},
    };
    const char *model = NULL, *text = NULL, *file = NULL;
    int no_bos = 0, o;
    opterr = 0;
    optind = 1;
    while ((o = getopt_long(argc, argv, ":m:p:f:", opts, NULL)) != -1) {
        switch (o) {
        case 'm':
            model = optarg;
            break;
        case 'p':
            text = optarg;
            break;
        case 'f':
            file = optarg;
            break;
        case SD_CLI_OPT_NO_BOS:
            no_bos = 1;
            break;
        case ':':
            return usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (!model) return usage_error("%s", "tokenize: -m FILE.gguf is required");
    if (!!text == !!file)
        return usage_error("%s", "tokenize: give exactly one of -p TEXT or -f FILE");
    sd_error err = {0};
    char *buf = NULL;
    size_t len = 0;
    if (file) {
        if (sd_cli_read_file(file, &buf, &len, &err)) return sd_cli_fail(&err);
        text = buf;
    } else {
        len = strlen(text);
    }
    sd_gguf *g = NULL;
    sd_vocab *v = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = sd_gguf_open(model, &g, &err);
    if (!rc) rc = sd_vocab_load(g, &v, &err);
    if (!rc) rc = sd_vocab_tokenize(v, text, len, !no_bos && sd_vocab_add_bos(v), &ids, &n, &err);
    if (!rc) {
        for (size_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
    }
    free(ids);
    sd_vocab_free(v);
    sd_gguf_close(g);
    free(buf);
    return rc ? sd_cli_fail(&err) : EXIT_SUCCESS;
}
