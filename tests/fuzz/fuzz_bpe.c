/* libFuzzer target: the byte-level BPE tokenizer (the SmolLM2 draft's vocabulary and smollm
 * pre-tokenizer, or $SD_FUZZ_VOCAB_BPE) and its decoders on arbitrary text: see
 * fuzz_tokenizer.h. */
#define FUZZ_BPE 1
#include "tests/fuzz/fuzz_tokenizer.h"
