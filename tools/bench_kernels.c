/*
 * specdec bench --kernels: bandwidth, decode step, verification-pass cost and prefill of
 * each model of a pair (see bench.c for the options).
 *
 * Kernels mode
 *   specdec bench --kernels -m TARGET [-md DRAFT] [-t N] [--bw-mib M] [--pos P]
 *                 [--prefill N] [--reps N] [--json FILE]
 *   memory roof            the best streaming read of an M MiB buffer (default 2048) at
 *                          1 thread and at N threads (tools/roof.c: per-thread
 *                          contiguous slices, widest loads, best of max(10, --reps)
 *                          passes), measured before and again after the models; the
 *                          fractions use the best N-thread figure; --no-roof skips it
 *                          (fractions null); on a device: a device-to-device copy
 *   per model              weight bytes (sd_model_weight_bytes) and a decode step at
 *                          position P (median): achieved GB/s = weight bytes / step
 *                          time, beside the bandwidth; the verification pass for
 *                          K+1 = 1..17 tokens relative to one decode step; prefill of N
 *                          tokens from an empty cache with logits for every token:
 *                          tokens/s and GFLOP/s = 2 * params * N / time (params: every
 *                          matrix a token passes through, classifier included, the
 *                          embedding lookup and attention scores excluded).
 *   roofline               for every pass (K+1 = 1..17 and the prefill): the bytes it
 *                          streams (the weights a step reads), its multiply-adds
 *                          (params * tokens), the memory bound (bytes / the N-thread roof)
 *                          and the compute bound (multiply-adds / (the kernel set's
 *                          1-thread peak * N): sd_quant_kernels_peak_macs, an in-register
 *                          loop of its inner product sequence), the larger of the two
 *                          named as the pass's bound, and bound / measured time (1 = at
 *                          the roof). The compute bound excludes unpacking, the float
 *                          part, attention and the ops between matmuls; CPU only.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant/sd_quant.h"
#include "runtime/backend/sd_backend.h"
#include "tools/bench.h"
#include "runtime/gguf/sd_gguf.h"
#include "runtime/model/sd_model.h"
#include "verify/sd_sample.h"

/* The CPU roof at 1 thread (skipped when nth == 1) and at nth threads. */
static int measure_roof(const bench_cli *c, int32_t nth, sd_cli_roof *r1, sd_cli_roof *rn,
                        sd_error *err) {
    const int32_t passes = (int32_t)(c->reps < 10 ? 10 : c->reps);
    sd_cli_progress("specdec bench: memory roof (%lld MiB, %d passes, 1%s%.0d thread%s)\n",
                    (long long)c->bw_mib, passes, nth > 1 ? " and " : "", nth > 1 ? nth : 0,
                    nth > 1 ? "s" : "");
    int rc = sd_cli_roof_measure(c->bw_mib, nth, passes, c->roof_kernel, rn, err);
    if (!rc && nth > 1) rc = sd_cli_roof_measure(c->bw_mib, 1, passes, c->roof_kernel, r1, err);
    if (!rc && nth == 1) *r1 = *rn;
    return rc;
}

static json_t *roof_json(const sd_cli_roof *r) {
    if (!r->kernel) return json_null(); /* not measured */
    return json_pack("{s:i,s:o,s:o,s:s,s:I,s:i}", "threads", r->threads, "gbps",
                     bench_jnum(r->gbps), "gbps_median", bench_jnum(r->gbps_median), "kernel",
                     r->kernel, "buffer_mib", (json_int_t)(r->bytes >> 20), "passes", r->passes);
}

