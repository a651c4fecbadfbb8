/*
 * The interactive chat (generate --chat without a prompt, or -i; tools/chat_loop.c) and
 * Ctrl-C during generate:
 *   - every turn's answer is what a fresh engine computes from the whole conversation so far
 *     (the earlier turns' KV entries are kept, not recomputed, and change nothing), and only
 *     the new tokens of a turn are evaluated (all but the last token given stay cached);
 *   - turns from a pipe, /exit, -n per answer, statistics per turn on stderr; -f - reads the
 *     prompt from standard input;
 *   - on a terminal (a pseudo-terminal here): the "> " prompt, Ctrl-C stops the current
 *     answer and the chat goes on;
 *   - SIGINT during `generate` stops at the next token: the statistics are printed, the
 *     lookup cache is saved, the exit status is 130.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "draft/sd_draft.h"
#include "tools/chat_loop.h"
#include "tools/common/sd_cli.h"
#include "runtime/engine/sd_engine.h"
#include "tests/testutil.h"

static char g_dir[256], g_t[512], g_d[512], g_long[512];

/* The tests' random pair (as tu_make_test_pair: an F32 target, its noisy Q8_0 copy as the
 * draft) with a context of 1024 (chat templates take many tokens of the synthetic
 * vocabulary), and a target of 8192 for answers long enough to be interrupted. */
static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    tu_llama_spec s = tu_llama_default_spec();
    s.n_ctx = 1024;
    cr_assert_eq(tu_make_llama(tu_path(g_t, sizeof g_t, g_dir, "t.gguf"), &s), 0);
    s.wtype = SD_TYPE_Q8_0;
    s.noise = 0.3f;
    cr_assert_eq(tu_make_llama(tu_path(g_d, sizeof g_d, g_dir, "d.gguf"), &s), 0);
    s = tu_llama_default_spec();
    s.n_ctx = 8192;
    cr_assert_eq(tu_make_llama(tu_path(g_long, sizeof g_long, g_dir, "long.gguf"), &s), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(chat_loop, .init = setup, .fini = teardown, .timeout = 300);

typedef struct turn_rec {
    int n;
    int32_t n_prompt[8], n_answer[8], n_cached[8];
} turn_rec;

static void on_turn(void *user, int turn, int32_t n_prompt, int32_t n_answer, int32_t n_cached,
                    const int32_t *conv, int32_t n_conv) {
    (void)conv;
    (void)n_conv;
    turn_rec *r = user;
    cr_assert_eq(turn, r->n + 1);
    if (r->n < 8) {
        r->n_prompt[r->n] = n_prompt;
        r->n_answer[r->n] = n_answer;
        r->n_cached[r->n] = n_cached;
    }
    r->n++;
}

static sd_engine *open_engine(const char *draft) {
    sd_engine_params ep = sd_engine_default_params();
    ep.target = g_t;
    ep.draft = draft;
    ep.n_threads = 1;
    ep.gen.samp.temp = 0.0f;
    ep.gen.n_draft = 3;
    sd_engine *e = NULL;
    sd_error err = {0};
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    return e;
}

/* The answers of a chat equal fresh generations from the conversation before each answer,
 * with a draft model and with the target alone; the KV cache keeps every earlier token. */
Test(chat_loop, turns_reuse_the_cache_and_answer_as_a_fresh_run) {
    const char *drafts[2] = {NULL, g_d};
    int32_t *convs[2] = {NULL, NULL}, n_convs[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        sd_engine *e = open_engine(drafts[k]);
        static const char lines[] = "t5 t6 t7\n\nt8 t9\\\nt10 t11\nt12\n/exit\nt13 never read\n";
        FILE *in = fmemopen((void *)lines, sizeof lines - 1, "r");
        cr_assert(in);
        sd_cli_chat c;
        memset(&c, 0, sizeof c);
        c.engine = e;
        c.gen = sd_engine_params_of(e)->gen;
        c.max_tokens = 6;
        c.tmpl = "chatml";
        c.system = "t20 t21";
        c.add_bos = 1;
        c.in = in;
        turn_rec rec = {0};
        c.turn_done = on_turn;
        c.turn_user = &rec;
        int by_interrupt = -1;
        sd_error err = {0};
        fflush(stdout);
        const int saved = dup(STDOUT_FILENO), devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, STDOUT_FILENO); /* the answers */
        const int rc = sd_cli_chat_run(&c, &convs[k], &n_convs[k], &by_interrupt, &err);
        fflush(stdout);
        dup2(saved, STDOUT_FILENO);
        close(saved);
        close(devnull);
        fclose(in);
        cr_assert_eq(rc, SD_OK, "%s", err.msg);
        cr_assert_eq(by_interrupt, 0);
        /* three turns ("t8 t9\" continues on the next line; the empty line is skipped; the
         * line after /exit is never read) */
        cr_assert_eq(rec.n, 3, "%d turns", rec.n);
        cr_expect_eq(rec.n_cached[0], 0);
        for (int t = 0; t < rec.n; t++) {
            cr_assert_gt(rec.n_answer[t], 0);
            cr_assert_leq(rec.n_answer[t], 6, "-n bounds each answer");
            if (t > 0) {
                /* everything given before, but the last token, was still in the KV cache */
                cr_expect_eq(rec.n_cached[t], rec.n_prompt[t - 1] + rec.n_answer[t - 1] - 1,
                             "turn %d", t + 1);
                cr_expect_gt(rec.n_prompt[t], rec.n_prompt[t - 1] + rec.n_answer[t - 1]);
            }
        }
        cr_assert_eq(n_convs[k], rec.n_prompt[2] + rec.n_answer[2]);
        /* A fresh engine, no cache: each answer again from the conversation before it. */
        sd_engine *f = open_engine(drafts[k]);
        for (int t = 0; t < rec.n; t++) {
            sd_gen_params g = sd_engine_params_of(f)->gen;
            g.n_predict = rec.n_answer[t];
            int32_t out[8];
            sd_gen_stats st;
            cr_assert_eq(
                sd_engine_generate(f, &g, convs[k], rec.n_prompt[t], NULL, NULL, out, 8, &st, &err),
                SD_OK, "%s", err.msg);
            cr_assert_eq(st.n_generated, rec.n_answer[t]);
            cr_expect_eq(memcmp(out, convs[k] + rec.n_prompt[t], sizeof out[0] * st.n_generated), 0,
                         "turn %d: the chat's answer differs from a fresh run's", t + 1);
            sd_engine_free(f);
            f = open_engine(drafts[k]);
        }
        sd_engine_free(f);
        sd_engine_free(e);
    }
    /* greedy: speculative and target-alone conversations are the same tokens */
    cr_assert_eq(n_convs[0], n_convs[1]);
    cr_expect_eq(memcmp(convs[0], convs[1], sizeof(int32_t) * (size_t)n_convs[0]), 0);
    free(convs[0]);
    free(convs[1]);
}

