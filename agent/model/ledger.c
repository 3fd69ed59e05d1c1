/* ledger: the host's reservations (placements promised to the coordinator), their lifecycle and state file. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "ledger.h"
#include "ledger_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "jsonutil.h"
#include "log.h"

struct ledger *ledger_new(void) {
        return calloc(1, sizeof(struct ledger));
}

void reservation_free(struct reservation *r) {
        if (!r)
                return;
        placement_free(r->placement);
        free(r);
}

void ledger_free(struct ledger *l) {
        if (!l)
                return;
        for (size_t i = 0; i < l->n; i++)
                reservation_free(l->items[i]);
        free(l->items);
        free(l);
}

struct reservation *ledger_find(const struct ledger *l, const char *id) {
        for (size_t i = 0; i < l->n; i++)
                if (strcmp(l->items[i]->id, id) == 0)
                        return l->items[i];
        return NULL;
}

struct reservation *ledger_find_vmid(const struct ledger *l, int vmid) {
        for (size_t i = 0; i < l->n; i++)
                if (vmid > 0 && l->items[i]->vmid == vmid)
                        return l->items[i];
        return NULL;
}

struct reservation *ledger_find_held(const struct ledger *l, const char *owner) {
        for (size_t i = 0; i < l->n; i++)
                if (l->items[i]->vmid == 0 && strcmp(l->items[i]->owner, owner) == 0)
                        return l->items[i];
        return NULL;
}

bool ledger_same_shape(const struct reservation *r, const struct reservation_request *req) {
        return r->request.vcpus == req->shape.vcpus && r->request.memory_bytes == req->shape.memory_bytes &&
               r->request.hugepage_kib == req->shape.hugepage_kib;
}

static int reason_fail(char *reason, size_t len, const char *field, const char *what) {
        snprintf(reason, len, "%s: %s", field, what);
        return -EINVAL;
}

static int parse_owner(const json_t *body, struct reservation_request *req, char *reason, size_t len) {
        const char *owner;
        int r = jsonutil_get_string(body, "owner", &owner);
        if (r == -ENOENT)
                return reason_fail(reason, len, "owner", "required (the NodeClaim or client that holds it)");
        if (r < 0 || !*owner || strlen(owner) > LEDGER_OWNER_MAX)
                return reason_fail(reason, len, "owner", "expected a string of 1 to 253 characters");
        snprintf(req->owner, sizeof req->owner, "%s", owner);
        return 0;
}

static int parse_ttl(const json_t *body, struct reservation_request *req, char *reason, size_t len) {
        uint64_t ttl = LEDGER_DEFAULT_TTL_S;
        int r = jsonutil_get_u64(body, "ttl_seconds", &ttl);
        if ((r < 0 && r != -ENOENT) || ttl == 0 || ttl > LEDGER_MAX_TTL_S)
                return reason_fail(reason, len, "ttl_seconds", "expected an integer from 1 to 86400");
        req->ttl_seconds = (unsigned)ttl;
        return 0;
}

/* A PCI address as sysfs names it: domain (4 or more hex digits), bus, device, function, in lower case. */
static bool pci_address_ok(const char *s) {
        size_t dom = strspn(s, "0123456789abcdef");
        if (dom < 4 || dom > LEDGER_PCI_ADDR_MAX - 8 || s[dom] != ':')
                return false;
        s += dom + 1;
        return strlen(s) == 7 && strspn(s, "0123456789abcdef") == 2 && s[2] == ':' &&
               strspn(s + 3, "0123456789abcdef") == 2 && s[5] == '.' && s[6] >= '0' && s[6] <= '7';
}

/* One entry of pci_devices: an address, or an array of 1 to 16 alternatives. */
static int parse_pci_one(const json_t *v, size_t i, struct ledger_pci_device *d, char *reason, size_t len) {
        char field[48];
        bool alt = json_is_array(v);
        size_t n = alt ? json_array_size(v) : 1;
        snprintf(field, sizeof field, "pci_devices[%zu]", i);
        if (alt && (n == 0 || n > LEDGER_PCI_ALT_MAX))
                return reason_fail(reason, len, field, "expected a PCI address or an array of 1 to 16 of them");
        for (size_t k = 0; k < n; k++) {
                const char *s = json_string_value(alt ? json_array_get(v, k) : v);
                if (alt)
                        snprintf(field, sizeof field, "pci_devices[%zu][%zu]", i, k);
                if (!s || !pci_address_ok(s))
                        return reason_fail(reason, len, field, "expected a PCI address like 0000:41:00.0");
                snprintf(d->addr[k], sizeof d->addr[k], "%s", s);
        }
        d->n = n;
        return 0;
}

