/* api_reservations: the agent's mutating routes: offers, reservations (create, list, bind, release). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "api_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "jsonutil.h"
#include "log.h"
#include "pin_service.h"
#include "topology.h"

#define OFFER_MAX_SHAPES 64
#define OFFER_DEFAULT_MAX_COUNT 256
#define VMID_MIN 100
#define VMID_MAX 999999999

static bool pin_policy(const struct agent *a) {
        return a->cfg.node_policy == NODE_POLICY_STATIC;
}

/* ---- offers ---- */

static unsigned count_fit(const struct capacity *c, const struct placement_request *shape) {
        unsigned by_cpu = c->cpus_free / shape->vcpus;
        uint64_t by_mem = c->memory_free_bytes / shape->memory_bytes;
        return by_mem < by_cpu ? (unsigned)by_mem : by_cpu;
}

static json_t *count_offer(const struct capacity *c, const struct placement_request *shape, unsigned max_count) {
        unsigned n = count_fit(c, shape);
        unsigned count = n > max_count ? max_count : n;
        return json_pack("{s:i, s:i, s:b, s:f, s:b, s:n}", "count", count, "preferred_count", count, "count_capped",
                         n > max_count, "score", 0.0, "fallback", 0, "placement");
}

static json_t *pinned_offer(const struct agent *a, const struct placement_request *shape, unsigned max_count) {
        struct placement_offer offer;
        char reason[512] = ""; /* a refusal lists every NUMA node's free CPUs and memory */
        if (placement_offer(a->topology, a->capacity, shape, max_count, &offer, reason, sizeof reason) < 0)
                return NULL;
        json_t *o = placement_offer_to_json(&offer);
        if (o && offer.count == 0)
                json_object_set_new(o, "reason", json_string(reason));
        placement_offer_done(&offer);
        return o;
}

static int parse_shape(const json_t *v, size_t i, struct placement_request *shape, char *detail, size_t len) {
        static const char *const allowed[] = { "vcpus", "memory_bytes", "hugepage_kib", NULL };
        char reason[256];
        const char *bad;
        if (!json_is_object(v))
                return errmsg_invalid(detail, len, "shapes[%zu]: expected an object", i);
        if (jsonutil_check_keys(v, allowed, &bad) < 0)
                return errmsg_invalid(detail, len, "shapes[%zu].%s: unknown field", i, bad);
        int r = placement_request_from_json(v, shape, reason, sizeof reason);
        if (r == 0)
                r = placement_request_check(shape, reason, sizeof reason);
        if (r < 0)
                snprintf(detail, len, "shapes[%zu].%s", i, reason);
        return r;
}

static int parse_offer_body(const json_t *body, json_t **ret_shapes, unsigned *ret_max, char *detail, size_t len) {
        static const char *const allowed[] = { "shapes", "max_count", NULL };
        const char *bad;
        if (jsonutil_check_keys(body, allowed, &bad) < 0)
                return errmsg_invalid(detail, len, "%s: unknown field", bad);
        json_t *shapes = json_object_get(body, "shapes");
        if (!json_is_array(shapes) || json_array_size(shapes) == 0 || json_array_size(shapes) > OFFER_MAX_SHAPES)
                return errmsg_invalid(detail, len, "shapes: expected an array of 1 to %d shapes", OFFER_MAX_SHAPES);
        uint64_t max = OFFER_DEFAULT_MAX_COUNT;
        int r = jsonutil_get_u64(body, "max_count", &max);
        if ((r < 0 && r != -ENOENT) || max == 0 || max > 100000)
                return errmsg_invalid(detail, len, "max_count: expected an integer from 1 to 100000");
        *ret_shapes = shapes;
        *ret_max = (unsigned)max;
        return 0;
}

void api__post_offers(struct agent *a, const struct http_request *req, struct http_response *resp) {
        json_t *body, *shapes = NULL;
        unsigned max_count = 0;
        char detail[300];
        if (api__parse_body(req, resp, &body) < 0)
                return;
        if (parse_offer_body(body, &shapes, &max_count, detail, sizeof detail) < 0) {
                api__error(resp, 400, "invalid request", detail);
                json_decref(body);
                return;
        }
        json_t *offers = json_array();
        for (size_t i = 0; i < json_array_size(shapes); i++) {
                struct placement_request shape;
                if (parse_shape(json_array_get(shapes, i), i, &shape, detail, sizeof detail) < 0) {
                        api__error(resp, 400, "invalid request", detail);
                        json_decref(offers);
                        json_decref(body);
                        return;
                }
                json_t *o = pin_policy(a) ? pinned_offer(a, &shape, max_count)
                                          : count_offer(a->capacity, &shape, max_count);
                json_object_set(o, "shape", json_array_get(shapes, i));
                json_array_append_new(offers, o);
        }
        json_decref(body);
        api__reply(resp, 200, json_pack("{s:s, s:s, s:s, s:o}", "node", a->cfg.node_name, "region", a->cfg.region,
                                       "policy", pin_policy(a) ? "static" : "simple", "offers", offers));
}

