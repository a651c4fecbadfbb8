/*
 * Output-path safety of the writers (`specdec quantize`, `specdec convert`, the GGUF
 * writer): only regular files are replaced (a FIFO, a character device, a symlink, a
 * folder are refused with one line naming the path, and are left as they were); an
 * output that is the same file as an input (same st_dev and st_ino: the same name, a
 * "./" spelling, a hard link) is refused and the input is left byte for byte; the
 * temporary "OUT.tmp.PID" is removed on a write error, on SIGXFSZ (a file-size limit)
 * and on SIGTERM / SIGINT in the middle of the write, and after a SIGKILL by the next write
 * to the same path.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/convert/sd_convert.h"
#include "runtime/gguf/sd_gguf.h"
#include "testutil.h"

static char g_dir[1024];
static char g_in[2048];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
    tu_llama_spec s = tu_llama_default_spec();
    cr_assert_eq(tu_make_llama(tu_path(g_in, sizeof g_in, g_dir, "in.gguf"), &s), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(outfile, .init = setup, .fini = teardown, .timeout = 300);

/* Files in g_dir whose name contains ".tmp." (the writers' temporaries). */
static int n_temporaries(void) {
    DIR *d = opendir(g_dir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

/* `specdec ARGS` fails cleanly with exactly one stderr line "specdec: ..." that
 * contains needle; no temporary is left. */
static void expect_refused(const char *args, const char *needle) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s", SD_BINARY, args);
    char *out = NULL, *err = NULL;
    int rc = tu_run(cmd, &out, &err);
    cr_assert(rc > 0 && rc < 128, "'%s' exited %d (want a clean non-zero exit); stderr: %s", args,
              rc, err);
    cr_assert(err && strncmp(err, "specdec: ", 9) == 0, "'%s': stderr was '%s'", args, err);
    const char *nl = strchr(err, '\n');
    cr_assert(nl && nl[1] == '\0', "'%s': expected one stderr line, got '%s'", args, err);
    cr_assert(strstr(err, needle), "'%s': stderr '%s' does not name '%s'", args, err, needle);
    cr_assert_eq(n_temporaries(), 0, "'%s' left a temporary behind", args);
    free(out);
    free(err);
}

static mode_t lmode(const char *path) {
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0, "%s vanished", path);
    return st.st_mode;
}

/* The special outputs: a FIFO, a symlink to a regular file, a folder, and (root only:
 * mknod) a character device like /dev/null. Each is refused by `specdec ARGS_FMT`
 * (one %s: the output) and left as it was. */
static void check_special_outputs(const char *args_fmt) {
    char fifo[2048], link[2048], target[2048], folder[2048], chr[2048], args[8192];
    tu_path(fifo, sizeof fifo, g_dir, "out.fifo");
    tu_path(link, sizeof link, g_dir, "out.link");
    tu_path(target, sizeof target, g_dir, "link-target.txt");
    tu_path(folder, sizeof folder, g_dir, "out.dir");
    tu_path(chr, sizeof chr, g_dir, "out.chr");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    cr_assert_eq(tu_write_file(target, "keep me\n", 8), 0);
    cr_assert_eq(symlink(target, link), 0);
    cr_assert_eq(mkdir(folder, 0755), 0);
    const int have_chr = mknod(chr, S_IFCHR | 0666, makedev(1, 3)) == 0; /* needs root */

    snprintf(args, sizeof args, args_fmt, fifo);
    expect_refused(args, fifo);
    cr_assert(S_ISFIFO(lmode(fifo)), "the FIFO was replaced");
    snprintf(args, sizeof args, args_fmt, link);
    expect_refused(args, link);
    cr_assert(S_ISLNK(lmode(link)), "the symlink was replaced");
    size_t n = 0;
    unsigned char *b = tu_read_file(target, &n);
    cr_assert(b && n == 8 && !memcmp(b, "keep me\n", 8), "the symlink's target changed");
    free(b);
    snprintf(args, sizeof args, args_fmt, folder);
    expect_refused(args, folder);
    cr_assert(S_ISDIR(lmode(folder)));
    if (have_chr) {
        snprintf(args, sizeof args, args_fmt, chr);
        expect_refused(args, chr);
        cr_assert(S_ISCHR(lmode(chr)), "the character device was replaced");
    }
    unlink(fifo);
    unlink(link);
    unlink(target);
    unlink(chr);
    rmdir(folder);
}

Test(outfile, quantize_writes_only_regular_files) {
    char fmt[4096];
    snprintf(fmt, sizeof fmt, "quantize %s %%s q8_0", g_in);
    check_special_outputs(fmt);
}

