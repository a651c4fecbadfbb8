/*
 * Output-path safety of every writer (see sd_gguf.h, "output-path safety"): what may be
 * replaced (absent or a regular file, never an input: st_dev and st_ino compared). The
 * temporary every writer goes through is runtime/base's (sd_file_temp_*).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/gguf/sd_gguf.h"

int sd_gguf_check_output(const char *path, const char *const *inputs, size_t n_inputs,
                         sd_error *err) {
    struct stat so;
    if (lstat(path, &so) != 0) {
        if (errno == ENOENT) return SD_OK; /* a new file (its folder is checked at create) */
        return sd_errorf(err, SD_ERR_IO, "%s: cannot check the output: %s", path, strerror(errno));
    }
    if (!S_ISREG(so.st_mode))
        return sd_errorf(err, SD_ERR_IO, "%s: is %s, not a regular file: refusing to replace it",
                         path, sd_file_kind((unsigned)so.st_mode));
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
