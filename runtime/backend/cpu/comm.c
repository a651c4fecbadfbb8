/*
 * runtime/backend/cpu/comm.c: the in-process communicator of CPU ranks (the tensor-parallel
 * simulation: one thread per rank, each over its own CPU backend). allreduce: every rank
 * publishes its array and waits at a barrier; rank r then sums slice r (elements
 * [r n / N, (r + 1) n / N)) over all ranks in rank order and writes the sum into every
 * rank's array; a second barrier ends the call. Each element is summed by one rank in the
 * fixed order ((x_0 + x_1) + x_2) + ..., so all ranks hold the same bits whatever n.
 */
#include <pthread.h>
#include <stdlib.h>

#include "runtime/backend/sd_backend.h"

#define SD_COMM_CPU_MAX_RANKS 64

typedef struct sd_comm_cpu {
    sd_comm base;
    pthread_barrier_t bar;
    float *x[SD_COMM_CPU_MAX_RANKS]; /* each rank's array of the current call */
} sd_comm_cpu;

static void cpu_comm_free(sd_comm *c) {
    if (!c) return;
    sd_comm_cpu *cc = (sd_comm_cpu *)c;
    pthread_barrier_destroy(&cc->bar);
    free(cc);
}

static void cpu_comm_allreduce(sd_comm *c, int32_t rank, float *x, int64_t n) {
    sd_comm_cpu *cc = (sd_comm_cpu *)c;
    const int32_t nr = c->n_ranks;
    if (nr == 1) return;
    cc->x[rank] = x;
    pthread_barrier_wait(&cc->bar); /* every x[] published */
    const int64_t i0 = n * rank / nr, i1 = n * (rank + 1) / nr;
    for (int64_t i = i0; i < i1; i++) {
        float s = cc->x[0][i];
        for (int32_t r = 1; r < nr; r++)
            s += cc->x[r][i];
        for (int32_t r = 0; r < nr; r++)
            cc->x[r][i] = s;
    }
    pthread_barrier_wait(&cc->bar); /* every slice written; x[] may be republished */
}

static const sd_comm_ops cpu_comm_ops = {cpu_comm_free, cpu_comm_allreduce};

int sd_comm_cpu_init(int32_t n_ranks, sd_comm **out, sd_error *err) {
    *out = NULL;
    if (n_ranks < 1 || n_ranks > SD_COMM_CPU_MAX_RANKS)
        return sd_errorf(err, SD_ERR_ARG, "comm: %d CPU ranks, expected 1..%d", n_ranks,
                         SD_COMM_CPU_MAX_RANKS);
    sd_comm_cpu *cc = calloc(1, sizeof *cc);
    if (!cc) return sd_errorf(err, SD_ERR_OOM, "comm: out of memory");
    if (pthread_barrier_init(&cc->bar, NULL, (unsigned)n_ranks) != 0) {
        free(cc);
        return sd_errorf(err, SD_ERR_OOM, "comm: cannot make a barrier of %d threads", n_ranks);
    }
    cc->base.ops = &cpu_comm_ops;
    cc->base.n_ranks = n_ranks;
    *out = &cc->base;
    return SD_OK;
}
