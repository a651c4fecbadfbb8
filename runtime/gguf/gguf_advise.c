/*
 * runtime/gguf/gguf_advise.c: telling the OS which parts of the mapped file a reader no
 * longer needs (see sd_gguf.h, sd_gguf_advise_unneeded).
 */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/gguf/gguf_impl.h"
#include "runtime/gguf/sd_gguf.h"

void sd_gguf_advise_unneeded(const sd_gguf *g, const void *p, size_t n) {
    if (!g || !g->map || !p || n == 0) return;
    const uintptr_t lo = (uintptr_t)g->map, hi = lo + g->size, a = (uintptr_t)p;
    if (a < lo || a > hi || n > hi - a) return; /* not inside this file's mapping */
    const long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    const uintptr_t m = (uintptr_t)pg - 1;
    const uintptr_t b = (a + m) & ~m, e = (a + n) & ~m; /* whole pages inside the range */
    /* A read-only private file mapping: the pages leave this process (its RSS) and come
     * back from the page cache or the file if touched again; nothing is lost. */
    if (e > b) (void)madvise((void *)b, e - b, MADV_DONTNEED);
}
