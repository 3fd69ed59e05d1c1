/* ledger_state: the reservations' sealed state file, its previous generation, and the journal of changes since. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "ledger.h"
#include "ledger_internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "jsonutil.h"
#include "log.h"

json_t *ledger_state_entry(const struct reservation *r) {
        json_t *o = json_pack("{s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:i}", "id", r->id, "owner", r->owner, "vcpus",
                              (int)r->request.vcpus, "memory_bytes", (json_int_t)r->request.memory_bytes,
                              "hugepage_kib", (json_int_t)r->request.hugepage_kib, "created_at",
                              (json_int_t)r->created_at, "expires_at", (json_int_t)r->expires_at, "vmid", r->vmid);
        json_t *p = r->placement ? placement_to_json(r->placement) : json_null();
        if (!o || !p || json_object_set_new(o, "placement", p) < 0) {
                json_decref(o); /* set_new has consumed p, or p is NULL */
                if (!o)
                        json_decref(p);
                return NULL;
        }
        return o;
}

/* Whether path's current generation is kept as the previous one when it is replaced: when it reads back intact.
 * A damaged current file is not kept (the older .prev is worth more); one that cannot be read fails the save. */
static int keep_current(const char *path, bool *ret_keep) {
        char *text = NULL;
        size_t len;
        int r = fileio_read_sealed(path, LEDGER_STATE_MAX_BYTES, &text, &len);
        free(text);
        *ret_keep = r == 0;
        return r == -ENOENT || r == -EBADMSG ? 0 : r;
}

