/* ledger: the host's reservations (placements promised to the coordinator), their lifecycle and state file. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "capacity.h"
#include "inventory.h"
#include "placement.h"
#include "topology.h"

#define LEDGER_ID_LEN 19          /* "r-" + 16 hex digits + NUL */
#define LEDGER_OWNER_MAX 253
#define LEDGER_DEFAULT_TTL_S 600
#define LEDGER_MAX_TTL_S 86400
#define LEDGER_STATE_FILE "reservations.json"

struct reservation {
        char id[LEDGER_ID_LEN + 1];
        char owner[LEDGER_OWNER_MAX + 1];
        struct placement_request request;
        struct placement *placement; /* NULL under the simple policy (granted by count) */
        int64_t created_at;          /* unix seconds */
        int64_t expires_at;          /* unix seconds; 0 once bound */
        int vmid;                    /* 0 while unbound */
};

struct ledger {
        size_t n;
        struct reservation **items; /* in creation order */
        uint64_t journal_epoch;      /* loaded from a state file: the journal records of this epoch apply on top */
};

/* What a reservation request asks for, parsed strictly from JSON (unknown fields, wrong types, zero or
 * negative sizes: -EINVAL with "field: reason" in reason). */
#define LEDGER_PCI_MAX 16     /* a VM's hostpci0..hostpci15 */
#define LEDGER_PCI_ALT_MAX 16 /* paths one device may be given from (a Proxmox mapping's on this host) */
#define LEDGER_PCI_ADDR_MAX 31 /* "0000:41:00.0" and longer domains */
/* One passed-through device: its sysfs address, or the addresses Proxmox picks it from at the VM's start (the first
 * free path of the VM's resource mapping). */
struct ledger_pci_device {
        size_t n;
        char addr[LEDGER_PCI_ALT_MAX][LEDGER_PCI_ADDR_MAX + 1];
};
struct reservation_request {
        struct placement_request shape; /* shape.near is set by the caller from pci (their NUMA node) */
        unsigned ttl_seconds;
        char owner[LEDGER_OWNER_MAX + 1];
        size_t n_pci;
        struct ledger_pci_device pci[LEDGER_PCI_MAX]; /* "pci_devices", optional */
};
int ledger_parse_request(const json_t *body, struct reservation_request *ret_req, char *reason, size_t reasonlen);

struct ledger *ledger_new(void);
void ledger_free(struct ledger *l);
struct reservation *ledger_find(const struct ledger *l, const char *id);
struct reservation *ledger_find_vmid(const struct ledger *l, int vmid);
/* The held (not yet bound) reservation of owner, or NULL: a client that retries a request it never saw answered
 * gets the reservation it already has instead of a second one. */
struct reservation *ledger_find_held(const struct ledger *l, const char *owner);
/* Does a held reservation grant exactly this request's shape? */
bool ledger_same_shape(const struct reservation *r, const struct reservation_request *req);

/* Grant a reservation on `free` (the effective capacity, see ledger_effective_capacity). With pin (static
 * policy) it is a placement from placement_place; without (simple policy) it is granted by count of
 * free vCPUs and memory. 0 and the new reservation (owned by the ledger) in *ret; -ENOSPC with a reason;
 * -ENOMEM. */
int ledger_reserve(struct ledger *l, const struct topology *t, const struct capacity *free,
                   const struct reservation_request *req, bool pin, int64_t now, struct reservation **ret,
                   char *reason, size_t reasonlen);

/* Tie a reservation to a VM and drop its TTL. -ENOENT unknown id, -EEXIST when bound to another VM or
 * another reservation holds the VM. Binding again to the same VM is a no-op (0). */
int ledger_bind(struct ledger *l, const char *id, int vmid);
/* Is id in the agent's own format ("r-" and 16 lower-case hex digits)? */
bool ledger_id_valid(const char *id);
/* Add a reservation already bound to vmid (a rebuilt one, see ledger_rebuild.h), with id when it is valid and no
 * reservation of l has it (id may be NULL), else a new id; it takes p (may be NULL) only on success. -EEXIST when
 * another reservation holds the VM, -ENOMEM, -EIO. */
int ledger_add_bound(struct ledger *l, const char *id, const char *owner, int vmid, const struct placement_request *req,
                     struct placement *p, int64_t now);
/* Remove a reservation. -ENOENT unknown id. */
int ledger_release(struct ledger *l, const char *id);

