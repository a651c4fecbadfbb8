/*
 * Unicode helpers of the tokenizer part (private to runtime/tokenizer/; not a face).
 *
 * - Code point classes from the generated table unicode_data.c (scripts/gen_unicode.py,
 *   Unicode 15.1, the version of llama.cpp's src/unicode-data.cpp).
 * - UTF-8 decoding the way llama.cpp's unicode_cpts_from_utf8 does it (lenient: a bad
 *   lead byte or a short/invalid continuation turns ONE byte into U+FFFD and decoding
 *   resumes at the next byte; overlong forms and surrogates are decoded as written), and
 *   encoding (unicode_cpt_to_utf8).
 * - The GPT-2 byte <-> code point mapping of byte-level BPE (bytes_to_unicode() of
 *   OpenAI's GPT-2 encoder.py, llama.cpp's unicode_byte_to_utf8).
 * - Strict UTF-8 validation (RFC 3629) for token texts and the streaming detokenizer, and
 *   a one-line rendering of arbitrary bytes for error messages.
 */
#ifndef SD_TOKENIZER_UNICODE_H
#define SD_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Classes (llama.cpp's unicode_cpt_flags): one of the first eight, plus WHITESPACE. */
enum {
    SD_UCD_LETTER = 1 << 0,     /* \p{L}: Lu Ll Lt Lm Lo */
    SD_UCD_NUMBER = 1 << 1,     /* \p{N}: Nd Nl No */
    SD_UCD_PUNCT = 1 << 2,      /* \p{P}: Pc Pd Ps Pe Pi Pf Po */
    SD_UCD_SYMBOL = 1 << 3,     /* \p{S}: Sm Sc Sk So */
    SD_UCD_MARK = 1 << 4,       /* \p{M}: Mn Mc Me */
    SD_UCD_SEPARATOR = 1 << 5,  /* \p{Z}: Zs Zl Zp */
    SD_UCD_CONTROL = 1 << 6,    /* \p{C} less Cn: Cc Cf Cs Co */
    SD_UCD_UNASSIGNED = 1 << 7, /* Cn; also every value above U+10FFFF */
    SD_UCD_WHITESPACE = 1 << 8, /* \s: the White_Space property */
};

/* The generated table (unicode_data.c). */
extern const size_t sd_ucd_n_ranges;
extern const uint32_t sd_ucd_start[];
extern const uint16_t sd_ucd_flags[];

/* SD_UCD_* flags of a code point (never 0; SD_UCD_UNASSIGNED above U+10FFFF). */
unsigned sd_ucd_flags_of(uint32_t cp);

#define SD_UTF8_REPLACEMENT 0xFFFDu

/*
 * Decode s[0..n) into cps (capacity >= n: at most one code point per byte); returns the
 * count. llama.cpp's rules (see the top comment); values above U+10FFFF from F5..F7 lead
 * bytes are replaced by U+FFFD per byte too (llama.cpp throws on re-encoding them).
 */
size_t sd_utf8_decode_lenient(const char *s, size_t n, uint32_t *cps);

/* Encode cp (<= U+10FFFF) to out[0..4); returns the byte count 1..4. */
size_t sd_utf8_encode(uint32_t cp, char *out);

/* Length in bytes of the UTF-8 sequence a lead byte announces (llama.cpp's
 * unicode_len_utf8: 0xxx and 10xx -> 1, 110x -> 2, 1110 -> 3, 1111 -> 4). */
size_t sd_utf8_lead_len(unsigned char c);

/*
 * Strict validation (RFC 3629: no overlongs, no surrogates, <= U+10FFFF). Returns the
 * length of the valid sequence at s[0..n) (1..4), 0 if s[0..n) is a proper prefix of a
 * valid sequence (more bytes could complete it; n < needed), or -1 if invalid, with
 * *bad set to the number of bytes forming the maximal invalid subpart (>= 1).
 */
int sd_utf8_check(const unsigned char *s, size_t n, size_t *bad);

/* 1 if s[0..n) is entirely valid UTF-8; else 0 and *at = offset of the first bad byte. */
int sd_utf8_valid(const char *s, size_t n, size_t *at);

/* s[0..n) for a one-line message: control bytes, quotes, backslashes and invalid UTF-8 as
 * \xNN, cut with "..." to fit cap (NUL-terminated). */
void sd_text_render(const char *s, size_t n, char *buf, size_t cap);

/* GPT-2 byte mapping: the code point standing for byte b, and the inverse (-1 if cp
 * stands for no byte). Printable bytes ! .. ~, U+00A1 .. U+00AC, U+00AE .. U+00FF map
 * to themselves; the other 68 bytes, in increasing order, to U+0100 .. U+0143. */
uint32_t sd_gpt2_byte_to_cp(unsigned char b);
int sd_gpt2_cp_to_byte(uint32_t cp);

#endif /* SD_TOKENIZER_UNICODE_H */