static int parse_pci(const json_t *body, struct reservation_request *req, char *reason, size_t len) {
        const json_t *a = json_object_get(body, "pci_devices");
        if (!a)
                return 0;
        if (!json_is_array(a) || json_array_size(a) > LEDGER_PCI_MAX)
                return reason_fail(reason, len, "pci_devices", "expected an array of at most 16 devices");
        for (size_t i = 0; i < json_array_size(a); i++) {
                int r = parse_pci_one(json_array_get(a, i), i, &req->pci[i], reason, len);
                if (r < 0)
                        return r;
        }
        req->n_pci = json_array_size(a);
        return 0;
}

int ledger_parse_request(const json_t *body, struct reservation_request *ret_req, char *reason, size_t reasonlen) {
        static const char *const allowed[] = { "vcpus", "memory_bytes", "hugepage_kib", "ttl_seconds", "owner",
                                               "pci_devices", NULL };
        const char *bad;
        if (!json_is_object(body))
                return reason_fail(reason, reasonlen, "body", "expected a JSON object");
        if (jsonutil_check_keys(body, allowed, &bad) < 0)
                return reason_fail(reason, reasonlen, bad, "unknown field");
        struct reservation_request req = { 0 };
        int r = placement_request_from_json(body, &req.shape, reason, reasonlen);
        if (r == 0)
                r = placement_request_check(&req.shape, reason, reasonlen);
        if (r == 0)
                r = parse_ttl(body, &req, reason, reasonlen);
        if (r == 0)
                r = parse_owner(body, &req, reason, reasonlen);
        if (r == 0)
                r = parse_pci(body, &req, reason, reasonlen);
        if (r == 0)
                *ret_req = req;
        return r;
}

static int new_id(char id[LEDGER_ID_LEN + 1]) {
        uint64_t v;
        if (getrandom(&v, sizeof v, 0) != sizeof v)
                return -EIO;
        snprintf(id, LEDGER_ID_LEN + 1, "r-%016llx", (unsigned long long)v);
        return 0;
}

int ledger_append(struct ledger *l, struct reservation *r) {
        struct reservation **items = realloc(l->items, (l->n + 1) * sizeof *items);
        if (!items)
                return -ENOMEM;
        items[l->n++] = r;
        l->items = items;
        return 0;
}

bool ledger_id_valid(const char *id) {
        if (!id || strlen(id) != LEDGER_ID_LEN - 1 || strncmp(id, "r-", 2) != 0)
                return false;
        for (id += 2; *id; id++)
                if (!((*id >= '0' && *id <= '9') || (*id >= 'a' && *id <= 'f')))
                        return false;
        return true;
}

/* The rebuilt reservation keeps its id when it is well-formed and free, else gets a new one. */
static int rebuilt_id(const struct ledger *l, const char *id, char out[LEDGER_ID_LEN + 1]) {
        if (!ledger_id_valid(id) || ledger_find(l, id))
                return new_id(out);
        snprintf(out, LEDGER_ID_LEN + 1, "%s", id);
        return 0;
}

int ledger_add_bound(struct ledger *l, const char *id, const char *owner, int vmid, const struct placement_request *req,
                     struct placement *p, int64_t now) {
        struct reservation *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        int err = rebuilt_id(l, id, r->id);
        if (err == 0 && ledger_find_vmid(l, vmid))
                err = -EEXIST;
        if (err == 0) {
                snprintf(r->owner, sizeof r->owner, "%s", owner);
                r->request = *req;
                r->created_at = now;
                r->vmid = vmid;
                err = ledger_append(l, r);
        }
        if (err < 0) {
                free(r);
                return err;
        }
        r->placement = p;
        return 0;
}

