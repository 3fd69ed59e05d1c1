/* provisioner_room: a PVE host's free room for the simulation, from its agent's answers or from Proxmox's own
 * accounting, and the charge of VMs planned but not yet known to the host. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpuset.h"
#include "provisioner.h"
#include "pve.h"

static int64_t int_at(const json_t *o, const char *key, int64_t dflt) {
        json_t *v = json_object_get(o, key);
        return json_is_number(v) ? (int64_t)json_number_value(v) : dflt;
}

static json_t *host_base(const char *host, const char *region, int64_t cpus, int64_t mem) {
        json_t *h = json_pack("{s:s, s:I, s:I}", "name", host, "free_cpus", (json_int_t)(cpus < 0 ? 0 : cpus),
                              "free_memory_bytes", (json_int_t)(mem < 0 ? 0 : mem));
        if (h && region)
                json_object_set_new(h, "region", json_string(region));
        return h;
}

/* ---- agents ---- */

/* The number of CPUs of NUMA node id in a /v1/topology answer; 0 when unknown. */
static int64_t topology_node_cpus(const json_t *topology, int64_t id) {
        size_t i;
        json_t *n;
        json_array_foreach(json_object_get(topology, "numa_nodes"), i, n) {
                const char *list = json_string_value(json_object_get(n, "cpus"));
                struct cpuset *set;
                if (int_at(n, "id", -1) != id || !list || cpuset_parse(list, &set) < 0)
                        continue;
                int64_t count = cpuset_count(set);
                cpuset_free(set);
                return count;
        }
        return 0;
}

static json_t *numa_from_capacity(const json_t *capacity, const json_t *topology) {
        json_t *out = json_array();
        size_t i;
        json_t *n;
        json_array_foreach(json_object_get(capacity, "numa_nodes"), i, n) {
                int64_t id = int_at(n, "id", (int64_t)i);
                json_t *o = json_pack("{s:I, s:I, s:I, s:I}", "id", (json_int_t)id, "free_cpus",
                                      (json_int_t)int_at(n, "cpus_free", 0), "total_cpus",
                                      (json_int_t)topology_node_cpus(topology, id), "free_memory_bytes",
                                      (json_int_t)int_at(n, "memory_free_bytes", 0));
                if (!o || json_array_append_new(out, o) < 0) {
                        json_decref(out);
                        return NULL;
                }
        }
        return out;
}

static const struct provisioner_shape *shape_of_offer(const json_t *shape, const struct provisioner_shapes *shapes) {
        int64_t vcpus = int_at(shape, "vcpus", -1), mem = int_at(shape, "memory_bytes", -1);
        int64_t hp = int_at(shape, "hugepage_kib", 0);
        for (size_t i = 0; shapes && i < shapes->n; i++) {
                const struct provisioner_shape *s = &shapes->items[i];
                if ((int64_t)s->vcpus == vcpus && (int64_t)s->memory_bytes == mem && (int64_t)s->hugepage_kib == hp)
                        return s;
        }
        return NULL;
}

/* One named offer: {"shape": name, "count", "preferred_count", "fallback"} and the agent's "score" when it
 * gave one (0-100). An agent that gives no preferred_count: all of count, or none when fallback. */
static json_t *named_offer(const char *name, const json_t *o) {
        int64_t count = int_at(o, "count", 0);
        bool fallback = json_is_true(json_object_get(o, "fallback"));
        int64_t preferred = int_at(o, "preferred_count", fallback ? 0 : count);
        const json_t *score = json_object_get(o, "score");
        count = count < 0 ? 0 : count;
        if (preferred < 0)
                preferred = 0;
        else if (preferred > count)
                preferred = count;
        json_t *out = json_pack("{s:s, s:I, s:I, s:b}", "shape", name, "count", (json_int_t)count, "preferred_count",
                                (json_int_t)preferred, "fallback", fallback);
        double v = json_is_number(score) ? json_number_value(score) : -1;
        if (out && v >= 0 && v <= 100 && json_object_set_new(out, "score", json_real(v)) < 0) {
                json_decref(out);
                return NULL;
        }
        return out;
}

