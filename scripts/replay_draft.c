/*
 * scripts/replay_draft.c: offline replay of greedy drafting over the reference output ids that
 * `specdec bench --json F` stores (each prompt's ids and the target-alone output ids). Greedy
 * speculative decoding emits exactly the target's own text, so the tokens a proposer gets
 * accepted follow from that text alone: each pass proposes, accepts the longest prefix (or,
 * for a tree, the longest root path) that equals the reference, emits one more token and
 * commits. Passes and tokens per pass are then exact whatever the load; a draft model (the
 * LLM proposer, alone or chained) runs for real, so its drafts are the ones generate makes.
 * Not a test: a measurement, built and run by scripts/replay_draft.sh.
 *
 * Predicted speedup = tokens / sum over passes of (v(n + 1) + c * s): n the nodes scored
 * that pass, s the draft model's decode steps (one per token it drafted), v(n) the cost of a
 * target pass over n rows in target decode steps (--v n:v,... points, linear between them and
 * extrapolated past the last; default v(n) = n) and c a draft step's cost in target steps.
 *
 * usage: replay_draft --json F [--category C|all] --type T [--draft D.gguf] [--k K]
 *                     [--tree W] [--second-max N] [--long-match L] [--p-min P] [--draft-min M]
 *                     [--v 2:1.2,5:1.44,...] [--c 0.55] [--threads N] [--verbose]
 *                     [--trace MODEL.gguf] [--resume N] [--suffix-factor F] [--suffix-n-min M]
 *                     [--cache-mb M] [--suffix-cost C] [--bytes MODEL.gguf]
 *   T: ngram, suffix, llm, ngram+llm, suffix+llm, copy (the copy bound: each pass drafts the
 *   longest prefix of the rest of the output, at most K, that occurs in the text so far).
 *   --cache-mb M: serve's cross-request suffix cache (--suffix-cache-mb): the runs replayed in
 *   the file's order, each one's prompt and output added to a cache of M MiB after it (as the
 *   batcher adds a finished request), the suffix proposer drafting from it too; the copy
 *   bound then also copies from the earlier runs' prompts and outputs. With --verbose each
 *   run also prints how many of its tokens a copy of the earlier runs' outputs alone covers
 *   (the copy bound over them, K 16).
 *   --bytes MODEL.gguf: the suffix proposer's byte-level matching over MODEL's vocabulary
 *   (the target's: sd_proposer_suffix_set_bytes, as generate and serve attach it).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft/sd_draft.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"

/* A token's text for the trace, escaped (newlines as \n) into buf. */
static const char *piece(const sd_vocab *v, int32_t id, char *buf, size_t cap) {
    char raw[128];
    const int n = v ? sd_vocab_token_to_piece(v, id, 0, raw, sizeof raw - 1) : -1;
    if (n < 0) {
        snprintf(buf, cap, "#%d", (int)id);
        return buf;
    }
    size_t o = 0;
    for (int i = 0; i < n && o + 3 < cap; i++) {
        if (raw[i] == '\n') {
            buf[o++] = '\\';
            buf[o++] = 'n';
        } else
            buf[o++] = raw[i];
    }
    buf[o] = 0;
    return buf;
}

/* The token bytes of v's first n ids (the engine's sd_engine_grammar_vocab, built the same way). */
static sd_grammar_vocab *token_bytes(const sd_vocab *v, int32_t n, sd_error *err) {
    char **pieces = calloc((size_t)n, sizeof *pieces);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    sd_grammar_vocab *gv = NULL;
    char buf[1024];
    for (int32_t i = 0; pieces && lens && i < n; i++) {
        const int len = sd_vocab_token_to_piece(v, i, 0, buf, sizeof buf);
        if (len <= 0 || len > (int)sizeof buf) continue;
        pieces[i] = malloc((size_t)len);
        if (pieces[i]) memcpy(pieces[i], buf, (size_t)len);
        lens[i] = pieces[i] ? (size_t)len : 0;
    }
    if (pieces && lens) sd_grammar_vocab_init((const char *const *)pieces, lens, n, &gv, err);
    for (int32_t i = 0; pieces && i < n; i++)
        free(pieces[i]);
    free(pieces);
    free(lens);
    return gv;
}

