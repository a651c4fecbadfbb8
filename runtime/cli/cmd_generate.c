/*
 * specdec generate: speculative (or target-alone) generation through the engine
 * (runtime/engine), streaming the text to stdout and the statistics to stderr, or one
 * JSON object (--json).
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cli/cli.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/tokenizer/sd_vocab.h"

#define HINT "see 'specdec generate --help'"

static int usage_error(const char *fmt, const char *arg) {
    return sd_cli_usage(HINT, fmt, arg);
}

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
        sd_cli_generate_help(stdout);
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
    int oom;       /* a piece buffer could not grow */
    int write_err; /* errno of a failed write to stdout (generation stops), or 0 */
} stream_ctx;

/* Write bytes to stdout and flush; on failure remember errno (EIO if none). 0 or -1. */
static int stream_write(stream_ctx *s, const void *p, size_t n) {
    errno = 0;
    if ((n && fwrite(p, 1, n, stdout) != n) || fflush(stdout) != 0) {
        s->write_err = errno ? errno : EIO;
        return -1;
    }
    return 0;
}

static int stream_tokens(void *user, const int32_t *tokens, int32_t n) {
    stream_ctx *s = user;
    for (int32_t i = 0; i < n; i++) {
        int len = sd_vocab_token_to_piece(s->vocab, tokens[i], s->buf, s->cap);
        if (len < 0) continue;
        if ((size_t)len > s->cap) {
            char *nb = realloc(s->buf, (size_t)len);
            if (!nb) return s->oom = 1;
            s->buf = nb;
            s->cap = (size_t)len;
            sd_vocab_token_to_piece(s->vocab, tokens[i], s->buf, s->cap);
        }
        if (stream_write(s, s->buf, (size_t)len)) return 1; /* stop: the output is lost */
    }
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
    errno = 0;
    const int bad = puts(s) < 0 || fflush(stdout) != 0;
    free(s);
    if (bad)
        return sd_errorf(err, SD_ERR_IO, "stdout: write error: %s", strerror(errno ? errno : EIO));
    return SD_OK;
}

void sd_cli_generate_help(FILE *f) {
    fprintf(f, "generate options (llama.cpp spellings in parentheses):\n"
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
               "  --json                   print one JSON object on stdout instead of text\n");
}

int sd_cmd_generate(int argc, char **argv) {
    gen_cli c;
    int prc = parse_generate(argc, argv, &c);
    if (prc) return prc < 0 ? EXIT_SUCCESS : prc;

    sd_error err = {0};
    sd_cli_pair p = {0};
    p.ep = sd_engine_default_params();
    char *prompt_buf = NULL;
    int32_t *prompt_ids = NULL, *out = NULL;
    int rc = SD_OK, exit_code = EXIT_FAILURE;

    if ((rc = sd_cli_pair_resolve(&c.g, &p, &err))) goto done;
    if (c.no_draft) p.ep.draft = NULL;
    if (!p.ep.target) {
        exit_code = usage_error("%s", "no target model: pass --target FILE (-m) or --config FILE");
        goto done;
    }
    sd_gen_params gp = p.ep.gen;
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
    sd_engine *e = p.engine;
    const int32_t ctx = sd_engine_n_ctx(e);
    const sd_vocab *vocab = sd_engine_vocab(e);
    const int with_draft = sd_engine_proposer(e) != NULL;
    if (!with_draft) gp.n_draft = 0;

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
    if (c.g.has_n && c.g.n == -1) gp.n_predict = ctx - (int32_t)n_ids + 2;
    /* No more than ctx - n_ids + 1 tokens can ever be emitted: size nothing beyond that. */
    if (gp.n_predict > ctx - (int32_t)n_ids + 2) gp.n_predict = ctx - (int32_t)n_ids + 2;
    if (gp.n_predict < 1) gp.n_predict = 1;
    if (c.no_draft && (c.g.draft || p.cfg.draft))
        fprintf(stderr, "specdec: --no-draft: ignoring the draft model, target alone\n");
    else if (!with_draft)
        fprintf(stderr, "specdec: no draft model (-md FILE): generating with the target alone\n");
    out = malloc((size_t)gp.n_predict * sizeof(int32_t));
    if (!out) {
        rc = sd_errorf(&err, SD_ERR_OOM, "out of memory for %d output tokens", gp.n_predict);
        goto done;
    }
    stream_ctx sc = {vocab, NULL, 0, 0, 0};
    sd_gen_stats st;
    if (!c.json && stream_write(&sc, prompt, prompt_len) == 0)
        rc = sd_engine_generate(e, &gp, prompt_ids, (int32_t)n_ids, c.json ? NULL : stream_tokens,
                                &sc, out, gp.n_predict, &st, &err);
    else if (c.json)
        rc = sd_engine_generate(e, &gp, prompt_ids, (int32_t)n_ids, NULL, NULL, out, gp.n_predict,
                                &st, &err);
    free(sc.buf);
    if (!rc && sc.write_err)
        rc = sd_errorf(&err, SD_ERR_IO, "stdout: write error: %s", strerror(sc.write_err));
    if (!rc && sc.oom) rc = sd_errorf(&err, SD_ERR_OOM, "out of memory streaming the output");
    if (rc) goto done;
    if (st.stop == SD_STOP_CONTEXT)
        fprintf(stderr, "\nspecdec: stopped at the context limit of %d tokens\n", ctx);
    const int32_t k_shown = with_draft ? gp.n_draft : 0;
    if (c.json && (rc = print_json(vocab, out, st.n_generated, &st, k_shown, &err))) goto done;
    print_stats(&st, with_draft, k_shown);
    exit_code = EXIT_SUCCESS;
done:
    if (rc) exit_code = sd_cli_fail(&err);
    free(out);
    free(prompt_ids);
    free(prompt_buf);
    sd_cli_pair_free(&p);
    return exit_code;
}
