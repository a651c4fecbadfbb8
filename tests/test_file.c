/*
 * runtime/base's shared helpers: the splitmix64 finaliser and FNV-1a against their
 * published vectors, and the file helpers: inputs that are not regular files (a FIFO, a
 * folder) are refused at once instead of blocking, and temporaries are written, renamed
 * and cleaned up (including those a SIGKILLed process left behind).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/base/sd_base.h"
#include "tests/testutil.h"

static char g_dir[256];

static void setup(void) {
    cr_assert_eq(tu_mkdtemp(g_dir, sizeof g_dir), 0);
}
static void teardown(void) {
    tu_rmdir(g_dir);
}

TestSuite(file, .init = setup, .fini = teardown);

/* splitmix64 seeded with 1234567: the first outputs of Vigna's splitmix64.c (and Java's
 * SplittableRandom), i.e. sd_mix64 of the counter after each golden-gamma step. */
Test(file, mix64_is_splitmix64s_finaliser) {
    const uint64_t want[3] = {UINT64_C(6457827717110365317), UINT64_C(3203168211198807973),
                              UINT64_C(9817491932198370423)};
    uint64_t x = 1234567;
    for (int i = 0; i < 3; i++) {
        x += UINT64_C(0x9e3779b97f4a7c15);
        cr_expect_eq(sd_mix64(x), want[i], "output %d", i);
    }
}

/* FNV-1a 64 test vectors (Fowler/Noll/Vo's list): "" is the offset basis. */
Test(file, fnv1a64_vectors) {
    cr_expect_eq(sd_fnv1a64(SD_FNV1A64_INIT, "", 0), UINT64_C(0xcbf29ce484222325));
    cr_expect_eq(sd_fnv1a64(SD_FNV1A64_INIT, "a", 1), UINT64_C(0xaf63dc4c8601ec8c));
    cr_expect_eq(sd_fnv1a64(SD_FNV1A64_INIT, "foobar", 6), UINT64_C(0x85944171f73967e8));
    /* continuing from a partial hash is the hash of the concatenation */
    cr_expect_eq(sd_fnv1a64(sd_fnv1a64(SD_FNV1A64_INIT, "foo", 3), "bar", 3),
                 UINT64_C(0x85944171f73967e8));
}

/* A FIFO with no writer: open(2) without O_NONBLOCK would block forever. The check runs in
 * a child with an alarm, so a regression fails the test instead of hanging it. */
Test(file, open_regular_refuses_a_fifo_without_blocking) {
    char fifo[512];
    tu_path(fifo, sizeof fifo, g_dir, "ff");
    cr_assert_eq(mkfifo(fifo, 0600), 0, "%s", strerror(errno));
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        alarm(10);
        sd_error err = {0};
        int fd = sd_file_open_regular(fifo, &err);
        _exit(fd < 0 && errno == EINVAL && strstr(err.msg, "is a FIFO, not a regular file") &&
                      strstr(err.msg, fifo)
                  ? 0
                  : 1);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st), "the open blocked (killed by signal %d)", WTERMSIG(st));
    cr_assert_eq(WEXITSTATUS(st), 0, "a FIFO was not refused with its kind named");
}

Test(file, open_regular_names_folders_and_absent_files) {
    sd_error err = {0};
    cr_assert_lt(sd_file_open_regular(g_dir, &err), 0);
    cr_expect_eq(errno, EISDIR);
    cr_expect(strstr(err.msg, "is a folder, not a regular file"), "%s", err.msg);
    char absent[512];
    tu_path(absent, sizeof absent, g_dir, "absent");
    cr_assert_lt(sd_file_open_regular(absent, &err), 0);
    cr_expect_eq(errno, ENOENT, "callers read ENOENT as 'absent'");
    char reg[512];
    tu_path(reg, sizeof reg, g_dir, "reg");
    cr_assert_eq(tu_write_file(reg, "abc", 3), 0);
    int fd = sd_file_open_regular(reg, &err);
    cr_assert_geq(fd, 0, "%s", err.msg);
    char buf[4] = {0};
    cr_expect_eq(read(fd, buf, sizeof buf), 3);
    cr_expect_str_eq(buf, "abc");
    cr_expect_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0, "O_NONBLOCK left set");
    close(fd);
}

Test(file, write_atomic_replaces_and_leaves_no_temporary) {
    char path[512];
    tu_path(path, sizeof path, g_dir, "out.txt");
    sd_error err = {0};
    cr_assert_eq(sd_file_write_atomic(path, "first", 5, &err), SD_OK, "%s", err.msg);
    cr_assert_eq(sd_file_write_atomic(path, "second", 6, &err), SD_OK, "%s", err.msg);
    size_t n = 0;
    unsigned char *got = tu_read_file(path, &n);
    cr_assert(got);
    cr_expect_eq(n, 6);
    cr_expect_str_eq((char *)got, "second");
    free(got);
    cr_expect_eq(tu_count_files(g_dir), 1, "a temporary was left beside the file");
    /* A folder that does not exist: an error naming the path, nothing created. */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x", g_dir);
    cr_assert_eq(sd_file_write_atomic(bad, "x", 1, &err), SD_ERR_IO);
    cr_expect(strstr(err.msg, bad), "%s", err.msg);
}

