/*
 * specdec perplexity: mean negative log-likelihood (nats/token) and perplexity of a
 * model over the stories of a text file.
 *
 *   specdec perplexity -m FILE.gguf -f TEXT [--ctx N] [-t N]
 *
 * Stories: the file is split at lines holding exactly "<|endoftext|>" (TinyStories'
 * separator); a story is the text between two separator lines without the newline
 * that ends its last line; stories that are empty or all whitespace are skipped. A file
 * without separators is one story.
 *
 * Protocol (scripts/train_pair.py computes the same number in PyTorch): each story is
 * tokenized with BOS (when the vocabulary has one), giving t[0 .. n). It is scored in
 * windows of ctx tokens (default: the model's training context) that overlap by one
 * token: window [s, e), e = min(n, s + ctx), is evaluated from position 0 on an empty
 * KV cache with logits for every position, and predicts t[s+1 .. e) from the logits at
 * positions s .. e-2; the next window starts at s = e - 1. So every token after the
 * first is predicted exactly once. NLL of token t given logits l is
 * logsumexp(l) - l[t], computed in double from the float logits; the mean is over all
 * predicted tokens of all stories.
 *
 * A --ctx beyond the model's training context is capped at it, with a note on stderr
 * (as generate does): positions the model never saw would score nonsense.
 *
 * Output (stdout), one "key value" per line:
 *   file, model, stories, tokens (predicted), ctx, nll (nats/token, %.9f), perplexity.
 * Progress (stories scored, share of the text) goes to stderr when it is a terminal.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"

#define PPL_SEPARATOR "<|endoftext|>"
#define PPL_MAX_BATCH 512

#define PPL_HINT "usage: specdec perplexity -m FILE.gguf -f TEXT [--ctx N] [-t N]"

static int ppl_usage(const char *fmt, const char *arg) {
    return sd_cli_usage(PPL_HINT, fmt, arg);
}

static int ppl_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' && s[i] != '\v' &&
            s[i] != '\f')
            return 0;
    return 1;
}

typedef struct ppl_acc {
    double nll;    /* summed NLL */
    int64_t n_tok; /* predicted tokens */
    int64_t n_story;
} ppl_acc;

/* Score one story's tokens ids[0 .. n) by the window protocol above. logits: float
 * [n_batch, n_vocab] scratch. */
static int ppl_score(sd_session *s, const char *model_path, const int32_t *ids, int32_t n,
                     int32_t ctx, int32_t n_vocab, float *logits, ppl_acc *acc, sd_error *err) {
    const int32_t n_batch = sd_session_n_batch(s);
    int32_t st = 0;
    for (;;) {
        const int32_t e = n - st > ctx ? st + ctx : n;
        int rc = sd_session_seq_truncate(s, 0, 0, err);
        if (rc) return rc;
        for (int32_t c0 = st; c0 < e; c0 += n_batch) {
            const int32_t m = e - c0 < n_batch ? e - c0 : n_batch;
            if ((rc = sd_session_eval(s, ids + c0, m, logits, m, err))) return rc;
            for (int32_t i = 0; i < m; i++) {
                const int32_t p = c0 + i; /* logits row i predicts ids[p + 1] */
                if (p + 1 >= e) break;
                const float *row = logits + (size_t)i * (size_t)n_vocab;
                float mx = row[0];
                for (int32_t v = 1; v < n_vocab; v++)
                    if (row[v] > mx) mx = row[v];
                double sum = 0.0;
                for (int32_t v = 0; v < n_vocab; v++)
                    sum += exp((double)row[v] - (double)mx);
                /* A NaN or +inf anywhere in the row, or -inf at the token, makes it non-finite. */
                const double nll = (double)mx + log(sum) - (double)row[ids[p + 1]];
                if (!isfinite(nll))
                    return sd_errorf(err, SD_ERR_FORMAT,
                                     "%s: non-finite logits at position %d of story %lld (NLL "
                                     "%g): the model's weights hold NaN or inf",
                                     model_path, p, (long long)acc->n_story, nll);
                acc->nll += nll;
                acc->n_tok++;
            }
        }
        if (e == n) break;
        st = e - 1;
    }
    return SD_OK;
}

typedef struct ppl_opts {
    const char *model_path, *text_path;
    int64_t ctx, threads;
    int threads_force;
    sd_type kv_type; /* --kv-type (-ctk/-ctv): F32 by default */
} ppl_opts;

