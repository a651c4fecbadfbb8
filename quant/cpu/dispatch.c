/*
 * quant/cpu/dispatch.c: the choice of kernel set (once, from the CPU features of
 * runtime/base), the per-type fallback through lower sets, activation preparation
 * (sizes and the layout of sd_quant.h: part A, then the packed part B of kernels that
 * have one) and the public matmul entry points.
 */
#include "quant/cpu/kernels.h"
#include "quant/pack_impl.h"

#include <pthread.h>
#include <stdlib.h>
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <string.h>
#include <strings.h>

#include "runtime/base/sd_base.h"

/* ---------------------------------------------------------------------------------- */
/* Per-type resolution                                                                  */
/* ---------------------------------------------------------------------------------- */

const sd_kernel_set *sd_kernel_owner(const sd_kernel_set *ks, sd_type wt) {
    if ((unsigned)wt >= SD_TYPE_COUNT || !sd_type_supported((uint32_t)wt)) return NULL;
    for (; ks; ks = ks->lower)
        if (ks->k[wt].rows) return ks;
    return NULL;
}

sd_rows_kernel sd_kernel_for_type(const sd_kernel_set *ks, sd_type wt) {
    const sd_kernel_set *o = sd_kernel_owner(ks, wt);
    return o ? o->k[wt].rows : NULL;
}

sd_packed_kernel sd_kernel_packed_for_type(const sd_kernel_set *ks, sd_type wt) {
    if ((unsigned)wt >= SD_TYPE_COUNT || !sd_type_supported((uint32_t)wt)) return NULL;
    for (; ks; ks = ks->lower)
        if (ks->k[wt].packed) return ks->k[wt].packed;
    return NULL;
}

/* The fastest quantizer to activation type vt that set ks (or a lower one) has, else
 * the reference (all are byte-identical to it). */
static sd_act_quant act_quant(const sd_kernel_set *ks, sd_type vt) {
    for (; ks; ks = ks->lower)
        if (ks->quant[vt]) return ks->quant[vt];
    return sd_type_traits_get((uint32_t)vt)->from_float;
}

/* ---------------------------------------------------------------------------------- */
/* Activations                                                                          */
/* ---------------------------------------------------------------------------------- */

/* Part B bytes per token for set ks: the packed activations when ks has a packed
 * kernel for wt, else 0. */
static size_t partb_tok_bytes(const sd_kernel_set *ks, sd_type wt, int64_t n_cols) {
    return sd_kernel_packed_for_type(ks, wt) ? sd_pack_act_tok_bytes(wt, n_cols) : 0;
}

/* Part A (n_tok rows of sd_vec_dot_type(wt)), then, where the set has a packed kernel
 * with packed activations, part B at the next multiple of 64. */
int sd_kernel_act_bytes(const sd_kernel_set *ks, sd_type wt, int64_t n_tok, int64_t n_cols,
                        size_t *out) {
    size_t rb, a, b, tot;
    if (!sd_kernel_owner(ks, wt) || n_tok < 0 || n_cols < 0) return -1;
    if (sd_type_row_bytes(sd_vec_dot_type(wt), n_cols, &rb) != 0) return -1;
    if (__builtin_mul_overflow((size_t)n_tok, rb, &a)) return -1;
    const size_t tb = partb_tok_bytes(ks, wt, n_cols);
    if (tb == 0) {
        *out = a;
        return 0;
    }
    if (__builtin_add_overflow(a, (size_t)63, &a)) return -1;
    a &= ~(size_t)63;
    if (__builtin_mul_overflow((size_t)n_tok, tb, &b) || __builtin_add_overflow(a, b, &tot))
        return -1;
    *out = tot;
    return 0;
}