/* The CLI over a pipe: turns from stdin, statistics per turn, /exit; -f - as a prompt. */
Test(chat_loop, cli_turns_from_a_pipe_and_prompt_from_stdin) {
    char cmd[4096], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd,
             "printf 't5 t6\\nt7\\n/exit\\n' | %s generate -m %s -md %s --chat-template chatml "
             "--temp 0 -n 5 -t 1",
             SD_BINARY, g_t, g_d);
    cr_assert_eq(tu_run(cmd, &out, &err), 0, "%s", err);
    cr_expect(strstr(err, "[turn 1: ") && strstr(err, "[turn 2: ") && !strstr(err, "[turn 3"), "%s",
              err);
    cr_expect(strstr(err, "0 from the KV cache") && strstr(err, "acceptance"), "%s", err);
    /* two answers, one line each (a pipe: no "> " prompts) */
    int lines = 0;
    for (const char *p = out; *p; p++)
        lines += *p == '\n';
    cr_expect_eq(lines, 2, "stdout: '%s'", out);
    cr_expect_null(strstr(out, "> "), "%s", out);
    free(out);
    free(err);
    /* -f -: the prompt from standard input, as -p would give it */
    char *a = NULL, *b = NULL;
    snprintf(cmd, sizeof cmd, "printf 't5 t6 t7' | %s generate -m %s -f - --temp 0 -n 6 --json",
             SD_BINARY, g_t);
    cr_assert_eq(tu_run(cmd, &a, NULL), 0);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p 't5 t6 t7' --temp 0 -n 6 --json", SD_BINARY,
             g_t);
    cr_assert_eq(tu_run(cmd, &b, NULL), 0);
    char *ta = strstr(a, "\"tokens\""), *tb = strstr(b, "\"tokens\"");
    cr_assert(ta && tb, "%s / %s", a, b);
    *strchr(ta, ']') = '\0';
    *strchr(tb, ']') = '\0';
    cr_expect_str_eq(ta, tb);
    free(a);
    free(b);
    /* an interactive chat cannot also read its prompt from stdin, nor print one JSON object */
    snprintf(cmd, sizeof cmd, "%s generate -m %s --chat-template chatml -i -f - </dev/null",
             SD_BINARY, g_t);
    cr_expect_eq(tu_run(cmd, NULL, NULL), SD_EXIT_USAGE);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --chat-template chatml --json </dev/null",
             SD_BINARY, g_t);
    cr_expect_eq(tu_run(cmd, NULL, NULL), SD_EXIT_USAGE);
}

