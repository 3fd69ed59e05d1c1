/* ledger_store: the reservations' journal: each change appended as a checksummed record and fdatasynced, replayed
 * over the state file at load, and compacted into a new state file when the journal is full. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "ledger.h"
#include "ledger_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "fileio.h"
#include "jsonutil.h"
#include "log.h"

/* One reservation as last made durable: what the next commit compares against. */
struct entry_text {
        char id[LEDGER_ID_LEN + 1];
        char *text;
};

struct entry_texts {
        size_t n;
        struct entry_text *items;
};

struct ledger_store {
        char dir[PATH_MAX];
        uint64_t epoch;      /* the state file's journal epoch: the records that apply carry it */
        uint64_t seq;        /* the last record's number in this epoch */
        size_t offset;       /* where the next record goes; LEDGER_JOURNAL_BYTES: the next commit compacts */
        struct entry_texts durable;
};

static void entry_texts_clear(struct entry_texts *t) {
        for (size_t i = 0; i < t->n; i++)
                free(t->items[i].text);
        free(t->items);
        *t = (struct entry_texts){ 0 };
}

static char *entry_text(const struct reservation *r) {
        json_t *e = ledger_state_entry(r);
        char *text = e ? json_dumps(e, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(e);
        return text;
}

/* Every reservation of l as its entry text. 0 or -ENOMEM. */
static int entry_texts_of(const struct ledger *l, struct entry_texts *ret) {
        struct entry_texts t = { .items = calloc(l->n + 1, sizeof *t.items) };
        if (!t.items)
                return -ENOMEM;
        for (; t.n < l->n; t.n++) {
                snprintf(t.items[t.n].id, sizeof t.items[t.n].id, "%s", l->items[t.n]->id);
                if (!(t.items[t.n].text = entry_text(l->items[t.n]))) {
                        entry_texts_clear(&t);
                        return -ENOMEM;
                }
        }
        *ret = t;
        return 0;
}

static const struct entry_text *entry_texts_find(const struct entry_texts *t, const char *id) {
        for (size_t i = 0; i < t->n; i++)
                if (strcmp(t->items[i].id, id) == 0)
                        return &t->items[i];
        return NULL;
}

/* ---- records: "J <epoch, 16 hex> <seq> <sha256 of '<epoch> <seq> <json>'> <json>\n" ---- */

static int record_hash(uint64_t epoch, uint64_t seq, const char *json, size_t len, char hex[SHA256_HEX_LEN + 1]) {
        _cleanup_free_ char *buf = NULL;
        int n = asprintf(&buf, "%016" PRIx64 " %" PRIu64 " %.*s", epoch, seq, (int)len, json);
        return n < 0 ? -ENOMEM : fileio_sha256_hex(buf, (size_t)n, hex);
}

/* Append one record carrying body (a JSON object) to out. 0 or -ENOMEM. */
static int record_append(FILE *out, uint64_t epoch, uint64_t seq, json_t *body) {
        _cleanup_free_ char *json = body ? json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        char hex[SHA256_HEX_LEN + 1];
        json_decref(body);
        if (!json || record_hash(epoch, seq, json, strlen(json), hex) < 0)
                return -ENOMEM;
        return fprintf(out, "J %016" PRIx64 " %" PRIu64 " %s %s\n", epoch, seq, hex, json) < 0 ? -ENOMEM : 0;
}

struct record {
        uint64_t epoch, seq;
        json_t *body;
        size_t len; /* bytes, with the newline */
};

/* Decode the record at buf (len bytes to the end of the journal). 0, or -EBADMSG: no whole record with a
 * matching checksum starts there. */
static int record_decode(const char *buf, size_t len, struct record *ret) {
        const char *nl = memchr(buf, '\n', len);
        char hex[SHA256_HEX_LEN + 1], want[SHA256_HEX_LEN + 1];
        unsigned long long epoch, seq;
        int json_at = 0;
        if (!nl || len < 2 || buf[0] != 'J' || buf[1] != ' ' ||
            sscanf(buf, "J %16llx %llu %64[0-9a-f] %n", &epoch, &seq, hex, &json_at) != 3 || json_at <= 0 ||
            buf + json_at >= nl)
                return -EBADMSG;
        size_t json_len = (size_t)(nl - buf - json_at);
        if (record_hash(epoch, seq, buf + json_at, json_len, want) < 0 || strcmp(hex, want) != 0)
                return -EBADMSG;
        json_t *body = json_loadb(buf + json_at, json_len, 0, NULL);
        if (!json_is_object(body)) {
                json_decref(body);
                return -EBADMSG;
        }
        *ret = (struct record){ epoch, seq, body, (size_t)(nl - buf) + 1 };
        return 0;
}

/* The records of one commit: a put for each reservation new or changed since durable, a delete for each gone. */
static int commit_records(const struct entry_texts *durable, const struct entry_texts *now, uint64_t epoch,
                          uint64_t *seq, char **ret_buf, size_t *ret_len) {
        char *buf = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&buf, &len);
        int r = out ? 0 : -ENOMEM;
        for (size_t i = 0; r == 0 && i < now->n; i++) {
                const struct entry_text *was = entry_texts_find(durable, now->items[i].id);
                if (!was || strcmp(was->text, now->items[i].text) != 0)
                        r = record_append(out, epoch, ++*seq, json_pack("{s:o}", "put",
                                                                       json_loads(now->items[i].text, 0, NULL)));
        }
        for (size_t i = 0; r == 0 && i < durable->n; i++)
                if (!entry_texts_find(now, durable->items[i].id))
                        r = record_append(out, epoch, ++*seq, json_pack("{s:s}", "delete", durable->items[i].id));
        if (out && fclose(out) != 0 && r == 0)
                r = -ENOMEM;
        if (r < 0) {
                free(buf);
                return r;
        }
        *ret_buf = buf;
        *ret_len = len;
        return 0;
}

