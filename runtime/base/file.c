/*
 * runtime/base/file.c: the file helpers of sd_base.h. Every file specdec writes goes to a
 * temporary "<path>.tmp.<pid>" beside it, is fsync'ed and renamed over path
 * (sd_file_temp_*, sd_file_write_atomic); every file it reads by name is opened without
 * blocking and must be a regular file (sd_file_open_regular).
 */
#include "runtime/base/sd_base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *sd_file_kind(unsigned mode) {
    const mode_t m = (mode_t)mode;
    if (S_ISREG(m)) return "a regular file";
    if (S_ISLNK(m)) return "a symbolic link";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISDIR(m)) return "a folder";
    return "a special file";
}

int sd_file_open_regular(const char *path, sd_error *err) {
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer forever. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    int e = errno;
    if (fd < 0) {
        sd_errorf(err, SD_ERR_IO, "%s: cannot open: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    struct stat st;
    const char *what = NULL;
    if (fstat(fd, &st) != 0) {
        e = errno;
        what = "fstat";
    } else if (!S_ISREG(st.st_mode)) {
        close(fd);
        sd_errorf(err, SD_ERR_IO, "%s: is %s, not a regular file", path,
                  sd_file_kind((unsigned)st.st_mode));
        errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        return -1;
    } else {
        const int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
            e = errno;
            what = "fcntl";
        }
    }
    if (what) {
        close(fd);
        sd_errorf(err, SD_ERR_IO, "%s: %s: %s", path, what, strerror(e));
        errno = e;
        return -1;
    }
    return fd;
}

int sd_file_temp_path(const char *path, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s.tmp.%ld", path, (long)getpid());
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* Remove the temporaries of path ("<base>.tmp.<pid>" in its folder) whose process no
 * longer exists: what a SIGKILL or a power cut left (our own pid's is handled by the
 * caller). A live process's temporary, and anything not a regular file, is kept. (A writer
 * in another PID namespace sharing the folder is not seen: its temporary would go, and its
 * rename then fail, leaving path as it was.) */
static void remove_stale_temps(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const size_t dir_len = slash ? (size_t)(slash - path) : 0;
    char dir[4096];
    if (dir_len >= sizeof dir) return;
    if (!slash) {
        strcpy(dir, ".");
    } else if (dir_len == 0) {
        strcpy(dir, "/");
    } else {
        memcpy(dir, path, dir_len);
        dir[dir_len] = '\0';
    }
    const size_t base_len = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    const struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        if (strncmp(name, base, base_len) || strncmp(name + base_len, ".tmp.", 5)) continue;
        const char *digits = name + base_len + 5;
        char *end;
        errno = 0;
        const long pid = strtol(digits, &end, 10);
        if (errno || end == digits || *end || digits[0] < '1' || digits[0] > '9' || pid <= 0 ||
            pid > 0x7fffffffL || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours */
        char full[8192];
        if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, name) >= sizeof full) continue;
        struct stat st;
        if (lstat(full, &st) == 0 && S_ISREG(st.st_mode)) (void)unlink(full);
    }
    closedir(d);
}

int sd_file_temp_create(const char *path, const char *tmp, sd_error *err) {
    struct stat st;
    /* Our pid's name: a regular file there is a leftover of a killed process. */
    if (lstat(tmp, &st) == 0 && S_ISREG(st.st_mode)) (void)unlink(tmp);
    remove_stale_temps(path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) sd_errorf(err, SD_ERR_IO, "%s: create %s: %s", path, tmp, strerror(errno));
    return fd;
}

int sd_file_write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, p + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? errno : EIO;
        off += (size_t)w;
    }
    return 0;
}

/* fsync the folder holding path so the rename itself is durable (best effort). */
static void fsync_dir(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        const size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) return;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int sd_file_temp_commit(int fd, const char *tmp, const char *path, int prior_errno, sd_error *err) {
    int e = prior_errno;
    const char *what = "write";
    if (!e && fd >= 0 && fsync(fd) != 0) e = errno, what = "fsync";
    if (fd >= 0 && close(fd) != 0 && !e) e = errno, what = "close";
    if (!e && rename(tmp, path) != 0) e = errno, what = "rename";
    if (e) {
        (void)unlink(tmp);
        return sd_errorf(err, SD_ERR_IO, "%s: %s: %s", path, what, strerror(e));
    }
    fsync_dir(path);
    return SD_OK;
}

int sd_file_write_atomic(const char *path, const void *buf, size_t n, sd_error *err) {
    char tmp[4200];
    if (sd_file_temp_path(path, tmp, sizeof tmp) != 0)
        return sd_errorf(err, SD_ERR_ARG, "%.200s...: path too long", path);
    int fd = sd_file_temp_create(path, tmp, err);
    if (fd < 0) return SD_ERR_IO;
    return sd_file_temp_commit(fd, tmp, path, sd_file_write_all(fd, buf, n), err);
}