int bench_run_roof(const bench_cli *c, const sd_cli_pair *p, sd_error *err) {
    const int32_t nth = p->ep.n_threads > 0 ? p->ep.n_threads : sd_n_cores();
    sd_cli_roof r1, rn;
    int rc = measure_roof(c, nth, &r1, &rn, err);
    if (rc) return rc;
    printf("memory roof (%s loads, %lld MiB, best / median of %d passes): 1 thread %.2f / %.2f "
           "GB/s",
           rn.kernel, (long long)c->bw_mib, rn.passes, r1.gbps, r1.gbps_median);
    if (nth > 1) printf(", %d threads %.2f / %.2f GB/s", nth, rn.gbps, rn.gbps_median);
    printf("\n");
    if (!c->json) return SD_OK;
    json_t *root =
        json_pack("{s:s,s:{s:i,s:i,s:s},s:{s:o,s:o}}", "mode", "roof", "machine", "n_cores",
                  sd_n_cores(), "threads", nth, "kernels", sd_quant_kernels_name(), "roof", "t1",
                  roof_json(&r1), "tn", roof_json(&rn));
    rc = root ? bench_write_json(root, c->json, err)
              : sd_errorf(err, SD_ERR_OOM, "bench: cannot build JSON");
    json_decref(root);
    return rc;
}

/* Best-of-reps device memory bandwidth (GB/s): a device-to-device copy of mib MiB through
 * the backend's copy op, counting the bytes read plus the bytes written (each rep: 4
 * copies, then a sync). */
static int measure_device_bandwidth(sd_device dev, int64_t mib, int reps, double *gbps,
                                    sd_error *err) {
    sd_backend_params bp = {0};
    bp.n_batch = 1;
    bp.max_cols = 32;
    bp.n_ctx = 1;
    sd_backend *be = NULL;
    sd_buffer *a = NULL, *b = NULL;
    const size_t bytes = (size_t)mib << 20;
    int rc = sd_backend_init(dev, &bp, &be, err);
    if (!rc) rc = sd_buffer_alloc(be, bytes, SD_BUFFER_COMPUTE, &a, err);
    if (!rc) rc = sd_buffer_alloc(be, bytes, SD_BUFFER_COMPUTE, &b, err);
    const int64_t n = (int64_t)(bytes / sizeof(float));
    double best = 0.0;
    if (!rc) {
        be->ops->copy(be, b->addr, a->addr, n); /* warm-up */
        rc = be->ops->sync(be, err);
    }
    for (int r = 0; r < reps && !rc; r++) {
        const double t0 = sd_time_ms();
        for (int i = 0; i < 4; i++)
            be->ops->copy(be, (i & 1) ? a->addr : b->addr, (i & 1) ? b->addr : a->addr, n);
        rc = be->ops->sync(be, err);
        const double dt = (sd_time_ms() - t0) * 1e-3;
        const double g = 4.0 * 2.0 * (double)bytes / dt / 1e9;
        if (!rc && g > best) best = g;
    }
    sd_buffer_free(a);
    sd_buffer_free(b);
    sd_backend_free(be);
    *gbps = best;
    return rc;
}

/* --profile: reps evaluations of n tokens at position pos with the CPU backend's per-op
 * timers on; prints where the time goes (per op kind, matmuls per weight type with the
 * GB/s of weights they read) and adds it to jp under the key n. */
