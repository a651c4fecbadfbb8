/*
 * libFuzzer target: the GGUF reader (sd_gguf_open), every getter over what it accepted,
 * the vocabulary loader (sd_vocab_load) and the model loader (sd_model_load: hyperparameters,
 * tensor names, shapes and types) on arbitrary bytes. Any crash, sanitizer report or leak is
 * a finding; an error status is the expected answer to bad input. Seeds: corpus/gguf/ (a
 * tiny llama model and a vocabulary-only file, written by tests/testutil.c's tu_make_llama
 * and the GGUF writer).
 */
#include <string.h>

#include "runtime/gguf/sd_gguf.h"
#include "runtime/model/sd_model.h"
#include "runtime/tokenizer/sd_vocab.h"
#include "tests/fuzz/fuzz_util.h"

/* Read every key through the getters that apply to its type. */
static void walk_kv(const sd_gguf *g) {
    for (int64_t i = 0; i < sd_gguf_n_kv(g); i++) {
        const char *key = sd_gguf_key_name(g, i);
        if (!key || sd_gguf_find_key(g, key) < 0) abort(); /* a listed key must be found */
        int64_t v64;
        uint32_t v32;
        float f;
        int b;
        const char *s;
        size_t len;
        (void)sd_gguf_get_i64(g, key, &v64, NULL);
        (void)sd_gguf_get_u32(g, key, &v32, NULL);
        (void)sd_gguf_get_f32(g, key, &f, NULL);
        (void)sd_gguf_get_bool(g, key, &b, NULL);
        if (sd_gguf_get_str(g, key, &s, &len, NULL) == SD_OK && len)
            (void)*(volatile const char *)(s + len - 1);
        sd_gguf_vtype et;
        uint64_t n;
        const void *data;
        if (sd_gguf_get_arr(g, key, &et, &n, &data, NULL) != SD_OK) continue;
        if (et == SD_GGUF_STRING)
            for (uint64_t j = 0; j < n && j < 64; j++)
                if (sd_gguf_arr_str(g, i, j, &s, &len) == SD_OK && len)
                    (void)*(volatile const char *)(s + len - 1);
    }
}

/* Touch the first and last byte of every tensor: its range must lie inside the mapping. */
static void walk_tensors(const sd_gguf *g) {
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        if (!t || !t->name || sd_gguf_find_tensor(g, t->name) != t) abort();
        if (t->nbytes) {
            (void)*(volatile const uint8_t *)t->data;
            (void)*((volatile const uint8_t *)t->data + t->nbytes - 1);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    const int fd = fuzz_file(data, size, path, sizeof path);
    if (fd < 0) return 0;
    sd_gguf *g = NULL;
    sd_error err = {0};
    if (sd_gguf_open(path, &g, &err) == SD_OK) {
        walk_kv(g);
        walk_tensors(g);
        sd_vocab *v = NULL;
        if (sd_vocab_load(g, &v, &err) == SD_OK) {
            int32_t *ids = NULL;
            size_t n = 0;
            static const char text[] = "Hello world, <s> 123 \xc3\xa9t\xc3\xa9 \xe2\x96\x81x";
            if (sd_vocab_tokenize(v, text, sizeof text - 1,
                                  SD_VOCAB_ADD_SPECIAL | SD_VOCAB_PARSE_SPECIAL, &ids, &n,
                                  &err) == SD_OK) {
                char *out = NULL;
                size_t out_len = 0;
                if (sd_vocab_detokenize(v, ids, n, 0, &out, &out_len, &err) == SD_OK) free(out);
            }
            free(ids);
            sd_vocab_free(v);
        }
        sd_gguf_close(g);
    }
    sd_model *m = NULL;
    if (sd_model_load(path, &m, &err) == SD_OK) sd_model_free(m);
    close(fd);
    return 0;
}
