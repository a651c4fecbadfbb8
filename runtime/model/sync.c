/* Keeping a session's KV cache in step with a committed context. */
#include "runtime/model/sd_model.h"

/* Sequence 0's longest common prefix: the one rule (forward.c's sd_session_seq_keep_prefix,
 * which the batcher uses for every sequence). */
int32_t sd_session_keep_prefix(sd_session *s, const int32_t *ctx, int32_t n) {
    return sd_session_seq_keep_prefix(s, 0, ctx, n);
}

int sd_session_sync(sd_session *s, const int32_t *ctx, int32_t n, sd_error *err) {
    if (n < 0) return sd_errorf(err, SD_ERR_ARG, "session sync: negative length %d", n);
    if (n > sd_session_n_ctx(s))
        return sd_errorf(err, SD_ERR_CONTEXT,
                         "context of %d tokens exceeds the session context of %d tokens", n,
                         sd_session_n_ctx(s));
    const int32_t keep = sd_session_keep_prefix(s, ctx, n);
    const int32_t n_batch = sd_session_n_batch(s);
    for (int32_t i = keep; i < n; i += n_batch) {
        int32_t m = n - i < n_batch ? n - i : n_batch;
        int rc = sd_session_eval(s, ctx + i, m, NULL, 0, err);
        if (rc) return rc;
    }
    return SD_OK;
}
