/*
 * specdec command-line interface.
 *
 *   specdec generate  [--config F] -m TARGET [-md DRAFT] [-p TEXT | -f FILE] [options]
 *   specdec convert   CKPT.bin TOKENIZER.bin OUT.gguf
 *   specdec quantize  IN.gguf OUT.gguf q8_0|q4_0
 *   specdec info      FILE.gguf
 *   specdec tokenize  -m FILE.gguf [--no-bos] (-p TEXT | -f FILE)
 *
 * Errors print one line "specdec: <what>" to stderr and exit 1 (2 for usage errors).
 */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "draft/sd_draft.h"
#include "quant/sd_quant.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/config.h"
#include "runtime/convert/sd_convert.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/gguf/sd_gguf.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "target/sd_target.h"
#include "verify/sd_verify.h"

#define HINT "see 'specdec --help'"

static int usage_error(const char *fmt, const char *arg) {
    return sd_cli_usage(HINT, fmt, arg);
}

static void print_help(FILE *f) {
    fprintf(f, "usage: specdec <command> [options]\n"
               "\n"
               "commands:\n"
               "  generate   speculative (or target-alone) generation\n"
               "  convert    CKPT.bin TOKENIZER.bin OUT.gguf   llama2.c checkpoint -> GGUF (f32)\n"
               "  quantize   IN.gguf OUT.gguf q8_0|q4_0        quantized copy of a GGUF model\n"
               "  info       FILE.gguf                         architecture, sizes, types, vocab\n"
               "  tokenize   -m FILE.gguf [--no-bos] (-p TEXT | -f FILE)   print token ids\n"
               "  bench      A/B benchmark, target alone vs speculative (--kernels: bandwidth)\n"
               "  synth      -o DIR [--preset P --type T --noise S]  synthetic target/draft pair\n"
               "  perplexity -m FILE.gguf -f TEXT [--ctx N]   mean NLL (nats/token) over stories\n"
               "  compare    -m FILE.gguf [--device cuda]    logits on two devices (or split)\n"
               "\n"
               "generate options (llama.cpp spellings in parentheses):\n"
               "  --config FILE            JSON pair config (flags override it)\n"
               "  --target FILE   (-m, --model)         target GGUF\n"
               "  --draft FILE    (-md, --model-draft)  draft GGUF\n"
               "  --no-draft               target alone (the A side of an A/B run)\n"
               "  --prompt TEXT   (-p)     prompt text\n"
               "  --prompt-file F (-f)     read the prompt from a file\n"
               "  --max-tokens N  (-n, --n-predict)    tokens to generate (default 128)\n"
               "  --draft-tokens K (-k, --draft-max)   tokens drafted per step, 1..16 (default 4)\n"
               "  --temp T                 temperature, 0 = greedy (default 0.8)\n"
               "  --top-k N                top-k, 0 = off (default 40)\n"
               "  --top-p P                top-p, 1 = off (default 0.95)\n"
               "  --seed S        (-s)     RNG seed (default 42)\n"
               "  --threads N     (-t)     threads, 0 = all cores (default 0)\n"
               "  --ctx-size N    (-c)     context size, 0 = the target's (default 0)\n"
               "  --no-bos                 do not prepend BOS to the prompt\n"
               "  --kv-type f32|f16        KV-cache element type (default f32)\n"
               "  --device cpu|cuda (-dev) where the target runs (default cpu)\n"
               "  --device-draft D (-devd) where the draft runs (default: --device)\n"
               "  -ngl N, -ngld N          llama.cpp's GPU layers: N > 0 runs the target (draft)\n"
               "                           on the GPU, every layer; 0 the CPU\n"
               "  --tensor-split N (-ts)   split the target over N GPUs (tensor parallel;\n"
               "                           -ts 1,1 and -sm row, every GPU, mean the same)\n"
               "  --json                   print one JSON object on stdout instead of text\n");
}

/* llama.cpp's multi-letter short flags (-md) are rewritten to their long forms. */
static void rewrite_aliases(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (!strcmp(argv[i], "-md")) argv[i] = "--model-draft";
        if (!strcmp(argv[i], "-ngl")) argv[i] = "--n-gpu-layers";
        if (!strcmp(argv[i], "-ngld")) argv[i] = "--n-gpu-layers-draft";
        if (!strcmp(argv[i], "-ts")) argv[i] = "--tensor-split";
        if (!strcmp(argv[i], "-sm")) argv[i] = "--split-mode";
        if (!strcmp(argv[i], "-dev")) argv[i] = "--device";
        if (!strcmp(argv[i], "-devd")) argv[i] = "--device-draft";
    }
}

/* ---- generate ---- */

enum { OPT_NO_DRAFT = SD_CLI_OPT_OWN, OPT_JSON };

typedef struct gen_cli {
    sd_cli_gen_opts g;
    int no_draft, json;
} gen_cli;

