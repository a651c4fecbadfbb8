/*
 * tests/test_ngram_cache.c: the persistent lookup cache (draft/ngram_cache.c): save and load
 * round trips with the same proposals, the newest documents kept within the cap, loading
 * keeps what adding keeps, bad files refused with one line naming the file, atomic saves.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "draft/sd_draft.h"
#include "runtime/engine/sd_engine.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "target/sd_target.h"
#include "testutil.h"
#include "verify/sd_verify.h"

static char g_dir[1024];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(ngram, .init = setup, .fini = teardown, .timeout = 600);

/* ------------------------------------------------------------------------------------ */
/* Lookup cache                                                                          */

static sd_ngram_cache *new_cache(uint64_t fp, int32_t n_vocab) {
    sd_ngram_params np = sd_ngram_default_params();
    np.n_min = 1; /* as tu_make_ngram(1, 4, ..., 1000) */
    np.n_max = 4;
    sd_ngram_cache *c = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_ngram_cache_init(fp, n_vocab, &np, 0, &c, &err), 0, "%s", err.msg);
    return c;
}

static int load_cache(const char *path, uint64_t fp, int32_t n_vocab, sd_ngram_cache **c,
                      sd_error *err) {
    sd_ngram_params np = sd_ngram_default_params();
    np.n_min = 1;
    np.n_max = 4;
    return sd_ngram_cache_load(path, fp, n_vocab, &np, 0, c, err);
}

Test(ngram, lookup_cache_round_trip_and_proposals) {
    char path[2048];
    tu_path(path, sizeof path, g_dir, "cache.bin");
    sd_ngram_cache *c = new_cache(0x1234, 100);
    const int32_t doc1[] = {1, 10, 11, 12, 13, 14, 15};
    const int32_t doc2[] = {1, 20, 21, 22, 23};
    sd_error err = {0};
    cr_assert_eq(sd_ngram_cache_add(c, doc1, 7, &err), 0, "%s", err.msg);
    cr_assert_eq(sd_ngram_cache_add(c, doc2, 5, &err), 0, "%s", err.msg);
    cr_assert_eq(sd_ngram_cache_save(c, path, &err), 0, "%s", err.msg);
    cr_assert_eq(tu_count_files(g_dir), 1, "a temporary file was left behind");
    sd_ngram_cache_free(c);
    c = NULL;
    cr_assert_eq(load_cache(path, 0x1234, 100, &c, &err), 0, "%s", err.msg);
    cr_assert_eq(sd_ngram_cache_n_docs(c), 2);
    cr_assert_eq(sd_ngram_cache_n_tokens(c), 12);
    /* A context with no match of its own finds "11 12" in the cache: 13 14 15, then the
     * document ends (no token of the next document follows). */
    sd_proposer *p = tu_make_ngram(1, 4, 64, 1000);
    cr_assert_eq(sd_proposer_ngram_set_cache(p, c, &err), 0, "%s", err.msg);
    const int32_t ctx[] = {1, 50, 11, 12};
    sd_proposal prop;
    cr_assert_eq(sd_proposer_propose(p, ctx, 4, 6, &prop, &err), 0);
    cr_assert_eq(prop.n, 3, "cache continuation: %d tokens, expected 3", prop.n);
    cr_assert_eq(prop.tokens[0], 13);
    cr_assert_eq(prop.tokens[2], 15);
    cr_assert_eq(sd_proposer_ngram_last_match(p), 2);
    /* The context's own match wins over the cache's. */
    const int32_t ctx2[] = {1, 11, 40, 2, 11};
    cr_assert_eq(sd_proposer_propose(p, ctx2, 5, 1, &prop, &err), 0);
    cr_assert_eq(prop.tokens[0], 40);
    /* Sizes must agree. */
    sd_proposer *p2 = tu_make_ngram(2, 3, 64, 1000);
    cr_assert_eq(sd_proposer_ngram_set_cache(p2, c, &err), SD_ERR_ARG);
    sd_proposer_free(p2);
    sd_proposer_free(p);
    sd_ngram_cache_free(c);
}

Test(ngram, lookup_cache_keeps_the_newest_documents) {
    sd_ngram_params np = sd_ngram_default_params();
    sd_ngram_cache *c = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_ngram_cache_init(7, 100, &np, 10, &c, &err), 0, "%s", err.msg);
    const int32_t a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8}, d[] = {9, 10, 11};
    cr_assert_eq(sd_ngram_cache_add(c, a, 4, &err), 0);
    cr_assert_eq(sd_ngram_cache_add(c, b, 4, &err), 0);
    cr_assert_eq(sd_ngram_cache_add(c, d, 3, &err), 0); /* 11 > 10: a goes */
    cr_assert_eq(sd_ngram_cache_n_docs(c), 2);
    cr_assert_eq(sd_ngram_cache_n_tokens(c), 7);
    const int32_t bad[] = {1, 100};
    cr_assert_eq(sd_ngram_cache_add(c, bad, 2, &err), SD_ERR_ARG);
    cr_assert_eq(sd_ngram_cache_n_tokens(c), 7, "a rejected document changed the cache");
    sd_ngram_cache_free(c);
}

