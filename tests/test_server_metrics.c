/*
 * tests/test_server_metrics.c: /metrics under vLLM's names (runtime/server/metrics_vllm.c)
 * against what the answers themselves reported.
 *
 * A server with the shipped TinyStories pair answers a few greedy completions (different
 * prompts and lengths, one with n = 2, one streamed with usage). The reference is the sum
 * of the answers' own "speculative" blocks (drafts, drafted, accepted, accepted_per_pos),
 * usage counts and finish reasons: vLLM's spec_decode counters, per-position counters,
 * request_success by finished_reason and generation/prompt token counters must equal those
 * sums exactly, and each histogram must hold one observation per finished choice with
 * cumulative buckets ending at its count.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_util.h"
#include "testutil.h"

#define MT_TARGET SD_SOURCE_DIR "/models/tinystories-target-q8_0.gguf"
#define MT_DRAFT  SD_SOURCE_DIR "/models/tinystories-draft-q8_0.gguf"

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    signal(SIGPIPE, SIG_IGN);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(server_metrics, .init = setup, .fini = teardown, .timeout = 300);

/* What the answers reported, summed. */
typedef struct sums {
    long long drafts, drafted, accepted, at[16], gen, prompt, n_stop, n_length, choices;
} sums;

static void add_spec(sums *m, json_t *sp) {
    cr_assert(json_is_object(sp), "no speculative block");
    m->drafts += json_integer_value(json_object_get(sp, "drafts"));
    m->drafted += json_integer_value(json_object_get(sp, "drafted"));
    m->accepted += json_integer_value(json_object_get(sp, "accepted"));
    json_t *at = json_object_get(sp, "accepted_per_pos");
    cr_assert(json_is_array(at));
    cr_assert_leq(json_array_size(at), 16);
    long long sum_at = 0;
    for (size_t i = 0; i < json_array_size(at); i++) {
        m->at[i] += json_integer_value(json_array_get(at, i));
        sum_at += json_integer_value(json_array_get(at, i));
    }
    /* Each accepted token sits at one draft position. */
    cr_assert_eq(sum_at, json_integer_value(json_object_get(sp, "accepted")));
}

static void add_finish(sums *m, const char *f) {
    cr_assert_not_null(f);
    if (!strcmp(f, "stop"))
        m->n_stop++;
    else if (!strcmp(f, "length"))
        m->n_length++;
    else
        cr_assert_fail("finish_reason %s", f);
    m->choices++;
}

/* The sample NAME{engine="0",model_name="...",EXTRA} of text (EXTRA may be ""). */
static double vmetric(const char *text, const char *name, const char *extra) {
    char key[512];
    snprintf(key, sizeof key,
             "vllm:%s{engine=\"0\",model_name=\"tinystories-target-q8_0.gguf\"%s%s}", name,
             *extra ? "," : "", extra);
    const double v = metric_in(text, key);
    cr_assert_geq(v, 0, "no sample %s", key);
    return v;
}

/* Histogram NAME: its buckets are cumulative (never decreasing), +Inf equals _count,
 * _count is want and the sum is >= 0. */
static double check_hist(const char *text, const char *name, long long want) {
    char pre[256];
    snprintf(pre, sizeof pre, "vllm:%s_bucket{", name);
    double last = 0;
    int n = 0;
    for (const char *p = strstr(text, pre); p; p = strstr(p + 1, pre)) {
        const char *sp = strchr(p, ' ');
        const double v = atof(sp + 1);
        cr_assert_geq(v, last, "%s: buckets not cumulative", name);
        last = v;
        n++;
    }
    cr_assert_gt(n, 2, "%s: no buckets", name);
    char b[128];
    snprintf(b, sizeof b, "%s_count", name);
    cr_assert_eq((long long)vmetric(text, b, ""), want, "%s_count", name);
    snprintf(b, sizeof b, "%s_bucket", name);
    cr_assert_eq((long long)vmetric(text, b, "le=\"+Inf\""), want, "%s +Inf bucket", name);
    snprintf(b, sizeof b, "%s_sum", name);
    const double sum = vmetric(text, b, "");
    cr_assert_geq(sum, 0);
    return sum;
}