/* ---- replay ---- */

static int apply_put(struct ledger *l, const struct topology *t, json_t *e, char *why, size_t len) {
        struct reservation *r;
        int err = ledger_parse_entry(t, e, &r, why, len);
        if (err < 0)
                return err;
        for (size_t i = 0; i < l->n; i++)
                if (strcmp(l->items[i]->id, r->id) != 0 && r->vmid && l->items[i]->vmid == r->vmid) {
                        snprintf(why, len, "VM %d bound to two reservations", r->vmid);
                        reservation_free(r);
                        return -EINVAL;
                }
        for (size_t i = 0; i < l->n; i++)
                if (strcmp(l->items[i]->id, r->id) == 0) {
                        reservation_free(l->items[i]);
                        l->items[i] = r;
                        return 0;
                }
        if ((err = ledger_append(l, r)) < 0)
                reservation_free(r);
        return err;
}

static int apply_record(struct ledger *l, const struct topology *t, json_t *body, char *why, size_t len) {
        json_t *put = json_object_get(body, "put");
        const char *id;
        if (put)
                return apply_put(l, t, put, why, len);
        if (jsonutil_get_string(body, "delete", &id) == 0 && ledger_release(l, id) == 0)
                return 0;
        snprintf(why, len, "neither a put nor the delete of a reservation it has");
        return -EINVAL;
}

/* Whether a record of this epoch numbered after seq lies past at: records were acknowledged beyond a damaged one. */
static bool later_records(const char *buf, size_t len, size_t at, uint64_t epoch, uint64_t seq) {
        if (at >= len)
                return false;
        for (const char *p = buf + at; (p = memchr(p, '\n', len - (size_t)(p - buf))) && (size_t)(++p - buf) < len;) {
                struct record rec;
                if (record_decode(p, len - (size_t)(p - buf), &rec) < 0)
                        continue;
                json_decref(rec.body);
                if (rec.epoch == epoch && rec.seq > seq)
                        return true;
        }
        return false;
}

/* Apply the journal's records of s->epoch, numbered from 1, to l; s->seq and s->offset end after the last.
 * 0 (nothing past them), 1 (damage: a later record of the epoch lies past a damaged one; problem says where),
 * -EBADMSG (a record cannot be applied; problem says why) or -ENOMEM. */