Test(outfile, convert_writes_only_regular_files) {
    char ck[2048], tok[2048], fmt[8192];
    cr_assert_eq(tu_make_llama2c(tu_path(ck, sizeof ck, g_dir, "c.bin"),
                                 tu_path(tok, sizeof tok, g_dir, "tok.bin")),
                 0);
    snprintf(fmt, sizeof fmt, "convert %s %s %%s", ck, tok);
    check_special_outputs(fmt);
}

/* path's bytes are still want[0 .. n). */
static void expect_unchanged(const char *path, const unsigned char *want, size_t n) {
    size_t m = 0;
    unsigned char *b = tu_read_file(path, &m);
    cr_assert(b && m == n && !memcmp(b, want, n), "%s was changed", path);
    free(b);
}

Test(outfile, quantize_refuses_its_input) {
    size_t n = 0;
    unsigned char *orig = tu_read_file(g_in, &n);
    cr_assert_not_null(orig);
    char hard[2048], args[8192];
    tu_path(hard, sizeof hard, g_dir, "hard.gguf");
    cr_assert_eq(link(g_in, hard), 0);
    const char *outs[3] = {g_in, hard, NULL};
    char dotted[4096];
    snprintf(dotted, sizeof dotted, "%s/./in.gguf", g_dir);
    outs[2] = dotted;
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "quantize %s %s q8_0", g_in, outs[i]);
        expect_refused(args, "same file as the input");
        expect_unchanged(g_in, orig, n);
    }
    /* From the folder itself: "quantize in.gguf ./in.gguf". */
    snprintf(args, sizeof args, "cd %s && %s quantize in.gguf ./in.gguf q4_0", g_dir, SD_BINARY);
    char *err = NULL;
    cr_assert_eq(tu_run(args, NULL, &err), 1, "%s", err);
    cr_assert(strstr(err, "./in.gguf"), "%s", err);
    free(err);
    expect_unchanged(g_in, orig, n);
    free(orig);
}

Test(outfile, convert_refuses_its_inputs) {
    char ck[2048], tok[2048], hard[2048], args[8192];
    cr_assert_eq(tu_make_llama2c(tu_path(ck, sizeof ck, g_dir, "c.bin"),
                                 tu_path(tok, sizeof tok, g_dir, "tok.bin")),
                 0);
    size_t nc = 0, nt = 0;
    unsigned char *c0 = tu_read_file(ck, &nc), *t0 = tu_read_file(tok, &nt);
    cr_assert(c0 && t0);
    tu_path(hard, sizeof hard, g_dir, "hard.bin");
    cr_assert_eq(link(tok, hard), 0);
    const char *outs[3] = {ck, tok, hard};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "convert %s %s %s", ck, tok, outs[i]);
        expect_refused(args, "same file as the input");
        expect_unchanged(ck, c0, nc);
        expect_unchanged(tok, t0, nt);
    }
    /* The checkpoint is good: a new output is written. */
    char out[2048];
    snprintf(args, sizeof args, "%s convert %s %s %s", SD_BINARY, ck, tok,
             tu_path(out, sizeof out, g_dir, "ok.gguf"));
    char *err = NULL;
    cr_assert_eq(tu_run(args, NULL, &err), 0, "%s", err);
    free(err);
    free(c0);
    free(t0);
}

/* The library checks too: the writer and sd_quantize_file refuse the same way. */
Test(outfile, library_writers_refuse) {
    char fifo[2048];
    tu_path(fifo, sizeof fifo, g_dir, "lib.fifo");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    sd_gguf_writer *w = sd_gguf_writer_new();
    cr_assert_not_null(w);
    cr_assert_eq(sd_gguf_set_u32(w, "general.alignment", 32), SD_OK);
    sd_error err = {0};
    cr_assert_eq(sd_gguf_writer_write(w, fifo, &err), SD_ERR_IO, "%s", err.msg);
    cr_assert(strstr(err.msg, fifo) && strstr(err.msg, "FIFO"), "%s", err.msg);
    cr_assert(S_ISFIFO(lmode(fifo)));
    sd_gguf_writer_free(w);
    size_t n = 0;
    unsigned char *orig = tu_read_file(g_in, &n);
    cr_assert_eq(sd_quantize_file(g_in, g_in, SD_TYPE_Q8_0, NULL, &err), SD_ERR_ARG);
    cr_assert(strstr(err.msg, "same file"), "%s", err.msg);
    expect_unchanged(g_in, orig, n);
    free(orig);
    cr_assert_eq(n_temporaries(), 0);
}

