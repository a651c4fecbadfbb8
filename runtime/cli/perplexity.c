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
 * Output (stdout), one "key value" per line:
 *   file, model, stories, tokens (predicted), ctx, nll (nats/token, %.9f), perplexity.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/cli.h"
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
        int rc = sd_session_truncate(s, 0, err);
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

int sd_cmd_perplexity(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},
        {"file", required_argument, 0, 'f'},
        {"ctx", required_argument, 0, 'c'},
        {"ctx-size", required_argument, 0, 'c'},
        {"threads", required_argument, 0, 't'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *model_path = NULL, *text_path = NULL;
    int64_t ctx_arg = 0, threads = 0;
    int o;
    opterr = 0;
    optind = 1;
    while ((o = getopt_long(argc, argv, ":m:f:c:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm':
            model_path = optarg;
            break;
        case 'f':
            text_path = optarg;
            break;
        case 'c':
            if (sd_cli_parse_i64(optarg, 2, INT32_MAX, &ctx_arg))
                return ppl_usage("--ctx: expected an integer >= 2, found '%s'", optarg);
            break;
        case 't':
            if (sd_cli_parse_i64(optarg, 0, 1024, &threads))
                return ppl_usage("-t/--threads: expected an integer in [0, 1024], found '%s'",
                                 optarg);
            break;
        case 'h':
            printf("usage: specdec perplexity -m FILE.gguf -f TEXT [--ctx N] [-t N]\n"
                   "  mean NLL (nats/token) and perplexity over the stories of TEXT (split at\n"
                   "  lines '" PPL_SEPARATOR "'), each with BOS, in windows of N tokens\n"
                   "  (default: the model's context) overlapping by one token\n");
            return 0;
        case ':':
            return ppl_usage("option '%s' needs a value", argv[optind - 1]);
        default:
            return ppl_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return ppl_usage("unexpected argument '%s'", argv[optind]);
    if (!model_path) return ppl_usage("%s", "perplexity: -m FILE.gguf is required");
    if (!text_path) return ppl_usage("%s", "perplexity: -f TEXT is required");

    sd_error err = {0};
    sd_model *m = NULL;
    sd_session *s = NULL;
    char *text = NULL;
    float *logits = NULL;
    int32_t *ids = NULL;
    size_t text_len = 0;
    ppl_acc acc = {0, 0, 0};
    int rc;
    if ((rc = sd_cli_read_file(text_path, &text, &text_len, &err))) goto done;
    if ((rc = sd_model_load(model_path, &m, &err))) goto done;
    const sd_hparams *hp = sd_model_hparams(m);
    const sd_vocab *voc = sd_model_vocab(m);
    const int32_t ctx = ctx_arg ? (int32_t)ctx_arg : hp->n_ctx_train;
    if (ctx < 2) {
        rc = sd_errorf(&err, SD_ERR_ARG, "%s: context %d is too short to score anything",
                       model_path, ctx);
        goto done;
    }
    sd_session_params sp = sd_session_default_params();
    sp.n_ctx = ctx;
    sp.n_batch = ctx < PPL_MAX_BATCH ? ctx : PPL_MAX_BATCH;
    sp.n_threads = (int32_t)threads;
    if ((rc = sd_session_init(m, &sp, &s, &err))) goto done;
    const int32_t n_vocab = hp->n_vocab;
    logits = malloc((size_t)sp.n_batch * (size_t)n_vocab * sizeof(float));
    if (!logits) {
        rc = sd_errorf(&err, SD_ERR_OOM, "out of memory for logits");
        goto done;
    }
    const int add_bos = sd_vocab_bos(voc) >= 0;

    /* Walk the lines; a separator line ends the story that started after the last one. */
    size_t story0 = 0, pos = 0;
    for (;;) {
        const int at_end = pos >= text_len;
        size_t story_end = 0; /* exclusive end of a finished story, when one is finished */
        int finished = 0;
        size_t next = pos;
        if (!at_end) {
            const char *nl = memchr(text + pos, '\n', text_len - pos);
            const size_t line_end = nl ? (size_t)(nl - text) : text_len;
            next = nl ? line_end + 1 : text_len;
            if (line_end - pos == strlen(PPL_SEPARATOR) &&
                !memcmp(text + pos, PPL_SEPARATOR, strlen(PPL_SEPARATOR))) {
                /* The story is [story0, pos) less the newline that ends its last line. */
                story_end = pos > story0 ? pos - 1 : story0;
                finished = 1;
            }
        } else {
            story_end = text_len > story0 && text[text_len - 1] == '\n' ? text_len - 1 : text_len;
            finished = 1;
        }
        if (finished) {
            const size_t len = story_end > story0 ? story_end - story0 : 0;
            if (len > 0 && !ppl_blank(text + story0, len)) {
                size_t n_ids = 0;
                if ((rc = sd_vocab_tokenize(voc, text + story0, len, add_bos, &ids, &n_ids, &err)))
                    goto done;
                if (n_ids > (size_t)INT32_MAX) {
                    rc = sd_errorf(&err, SD_ERR_ARG, "%s: story %lld is too long", text_path,
                                   (long long)acc.n_story);
                    goto done;
                }
                if ((rc = ppl_score(s, model_path, ids, (int32_t)n_ids, ctx, n_vocab, logits, &acc,
                                    &err)))
                    goto done;
                free(ids);
                ids = NULL;
                acc.n_story++;
            }
            story0 = next;
        }
        if (at_end) break;
        pos = next;
    }
    if (acc.n_tok == 0) {
        rc = sd_errorf(&err, SD_ERR_ARG, "%s: no token to predict (empty file?)", text_path);
        goto done;
    }
    const double mean = acc.nll / (double)acc.n_tok;
    printf("file        %s\n", text_path);
    printf("model       %s\n", model_path);
    printf("stories     %lld\n", (long long)acc.n_story);
    printf("tokens      %lld\n", (long long)acc.n_tok);
    printf("ctx         %d\n", ctx);
    printf("nll         %.9f nats/token\n", mean);
    printf("perplexity  %.6f\n", exp(mean));
done:
    free(ids);
    free(logits);
    free(text);
    sd_session_free(s);
    sd_model_free(m);
    return rc ? sd_cli_fail(&err) : 0;
}
