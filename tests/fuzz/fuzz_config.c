/*
 * libFuzzer target: the pair-config loader (tools/common/config.c, sd_config_load) on
 * arbitrary bytes given as a file. An error status is the answer to bad input; any crash,
 * sanitizer report or leak is a finding. Checked: a config that loads has every numeric
 * key inside the range the loader documents. Seeds: corpus/config/ (the pair configs of
 * configs/).
 */
#include <string.h>

#include "tools/common/config.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    const int fd = fuzz_file(data, size, path, sizeof path);
    if (fd < 0) return 0;
    sd_config cfg;
    sd_error err = {0};
    if (sd_config_load(path, &cfg, &err) == SD_OK) {
        if (cfg.has_draft_tokens && (cfg.draft_tokens < 1 || cfg.draft_tokens > 16)) abort();
        if (cfg.has_temp && !(cfg.temp >= 0.0f)) abort();
        if (cfg.has_top_p && !(cfg.top_p > 0.0f && cfg.top_p <= 1.0f)) abort();
        if (cfg.has_ngram_min && (cfg.ngram_min < 1 || cfg.ngram_min > 16)) abort();
        if (cfg.target && !*cfg.target) abort(); /* an empty path is refused */
        sd_config_free(&cfg);
    } else if (!err.msg[0] || strchr(err.msg, '\n')) {
        abort(); /* every error is one line */
    }
    close(fd);
    return 0;
}