static double vpt[64]; /* vpt[n]: v(n), 0 where not given */

static double v_of(int n) {
    if (n <= 1) return 1.0;
    int lo = 1, hi = -1;
    for (int i = 2; i < 64; i++) {
        if (vpt[i] <= 0) continue;
        if (i <= n) lo = i;
        if (i >= n) {
            hi = i;
            break;
        }
    }
    const double vlo = lo == 1 ? 1.0 : vpt[lo];
    if (lo == n) return vlo;
    if (hi < 0) { /* past the last point: the slope of the last two */
        int l2 = 1;
        for (int i = 2; i < lo; i++)
            if (vpt[i] > 0) l2 = i;
        if (lo == 1) return n; /* no points: v(n) = n */
        const double v2 = l2 == 1 ? 1.0 : vpt[l2];
        return vlo + (vlo - v2) / (lo - l2) * (n - lo);
    }
    return vlo + (vpt[hi] - vlo) * (n - lo) / (hi - lo);
}

typedef struct totals {
    long tokens, passes, drafted, accepted, draft_steps, lookup_only, mixed, llm_only;
    /* passes whose draft held a wrong token at the root / below it, and the tokens the copy
     * bound would have had accepted beyond those passes' accepted prefix */
    long wrong_root, wrong_below, lost_root, lost_below;
    double cost;
    /* the draft model's batched evaluations (the context's tokens it had not seen, caught up
     * in one pass before it drafts): tokens, and their cost beyond one step, c (v(b) - 1) */
    long catch_tokens, catch_passes;
    double catch_cost;
} totals;

/* The longest prefix of want[0 .. k) found anywhere in ctx[0 .. n_ctx) (the copy bound). */
static int longest_copy(const int32_t *ctx, int n_ctx, const int32_t *want, int k) {
    int best = 0;
    for (int j = 0; j < n_ctx; j++) {
        int l = 0;
        while (l < k && j + l < n_ctx && ctx[j + l] == want[l])
            l++;
        if (l > best) best = l;
    }
    return best;
}

/* The longest prefix of want[0 .. k) found in ctx[0 .. n_ctx) or in hist[0 .. n_hist) (earlier
 * documents, each ended by -1, which no token equals). */
static int longest_copy2(const int32_t *ctx, int n_ctx, const int32_t *hist, int n_hist,
                         const int32_t *want, int k) {
    const int a = longest_copy(ctx, n_ctx, want, k),
              b = hist ? longest_copy(hist, n_hist, want, k) : 0;
    return a > b ? a : b;
}

/* Tokens a tree proposal gets accepted: the longest root path equal to ref[0 .. n_ref). */
static int tree_accept(const sd_proposal *p, const int32_t *ref, int n_ref) {
    int node = -1, a = 0;
    while (a < n_ref) {
        int next = -1;
        for (int i = 0; i < p->n && next < 0; i++)
            if (p->parent[i] == node && p->tokens[i] == ref[a]) next = i;
        if (next < 0) break;
        node = next;
        a++;
    }
    return a;
}

