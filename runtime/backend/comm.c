/* runtime/backend/comm.c: the communicator for a set of ranks' backends (see sd_backend.h,
 * "Tensor parallelism"): the CPU one (cpu/comm.c) or, in CUDA builds, NCCL (cuda/comm.cu,
 * in the CUDA backend module: backend.c loads it). */
#include "runtime/backend/sd_backend.h"

#ifdef SD_HAVE_CUDA
#include "runtime/backend/cuda/sd_cuda.h"
#endif

int sd_comm_cpu_init(int32_t n_ranks, sd_comm **out, sd_error *err); /* cpu/comm.c */

int sd_comm_init(sd_backend *const *bes, int32_t n_ranks, int64_t max_elems, sd_comm **out,
                 sd_error *err) {
    *out = NULL;
    if (!bes || n_ranks < 1 || max_elems < 0)
        return sd_errorf(err, SD_ERR_ARG, "comm: %d ranks, %lld elements", n_ranks,
                         (long long)max_elems);
    for (int32_t r = 0; r < n_ranks; r++)
        if (!bes[r] || bes[r]->device != bes[0]->device)
            return sd_errorf(err, SD_ERR_ARG,
                             "comm: rank %d's backend is not on the same kind of device as rank "
                             "0's (%s)",
                             r, sd_device_name(bes[0]->device));
    switch (bes[0]->device) {
    case SD_DEVICE_CPU:
        return sd_comm_cpu_init(n_ranks, out, err);
    case SD_DEVICE_CUDA: {
#ifdef SD_HAVE_CUDA
        /* CUDA backends exist, so the module is loaded: this finds it again */
        const sd_cuda_module *m = NULL;
        const int rc = sd_cuda_module_open(&m, err);
        return rc ? rc : m->comm_init(bes, n_ranks, max_elems, out, err);
#else
        break;
#endif
    }
    }
    return sd_errorf(err, SD_ERR_UNSUPPORTED, "comm: no communicator for device %s",
                     sd_device_name(bes[0]->device));
}