/* A pid that no longer exists: a child that has been reaped (pids are not reused at once). */
static pid_t dead_pid(void) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) _exit(0);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return pid;
}

/* SIGKILL during a write leaves "<path>.tmp.<pid>": the next write to path removes it, and
 * leaves alone the temporary of a live process, another file's and a folder. */
Test(file, temp_create_removes_the_temporaries_of_dead_processes) {
    char path[512], stale[600], live[600], other[600], dir_tmp[600], tmp[600];
    tu_path(path, sizeof path, g_dir, "out.gguf");
    const pid_t dead = dead_pid();
    snprintf(stale, sizeof stale, "%s.tmp.%ld", path, (long)dead);
    snprintf(live, sizeof live, "%s.tmp.%ld", path, (long)getppid()); /* alive: our parent */
    snprintf(other, sizeof other, "%s/other.gguf.tmp.%ld", g_dir, (long)dead);
    snprintf(dir_tmp, sizeof dir_tmp, "%s.tmp.%ld", path, (long)dead + 1);
    cr_assert_eq(tu_write_file(stale, "partial", 7), 0);
    cr_assert_eq(tu_write_file(live, "in use", 6), 0);
    cr_assert_eq(tu_write_file(other, "not ours", 8), 0);
    const int made_dir = kill(dead + 1, 0) != 0 && errno == ESRCH;
    if (made_dir) cr_assert_eq(mkdir(dir_tmp, 0700), 0);
    cr_assert_eq(sd_file_temp_path(path, tmp, sizeof tmp), 0);
    sd_error err = {0};
    int fd = sd_file_temp_create(path, tmp, &err);
    cr_assert_geq(fd, 0, "%s", err.msg);
    cr_expect_eq(access(stale, F_OK), -1, "the dead process's temporary is still there");
    cr_expect_eq(access(live, F_OK), 0, "a live process's temporary was removed");
    cr_expect_eq(access(other, F_OK), 0, "another file's temporary was removed");
    if (made_dir) cr_expect_eq(access(dir_tmp, F_OK), 0, "a folder was removed");
    cr_assert_eq(sd_file_temp_commit(fd, tmp, path, 0, &err), SD_OK, "%s", err.msg);
    cr_expect_eq(access(path, F_OK), 0);
    unlink(live);
    unlink(other);
    rmdir(dir_tmp);
}

/* A failed write (prior_errno) removes the temporary and names the step. */
Test(file, temp_commit_cleans_up_after_a_failed_write) {
    char path[512], tmp[600];
    tu_path(path, sizeof path, g_dir, "x.bin");
    cr_assert_eq(sd_file_temp_path(path, tmp, sizeof tmp), 0);
    sd_error err = {0};
    int fd = sd_file_temp_create(path, tmp, &err);
    cr_assert_geq(fd, 0, "%s", err.msg);
    cr_assert_eq(sd_file_temp_commit(fd, tmp, path, ENOSPC, &err), SD_ERR_IO);
    cr_expect(strstr(err.msg, "write") && strstr(err.msg, strerror(ENOSPC)), "%s", err.msg);
    cr_expect_eq(tu_count_files(g_dir), 0, "the temporary (or a file) was left");
}

/* sd_error_prefix returns the status it is given, with or without a record: the pattern
 * `if (rc) return sd_error_prefix(err, rc, ...)` must stay a failure when err is NULL. */
Test(error, prefix_returns_the_status_given) {
    cr_assert_eq(sd_error_prefix(NULL, SD_ERR_IO, "%s", "file"), SD_ERR_IO);
    cr_assert_eq(sd_error_prefix(NULL, SD_ERR_OOM, "x"), SD_ERR_OOM);
    sd_error err = {0};
    sd_errorf(&err, SD_ERR_FORMAT, "bad magic");
    cr_assert_eq(sd_error_prefix(&err, SD_ERR_FORMAT, "%s: header", "m.gguf"), SD_ERR_FORMAT);
    cr_assert_str_eq(err.msg, "m.gguf: header: bad magic");
    cr_assert_eq(err.status, SD_ERR_FORMAT);
    /* The record's status is kept; the return value is the caller's. */
    cr_assert_eq(sd_error_prefix(&err, SD_ERR_IO, "outer"), SD_ERR_IO);
    cr_assert_eq(err.status, SD_ERR_FORMAT);
    cr_assert_str_eq(err.msg, "outer: m.gguf: header: bad magic");
}