Test(server_metrics, vllm_names_sum_the_answers) {
    tu_need_path(MT_TARGET, "the shipped TinyStories target");
    tu_need_path(MT_DRAFT, "the shipped TinyStories draft");
    srv s;
    srv_start(&s, "-m " MT_TARGET " -md " MT_DRAFT " -np 2 -c 1024");
    sums m;
    memset(&m, 0, sizeof m);
    static const char *const bodies[] = {
        "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0}",
        "{\"prompt\":\"The little dog ran to the park and\",\"max_tokens\":24,\"temperature\":0}",
        "{\"prompt\":\"Lily had a red ball.\",\"max_tokens\":200,\"temperature\":0}",
        "{\"prompt\":\"Tom and Sue\",\"max_tokens\":30,\"temperature\":0,\"n\":2}",
        "{\"prompt\":\"Once upon a time\",\"max_tokens\":16,\"temperature\":0,\"draft_max\":0}",
    };
    for (size_t k = 0; k < sizeof bodies / sizeof bodies[0]; k++) {
        json_t *j = http_json(&s, "POST", "/v1/completions", bodies[k], 200);
        add_spec(&m, json_object_get(j, "speculative"));
        json_t *u = json_object_get(j, "usage");
        m.gen += json_integer_value(json_object_get(u, "completion_tokens"));
        m.prompt += json_integer_value(json_object_get(u, "prompt_tokens"));
        json_t *ch = json_object_get(j, "choices");
        for (size_t i = 0; i < json_array_size(ch); i++)
            add_finish(&m,
                       json_string_value(json_object_get(json_array_get(ch, i), "finish_reason")));
        json_decref(j);
    }
    /* A streamed request: its speculative block rides the chunk that ends its choice. */
    char *o = NULL;
    cr_assert_eq(http(&s, "POST", "/v1/chat/completions",
                      "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"}],"
                      "\"max_tokens\":20,\"temperature\":0,\"stream\":true,"
                      "\"stream_options\":{\"include_usage\":true}}",
                      NULL, &o),
                 200);
    int saw_spec = 0;
    for (const char *p = o; (p = strstr(p, "data: {")); p += 6) {
        const char *e = strstr(p, "\n\n");
        cr_assert_not_null(e);
        json_t *j = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
        cr_assert_not_null(j);
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        json_t *sp = json_object_get(j, "speculative");
        if (sp) {
            add_spec(&m, sp);
            saw_spec++;
        }
        json_t *f = c ? json_object_get(c, "finish_reason") : NULL;
        if (f && json_is_string(f)) add_finish(&m, json_string_value(f));
        json_t *u = json_object_get(j, "usage");
        if (u && json_is_object(u)) {
            m.gen += json_integer_value(json_object_get(u, "completion_tokens"));
            m.prompt += json_integer_value(json_object_get(u, "prompt_tokens"));
        }
        json_decref(j);
    }
    free(o);
    cr_assert_eq(saw_spec, 1, "the stream's speculative block");
    cr_assert_gt(m.drafts, 0, "nothing was drafted: the pair should draft");
    cr_assert_gt(m.accepted, 0);

    char *t = NULL;
    cr_assert_eq(http(&s, "GET", "/metrics", NULL, NULL, &t), 200);
    cr_expect_eq((long long)vmetric(t, "spec_decode_num_drafts_total", ""), m.drafts);
    cr_expect_eq((long long)vmetric(t, "spec_decode_num_draft_tokens_total", ""), m.drafted);
    cr_expect_eq((long long)vmetric(t, "spec_decode_num_accepted_tokens_total", ""), m.accepted);
    for (int i = 0; i < 16; i++) {
        char lab[32];
        snprintf(lab, sizeof lab, "position=\"%d\"", i);
        cr_expect_eq((long long)vmetric(t, "spec_decode_num_accepted_tokens_per_pos_total", lab),
                     m.at[i], "position %d", i);
    }
    cr_expect_eq((long long)vmetric(t, "generation_tokens_total", ""), m.gen);
    cr_expect_eq((long long)vmetric(t, "request_success_total", "finished_reason=\"stop\""),
                 m.n_stop);
    cr_expect_eq((long long)vmetric(t, "request_success_total", "finished_reason=\"length\""),
                 m.n_length);
    cr_expect_eq((long long)vmetric(t, "request_success_total", "finished_reason=\"abort\""), 0);
    cr_expect_eq((long long)vmetric(t, "num_requests_running", ""), 0);
    cr_expect_eq((long long)vmetric(t, "num_requests_waiting", ""), 0);
    /* Every choice generated a first token; the e2e time holds the first token's. */
    const double ttft = check_hist(t, "time_to_first_token_seconds", m.choices);
    const double e2e = check_hist(t, "e2e_request_latency_seconds", m.choices);
    check_hist(t, "request_time_per_output_token_seconds", m.choices);
    cr_expect_geq(e2e, ttft);
    /* The prompt counter counts each admitted request's prompt once (usage counts the
     * n = 2 request's prompt once too). */
    cr_expect_eq((long long)vmetric(t, "prompt_tokens_total", ""), m.prompt);
    free(t);
    srv_stop_ok(&s);
}
