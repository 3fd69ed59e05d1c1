/* provisioner: one provisioning round against the cluster: host room from the agents (or Proxmox), the
 * simulation, NodeClaims, events on pods and NodePool usage. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "provisioner.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents.h"
#include "fiber.h"
#include "http_client.h"
#include "latency.h"
#include "log.h"
#include "pve.h"
#include "rng.h"
#include "simulate_json.h"
#include "stats.h"
#include "monotime.h"
#include "nodeclaim.h"
#include "kube_types.h"
#include "reghealth.h"
#include "rfc3339.h"

#define AGENT_RETRY_MS 30000     /* an agent that failed is left alone this long (Proxmox data instead) */
#define PROVISIONER_HOST_TASKS 16 /* hosts whose room is fetched at once */
#define CLAIM_NAME_ATTEMPTS 3
#define COMPONENT "pvescale-coordinator"

struct agent_conn {
        char *region, *host, *url;
        struct agents_client *client;
        json_t *topology;      /* fetched once */
        int64_t retry_at_ms;   /* while down: when to try again */
        enum provisioner_agent_state state; /* of the last call (kept while it is left alone) */
        enum provisioner_agent_state told;  /* the state the NodePools' events last told */
        char error[256];                    /* the last failed call */
};

struct provisioner {
        struct provisioner_env env;
        struct pve_client **pve; /* per config cluster, lazily */
        struct agent_conn *agents;
        size_t n_agents;
        json_t *verdicts; /* pod key → the last verdict we told the pod ("nominated:<claim>", "unplaced:<text>") */
        json_t *logged;   /* problems already logged */
        json_t *refusals; /* pending pods the simulation fit on existing Nodes (provisioner_refusals.c) */
        bool seeded;      /* verdicts read back from Nominated events (once, after start) */
        struct rng rng;   /* simulation seeds */
        struct latency_waits round_waits0; /* the calling thread's waits when the round began */
        struct fiber_sched *sched; /* the tasks that fetch host room and write claims (made at the first need) */
};

/* A stop cancels the round's calls (every client shares the stop flag): what fails then is no error. */
static bool stopping(const struct provisioner *p) {
        return kube_client_canceled(p->env.kube);
}

/* A call of the round failed: log it and count it, unless the process is stopping. */
static void __attribute__((format(printf, 3, 4))) call_failed(struct provisioner *p, enum stats_counter counter,
                                                              const char *fmt, ...) {
        va_list ap;
        if (stopping(p))
                return;
        va_start(ap, fmt);
        log_fullv(LOG_LEVEL_ERROR, __FILE__, __LINE__, __func__, NULL, fmt, ap);
        va_end(ap);
        stats_add(p->env.stats, counter, 1);
}

int provisioner_new(const struct provisioner_env *env, struct provisioner **ret) {
        struct provisioner *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->env = *env;
        p->pve = calloc(env->cfg->n_clusters + 1, sizeof *p->pve);
        p->verdicts = json_object();
        p->logged = json_object();
        p->refusals = json_object();
        rng_init(&p->rng, 0);
        if (!p->pve || !p->verdicts || !p->logged || !p->refusals) {
                provisioner_free(p);
                return -ENOMEM;
        }
        *ret = p;
        return 0;
}

void provisioner_free(struct provisioner *p) {
        if (!p)
                return;
        for (size_t i = 0; p->pve && i < p->env.cfg->n_clusters; i++)
                pve_client_free(p->pve[i]);
        free(p->pve);
        for (size_t i = 0; i < p->n_agents; i++) {
                agents_client_free(p->agents[i].client);
                json_decref(p->agents[i].topology);
                free(p->agents[i].region);
                free(p->agents[i].host);
                free(p->agents[i].url);
        }
        free(p->agents);
        fiber_sched_free(p->sched);
        json_decref(p->verdicts);
        json_decref(p->logged);
        json_decref(p->refusals);
        free(p);
}

/* ---- clients ---- */

static struct pve_client *pve_for(struct provisioner *p, size_t i) {
        const struct config_cluster *c = &p->env.cfg->clusters[i];
        if (p->pve[i])
                return p->pve[i];
        struct pve_options o = { .url = c->url, .token_id = c->token_id, .token_secret = c->token_secret,
                                 .ca_file = c->ca_file, .insecure = c->insecure };
        if (pve_client_new(&o, &p->pve[i]) < 0)
                log_error("region %s: cannot create the Proxmox client", c->region);
        return p->pve[i];
}

struct pve_client *provisioner_pve(struct provisioner *p, const char *region) {
        for (size_t i = 0; region && i < p->env.cfg->n_clusters; i++)
                if (p->env.cfg->clusters[i].region && strcmp(p->env.cfg->clusters[i].region, region) == 0)
                        return pve_for(p, i);
        return NULL;
}

static const char *agent_address(const struct config *cfg, const char *host, const char *ip) {
        for (size_t i = 0; i < cfg->agents.n_hosts; i++)
                if (strcmp(cfg->agents.hosts[i].node, host) == 0)
                        return cfg->agents.hosts[i].address;
        return ip;
}

static struct agent_conn *agent_find(struct provisioner *p, const char *region, const char *host) {
        for (size_t i = 0; i < p->n_agents; i++)
                if (strcmp(p->agents[i].region, region) == 0 && strcmp(p->agents[i].host, host) == 0)
                        return &p->agents[i];
        return NULL;
}

