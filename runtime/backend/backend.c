/* runtime/backend/backend.c: the backend for a device (see sd_backend.h), and the loader of
 * the CUDA backend module (runtime/backend/cuda/sd_cuda.h): the library links no CUDA
 * library; the first call that needs a GPU loads libspecdec_cuda.so with dlopen. */
#include "runtime/backend/sd_backend.h"

#ifdef SD_HAVE_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/sd_kv.h"
#include "runtime/backend/cuda/sd_cuda.h"

/* dir of path (up to the last '/') + "/" + rel into out; 0 if it does not fit. */
static int beside(const char *path, const char *rel, char *out, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) return 0;
    const int n = snprintf(out, cap, "%.*s/%s", (int)(slash - path), path, rel);
    return n > 0 && (size_t)n < cap;
}

/* dlerror() on one line (it may hold newlines). */
static void one_line(char *s) {
    for (; *s; s++)
        if (*s == '\n' || *s == '\r') *s = ' ';
}

/* Open one candidate: SD_OK (and *out) if it is a usable module; SD_ERR_UNSUPPORTED with
 * the reason in err if it exists but cannot be used; -1 if there is no file there. */
static int try_module(const char *path, const sd_cuda_module **out, sd_error *err) {
    if (access(path, F_OK) != 0) return -1;
    dlerror();
    /* RTLD_NODELETE: the module (and the CUDA runtime it maps) stays for the process; the
     * handle can be closed at once and the table stays valid. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        char why[400];
        const char *e = dlerror();
        snprintf(why, sizeof why, "%s", e ? e : "dlopen failed");
        one_line(why);
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "device 'cuda': cannot load the CUDA backend module %s: %s", path, why);
    }
    sd_cuda_module_fn fn = NULL;
    void *sym = dlsym(h, SD_CUDA_MODULE_SYMBOL);
    memcpy(&fn, &sym, sizeof fn); /* object pointer -> function pointer (POSIX) */
    const sd_cuda_module *m = fn ? fn() : NULL;
    dlclose(h);
    if (!m)
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "device 'cuda': %s is not a specdec CUDA backend module (no %s)", path,
                         SD_CUDA_MODULE_SYMBOL);
    if (m->abi != SD_CUDA_MODULE_ABI || m->sizeof_ops != sizeof(sd_backend_ops) ||
        m->sizeof_params != sizeof(sd_backend_params) || m->sizeof_error != sizeof(sd_error) ||
        m->sizeof_host != sizeof(sd_cuda_host)) {
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "device 'cuda': %s is a CUDA backend module of another specdec build "
                         "(module ABI %u, this program %d; module built with %s): rebuild it "
                         "with this program",
                         path, m->abi, SD_CUDA_MODULE_ABI, m->build ? m->build : "?");
    }
    *out = m;
    return SD_OK;
}

int sd_cuda_module_open(const sd_cuda_module **out, sd_error *err) {
    *out = NULL;
    const char *env = getenv("SD_CUDA_MODULE");
    if (env && *env) {
        const int r = try_module(env, out, err);
        if (r < 0)
            return sd_errorf(err, SD_ERR_UNSUPPORTED,
                             "device 'cuda': SD_CUDA_MODULE=%s: no such file", env);
        return r;
    }
    /* Beside the executable, in ../lib from it, beside the object holding this library. */
    char cand[3][PATH_MAX + 64], exe[PATH_MAX];
    int n = 0;
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        if (beside(exe, SD_CUDA_MODULE_NAME, cand[n], sizeof cand[n])) n++;
        if (beside(exe, "../lib/" SD_CUDA_MODULE_NAME, cand[n], sizeof cand[n])) n++;
    }
    Dl_info info;
    void *self = NULL;
    int (*fn)(sd_device, const sd_backend_params *, sd_backend **, sd_error *) = sd_backend_init;
    memcpy(&self, &fn, sizeof self);
    if (dladdr(self, &info) && info.dli_fname &&
        beside(info.dli_fname, SD_CUDA_MODULE_NAME, cand[n], sizeof cand[n]) &&
        (n == 0 || strcmp(cand[n], cand[0]) != 0))
        n++;
    for (int i = 0; i < n; i++) {
        const int r = try_module(cand[i], out, err);
        if (r >= 0) return r;
    }
    return sd_errorf(err, SD_ERR_UNSUPPORTED,
                     "device 'cuda': the CUDA backend module %s was not found (looked beside "
                     "%s; set SD_CUDA_MODULE to its path)",
                     SD_CUDA_MODULE_NAME, len > 0 ? exe : "the program");
}
#endif

#ifdef SD_HAVE_CUDA
static const sd_cuda_host k_host = {sd_kv_k,   sd_kv_v,    sd_kv_span,      sd_kv_capacity,
                                    sd_kv_dim, sd_kv_type, sd_kv_row_bytes, sd_kv_block_table};
#endif

#define SD_NO_CUDA_MSG                                                                             \
    "device 'cuda': this specdec was built without CUDA (configure with -DSD_CUDA=ON where the "   \
    "CUDA toolkit is installed)"

int sd_backend_init(sd_device dev, const sd_backend_params *p, sd_backend **out, sd_error *err) {
    *out = NULL;
    switch (dev) {
    case SD_DEVICE_CPU:
        return sd_backend_cpu_init(p, out, err);
    case SD_DEVICE_CUDA: {
#ifdef SD_HAVE_CUDA
        const sd_cuda_module *m = NULL;
        const int rc = sd_cuda_module_open(&m, err);
        return rc ? rc : m->backend_init(&k_host, p, out, err);
#else
        return sd_errorf(err, SD_ERR_UNSUPPORTED, SD_NO_CUDA_MSG);
#endif
    }
    }
    return sd_errorf(err, SD_ERR_ARG, "unknown device %d", (int)dev);
}

int sd_backend_device_count(sd_device dev, int32_t *n, sd_error *err) {
    *n = 0;
    switch (dev) {
    case SD_DEVICE_CPU:
        *n = 1;
        return SD_OK;
    case SD_DEVICE_CUDA: {
#ifdef SD_HAVE_CUDA
        const sd_cuda_module *m = NULL;
        const int rc = sd_cuda_module_open(&m, err);
        return rc ? rc : m->device_count(n, err);
#else
        return sd_errorf(err, SD_ERR_UNSUPPORTED, SD_NO_CUDA_MSG);
#endif
    }
    }
    return sd_errorf(err, SD_ERR_ARG, "unknown device %d", (int)dev);
}
