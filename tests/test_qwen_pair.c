/*
 * The real pair: Qwen2.5-Coder-1.5B-Instruct (target) and -0.5B-Instruct (draft), Q4_K_M,
 * fetched by `bash scripts/get_models.sh pair` into models/downloaded/ (CI fetches it).
 * Every test skips with one line when a file is absent. Kept short for CI: a few dozen
 * tokens per run (fewer in sanitizer builds, where the 1.5B model runs several times
 * slower).
 *   - configs/qwen2.5-coder-pair.json loads and pairs them (qwen2, gpt2 vocabulary of
 *     151,936 ids, the chat template), with the shipped trimmed head;
 *   - greedy speculative output equals target-alone output on coding chat prompts, for
 *     the LLM draft at several K, the trimmed head, n-gram and ngram+llm;
 *   - at temperature 0.7 with --spec-sampling gumbel the speculative text is the
 *     target-alone text of the same seed;
 *   - the draft agrees with the target: over the greedy runs at least 60% of the drafted
 *     tokens are accepted (a broken pairing or a wrong head: about 0).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/engine/sd_engine.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "testutil.h"

#define TARGET SD_SOURCE_DIR "/models/downloaded/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
#define DRAFT  SD_SOURCE_DIR "/models/downloaded/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
#define HEAD   SD_SOURCE_DIR "/configs/qwen2.5-coder.head"

#ifdef SD_CHECKS
#define N_TOKENS 8 /* sanitizer / debug builds */
#else
#define N_TOKENS 32
#endif

TestSuite(qwen_pair, .timeout = 900);

static void need_pair(void) {
    if (access(TARGET, R_OK) != 0 || access(DRAFT, R_OK) != 0)
        cr_skip_test("the Qwen2.5-Coder pair is absent: run `bash scripts/get_models.sh pair` "
                     "(the test is skipped otherwise)");
}

static const char *const k_prompts[] = {
    "Write a Python function is_prime(n) that returns True when n is prime.",
    "Add a docstring to this function and return the whole function:\n\ndef area(w, h):\n"
    "    return w * h",
};

/* The prompt in the target's chat template, tokenized. */
static int32_t *chat_ids(sd_engine *e, const char *prompt, size_t *n) {
    const sd_vocab *v = sd_engine_vocab(e);
    const sd_chat_msg msg = {"user", prompt};
    char *text = NULL;
    size_t len = 0;
    sd_error err = {0};
    cr_assert_eq(sd_chat_apply(sd_vocab_chat_template(v), &msg, 1, 1, &text, &len, &err), SD_OK,
                 "%s", err.msg);
    int32_t *ids = NULL;
    cr_assert_eq(sd_vocab_tokenize(v, text, len, SD_VOCAB_PARSE_SPECIAL, &ids, n, &err), SD_OK,
                 "%s", err.msg);
    free(text);
    return ids;
}

static sd_engine *open_pair(const char *head) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = TARGET;
    ep.draft = DRAFT;
    ep.n_ctx = 1024;
    ep.draft_head = head;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    return e;
}

static void gen(sd_engine *e, const sd_gen_params *gp, const int32_t *ids, size_t n, int32_t *out,
                sd_gen_stats *st) {
    sd_error err = {0};
    cr_assert_eq(
        sd_engine_generate(e, gp, ids, (int32_t)n, NULL, NULL, out, gp->n_predict, st, &err), SD_OK,
        "%s", err.msg);
}

Test(qwen_pair, config_loads_and_pairs) {
    need_pair();
    sd_engine *e = open_pair(access(HEAD, R_OK) == 0 ? HEAD : NULL);
    const sd_hparams *hp = sd_model_hparams(sd_engine_target(e));
    cr_expect_str_eq(hp->arch, "qwen2");
    cr_expect_eq(hp->n_vocab, 151936);
    cr_expect_eq(hp->n_layer, 28);
    cr_expect_eq(sd_model_hparams(sd_engine_draft(e))->n_layer, 24);
    cr_expect(sd_vocab_chat_template(sd_engine_vocab(e)) != NULL);
    if (access(HEAD, R_OK) == 0)
        cr_expect_gt(sd_proposer_llm_head_size(sd_engine_proposer(e)), 0,
                     "the shipped head did not load");
    sd_engine_free(e);
    char cmd[1024], *out = NULL, *errs = NULL;
    snprintf(cmd, sizeof cmd,
             "%s generate --config %s/configs/qwen2.5-coder-pair.json -p 'Say hi.' -n 4 -t 0 "
             "--json",
             SD_BINARY, SD_SOURCE_DIR);
    const int rc = tu_run(cmd, &out, &errs);
    cr_expect_eq(rc, 0, "%s", errs);
    cr_expect(out && strstr(out, "\"n_generated\""), "%s", out ? out : "");
    free(out);
    free(errs);
}