/* Simple policy: grant by count, as the seed's simple mode does (no CPUs are chosen). */
static int check_count_fit(const struct capacity *free, const struct placement_request *shape, char *reason,
                           size_t len) {
        if (free->cpus_free < shape->vcpus) {
                snprintf(reason, len, "only %u CPUs free, %u requested", free->cpus_free, shape->vcpus);
                return -ENOSPC;
        }
        if (free->memory_free_bytes < shape->memory_bytes) {
                snprintf(reason, len, "only %llu MiB memory free, %llu MiB requested",
                         (unsigned long long)(free->memory_free_bytes >> 20),
                         (unsigned long long)(shape->memory_bytes >> 20));
                return -ENOSPC;
        }
        return 0;
}

int ledger_reserve(struct ledger *l, const struct topology *t, const struct capacity *free,
                   const struct reservation_request *req, bool pin, int64_t now, struct reservation **ret,
                   char *reason, size_t reasonlen) {
        struct reservation *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        int err = pin ? placement_place(t, free, &req->shape, &r->placement, reason, reasonlen)
                      : check_count_fit(free, &req->shape, reason, reasonlen);
        if (err == 0)
                err = new_id(r->id);
        if (err == 0) {
                snprintf(r->owner, sizeof r->owner, "%s", req->owner);
                r->request = req->shape;
                r->created_at = now;
                r->expires_at = now + req->ttl_seconds;
                err = ledger_append(l, r);
        }
        if (err < 0) {
                reservation_free(r);
                return err;
        }
        *ret = r;
        return 0;
}

int ledger_bind(struct ledger *l, const char *id, int vmid) {
        struct reservation *r = ledger_find(l, id);
        if (!r)
                return -ENOENT;
        if (r->vmid == vmid)
                return 0;
        struct reservation *holder = ledger_find_vmid(l, vmid);
        if (r->vmid != 0 || holder)
                return -EEXIST;
        r->vmid = vmid;
        r->expires_at = 0;
        return 0;
}

/* Free the reservation at i and close the gap. */
static void ledger_remove_at(struct ledger *l, size_t i) {
        reservation_free(l->items[i]);
        memmove(&l->items[i], &l->items[i + 1], (l->n - i - 1) * sizeof *l->items);
        l->n--;
}

int ledger_release(struct ledger *l, const char *id) {
        for (size_t i = 0; i < l->n; i++)
                if (strcmp(l->items[i]->id, id) == 0) {
                        ledger_remove_at(l, i);
                        return 0;
                }
        return -ENOENT;
}

struct ledger_undo ledger_undo_reserve(const struct reservation *r) {
        struct ledger_undo u = { .kind = LEDGER_UNDO_RESERVE };
        snprintf(u.id, sizeof u.id, "%s", r->id);
        return u;
}

struct ledger_undo ledger_undo_bind(const struct reservation *r) {
        struct ledger_undo u = { .kind = LEDGER_UNDO_BIND, .vmid = r->vmid, .expires_at = r->expires_at };
        snprintf(u.id, sizeof u.id, "%s", r->id);
        return u;
}

void ledger_undo(struct ledger *l, const struct ledger_undo *u) {
        if (u->kind == LEDGER_UNDO_RESERVE) {
                ledger_release(l, u->id);
                return;
        }
        struct reservation *r = ledger_find(l, u->id);
        if (!r)
                return;
        r->vmid = u->vmid;
        r->expires_at = u->expires_at;
}

static bool reservation_expired(const struct reservation *r, const struct inventory *inv, int64_t now) {
        if (r->vmid == 0)
                return r->expires_at <= now;
        return inventory_find(inv, r->vmid) == NULL;
}

unsigned ledger_expire(struct ledger *l, const struct inventory *inv, int64_t now) {
        unsigned released = 0;
        for (size_t i = l->n; i > 0; i--)
                if (reservation_expired(l->items[i - 1], inv, now)) {
                        ledger_remove_at(l, i - 1);
                        released++;
                }
        return released;
}

/* Charge a count-only reservation like an unbound, unpinned VM: its vCPUs float (taken from non-isolated
 * CPUs, see capacity.h) and its memory is spread over the nodes in proportion to their size. */