/* ---- reservations ---- */

void api__get_reservations(struct agent *a, const struct http_request *req, struct http_response *resp) {
        (void)req;
        api__reply(resp, 200, json_pack("{s:s, s:o}", "node", a->cfg.node_name, "reservations",
                                       ledger_to_json(a->ledger)));
}

/* The NUMA node one device lies on whichever of its alternatives Proxmox gives the VM: -1 when they lie on different
 * nodes or the kernel knows none for one; -EINVAL and detail for an address the host does not have, another negative
 * errno when a node cannot be read. */
static int device_node(const struct agent *a, const struct ledger_pci_device *d, size_t i, int *ret_node,
                       char *detail, size_t len) {
        *ret_node = -1;
        for (size_t k = 0; k < d->n; k++) {
                int node = -1, r = topology_pci_numa_node(a->source.fsroot, d->addr[k], &node);
                if (r == -ENOENT)
                        return errmsg_invalid(detail, len, "pci_devices[%zu]: no PCI device %s on this host", i,
                                              d->addr[k]);
                if (r < 0) {
                        log_error("PCI device %s: its NUMA node cannot be read: %s", d->addr[k], strerror(-r));
                        return r == -EINVAL ? -EIO : r;
                }
                if (k > 0 && node != *ret_node)
                        node = -1; /* the path Proxmox picks decides the node: no constraint */
                *ret_node = node;
                if (node < 0)
                        break;
        }
        return 0;
}

/* The NUMA node of the request's PCI devices (read through the agent's sysfs root) into rr->shape.near, when they
 * all lie on one (devices on two nodes, or on none, add no constraint). -EINVAL and detail for a device the host
 * does not have, another negative errno when a node cannot be read. */
static int pci_near(const struct agent *a, struct reservation_request *rr, char *detail, size_t len) {
        bool mixed = false;
        for (size_t i = 0; i < rr->n_pci; i++) {
                int node, r = device_node(a, &rr->pci[i], i, &node, detail, len);
                if (r < 0)
                        return r;
                mixed |= node >= 0 && rr->shape.near && rr->shape.near_node != node;
                if (node >= 0 && !rr->shape.near) {
                        rr->shape.near = true;
                        rr->shape.near_node = node;
                }
        }
        if (mixed) {
                log_info("reservation for %s: its PCI devices lie on different NUMA nodes; placed as any VM",
                         rr->owner);
                rr->shape.near = false;
        }
        return 0;
}

void api__post_reservation(struct agent *a, const struct http_request *req, struct http_response *resp) {
        json_t *body;
        struct reservation_request rr;
        char reason[640]; /* a refusal lists every NUMA node's free CPUs and memory */
        if (api__parse_body(req, resp, &body) < 0)
                return;
        int r = ledger_parse_request(body, &rr, reason, sizeof reason);
        json_decref(body);
        if (r == 0)
                r = pci_near(a, &rr, reason, sizeof reason);
        if (r == -EINVAL) {
                api__error(resp, 400, "invalid request", reason);
                return;
        }
        if (r < 0) {
                api__error(resp, 500, "internal error", "the NUMA node of a PCI device cannot be read");
                return;
        }
        struct reservation *res = ledger_find_held(a->ledger, rr.owner);
        if (res && ledger_same_shape(res, &rr)) {
                api__reply(resp, 200, reservation_to_json(res)); /* a retry: the reservation it already has */
                return;
        }
        if (res) {
                snprintf(reason, sizeof reason, "owner: %s already holds reservation %s of another size", rr.owner,
                         res->id);
                api__error(resp, 409, "owner holds a reservation", reason);
                return;
        }
        r = ledger_reserve(a->ledger, a->topology, a->capacity, &rr, pin_policy(a), agent_now(), &res, reason,
                           sizeof reason);
        if (r == -ENOSPC) {
                api__error(resp, 409, "insufficient capacity", reason);
                return;
        }
        if (r < 0) {
                api__error(resp, 500, "internal error", strerror(-r));
                return;
        }
        char id[LEDGER_ID_LEN + 1];
        snprintf(id, sizeof id, "%s", res->id);
        json_t *doc = reservation_to_json(res);
        struct ledger_undo undo = ledger_undo_reserve(res);
        if (agent_ledger_commit(a, &undo) < 0) {
                json_decref(doc);
                api__error(resp, 500, "internal error", "the reservation could not be saved; nothing was reserved");
                return;
        }
        char field[64];
        snprintf(field, sizeof field, "RESERVATION=%s", id);
        log_info_field(field, "reserved %s for %s", id, rr.owner);
        api__reply(resp, 201, doc);
}