static int profile_eval(sd_session *s, const int32_t *ctx, int32_t pos, int32_t n, int reps,
                        float *logits, size_t streamed, json_t *jp, sd_error *err) {
    struct sd_backend *be = sd_session_backend(s);
    int rc = sd_session_seq_sync(s, 0, ctx, pos, err);
    if (!rc) rc = sd_session_eval(s, ctx + pos, n, logits, n, err); /* warm */
    if (!rc) rc = sd_session_seq_truncate(s, 0, pos, err);
    if (rc) return rc;
    /* The thread pool's hand-overs of one unprofiled pass (the profiler runs a
     * matmul_multi's matrices one by one, which would count more). */
    sd_cpu_pool_counts h0, h1;
    sd_backend_cpu_pool_counts(be, &h0);
    rc = sd_session_eval(s, ctx + pos, n, logits, n, err);
    if (!rc) rc = sd_session_seq_truncate(s, 0, pos, err);
    sd_backend_cpu_pool_counts(be, &h1);
    if (rc) return rc;
    sd_backend_cpu_profile_enable(be, 1);
    const double t0 = sd_time_ms();
    for (int r = 0; r < reps && !rc; r++) {
        rc = sd_session_eval(s, ctx + pos, n, logits, n, err);
        if (!rc) rc = sd_session_seq_truncate(s, 0, pos, err);
    }
    const double total = (sd_time_ms() - t0) / reps;
    sd_cpu_profile pr;
    sd_backend_cpu_profile_get(be, &pr);
    sd_backend_cpu_profile_enable(be, 0);
    if (rc) return rc;
    double ops = 0;
    for (int o = 0; o < SD_PROF_N; o++)
        ops += pr.ms[o] / reps;
    printf("  profile, %d token%s (mean of %d, matmuls one by one): %.3f ms, of it ops %.3f ms "
           "(the rest: the forward pass between ops, sampling-free)\n",
           n, n > 1 ? "s" : "", reps, total, ops);
    const int32_t n_layer = sd_model_hparams(sd_session_model(s))->n_layer;
    printf("    hand-overs (one unprofiled pass): %lld runs (%.1f a layer), %lld worker sleeps, "
           "%lld wake calls, %lld caller sleeps, %lld kept on the caller (back-off)\n",
           (long long)(h1.runs - h0.runs), (double)(h1.runs - h0.runs) / n_layer,
           (long long)(h1.worker_sleeps - h0.worker_sleeps), (long long)(h1.wakes - h0.wakes),
           (long long)(h1.caller_sleeps - h0.caller_sleeps), (long long)(h1.kept - h0.kept));
    json_t *jo = json_object(), *jt = json_object();
    for (int o = 0; o < SD_PROF_N; o++) {
        if (!pr.calls[o]) continue;
        const double ms = pr.ms[o] / reps;
        printf("    %-12s %8.3f ms  %5.1f%%  %5lld calls\n", sd_prof_op_name((sd_prof_op)o), ms,
               100.0 * ms / total, (long long)(pr.calls[o] / reps));
        json_object_set_new(jo, sd_prof_op_name((sd_prof_op)o), bench_jnum(ms));
    }
    for (int t = 0; t < SD_TYPE_COUNT; t++) {
        if (!pr.matmul_calls[t]) continue;
        const double ms = pr.matmul_ms[t] / reps, gb = pr.matmul_bytes[t] / reps / 1e9;
        printf("      matmul %-6s %8.3f ms  %5.1f%%  %6.1f MB  %6.2f GB/s\n",
               sd_type_name((uint32_t)t), ms, 100.0 * ms / total, gb * 1e3, gb / (ms * 1e-3));
        json_object_set_new(
            jt, sd_type_name((uint32_t)t),
            json_pack("{s:o,s:o}", "ms", bench_jnum(ms), "gbps", bench_jnum(gb / (ms * 1e-3))));
    }
    (void)streamed;
    char key[16];
    snprintf(key, sizeof key, "%d", n);
    json_object_set_new(jp, key,
                        json_pack("{s:o,s:o,s:o,s:o,s:{s:I,s:I,s:I,s:I,s:I}}", "ms",
                                  bench_jnum(total), "ops_ms", bench_jnum(ops), "by_op", jo,
                                  "matmul_by_type", jt, "handovers", "runs",
                                  (json_int_t)(h1.runs - h0.runs), "worker_sleeps",
                                  (json_int_t)(h1.worker_sleeps - h0.worker_sleeps), "wakes",
                                  (json_int_t)(h1.wakes - h0.wakes), "caller_sleeps",
                                  (json_int_t)(h1.caller_sleeps - h0.caller_sleeps), "kept",
                                  (json_int_t)(h1.kept - h0.kept)));
    return SD_OK;
}

/* Matrix parameters one token passes through: every 2-D tensor but the embedding
 * (counted once more when it is the tied classifier). Also the embedding's bytes. */
static void model_params(const sd_model *m, double *params, size_t *embd_bytes, int *tied) {
    const sd_gguf *g = sd_model_gguf(m);
    double p = 0;
    *embd_bytes = 0;
    *tied = sd_gguf_find_tensor(g, "output.weight") == NULL;
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        const double ne = (double)t->ne[0] * (double)t->ne[1];
        if (!strcmp(t->name, "token_embd.weight")) {
            *embd_bytes = t->nbytes;
            if (*tied) p += ne;
        } else if (t->n_dims >= 2) {
            p += ne;
        }
    }
    *params = p;
}