static struct agent_conn *agent_conn(struct provisioner *p, const char *region, const char *host, const char *ip) {
        const struct config *cfg = p->env.cfg;
        const char *address = agent_address(cfg, host, ip);
        struct agent_conn *a = agent_find(p, region, host);
        if (a || !address)
                return a;
        struct agent_conn *arr = realloc(p->agents, (p->n_agents + 1) * sizeof *arr);
        if (!arr)
                return NULL;
        p->agents = arr;
        a = &arr[p->n_agents];
        *a = (struct agent_conn){ .region = strdup(region), .host = strdup(host) };
        struct agents_options o = { .token = cfg->agents.token, .ca_file = cfg->agents.ca_file };
        if (!a->region || !a->host || agents_url(address, cfg->agents.port, &a->url) < 0 ||
            (o.url = a->url, agents_client_new(&o, &a->client) < 0)) {
                free(a->region);
                free(a->host);
                free(a->url);
                return NULL;
        }
        p->n_agents++;
        return a;
}

/* ---- host room ---- */

static struct agents_shape *agent_shapes(const struct provisioner_shapes *shapes) {
        struct agents_shape *out = calloc(shapes->n + 1, sizeof *out);
        for (size_t i = 0; out && i < shapes->n; i++)
                out[i] = (struct agents_shape){ shapes->items[i].vcpus, shapes->items[i].memory_bytes,
                                                shapes->items[i].hugepage_kib };
        return out;
}

/* The agent failed (logged and told once per change of its state, by tell_agent_state). */
static void agent_failed(struct provisioner *p, struct agent_conn *a) {
        if (stopping(p))
                return;
        a->state = provisioner_agent_state_of(agents_client_last_status(a->client));
        snprintf(a->error, sizeof a->error, "%s", agents_client_error(a->client));
        a->retry_at_ms = monotime_ms() + AGENT_RETRY_MS;
        stats_add(p->env.stats, STATS_AGENT_ERRORS, 1);
}

/* The agent's view of the host, or NULL (then Proxmox's accounting is used). */
static json_t *agent_room(struct provisioner *p, struct agent_conn *a, const struct provisioner_shapes *shapes) {
        json_t *cap = NULL, *offers = NULL, *room = NULL;
        if (!a || (a->retry_at_ms && monotime_ms() < a->retry_at_ms))
                return NULL;
        struct agents_shape *as = agent_shapes(shapes);
        int r = as ? 0 : -ENOMEM;
        if (r == 0 && !a->topology)
                r = agents_topology(a->client, &a->topology);
        if (r == 0)
                r = agents_capacity(a->client, &cap);
        if (r == 0 && shapes->n > 0)
                r = agents_offers(a->client, as, shapes->n, 0, &offers);
        if (r == 0)
                room = provisioner_host_from_agent(a->host, a->region, cap, offers, a->topology, shapes);
        if (r < 0 && r != -ENOMEM)
                agent_failed(p, a);
        else if (room) {
                a->retry_at_ms = 0;
                a->state = PROVISIONER_AGENT_OK;
        }
        free(as);
        json_decref(cap);
        json_decref(offers);
        return room;
}

static json_t *vmid_list(const json_t *vms) {
        json_t *ids = json_array();
        size_t i;
        json_t *vm;
        json_array_foreach(vms, i, vm) {
                json_t *id = json_object_get(vm, "vmid");
                if (json_is_number(id))
                        json_array_append_new(ids, json_integer((json_int_t)json_number_value(id)));
        }
        return ids;
}

/* Proxmox's accounting of the host, or NULL. *ret_vmids: the VMs it counted. */
static json_t *pve_room(struct provisioner *p, struct pve_client *pve, const char *region, const char *host,
                        json_t **ret_vmids) {
        json_t *status = NULL, *vms = NULL, *room = NULL;
        if (pve_node_status(pve, host, &status) < 0 || pve_vm_list(pve, host, &vms) < 0) {
                call_failed(p, STATS_PVE_ERRORS, "region %s host %s: %s", region, host, pve_client_error(pve));
        } else {
                room = provisioner_host_from_pve(host, region, status, vms);
                *ret_vmids = vmid_list(vms);
        }
        json_decref(status);
        json_decref(vms);
        return room;
}

struct host_ctx {
        struct provisioner *p;
        struct provisioner_round *round;
        const struct provisioner_snapshot *snap;
        const struct provisioner_shapes *shapes;
        struct provisioner_outcome *out;
        int64_t agents_down; /* hosts whose agent gave no usable answer this round */
};

/* Tell every NodePool (an Event) and the log when a host's agent state changed since it was last told. */
static void tell_agent_state(struct host_ctx *hc, struct agent_conn *a, bool fallback) {
        struct provisioner *p = hc->p;
        const struct provisioner_round *r = hc->round;
        char msg[768];
        if (a->state == a->told || stopping(p))
                return;
        provisioner_agent_message(msg, sizeof msg, a->region, a->host, a->url, a->state, a->error, fallback);
        if (a->state == PROVISIONER_AGENT_OK)
                log_info("%s", msg);
        else
                log_warning("%s", msg);
        bool up = a->state == PROVISIONER_AGENT_OK;
        size_t told = 0;
        for (size_t i = 0; i < r->in->n_pools; i++) {
                if (kube_event_emit(p->env.kube, &kube_nodepools, r->pools[i], up ? "Normal" : "Warning",
                                    up ? PROVISIONER_REASON_AGENT_UP : PROVISIONER_REASON_AGENT_DOWN, msg,
                                    COMPONENT) == 0)
                        told++;
                else
                        call_failed(p, STATS_KUBE_ERRORS, "event on NodePool %s: %s", r->in->pools[i]->name,
                                    kube_client_error(p->env.kube));
        }
        if (told > 0 || r->in->n_pools == 0)
                a->told = a->state;
}

