/*
 * sd_vocab_tokenize (llama_vocab::impl::tokenize): partition the text on special tokens
 * (special.c), then each raw fragment goes through the SPM (spm.c) or BPE (bpe.c)
 * tokenizer, with BOS/EOS around when add_special asks for them.
 *   SPM: a fragment that starts the text or follows a special token gets a " " prefix when
 *        add_space_prefix (llama.cpp's is_prev_special).
 *   BPE: fragments are tokenized independently (no prefix).
 */
#include <limits.h>
#include <stdlib.h>

#include "runtime/tokenizer/vocab_impl.h"

int sd_vocab_tokenize(const sd_vocab *v, const char *text, size_t len, unsigned flags,
                      int32_t **ids, size_t *n_ids, sd_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (len > (size_t)INT32_MAX)
        return sd_errorf(err, SD_ERR_ARG, "tokenize: text of %zu bytes is too long (max 2 GiB)",
                         len);
    const int add_special = (flags & SD_VOCAB_ADD_SPECIAL) != 0;
    ids_buf out = {NULL, 0, 0};
    frag_buf fb = {NULL, 0, 0};
    int rc = SD_OK;

    if (vocab_partition(v, text, len, (flags & SD_VOCAB_PARSE_SPECIAL) != 0, &fb)) goto oom;
    if (add_special && v->add_bos && ids_push(&out, v->bos)) goto oom;
    int prev_special = 1; /* SPM: the first fragment gets the space prefix */
    for (size_t f = 0; f < fb.n && rc == SD_OK; f++) {
        const frag *fr = &fb.p[f];
        if (fr->id >= 0) {
            if (ids_push(&out, fr->id)) goto oom;
            prev_special = 1;
            continue;
        }
        if (v->type == SD_VOCAB_SPM)
            rc = spm_tokenize(v, text + fr->off, fr->len, v->add_space_prefix && prev_special, &out,
                              err);
        else
            rc = bpe_tokenize(v, text + fr->off, fr->len, &out, err);
        prev_special = 0;
    }
    if (rc != SD_OK) goto done;
    if (add_special && v->add_eos && ids_push(&out, v->eos)) goto oom;
    if (out.n == 0) {
        /* malloc(0) may return NULL: hand back a valid pointer anyway. */
        out.p = malloc(sizeof *out.p);
        if (!out.p) goto oom;
    }
    *ids = out.p;
    *n_ids = out.n;
    out.p = NULL;
    goto done;
oom:
    rc = sd_errorf(err, SD_ERR_OOM, "tokenize: out of memory");
done:
    free(out.p);
    free(fb.p);
    return rc;
}