Test(qwen_pair, greedy_speculative_equals_target_alone) {
    need_pair();
    sd_engine *e = open_pair(NULL), *eh = access(HEAD, R_OK) == 0 ? open_pair(HEAD) : NULL;
    int64_t drafted = 0, accepted = 0;
    for (size_t pi = 0; pi < sizeof k_prompts / sizeof k_prompts[0]; pi++) {
        size_t n = 0;
        int32_t *ids = chat_ids(e, k_prompts[pi], &n);
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = N_TOKENS;
        gp.samp.temp = 0.0f;
        gp.draft_type = SD_DRAFT_NONE;
        int32_t ref[N_TOKENS], got[N_TOKENS];
        sd_gen_stats st, st2;
        gen(e, &gp, ids, n, ref, &st);
        const struct {
            sd_engine *e;
            sd_draft_type t;
            int32_t k;
        } runs[] = {{e, SD_DRAFT_LLM, 3},
                    {e, SD_DRAFT_LLM, 6},
                    {e, SD_DRAFT_NGRAM, 4},
                    {e, SD_DRAFT_NGRAM_LLM, 4},
                    {eh, SD_DRAFT_LLM, 4}};
        for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
            if (!runs[r].e) continue;
            gp.draft_type = runs[r].t;
            gp.n_draft = runs[r].k;
            gen(runs[r].e, &gp, ids, n, got, &st2);
            cr_assert_eq(st2.n_generated, st.n_generated, "prompt %zu run %zu", pi, r);
            cr_assert(!memcmp(got, ref, (size_t)st.n_generated * sizeof *got),
                      "prompt %zu: %s K %d%s differs from target alone", pi,
                      sd_draft_type_name(runs[r].t), runs[r].k, runs[r].e == eh ? " (head)" : "");
            if (runs[r].t == SD_DRAFT_LLM) {
                drafted += st2.n_drafted;
                accepted += st2.n_accepted;
            }
        }
        free(ids);
    }
    cr_log_info("real pair, greedy: acceptance %.3f (%lld of %lld)",
                drafted ? (double)accepted / drafted : 0.0, (long long)accepted,
                (long long)drafted);
    cr_expect_gt(drafted, 0);
    cr_expect_geq((double)accepted, 0.6 * (double)drafted, "acceptance %.3f",
                  drafted ? (double)accepted / drafted : 0.0);
    sd_engine_free(eh);
    sd_engine_free(e);
}

Test(qwen_pair, gumbel_sampling_equals_target_alone_sampling) {
    need_pair();
    sd_engine *e = open_pair(NULL);
    size_t n = 0;
    int32_t *ids = chat_ids(e, k_prompts[0], &n);
    for (uint64_t seed = 1; seed <= 2; seed++) {
        sd_gen_params gp = sd_gen_default_params();
        gp.n_predict = N_TOKENS;
        gp.samp.temp = 0.7f;
        gp.samp.spec = SD_SPEC_GUMBEL;
        gp.seed = seed;
        gp.draft_type = SD_DRAFT_NONE;
        int32_t ref[N_TOKENS], got[N_TOKENS];
        sd_gen_stats st, st2;
        gen(e, &gp, ids, n, ref, &st);
        gp.draft_type = SD_DRAFT_LLM;
        gp.n_draft = 4;
        gen(e, &gp, ids, n, got, &st2);
        cr_assert_eq(st2.n_generated, st.n_generated);
        cr_assert(!memcmp(got, ref, (size_t)st.n_generated * sizeof *got),
                  "seed %llu: gumbel speculative text differs from target alone",
                  (unsigned long long)seed);
    }
    free(ids);
    sd_engine_free(e);
}