/* A host whose agent gave no usable room: false when it is left out (static policy without agents.fallback). */
static bool agent_down(struct host_ctx *hc, struct agent_conn *a) {
        struct provisioner *p = hc->p;
        bool fallback = config_agent_fallback_proxmox(p->env.cfg);
        hc->agents_down++;
        if (a && a->state == PROVISIONER_AGENT_OK) { /* an answer that could not be used */
                a->state = PROVISIONER_AGENT_ERROR;
                snprintf(a->error, sizeof a->error, "no usable capacity or offers");
        }
        if (a)
                tell_agent_state(hc, a, fallback);
        if (fallback) {
                stats_add(p->env.stats, STATS_AGENT_FALLBACKS, 1);
                return true;
        }
        enum provisioner_agent_state st = a ? a->state : PROVISIONER_AGENT_UNREACHABLE;
        enum stats_counter left_out = STATS_HOSTS_LEFT_OUT_UNREACHABLE;
        if (st == PROVISIONER_AGENT_UNAUTHORIZED)
                left_out = STATS_HOSTS_LEFT_OUT_UNAUTHORIZED;
        else if (st == PROVISIONER_AGENT_ERROR)
                left_out = STATS_HOSTS_LEFT_OUT_ERROR;
        stats_add(p->env.stats, left_out, 1);
        return false;
}

/* One online host of the round: its room, fetched by a task (fetch_rooms), added to the round in host order. */
struct host_fetch {
        const char *region;
        char *host;
        struct pve_client *pve;
        struct agent_conn *agent; /* NULL: agents disabled, or no address (then agent_down) */
        json_t *room, *vmids;     /* vmids: Proxmox's VMs, when the room is Proxmox's */
        const json_t *pci_mappings; /* the region's /cluster/mapping/pci when a node class has pciDevices, else NULL */
        bool from_agent;
};

struct host_fetches {
        struct provisioner *p;
        const struct provisioner_shapes *shapes;
        struct host_fetch *items;
        size_t n, next;
        int64_t max_wait_us; /* the longest a task waited for answers: what the round waited */
};

/* The region's online hosts into f, and their agents' connections (tasks must not grow p->agents). */
static void list_region(struct provisioner *p, size_t ci, struct host_fetches *f) {
        const char *region = p->env.cfg->clusters[ci].region;
        struct pve_client *pve = pve_for(p, ci);
        json_t *st = NULL;
        if (!pve)
                return;
        if (pve_cluster_status(pve, &st) < 0) {
                call_failed(p, STATS_PVE_ERRORS, "region %s: %s", region, pve_client_error(pve));
                return;
        }
        struct pve_cluster_node n;
        for (size_t i = 0; i < json_array_size(st); i++) {
                if (!pve_cluster_node_at(st, i, &n) || !n.online)
                        continue;
                if (n.ip && p->env.host_address)
                        p->env.host_address(p->env.userdata, region, n.name, n.ip);
                struct host_fetch *grown = realloc(f->items, (f->n + 1) * sizeof *grown);
                if (!grown)
                        break;
                f->items = grown;
                f->items[f->n] = (struct host_fetch){ .region = region, .host = strdup(n.name), .pve = pve };
                if (!f->items[f->n].host)
                        break;
                if (p->env.cfg->agents.enabled) /* made now; pointed at once all are made (p->agents grows) */
                        agent_conn(p, region, n.name, n.ip);
                f->n++;
        }
        json_decref(st);
}

/* Run fn on data, data + stride, ... (n of them) as tasks on this thread (fiber.h) until all have ended. Returns how
 * many ran as tasks: 0 when none could be made (the caller then does the work itself). */
static size_t run_tasks(struct provisioner *p, fiber_fn fn, char *data, size_t stride, size_t n) {
        size_t spawned = 0;
        if (n > 0 && !p->sched && fiber_sched_new(&p->sched) < 0)
                log_error("cannot make the round's tasks: their calls go one after the other");
        for (size_t t = 0; p->sched && t < n; t++)
                spawned += fiber_spawn(p->sched, fn, data + t * stride) == 0;
        while (spawned > 0 && fiber_sched_step(p->sched, 100) > 0) /* 100 ms: a stop is seen that soon */
                ;
        return spawned;
}

/* A task: the agents' rooms of the next hosts no other task took (each host has its own agent client). */
static void fetch_task(void *data) {
        struct host_fetches *f = data;
        while (f->next < f->n && !stopping(f->p)) {
                struct host_fetch *h = &f->items[f->next++];
                h->room = agent_room(f->p, h->agent, f->shapes);
                h->from_agent = h->room != NULL;
        }
        int64_t waited = http_client_thread_wait_us(); /* this task's */
        if (waited > f->max_wait_us)
                f->max_wait_us = waited;
}

/* Every host's room from its agent, PROVISIONER_HOST_TASKS hosts at a time (tasks on this thread, fiber.h): a slow
 * agent holds one task, not the round. The round's thread is credited with the longest task's wait for answers.
 * (Proxmox's accounting, where no agent answers, is read afterwards through the region's one client.) */
static void fetch_rooms(struct provisioner *p, struct host_fetches *f) {
        if (!p->env.cfg->agents.enabled)
                return;
        size_t tasks = f->n < PROVISIONER_HOST_TASKS ? f->n : PROVISIONER_HOST_TASKS;
        if (run_tasks(p, fetch_task, (char *)f, 0, tasks) == 0)
                fetch_task(f); /* no tasks: on this thread */
        else
                http_client_thread_wait_note(f->max_wait_us);
}

/* The running VMs of a host (their VMIDs into running) and their configs (into configs). -1 when a call failed. */
static int running_configs(struct provisioner *p, struct host_fetch *h, json_t *running, json_t *configs) {
        json_t *vms = NULL, *vm;
        size_t i;
        if (pve_vm_list(h->pve, h->host, &vms) < 0) {
                call_failed(p, STATS_PVE_ERRORS, "region %s host %s: %s", h->region, h->host, pve_client_error(h->pve));
                return -1;
        }
        int rc = 0;
        json_array_foreach(vms, i, vm) {
                const char *status = json_string_value(json_object_get(vm, "status"));
                json_int_t vmid = json_integer_value(json_object_get(vm, "vmid"));
                json_t *conf = NULL;
                if (!status || strcmp(status, "running") != 0 || vmid <= 0)
                        continue;
                if (pve_vm_config_get(h->pve, h->host, (uint32_t)vmid, &conf) < 0) {
                        call_failed(p, STATS_PVE_ERRORS, "region %s host %s VM %lld: %s", h->region, h->host,
                                    (long long)vmid, pve_client_error(h->pve));
                        rc = -1;
                        break;
                }
                json_array_append_new(running, json_integer(vmid));
                json_array_append_new(configs, conf);
        }
        json_decref(vms);
        return rc;
}