/* The roofline of one pass: bytes streamed, multiply-adds, both bounds (NaN where not
 * measured), the binding one and bound / measured. */
typedef struct pass_roof {
    double bytes, macs, mem_ms, cmp_ms, bound_ms, frac;
    const char *bound;
} pass_roof;

static pass_roof roofline(double bytes, double macs, double bw, double peak, double ms) {
    pass_roof r = {.bytes = bytes, .macs = macs, .mem_ms = NAN, .cmp_ms = NAN};
    if (isfinite(bw) && bw > 0) r.mem_ms = bytes / (bw * 1e9) * 1e3;
    if (peak > 0) r.cmp_ms = macs / peak * 1e3;
    r.bound_ms = NAN;
    if (isfinite(r.mem_ms) && !(r.cmp_ms > r.mem_ms)) {
        r.bound = "memory";
        r.bound_ms = r.mem_ms;
    } else if (isfinite(r.cmp_ms)) {
        r.bound = "compute";
        r.bound_ms = r.cmp_ms;
    }
    r.frac = r.bound_ms / ms;
    return r;
}

static json_t *roof_pass_json(const pass_roof *r) {
    return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "bytes", bench_jnum(r->bytes), "macs",
                     bench_jnum(r->macs), "mem_bound_ms", bench_jnum(r->mem_ms), "compute_bound_ms",
                     bench_jnum(r->cmp_ms), "bound", r->bound ? json_string(r->bound) : json_null(),
                     "roof_fraction", bench_jnum(r->frac));
}

static void roof_print(const pass_roof *r) {
    printf("  %7.1f  %6.2f  %7.3f  %7.3f  %-7s  %4.0f%%", r->bytes / 1e6, r->macs / 1e9, r->mem_ms,
           r->cmp_ms, r->bound ? r->bound : "-", 100.0 * r->frac);
}