/* Loading into a smaller cache keeps exactly what adding the documents one by one would
 * (the newest that fit, the newest alone cut to its tail), with the same proposals. */
Test(ngram, lookup_cache_load_keeps_what_adding_keeps) {
    char path[2048];
    tu_path(path, sizeof path, g_dir, "docs.bin");
    sd_ngram_params np = sd_ngram_default_params();
    np.n_min = 1;
    np.n_max = 4;
    sd_error err = {0};
    sd_ngram_cache *all = new_cache(9, 100);
    int32_t docs[5][7];
    const int32_t lens[5] = {3, 5, 2, 7, 4};
    for (int d = 0; d < 5; d++) {
        for (int i = 0; i < lens[d]; i++)
            docs[d][i] = 1 + (d * 7 + i * 3) % 97;
        cr_assert_eq(sd_ngram_cache_add(all, docs[d], lens[d], &err), 0, "%s", err.msg);
    }
    cr_assert_eq(sd_ngram_cache_save(all, path, &err), 0, "%s", err.msg);
    sd_ngram_cache_free(all);
    const int64_t caps[] = {3, 4, 6, 11, 12, 13, 21, 100};
    for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
        sd_ngram_cache *one = NULL, *loaded = NULL;
        cr_assert_eq(sd_ngram_cache_init(9, 100, &np, caps[k], &one, &err), 0, "%s", err.msg);
        for (int d = 0; d < 5; d++)
            cr_assert_eq(sd_ngram_cache_add(one, docs[d], lens[d], &err), 0, "%s", err.msg);
        cr_assert_eq(sd_ngram_cache_load(path, 9, 100, &np, caps[k], &loaded, &err), 0, "%s",
                     err.msg);
        cr_assert_eq(sd_ngram_cache_n_docs(loaded), sd_ngram_cache_n_docs(one), "cap %lld",
                     (long long)caps[k]);
        cr_assert_eq(sd_ngram_cache_n_tokens(loaded), sd_ngram_cache_n_tokens(one), "cap %lld",
                     (long long)caps[k]);
        sd_proposer *pa = tu_make_ngram(1, 4, 64, 1000), *pb = tu_make_ngram(1, 4, 64, 1000);
        cr_assert_eq(sd_proposer_ngram_set_cache(pa, one, &err), 0, "%s", err.msg);
        cr_assert_eq(sd_proposer_ngram_set_cache(pb, loaded, &err), 0, "%s", err.msg);
        for (int d = 0; d < 5; d++)
            for (int i = 0; i + 1 < lens[d]; i++) {
                const int32_t ctx[2] = {99, docs[d][i]};
                sd_proposal a, b;
                cr_assert_eq(sd_proposer_propose(pa, ctx, 2, 4, &a, &err), 0);
                cr_assert_eq(sd_proposer_propose(pb, ctx, 2, 4, &b, &err), 0);
                cr_assert_eq(a.n, b.n, "cap %lld, doc %d, token %d", (long long)caps[k], d, i);
                for (int j = 0; j < a.n; j++)
                    cr_assert_eq(a.tokens[j], b.tokens[j]);
            }
        sd_proposer_free(pa);
        sd_proposer_free(pb);
        sd_ngram_cache_free(one);
        sd_ngram_cache_free(loaded);
    }
    /* A folder is refused, and never with the ENOENT that means "start an empty cache". */
    sd_ngram_cache *got = NULL;
    errno = ENOENT;
    cr_assert_eq(load_cache(g_dir, 9, 100, &got, &err), SD_ERR_IO);
    cr_assert_neq(errno, ENOENT, "a folder reads as a missing cache: %s", err.msg);
    cr_assert(strstr(err.msg, "not a regular file"), "%s", err.msg);
}

