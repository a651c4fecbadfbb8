/*
 * runtime/model/session.c: sd_session_init (sd_model.h), above the forward pass (forward.c)
 * and tensor parallelism (tp.c): a session of one rank, or, for p->n_split != 0, a group of
 * ranks whose handle is rank 0's session.
 */
#include "runtime/backend/sd_backend.h"
#include "runtime/model/model_impl.h"
#include "runtime/model/tp.h"

int sd_session_init(const sd_model *m, const sd_session_params *p, sd_session **out,
                    sd_error *err) {
    *out = NULL;
    if (!m || !p) return sd_errorf(err, SD_ERR_ARG, "session: model or params is NULL");
    if (p->n_split != 0) return sd_tp_session_init(m, p, out, err);
    return sd_session_init_rank(m, p, NULL, 0, out, err);
}

int sd_session_split_check(const sd_model *m, const sd_session_params *p, sd_error *err) {
    if (!m || !p) return sd_errorf(err, SD_ERR_ARG, "session: model or params is NULL");
    int32_t n = 0;
    return p->n_split != 0 ? sd_tp_check(m, p, &n, err) : SD_OK;
}

int sd_session_device_check(sd_device dev, sd_error *err) {
    int32_t n = 0;
    return dev == SD_DEVICE_CPU ? SD_OK : sd_backend_device_count(dev, &n, err);
}
