/* runtime/server/slot_action.c: llama-server's POST /slots/N?action=... .
 *
 * Sequences are not bound to slots here: the batcher gives each request a free sequence
 * and keeps finished prompts in one prefix cache that every sequence reuses. So erase
 * drops the prefix cache's idle blocks (every slot's cached prefixes, not only N's: the
 * next request evaluates its whole prompt), answered with llama-server's shape {"id_slot",
 * "n_erased": the positions dropped}. The cache belongs to the stepping thread: the HTTP
 * thread asks (a ticket) and waits until the run loop has served it between two steps.
 * save and restore (slot files) are not supported: 501, named.
 */
#include <jansson.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "runtime/server/server_impl.h"

/* How long an erase waits for the stepping thread (a step is far shorter). */
#define SLOT_ERASE_WAIT_MS 10000.0

void srv_slot_serve(sd_server *s) {
    const long long asked = atomic_load(&s->erase_asked);
    if (asked == atomic_load(&s->erase_done)) return;
    sd_batcher_stats st;
    sd_batcher_get_stats(s->b, &st);
    const long long before = (long long)st.kv.n_cached_idle;
    sd_batcher_clear_cache(s->b);
    sd_batcher_get_stats(s->b, &st);
    const long long after = (long long)st.kv.n_cached_idle;
    atomic_store(&s->erase_n, (before - after) * (long long)st.kv.block_size);
    atomic_store(&s->erase_done, asked);
}

void srv_slot_action(sd_server *s, int32_t slot, const char *action, srv_reply *r) {
    if (slot < 0 || slot >= s->p.n_slots) {
        srv_error(r, 400, "invalid_request_error", NULL, "no slot %d: slots are 0 .. %d", slot,
                  s->p.n_slots - 1);
        return;
    }
    if (!action) {
        srv_error(r, 400, "invalid_request_error", "action",
                  "the query's action is required (erase)");
        return;
    }
    if (!strcmp(action, "save") || !strcmp(action, "restore")) {
        srv_error(r, 501, "not_supported_error", "action",
                  "slot %s is not supported (sequences are not bound to slots)", action);
        return;
    }
    if (strcmp(action, "erase")) {
        srv_error(r, 400, "invalid_request_error", "action",
                  "action must be erase (save and restore are not supported)");
        return;
    }
    const long long ticket = atomic_fetch_add(&s->erase_asked, 1) + 1;
    const double end = sd_time_ms() + SLOT_ERASE_WAIT_MS;
    while (atomic_load(&s->erase_done) < ticket) {
        if (atomic_load(&s->stopping) || sd_time_ms() > end) {
            srv_error(r, 503, "server_error", NULL, "the erase was not served in time");
            return;
        }
        usleep(1000);
    }
    srv_json(r, 200,
             json_pack("{s:i,s:I}", "id_slot", (int)slot, "n_erased",
                       (json_int_t)atomic_load(&s->erase_n)));
}