/* The host's free PCI devices by resource mapping into its room ("pci_free"): its paths of each mapping less those
 * its running VMs hold and those the claims planned on it will take when their VMs start. The VMs' configs are read
 * only on a host some mapping has an entry for; when a read fails, the host has no free device this round. */
static void pci_room(struct host_ctx *hc, struct host_fetch *h) {
        json_t *running = json_array(), *configs = json_array(), *none = json_array();
        json_t *free_by = provisioner_pci_free(h->pci_mappings, h->host, none);
        if (free_by && json_object_size(free_by) > 0 && running && configs) {
                json_decref(free_by);
                free_by = running_configs(hc->p, h, running, configs) == 0
                                  ? provisioner_pci_free(h->pci_mappings, h->host, configs)
                                  : json_object();
        }
        if (free_by && json_object_set_new(h->room, "pci_free", free_by) == 0)
                provisioner_host_charge_devices(h->room, hc->round, hc->snap->claims, running);
        json_decref(running);
        json_decref(configs);
        json_decref(none);
}

/* A fetched host into the round: its agent's state told (Proxmox's accounting when it gave no room), its pending
 * claims charged. */
static void add_host(struct host_ctx *hc, struct host_fetch *h) {
        struct provisioner *p = hc->p;
        if (p->env.cfg->agents.enabled) {
                if (h->from_agent && h->agent)
                        tell_agent_state(hc, h->agent, false);
                else if (!agent_down(hc, h->agent))
                        return;
        }
        if (!h->room)
                h->room = pve_room(p, h->pve, h->region, h->host, &h->vmids);
        if (!h->room)
                return;
        char err[256];
        if (h->pci_mappings)
                pci_room(hc, h);
        provisioner_host_charge_pending(h->room, hc->round, hc->snap->claims, h->from_agent, h->vmids, hc->shapes);
        if (simulate_json_host(hc->round->in, h->room, NULL, err, sizeof err) < 0)
                log_error("host %s/%s: %s", h->region, h->host, err);
        else {
                hc->out->hosts++;
                hc->out->hosts_from_agents += h->from_agent;
        }
}

/* ---- claims ---- */

/* One claim to create: its random name seeds (drawn before the writers start) and the outcome. */
struct claim_job {
        uint64_t seeds[CLAIM_NAME_ATTEMPTS];
        char *name; /* NULL when it could not be created */
};

struct claim_writes {
        struct provisioner *p;
        char **planned; /* per claim, the name of its first attempt (for NODECLAIM_ANNOTATION_AFTER) */
        const struct provisioner_round *r;
        const struct sim_result *res;
        struct claim_job *jobs;
        const json_t *annotations; /* more annotations for every claim, or NULL */
        bool round;                /* a provisioning round: each claim names the others (not replacements) */
        atomic_size_t next;
        struct latency_waits pre_waits; /* waits of the round before the claim writes */
};

/* The claim object of planned claim i, with the round's extra annotations. */
static json_t *claim_object(const struct claim_writes *w, size_t i, const char *name) {
        json_t *obj = provisioner_claim_object(w->r, w->res, i, name);
        json_t *annotations = kube_annotations_mut(obj);
        json_t *after = obj ? provisioner_claim_after(w->res, i, w->planned) : NULL;
        if (after && json_object_set_new(annotations, NODECLAIM_ANNOTATION_AFTER, after) < 0) {
                json_decref(obj);
                return NULL;
        }
        json_t *round = obj && w->round ? provisioner_claim_round(w->res->n_claims, i, w->planned) : NULL;
        if (round && json_object_set_new(annotations, NODECLAIM_ANNOTATION_ROUND, round) < 0) {
                json_decref(obj);
                return NULL;
        }
        if (obj && w->annotations && json_object_update(annotations, (json_t *)w->annotations) < 0) {
                json_decref(obj);
                return NULL;
        }
        return obj;
}

static json_t *create_claim(const struct claim_writes *w, struct kube_client *kube, size_t i) {
        struct provisioner *p = w->p;
        const char *pool = w->r->in->pools[w->res->claims[i].nodepool]->name;
        for (int attempt = 0; attempt < CLAIM_NAME_ATTEMPTS; attempt++) {
                char name[128];
                json_t *stored = NULL;
                json_t *obj = claim_object(w, i, provisioner_claim_name(pool, w->jobs[i].seeds[attempt], name,
                                                                        sizeof name));
                if (obj && p->env.claim_writing)
                        p->env.claim_writing(p->env.userdata, name, true);
                int rc = obj ? kube_create(kube, &kube_nodeclaims, NULL, obj, &stored) : -ENOMEM;
                json_decref(obj);
                if (rc == 0)
                        return stored;
                if (obj && p->env.claim_writing)
                        p->env.claim_writing(p->env.userdata, name, false);
                if (rc != -EEXIST) {
                        call_failed(p, STATS_KUBE_ERRORS, "create NodeClaim %s: %s", name, kube_client_error(kube));
                        return NULL;
                }
        }
        return NULL;
}