/* A model whose quantized copy is a few hundred KiB (bigger than the limits below). */
static void make_bigger_input(void) {
    tu_llama_spec s = tu_llama_default_spec();
    s.n_vocab = 2048;
    s.n_embd = 128;
    s.n_ff = 256;
    cr_assert_eq(tu_make_llama(g_in, &s), 0);
}

/* A file-size limit: with SIGXFSZ ignored the write fails (EFBIG) and the error path
 * removes the temporary; with its default action the signal kills the process and the
 * handler removes it. */
Test(outfile, write_limit_removes_temporary) {
    make_bigger_input();
    char out[2048], cmd[8192];
    tu_path(out, sizeof out, g_dir, "out.gguf");
    for (int ignore = 0; ignore <= 1; ignore++) {
        snprintf(cmd, sizeof cmd, "ulimit -f 64; %s exec %s quantize %s %s q8_0",
                 ignore ? "trap '' XFSZ;" : "", SD_BINARY, g_in, out);
        char *err = NULL;
        int rc = tu_run(cmd, NULL, &err);
        cr_assert_neq(rc, 0, "quantize beyond the file-size limit succeeded");
        if (ignore) cr_assert(err && strstr(err, out), "error does not name the output: %s", err);
        free(err);
        cr_assert_eq(n_temporaries(), 0, "temporary left behind (SIGXFSZ %s)",
                     ignore ? "ignored" : "default");
        cr_assert_eq(access(out, F_OK), -1, "a partial output was left");
    }
}

/* Start quantize, wait (inotify) until its temporary exists, send sig. */
static void kill_during_write(int sig) {
    char out[2048];
    tu_path(out, sizeof out, g_dir, "killed.gguf");
    int in = inotify_init1(IN_CLOEXEC);
    cr_assert_geq(in, 0);
    /* SIGKILL: wait for data written to the temporary (the writer's, not the one the output
     * check creates and removes at once) */
    cr_assert_geq(inotify_add_watch(in, g_dir, sig == SIGKILL ? IN_MODIFY : IN_CREATE), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        execl(SD_BINARY, SD_BINARY, "quantize", g_in, out, "q8_0", (char *)NULL);
        _exit(127);
    }
    char buf[4096] __attribute__((aligned(8)));
    int seen = 0;
    while (!seen) {
        ssize_t n = read(in, buf, sizeof buf);
        cr_assert_gt(n, 0);
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *e = (const struct inotify_event *)(void *)p;
            if (e->len && strstr(e->name, "killed.gguf.tmp.")) seen = 1;
            p += sizeof *e + e->len;
        }
    }
    kill(pid, sig);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    close(in);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == sig,
              "quantize finished before the signal (status 0x%x): make the input bigger", st);
    if (sig == SIGKILL) {
        /* nothing can run on SIGKILL: the temporary stays until the next write to the path */
        cr_assert_eq(n_temporaries(), 1, "SIGKILL left no temporary?");
        char cmd[8192], *err = NULL;
        snprintf(cmd, sizeof cmd, "%s quantize %s %s q8_0", SD_BINARY, g_in, out);
        cr_assert_eq(tu_run(cmd, NULL, &err), 0, "%s", err);
        free(err);
        cr_assert_eq(n_temporaries(), 0, "the dead process's temporary is still there");
        cr_assert_eq(access(out, F_OK), 0);
        unlink(out);
        return;
    }
    cr_assert_eq(n_temporaries(), 0, "signal %d left the temporary behind", sig);
    cr_assert_eq(access(out, F_OK), -1);
}

Test(outfile, sigterm_and_sigint_remove_temporary) {
    tu_llama_spec s = tu_llama_default_spec();
    s.n_vocab = 16384; /* ~17 MiB of Q8_0 to write: the signal lands mid-write */
    s.n_embd = 512;
    s.n_head = 8;
    s.n_head_kv = 8;
    s.n_layer = 1;
    s.n_ff = 64;
    cr_assert_eq(tu_make_llama(g_in, &s), 0);
    kill_during_write(SIGTERM);
    kill_during_write(SIGINT);
}

/* SIGKILL mid-write leaves "OUT.tmp.PID" (49 MB for SmolLM2's q8_0): the next write to OUT
 * removes it, since no process of that pid exists any more. */
Test(outfile, sigkill_temporary_removed_by_the_next_write) {
    tu_llama_spec s = tu_llama_default_spec();
    s.n_vocab = 16384;
    s.n_embd = 512;
    s.n_head = 8;
    s.n_head_kv = 8;
    s.n_layer = 1;
    s.n_ff = 64;
    cr_assert_eq(tu_make_llama(g_in, &s), 0);
    kill_during_write(SIGKILL);
}
