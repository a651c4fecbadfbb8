/* libFuzzer target: the SentencePiece tokenizer (the TinyStories target's vocabulary, or
 * $SD_FUZZ_VOCAB_SPM) and its decoders on arbitrary text: see fuzz_tokenizer.h. */
#define FUZZ_BPE 0
#include "tests/fuzz/fuzz_tokenizer.h"
