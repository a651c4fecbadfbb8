/* runtime/backend/backend.c: the backend for a device (see sd_backend.h). */
#include "runtime/backend/sd_backend.h"

#ifdef SD_HAVE_CUDA
#include "runtime/backend/cuda/sd_cuda.h"
#endif

int sd_backend_init(sd_device dev, const sd_backend_params *p, sd_backend **out, sd_error *err) {
    *out = NULL;
    switch (dev) {
    case SD_DEVICE_CPU:
        return sd_backend_cpu_init(p, out, err);
    case SD_DEVICE_CUDA:
#ifdef SD_HAVE_CUDA
        return sd_backend_cuda_init(p, out, err);
#else
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "device 'cuda': this specdec was built without CUDA (configure with "
                         "-DSD_CUDA=ON where the CUDA toolkit is installed)");
#endif
    }
    return sd_errorf(err, SD_ERR_ARG, "unknown device %d", (int)dev);
}

int sd_backend_device_count(sd_device dev, int32_t *n, sd_error *err) {
    *n = 0;
    switch (dev) {
    case SD_DEVICE_CPU:
        *n = 1;
        return SD_OK;
    case SD_DEVICE_CUDA:
#ifdef SD_HAVE_CUDA
        return sd_cuda_device_count(n, err);
#else
        return sd_errorf(err, SD_ERR_UNSUPPORTED,
                         "device 'cuda': this specdec was built without CUDA (configure with "
                         "-DSD_CUDA=ON where the CUDA toolkit is installed)");
#endif
    }
    return sd_errorf(err, SD_ERR_ARG, "unknown device %d", (int)dev);
}
