/* Helpers shared by the tests: temporary folders, random llama GGUFs, the real
 * stories260K pair, and running the specdec binary. */
#ifndef SD_TESTUTIL_H
#define SD_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "quant/sd_quant.h"

/* The shared test data folder: $SD_SHARED_DATA when set and not empty, else the
 * compiled-in ../shared/data beside the checkout (SD_SHARED_DATA_DEFAULT). Tests that
 * need it skip with cr_skip_test when a file is absent, so a user's clone (or
 * SD_SHARED_DATA=/no/such/folder) passes. */
const char *tu_shared_data(void);
/* tu_shared_data() + "/" + rel, in one of 8 static buffers used in turn (so a few can be
 * live in one expression; tests are single-threaded). */
const char *tu_shared(const char *rel);

/*
 * Skip the running test unless path is readable: cr_skip_test("absent: PATH (why)"). Every
 * test that needs a data file skips through this, so scripts/test.sh can tell a skip for
 * data that is really absent from one whose data is present (a failure: the test could
 * have run and did not, e.g. because it looked in the wrong place).
 */
void tu_need_path(const char *path, const char *why);

/*
 * A llama.cpp test vocabulary "ggml-vocab-NAME.gguf" (with its .inp/.out vectors): in
 * $SD_LLAMACPP_VOCAB when that is set (the one folder looked in), else the first folder that
 * has it of models/downloaded/vocab/ (where scripts/get_vocabs.sh puts llama.cpp's models/
 * folder from llama-cpp-python's sdist) and tu_shared("vocab"), the latter's path when
 * neither has it (the caller's tu_need_path then names it). Into buf[cap]; returns buf.
 */
char *tu_llamacpp_vocab(const char *name, char *buf, size_t cap);

/* Make a fresh temporary folder (mkdtemp under $TMPDIR or /tmp) into buf. 0 on success. */
int tu_mkdtemp(char *buf, size_t cap);
/* Remove a folder and the plain files directly in it. */
void tu_rmdir(const char *dir);
/* dir + "/" + name into buf (asserts it fits). Returns buf. */
char *tu_path(char *buf, size_t cap, const char *dir, const char *name);
/* Plain files directly in dir (not "." and ".."), or -1. */
int tu_count_files(const char *dir);
/* Write n bytes to path (created or truncated). 0, or -1. */
int tu_write_file(const char *path, const void *buf, size_t n);
/* The whole of path, malloc'd, with a NUL after it (not counted in *n); NULL on error. */
unsigned char *tu_read_file(const char *path, size_t *n);

/* A random llama model. Weights ~ N(0, 1/sqrt(fan_in)) from `seed`; when noise > 0
 * each weight w becomes w + noise * N(0, 1/sqrt(fan_in)) drawn from noise_seed, so a
 * draft can be made a perturbed copy of a target (same seed, noise > 0). The
 * vocabulary is synthetic ("<unk>", "<s>", "</s>", then "t3", "t4", ...), model
 * "llama", bos 1, eos 2. */
typedef struct tu_llama_spec {
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    uint64_t seed;
    float noise;
    uint64_t noise_seed;
    sd_type wtype;          /* type of the 2-D weight matrices (F32, F16, BF16, Q8_0, Q4_0) */
    int tied;               /* 1: no output.weight (token_embd is the classifier) */
    const char *tok_prefix; /* text of normal tokens: prefix + id (default "t") */
    int nan_output_norm;    /* 1: every output_norm weight is NaN (non-finite logits) */
    int32_t sliding_window; /* > 0: llama.attention.sliding_window (Mistral-shaped) */
} tu_llama_spec;

tu_llama_spec tu_llama_default_spec(void);
/* Write the model to path. 0 on success (prints the error to stderr otherwise). */
int tu_make_llama(const char *path, const tu_llama_spec *spec);

/* The tests' random pair: dir/t.gguf, tu_llama_default_spec() in F32, and dir/d.gguf,
 * the same model in Q8_0 with noise 0.3 (vocabularies pair, acceptance is partial).
 * Paths into t and d. 0 on success. */
int tu_make_test_pair(const char *dir, char *t, size_t tcap, char *d, size_t dcap);

/* Convert tu_shared("models/stories260K.bin") into dir/stories260K-f32.gguf and
 * quantize it to dir/stories260K-q4_0.gguf and -q8_0.gguf. Returns 1 if made, 0 if
 * the shared data is absent (caller skips), -1 on error. */
int tu_make_stories_pair(const char *dir);

/* A small llama2.c checkpoint (karpathy/llama2.c legacy format: 7 int32 header, then
 * float32 weights; dim 64, hidden 96, 2 layers, 4 heads, 2 KV heads, 6 tokens, seq 8,
 * shared classifier) and its tokenizer file at ckpt and tok. 0, or -1. */
int tu_make_llama2c(const char *ckpt, const char *tok);

/* An n-gram proposer (sd_proposer_ngram_init) with sizes n_min .. n_max over a context of
 * n_ctx tokens of an n_vocab vocabulary (asserts it is made). */
struct sd_proposer;
struct sd_proposer *tu_make_ngram(int32_t n_min, int32_t n_max, int32_t n_ctx, int32_t n_vocab);

/* Run `specdec ARGS` and assert it fails (non-zero) with exactly one stderr line that
 * contains word. */
void tu_expect_cli_error(const char *args, const char *word);

/* Run a shell command line; stdout and stderr captured (malloc'd, NUL-terminated;
 * pass NULL to discard). Returns the exit status (or -1). */
int tu_run(const char *cmd, char **out, char **err);

#endif