/* {"offers": [{"count", "preferred_count", "score", "fallback", "shape": {"vcpus", "memory_bytes"}}]} →
 * [{"shape": name, "count", "preferred_count", "score", "fallback"}] for every name. */
static json_t *offers_by_name(const json_t *offers, const struct provisioner_shapes *shapes) {
        json_t *out = json_array();
        size_t i;
        json_t *o;
        json_array_foreach(json_object_get(offers, "offers"), i, o) {
                const struct provisioner_shape *s = shape_of_offer(json_object_get(o, "shape"), shapes);
                for (size_t k = 0; out && s && k < s->n_names; k++)
                        if (json_array_append_new(out, named_offer(s->names[k], o)) < 0) {
                                json_decref(out);
                                out = NULL;
                        }
        }
        return out;
}

json_t *provisioner_host_from_agent(const char *host, const char *region, const json_t *capacity,
                                    const json_t *offers, const json_t *topology,
                                    const struct provisioner_shapes *shapes) {
        int64_t cpus = int_at(capacity, "cpus_free", -1), mem = int_at(capacity, "memory_free_bytes", -1);
        if (!host || cpus < 0 || mem < 0)
                return NULL;
        json_t *h = host_base(host, region, cpus, mem);
        json_t *numa = h ? numa_from_capacity(capacity, topology) : NULL;
        if (!numa || json_object_set_new(h, "numa", numa) < 0) {
                json_decref(h);
                return NULL;
        }
        if (json_is_object(offers)) {
                json_t *by_name = offers_by_name(offers, shapes);
                if (!by_name || json_object_set_new(h, "offers", by_name) < 0) {
                        json_decref(h);
                        return NULL;
                }
        }
        return h;
}

/* ---- Proxmox accounting ---- */

/* What one VM of a /nodes/{n}/qemu list takes: cores x sockets from its config when the list carries them,
 * else cpus (PVE) or maxcpu; memory maxmem. */
static void vm_size(const json_t *vm, int64_t *cpus, int64_t *mem) {
        int64_t cores = int_at(vm, "cores", 0), sockets = int_at(vm, "sockets", 1);
        *cpus = cores > 0 ? cores * (sockets > 0 ? sockets : 1) : int_at(vm, "cpus", int_at(vm, "maxcpu", 0));
        *mem = int_at(vm, "maxmem", 0);
}

json_t *provisioner_host_from_pve(const char *host, const char *region, const json_t *node_status,
                                  const json_t *vm_list) {
        int64_t cpus = int_at(json_object_get(node_status, "cpuinfo"), "cpus", -1);
        int64_t mem = int_at(json_object_get(node_status, "memory"), "total", -1);
        if (!host || cpus <= 0 || mem <= 0)
                return NULL;
        size_t i;
        json_t *vm;
        json_array_foreach(vm_list, i, vm) {
                int64_t c, m;
                if (int_at(vm, "template", 0) == 1)
                        continue;
                vm_size(vm, &c, &m);
                cpus -= c;
                mem -= m;
        }
        return host_base(host, region, cpus, mem);
}

/* ---- PCI devices ---- */

static void count_down(json_t *free_by_mapping, const char *mapping) {
        json_t *v = mapping ? json_object_get(free_by_mapping, mapping) : NULL;
        if (json_integer_value(v) > 0)
                json_integer_set(v, json_integer_value(v) - 1);
}

/* One running VM's hostpciN entries taken out of free_by_mapping. */
static void config_holds(const json_t *config, const json_t *paths, json_t *free_by_mapping) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)config, key, v) {
                char buf[1024], full[PVE_PCI_PATH_MAX];
                const char *s = json_string_value(v);
                if (strncmp(key, "hostpci", 7) != 0 || !s)
                        continue;
                if (pve_prop_get(s, "mapping", NULL, buf, sizeof buf)) {
                        count_down(free_by_mapping, buf);
                } else if (pve_prop_get(s, "host", "host", buf, sizeof buf)) {
                        pve_pci_full_path(buf, strcspn(buf, ";"), full, sizeof full);
                        count_down(free_by_mapping, json_string_value(json_object_get(paths, full)));
                }
        }
}