/* Write host, region, capacity and allocatable; returns the stored claim (or the created one on failure). */
static json_t *claim_status(struct provisioner *p, struct kube_client *kube, const struct provisioner_round *r,
                            const struct sim_result *res, size_t i, json_t *claim) {
        const char *name = kube_meta_of(claim).name;
        json_t *patch = json_pack("{s:o}", "status", provisioner_claim_status(r, res, i)), *stored = NULL;
        if (patch && kube_patch(kube, &kube_nodeclaims, NULL, name, "status", KUBE_PATCH_MERGE, patch, &stored) == 0) {
                json_decref(patch);
                json_decref(claim);
                return stored;
        }
        call_failed(p, STATS_KUBE_ERRORS, "NodeClaim %s: status: %s", name, kube_client_error(kube));
        json_decref(patch);
        return claim;
}

static void write_claim(struct claim_writes *w, struct kube_client *kube, const struct latency_waits *waits0,
                        size_t i) {
        struct provisioner *p = w->p;
        const struct provisioner_round *r = w->r;
        json_t *claim = create_claim(w, kube, i);
        if (!claim)
                return;
        /* The launcher takes the claim up from here (claim_created), with its status when there is no launcher to
         * record it. */
        struct latency_waits mine;
        if (!p->env.placement_by_launcher)
                claim = claim_status(p, kube, r, w->res, i, claim);
        latency_waits_since(waits0, &mine);
        mine.api_us += w->pre_waits.api_us;
        mine.cpu_us += w->pre_waits.cpu_us;
        w->jobs[i].name = strdup(kube_meta_of(claim).name);
        const struct sim_claim *c = &w->res->claims[i];
        log_info("NodeClaim %s: %s on %s (%s), %zu pods", w->jobs[i].name, c->shape->name,
                 r->in->hosts[c->host]->name, r->in->pools[c->nodepool]->name, c->n_pods);
        if (p->env.claim_created) /* the launch starts now, not after the round */
                p->env.claim_created(p->env.userdata, claim, &mine);
        stats_add(p->env.stats, STATS_CLAIMS_CREATED, 1);
        json_decref(claim);
}

struct writer {
        struct claim_writes *w;
        struct kube_client *kube;
};

/* Claims not taken yet, one after the other, with this writer's client (a task, or the thread itself). */
static void writer_run(void *arg) {
        struct writer *wr = arg;
        struct latency_waits waits0;
        latency_waits_now(&waits0);
        for (size_t i; (i = atomic_fetch_add(&wr->w->next, 1)) < wr->w->res->n_claims;)
                write_claim(wr->w, wr->kube, &waits0, i);
}

/* Claims are independent: one task (fiber.h) per writer client writes them, so several go out at once (a large
 * batch no longer waits for one round trip after the other). Without tasks, the thread writes them all. */
static void write_claims(struct provisioner *p, struct claim_writes *w) {
        size_t n = w->res->n_claims < p->env.n_writers + 1 ? w->res->n_claims : p->env.n_writers + 1;
        struct writer *wr = calloc(n + 1, sizeof *wr);
        for (size_t t = 0; wr && t < n; t++)
                wr[t] = (struct writer){ .w = w, .kube = t == 0 ? p->env.kube : p->env.writers[t - 1] };
        if (wr && n > 1)
                run_tasks(p, writer_run, (char *)wr, sizeof *wr, n);
        struct writer self = { .w = w, .kube = p->env.kube };
        writer_run(&self); /* what no task took */
        free(wr);
}

/* Create every planned claim; names[i] is its name, or NULL when it could not be created. */
static void create_claims(struct provisioner *p, const struct provisioner_round *r, const struct sim_result *res,
                          const json_t *annotations, char **names, struct provisioner_outcome *out) {
        struct claim_writes w = { .p = p, .r = r, .res = res, .jobs = calloc(res->n_claims + 1, sizeof *w.jobs),
                                  .annotations = annotations, .round = annotations == NULL };
        if (!w.jobs) {
                out->failures += res->n_claims;
                return;
        }
        char name[128];
        w.planned = calloc(res->n_claims + 1, sizeof *w.planned);
        for (size_t i = 0; i < res->n_claims; i++) {
                for (int a = 0; a < CLAIM_NAME_ATTEMPTS; a++)
                        w.jobs[i].seeds[a] = rng_next(&p->rng);
                if (w.planned)
                        w.planned[i] = strdup(provisioner_claim_name(r->in->pools[res->claims[i].nodepool]->name,
                                                                     w.jobs[i].seeds[0], name, sizeof name));
        }
        atomic_init(&w.next, 0);
        latency_waits_since(&p->round_waits0, &w.pre_waits);
        write_claims(p, &w);
        for (size_t i = 0; i < res->n_claims; i++) {
                names[i] = w.jobs[i].name;
                if (names[i])
                        out->claims_created++;
                else
                        out->failures++;
                free(w.planned ? w.planned[i] : NULL);
        }
        free(w.planned);
        free(w.jobs);
}

/* ---- events ---- */

static void pod_key(const json_t *pod, char *buf, size_t len) {
        const json_t *m = json_object_get(pod, "metadata");
        const char *uid = json_string_value(json_object_get(m, "uid"));
        if (uid)
                snprintf(buf, len, "%s", uid);
        else
                snprintf(buf, len, "%s/%s", json_string_value(json_object_get(m, "namespace")),
                         json_string_value(json_object_get(m, "name")));
}

/* Tell the pod, unless it was told the same thing last time. */
static void tell(struct provisioner *p, const json_t *pod, const char *verdict, const char *type, const char *reason,
                 const char *message, json_t *seen, struct provisioner_outcome *out) {
        char key[256];
        pod_key(pod, key, sizeof key);
        json_object_set_new(seen, key, json_true());
        const char *last = json_string_value(json_object_get(p->verdicts, key));
        if (last && strcmp(last, verdict) == 0)
                return;
        if (kube_event_emit(p->env.kube, &kube_pods, pod, type, reason, message, COMPONENT) < 0) {
                call_failed(p, STATS_KUBE_ERRORS, "event %s on pod %s: %s", reason, key,
                            kube_client_error(p->env.kube));
                out->failures++;
                return;
        }
        json_object_set_new(p->verdicts, key, json_string(verdict));
        stats_add(p->env.stats, strcmp(type, "Normal") == 0 ? STATS_PODS_NOMINATED : STATS_PODS_UNPLACED, 1);
}