static int kernels_model(const char *role, const sd_model *m, const bench_cli *c,
                         const sd_cli_pair *p, double bw, double peak, json_t *jmodels,
                         sd_error *err) {
    const sd_hparams *hp = sd_model_hparams(m);
    const int32_t n_verify_max = SD_MAX_DRAFT + 1;
    int32_t n_pre = (int32_t)c->prefill;
    int32_t pos = (int32_t)c->pos;
    sd_session_params sp = sd_session_default_params();
    sp.n_threads = p->ep.n_threads;
    sp.device = strcmp(role, "draft") ? p->ep.device : p->ep.device_draft;
    sp.n_split = strcmp(role, "draft") ? p->ep.n_split : 0;
    sp.n_ctx = hp->n_ctx_train;
    sp.kv_type = p->ep.kv_type;
    if (n_pre > sp.n_ctx) n_pre = sp.n_ctx;
    if (pos + n_verify_max > sp.n_ctx) pos = sp.n_ctx - n_verify_max;
    if (pos < 0) return sd_errorf(err, SD_ERR_ARG, "bench: context of %s is too short", role);
    sp.n_batch = n_pre > n_verify_max ? n_pre : n_verify_max;
    sd_session *s = NULL;
    json_t *jmodel_extra = NULL; /* fields merged into the model's object */
    int rc = sd_session_init(m, &sp, &s, err);
    if (rc) return rc;
    const int32_t n_fill = pos + (n_pre > n_verify_max ? n_pre : n_verify_max);
    int32_t *ctx = malloc((size_t)n_fill * sizeof *ctx);
    float *logits = malloc((size_t)sp.n_batch * (size_t)hp->n_vocab * sizeof(float));
    if (!ctx || !logits) {
        rc = sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
        goto done;
    }
    const int32_t bos = 1 < hp->n_vocab ? 1 : 0;
    bench_make_fill(ctx, n_fill, &bos, 1, hp->n_vocab);
    const int reps = (int)c->reps;
    double params;
    size_t embd_bytes;
    int tied;
    model_params(m, &params, &embd_bytes, &tied);
    const size_t wbytes = sd_model_weight_bytes(m);
    /* A decode step reads one embedding row, not the table (unless it is the classifier). */
    const size_t streamed = tied ? wbytes : wbytes - embd_bytes;
    sd_cli_progress("specdec bench: %s: decode and verification passes at position %d\n", role,
                    pos);
    double t1 = 0;
    json_t *jver = json_array();
    jmodel_extra = json_object();
    const sd_weights_info wi = sd_session_weights_info(s);
    if (wi.n_packed)
        printf("\n%s: %d weight matrices packed for the %s kernels: %.1f MiB, %.0f ms", role,
               wi.n_packed, wi.kernels, (double)wi.packed_bytes / 1048576.0, wi.packed_ms);
    printf("\n%s %s: %.1f M matrix params, weights %.1f MiB (%.1f MiB streamed per step)\n", role,
           sd_model_path(m), params / 1e6, wbytes / 1048576.0, streamed / 1048576.0);
    printf("  K+1  verify ms  x decode step       MB    GMAC   mem ms   cmp ms  bound    "
           "roof\n");
    for (int32_t n = 1; n <= n_verify_max && !rc; n++) {
        double ms;
        rc = bench_time_eval(s, ctx, pos, n, reps, logits, &ms, err);
        if (rc) break;
        if (n == 1) t1 = ms;
        const pass_roof pr = roofline((double)streamed, params * n, bw, peak, ms);
        printf("  %3d  %9.3f  %6.2f       ", n, ms, ms / t1);
        roof_print(&pr);
        printf("\n");
        json_array_append_new(jver, json_pack("{s:i,s:o,s:o,s:o}", "n_tokens", n, "ms",
                                              bench_jnum(ms), "rel_decode", bench_jnum(ms / t1),
                                              "roofline", roof_pass_json(&pr)));
    }
    if (rc) {
        json_decref(jver);
        goto done;
    }
    if (c->profile && sd_session_device(s) == SD_DEVICE_CPU) {
        json_t *jp = json_object();
        static const int32_t widths[] = {1, 5, 9};
        for (size_t wi2 = 0; wi2 < sizeof widths / sizeof widths[0] && !rc; wi2++) {
            const int32_t n = widths[wi2];
            if (n > n_verify_max) break;
            rc = profile_eval(s, ctx, pos, n, reps, logits, streamed, jp, err);
        }
        json_object_set_new(jmodel_extra, "profile", jp);
        if (rc) {
            json_decref(jver);
            goto done;
        }
    }
    sd_cli_progress("specdec bench: %s: prefill of %d tokens\n", role, n_pre);
    double pre_ms = 0;
    {
        const int pre_reps = reps < 3 ? reps : 3;
        double *t = malloc((size_t)pre_reps * sizeof *t);
        if (!t) rc = sd_errorf(err, SD_ERR_OOM, "bench: out of memory");
        for (int r = 0; r < pre_reps && !rc; r++) {
            rc = sd_session_seq_truncate(s, 0, 0, err);
            const double t0 = sd_time_ms();
            if (!rc) rc = sd_session_eval(s, ctx, n_pre, logits, n_pre, err);
            t[r] = sd_time_ms() - t0;
        }
        if (!rc) pre_ms = bench_quantile(t, (size_t)pre_reps, 0.5);
        free(t);
    }
    if (rc) {
        json_decref(jver);
        goto done;
    }
    const double dec_gbps = wbytes / (t1 * 1e-3) / 1e9;
    const double str_gbps = streamed / (t1 * 1e-3) / 1e9;
    const double pre_tps = n_pre / (pre_ms * 1e-3);
    const double gflops = 2.0 * params * n_pre / (pre_ms * 1e-3) / 1e9;
    printf("  decode step %.3f ms: %.2f GB/s of weights (%.2f GB/s streamed)", t1, dec_gbps,
           str_gbps);
    if (isfinite(bw)) printf(", %.0f%% of %.2f GB/s", 100.0 * str_gbps / bw, bw);
    printf("\n");
    printf("  prefill %d tokens: %.3f ms, %.1f tokens/s, %.2f GFLOP/s (2 * params * tokens)\n",
           n_pre, pre_ms, pre_tps, gflops);
    const pass_roof pre_roof = roofline((double)streamed, params * n_pre, bw, peak, pre_ms);
    printf("  prefill roofline (MB, GMAC, mem ms, cmp ms, bound, roof):");
    roof_print(&pre_roof);
    printf("\n");
    json_t *rel = json_object();
    for (int32_t n = 5; n <= n_verify_max; n += 4) {
        char key[8];
        snprintf(key, sizeof key, "%d", n);
        json_object_set(rel, key,
                        json_object_get(json_array_get(jver, (size_t)n - 1), "rel_decode"));
    }
    json_t *jm = json_pack(
        "{s:s,s:s,s:I,s:I,s:o,s:i,s:o,s:o,s:o,s:o,s:o,s:o,s:{s:i,s:o,s:o,s:o,s:o}}", "role", role,
        "path", sd_model_path(m), "weight_bytes", (json_int_t)wbytes, "streamed_bytes",
        (json_int_t)streamed, "params", bench_jnum(params), "pos", pos, "decode_ms", bench_jnum(t1),
        "decode_gbps", bench_jnum(dec_gbps), "decode_gbps_streamed", bench_jnum(str_gbps),
        "fraction_of_bandwidth", bench_jnum(str_gbps / bw), "verify", jver, "verify_rel_decode",
        rel, "prefill", "n_tokens", n_pre, "ms", bench_jnum(pre_ms), "tokens_per_s",
        bench_jnum(pre_tps), "gflops", bench_jnum(gflops), "roofline", roof_pass_json(&pre_roof));
    if (jm) json_object_update(jm, jmodel_extra);
    json_array_append_new(jmodels, jm);
done:
    json_decref(jmodel_extra);
    free(ctx);
    free(logits);
    sd_session_free(s);
    return rc;
}