/* What one change replaced, so that a change whose save failed is taken back whole (ledger_undo). */
enum ledger_undo_kind {
        LEDGER_UNDO_RESERVE, /* a reservation was granted: remove it */
        LEDGER_UNDO_BIND,    /* a reservation was bound: give it back its vmid and expiry */
};
struct ledger_undo {
        enum ledger_undo_kind kind;
        char id[LEDGER_ID_LEN + 1];
        int vmid;           /* LEDGER_UNDO_BIND: before the bind */
        int64_t expires_at; /* LEDGER_UNDO_BIND: before the bind */
};
/* The undo of r just granted (ledger_reserve), and of a bind of r about to be made (before ledger_bind). */
struct ledger_undo ledger_undo_reserve(const struct reservation *r);
struct ledger_undo ledger_undo_bind(const struct reservation *r);
/* Take the change back. A reservation that is gone meanwhile is left alone. */
void ledger_undo(struct ledger *l, const struct ledger_undo *u);

/* Release unbound reservations whose TTL passed, and bound ones whose VM config is gone from inv.
 * Returns how many were released. */
unsigned ledger_expire(struct ledger *l, const struct inventory *inv, int64_t now);

/* The capacity left for new placements: inventory and settings as capacity_compute sees them, with VMs
 * bound to a placed reservation counted as pinned to its CPUs (the agent pins them, Proxmox does not know),
 * and unbound reservations charged on top. */
int ledger_effective_capacity(const struct ledger *l, const struct topology *t, const struct node_settings *s,
                              struct inventory *inv, const struct capacity_options *opts, struct capacity **ret);

json_t *reservation_to_json(const struct reservation *r);
json_t *ledger_to_json(const struct ledger *l);

/* Persistence under dir: LEDGER_STATE_FILE, a sealed (checksummed) JSON file written atomically, the generation
 * before it (LEDGER_STATE_FILE LEDGER_PREV_SUFFIX), and LEDGER_JOURNAL_FILE, the changes since the state file was
 * written (ledger_store_*, below). The state file names its journal epoch; the journal's records of that epoch,
 * numbered from 1, apply on top of it.
 * ledger_save: keep the file being replaced as the previous generation when it reads back intact (a damaged one
 * never replaces a good previous generation), then write the new one, naming journal_epoch. -ENOMEM when an entry
 * cannot be built (nothing is written: a file never leaves a reservation out), or -errno.
 * ledger_load (the state file alone; its epoch in the ledger's journal_epoch): first removes the temporary files
 * of saves a crash interrupted. Then:
 *   0: loaded (no file at all: an empty ledger);
 *   1: the current file was damaged or invalid: it is renamed "<file>.corrupt-<unix time>" and the previous
 *      generation is loaded; problem says so;
 *   -EBADMSG: no intact generation (the current one damaged and the previous one damaged or absent): nothing is
 *      loaded and nothing is moved; problem says why;
 *   -errno (EACCES, EIO, EMFILE, ...): a file could not be read; nothing is loaded; problem names it;
 *   -ENOMEM. */
#define LEDGER_PREV_SUFFIX ".prev"
/* The third file of a save's rotation (fileio_write_sealed_rotate): an older generation, or a torn write. Never
 * loaded. */
#define LEDGER_SPARE_SUFFIX ".spare"
int ledger_load(const char *dir, const struct topology *t, int64_t now, struct ledger **ret, char *problem,
                size_t problemlen);
int ledger_save(const struct ledger *l, const char *dir, uint64_t journal_epoch);

/* The journal: a file of LEDGER_JOURNAL_BYTES, zeros written once, into which each commit writes its records in
 * place ("J <epoch> <seq> <sha256> <json>\n": the put of a reservation new or changed, or the delete of one gone)
 * and fdatasyncs them: no rename, no metadata, one flush per change. When the records do not fit, the ledger is
 * written whole as a new state file of a new (random) epoch and the journal starts over at its beginning: the
 * older records left behind it carry another epoch and are never applied. */
#define LEDGER_JOURNAL_FILE "reservations.journal"
#define LEDGER_JOURNAL_BYTES (1u << 20)
struct ledger_store;
/* ledger_load, then the journal replayed: its records of the state file's epoch in order, up to the first that is
 * absent, torn (checksum) or of another epoch. Then, when records were replayed or the state file fell back, the
 * ledger is compacted (a failure to is logged: the journal stays valid for the state file). Returns as ledger_load,
 * and 1 too when the journal was damaged (a record of the epoch found past a torn one: the changes after the torn
 * one are lost, problem says so), -EBADMSG when a record cannot be applied (problem names it; nothing loaded). */
int ledger_store_load(const char *dir, const struct topology *t, int64_t now, struct ledger **ret,
                      struct ledger_store **ret_store, char *problem, size_t problemlen);
/* Make l durable: the records of what changed since the last commit appended and fdatasynced, or, when they do
 * not fit (or the journal cannot be written), l written whole as a new state file. 0, or -errno: nothing of this
 * commit is durable, and the next commit compares against the last durable state again. */
int ledger_store_commit(struct ledger_store *s, const struct ledger *l);
void ledger_store_free(struct ledger_store *s);
/* Neither generation exists (the first start, or an operator removed damaged files). */
bool ledger_state_absent(const char *dir);
