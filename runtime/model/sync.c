/* Keeping a session's sequence in step with a committed context. */
#include "runtime/model/sd_model.h"

int sd_session_seq_sync(sd_session *s, int32_t seq, const int32_t *ctx, int32_t n, sd_error *err) {
    if (!s) return sd_errorf(err, SD_ERR_ARG, "session sync: session is NULL");
    if (seq < 0 || seq >= sd_session_n_seq(s))
        return sd_errorf(err, SD_ERR_ARG, "session sync: sequence %d, expected 0 .. %d", seq,
                         sd_session_n_seq(s) - 1);
    if (n < 0) return sd_errorf(err, SD_ERR_ARG, "session sync: negative length %d", n);
    if (n > sd_session_n_ctx(s))
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "context of %d tokens exceeds the session context of %d tokens", n,
                         sd_session_n_ctx(s));
    const int32_t keep = sd_session_seq_keep_prefix(s, seq, ctx, n);
    const int32_t n_batch = sd_session_n_batch(s);
    for (int32_t i = keep; i < n; i += n_batch) {
        int32_t m = n - i < n_batch ? n - i : n_batch;
        int rc = sd_session_seq_eval(s, seq, ctx + i, m, NULL, 0, err);
        if (rc) return rc;
    }
    return SD_OK;
}