/* The bandwidth decode is measured against, before (*before) and after (*after) the
 * models: the CPU roof (best streaming read at 1 and nth threads; *r1, *rn) or, on a
 * device, a device-to-device copy. NaN when --no-roof. */
typedef struct kern_bw {
    sd_cli_roof r1, rn, rn_after; /* CPU only */
    double before, after;
} kern_bw;

static int kernels_bw(const bench_cli *c, const sd_cli_pair *p, int32_t nth, int after, kern_bw *k,
                      sd_error *err) {
    const int32_t passes = (int32_t)(c->reps < 10 ? 10 : c->reps);
    double *g = after ? &k->after : &k->before;
    *g = NAN;
    if (c->no_roof) return SD_OK;
    if (p->ep.device != SD_DEVICE_CPU) {
        sd_cli_progress("specdec bench: %s memory bandwidth (device-to-device copy, %lld MiB)\n",
                        sd_device_name(p->ep.device), (long long)c->bw_mib);
        return measure_device_bandwidth(p->ep.device, c->bw_mib, passes, g, err);
    }
    int rc = after ? sd_cli_roof_measure(c->bw_mib, nth, passes, c->roof_kernel, &k->rn_after, err)
                   : measure_roof(c, nth, &k->r1, &k->rn, err);
    if (!rc) *g = after ? k->rn_after.gbps : k->rn.gbps;
    return rc;
}