void sd_kernel_prepare_rows(const sd_kernel_set *ks, sd_type wt, const float *x, int64_t n_tok,
                            int64_t n_cols, int64_t b0, int64_t b1, void *out) {
    const sd_type vt = sd_vec_dot_type(wt);
    size_t rb = 0;
    (void)sd_type_row_bytes(vt, n_cols, &rb);
    const sd_act_quant q = act_quant(ks, vt);
    const size_t tb = partb_tok_bytes(ks, wt, n_cols);
    char *pb = tb ? (char *)out + sd_act_partb_offset(wt, n_tok, n_cols) : NULL;
    for (int64_t b = b0; b < b1; b++) {
        void *xr = (char *)out + (size_t)b * rb;
        q(x + b * n_cols, xr, n_cols);
        if (tb) sd_pack_act_row(wt, xr, n_cols, pb + (size_t)b * tb);
    }
}

int sd_activations_bytes(sd_type wt, int64_t n_tok, int64_t n_cols, size_t *out) {
    return sd_kernel_act_bytes(sd_kernel_set_active(), wt, n_tok, n_cols, out);
}

int sd_activations_bytes_max(int64_t n_tok, int64_t n_cols, size_t *out) {
    if (n_tok < 0 || n_cols < 0) return -1;
    size_t best = 0;
    for (uint32_t t = 0; t < SD_TYPE_COUNT; t++) {
        if (!sd_type_supported(t)) continue;
        int64_t be = sd_type_block_elems(sd_vec_dot_type((sd_type)t));
        if (sd_type_block_elems((sd_type)t) > be) be = sd_type_block_elems((sd_type)t);
        if (n_cols > INT64_MAX - be) return -1;
        const int64_t cols = (n_cols + be - 1) / be * be;
        size_t b;
        if (sd_activations_bytes((sd_type)t, n_tok, cols, &b) != 0) return -1;
        if (b > best) best = b;
    }
    *out = best;
    return 0;
}

void sd_quantize_activations_rows(sd_type wt, const float *x, int64_t n_tok, int64_t n_cols,
                                  int64_t b0, int64_t b1, void *out) {
    if (b0 < 0) b0 = 0;
    if (b1 > n_tok) b1 = n_tok;
    if (b1 <= b0 || !sd_kernel_owner(sd_kernel_set_active(), wt)) return;
    sd_kernel_prepare_rows(sd_kernel_set_active(), wt, x, n_tok, n_cols, b0, b1, out);
}

void sd_quantize_activations(sd_type wt, const float *x, int64_t n_tok, int64_t n_cols, void *out) {
    sd_quantize_activations_rows(wt, x, n_tok, n_cols, 0, n_tok, out);
}

/* ---------------------------------------------------------------------------------- */
/* Set choice                                                                           */
/* ---------------------------------------------------------------------------------- */

#if defined(__x86_64__)
static int cpu_runs_avx2(void) {
    const sd_cpu_features *f = sd_cpu_features_get();
    return f->avx2 && f->fma && f->f16c;
}
static int cpu_runs_avxvnni(void) {
    return cpu_runs_avx2() && sd_cpu_features_get()->avx_vnni;
}
static int cpu_runs_avx512(void) {
    const sd_cpu_features *f = sd_cpu_features_get();
    return cpu_runs_avx2() && f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni;
}

/* Linux hands the AMX tile state (XTILEDATA, XSAVE feature 18) to a process only on
 * request (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16; Documentation/arch/x86/xstate.rst);
 * without it the first tile instruction faults. Asked once. */
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;
static int g_amx_ok = 0;

static void amx_request(void) {
#if defined(__linux__)
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    g_amx_ok = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#endif
}

static int cpu_runs_amx(void) {
    const sd_cpu_features *f = sd_cpu_features_get();
    if (!cpu_runs_avx512() || !f->amx_tile || !f->amx_int8) return 0;
    pthread_once(&g_amx_once, amx_request);
    return g_amx_ok;
}
#endif

const sd_kernel_set *sd_kernel_set_by_name(const char *name) {
    if (!name) return NULL;
    if (strcasecmp(name, "scalar") == 0) return &sd_kernels_scalar;
#if defined(__x86_64__)
    if (strcasecmp(name, "avx2") == 0) return cpu_runs_avx2() ? &sd_kernels_avx2 : NULL;
    if (strcasecmp(name, "avxvnni") == 0) return cpu_runs_avxvnni() ? &sd_kernels_avxvnni : NULL;
    if (strcasecmp(name, "avx512") == 0) return cpu_runs_avx512() ? &sd_kernels_avx512 : NULL;
    if (strcasecmp(name, "amx") == 0) return cpu_runs_amx() ? &sd_kernels_amx : NULL;
#endif
    return NULL;
}

