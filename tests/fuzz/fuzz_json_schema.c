/*
 * libFuzzer target: JSON Schema -> GBNF (runtime/grammar/schema.c, sd_json_schema_to_gbnf)
 * on arbitrary bytes. An error status is the answer to bad input; any crash, sanitizer
 * report or leak is a finding. Checked: a schema that converts gives GBNF that the grammar
 * part's own parser accepts (start rule root); a failure leaves no output and one line.
 * Seeds: corpus/json_schema/ (schemas of tests/data/schemas/held.jsonl).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/grammar/sd_grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *gbnf = NULL;
    sd_error err = {0};
    if (sd_json_schema_to_gbnf((const char *)data, size, &gbnf, &err) == SD_OK) {
        sd_grammar *g = NULL;
        if (sd_grammar_parse(gbnf, strlen(gbnf), NULL, &g, &err) != SD_OK &&
            err.status != SD_ERR_OOM &&
            !strstr(err.msg, "left recursion")) /* a $ref cycle that consumes nothing */
            abort();
        sd_grammar_free(g);
        free(gbnf);
    } else if (gbnf || !err.msg[0] || strchr(err.msg, '\n')) {
        abort(); /* no output, and every error is one line */
    }
    return 0;
}