static void nominate(struct provisioner *p, const json_t *pod, const char *claim, const char *detail, json_t *seen,
                     struct provisioner_outcome *out) {
        char verdict[300], msg[512];
        snprintf(verdict, sizeof verdict, "nominated:%s", claim);
        snprintf(msg, sizeof msg, "Pod should schedule on: nodeclaim/%s%s", claim, detail);
        tell(p, pod, verdict, "Normal", PROVISIONER_REASON_NOMINATED, msg, seen, out);
}

static void unplaced(struct provisioner *p, const json_t *pod, const char *why, json_t *seen,
                     struct provisioner_outcome *out) {
        char verdict[600], msg[600];
        snprintf(verdict, sizeof verdict, "unplaced:%s", why);
        snprintf(msg, sizeof msg, "Cannot provision a node for the pod: %s", why);
        tell(p, pod, verdict, "Warning", provisioner_unplaced_reason(why), msg, seen, out);
}

/* ---- disagreements with kube-scheduler (provisioner_refusals.c) ---- */

static void track_refusals(struct provisioner *p, const struct provisioner_round *r, const struct sim_result *res,
                           char *const *names, int64_t now_ms) {
        json_t *pending = json_object();
        for (size_t i = 0; pending && i < r->n_pending; i++) {
                const struct sim_placement *pl = &res->placements[i];
                const struct sim_node *n = pl->target == SIM_TARGET_NODE ? r->in->nodes[pl->index] : NULL;
                const char *claim = NULL; /* the claim it was planned on, new or in flight */
                if (pl->target == SIM_TARGET_CLAIM)
                        claim = names[pl->index];
                else if (n && n->in_flight)
                        claim = n->name;
                else if (pl->target == SIM_TARGET_BOUND)
                        claim = r->in->pods[i]->node_name;
                char key[256];
                pod_key(r->pods[i], key, sizeof key);
                json_object_set_new(pending, key, json_true());
                struct provisioner_refusal was;
                if (!provisioner_refusal_track(p->refusals, key, n && !n->in_flight ? n->name : NULL, claim != NULL,
                                               now_ms, &was))
                        continue;
                struct kube_pod kp = kube_pod_of(r->pods[i]);
                const char *said = json_string_value(json_object_get(kube_condition(kp.status, "PodScheduled"),
                                                                     "message"));
                log_warning("pod %s/%s: kube-scheduler refused it for %lld s while the simulation fit it on Node %s "
                            "(kube-scheduler: %s); planned on NodeClaim %s instead",
                            kp.meta.namespace_, kp.meta.name, (long long)((now_ms - was.since_ms) / 1000), was.node,
                            said ? said : "no message", claim);
                stats_add(p->env.stats, STATS_SCHEDULER_DISAGREEMENTS, 1);
        }
        if (pending)
                provisioner_refusals_forget(p->refusals, pending);
        json_decref(pending);
}
static void tell_pods(struct provisioner *p, const struct provisioner_round *r, const struct sim_result *res,
                      char *const *names, struct provisioner_outcome *out) {
        json_t *seen = json_object();
        for (size_t i = 0; seen && i < r->n_pending; i++) { /* the leaving Nodes' pods are not pending yet */
                const struct sim_placement *pl = &res->placements[i];
                const struct sim_node *n = pl->target == SIM_TARGET_NODE ? r->in->nodes[pl->index] : NULL;
                char detail[160] = "";
                if (pl->target == SIM_TARGET_CLAIM && names[pl->index]) {
                        const struct sim_claim *c = &res->claims[pl->index];
                        snprintf(detail, sizeof detail, " (%s on %s)", c->shape->name, r->in->hosts[c->host]->name);
                        nominate(p, r->pods[i], names[pl->index], detail, seen, out);
                } else if (n && n->in_flight) {
                        nominate(p, r->pods[i], n->name, "", seen, out);
                } else if (pl->target == SIM_TARGET_BOUND && r->in->pods[i]->node_name) {
                        const char *node = r->in->pods[i]->node_name; /* kept on its claim, or its settling Node */
                        const char *claim = json_string_value(json_object_get(r->settling, node));
                        nominate(p, r->pods[i], claim ? claim : node, "", seen, out);
                } else if (pl->target == SIM_TARGET_UNPLACED) {
                        unplaced(p, r->pods[i], pl->reason, seen, out);
                }
        }
        /* Forget pods that are no longer pending. */
        const char *key;
        json_t *v, *tmp;
        json_object_foreach_safe(p->verdicts, tmp, key, v) {
                if (seen && !json_object_get(seen, key))
                        json_object_del(p->verdicts, key);
        }
        json_decref(seen);
}

/* ---- pools ---- */

/* The generation of pool i's node class, or -1 when the round has no such class. */
static int64_t class_generation(const struct provisioner_round *r, size_t i) {
        const char *nc = r->in->pools[i]->nodeclass;
        for (size_t k = 0; nc && k < r->n_catalogs; k++)
                if (strcmp(r->in->classes[k]->name, nc) == 0)
                        return kube_meta_of(r->classes[k]).generation;
        return -1;
}

/* As Karpenter's registrationhealth controller: a pool new, or whose spec or node class changed since its
 * NodeRegistrationHealthy was computed, gets it back to Unknown (merged into patch, its status object). */