int main(int argc, char **argv) {
    const char *json = NULL, *cat = "all", *type = NULL, *dpath = NULL, *trace = NULL,
               *bytes_model = NULL;
    int K = 8, W = 0, second_max = 0, long_match = 0, threads = 2, verbose = 0, draft_min = 1;
    double c_draft = 0.55, p_min = 0.0, sx_factor = 0.0;
    int resume = -1, sx_n_min = 0;
    double cache_mb = 0.0, sx_cost = 0.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--verbose"))
            verbose = 1;
        else if (i + 1 >= argc) {
            fprintf(stderr, "replay_draft: %s needs a value\n", a);
            return 2;
        } else if (!strcmp(a, "--json"))
            json = argv[++i];
        else if (!strcmp(a, "--category"))
            cat = argv[++i];
        else if (!strcmp(a, "--type"))
            type = argv[++i];
        else if (!strcmp(a, "--draft"))
            dpath = argv[++i];
        else if (!strcmp(a, "--trace"))
            trace = argv[++i];
        else if (!strcmp(a, "--bytes"))
            bytes_model = argv[++i];
        else if (!strcmp(a, "--resume"))
            resume = atoi(argv[++i]);
        else if (!strcmp(a, "--suffix-factor"))
            sx_factor = atof(argv[++i]);
        else if (!strcmp(a, "--suffix-cost"))
            sx_cost = atof(argv[++i]);
        else if (!strcmp(a, "--cache-mb"))
            cache_mb = atof(argv[++i]);
        else if (!strcmp(a, "--suffix-n-min"))
            sx_n_min = atoi(argv[++i]);
        else if (!strcmp(a, "--k"))
            K = atoi(argv[++i]);
        else if (!strcmp(a, "--tree"))
            W = atoi(argv[++i]);
        else if (!strcmp(a, "--second-max"))
            second_max = atoi(argv[++i]);
        else if (!strcmp(a, "--long-match"))
            long_match = atoi(argv[++i]);
        else if (!strcmp(a, "--p-min"))
            p_min = atof(argv[++i]);
        else if (!strcmp(a, "--draft-min"))
            draft_min = atoi(argv[++i]);
        else if (!strcmp(a, "--c"))
            c_draft = atof(argv[++i]);
        else if (!strcmp(a, "--threads"))
            threads = atoi(argv[++i]);
        else if (!strcmp(a, "--v")) {
            char *s = strdup(argv[++i]);
            for (char *t = strtok(s, ","); t; t = strtok(NULL, ",")) {
                int n;
                double v;
                if (sscanf(t, "%d:%lf", &n, &v) == 2 && n >= 2 && n < 64) vpt[n] = v;
            }
            free(s);
        } else {
            fprintf(stderr, "replay_draft: unknown option %s\n", a);
            return 2;
        }
    }
    if (!json || !type || K < 1 || K > SD_MAX_DRAFT || W < 0 || (W > 0 && W * K > SD_MAX_DRAFT)) {
        fprintf(stderr, "usage: replay_draft --json F --type T [--k K <= %d] [--tree W] ...\n",
                SD_MAX_DRAFT);
        return 2;
    }
    const int copy = !strcmp(type, "copy");
    const int use_llm = strstr(type, "llm") != NULL;
    const int use_ngram = !strncmp(type, "ngram", 5), use_suffix = !strncmp(type, "suffix", 6);
    if (!copy && !use_llm && !use_ngram && !use_suffix) {
        fprintf(stderr, "replay_draft: unknown type %s\n", type);
        return 2;
    }
    if (use_llm && !dpath) {
        fprintf(stderr, "replay_draft: %s needs --draft\n", type);
        return 2;
    }
    json_error_t je;
    json_t *root = json_load_file(json, 0, &je);
    if (!root) {
        fprintf(stderr, "replay_draft: %s: %s\n", json, je.text);
        return 1;
    }
    sd_error err = {0};
    sd_model *md = NULL;
    if (use_llm && sd_model_load(dpath, &md, &err)) {
        fprintf(stderr, "replay_draft: %s\n", err.msg);
        return 1;
    }
    int32_t n_vocab = md ? sd_model_hparams(md)->n_vocab : 1 << 20;
    sd_suffix_cache *cache = NULL;
    int32_t *hist = NULL; /* --cache-mb: the earlier runs' prompts and outputs, each ended by -1 */
    int32_t *prev_out = NULL; /* and their outputs alone */
    int n_hist = 0, n_prev = 0;
    if (cache_mb > 0) {
        if (!md) { /* the ids' range: the cache's separators follow it */
            json_t *rr, *jj;
            size_t a, b;
            n_vocab = 1;
            json_array_foreach(json_object_get(root, "runs"), a, rr) {
                json_t *ids = json_object_get(rr, "ids");
                const char *parts[2] = {"prompt", "output"};
                for (int q = 0; q < 2 && ids; q++)
                    json_array_foreach(json_object_get(ids, parts[q]), b, jj) {
                        const json_int_t v = json_integer_value(jj);
                        if (v + 1 > n_vocab) n_vocab = (int32_t)(v + 1);
                    }
            }
        }
        if (use_suffix &&
            sd_suffix_cache_init(n_vocab, (size_t)(cache_mb * 1048576.0), &cache, &err)) {
            fprintf(stderr, "replay_draft: %s\n", err.msg);
            return 1;
        }
    }
    /* --trace: one line per pass (match length, drafted, accepted, the copy bound's length,
     * and at a rejection the drafted and the target's token as text) */
    sd_model *tm = NULL;
    if (trace && sd_model_load(trace, &tm, &err)) {
        fprintf(stderr, "replay_draft: %s\n", err.msg);
        return 1;
    }
    const sd_vocab *tv = tm ? sd_model_vocab(tm) : NULL;
    sd_model *bm = NULL;
    sd_grammar_vocab *gv = NULL;
    if (bytes_model &&
        (sd_model_load(bytes_model, &bm, &err) ||
         !(gv = token_bytes(sd_model_vocab(bm), sd_model_hparams(bm)->n_vocab, &err)))) {
        fprintf(stderr, "replay_draft: --bytes: %s\n", err.msg);
        return 1;
    }
    int64_t byte_hits = 0;
    totals t = {0};
    json_t *runs = json_object_get(root, "runs"), *r;
    size_t ri;
    json_array_foreach(runs, ri, r) {
        json_t *ids = json_object_get(r, "ids");
        const char *c = json_string_value(json_object_get(r, "category"));
        if (!ids || !c || (strcmp(cat, "all") && strcmp(cat, c))) continue;
        json_t *jp = json_object_get(ids, "prompt"), *jo = json_object_get(ids, "output");
        const int np = (int)json_array_size(jp), no = (int)json_array_size(jo);
        if (np < 1) continue;
        int32_t *ctx = malloc((size_t)(np + no + 1) * sizeof *ctx);
        int32_t *ref = malloc((size_t)(no + 1) * sizeof *ref);
        for (int j = 0; j < np; j++)
            ctx[j] = (int32_t)json_integer_value(json_array_get(jp, j));
        for (int j = 0; j < no; j++)
            ref[j] = (int32_t)json_integer_value(json_array_get(jo, j));
        sd_proposer *look = NULL, *llm = NULL, *chain = NULL, *p = NULL;
        if (use_ngram) {
            sd_ngram_params q = sd_ngram_default_params();
            q.n_ctx = np + no + 1;
            if (sd_proposer_ngram_init(&q, n_vocab, &look, &err)) goto fail;
        } else if (use_suffix) {
            sd_suffix_params q = sd_suffix_default_params();
            q.n_ctx = np + no + 1;
            if (resume >= 0) q.resume = resume;
            if (sx_factor > 0) q.max_spec_factor = (float)sx_factor;
            if (sx_n_min > 0) q.n_min = sx_n_min;
            if (sx_cost > 0) { /* the expected rule (--suffix-cost) */
                q.rule = SD_SUFFIX_RULE_EXPECTED;
                q.draft_cost = (float)sx_cost;
            }
            if (sd_proposer_suffix_init(&q, n_vocab, &look, &err)) goto fail;
            if (cache && sd_proposer_suffix_set_cache(look, cache, &err)) goto fail;
            if (gv && sd_proposer_suffix_set_bytes(look, gv, &err)) goto fail;
        }
        if (use_llm) {
            sd_session_params sp = sd_session_default_params();
            sp.n_ctx = np + no + SD_MAX_DRAFT + 8;
            sp.n_threads = threads;
            sd_sampling_params samp = sd_sampling_default_params();
            samp.temp = 0.0f;
            if (sd_proposer_llm_init(md, &sp, &samp, 42, 0, &llm, &err)) goto fail;
            sd_proposer_set_cutoff(llm, (float)p_min, draft_min);
        }
        if (look && llm) {
            if (sd_proposer_chain_init(look, llm, type, &chain, &err) ||
                sd_proposer_chain_set_limits(chain, second_max, long_match, &err))
                goto fail;
            p = chain;
        } else
            p = look ? look : llm;
        int n_ctx = np, gen = 0;
        long passes = 0, steps0 = t.draft_steps;
        sd_chain_counts last = {0};
        if (p && sd_proposer_prefill(p, ctx, n_ctx, &err)) goto fail;
        while (gen < no) {
            int k = K < no - gen - 1 ? K : no - gen - 1, a = 0, nd = 0, nl = 0, cur_eval = 0;
            int32_t prop_tok[SD_MAX_DRAFT * 4];
            if (k > 0) {
                sd_proposal prop;
                memset(&prop, 0, sizeof prop);
                prop.n_vocab = n_vocab;
                if (copy) { /* the longest prefix of the rest found anywhere so far */
                    nd = longest_copy2(ctx, n_ctx, hist, n_hist, ref + gen, k);
                    a = nd;
                } else {
                    const sd_session *ds = llm ? sd_proposer_llm_session(llm) : NULL;
                    const int32_t np0 = ds ? sd_session_seq_n_past(ds, 0) : 0;
                    int rc = W > 0 ? sd_proposer_propose_tree(p, ctx, n_ctx, W, k, &prop, &err)
                                   : sd_proposer_propose(p, ctx, n_ctx, k, &prop, &err);
                    if (rc) goto fail;
                    /* its KV cache now holds the context and every draft but the last: the
                     * tokens evaluated beyond one per draft step after the first were caught up
                     * in the first step's batched pass */
                    const int32_t ev = ds ? sd_session_seq_n_past(ds, 0) - np0 : 0;
                    cur_eval = ev;
                    nd = prop.n;
                    memcpy(prop_tok, prop.tokens, (size_t)nd * sizeof *prop_tok);
                    if (W > 0)
                        a = tree_accept(&prop, ref + gen, no - gen);
                    else
                        while (a < nd && prop.tokens[a] == ref[gen + a])
                            a++;
                    /* the draft model's steps this pass: the tokens it drafted */
                    if (chain) {
                        sd_chain_counts after;
                        sd_proposer_chain_counts(chain, &after);
                        const long lk = (long)(after.n_mixed_lookup - last.n_mixed_lookup);
                        if (after.n_second > last.n_second) {
                            nl = nd;
                            t.llm_only++;
                        } else if (after.n_mixed > last.n_mixed) {
                            nl = nd - (int)lk;
                            t.mixed++;
                        } else if (nd > 0)
                            t.lookup_only++;
                        last = after;
                    } else if (llm)
                        nl = nd;
                }
            }
            if (!copy && a < nd) { /* a wrong token: what a copy would have added */
                const int best = longest_copy2(ctx, n_ctx, hist, n_hist, ref + gen, k);
                const long lost = best > a ? best - a : 0;
                if (a == 0) {
                    t.wrong_root++;
                    t.lost_root += lost;
                } else {
                    t.wrong_below++;
                    t.lost_below += lost;
                }
            }
            if (trace) {
                const int best = longest_copy2(ctx, n_ctx, hist, n_hist, ref + gen, k);
                const int32_t m = look ? (use_suffix ? sd_proposer_suffix_last_match(look)
                                                     : sd_proposer_ngram_last_match(look))
                                       : -1;
                char b1[96], b2[96], b3[400];
                size_t o = 0;
                for (int j = 0; j < 8 && gen + j < no && o < sizeof b3 - 100; j++) {
                    piece(tv, ref[gen + j], b1, sizeof b1);
                    o += (size_t)snprintf(b3 + o, sizeof b3 - o, "%s%s", j == a ? "|" : "", b1);
                }
                printf("T gen %4d m %3d k %2d drafted %2d accepted %2d copy %2d", gen, m, k, nd, a,
                       best);
                if (a < nd)
                    printf(" WRONG draft '%s' target '%s'", piece(tv, prop_tok[a], b1, sizeof b1),
                           piece(tv, ref[gen + a], b2, sizeof b2));
                printf("  text '%s'\n", b3);
            }
            int e = a + 1 < no - gen ? a + 1 : no - gen;
            memcpy(ctx + n_ctx, ref + gen, (size_t)e * sizeof *ctx);
            n_ctx += e;
            gen += e;
            passes++;
            t.drafted += nd;
            t.accepted += a;
            t.draft_steps += nl;
            t.cost += v_of(nd + 1) + c_draft * nl;
            if (nl > 0 && cur_eval - (nl - 1) > 1) { /* the first step's batch */
                const int b = cur_eval - (nl - 1);
                t.catch_tokens += b;
                t.catch_passes++;
                t.catch_cost += c_draft * (v_of(b) - 1.0);
            }
            if (p) sd_proposer_commit(p, ctx, n_ctx);
        }
        if (verbose) {
            printf("  %s #%lld: %d tokens, %ld passes, %.3f tokens/pass, %ld draft steps", c,
                   (long long)json_integer_value(json_object_get(r, "prompt_index")), no, passes,
                   (double)no / (double)passes, t.draft_steps - steps0);
            if (cache_mb > 0) { /* the output's tokens a copy of earlier outputs covers */
                int covered = 0, spans = 0;
                for (int g = 0; g < no;) {
                    const int l = prev_out ? longest_copy(prev_out, n_prev, ref + g, 16) : 0;
                    if (l >= 2) {
                        covered += l;
                        spans++;
                        g += l;
                    } else
                        g++;
                }
                printf(", earlier outputs cover %d tokens (%.0f%%) in %d spans", covered,
                       100.0 * covered / (no > 0 ? no : 1), spans);
            }
            printf("\n");
        }
        if (cache_mb > 0) { /* the finished request joins the cache and the history */
            if (cache && sd_suffix_cache_add(cache, ctx, n_ctx, &err)) goto fail;
            int32_t *h = realloc(hist, (size_t)(n_hist + n_ctx + 1) * sizeof *h);
            int32_t *po = realloc(prev_out, (size_t)(n_prev + no + 1) * sizeof *po);
            if (!h || !po) {
                fprintf(stderr, "replay_draft: out of memory\n");
                return 1;
            }
            hist = h;
            prev_out = po;
            memcpy(hist + n_hist, ctx, (size_t)n_ctx * sizeof *hist);
            n_hist += n_ctx;
            hist[n_hist++] = -1;
            memcpy(prev_out + n_prev, ref, (size_t)no * sizeof *prev_out);
            n_prev += no;
            prev_out[n_prev++] = -1;
        }
        t.tokens += no;
        t.passes += passes;
        sd_proposer_free(chain);
        sd_proposer_free(llm);
        if (gv && look) byte_hits += sd_proposer_suffix_byte_hits(look);
        sd_proposer_free(look);
        free(ctx);
        free(ref);
        continue;
    fail:
        fprintf(stderr, "replay_draft: %s\n", err.msg);
        return 1;
    }
    if (t.passes == 0) {
        fprintf(stderr, "replay_draft: no run of category %s with ids in %s\n", cat, json);
        return 1;
    }
    printf("%s %s K=%d W=%d second_max=%d long_match=%d p_min=%.2f c=%.2f: %ld tokens, %ld "
           "passes, tokens/pass %.3f, drafted/pass %.2f, accept %.3f, draft steps/pass %.2f, "
           "passes lookup/mixed/llm %ld/%ld/%ld, predicted %.3f\n",
           cat, type, K, W, second_max, long_match, p_min, c_draft, t.tokens, t.passes,
           (double)t.tokens / (double)t.passes, (double)t.drafted / (double)t.passes,
           t.drafted ? (double)t.accepted / (double)t.drafted : 0.0,
           (double)t.draft_steps / (double)t.passes, t.lookup_only, t.mixed, t.llm_only,
           (double)t.tokens / t.cost);
    if (use_llm)
        printf("  the draft's catch-up: %ld batched first steps of %.1f tokens on average; "
               "predicted with them at c v(b): %.3f\n",
               t.catch_passes, t.catch_passes ? (double)t.catch_tokens / t.catch_passes : 0.0,
               (double)t.tokens / (t.cost + t.catch_cost));
    if (!copy)
        printf("  passes with a wrong token: at the root %ld (a copy: %ld tokens more), below it "
               "%ld (%ld more)\n",
               t.wrong_root, t.lost_root, t.wrong_below, t.lost_below);
    if (gv) printf("  byte-level matches drafted: %lld\n", (long long)byte_hits);
    if (cache)
        printf("  cache: %d documents, %lld tokens, %zu bytes\n", sd_suffix_cache_n_docs(cache),
               (long long)sd_suffix_cache_n_tokens(cache), sd_suffix_cache_bytes(cache));
    sd_suffix_cache_free(cache);
    free(hist);
    free(prev_out);
    sd_model_free(md);
    sd_model_free(tm);
    sd_grammar_vocab_free(gv);
    sd_model_free(bm);
    json_decref(root);
    return 0;
}