static void charge_count(struct capacity *c, const struct placement_request *shape) {
        c->floating_vcpus += shape->vcpus;
        c->cpus_free = c->cpus_free > shape->vcpus ? c->cpus_free - shape->vcpus : 0;
        uint64_t mem = shape->memory_bytes, total = 0;
        c->memory_used_bytes += mem;
        c->memory_free_bytes = c->memory_free_bytes > mem ? c->memory_free_bytes - mem : 0;
        for (size_t i = 0; i < c->n_numa; i++)
                total += c->numa[i].memory_total_bytes;
        for (size_t i = 0; i < c->n_numa && total > 0; i++) {
                uint64_t share = (uint64_t)((double)mem * ((double)c->numa[i].memory_total_bytes / (double)total));
                struct capacity_numa *n = &c->numa[i];
                n->memory_free_bytes = n->memory_free_bytes > share ? n->memory_free_bytes - share : 0;
        }
}

/* Bound VMs that Proxmox sees as unpinned are pinned by the agent: give them their reservation's CPUs
 * for the length of the computation, then restore the inventory exactly. */
static void swap_bound_affinity(const struct ledger *l, struct inventory *inv, struct cpuset **saved) {
        for (size_t i = 0; i < inv->n_vms; i++) {
                struct vm *vm = inv->vms[i];
                const struct reservation *r = ledger_find_vmid(l, vm->vmid);
                saved[i] = vm->affinity;
                if (r && r->placement && !vm->affinity)
                        vm->affinity = r->placement->cpus;
        }
}

static void restore_affinity(struct inventory *inv, struct cpuset **saved) {
        for (size_t i = 0; i < inv->n_vms; i++)
                inv->vms[i]->affinity = saved[i];
}

static int charge_unbound(const struct ledger *l, const struct inventory *inv, struct capacity *c) {
        for (size_t i = 0; i < l->n; i++) {
                const struct reservation *r = l->items[i];
                if (r->vmid && inventory_find(inv, r->vmid))
                        continue; /* charged through its VM */
                if (!r->placement) {
                        charge_count(c, &r->request);
                        continue;
                }
                int err = placement_charge(c, r->placement);
                if (err < 0)
                        return err;
        }
        return 0;
}

int ledger_effective_capacity(const struct ledger *l, const struct topology *t, const struct node_settings *s,
                              struct inventory *inv, const struct capacity_options *opts, struct capacity **ret) {
        struct cpuset **saved = calloc(inv->n_vms + 1, sizeof *saved);
        if (!saved)
                return -ENOMEM;
        swap_bound_affinity(l, inv, saved);
        struct capacity *c = NULL;
        int err = capacity_compute(t, s, inv, opts, &c);
        restore_affinity(inv, saved);
        free(saved);
        if (err == 0)
                err = charge_unbound(l, inv, c);
        if (err < 0) {
                capacity_free(c);
                return err;
        }
        *ret = c;
        return 0;
}

json_t *reservation_to_json(const struct reservation *r) {
        json_t *o = json_object();
        json_object_set_new(o, "id", json_string(r->id));
        json_object_set_new(o, "owner", json_string(r->owner));
        json_object_set_new(o, "state", json_string(r->vmid ? "bound" : "pending"));
        json_object_set_new(o, "vcpus", json_integer(r->request.vcpus));
        json_object_set_new(o, "memory_bytes", json_integer((json_int_t)r->request.memory_bytes));
        if (r->request.hugepage_kib)
                json_object_set_new(o, "hugepage_kib", json_integer((json_int_t)r->request.hugepage_kib));
        json_object_set_new(o, "created_at", json_integer(r->created_at));
        json_object_set_new(o, "expires_at", r->expires_at ? json_integer(r->expires_at) : json_null());
        json_object_set_new(o, "vmid", r->vmid ? json_integer(r->vmid) : json_null());
        json_t *p = r->placement ? placement_to_json(r->placement) : NULL;
        json_object_set_new(o, "cpus", p ? json_incref(json_object_get(p, "cpus")) : json_null());
        json_object_set_new(o, "vcpu_map", p ? json_incref(json_object_get(p, "vcpu_map")) : json_null());
        json_object_set_new(o, "numa", p ? json_incref(json_object_get(p, "numa")) : json_array());
        json_decref(p);
        return o;
}

json_t *ledger_to_json(const struct ledger *l) {
        json_t *arr = json_array();
        for (size_t i = 0; i < l->n; i++)
                json_array_append_new(arr, reservation_to_json(l->items[i]));
        return arr;
}