static void ppl_help(FILE *f) {
    fprintf(f, "usage: specdec perplexity -m FILE.gguf -f TEXT [--ctx N] [-t N]\n"
               "  mean NLL (nats/token) and perplexity over the stories of TEXT (split at\n"
               "  lines '" PPL_SEPARATOR "'), each with BOS, in windows of N tokens\n"
               "  (default and most: the model's training context) overlapping by one token\n"
               "  -m, --model FILE         the model\n"
               "  -f, --file TEXT          the text\n"
               "  -c, --ctx, --ctx-size N  window (context) size, >= 2\n"
               "  -t, --threads N          threads, 0 = all cores (default 0)\n"
               "  --threads-force          keep -t above the cores this process may use\n"
               "  --kv-type T              KV-cache element type: f32 (default), f16, q8_0,\n"
               "                           q4_0 (-ctk / -ctv T: the same)\n"
               "  llama.cpp flags with no meaning here (-b, -ub, -fa, --mlock, ...) are\n"
               "  ignored with a note\n");
}

enum { PPL_OPT_THREADS_FORCE = 1000, PPL_OPT_KV_TYPE };

/* 0, -1 (help printed: exit 0) or a usage exit status. */
static int ppl_parse(int argc, char **argv, ppl_opts *o) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},
        {"file", required_argument, 0, 'f'},
        {"ctx", required_argument, 0, 'c'},
        {"ctx-size", required_argument, 0, 'c'},
        {"threads", required_argument, 0, 't'},
        {"threads-force", no_argument, 0, PPL_OPT_THREADS_FORCE},
        {"kv-type", required_argument, 0, PPL_OPT_KV_TYPE},
        {"cache-type-k", required_argument, 0, PPL_OPT_KV_TYPE},
        {"cache-type-v", required_argument, 0, PPL_OPT_KV_TYPE},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    int c = sd_cli_prescan(&argc, argv, ":m:f:c:t:h", opts, PPL_HINT);
    if (c) return c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":m:f:c:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            o->model_path = optarg;
            break;
        case 'f':
            o->text_path = optarg;
            break;
        case 'c':
            if (sd_cli_parse_i64(optarg, 2, INT32_MAX, &o->ctx))
                return ppl_usage("--ctx: expected an integer >= 2, found '%s'", optarg);
            break;
        case 't':
            if (sd_cli_parse_i64(optarg, 0, 1024, &o->threads))
                return ppl_usage("-t/--threads: expected an integer in [0, 1024], found '%s'",
                                 optarg);
            break;
        case PPL_OPT_THREADS_FORCE:
            o->threads_force = 1;
            break;
        case PPL_OPT_KV_TYPE:
            if (sd_type_from_name(optarg, &o->kv_type) || !sd_kv_type_ok(o->kv_type))
                return ppl_usage("--kv-type: expected f32, f16, q8_0 or q4_0, found '%s'", optarg);
            break;
        case 'h':
            ppl_help(stdout);
            return -1;
        case ':':
            return ppl_usage("option '%s' needs a value", argv[optind - 1]);
        default:
            return ppl_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return ppl_usage("unexpected argument '%s'", argv[optind]);
    if (!o->model_path) return ppl_usage("%s", "perplexity: -m FILE.gguf is required");
    if (!o->text_path) return ppl_usage("%s", "perplexity: -f TEXT is required");
    return 0;
}

/* What scoring the text needs: the session, its logits scratch, the vocabulary. */
typedef struct ppl_run {
    const ppl_opts *o;
    const sd_vocab *voc;
    sd_session *s;
    float *logits; /* [n_batch, n_vocab] */
    int32_t ctx, n_vocab;
    unsigned tok_flags; /* BOS (and EOS) as the vocabulary asks, as llama.cpp's perplexity */
} ppl_run;

/* Tokenize and score one story text[0 .. len) (skipped when blank). */
static int ppl_story(ppl_run *r, const char *text, size_t len, ppl_acc *acc, sd_error *err) {
    if (len == 0 || ppl_blank(text, len)) return SD_OK;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = sd_vocab_tokenize(r->voc, text, len, r->tok_flags, &ids, &n_ids, err);
    if (!rc && n_ids > (size_t)INT32_MAX)
        rc = sd_errorf(err, SD_ERR_ARG, "%s: story %lld is too long", r->o->text_path,
                       (long long)acc->n_story);
    if (!rc)
        rc = ppl_score(r->s, r->o->model_path, ids, (int32_t)n_ids, r->ctx, r->n_vocab, r->logits,
                       acc, err);
    free(ids);
    if (!rc) acc->n_story++;
    return rc;
}

static void ppl_progress(const ppl_run *r, const ppl_acc *acc, size_t done, size_t total) {
    sd_cli_progress("\rspecdec perplexity: %lld stories, %lld tokens, %.0f%% of %s",
                    (long long)acc->n_story, (long long)acc->n_tok,
                    total ? 100.0 * (double)done / (double)total : 100.0, r->o->text_path);
}

