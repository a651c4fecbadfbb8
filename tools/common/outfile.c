/*
 * Output files and streams of the CLI (see cli.h, "outputs"): the checks before a file
 * is written, atomic text files, the removal of a temporary when a signal kills the
 * process, and the check that everything written to stdout got there.
 *
 * Global state: the only mutable globals of the CLI are the three below, and they exist
 * because a signal handler can reach nothing else. g_temp holds the name of the one
 * temporary file being written (writes are sequential); g_temp_armed says whether the
 * handler must remove it. Only the main thread changes them (sd_cli_temp_arm/disarm),
 * with the flag cleared while the name changes. g_interrupts counts the SIGINTs since
 * sd_cli_interrupt_catch (or the last sd_cli_interrupt_clear). The handlers call only
 * async-signal-safe functions: unlink(2), sigaction(2) and raise(3) (the default action
 * is restored first, so raise ends the process as the signal would have).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/common/sd_cli.h"
#include "runtime/gguf/sd_gguf.h"

static char g_temp[4200];
static volatile sig_atomic_t g_temp_armed;
static volatile sig_atomic_t g_interrupts;

static void on_fatal_signal(int sig) {
    if (g_temp_armed) (void)unlink(g_temp);
    (void)raise(sig); /* the default action, restored by SA_RESETHAND */
}

/* SIGINT while caught: the first asks the command to stop (sd_cli_interrupted); another
 * before it has stopped ends the process as SIGINT does, temporary removed. */
static void on_interrupt(int sig) {
    if (g_interrupts == 0) {
        g_interrupts = 1;
        return;
    }
    if (g_temp_armed) (void)unlink(g_temp);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    (void)sigaction(sig, &dfl, NULL);
    (void)raise(sig);
}

int sd_cli_interrupt_catch(void) {
    struct sigaction old;
    /* Ignored by the parent (a background job, nohup): stays ignored. */
    if (sigaction(SIGINT, NULL, &old) != 0 || old.sa_handler == SIG_IGN) return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    /* SA_RESTART: writes to stdout and reads go on (an interrupted write to a terminal must
     * not lose the answer); who waits for input polls (the chat: ppoll). */
    sa.sa_flags = SA_RESTART;
    g_interrupts = 0;
    return sigaction(SIGINT, &sa, NULL) == 0;
}

int sd_cli_interrupted(void) {
    return g_interrupts != 0;
}

void sd_cli_interrupt_clear(void) {
    g_interrupts = 0;
}

void sd_cli_signals_install(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGXFSZ};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        /* A signal the parent ignores (nohup, a background job) stays ignored. */
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND;
        (void)sigaction(sigs[i], &sa, NULL);
    }
}

void sd_cli_temp_arm(const char *out_path) {
    g_temp_armed = 0;
    atomic_signal_fence(memory_order_seq_cst);
    if (sd_file_temp_path(out_path, g_temp, sizeof g_temp) != 0) return; /* too long: unarmed */
    atomic_signal_fence(memory_order_seq_cst);
    g_temp_armed = 1;
}

void sd_cli_temp_disarm(void) {
    g_temp_armed = 0;
    atomic_signal_fence(memory_order_seq_cst);
}

int sd_cli_check_output(const char *path, const char *const *inputs, size_t n_inputs,
                        sd_error *err) {
    int rc = sd_gguf_check_output(path, inputs, n_inputs, err);
    if (rc) return rc;
    struct stat st;
    if (lstat(path, &st) == 0 && access(path, W_OK) != 0)
        return sd_errorf(err, SD_ERR_IO, "%s: not writable: %s", path, strerror(errno));
    /* The file is written beside path and renamed over it: the folder must take a new
     * file. Creating (and removing) the temporary proves it, also for root and on
     * read-only mounts where access(2) says little. */
    char tmp[4200];
    if (sd_file_temp_path(path, tmp, sizeof tmp) != 0)
        return sd_errorf(err, SD_ERR_ARG, "%.200s...: path too long", path);
    sd_cli_temp_arm(path);
    int fd = sd_file_temp_create(path, tmp, err); /* err names path and the temporary */
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    sd_cli_temp_disarm();
    return fd >= 0 ? SD_OK : SD_ERR_IO;
}

int sd_cli_write_file_atomic(const char *path, const char *text, size_t len, sd_error *err) {
    char tmp[4200];
    if (sd_file_temp_path(path, tmp, sizeof tmp) != 0)
        return sd_errorf(err, SD_ERR_ARG, "%.200s...: path too long", path);
    int rc = sd_gguf_check_output(path, NULL, 0, err);
    if (rc) return rc;
    sd_cli_temp_arm(path);
    int fd = sd_file_temp_create(path, tmp, err);
    if (fd < 0) {
        sd_cli_temp_disarm();
        return SD_ERR_IO;
    }
    rc = sd_file_temp_commit(fd, tmp, path, sd_file_write_all(fd, text, len), err);
    sd_cli_temp_disarm();
    return rc;
}

int sd_cli_stdout_failed(void) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
    const int e = errno;
    fprintf(stderr, "specdec: stdout: write error: %s\n", e ? strerror(e) : "output lost");
    return 1;
}

int sd_cli_finish_stdout(int exit_code) {
    if (exit_code != EXIT_SUCCESS) {
        (void)fflush(stdout);
        return exit_code;
    }
    if (sd_cli_stdout_failed()) return EXIT_FAILURE;
    errno = 0;
    /* EBADF: stdout was closed (>&-) and nothing was written to it: nothing lost. */
    if (fclose(stdout) != 0 && errno != EBADF) {
        fprintf(stderr, "specdec: stdout: close failed: %s\n", strerror(errno));
        return EXIT_FAILURE;
    }
    return EXIT_SUCCESS;
}

int sd_cli_progress_on(void) {
    return isatty(STDERR_FILENO);
}

void sd_cli_progress(const char *fmt, ...) {
    if (!sd_cli_progress_on()) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}