static int replay(struct ledger_store *s, const char *buf, size_t len, struct ledger *l, const struct topology *t,
                  char *problem, size_t problemlen) {
        struct record rec;
        while (s->offset < len && record_decode(buf + s->offset, len - s->offset, &rec) == 0) {
                char why[256] = "";
                int err = rec.epoch == s->epoch && rec.seq == s->seq + 1 ? apply_record(l, t, rec.body, why, sizeof why)
                                                                        : -ESRCH;
                json_decref(rec.body);
                if (err == -ESRCH)
                        break;
                if (err < 0) {
                        snprintf(problem, problemlen, "%s: record %" PRIu64 " cannot be applied: %s",
                                 LEDGER_JOURNAL_FILE, rec.seq, why);
                        return err == -ENOMEM ? err : -EBADMSG;
                }
                s->seq++;
                s->offset += rec.len;
        }
        if (!later_records(buf, len, s->offset, s->epoch, s->seq))
                return 0;
        snprintf(problem, problemlen, "%s: damaged at byte %zu: the changes after record %" PRIu64 " are lost",
                 LEDGER_JOURNAL_FILE, s->offset, s->seq);
        return 1;
}

static void journal_path(const struct ledger_store *s, char *path, size_t len) {
        snprintf(path, len, "%s/%s", s->dir, LEDGER_JOURNAL_FILE);
}

/* Open the journal for writing: a plain file of one link and the journal's size, else -EBADF (made anew at the
 * next compaction). Opened at each commit, so that a journal replaced or a state directory moved is seen. */
static int journal_open(const struct ledger_store *s) {
        char path[PATH_MAX + 32];
        struct stat st;
        journal_path(s, path, sizeof path);
        int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_size == LEDGER_JOURNAL_BYTES)
                return fd;
        close(fd);
        return -EBADF;
}

/* Make the journal anew when it is not usable: zeros written and synced once, so that records later overwrite
 * allocated blocks and fdatasync has no metadata to commit. */
static int journal_ensure(const struct ledger_store *s) {
        int fd = journal_open(s);
        if (fd >= 0) {
                close(fd);
                return 0;
        }
        char path[PATH_MAX + 32];
        journal_path(s, path, sizeof path);
        _cleanup_free_ char *zeros = calloc(1, LEDGER_JOURNAL_BYTES);
        return zeros ? fileio_write_atomic(path, zeros, LEDGER_JOURNAL_BYTES, 0600) : -ENOMEM;
}

static int new_epoch(uint64_t old, uint64_t *ret) {
        uint64_t v = 0;
        while (v == 0 || v == old)
                if (getrandom(&v, sizeof v, 0) != sizeof v)
                        return -EIO;
        *ret = v;
        return 0;
}

/* Write l whole as a new state file of a new epoch (the journal's records then apply no more), and start the
 * journal over. now becomes what is durable. */
static int compact(struct ledger_store *s, const struct ledger *l, struct entry_texts *now) {
        uint64_t epoch;
        int r = new_epoch(s->epoch, &epoch);
        if (r == 0)
                r = ledger_save(l, s->dir, epoch);
        if (r < 0)
                return r;
        s->epoch = epoch;
        s->seq = 0;
        s->offset = 0;
        entry_texts_clear(&s->durable);
        s->durable = *now;
        *now = (struct entry_texts){ 0 };
        if ((r = journal_ensure(s)) < 0) {
                log_warning_errno(r, "cannot make %s/%s; every change rewrites the state file until it can be",
                                  s->dir, LEDGER_JOURNAL_FILE);
                s->offset = LEDGER_JOURNAL_BYTES;
        }
        return 0;
}