/* Walk the lines of text; a separator line ends the story that started after the last
 * one (the story is [story0, separator) less the newline that ends its last line). */
static int ppl_text(ppl_run *r, const char *text, size_t text_len, ppl_acc *acc, sd_error *err) {
    const size_t sep_len = strlen(PPL_SEPARATOR);
    size_t story0 = 0, pos = 0;
    int rc = SD_OK;
    while (!rc && pos < text_len) {
        const char *nl = memchr(text + pos, '\n', text_len - pos);
        const size_t line_end = nl ? (size_t)(nl - text) : text_len;
        const size_t next = nl ? line_end + 1 : text_len;
        if (line_end - pos == sep_len && !memcmp(text + pos, PPL_SEPARATOR, sep_len)) {
            const size_t story_end = pos > story0 ? pos - 1 : story0;
            rc = ppl_story(r, text + story0, story_end - story0, acc, err);
            story0 = next;
            ppl_progress(r, acc, next, text_len);
        }
        pos = next;
    }
    /* The last story: up to the end, less a final newline. */
    if (!rc && story0 < text_len) {
        const size_t end = text[text_len - 1] == '\n' ? text_len - 1 : text_len;
        rc = ppl_story(r, text + story0, end > story0 ? end - story0 : 0, acc, err);
        ppl_progress(r, acc, text_len, text_len);
    }
    sd_cli_progress("\n");
    return rc;
}

/* The context to score with: --ctx, capped at the training context with a note. */
static int32_t ppl_context(const ppl_opts *o, int32_t n_train) {
    if (o->ctx <= 0) return n_train;
    if (o->ctx > n_train) {
        fprintf(stderr, "specdec: --ctx %lld exceeds %s's training context %d; using %d\n",
                (long long)o->ctx, o->model_path, n_train, n_train);
        return n_train;
    }
    return (int32_t)o->ctx;
}

static void ppl_print(const ppl_opts *o, const ppl_acc *acc, int32_t ctx) {
    const double mean = acc->nll / (double)acc->n_tok;
    printf("file        %s\n", o->text_path);
    printf("model       %s\n", o->model_path);
    printf("stories     %lld\n", (long long)acc->n_story);
    printf("tokens      %lld\n", (long long)acc->n_tok);
    printf("ctx         %d\n", ctx);
    printf("nll         %.9f nats/token\n", mean);
    printf("perplexity  %.6f\n", exp(mean));
}

int sd_cmd_perplexity(int argc, char **argv) {
    ppl_opts o;
    int prc = ppl_parse(argc, argv, &o);
    if (prc) return prc < 0 ? EXIT_SUCCESS : prc;
    sd_error err = {0};
    sd_model *m = NULL;
    char *text = NULL;
    size_t text_len = 0;
    ppl_acc acc = {0, 0, 0};
    ppl_run r = {&o, NULL, NULL, NULL, 0, 0, 0};
    int rc;
    if ((rc = sd_cli_read_file(o.text_path, &text, &text_len, &err))) goto done;
    if ((rc = sd_model_load(o.model_path, &m, &err))) goto done;
    const sd_hparams *hp = sd_model_hparams(m);
    r.voc = sd_model_vocab(m);
    r.ctx = ppl_context(&o, hp->n_ctx_train);
    if (r.ctx < 2) {
        rc = sd_errorf(&err, SD_ERR_ARG, "%s: context %d is too short to score anything",
                       o.model_path, r.ctx);
        goto done;
    }
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = r.ctx;
    sp.n_batch = r.ctx < PPL_MAX_BATCH ? r.ctx : PPL_MAX_BATCH;
    sp.n_threads = sd_cli_cap_threads(o.threads, o.threads_force);
    sp.kv_type = o.kv_type;
    if ((rc = sd_session_init(m, &sp, &r.s, &err))) goto done;
    r.n_vocab = hp->n_vocab;
    r.logits = malloc((size_t)sp.n_batch * (size_t)r.n_vocab * sizeof(float));
    if (!r.logits) {
        rc = sd_errorf(&err, SD_ERR_OOM, "out of memory for logits");
        goto done;
    }
    r.tok_flags = SD_VOCAB_ADD_SPECIAL;
    if ((rc = ppl_text(&r, text, text_len, &acc, &err))) goto done;
    if (acc.n_tok == 0) {
        rc = sd_errorf(&err, SD_ERR_ARG, "%s: no token to predict (empty file?)", o.text_path);
        goto done;
    }
    ppl_print(&o, &acc, r.ctx);
done:
    free(r.logits);
    free(text);
    sd_session_free(r.s);
    sd_model_free(m);
    return rc ? sd_cli_fail(&err) : 0;
}
