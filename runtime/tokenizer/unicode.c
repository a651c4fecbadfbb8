/*
 * UTF-8, code point classes and the GPT-2 byte mapping (see unicode.h).
 */
#include "runtime/tokenizer/unicode.h"

#include <stdio.h>
#include <string.h>

unsigned sd_ucd_flags_of(uint32_t cp) {
    if (cp > 0x10FFFF) return SD_UCD_UNASSIGNED;
    /* last range whose start is <= cp (sd_ucd_start[0] == 0) */
    size_t lo = 0, hi = sd_ucd_n_ranges;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (sd_ucd_start[mid] <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return sd_ucd_flags[lo];
}

size_t sd_utf8_lead_len(unsigned char c) {
    static const unsigned char len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[c >> 4];
}

static int is_cont(unsigned char c) {
    return (c & 0xC0) == 0x80;
}

size_t sd_utf8_decode_lenient(const char *s, size_t n, uint32_t *cps) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        uint32_t cp = SD_UTF8_REPLACEMENT;
        size_t len = 1;
        if (c < 0x80) {
            cp = c;
        } else if ((c & 0xE0) == 0xC0) {
            if (i + 1 < n && is_cont(u[i + 1])) {
                cp = ((uint32_t)(c & 0x1F) << 6) | (u[i + 1] & 0x3F);
                len = 2;
            }
        } else if ((c & 0xF0) == 0xE0) {
            if (i + 2 < n && is_cont(u[i + 1]) && is_cont(u[i + 2])) {
                cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(u[i + 1] & 0x3F) << 6) |
                     (u[i + 2] & 0x3F);
                len = 3;
            }
        } else if ((c & 0xF8) == 0xF0) {
            if (i + 3 < n && is_cont(u[i + 1]) && is_cont(u[i + 2]) && is_cont(u[i + 3])) {
                uint32_t v = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(u[i + 1] & 0x3F) << 12) |
                             ((uint32_t)(u[i + 2] & 0x3F) << 6) | (u[i + 3] & 0x3F);
                if (v <= 0x10FFFF) {
                    cp = v;
                    len = 4;
                }
            }
        }
        /* else: a continuation byte or F8..FF as lead: one byte -> U+FFFD */
        cps[k++] = cp;
        i += len;
    }
    return k;
}

size_t sd_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | ((cp >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int sd_utf8_check(const unsigned char *s, size_t n, size_t *bad) {
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0; /* no overlongs */
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F; /* <= U+10FFFF */
    } else {
        *bad = 1; /* 80..C1, F5..FF can never start a sequence */
        return -1;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) return 0; /* a valid prefix so far */
        unsigned char b = s[i];
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) {
            *bad = i; /* the lead and the continuation bytes that fitted */
            return -1;
        }
    }
    return (int)need;
}

int sd_utf8_valid(const char *s, size_t n, size_t *at) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t bad = 0;
        int r = sd_utf8_check(u + i, n - i, &bad);
        if (r <= 0) {
            if (at) *at = i;
            return 0;
        }
        i += (size_t)r;
    }
    return 1;
}

/* Bytes that stand for themselves: '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF. The other
 * 68 bytes are, in order: 0x00..0x20 (33), 0x7F..0xA0 (34), 0xAD (1). */
static int gpt2_self(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t sd_gpt2_byte_to_cp(unsigned char b) {
    if (gpt2_self(b)) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu);
    return 0x100u + 33 + 34; /* 0xAD */
}

int sd_gpt2_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return gpt2_self(cp) ? (int)cp : -1;
    if (cp < 0x100 + 33) return (int)(cp - 0x100);
    if (cp < 0x100 + 67) return (int)(cp - 0x100 - 33 + 0x7F);
    if (cp == 0x100 + 67) return 0xAD;
    return -1;
}

void sd_text_render(const char *s, size_t n, char *buf, size_t cap) {
    size_t k = 0, i = 0;
    while (i < n && k + 8 < cap) {
        size_t bad = 0;
        int r = sd_utf8_check((const unsigned char *)s + i, n - i, &bad);
        unsigned char c = (unsigned char)s[i];
        if (r > 1) { /* a valid multi-byte character: as is */
            memcpy(buf + k, s + i, (size_t)r);
            k += (size_t)r;
            i += (size_t)r;
            continue;
        }
        if (r == 1 && c >= 0x20 && c != 0x7f && c != '\\' && c != '\'')
            buf[k++] = (char)c;
        else
            k += (size_t)snprintf(buf + k, cap - k, "\\x%02x", c);
        i++;
    }
    if (i < n && k + 4 <= cap) memcpy(buf + k, "...", 3), k += 3;
    buf[k < cap ? k : cap - 1] = '\0';
}