static int reset_registration_health(const struct provisioner_round *r, size_t i, int64_t now_ms, json_t *status) {
        int64_t gen = class_generation(r, i);
        if (gen < 0 || !reghealth_stale(r->pools[i], gen))
                return 0;
        json_t *patch = reghealth_patch(r->pools[i], "Unknown", "AwaitingReconciliation",
                                        "no node of this generation of the pool and its node class has registered "
                                        "or failed yet", gen, now_ms);
        int rc = patch ? json_object_update(status, json_object_get(patch, "status")) : -1;
        json_decref(patch);
        return rc < 0 ? -ENOMEM : 0;
}

static void update_pools(struct provisioner *p, const struct provisioner_round *r, const struct sim_result *res,
                         struct provisioner_outcome *out) {
        int64_t now_ms = rfc3339_now_ms();
        for (size_t i = 0; i < r->in->n_pools; i++) {
                json_t *usage = provisioner_pool_usage(r, res, i);
                const json_t *now = kube_nodepool_of(r->pools[i]).resources;
                json_t *status = json_object();
                if (usage && status && !json_equal(usage, (json_t *)now))
                        json_object_set(status, "resources", usage);
                if (status)
                        reset_registration_health(r, i, now_ms, status);
                if (status && json_object_size(status) > 0) {
                        json_t *patch = json_pack("{s:O}", "status", status);
                        if (!patch || kube_patch(p->env.kube, &kube_nodepools, NULL, r->in->pools[i]->name, "status",
                                                 KUBE_PATCH_MERGE, patch, NULL) < 0) {
                                call_failed(p, STATS_KUBE_ERRORS, "NodePool %s: status: %s", r->in->pools[i]->name,
                                            kube_client_error(p->env.kube));
                                out->failures++;
                        }
                        json_decref(patch);
                }
                json_decref(status);
                json_decref(usage);
        }
}

/* ---- the round ---- */

static void log_problems(struct provisioner *p, const json_t *problems) {
        size_t i;
        json_t *v;
        json_array_foreach(problems, i, v) {
                const char *s = json_string_value(v);
                if (s && !json_object_get(p->logged, s)) {
                        log_error("left out of provisioning: %s", s);
                        json_object_set_new(p->logged, s, json_true());
                }
        }
}

static int simulate(struct provisioner *p, struct provisioner_round *r, struct sim_result **ret,
                    struct provisioner_outcome *out) {
        int64_t t0 = monotime_us();
        int rc = simulate_run(r->in, ret);
        out->simulate_seconds = (double)(monotime_us() - t0) / 1e6;
        stats_observe(p->env.stats, STATS_H_SIMULATE, out->simulate_seconds);
        if (rc < 0)
                log_error_errno(rc, "simulation failed");
        return rc;
}

static void count(const struct provisioner_round *r, const struct sim_result *res, struct provisioner_outcome *out) {
        out->candidates = r->n_pending;
        out->leaving = r->n_candidates - r->n_pending;
        for (size_t i = 0; i < r->n_pending; i++) {
                const struct sim_placement *pl = &res->placements[i];
                if (pl->target == SIM_TARGET_CLAIM)
                        out->on_new++;
                else if (pl->target == SIM_TARGET_UNPLACED)
                        out->unplaced++;
                else if ((pl->target == SIM_TARGET_NODE && r->in->nodes[pl->index]->in_flight) ||
                         pl->target == SIM_TARGET_BOUND)
                        out->on_inflight++;
                else if (pl->target == SIM_TARGET_NODE)
                        out->on_nodes++;
        }
}