/* Read from fd into buf (appending, NUL-terminated) until needle appears after offset
 * `from` or 20 s pass. 1 if seen. */
static int read_until(int fd, char *buf, size_t cap, size_t *len, size_t from, const char *needle) {
    const time_t t0 = time(NULL);
    while (time(NULL) - t0 < 20) {
        if (*len > from && strstr(buf + from, needle)) return 1;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0) continue;
        if (*len + 1 >= cap) return 0;
        ssize_t n = read(fd, buf + *len, cap - *len - 1);
        if (n <= 0) return *len > from && strstr(buf + from, needle) != NULL;
        *len += (size_t)n;
        buf[*len] = '\0';
    }
    return 0;
}

/* On a terminal: the "> " prompt, Ctrl-C stops the answer being written (not the chat),
 * the next turn is read, /exit ends with status 0. */
Test(chat_loop, terminal_ctrl_c_stops_the_answer_not_the_chat) {
    int master = -1;
    pid_t pid = forkpty(&master, NULL, NULL, NULL);
    cr_assert_geq(pid, 0, "forkpty: %s", strerror(errno));
    if (pid == 0) {
        execl(SD_BINARY, SD_BINARY, "generate", "-m", g_long, "--chat-template", "chatml",
              "--ignore-eos", "-n", "8000", "-t", "1", (char *)NULL);
        _exit(127);
    }
    static char buf[1 << 20];
    size_t len = 0;
    cr_assert(read_until(master, buf, sizeof buf, &len, 0, "> "), "no prompt: '%s'", buf);
    const size_t after_prompt = len;
    cr_assert_eq(write(master, "t5 t6\n", 6), 6);
    /* the answer is streaming (a token piece "t..." after the echoed line) */
    cr_assert(read_until(master, buf, sizeof buf, &len, after_prompt + 7, "t"), "'%s'", buf);
    cr_assert_eq(write(master, "\x03", 1), 1); /* Ctrl-C: the terminal sends SIGINT */
    cr_assert(read_until(master, buf, sizeof buf, &len, after_prompt, "stop: interrupted"), "'%s'",
              buf + after_prompt);
    const size_t stop_at = (size_t)(strstr(buf + after_prompt, "stop: interrupted") - buf);
    cr_assert(read_until(master, buf, sizeof buf, &len, stop_at, "> "), "no next prompt: %s",
              buf + after_prompt);
    cr_assert_eq(write(master, "/exit\n", 6), 6);
    read_until(master, buf, sizeof buf, &len, len, "never appears");
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    close(master);
    cr_assert(WIFEXITED(st), "ended by signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    cr_expect_eq(WEXITSTATUS(st), 0, "output: %s", buf);
    /* the interrupted answer is far shorter than its 8000-token budget */
    const char *turn = strstr(buf, "[turn 1: ");
    cr_assert(turn, "%s", buf);
    cr_expect_lt(atoi(turn + 9), 8000, "%s", turn);
}

/* SIGINT during generate: stop at the next token, statistics, lookup cache saved, exit 130. */
Test(chat_loop, sigint_during_generate_keeps_the_statistics_and_the_cache) {
    char cache[600];
    tu_path(cache, sizeof cache, g_dir, "lookup.bin");
    int out_pipe[2], err_pipe[2];
    cr_assert_eq(pipe(out_pipe), 0);
    cr_assert_eq(pipe(err_pipe), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(out_pipe[1], STDOUT_FILENO);
        dup2(err_pipe[1], STDERR_FILENO);
        close(out_pipe[0]);
        close(err_pipe[0]);
        signal(SIGINT, SIG_DFL);
        execl(SD_BINARY, SD_BINARY, "generate", "-m", g_long, "-p", "t5 t6 t7", "--ignore-eos",
              "-n", "8000", "-t", "1", "--draft-type", "ngram", "--lookup-cache", cache,
              (char *)NULL);
        _exit(127);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    static char obuf[1 << 20], ebuf[1 << 16];
    size_t olen = 0, elen = 0;
    /* the prompt is echoed, then tokens stream: wait for some of them */
    cr_assert(read_until(out_pipe[0], obuf, sizeof obuf, &olen, 12, "t"), "'%s'", obuf);
    cr_assert_eq(kill(pid, SIGINT), 0);
    read_until(err_pipe[0], ebuf, sizeof ebuf, &elen, 0, "time            prefill");
    read_until(out_pipe[0], obuf, sizeof obuf, &olen, olen, "never appears");
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    close(out_pipe[0]);
    close(err_pipe[0]);
    cr_assert(WIFEXITED(st), "killed by signal %d (stderr: %s)", WTERMSIG(st), ebuf);
    cr_expect_eq(WEXITSTATUS(st), SD_EXIT_INTERRUPTED, "stderr: %s", ebuf);
    cr_expect(strstr(ebuf, "stop: interrupted") && strstr(ebuf, "tokens/pass"), "%s", ebuf);
    /* the cache holds this run: the prompt and what was generated before Ctrl-C */
    sd_ngram_cache *c = NULL;
    sd_error err = {0};
    sd_engine_params ep = sd_engine_default_params();
    ep.target = g_long;
    sd_engine *e = NULL;
    cr_assert_eq(sd_engine_init(&ep, &e, &err), SD_OK, "%s", err.msg);
    sd_ngram_params np = sd_ngram_default_params();
    cr_assert_eq(sd_ngram_cache_load(cache, sd_draft_vocab_fingerprint(sd_engine_vocab(e)),
                                     sd_model_hparams(sd_engine_target(e))->n_vocab, &np, 0, &c,
                                     &err),
                 SD_OK, "the lookup cache was not saved: %s", err.msg);
    int gen = -1;
    const char *g = strstr(ebuf, "generated       ");
    cr_assert(g, "%s", ebuf);
    gen = atoi(g + 16);
    cr_expect(gen > 0 && gen < 8000, "generated %d", gen);
    sd_ngram_cache_free(c);
    sd_engine_free(e);
}

/* Ctrl-C while the chat waits for a line ends it, with the status of an interrupt (130). */
Test(chat_loop, terminal_ctrl_c_at_the_prompt_ends_the_chat) {
    int master = -1;
    pid_t pid = forkpty(&master, NULL, NULL, NULL);
    cr_assert_geq(pid, 0, "forkpty: %s", strerror(errno));
    if (pid == 0) {
        execl(SD_BINARY, SD_BINARY, "generate", "-m", g_t, "--chat-template", "chatml", "-n", "4",
              "-t", "1", (char *)NULL);
        _exit(127);
    }
    static char buf[1 << 16];
    size_t len = 0;
    cr_assert(read_until(master, buf, sizeof buf, &len, 0, "> "), "no prompt: '%s'", buf);
    cr_assert_eq(write(master, "t5\n", 3), 3);
    const size_t at = len;
    cr_assert(read_until(master, buf, sizeof buf, &len, at, "[turn 1:"), "'%s'", buf);
    const size_t turn_at = (size_t)(strstr(buf + at, "[turn 1:") - buf);
    cr_assert(read_until(master, buf, sizeof buf, &len, turn_at, "> "), "'%s'", buf);
    cr_assert_eq(write(master, "\x03", 1), 1);
    read_until(master, buf, sizeof buf, &len, len, "never appears");
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    close(master);
    cr_assert(WIFEXITED(st), "ended by signal %d: %s", WIFSIGNALED(st) ? WTERMSIG(st) : 0, buf);
    cr_expect_eq(WEXITSTATUS(st), SD_EXIT_INTERRUPTED, "%s", buf);
}
