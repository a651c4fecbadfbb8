/*
 * runtime/base: the bottom of the library. Status codes, the error record, checked-size
 * helpers, the clock, the core count, the device enum, the draft-length limit, the hashes
 * every part shares (splitmix64's finaliser, FNV-1a) and the file helpers (reading only
 * regular files, writing through a temporary: file.c). Owns nothing; includes no other
 * part, only the public face include/specdec.h, where the status codes and the error
 * record are defined (every part may include it).
 *
 * Every library function that can fail returns an int status (SD_OK == 0) and, when
 * the caller passes a non-NULL sd_error, fills it with one line naming the file, the
 * field and what was expected vs found, e.g.
 *   "model.gguf: tensor 'blk.0.attn_q.weight': data [1234, +4096) is past end of file (5000 bytes)"
 * The CLI prints that line and exits non-zero. The library never calls exit()/abort()
 * on bad input (assertions guard only our own invariants, see SD_CHECKS).
 * Two tiers as in SQLite/ggml: sd_status for the kind, sd_error.msg for the detail.
 */
#ifndef SD_BASE_H
#define SD_BASE_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "include/specdec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The status codes (sd_status), the error record (sd_error, SD_ERROR_MSG_MAX), the
 * longest draft of a speculative step (SD_MAX_DRAFT: the proposals, the verification
 * pass over [last, d1 .. dK] and the verification result are sized for it; draft/,
 * target/, verify/ and the engine share this one limit) and sd_status_str are the
 * library's public face's (include/specdec.h), defined there once. */

/* Most nodes of one token-tree pass (sd_session_seq_decode_tree: the root and the drafted
 * nodes); a tree proposal holds at most SD_MAX_DRAFT drafted nodes. */
#define SD_MAX_TREE 64

/*
 * Record an error: formats printf-style into err->msg (truncating safely) and sets
 * err->status. err may be NULL (then only the status is returned). Returns (int)st so
 * callers can write `return sd_errorf(err, SD_ERR_FORMAT, "%s: ...", path);`.
 * If err already holds an error it is overwritten.
 */