static int generate_option(int o, const char *arg, void *user) {
    gen_cli *c = user;
    switch (o) {
    case OPT_NO_DRAFT:
        c->no_draft = 1;
        return 0;
    case OPT_JSON:
        c->json = 1;
        return 0;
    case 'h':
        print_help(stdout);
        return -1;
    default:
        return SD_CLI_PASS;
    }
}

static int parse_generate(int argc, char **argv, gen_cli *c) {
    static const struct option opts[] = {
        SD_CLI_GEN_LONGOPTS,
        {"no-draft", no_argument, 0, OPT_NO_DRAFT},
        {"json", no_argument, 0, OPT_JSON},
        {0, 0, 0, 0},
    };
    c->no_draft = c->json = 0;
    return sd_cli_gen_parse(argc, argv, opts, HINT, &c->g, generate_option, c);
}

typedef struct stream_ctx {
    const sd_vocab *vocab;
    char *buf;
    size_t cap;
} stream_ctx;

static int stream_tokens(void *user, const int32_t *tokens, int32_t n) {
    stream_ctx *s = user;
    for (int32_t i = 0; i < n; i++) {
        int len = sd_vocab_token_to_piece(s->vocab, tokens[i], s->buf, s->cap);
        if (len < 0) continue;
        if ((size_t)len > s->cap) {
            char *nb = realloc(s->buf, (size_t)len);
            if (!nb) return 1;
            s->buf = nb;
            s->cap = (size_t)len;
            sd_vocab_token_to_piece(s->vocab, tokens[i], s->buf, s->cap);
        }
        fwrite(s->buf, 1, (size_t)len, stdout);
    }
    fflush(stdout);
    return 0;
}

static void print_stats(const sd_gen_stats *st, int with_draft, int32_t k) {
    FILE *f = stderr;
    fprintf(f, "\n\n");
    fprintf(f, "generated       %d tokens (prompt %d), stop: %s\n", st->n_generated, st->n_prompt,
            sd_stop_reason_str(st->stop));
    fprintf(f, "target passes   %d\n", st->n_target_passes);
    if (with_draft) {
        fprintf(f, "drafted         %d (K = %d)\n", st->n_drafted, k);
        fprintf(f, "accepted        %d\n", st->n_accepted);
        fprintf(f, "acceptance rate %.3f   (accepted / drafted)\n", sd_stats_acceptance_rate(st));
        fprintf(f, "per position   ");
        for (int32_t i = 0; i < k; i++)
            fprintf(f, " %.3f",
                    st->drafted_at[i] ? (double)st->accepted_at[i] / st->drafted_at[i] : 0.0);
        fprintf(f, "   (accepted / drafted at draft position i)\n");
    }
    fprintf(f, "tokens/pass     %.3f   (emitted / target passes)\n", sd_stats_tokens_per_pass(st));
    fprintf(f, "speed           %.2f tokens/s (decode, prefill excluded)\n",
            sd_stats_tokens_per_s(st));
    fprintf(f, "TTFT            %.2f ms\n", st->ttft_ms);
    fprintf(f, "ITL             %.3f ms (mean)\n", sd_stats_itl_ms(st));
    fprintf(f, "time            prefill %.2f ms, draft %.2f ms, verify %.2f ms, sampling %.2f ms\n",
            st->t_prefill_ms, st->t_draft_ms, st->t_verify_ms, st->t_sample_ms);
}

/* The generated text exactly as streamed: the concatenated pieces of the tokens (a
 * continuation keeps its leading space, unlike llama_detokenize of the ids alone). */
static int pieces_text(const sd_vocab *vocab, const int32_t *toks, int32_t n, char **out,
                       size_t *out_len, sd_error *err) {
    size_t cap = 256, len = 0;
    char *buf = malloc(cap);
    for (int32_t i = 0; buf && i < n; i++) {
        int m = sd_vocab_token_to_piece(vocab, toks[i], buf + len, cap - len);
        if (m < 0) continue;
        if ((size_t)m >= cap - len) {
            size_t ncap = (len + (size_t)m) * 2 + 1;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap = ncap;
            sd_vocab_token_to_piece(vocab, toks[i], buf + len, cap - len);
        }
        len += (size_t)m;
    }
    if (!buf) return sd_errorf(err, SD_ERR_OOM, "out of memory building the output text");
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    return SD_OK;
}

/* Length of the valid UTF-8 sequence at s[0 .. n), or 0 if invalid (RFC 3629). */
static size_t utf8_seq_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

/* Copy with every invalid UTF-8 byte replaced by U+FFFD. malloc'd, NUL-terminated. */
static char *utf8_sanitize(const char *in, size_t n, size_t *out_len) {
    char *out = malloc(n * 3 + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq_len((const unsigned char *)in + i, n - i);
        if (l == 0 || (l == 1 && in[i] == '\0')) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, in + i, l);
            o += l;
            i += l;
        }
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