/* Pools whose launches on a host are paused keep off that host this round. */
static int exclude_backoff(struct provisioner *p, struct provisioner_round *r) {
        for (size_t i = 0; p->env.backoff_active && i < r->in->n_pools; i++) {
                json_t *hosts = json_array();
                for (size_t h = 0; hosts && h < r->in->n_hosts; h++)
                        if (p->env.backoff_active(p->env.userdata, r->in->pools[i]->name, r->in->hosts[h]->name))
                                json_array_append_new(hosts, json_string(r->in->hosts[h]->name));
                int rc = hosts ? provisioner_round_exclude_hosts(r, i, hosts) : -ENOMEM;
                json_decref(hosts);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

/* The region's PCI resource mappings when a node class of the round has pciDevices, else NULL (no call). A region
 * whose mappings cannot be read gets an empty list: no host there has a free device this round. */
static json_t *pci_mappings(struct provisioner *p, const struct provisioner_round *r, size_t ci) {
        bool needed = false;
        json_t *maps = NULL;
        for (size_t i = 0; i < r->in->n_classes; i++)
                needed |= r->in->classes[i]->n_pci > 0;
        if (!needed || !pve_for(p, ci))
                return NULL;
        if (pve_pci_mappings(pve_for(p, ci), &maps) < 0) {
                call_failed(p, STATS_PVE_ERRORS, "region %s: PCI mappings: %s", p->env.cfg->clusters[ci].region,
                            pve_client_error(pve_for(p, ci)));
                return json_array();
        }
        return maps;
}

/* Host room into the round, every region's online hosts; pools keep off the hosts where their launches pause. */
static int add_hosts(struct provisioner *p, struct provisioner_round *r, const struct provisioner_snapshot *snap,
                     struct provisioner_outcome *out) {
        struct provisioner_shapes shapes;
        if (provisioner_shapes_collect(r, &shapes) < 0)
                return -ENOMEM;
        struct host_ctx hc = { p, r, snap, &shapes, out, 0 };
        struct host_fetches f = { .p = p, .shapes = &shapes };
        json_t *maps[p->env.cfg->n_clusters + 1];
        for (size_t i = 0; i < p->env.cfg->n_clusters; i++) {
                size_t first = f.n;
                list_region(p, i, &f);
                maps[i] = f.n > first ? pci_mappings(p, r, i) : NULL;
                for (size_t k = first; k < f.n; k++)
                        f.items[k].pci_mappings = maps[i];
        }
        for (size_t i = 0; p->env.cfg->agents.enabled && i < f.n; i++)
                f.items[i].agent = agent_find(p, f.items[i].region, f.items[i].host);
        fetch_rooms(p, &f);
        for (size_t i = 0; i < f.n; i++) {
                add_host(&hc, &f.items[i]);
                json_decref(f.items[i].room);
                json_decref(f.items[i].vmids);
                free(f.items[i].host);
        }
        free(f.items);
        for (size_t i = 0; i < p->env.cfg->n_clusters; i++)
                json_decref(maps[i]);
        provisioner_shapes_done(&shapes);
        stats_set(p->env.stats, STATS_AGENTS_UNAVAILABLE, hc.agents_down);
        return exclude_backoff(p, r);
}

static int plan(struct provisioner *p, struct provisioner_round *r, const struct provisioner_snapshot *snap,
                struct provisioner_outcome *out) {
        struct sim_result *res = NULL;
        int rc = add_hosts(p, r, snap, out);
        if (rc == 0)
                rc = simulate(p, r, &res, out);
        if (rc < 0)
                return rc;
        count(r, res, out);
        char **names = calloc(res->n_claims + 1, sizeof *names);
        if (names) {
                create_claims(p, r, res, NULL, names, out);
                tell_pods(p, r, res, names, out);
                track_refusals(p, r, res, names, snap->now_ms);
                update_pools(p, r, res, out);
                for (size_t i = 0; i < res->n_claims; i++)
                        free(names[i]);
        }
        free(names);
        simulate_result_free(res);
        return names ? 0 : -ENOMEM;
}

/* After a restart: what earlier rounds told pods, from our Nominated events (the in-memory record is gone). */
static void seed_verdicts(struct provisioner *p) {
        json_t *list = NULL;
        struct kube_list_options o = { .field_selector = "reason=" PROVISIONER_REASON_NOMINATED };
        p->seeded = true;
        if (kube_list(p->env.kube, &kube_events, NULL, &o, &list) < 0) {
                call_failed(p, STATS_KUBE_ERRORS, "list Nominated events: %s", kube_client_error(p->env.kube));
                return;
        }
        json_t *newest = json_object(); /* uid → resourceVersion of the event kept */
        size_t i;
        json_t *ev;
        json_array_foreach(json_object_get(list, "items"), i, ev) {
                struct kube_event e;
                kube_event_decode(ev, &e);
                const char *comp = e.source_component, *uid = e.involved_uid, *msg = e.message;
                const char *rv = e.meta.resource_version;
                const char *at = msg ? strstr(msg, "nodeclaim/") : NULL;
                long long v = rv ? strtoll(rv, NULL, 10) : 0;
                char verdict[300];
                if (!comp || strcmp(comp, COMPONENT) != 0 || !uid || !at ||
                    (json_object_get(newest, uid) && json_integer_value(json_object_get(newest, uid)) > v))
                        continue;
                snprintf(verdict, sizeof verdict, "nominated:%.*s", (int)strcspn(at + 10, " "), at + 10);
                json_object_set_new(p->verdicts, uid, json_string(verdict));
                json_object_set_new(newest, uid, json_integer(v));
        }
        json_decref(newest);
        json_decref(list);
}

/* {"<pod uid>": "<claim>"} from the verdicts. */
static json_t *nominations(const struct provisioner *p) {
        json_t *out = json_object();
        const char *key;
        json_t *v;
        json_object_foreach(p->verdicts, key, v) {
                const char *s = json_string_value(v);
                if (s && strncmp(s, "nominated:", 10) == 0)
                        json_object_set_new(out, key, json_string(s + 10));
        }
        return out;
}

int provisioner_run(struct provisioner *p, const struct provisioner_snapshot *snap, struct provisioner_outcome *ret) {
        struct provisioner_outcome out = { 0 };
        struct provisioner_round *r;
        latency_waits_now(&p->round_waits0);
        if (!p->seeded)
                seed_verdicts(p);
        struct provisioner_snapshot s = *snap;
        json_t *nominated = nominations(p), *skip = provisioner_refusals_due(p->refusals, snap->now_ms);
        s.nominated = nominated;
        s.skip_nodes = skip;
        s.reschedule_leaving = true;
        int rc = provisioner_round_new(&s, &r);
        if (rc < 0) {
                json_decref(nominated);
                json_decref(skip);
                return log_error_errno(rc, "cannot build the simulation input");
        }
        log_problems(p, r->problems);
        rc = plan(p, r, &s, &out);
        provisioner_round_free(r);
        json_decref(nominated);
        json_decref(skip);
        stats_add(p->env.stats, STATS_BATCHES, 1);
        if (rc == 0)
                *ret = out;
        return rc;
}

int provisioner_update_usage(struct provisioner *p, const struct provisioner_snapshot *snap) {
        struct provisioner_round *r;
        struct provisioner_outcome out = { 0 };
        int rc = provisioner_round_new(snap, &r);
        if (rc < 0)
                return log_error_errno(rc, "NodePool usage: cannot build the simulation input");
        update_pools(p, r, NULL, &out);
        provisioner_round_free(r);
        return out.failures ? -EIO : 0;
}

/* ---- replacements (the scale-down pass) ---- */

int provisioner_add_hosts(struct provisioner *p, struct provisioner_round *r, const struct provisioner_snapshot *snap) {
        struct provisioner_outcome out = { 0 };
        return add_hosts(p, r, snap, &out);
}

size_t provisioner_create_replacements(struct provisioner *p, const struct provisioner_round *r,
                                       const struct sim_result *res, const json_t *annotations, char **names) {
        struct provisioner_outcome out = { 0 };
        latency_waits_now(&p->round_waits0);
        create_claims(p, r, res, annotations, names, &out);
        return out.claims_created;
}