int sd_errorf(sd_error *err, sd_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* s for a one-line message: control bytes (and DEL) as \xNN, cut with "..." to fit
 * buf[cap] (cap >= 12). Returns buf. For keys, values and input quoted from files and
 * requests, which can hold any byte (a newline included). */
const char *sd_one_line(const char *s, char *buf, size_t cap);

/*
 * Add context in front of a recorded error: err->msg becomes "<prefix>: <old msg>"
 * (printf-style prefix, truncated safely); err->status is kept. Returns rc, the status
 * of the failure being described, whether or not err is NULL, so
 * `if (rc) return sd_error_prefix(err, rc, "%s", path);` stays a failure without a record.
 */
int sd_error_prefix(sd_error *err, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clear an error record to SD_OK / "". err may be NULL. */
void sd_error_clear(sd_error *err);

/* Overflow-checked size arithmetic: return 0 and store the result, or -1 on overflow. */
int sd_mul_size(size_t a, size_t b, size_t *out);
int sd_add_size(size_t a, size_t b, size_t *out);

/* Append s[0 .. n) to the growable text *buf (*len bytes used of *cap; *buf NULL and both
 * 0 for an empty one), keeping it NUL-terminated (also when n is 0): the capacity doubles
 * from 256 as needed. 0, or -1 when the size overflows or realloc fails (*buf, *len and
 * *cap are then unchanged: the caller still owns and frees *buf). */
int sd_buf_append(char **buf, size_t *len, size_t *cap, const void *s, size_t n);

/* Internal invariant check: active when SD_CHECKS is defined (Debug and sanitizer
 * builds). On failure prints file:line and the message to stderr and aborts: it
 * flags a bug in specdec itself, never bad input. */
#ifdef SD_CHECKS
void sd_check_failed(const char *file, int line, const char *cond, const char *msg);
#define SD_CHECK(cond, msg)                                                                        \
    do {                                                                                           \
        if (!(cond)) sd_check_failed(__FILE__, __LINE__, #cond, (msg));                            \
    } while (0)
#else
#define SD_CHECK(cond, msg) ((void)0)
#endif

/* ---- hashes ---- */

/* The splitmix64 finaliser (Steele, Lea, Flood 2014, "Fast splittable pseudorandom number
 * generators"; Vigna's splitmix64.c): a bijection of 64-bit words in which every input
 * bit reaches every output bit. The RNG seeds through it, hash tables key with it. */
static inline uint64_t sd_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* FNV-1a 64 (Fowler, Noll, Vo; offset basis and prime of the 64-bit variant) of
 * p[0 .. n), continuing from h: start with SD_FNV1A64_INIT. Not a cryptographic hash:
 * checksums and fingerprints against accidents only. */
#define SD_FNV1A64_INIT UINT64_C(0xcbf29ce484222325)
static inline uint64_t sd_fnv1a64(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* ---- files (file.c) ----
 * Every file specdec writes goes to the temporary "<path>.tmp.<pid>" beside it (so a
 * program that removes temporaries on a fatal signal knows the name), is fsync'ed and
 * renamed over path: a failure never leaves a partial file at path. Every file it reads
 * by name is opened without blocking and must be a regular file (a FIFO would hang). */

/* "a regular file", "a FIFO", "a folder", "a symbolic link", ... for a st_mode. */
const char *sd_file_kind(unsigned mode);

/*
 * Open path for reading: O_NONBLOCK (a FIFO does not wait for a writer), then anything but
 * a regular file is refused ("PATH: is a FIFO, not a regular file") and O_NONBLOCK is
 * cleared. Returns the descriptor (O_CLOEXEC; the caller closes it), or -1 with err set
 * (SD_ERR_IO naming path) and errno telling why: open's (ENOENT: absent), EISDIR for a
 * folder, EINVAL for another kind of file.
 */
int sd_file_open_regular(const char *path, sd_error *err);

/* The temporary name of path, "<path>.tmp.<pid>", into buf[cap]. 0, or -1 if it does not
 * fit. */
int sd_file_temp_path(const char *path, char *buf, size_t cap);

/*
 * Create tmp (sd_file_temp_path(path)) new: O_CREAT | O_EXCL | O_NOFOLLOW, mode 0644. A
 * regular file already named tmp (a killed process with our pid left it) is removed
 * first, and so are the temporaries of path whose process no longer exists
 * ("<path>.tmp.<pid>", regular files, kill(pid, 0) == ESRCH: left by a SIGKILL). Returns
 * the descriptor, or -1 with err set (SD_ERR_IO naming path and tmp).
 */
int sd_file_temp_create(const char *path, const char *tmp, sd_error *err);

/* Write buf[0 .. n) to fd, retrying short writes and EINTR. 0, or the errno of the
 * failure (EIO for a write of 0 bytes). */
int sd_file_write_all(int fd, const void *buf, size_t n);

/*
 * Finish the temporary tmp of path written through fd: fsync, close, rename over path,
 * then fsync path's folder (best effort). prior_errno != 0 (an earlier write failed) only
 * cleans up. On any failure tmp is removed and SD_ERR_IO names path, the step and the
 * reason ("PATH: fsync: No space left on device"). fd is closed in every case (pass -1
 * when the caller closed it).
 */
int sd_file_temp_commit(int fd, const char *tmp, const char *path, int prior_errno, sd_error *err);

/* buf[0 .. n) to path through its temporary (create, write, commit as above). Does not
 * check what path is: callers that may replace a file check it first. */
int sd_file_write_atomic(const char *path, const void *buf, size_t n, sd_error *err);

/* The compute device a session runs its forward pass on (runtime/backend picks the
 * backend). SD_DEVICE_CUDA needs a build with CUDA (SD_CUDA=ON); otherwise creating a
 * session on it fails with SD_ERR_UNSUPPORTED. */
typedef enum sd_device {
    SD_DEVICE_CPU = 0,
    SD_DEVICE_CUDA = 1,
} sd_device;

/* "cpu", "cuda"; "unknown" otherwise. */
const char *sd_device_name(sd_device d);

/* Monotonic wall clock in milliseconds (CLOCK_MONOTONIC). */
double sd_time_ms(void);

/* Index of the largest of x[0 .. n) (the lowest on ties; n >= 1), or -1 if an entry is
 * NaN (a model with NaN weights is then an error, not token 0). The one checked argmax of
 * logits rows: the LLM draft's, greedy verification's and the model's fused eval. */
int32_t sd_argmax_checked(const float *x, int32_t n);

/* Number of CPU cores this process may run on (its affinity mask; >= 1). */
int sd_n_cores(void);

/*
 * CPU features of this machine, read once from CPUID (and XGETBV for the register state
 * the OS saves), then read-only: the table every kernel dispatcher consults. Vector
 * extensions count only when the OS also saves their registers (AVX: XCR0 bits 1-2;
 * AVX-512: bits 5-7 as well), so a set reported here can be executed. amx_tile and
 * amx_int8 are the CPUID bits only (whether Linux granted the tile state to this
 * process, arch_prctl(ARCH_REQ_XCOMP_PERM), is not checked). All false on non-x86-64.
 * Source: Intel SDM vol. 2A, CPUID leaves 1 and 7; vol. 1 sec. 13.3 (XCR0).
 */
typedef struct sd_cpu_features {
    bool avx2, fma, f16c;                         /* leaf 7 EBX 5; leaf 1 ECX 12, 29 */
    bool avx512f, avx512bw, avx512vl, avx512vnni; /* leaf 7 EBX 16, 30, 31; ECX 11 */
    bool avx512_bf16;                             /* leaf 7 sub-leaf 1 EAX 5 */
    bool avx_vnni;           /* leaf 7 sub-leaf 1 EAX 4 (the VEX vpdpbusd; AVX state) */
    bool amx_tile, amx_int8; /* leaf 7 EDX 24, 25 */
} sd_cpu_features;

/* The features of this CPU (detected once, pthread_once; never NULL, never changes). */
const sd_cpu_features *sd_cpu_features_get(void);

#ifdef __cplusplus
}
#endif
#endif /* SD_BASE_H */