/* The {id} segment of /v1/reservations/{id}[/bind], checked for the id format; NULL after a 400 reply. */
static const char *path_id(const struct http_request *req, struct http_response *resp, char buf[LEDGER_ID_LEN + 1]) {
        const char *p = req->path + strlen("/v1/reservations/");
        size_t n = strcspn(p, "/");
        if (n < LEDGER_ID_LEN) {
                memcpy(buf, p, n);
                buf[n] = '\0';
        }
        if (n >= LEDGER_ID_LEN || !ledger_id_valid(buf)) {
                api__error(resp, 400, "invalid request", "id: expected a reservation id like r-0123456789abcdef");
                return NULL;
        }
        return buf;
}

void api__get_reservation(struct agent *a, const struct http_request *req, struct http_response *resp) {
        char buf[LEDGER_ID_LEN + 1];
        const char *id = path_id(req, resp, buf);
        if (!id)
                return;
        const struct reservation *r = ledger_find(a->ledger, id);
        if (!r) {
                api__error(resp, 404, "no such reservation", id);
                return;
        }
        api__reply(resp, 200, reservation_to_json(r));
}

void api__delete_reservation(struct agent *a, const struct http_request *req, struct http_response *resp) {
        char buf[LEDGER_ID_LEN + 1];
        const char *id = path_id(req, resp, buf);
        if (!id)
                return;
        if (ledger_release(a->ledger, id) < 0) {
                api__error(resp, 404, "no such reservation", id);
                return;
        }
        /* The release stands: saved again now and, failing that, every tick. */
        if (agent_ledger_commit(a, NULL) < 0) {
                api__error(resp, 500, "internal error",
                           "released, but the state file could not be saved; the agent keeps trying to save it");
                return;
        }
        char field[64];
        snprintf(field, sizeof field, "RESERVATION=%s", id);
        log_info_field(field, "released %s", id);
        api__reply(resp, 200, json_pack("{s:s}", "released", id));
}

static int parse_bind_body(const json_t *body, int *ret_vmid, char *detail, size_t len) {
        static const char *const allowed[] = { "vmid", NULL };
        const char *bad;
        uint64_t vmid;
        if (jsonutil_check_keys(body, allowed, &bad) < 0)
                return errmsg_invalid(detail, len, "%s: unknown field", bad);
        int r = jsonutil_get_u64(body, "vmid", &vmid);
        if (r < 0 || vmid < VMID_MIN || vmid > VMID_MAX)
                return errmsg_invalid(detail, len, "vmid: expected an integer from %d to %d", VMID_MIN, VMID_MAX);
        *ret_vmid = (int)vmid;
        return 0;
}

static void bind_reply(struct agent *a, const char *id, int vmid, struct http_response *resp) {
        struct reservation *r = ledger_find(a->ledger, id);
        char detail[128];
        if (!r) {
                api__error(resp, 404, "no such reservation", id);
                return;
        }
        struct ledger_undo undo = ledger_undo_bind(r);
        int err = ledger_bind(a->ledger, id, vmid);
        if (err == -EEXIST) {
                snprintf(detail, sizeof detail, "reservation %s or VM %d is already bound elsewhere", id, vmid);
                api__error(resp, 409, "conflict", detail);
                return;
        }
        if (agent_ledger_commit(a, &undo) < 0) {
                api__error(resp, 500, "internal error", "the binding could not be saved; nothing changed");
                return;
        }
        char field[64];
        snprintf(field, sizeof field, "VMID=%d", vmid);
        log_info_field(field, "bound %s to VM %d", id, vmid);
        struct pin_env env = agent_pin_env(a);
        pin_service_vm_changed(&a->pins, &env, vmid);
        api__reply(resp, 200, reservation_to_json(r));
}

void api__bind_reservation(struct agent *a, const struct http_request *req, struct http_response *resp) {
        char buf[LEDGER_ID_LEN + 1], detail[128];
        const char *id = path_id(req, resp, buf);
        json_t *body;
        int vmid = 0;
        if (!id || api__parse_body(req, resp, &body) < 0)
                return;
        int r = parse_bind_body(body, &vmid, detail, sizeof detail);
        json_decref(body);
        if (r < 0) {
                api__error(resp, 400, "invalid request", detail);
                return;
        }
        if (!inventory_find(a->inventory, vmid))
                agent_learn_vm(a, vmid); /* its config may have been written a moment ago, before inotify told */
        if (!inventory_find(a->inventory, vmid)) {
                snprintf(detail, sizeof detail, "VM %d has no config on node %s", vmid, a->cfg.node_name);
                api__error(resp, 409, "conflict", detail);
                return;
        }
        bind_reply(a, id, vmid, resp);
}
