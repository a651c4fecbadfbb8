/* JSON pair configs (see config.h), parsed with jansson. */
#include "tools/common/config.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Resolve a path relative to the folder of the config file. */
static char *resolve_path(const char *cfg_path, const char *p) {
    if (p[0] == '/') return strdup(p);
    const char *slash = strrchr(cfg_path, '/');
    if (!slash) return strdup(p);
    size_t dir_len = (size_t)(slash - cfg_path) + 1;
    size_t n = dir_len + strlen(p) + 1;
    char *out = malloc(n);
    if (!out) return NULL;
    memcpy(out, cfg_path, dir_len);
    memcpy(out + dir_len, p, strlen(p) + 1);
    return out;
}

static int get_int(const char *path, const char *key, json_t *v, int64_t lo, int64_t hi,
                   int64_t *out, sd_error *err) {
    if (!json_is_integer(v))
        return sd_errorf(err, SD_ERR_CONFIG, "%s: key '%s': expected an integer", path, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return sd_errorf(err, SD_ERR_CONFIG,
                         "%s: key '%s': expected a value in [%lld, %lld], found %lld", path, key,
                         (long long)lo, (long long)hi, (long long)x);
    *out = x;
    return SD_OK;
}

static int get_num(const char *path, const char *key, json_t *v, double lo, double hi, float *out,
                   sd_error *err) {
    if (!json_is_number(v))
        return sd_errorf(err, SD_ERR_CONFIG, "%s: key '%s': expected a number", path, key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return sd_errorf(err, SD_ERR_CONFIG, "%s: key '%s': expected a value in [%g, %g], found %g",
                         path, key, lo, hi, x);
    *out = (float)x;
    return SD_OK;
}

static int get_str(const char *path, const char *key, json_t *v, sd_error *err) {
    if (!json_is_string(v))
        return sd_errorf(err, SD_ERR_CONFIG, "%s: key '%s': expected a string", path, key);
    return SD_OK;
}

/* A file name: a non-empty string. */
static int get_path(const char *path, const char *key, json_t *v, sd_error *err) {
    int rc = get_str(path, key, v, err);
    if (!rc && json_string_length(v) == 0)
        rc = sd_errorf(err, SD_ERR_CONFIG, "%s: key '%s': expected a file name, found \"\"", path,
                       key);
    return rc;
}

int sd_config_load(const char *path, sd_config *cfg, sd_error *err) {
    memset(cfg, 0, sizeof *cfg);
    json_error_t jerr;
    /* A regular file only (a FIFO would block, a folder is not a config). */
    const int fd = sd_file_open_regular(path, err);
    if (fd < 0) return SD_ERR_IO;
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
    close(fd);
    if (!root) {
        char text[sizeof jerr.text + 8]; /* jansson quotes the bad token, control bytes too */
        sd_one_line(jerr.text, text, sizeof text);
        if (jerr.line < 0 || jerr.position == 0)
            return sd_errorf(err, SD_ERR_IO, "%s: cannot read config: %s", path, text);
        return sd_errorf(err, SD_ERR_CONFIG, "%s:%d:%d: bad JSON: %s", path, jerr.line, jerr.column,
                         text);
    }
    int rc = SD_OK;
    if (!json_is_object(root)) {
        rc = sd_errorf(err, SD_ERR_CONFIG, "%s: expected a JSON object at the top level", path);
        goto out;
    }
    const char *key;
    json_t *v;
    char vshow[96]; /* a key or value from the file, for a message */
    json_object_foreach(root, key, v) {
        int64_t i = 0;
        if (!strcmp(key, "description")) {
            rc = get_str(path, key, v, err);
        } else if (!strcmp(key, "target") || !strcmp(key, "draft")) {
            rc = get_path(path, key, v, err);
            if (rc) break;
            char *p = resolve_path(path, json_string_value(v));
            if (!p) {
                rc = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
                break;
            }
            char **slot = key[0] == 't' ? &cfg->target : &cfg->draft;
            free(*slot);
            *slot = p;
        } else if (!strcmp(key, "prompt")) {
            rc = get_str(path, key, v, err);
            if (rc) break;
            free(cfg->prompt);
            cfg->prompt = strdup(json_string_value(v));
            if (!cfg->prompt) rc = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
        } else if (!strcmp(key, "kv_type")) {
            rc = get_str(path, key, v, err);
            if (rc) break;
            const char *t = json_string_value(v);
            static const char *const kv[] = {"f32", "f16", "q8_0", "q4_0"};
            cfg->kv_type = NULL;
            for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
                if (!strcmp(t, kv[i])) cfg->kv_type = kv[i];
            if (!cfg->kv_type)
                rc = sd_errorf(err, SD_ERR_CONFIG,
                               "%s: key 'kv_type': expected \"f32\", \"f16\", \"q8_0\" or "
                               "\"q4_0\", found \"%s\"",
                               path, sd_one_line(t, vshow, sizeof vshow));
        } else if (!strcmp(key, "device") || !strcmp(key, "device_draft")) {
            rc = get_str(path, key, v, err);
            if (rc) break;
            const char *t = json_string_value(v),
                       **slot = key[6] == '\0' ? &cfg->device : &cfg->device_draft;
            if (!strcmp(t, "cpu"))
                *slot = "cpu";
            else if (!strcmp(t, "cuda"))
                *slot = "cuda";
            else
                rc = sd_errorf(err, SD_ERR_CONFIG,
                               "%s: key '%s': expected \"cpu\" or \"cuda\", found \"%s\"", path,
                               key, sd_one_line(t, vshow, sizeof vshow));
        } else if (!strcmp(key, "tensor_split")) {
            rc = get_int(path, key, v, 0, 64, &i, err);
            cfg->tensor_split = (int32_t)i;
            cfg->has_tensor_split = 1;
        } else if (!strcmp(key, "chat")) {
            if (!json_is_boolean(v)) {
                rc = sd_errorf(err, SD_ERR_CONFIG, "%s: key 'chat': expected true or false", path);
                break;
            }
            cfg->chat = json_is_true(v);
            cfg->has_chat = 1;
        } else if (!strcmp(key, "spec_sampling")) {
            rc = get_str(path, key, v, err);
            if (rc) break;
            if (sd_spec_sampling_parse(json_string_value(v), &cfg->spec_sampling))
                rc = sd_errorf(err, SD_ERR_CONFIG,
                               "%s: key 'spec_sampling': expected \"rejection\" or \"gumbel\", "
                               "found \"%s\"",
                               path, json_string_value(v));
            cfg->has_spec_sampling = 1;
        } else if (!strcmp(key, "min_p")) {
            rc = get_num(path, key, v, 0.0, 1.0, &cfg->min_p, err);
            cfg->has_min_p = 1;
        } else if (!strcmp(key, "repeat_penalty")) {
            rc = get_num(path, key, v, 1e-6, 100.0, &cfg->repeat_penalty, err);
            cfg->has_repeat_penalty = 1;
        } else if (!strcmp(key, "presence_penalty") || !strcmp(key, "frequency_penalty")) {
            const int pres = key[0] == 'p';
            rc = get_num(path, key, v, -100.0, 100.0,
                         pres ? &cfg->presence_penalty : &cfg->frequency_penalty, err);
            *(pres ? &cfg->has_presence_penalty : &cfg->has_frequency_penalty) = 1;
        } else if (!strcmp(key, "repeat_last_n")) {
            rc = get_int(path, key, v, 0, SD_PENALTY_MAX_N, &i, err);
            cfg->repeat_last_n = (int32_t)i;
            cfg->has_repeat_last_n = 1;
        } else if (!strcmp(key, "draft_head")) {
            rc = get_str(path, key, v, err);
            if (rc) break;
            free(cfg->draft_head);
            cfg->draft_head = resolve_path(path, json_string_value(v));
            if (!cfg->draft_head) rc = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
        } else if (!strcmp(key, "draft_head_n")) {
            rc = get_int(path, key, v, 0, INT32_MAX, &i, err);
            cfg->draft_head_n = (int32_t)i;
            cfg->has_draft_head_n = 1;
        } else if (!strcmp(key, "lookup_cache")) {
            rc = get_path(path, key, v, err);
            if (rc) break;
            free(cfg->lookup_cache);
            cfg->lookup_cache = resolve_path(path, json_string_value(v));
            if (!cfg->lookup_cache) rc = sd_errorf(err, SD_ERR_OOM, "%s: out of memory", path);
        } else if (!strcmp(key, "draft_type")) {
            rc = get_str(path, key, v, err);
            if (rc) break;
            if (sd_draft_type_parse(json_string_value(v), &cfg->draft_type) ||
                cfg->draft_type == SD_DRAFT_AUTO)
                rc = sd_errorf(err, SD_ERR_CONFIG,
                               "%s: key 'draft_type': expected " SD_DRAFT_TYPE_NAMES
                               ", found \"%s\"",
                               path, sd_one_line(json_string_value(v), vshow, sizeof vshow));
            cfg->has_draft_type = 1;
        } else if (!strcmp(key, "draft_policy")) {
            rc = get_str(path, key, v, err);
            if (rc) break;
            if (sd_k_policy_parse(json_string_value(v), &cfg->draft_policy))
                rc = sd_errorf(err, SD_ERR_CONFIG,
                               "%s: key 'draft_policy': expected \"fixed\" or \"adaptive\", "
                               "found \"%s\"",
                               path, sd_one_line(json_string_value(v), vshow, sizeof vshow));
            cfg->has_draft_policy = 1;
        } else if (!strcmp(key, "draft_p_min")) {
            rc = get_num(path, key, v, 0.0, 1.0, &cfg->draft_p_min, err);
            cfg->has_draft_p_min = 1;
        } else if (!strcmp(key, "draft_min")) {
            rc = get_int(path, key, v, 0, SD_MAX_DRAFT, &i, err);
            cfg->draft_min = (int32_t)i;
            cfg->has_draft_min = 1;
        } else if (!strcmp(key, "chain_draft_max") || !strcmp(key, "chain_long_match")) {
            rc = get_int(path, key, v, 0, SD_MAX_DRAFT, &i, err);
            if (key[6] == 'd') {
                cfg->chain_draft_max = (int32_t)i;
                cfg->has_chain_draft_max = 1;
            } else {
                cfg->chain_long_match = (int32_t)i;
                cfg->has_chain_long_match = 1;
            }
        } else if (!strcmp(key, "ngram_min") || !strcmp(key, "ngram_max")) {
            rc = get_int(path, key, v, 1, SD_NGRAM_MAX, &i, err);
            if (key[7] == 'i') {
                cfg->ngram_min = (int32_t)i;
                cfg->has_ngram_min = 1;
            } else {
                cfg->ngram_max = (int32_t)i;
                cfg->has_ngram_max = 1;
            }
        } else if (!strcmp(key, "suffix_factor")) {
            rc = get_num(path, key, v, 1e-6, 64.0, &cfg->suffix_factor, err);
            cfg->has_suffix_factor = 1;
        } else if (!strcmp(key, "suffix_cost")) {
            rc = get_num(path, key, v, 1e-6, 16.0, &cfg->suffix_cost, err);
            cfg->has_suffix_cost = 1;
        } else if (!strcmp(key, "suffix_min_prob")) {
            rc = get_num(path, key, v, 0.0, 1.0, &cfg->suffix_min_prob, err);
            cfg->has_suffix_min_prob = 1;
        } else if (!strcmp(key, "suffix_resume")) {
            rc = get_int(path, key, v, 0, SD_MAX_DRAFT, &i, err);
            cfg->suffix_resume = (int32_t)i;
            cfg->has_suffix_resume = 1;
        } else if (!strcmp(key, "draft_tokens")) {
            rc = get_int(path, key, v, 1, 16, &i, err);
            cfg->draft_tokens = (int32_t)i;
            cfg->has_draft_tokens = 1;
        } else if (!strcmp(key, "max_tokens")) {
            rc = get_int(path, key, v, 1, INT32_MAX, &i, err);
            cfg->max_tokens = (int32_t)i;
            cfg->has_max_tokens = 1;
        } else if (!strcmp(key, "top_k")) {
            rc = get_int(path, key, v, 0, INT32_MAX, &i, err);
            cfg->top_k = (int32_t)i;
            cfg->has_top_k = 1;
        } else if (!strcmp(key, "threads")) {
            rc = get_int(path, key, v, 0, 1024, &i, err);
            cfg->threads = (int32_t)i;
            cfg->has_threads = 1;
        } else if (!strcmp(key, "ctx_size")) {
            rc = get_int(path, key, v, 0, INT32_MAX, &i, err);
            cfg->ctx_size = (int32_t)i;
            cfg->has_ctx_size = 1;
        } else if (!strcmp(key, "seed")) {
            rc = get_int(path, key, v, 0, INT64_MAX, &i, err);
            cfg->seed = (uint64_t)i;
            cfg->has_seed = 1;
        } else if (!strcmp(key, "temp")) {
            rc = get_num(path, key, v, 0.0, 1e6, &cfg->temp, err);
            cfg->has_temp = 1;
        } else if (!strcmp(key, "top_p")) {
            rc = get_num(path, key, v, 1e-9, 1.0, &cfg->top_p, err);
            cfg->has_top_p = 1;
        } else {
            rc = sd_errorf(err, SD_ERR_CONFIG,
                           "%s: unknown key '%s' (known: description, target, draft, "
                           "draft_tokens, max_tokens, temp, top_k, top_p, seed, threads, "
                           "ctx_size, prompt, kv_type, draft_type, draft_policy, draft_p_min, "
                           "draft_min, ngram_min, ngram_max, suffix_factor, suffix_min_prob, "
                           "suffix_cost, suffix_resume, lookup_cache, device, device_draft, "
                           "tensor_split, chat, spec_sampling, min_p, repeat_penalty, "
                           "presence_penalty, frequency_penalty, repeat_last_n, draft_head, "
                           "draft_head_n, chain_draft_max, chain_long_match)",
                           path, sd_one_line(key, vshow, sizeof vshow));
        }
        if (rc) break;
    }
out:
    json_decref(root);
    if (rc) sd_config_free(cfg);
    return rc;
}

void sd_config_free(sd_config *cfg) {
    if (!cfg) return;
    free(cfg->target);
    free(cfg->draft);
    free(cfg->prompt);
    free(cfg->lookup_cache);
    free(cfg->draft_head);
    cfg->target = cfg->draft = cfg->prompt = cfg->lookup_cache = cfg->draft_head = NULL;
}