int bench_run_kernels(const bench_cli *c, const sd_cli_pair *p, sd_error *err) {
    sd_model *tm = NULL, *dm = NULL;
    json_t *root = NULL, *jmodels = json_array();
    int rc = sd_model_load(p->ep.target, &tm, err);
    if (!rc && p->ep.draft) rc = sd_model_load(p->ep.draft, &dm, err);
    const int32_t nth = p->ep.n_threads > 0 ? p->ep.n_threads : sd_n_cores();
    const int cpu = p->ep.device == SD_DEVICE_CPU;
    kern_bw k;
    memset(&k, 0, sizeof k);
    /* Fractions use the bandwidth measured before the models; it is measured again after
     * them and the JSON reports the best of both (a shared machine makes either low). */
    if (!rc) rc = kernels_bw(c, p, nth, 0, &k, err);
    double bw = k.before;
    /* The compute roof: the kernel set's 1-thread in-register peak times the threads (one
     * core each assumed; CPU only). */
    const double peak1 = cpu ? sd_quant_kernels_peak_macs() : 0.0;
    const double peak = peak1 * nth;
    if (!rc) {
        printf("machine: %d cores, %d threads, kernels %s", sd_n_cores(), nth,
               sd_quant_kernels_name());
        if (peak > 0)
            printf(", compute roof %.1f GMAC/s at 1 thread, %.1f at %d (int8 multiply-adds of "
                   "the set's inner loop, in registers)",
                   peak1 / 1e9, peak / 1e9, nth);
        if (cpu && isfinite(bw))
            printf(", memory roof %.2f GB/s at 1 thread, %.2f GB/s at %d (best streaming read "
                   "of %lld MiB, %s loads)",
                   k.r1.gbps, k.rn.gbps, nth, (long long)c->bw_mib, k.rn.kernel);
        else if (!cpu)
            printf("; device %s: memory bandwidth %.2f GB/s (device-to-device copy of %lld "
                   "MiB, bytes read + written)",
                   sd_device_name(p->ep.device), bw, (long long)c->bw_mib);
        printf("\n");
        rc = kernels_model("target", tm, c, p, bw, peak, jmodels, err);
    }
    if (!rc && dm) rc = kernels_model("draft", dm, c, p, bw, peak, jmodels, err);
    if (!rc) rc = kernels_bw(c, p, nth, 1, &k, err);
    if (!rc && isfinite(k.before)) {
        bw = k.after > k.before ? k.after : k.before;
        printf("\n%s at %d threads: %.2f GB/s before, %.2f GB/s after the models; best %.2f\n",
               cpu ? "memory roof" : "device bandwidth", nth, k.before, k.after, bw);
        for (size_t i = 0; i < json_array_size(jmodels); i++) {
            json_t *mo = json_array_get(jmodels, i);
            const double g = json_real_value(json_object_get(mo, "decode_gbps_streamed"));
            json_object_set_new(mo, "fraction_of_bandwidth", bench_jnum(g / bw));
            printf("%s decode: %.2f GB/s streamed = %.0f%% of %.2f GB/s\n",
                   json_string_value(json_object_get(mo, "role")), g, 100.0 * g / bw, bw);
        }
    }
    if (!rc && c->json) {
        json_t *jroof = cpu && !c->no_roof
                            ? json_pack("{s:o,s:o,s:o}", "t1", roof_json(&k.r1), "tn",
                                        roof_json(&k.rn), "tn_after", roof_json(&k.rn_after))
                            : json_null();
        root = json_pack("{s:s,s:{s:i,s:i,s:s,s:o,s:o,s:o,s:o,s:o,s:I,s:s,s:s},s:o,s:O}", "mode",
                         "kernels", "machine", "n_cores", sd_n_cores(), "threads", nth, "kernels",
                         sd_quant_kernels_name(), "peak_macs_per_s_t1",
                         peak > 0 ? bench_jnum(peak1) : json_null(), "peak_macs_per_s",
                         peak > 0 ? bench_jnum(peak) : json_null(), "mem_read_gbps", bench_jnum(bw),
                         "mem_read_gbps_before", bench_jnum(k.before), "mem_read_gbps_after",
                         bench_jnum(k.after), "mem_buffer_mib", (json_int_t)c->bw_mib, "device",
                         sd_device_name(p->ep.device), "bandwidth_method",
                         cpu ? "best streaming read" : "device-to-device copy, read + write",
                         "roof", jroof, "models", jmodels);
        rc = root ? bench_write_json(root, c->json, err)
                  : sd_errorf(err, SD_ERR_OOM, "bench: cannot build JSON");
    }
    json_decref(root);
    json_decref(jmodels);
    sd_model_free(dm);
    sd_model_free(tm);
    return rc;
}