static int print_json(const sd_vocab *vocab, const int32_t *toks, int32_t n, const sd_gen_stats *st,
                      int32_t k, sd_error *err) {
    char *text = NULL;
    size_t text_len = 0;
    int rc = pieces_text(vocab, toks, n, &text, &text_len, err);
    if (rc) return rc;
    json_t *ids = json_array();
    for (int32_t i = 0; i < n; i++)
        json_array_append_new(ids, json_integer(toks[i]));
    json_t *ppa = json_array();
    for (int32_t i = 0; i < k; i++)
        json_array_append_new(
            ppa,
            json_real(st->drafted_at[i] ? (double)st->accepted_at[i] / st->drafted_at[i] : 0.0));
    json_t *stats = json_pack(
        "{s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:o, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s}",
        "n_prompt", st->n_prompt, "n_generated", st->n_generated, "n_target_passes",
        st->n_target_passes, "n_drafted", st->n_drafted, "n_accepted", st->n_accepted,
        "acceptance_rate", sd_stats_acceptance_rate(st), "tokens_per_pass",
        sd_stats_tokens_per_pass(st), "per_position_acceptance", ppa, "tokens_per_s",
        sd_stats_tokens_per_s(st), "ttft_ms", st->ttft_ms, "itl_ms", sd_stats_itl_ms(st),
        "t_prefill_ms", st->t_prefill_ms, "t_draft_ms", st->t_draft_ms, "t_verify_ms",
        st->t_verify_ms, "t_sample_ms", st->t_sample_ms, "stop", sd_stop_reason_str(st->stop));
    /* jansson needs valid UTF-8: a byte-fallback token or a character cut at -n can
     * leave a partial sequence; such bytes become U+FFFD, as a text decoder would. */
    char *clean = utf8_sanitize(text, text_len, &text_len);
    free(text);
    text = clean;
    if (!text) return sd_errorf(err, SD_ERR_OOM, "out of memory building the output text");
    json_t *root =
        json_pack("{s:s%, s:o, s:o}", "text", text, text_len, "tokens", ids, "stats", stats);
    free(text);
    if (!root) return sd_errorf(err, SD_ERR_OOM, "json: cannot build output");
    char *s = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(root);
    if (!s) return sd_errorf(err, SD_ERR_OOM, "json: cannot build output");
    puts(s);
    free(s);
    return SD_OK;
}

