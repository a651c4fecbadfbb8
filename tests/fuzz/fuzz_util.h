/*
 * Helpers of the libFuzzer targets (tests/fuzz/fuzz_*.c; built and run by scripts/fuzz.sh
 * with clang, -fsanitize=fuzzer,address,undefined). Not part of the library.
 */
#ifndef SD_FUZZ_UTIL_H
#define SD_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* The input as a file the readers can open by name: an in-memory file (memfd) whose
 * /proc/self/fd path goes into path[cap]. Returns its descriptor (close it after), or -1. */
static inline int fuzz_file(const uint8_t *data, size_t size, char *path, size_t cap) {
    int fd = memfd_create("fuzz-input", MFD_CLOEXEC);
    if (fd < 0) return -1;
    for (size_t off = 0; off < size;) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

/* A NUL-terminated malloc'd copy of data[0 .. size) (NUL bytes inside kept). */
static inline char *fuzz_strdup(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    for (size_t i = 0; i < size; i++)
        s[i] = (char)data[i];
    s[size] = '\0';
    return s;
}

#endif