/* Bad files: a one-line error naming the file; nothing is loaded. */
Test(ngram, lookup_cache_bad_files) {
    char good[2048], bad[2048];
    tu_path(good, sizeof good, g_dir, "good.bin");
    tu_path(bad, sizeof bad, g_dir, "bad.bin");
    sd_ngram_cache *c = new_cache(42, 100);
    const int32_t doc[] = {1, 2, 3, 4, 5, 6};
    sd_error err = {0};
    cr_assert_eq(sd_ngram_cache_add(c, doc, 6, &err), 0);
    cr_assert_eq(sd_ngram_cache_save(c, good, &err), 0, "%s", err.msg);
    sd_ngram_cache_free(c);
    size_t n = 0;
    unsigned char *img = tu_read_file(good, &n);
    cr_assert(img && n == 40 + 4 + 24 + 8, "file of %zu bytes", n);
    struct {
        const char *what, *word;
        size_t len;
        int byte;          /* -1: no change */
        unsigned char val; /* the new value of img[byte] */
        sd_status st;
    } cases[] = {
        {"empty", "not a specdec lookup cache", 0, -1, 0, SD_ERR_FORMAT},
        {"not a cache", "not a specdec lookup cache", 0, -2, 0, SD_ERR_FORMAT},
        {"header cut", "truncated", 30, -1, 0, SD_ERR_FORMAT},
        {"tokens cut", "truncated", 60, -1, 0, SD_ERR_FORMAT},
        {"checksum cut", "truncated", n - 3, -1, 0, SD_ERR_FORMAT},
        {"trailing bytes", "after its end", n + 5, -1, 0, SD_ERR_FORMAT},
        {"flipped token", "checksum", n, 50, 9, SD_ERR_FORMAT},
        {"version", "version", n, 8, 7, SD_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *buf = calloc(1, n + 16);
        cr_assert(buf);
        if (cases[i].byte == -2)
            memcpy(buf, "GGUF\3\0\0\0this is not a lookup cache at all", 40);
        else
            memcpy(buf, img, n);
        if (cases[i].byte >= 0) buf[cases[i].byte] = cases[i].val;
        const size_t len = cases[i].byte == -2 ? 40 : cases[i].len;
        cr_assert_eq(tu_write_file(bad, buf, len), 0);
        free(buf);
        sd_ngram_cache *got = (sd_ngram_cache *)&err;
        sd_error e2 = {0};
        const int rc = load_cache(bad, 42, 100, &got, &e2);
        cr_assert_eq(rc, (int)cases[i].st, "%s: status %d (%s)", cases[i].what, rc, e2.msg);
        cr_assert_null(got, "%s: a cache came back", cases[i].what);
        cr_assert(strstr(e2.msg, bad) && strstr(e2.msg, cases[i].word),
                  "%s: '%s' should name the file and say '%s'", cases[i].what, e2.msg,
                  cases[i].word);
        cr_assert_null(strchr(e2.msg, '\n'), "%s: not one line", cases[i].what);
    }
    /* Another vocabulary: size or fingerprint. */
    sd_ngram_cache *got = NULL;
    cr_assert_eq(load_cache(good, 43, 100, &got, &err), SD_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "another vocabulary") && strstr(err.msg, good), "%s", err.msg);
    cr_assert_eq(load_cache(good, 42, 512, &got, &err), SD_ERR_MISMATCH);
    /* Missing: SD_ERR_IO with ENOENT (the CLI then starts an empty cache). */
    char missing[2048];
    tu_path(missing, sizeof missing, g_dir, "none.bin");
    cr_assert_eq(load_cache(missing, 42, 100, &got, &err), SD_ERR_IO);
    free(img);
}

/* Saving never leaves half a file: a failed save leaves the old file as it was and no
 * temporary file; a path that is not a regular file is refused. */
Test(ngram, lookup_cache_save_is_atomic) {
    char path[2048], sub[2048], in_missing[2048];
    tu_path(path, sizeof path, g_dir, "cache.bin");
    sd_ngram_cache *c = new_cache(5, 100);
    const int32_t doc[] = {1, 2, 3};
    sd_error err = {0};
    cr_assert_eq(sd_ngram_cache_add(c, doc, 3, &err), 0);
    cr_assert_eq(sd_ngram_cache_save(c, path, &err), 0, "%s", err.msg);
    size_t n0 = 0;
    unsigned char *before = tu_read_file(path, &n0);
    /* A directory in the way: refused, nothing written. */
    tu_path(sub, sizeof sub, g_dir, "adir");
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(sd_ngram_cache_save(c, sub, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "not a regular file"), "%s", err.msg);
    rmdir(sub);
    /* A folder that does not exist: an error naming the file, no temporary file. */
    tu_path(in_missing, sizeof in_missing, g_dir, "no/such/cache.bin");
    cr_assert_eq(sd_ngram_cache_save(c, in_missing, &err), SD_ERR_IO);
    cr_assert(strstr(err.msg, in_missing), "%s", err.msg);
    cr_assert_eq(tu_count_files(g_dir), 1, "temporary files left behind");
    size_t n1 = 0;
    unsigned char *after = tu_read_file(path, &n1);
    cr_assert(n0 == n1 && !memcmp(before, after, n0), "the good file changed");
    free(before);
    free(after);
    sd_ngram_cache_free(c);
}