static int cmd_generate(int argc, char **argv) {
    gen_cli c;
    int prc = parse_generate(argc, argv, &c);
    if (prc) return prc < 0 ? EXIT_SUCCESS : prc;

    sd_error err = {0};
    sd_cli_pair p = {0};
    p.gp = sd_gen_default_params();
    sd_proposer *prop = NULL;
    char *prompt_buf = NULL;
    int32_t *prompt_ids = NULL, *out = NULL;
    int rc = SD_OK, exit_code = EXIT_FAILURE;

    if ((rc = sd_cli_pair_resolve(&c.g, &p, &err))) goto done;
    if (c.no_draft) p.draft = NULL;
    if (!p.target) {
        exit_code = usage_error("%s", "no target model: pass --target FILE (-m) or --config FILE");
        goto done;
    }
    sd_gen_params *gp = &p.gp;
    if (c.g.draft && !c.no_draft) {
        /* llama.cpp's old `--draft N` was a token count; here --draft is a file. */
        const char *d = c.g.draft;
        while (*d >= '0' && *d <= '9')
            d++;
        if (*d == '\0' && access(c.g.draft, F_OK) != 0) {
            exit_code = usage_error("--draft takes the draft model file, found '%s' (for the "
                                    "number of draft tokens use -k/--draft-max)",
                                    c.g.draft);
            goto done;
        }
    }

    const char *prompt = NULL;
    size_t prompt_len = 0;
    if (c.g.prompt && c.g.prompt_file) {
        exit_code = usage_error("%s", "give either --prompt or --prompt-file, not both");
        goto done;
    }
    if (c.g.prompt_file) {
        if ((rc = sd_cli_read_file(c.g.prompt_file, &prompt_buf, &prompt_len, &err))) goto done;
        prompt = prompt_buf;
    } else {
        prompt = c.g.prompt ? c.g.prompt : (p.cfg.prompt ? p.cfg.prompt : "");
        prompt_len = strlen(prompt);
    }

    if ((rc = sd_cli_pair_load(&c.g, &p, &err))) goto done;
    const int32_t ctx = p.ctx;
    const sd_vocab *vocab = sd_model_vocab(p.tm);
    if (p.dm && (rc = sd_proposer_llm_init(p.dm, &p.dsp, &gp->samp, sd_rng_stream_seed(gp->seed, 1),
                                           sd_model_hparams(p.tm)->n_vocab, &prop, &err)))
        goto done;

    size_t n_ids = 0;
    int add_bos = !c.g.no_bos && sd_vocab_add_bos(vocab);
    if ((rc = sd_vocab_tokenize(vocab, prompt, prompt_len, add_bos, &prompt_ids, &n_ids, &err)))
        goto done;
    if (n_ids == 0) {
        rc = sd_errorf(&err, SD_ERR_ARG, "empty prompt and no BOS token: nothing to condition on");
        goto done;
    }
    if (n_ids > (size_t)ctx) {
        rc = sd_errorf(&err, SD_ERR_CONTEXT,
                       "prompt is %zu tokens, longer than the context of %d tokens (--ctx-size)",
                       n_ids, ctx);
        goto done;
    }
    /* -n -1: until EOS or the context is full (one more than fits, so the stop is "context"). */
    if (c.g.has_n && c.g.n == -1) gp->n_predict = ctx - (int32_t)n_ids + 2;
    /* No more than ctx - n_ids + 1 tokens can ever be emitted: size nothing beyond that. */
    if (gp->n_predict > ctx - (int32_t)n_ids + 2) gp->n_predict = ctx - (int32_t)n_ids + 2;
    if (gp->n_predict < 1) gp->n_predict = 1;
    if (c.no_draft && (c.g.draft || p.cfg.draft))
        fprintf(stderr, "specdec: --no-draft: ignoring the draft model, target alone\n");
    else if (!p.draft)
        fprintf(stderr, "specdec: no draft model (-md FILE): generating with the target alone\n");
    out = malloc((size_t)gp->n_predict * sizeof(int32_t));
    if (!out) {
        rc = sd_errorf(&err, SD_ERR_OOM, "out of memory for %d output tokens", gp->n_predict);
        goto done;
    }
    stream_ctx sc = {vocab, NULL, 0};
    sd_gen_stats st;
    if (!c.json) {
        fwrite(prompt, 1, prompt_len, stdout);
        fflush(stdout);
    }
    rc = sd_generate(p.scorer, prop, prompt_ids, (int32_t)n_ids, sd_vocab_eos(vocab), gp,
                     c.json ? NULL : stream_tokens, &sc, out, gp->n_predict, &st, &err);
    free(sc.buf);
    if (rc) goto done;
    if (st.stop == SD_STOP_CONTEXT)
        fprintf(stderr, "\nspecdec: stopped at the context limit of %d tokens\n", ctx);
    const int32_t k_shown = prop ? gp->n_draft : 0;
    if (c.json && (rc = print_json(vocab, out, st.n_generated, &st, k_shown, &err))) goto done;
    print_stats(&st, prop != NULL, k_shown);
    exit_code = EXIT_SUCCESS;
done:
    if (rc) exit_code = sd_cli_fail(&err);
    free(out);
    free(prompt_ids);
    free(prompt_buf);
    sd_proposer_free(prop);
    sd_cli_pair_free(&p);
    return exit_code;
}

/* ---- convert / quantize ---- */

static int cmd_convert(int argc, char **argv) {
    if (argc != 4)
        return usage_error("%s", "usage: specdec convert CKPT.bin TOKENIZER.bin OUT.gguf");
    sd_error err = {0};
    if (sd_convert_llama2c(argv[1], argv[2], argv[3], &err)) return sd_cli_fail(&err);
    fprintf(stderr, "specdec: wrote %s\n", argv[3]);
    return EXIT_SUCCESS;
}

static int cmd_quantize(int argc, char **argv) {
    if (argc != 4) return usage_error("%s", "usage: specdec quantize IN.gguf OUT.gguf q8_0|q4_0");
    sd_type t;
    if (sd_type_from_name(argv[3], &t) || (t != SD_TYPE_Q8_0 && t != SD_TYPE_Q4_0))
        return usage_error("quantize: type must be q8_0 or q4_0, found '%s'", argv[3]);
    sd_error err = {0};
    if (sd_quantize_file(argv[1], argv[2], t, stderr, &err)) return sd_cli_fail(&err);
    fprintf(stderr, "specdec: wrote %s\n", argv[2]);
    return EXIT_SUCCESS;
}

/* ---- info ---- */

static int cmd_info(int argc, char **argv) {
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

static int cmd_tokenize(int argc, char **argv) {
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

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        print_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? SD_EXIT_USAGE : EXIT_SUCCESS;
    }
    rewrite_aliases(argc, argv);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert")) return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(cmd, "quantize")) return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return sd_cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return sd_cmd_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "perplexity")) return sd_cmd_perplexity(argc - 1, argv + 1);
    if (!strcmp(cmd, "compare")) return sd_cmd_compare(argc - 1, argv + 1);
    return usage_error("unknown command '%s'", cmd);
}
