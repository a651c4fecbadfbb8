/*
 * Output-path safety of every writer (see sd_gguf.h, "output-path safety"): what may be
 * replaced (absent or a regular file, never an input: st_dev and st_ino compared), the
 * temporary's name "<path>.tmp.<pid>", and its creation (O_EXCL | O_NOFOLLOW).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/gguf/sd_gguf.h"

static const char *file_kind(mode_t m) {
    if (S_ISLNK(m)) return "a symbolic link";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISDIR(m)) return "a folder";
    return "a special file";
}

int sd_gguf_check_output(const char *path, const char *const *inputs, size_t n_inputs,
                         sd_error *err) {
    struct stat so;
    if (lstat(path, &so) != 0) {
        if (errno == ENOENT) return SD_OK; /* a new file (its folder is checked at create) */
        return sd_errorf(err, SD_ERR_IO, "%s: cannot check the output: %s", path, strerror(errno));
    }
    if (!S_ISREG(so.st_mode))
        return sd_errorf(err, SD_ERR_IO, "%s: is %s, not a regular file: refusing to replace it",
                         path, file_kind(so.st_mode));
    for (size_t i = 0; i < n_inputs; i++) {
        struct stat si;
        if (!inputs[i] || stat(inputs[i], &si) != 0) continue; /* its reader reports it */
        if (si.st_dev == so.st_dev && si.st_ino == so.st_ino)
            return sd_errorf(err, SD_ERR_ARG,
                             "%s: is the same file as the input %s: refusing to overwrite the "
                             "input (choose another output name)",
                             path, inputs[i]);
    }
    return SD_OK;
}

int sd_gguf_temp_path(const char *path, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s.tmp.%ld", path, (long)getpid());
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int sd_gguf_temp_create(const char *path, const char *tmp, sd_error *err) {
    struct stat st;
    /* Our pid's name: a regular file there is a leftover of a killed process. */
    if (lstat(tmp, &st) == 0 && S_ISREG(st.st_mode)) (void)unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) sd_errorf(err, SD_ERR_IO, "%s: create %s: %s", path, tmp, strerror(errno));
    return fd;
}
