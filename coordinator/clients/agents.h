/* agents: client for the pvescale-agent HTTPS API on each Proxmox host (offers, reservations, bind, VMs). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Threads: an agents_client talks to one agent over one keep-alive connection and is not thread-safe. */

struct agents_options {
        const char *url;         /* https://<address>:<port> (see agents_url) */
        const char *token;       /* bearer token */
        const char *ca_file;     /* CA of the agent certificates; NULL = system CAs */
        bool insecure;           /* tests only */
        long timeout_ms;         /* 0 = 10 s */
        long connect_timeout_ms; /* 0 = 3 s: an agent that is down must not stall a launch */
        struct http_pool *pool;  /* connections shared with the pool's other clients; NULL = the client's own */
};

/* "https://10.0.0.11:8207", "https://[fd00::11]:8207". Pure. 0, -EINVAL or -ENOMEM. */
int agents_url(const char *address, unsigned port, char **ret_url);

struct agents_shape {
        unsigned vcpus;
        uint64_t memory_bytes;
        uint64_t hugepage_kib; /* 0 = none */
};

struct agents_reserve {
        unsigned vcpus;
        uint64_t memory_bytes;
        uint64_t hugepage_kib;  /* 0 = none */
        unsigned ttl_seconds;   /* 0 = the agent's default (600) */
        const char *owner;      /* e.g. "nodeclaim/default-x7k2p" */
        const json_t *pci_devices; /* NULL or []: none; else per passed-through device the host paths Proxmox picks
                                    * it from ([["0000:41:00.0", ...], ...]): the agent keeps the VM near their
                                    * NUMA node */
};

/* Request bodies. Pure; new references, NULL on ENOMEM or bad arguments. */
json_t *agents_offers_body(const struct agents_shape *shapes, size_t n, unsigned max_count);
json_t *agents_reserve_body(const struct agents_reserve *r);

struct agents_client;

int agents_client_new(const struct agents_options *o, struct agents_client **ret);
void agents_client_free(struct agents_client *c);
void agents_client_set_cancel(struct agents_client *c, const atomic_bool *flag);
/* Why the last call failed: "POST /v1/reservations: 409 insufficient capacity: no NUMA node has 12 free cores".
 * "" after a success. */
const char *agents_client_error(const struct agents_client *c);
long agents_client_last_status(const struct agents_client *c);

/* Errors: 400 -EINVAL, 401 -EACCES, 404 -ENOENT, 405 -EOPNOTSUPP, 409 "insufficient capacity" -ENOSPC,
 * 409 "... has no config on node ..." (bind before the VM config is visible) -ENOENT, other 409 -EEXIST,
 * 5xx -EIO; transport errors as http_client_request (-ECONNREFUSED when the agent is down). Pure. */
int agents_errno_from_status(long status, const char *error, const char *detail);

/* Every call returns the agent's JSON answer (new reference) in *ret when ret is not NULL. */
int agents_topology(struct agents_client *c, json_t **ret);
int agents_capacity(struct agents_client *c, json_t **ret);
/* POST /v1/offers: {"node", "region", "policy", "offers": [{count, placement, score, shape, ...}]}. */
int agents_offers(struct agents_client *c, const struct agents_shape *shapes, size_t n, unsigned max_count,
                  json_t **ret);
/* POST /v1/reservations → the reservation {id, cpus, vcpu_map, numa, expires_at, ...}; -ENOSPC when it does not
 * fit (the agent's reason is in agents_client_error). */
int agents_reserve(struct agents_client *c, const struct agents_reserve *r, json_t **ret);
/* GET /v1/reservations → {"node", "reservations": [...]}. */
int agents_reservations(struct agents_client *c, json_t **ret);
int agents_reservation_get(struct agents_client *c, const char *id, json_t **ret);
/* POST /v1/reservations/{id}/bind {"vmid"}. -EEXIST when the reservation or the VM is bound elsewhere, -ENOENT
 * when the agent does not see the VM's config yet (retry) or the reservation is unknown. */
int agents_bind(struct agents_client *c, const char *id, uint32_t vmid, json_t **ret);
/* DELETE /v1/reservations/{id}. -ENOENT when it is already gone. */
int agents_release(struct agents_client *c, const char *id);