static int pwrite_all(int fd, const char *p, size_t len, size_t off) {
        while (len > 0) {
                ssize_t n = pwrite(fd, p, len, (off_t)off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                p += n;
                off += (size_t)n;
                len -= (size_t)n;
        }
        return 0;
}

/* Append the records in place and fdatasync them. After a failure what the journal holds past the last
 * durable record is unknown (written, or not): nothing more is appended in this epoch, the next commit compacts. */
static int append(struct ledger_store *s, const char *buf, size_t len) {
        _cleanup_close_ int fd = journal_open(s);
        int r = fd < 0 ? fd : pwrite_all(fd, buf, len, s->offset);
        if (r == 0 && fdatasync(fd) < 0)
                r = -errno;
        if (r < 0) {
                log_warning_errno(r, "cannot append to %s/%s; rewriting %s instead", s->dir, LEDGER_JOURNAL_FILE,
                                  LEDGER_STATE_FILE);
                s->offset = LEDGER_JOURNAL_BYTES;
                return r;
        }
        s->offset += len;
        return 0;
}

int ledger_store_commit(struct ledger_store *s, const struct ledger *l) {
        struct entry_texts now;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        uint64_t seq = s->seq;
        int r = entry_texts_of(l, &now);
        if (r < 0)
                return r;
        if ((r = commit_records(&s->durable, &now, s->epoch, &seq, &buf, &len)) == 0 && len > 0) {
                bool fits = s->epoch != 0 && s->offset + len <= LEDGER_JOURNAL_BYTES;
                r = fits ? append(s, buf, len) : -ENOSPC;
                if (r < 0)
                        r = compact(s, l, &now);
                else
                        s->seq = seq;
        }
        if (r == 0 && now.items) {
                entry_texts_clear(&s->durable);
                s->durable = now;
        } else
                entry_texts_clear(&now);
        return r;
}

static int journal_read(struct ledger_store *s, char **ret, size_t *ret_len) {
        char path[PATH_MAX + 32];
        journal_path(s, path, sizeof path);
        int r = fileio_read(path, LEDGER_JOURNAL_BYTES, ret, ret_len);
        if (r == -ENOENT) {
                *ret = NULL;
                *ret_len = 0;
                return 0;
        }
        return r;
}

static struct ledger_store *store_new(const char *dir, uint64_t epoch) {
        struct ledger_store *s = calloc(1, sizeof *s);
        if (!s)
                return NULL;
        snprintf(s->dir, sizeof s->dir, "%s", dir);
        s->epoch = epoch;
        return s;
}

/* Replay the journal over l, loaded from the state file; then open it for the next records, or compact when
 * something is to be rewritten (records replayed, damage, the state file fallen back). loaded is ledger_load's
 * result (0 or 1). */
static int store_replay(struct ledger_store *s, struct ledger *l, const struct topology *t, int loaded,
                        char *problem, size_t problemlen) {
        _cleanup_free_ char *buf = NULL;
        size_t len;
        int r = journal_read(s, &buf, &len);
        if (r < 0) {
                snprintf(problem, problemlen, "cannot read %s: %s", LEDGER_JOURNAL_FILE, strerror(-r));
                return r;
        }
        int damaged = s->epoch ? replay(s, buf, len, l, t, problem, problemlen) : 0;
        if (damaged < 0)
                return damaged;
        int fd = journal_open(s);
        if (fd >= 0)
                close(fd);
        else
                s->offset = LEDGER_JOURNAL_BYTES; /* absent or unusable: the first commit compacts */
        if ((r = entry_texts_of(l, &s->durable)) < 0)
                return r;
        if (s->seq == 0 && !damaged && loaded == 0)
                return 0;
        struct entry_texts now;
        if ((r = entry_texts_of(l, &now)) < 0)
                return r;
        if ((r = compact(s, l, &now)) < 0)
                log_warning_errno(r, "cannot rewrite %s/%s; the journal stays as it is", s->dir, LEDGER_STATE_FILE);
        entry_texts_clear(&now);
        return damaged || loaded;
}

int ledger_store_load(const char *dir, const struct topology *t, int64_t now, struct ledger **ret,
                      struct ledger_store **ret_store, char *problem, size_t problemlen) {
        struct ledger *l = NULL;
        int loaded = ledger_load(dir, t, now, &l, problem, problemlen);
        if (loaded < 0)
                return loaded;
        struct ledger_store *s = store_new(dir, l->journal_epoch);
        char why[512] = "";
        int r = s ? store_replay(s, l, t, loaded, why, sizeof why) : -ENOMEM;
        if (why[0]) {
                size_t at = strlen(problem);
                snprintf(problem + at, problemlen - at, "%s%s", at ? "; " : "", why);
        }
        if (r < 0) {
                ledger_store_free(s);
                ledger_free(l);
                return r;
        }
        *ret = l;
        *ret_store = s;
        return r;
}

void ledger_store_free(struct ledger_store *s) {
        if (!s)
                return;
        entry_texts_clear(&s->durable);
        free(s);
}