json_t *provisioner_pci_free(const json_t *mappings, const char *host, const json_t *configs) {
        json_t *paths = json_object(), *out = json_object();
        size_t i;
        json_t *m;
        if (!paths || !out || !host) {
                json_decref(paths);
                json_decref(out);
                return NULL;
        }
        json_array_foreach(mappings, i, m) {
                const char *id = json_string_value(json_object_get(m, "id"));
                json_t *list = id ? pve_mapping_paths(mappings, id, host) : NULL, *path;
                size_t k;
                json_array_foreach(list, k, path)
                        json_object_set_new(paths, json_string_value(path), json_string(id));
                json_decref(list);
        }
        const char *path;
        json_object_foreach(paths, path, m) {
                const char *id = json_string_value(m);
                json_object_set_new(out, id, json_integer(json_integer_value(json_object_get(out, id)) + 1));
        }
        json_array_foreach(configs, i, m)
                config_holds(m, paths, out);
        json_decref(paths);
        return out;
}

/* ---- charges ---- */

static const struct provisioner_shape *shape_named(const struct provisioner_shapes *shapes, const char *name) {
        for (size_t i = 0; shapes && name && i < shapes->n; i++)
                for (size_t k = 0; k < shapes->items[i].n_names; k++)
                        if (strcmp(shapes->items[i].names[k], name) == 0)
                                return &shapes->items[i];
        return NULL;
}

static void cap_offers(json_t *host, int64_t cpus, int64_t mem, const struct provisioner_shapes *shapes) {
        size_t i;
        json_t *o;
        json_array_foreach(json_object_get(host, "offers"), i, o) {
                const struct provisioner_shape *s = shape_named(shapes, json_string_value(json_object_get(o, "shape")));
                int64_t count = int_at(o, "count", 0);
                if (!s || s->vcpus == 0 || s->memory_bytes == 0)
                        continue;
                int64_t by_cpu = cpus / (int64_t)s->vcpus, by_mem = mem / (int64_t)s->memory_bytes;
                int64_t cap = by_cpu < by_mem ? by_cpu : by_mem;
                if (count > cap)
                        json_object_set_new(o, "count", json_integer(cap));
                if (int_at(o, "preferred_count", 0) > cap)
                        json_object_set_new(o, "preferred_count", json_integer(cap));
        }
}

void provisioner_host_charge(json_t *host, uint32_t vcpus, uint64_t memory_bytes,
                             const struct provisioner_shapes *shapes) {
        int64_t cpus = int_at(host, "free_cpus", 0) - (int64_t)vcpus;
        int64_t mem = int_at(host, "free_memory_bytes", 0) - (int64_t)memory_bytes;
        cpus = cpus < 0 ? 0 : cpus;
        mem = mem < 0 ? 0 : mem;
        json_object_set_new(host, "free_cpus", json_integer(cpus));
        json_object_set_new(host, "free_memory_bytes", json_integer(mem));
        cap_offers(host, cpus, mem, shapes);
}

/* ---- agents that do not answer ---- */

enum provisioner_agent_state provisioner_agent_state_of(long status) {
        if (status == 0)
                return PROVISIONER_AGENT_UNREACHABLE;
        return status == 401 || status == 403 ? PROVISIONER_AGENT_UNAUTHORIZED : PROVISIONER_AGENT_ERROR;
}

int provisioner_agent_message(char *buf, size_t len, const char *region, const char *host, const char *url,
                              enum provisioner_agent_state st, const char *error, bool fallback) {
        static const char *const why[] = {
                [PROVISIONER_AGENT_UNREACHABLE] = "did not answer",
                [PROVISIONER_AGENT_UNAUTHORIZED] = "refused the coordinator's token (agents.token_file is not the "
                                                   "host's token)",
                [PROVISIONER_AGENT_ERROR] = "answered with an error",
        };
        if (st == PROVISIONER_AGENT_OK)
                return snprintf(buf, len, "Host %s (region %s): its agent at %s answers again; placement uses it",
                                host, region, url ? url : "?");
        return snprintf(buf, len, "Host %s (region %s) %s: its agent at %s %s (%s)", host, region,
                        fallback ? "is placed by Proxmox's accounting, its VMs unpinned" : "is left out of placement",
                        url ? url : "?", why[st], error && *error ? error : "no usable answer");
}