/* Written once under pthread_once, read-only afterwards. */
static pthread_once_t g_kernels_once = PTHREAD_ONCE_INIT;
static const sd_kernel_set *g_kernels = &sd_kernels_scalar;

static void kernels_init(void) {
    static const char *const order[] = {"avx512", "avxvnni", "avx2", "scalar"}; /* best first */
    const char *force = getenv("SD_KERNELS");
    if (force && strcasecmp(force, "amx") == 0 && sd_kernel_set_by_name("amx")) {
        g_kernels = &sd_kernels_amx; /* opt-in: never chosen by default */
        return;
    }
    size_t start = 0;
    if (force && *force) {
        for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
            if (strcasecmp(force, order[i]) == 0) start = i; /* only ever lowers the level */
    }
    for (size_t i = start; i < sizeof order / sizeof order[0]; i++) {
        const sd_kernel_set *ks = sd_kernel_set_by_name(order[i]);
        if (ks) {
            g_kernels = ks;
            return;
        }
    }
}

const sd_kernel_set *sd_kernel_set_active(void) {
    pthread_once(&g_kernels_once, kernels_init);
    return g_kernels;
}

const char *sd_quant_kernels_name(void) {
    return sd_kernel_set_active()->name;
}

double sd_quant_kernels_peak_macs(void) {
    const sd_kernel_set *ks = sd_kernel_set_active();
    while (ks && !ks->peak)
        ks = ks->lower;
    if (!ks) return 0.0;
    (void)ks->peak(1000); /* warm-up (clock, caches) */
    int64_t iters = 1000;
    double best = 0.0;
    for (int timed = 0; timed < 31;) {
        const double t0 = sd_time_ms();
        const double macs = ks->peak(iters);
        const double ms = sd_time_ms() - t0;
        if (ms < 0.2) { /* too short to time: longer, and this run does not count */
            iters *= 4;
            continue;
        }
        timed++;
        if (macs / (ms * 1e-3) > best) best = macs / (ms * 1e-3);
    }
    return best;
}

const char *sd_quant_kernel_name_for(sd_type wt) {
    const sd_kernel_set *o = sd_kernel_owner(sd_kernel_set_active(), wt);
    return o ? o->name : "none";
}

/* ---------------------------------------------------------------------------------- */
/* Matmul                                                                               */
/* ---------------------------------------------------------------------------------- */

void sd_matmul_rows(sd_type wt, const void *w, size_t w_row_bytes, int64_t n_cols, const void *xq,
                    int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    if (r1 <= r0 || n_tok <= 0) return;
    sd_rows_kernel k = sd_kernel_for_type(sd_kernel_set_active(), wt);
    if (k) k(w, w_row_bytes, n_cols, xq, n_tok, y, ldy, r0, r1);
}

int sd_matmul_packed_available(sd_type wt) {
    return sd_kernel_packed_for_type(sd_kernel_set_active(), wt) != NULL;
}

void sd_matmul_packed(sd_type wt, const void *wp, int64_t rows, int64_t n_cols, const void *xq,
                      int64_t n_tok, float *y, int64_t ldy, int64_t g0, int64_t g1) {
    if (g1 <= g0 || n_tok <= 0) return;
    sd_packed_kernel k = sd_kernel_packed_for_type(sd_kernel_set_active(), wt);
    if (k) k(wp, rows, n_cols, xq, n_tok, y, ldy, g0, g1);
}

void sd_matmul_rows_ref(sd_type wt, const void *w, size_t w_row_bytes, int64_t n_cols,
                        const void *xq, int64_t n_tok, float *y, int64_t ldy, int64_t r0,
                        int64_t r1) {
    if (r1 <= r0 || n_tok <= 0) return;
    sd_rows_kernel k = sd_kernel_for_type(&sd_kernels_scalar, wt);
    if (k) k(w, w_row_bytes, n_cols, xq, n_tok, y, ldy, r0, r1);
}