static char *state_text(const struct ledger *l, uint64_t journal_epoch) {
        char epoch[17];
        snprintf(epoch, sizeof epoch, "%016llx", (unsigned long long)journal_epoch);
        json_t *items = json_array();
        bool complete = items != NULL;
        for (size_t i = 0; complete && i < l->n; i++)
                complete = json_array_append_new(items, ledger_state_entry(l->items[i])) == 0;
        json_t *doc = complete ? json_pack("{s:i, s:O, s:s}", "version", LEDGER_STATE_VERSION, "reservations", items,
                                          "journal_epoch", epoch) : NULL;
        char *text = doc ? json_dumps(doc, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
        json_decref(doc);
        json_decref(items);
        return text;
}

int ledger_save(const struct ledger *l, const char *dir, uint64_t journal_epoch) {
        char *text = state_text(l, journal_epoch);
        if (!text)
                return -ENOMEM; /* an entry could not be built: write nothing rather than a file without it */
        char path[PATH_MAX], prev[PATH_MAX + 16], spare[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/%s", dir, LEDGER_STATE_FILE);
        snprintf(prev, sizeof prev, "%s%s", path, LEDGER_PREV_SUFFIX);
        snprintf(spare, sizeof spare, "%s%s", path, LEDGER_SPARE_SUFFIX);
        bool keep;
        int r = keep_current(path, &keep);
        if (r == 0)
                r = fileio_write_sealed_rotate(path, keep ? prev : NULL, spare, text, strlen(text), 0600);
        free(text);
        return r;
}

static int entry_int(const json_t *e, const char *key, json_int_t min, json_int_t max, json_int_t *ret) {
        json_t *v = json_object_get(e, key);
        if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
                return -EINVAL;
        *ret = json_integer_value(v);
        return 0;
}

static int entry_strings(const json_t *e, struct reservation *r) {
        const char *id, *owner;
        if (jsonutil_get_string(e, "id", &id) < 0 || jsonutil_get_string(e, "owner", &owner) < 0 ||
            !ledger_id_valid(id) || strlen(owner) > LEDGER_OWNER_MAX)
                return -EINVAL;
        snprintf(r->id, sizeof r->id, "%s", id);
        snprintf(r->owner, sizeof r->owner, "%s", owner);
        return 0;
}

static int entry_numbers(const json_t *e, struct reservation *r) {
        json_int_t vcpus, mem, huge, created, expires, vmid;
        if (entry_int(e, "vcpus", 1, PLACEMENT_MAX_VCPUS, &vcpus) < 0 ||
            entry_int(e, "memory_bytes", 1, INT64_MAX, &mem) < 0 ||
            entry_int(e, "hugepage_kib", 0, INT64_MAX, &huge) < 0 ||
            entry_int(e, "created_at", 0, INT64_MAX, &created) < 0 ||
            entry_int(e, "expires_at", 0, INT64_MAX, &expires) < 0 || entry_int(e, "vmid", 0, 999999999, &vmid) < 0)
                return -EINVAL;
        r->request = (struct placement_request){ (unsigned)vcpus, (uint64_t)mem, (uint64_t)huge };
        r->created_at = created;
        r->expires_at = expires;
        r->vmid = (int)vmid;
        return 0;
}

int ledger_parse_entry(const struct topology *t, const json_t *e, struct reservation **ret, char *why, size_t len) {
        struct reservation *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        int err = entry_strings(e, r) < 0 || entry_numbers(e, r) < 0 ? -EINVAL : 0;
        if (err < 0)
                snprintf(why, len, "a reservation has missing or invalid fields");
        json_t *p = json_object_get(e, "placement");
        if (err == 0 && p && !json_is_null(p))
                err = placement_from_json(t, p, &r->placement, why, len);
        if (err < 0) {
                reservation_free(r);
                return err;
        }
        *ret = r;
        return 0;
}

/* The journal epoch a state file names: 0 when it names none (a file written before the journal). */
static int parse_epoch(const json_t *doc, uint64_t *ret) {
        const char *text;
        int r = jsonutil_get_string(doc, "journal_epoch", &text);
        if (r == -ENOENT) {
                *ret = 0;
                return 0;
        }
        char *end;
        unsigned long long v = r == 0 && strlen(text) == 16 ? strtoull(text, &end, 16) : 0;
        if (r < 0 || strlen(text) != 16 || *end)
                return -EINVAL;
        *ret = v;
        return 0;
}

static int parse_state(const struct topology *t, const char *text, size_t len, struct ledger *l, char *why,
                       size_t whylen) {
        json_t *doc;
        if (jsonutil_parse(text, len, &doc, why, whylen) < 0)
                return -EINVAL;
        json_t *items = json_object_get(doc, "reservations");
        int err = json_integer_value(json_object_get(doc, "version")) == LEDGER_STATE_VERSION && json_is_array(items)
                          ? 0 : -EINVAL;
        if (err == 0)
                err = parse_epoch(doc, &l->journal_epoch);
        if (err < 0)
                snprintf(why, whylen, "not a version %d reservation state", LEDGER_STATE_VERSION);
        for (size_t i = 0; err == 0 && i < json_array_size(items); i++) {
                struct reservation *r;
                err = ledger_parse_entry(t, json_array_get(items, i), &r, why, whylen);
                if (err == 0 && (ledger_find(l, r->id) || (r->vmid && ledger_find_vmid(l, r->vmid)))) {
                        snprintf(why, whylen, "reservation %s appears twice", r->id);
                        reservation_free(r);
                        err = -EINVAL;
                }
                if (err == 0 && (err = ledger_append(l, r)) < 0)
                        reservation_free(r);
        }
        json_decref(doc);
        return err;
}

static int move_aside(const char *path, int64_t now, char *aside, size_t len) {
        snprintf(aside, len, "%s.corrupt-%lld", path, (long long)now);
        return rename(path, aside) < 0 ? -errno : 0;
}

/* Read and parse one generation into a new ledger: 0, -ENOENT, -EBADMSG (damaged or invalid, why says how),
 * -ENOMEM or another -errno from reading. */
static int load_file(const char *path, const struct topology *t, struct ledger **ret, char *why, size_t whylen) {
        char *text = NULL;
        size_t len = 0;
        int err = fileio_read_sealed(path, LEDGER_STATE_MAX_BYTES, &text, &len);
        if (err == -EBADMSG)
                snprintf(why, whylen, "checksum mismatch or truncated file");
        else if (err < 0)
                snprintf(why, whylen, "%s", strerror(-err));
        struct ledger *l = err == 0 ? ledger_new() : NULL;
        if (err == 0 && !l)
                err = -ENOMEM;
        if (err == 0 && (err = parse_state(t, text, len, l, why, whylen)) == -EINVAL)
                err = -EBADMSG;
        free(text);
        if (err < 0) {
                ledger_free(l);
                return err;
        }
        *ret = l;
        return 0;
}

/* A temporary file a save or the journal's making left when a crash interrupted it: "<state file>.tmp.XXXXXX"
 * and "<journal>.tmp.XXXXXX" (fileio), "<state file>.prev.tmp" (earlier versions). */
static bool leftover(const char *name) {
        static const char *const leftovers[] = { LEDGER_STATE_FILE ".tmp.", LEDGER_JOURNAL_FILE ".tmp." };
        for (size_t i = 0; i < sizeof leftovers / sizeof leftovers[0]; i++)
                if (strncmp(name, leftovers[i], strlen(leftovers[i])) == 0)
                        return true;
        return strcmp(name, LEDGER_STATE_FILE ".prev.tmp") == 0;
}

static void remove_temporaries(const char *dir) {
        DIR *d = opendir(dir);
        char path[PATH_MAX];
        for (struct dirent *e; d && (e = readdir(d));) {
                if (!leftover(e->d_name))
                        continue;
                snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
                if (unlink(path) == 0)
                        log_info("removed %s, left by an interrupted save", path);
        }
        if (d)
                closedir(d);
}

/* The current file is damaged: load the previous generation instead, and set the damaged file aside. */
static int fall_back(const char *path, const struct topology *t, int64_t now, const char *why, struct ledger **ret,
                     char *problem, size_t problemlen) {
        char prev[PATH_MAX + 16], why_prev[256] = "", aside[PATH_MAX + 48];
        snprintf(prev, sizeof prev, "%s%s", path, LEDGER_PREV_SUFFIX);
        int r = load_file(prev, t, ret, why_prev, sizeof why_prev);
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                snprintf(problem, problemlen, "%s: %s, and no intact previous generation (%s: %s)", path, why, prev,
                         r == -ENOENT ? "absent" : why_prev);
                return -EBADMSG;
        }
        r = move_aside(path, now, aside, sizeof aside);
        snprintf(problem, problemlen, "%s: %s; moved to %s; loaded the previous generation %s", path, why,
                 r == 0 ? aside : "(rename failed)", prev);
        return 1;
}

bool ledger_state_absent(const char *dir) {
        char path[PATH_MAX], prev[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/%s", dir, LEDGER_STATE_FILE);
        snprintf(prev, sizeof prev, "%s%s", path, LEDGER_PREV_SUFFIX);
        return access(path, F_OK) < 0 && errno == ENOENT && access(prev, F_OK) < 0 && errno == ENOENT;
}

int ledger_load(const char *dir, const struct topology *t, int64_t now, struct ledger **ret, char *problem,
                size_t problemlen) {
        char path[PATH_MAX], why[256] = "";
        snprintf(path, sizeof path, "%s/%s", dir, LEDGER_STATE_FILE);
        remove_temporaries(dir);
        int err = load_file(path, t, ret, why, sizeof why);
        if (err == 0 || err == -ENOMEM)
                return err;
        if (err == -ENOENT) {
                char prev[PATH_MAX + 16];
                snprintf(prev, sizeof prev, "%s%s", path, LEDGER_PREV_SUFFIX);
                if (access(prev, F_OK) < 0 && errno == ENOENT)
                        return (*ret = ledger_new()) ? 0 : -ENOMEM; /* no state at all: the first start */
                snprintf(why, sizeof why, "missing");
                return fall_back(path, t, now, why, ret, problem, problemlen);
        }
        if (err == -EBADMSG)
                return fall_back(path, t, now, why, ret, problem, problemlen);
        snprintf(problem, problemlen, "cannot read %s: %s", path, why);
        return err;
}
