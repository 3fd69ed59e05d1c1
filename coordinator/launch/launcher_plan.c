/* launcher_plan: pure helpers of the launcher (config values, tags, description, owner, boot disk, fallback
 * accounting, back-off, times and NodeClaim conditions). No I/O. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_plan.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cloudinit.h"
#include "kube.h"
#include "kube_types.h"
#include "pve.h"
#include "rfc3339.h"

#define MIB (1024ULL * 1024ULL)

/* ---- placement ---- */

static json_t *numa_entry_from_agent(const json_t *e, int *ret_err) {
        json_t *node = json_object_get(e, "node"), *cpus = json_object_get(e, "guest_cpus");
        json_t *mem = json_object_get(e, "memory_bytes");
        if (!json_is_integer(node) || json_integer_value(node) < 0 || !json_is_string(cpus) || !json_is_integer(mem) ||
            json_integer_value(mem) <= 0 || json_integer_value(mem) % (json_int_t)MIB != 0) {
                *ret_err = -EINVAL;
                return NULL;
        }
        json_t *o = json_pack("{s:I, s:O, s:I}", "hostNode", json_integer_value(node), "guestCPUs", cpus, "memoryMiB",
                              json_integer_value(mem) / (json_int_t)MIB);
        if (!o)
                *ret_err = -ENOMEM;
        return o;
}

json_t *launcher_placement_numa_from_agent(const json_t *agent_numa, int *ret_err) {
        size_t i;
        json_t *e, *out = json_array();
        if (!out || (agent_numa && !json_is_array(agent_numa))) {
                json_decref(out);
                *ret_err = out ? -EINVAL : -ENOMEM;
                return NULL;
        }
        json_array_foreach(agent_numa, i, e) {
                json_t *o = numa_entry_from_agent(e, ret_err);
                if (!o || i >= LAUNCHER_MAX_NUMA || json_array_append_new(out, o) < 0) {
                        *ret_err = o ? -EINVAL : *ret_err;
                        json_decref(out);
                        return NULL;
                }
        }
        return out;
}

static bool valid_cpulist(const char *s) {
        if (!*s || strlen(s) >= sizeof(((struct launcher_numa *)0)->guest_cpus))
                return false;
        for (; *s; s++)
                if (!isdigit((unsigned char)*s) && *s != '-' && *s != ',')
                        return false;
        return true;
}

int launcher_numa_parse(const json_t *numa, struct launcher_numa *ret, size_t *ret_n) {
        size_t i, n = json_array_size(numa);
        json_t *e;
        if ((numa && !json_is_array(numa)) || n > LAUNCHER_MAX_NUMA)
                return -EINVAL;
        json_array_foreach(numa, i, e) {
                json_t *node = json_object_get(e, "hostNode"), *mem = json_object_get(e, "memoryMiB");
                const char *cpus = json_string_value(json_object_get(e, "guestCPUs"));
                if (!json_is_integer(node) || json_integer_value(node) < 0 || !json_is_integer(mem) ||
                    json_integer_value(mem) <= 0 || !cpus || !valid_cpulist(cpus))
                        return -EINVAL;
                ret[i].host_node = (unsigned)json_integer_value(node);
                ret[i].memory_mib = (uint64_t)json_integer_value(mem);
                snprintf(ret[i].guest_cpus, sizeof ret[i].guest_cpus, "%s", cpus);
        }
        *ret_n = n;
        return 0;
}

static int append_delete(char **deletes, const char *key) {
        size_t old = *deletes ? strlen(*deletes) : 0;
        char *s = realloc(*deletes, old + strlen(key) + 2);
        if (!s)
                return -ENOMEM;
        sprintf(s + old, "%s%s", old ? "," : "", key);
        *deletes = s;
        return 0;
}

static int add_numa_entry(struct pve_params *p, size_t i, const struct launcher_numa *e) {
        char key[32], cpus[64];
        snprintf(key, sizeof key, "numa%zu", i);
        snprintf(cpus, sizeof cpus, "%s", e->guest_cpus);
        for (char *c = cpus; *c; c++)
                if (*c == ',')
                        *c = ';'; /* PVE separates guest CPU ranges with ';' */
        return pve_params_addf(p, key, "cpus=%s,hostnodes=%u,memory=%" PRIu64 ",policy=bind", cpus, e->host_node,
                               e->memory_mib);
}

int launcher_numa_params(const struct launcher_numa *numa, size_t n, uint64_t vm_memory_mib,
                         const json_t *current_config, struct pve_params *p, char **deletes) {
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++)
                sum += numa[i].memory_mib;
        if (n > 0 && sum != vm_memory_mib)
                return -ERANGE;
        pve_params_add_int(p, "numa", 1);
        for (size_t i = 0; i < n; i++)
                add_numa_entry(p, i, &numa[i]);
        for (size_t k = n; k < LAUNCHER_MAX_NUMA; k++) {
                char key[32];
                snprintf(key, sizeof key, "numa%zu", k);
                if (json_object_get(current_config, key) && append_delete(deletes, key) < 0)
                        return -ENOMEM;
        }
        return p->error;
}

/* ---- net queues ---- */

char *launcher_net_with_queues(const char *net, unsigned queues) {
        size_t len = strlen(net);
        char *out = malloc(len + 32), *w = out;
        if (!out)
                return NULL;
        const char *s = net;
        while (*s) {
                const char *end = strchr(s, ',');
                size_t n = end ? (size_t)(end - s) : strlen(s);
                if (!(n >= 7 && strncmp(s, "queues=", 7) == 0)) {
                        w += sprintf(w, "%s%.*s", w == out ? "" : ",", (int)n, s);
                }
                s += n + (end ? 1 : 0);
        }
        sprintf(w, "%squeues=%u", w == out ? "" : ",", queues);
        return out;
}

/* ---- tags ---- */

static bool tag_char(char c, bool first) {
        if (isdigit((unsigned char)c) || (c >= 'a' && c <= 'z') || c == '_')
                return true;
        return !first && (c == '-' || c == '+' || c == '.');
}

static int tag_check(const char *t) {
        if (!*t)
                return -EINVAL;
        for (size_t i = 0; t[i]; i++)
                if (!tag_char((char)tolower((unsigned char)t[i]), i == 0))
                        return -EINVAL;
        return 0;
}

static int tag_add(char *buf, size_t len, const char *tag) {
        char low[256];
        size_t n = strlen(tag);
        if (n >= sizeof low || tag_check(tag) < 0)
                return -EINVAL;
        for (size_t i = 0; i <= n; i++)
                low[i] = (char)tolower((unsigned char)tag[i]);
        char *dup = strdup(buf), *save = NULL;
        if (!dup)
                return -ENOMEM;
        bool seen = false;
        for (char *t = strtok_r(dup, ";", &save); t && !seen; t = strtok_r(NULL, ";", &save))
                seen = strcmp(t, low) == 0;
        free(dup);
        if (seen)
                return 0;
        size_t used = strlen(buf);
        if (used + n + 2 > len)
                return -ENAMETOOLONG;
        sprintf(buf + used, "%s%s", used ? ";" : "", low);
        return 0;
}

/* Is every tag of a in b (without case)? */
static bool tags_within(const char *a, const char *b) {
        for (const char *s = a; s && *s;) {
                size_t len = strcspn(s, ";, ");
                bool found = len == 0;
                for (const char *t = b; !found && t && *t;) {
                        size_t n = strcspn(t, ";, ");
                        found = n == len && strncasecmp(s, t, len) == 0;
                        t += n + (t[n] ? 1 : 0);
                }
                if (!found)
                        return false;
                s += len + (s[len] ? 1 : 0);
        }
        return true;
}

bool launcher_tags_same(const char *a, const char *b) {
        return tags_within(a, b) && tags_within(b, a);
}

char *launcher_tags(const char *nodepool, const char *claim, const json_t *extra, int *ret_err) {
        char buf[2048] = "";
        size_t i;
        json_t *e;
        int r = tag_add(buf, sizeof buf, LAUNCHER_TAG);
        if (r == 0)
                r = tag_add(buf, sizeof buf, nodepool);
        if (r == 0)
                r = tag_add(buf, sizeof buf, claim);
        json_array_foreach(extra, i, e) {
                if (r == 0)
                        r = json_is_string(e) ? tag_add(buf, sizeof buf, json_string_value(e)) : -EINVAL;
        }
        char *out = r == 0 ? strdup(buf) : NULL;
        if (!out)
                *ret_err = r < 0 ? r : -ENOMEM;
        return out;
}

bool launcher_config_tagged(const json_t *config, const char *claim) {
        const char *tags = json_string_value(json_object_get(config, "tags"));
        size_t n = claim ? strlen(claim) : 0;
        for (const char *t = tags; n && t && *t;) {
                size_t len = strcspn(t, ";, ");
                if (len == n && strncasecmp(t, claim, n) == 0)
                        return true;
                t += len + (t[len] ? 1 : 0);
        }
        return false;
}

/* ---- description and owner ---- */

/* "key: value\n" when value is given, else "". malloc'd or NULL. */
static char *optional_line(const char *key, const char *value) {
        char *out = NULL;
        if (!value || !*value)
                return strdup("");
        return asprintf(&out, "%s: %s\n", key, value) < 0 ? NULL : out;
}

char *launcher_description(const char *claim, const char *uid, int64_t created_ms, const char *reservation_id,
                           const char *cpus) {
        char when[32], *out = NULL;
        char *rid = optional_line("reservation", reservation_id), *pinned = optional_line("cpus", cpus);
        rfc3339_format(created_ms, when, sizeof when);
        if (rid && pinned &&
            asprintf(&out,
                     LAUNCHER_DESCRIPTION_MARK ": %s\nuid: %s\ncreated: %s\n%s%s" LAUNCHER_UUID_LINE ": uid\n"
                     "Managed by pvescale: deleted with its NodeClaim, or as an orphan 10 minutes after it is gone.\n",
                     claim, uid, when, rid, pinned) < 0)
                out = NULL;
        free(rid);
        free(pinned);
        return out;
}

/* The value of "key: value" at the start of a line, copied into buf. */
static bool line_value(const char *text, const char *key, char *buf, size_t len) {
        size_t klen = strlen(key);
        for (const char *s = text; s && *s; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : NULL) {
                if (strncmp(s, key, klen) != 0 || s[klen] != ':')
                        continue;
                const char *v = s + klen + 1;
                while (*v == ' ')
                        v++;
                size_t n = strcspn(v, "\r\n");
                if (n == 0 || n >= len)
                        return false;
                memcpy(buf, v, n);
                buf[n] = '\0';
                return true;
        }
        return false;
}

int launcher_description_parse(const char *text, char uid[LAUNCHER_UID_MAX], int64_t *ret_created_ms) {
        char name[LAUNCHER_NAME_MAX], u[LAUNCHER_UID_MAX], when[64];
        int64_t ms = -1;
        if (!text || !line_value(text, LAUNCHER_DESCRIPTION_MARK, name, sizeof name) ||
            !line_value(text, "uid", u, sizeof u))
                return -ENOENT;
        if (line_value(text, "created", when, sizeof when) && rfc3339_parse(when, &ms) < 0)
                ms = -1;
        memcpy(uid, u, sizeof u);
        *ret_created_ms = ms;
        return 0;
}

bool launcher_description_names_uuid(const char *text) {
        char v[8];
        return text && line_value(text, LAUNCHER_UUID_LINE, v, sizeof v) && strcmp(v, "uid") == 0;
}

/* ---- SMBIOS UUID ---- */

char *launcher_smbios1(const char *current, const char *uuid) {
        char *out = NULL;
        size_t len = current ? strlen(current) : 0, at = 0;
        char *rest = calloc(1, len + 2);
        for (const char *s = current; rest && s && *s;) { /* every field but uuid=, comma-separated */
                size_t n = strcspn(s, ",");
                if (n && strncmp(s, "uuid=", 5) != 0)
                        at += (size_t)sprintf(rest + at, ",%.*s", (int)n, s);
                s += n + (s[n] ? 1 : 0);
        }
        if (rest && asprintf(&out, "uuid=%s%s", uuid, rest) < 0)
                out = NULL;
        free(rest);
        return out;
}

bool launcher_config_uuid_is(const json_t *config, const char *uuid) {
        const char *s = json_string_value(json_object_get(config, "smbios1"));
        size_t n = uuid ? strlen(uuid) : 0;
        while (n && s && *s) {
                size_t len = strcspn(s, ",");
                if (len == 5 + n && strncmp(s, "uuid=", 5) == 0 && strncasecmp(s + 5, uuid, n) == 0)
                        return true;
                s += len + (s[len] ? 1 : 0);
        }
        return false;
}

int launcher_owner(const char *claim, const char *uid, char *buf, size_t len) {
        int n = snprintf(buf, len, LAUNCHER_OWNER_PREFIX "%s/%.*s", uid, 200, claim);
        return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int launcher_owner_uid(const char *owner, char uid[LAUNCHER_UID_MAX]) {
        size_t plen = strlen(LAUNCHER_OWNER_PREFIX);
        if (!owner || strncmp(owner, LAUNCHER_OWNER_PREFIX, plen) != 0)
                return -ENOENT;
        const char *s = owner + plen, *slash = strchr(s, '/');
        size_t n = slash ? (size_t)(slash - s) : strlen(s);
        if (n == 0 || n >= LAUNCHER_UID_MAX)
                return -ENOENT;
        memcpy(uid, s, n);
        uid[n] = '\0';
        return 0;
}

/* ---- disks ---- */

static bool is_disk_key(const char *k) {
        static const char *const buses[] = { "scsi", "virtio", "sata", "ide", NULL };
        for (size_t i = 0; buses[i]; i++) {
                size_t n = strlen(buses[i]);
                if (strncmp(k, buses[i], n) == 0 && isdigit((unsigned char)k[n]))
                        return true;
        }
        return false;
}

static int size_bytes(const char *v, uint64_t *ret) {
        const char *s = strstr(v, "size=");
        if (!s) {
                *ret = 0;
                return 0;
        }
        char *end;
        double x = strtod(s + 5, &end);
        static const char units[] = "KMGT";
        const char *u = *end ? strchr(units, *end) : NULL;
        double mult = 1;
        for (const char *p = units; u && p <= u; p++)
                mult *= 1024;
        *ret = (uint64_t)(x * mult);
        return 0;
}

static bool disk_ok(const json_t *config, const char *key) {
        const char *v = json_string_value(json_object_get(config, key));
        return v && is_disk_key(key) && !strstr(v, "media=cdrom");
}

static int boot_order_disk(const json_t *config, char key[16]) {
        const char *boot = json_string_value(json_object_get(config, "boot"));
        const char *order = boot ? strstr(boot, "order=") : NULL;
        if (!order)
                return -ENOENT;
        order += 6;
        while (*order && *order != ',') {
                size_t n = strcspn(order, ";,");
                if (n > 0 && n < 16) {
                        memcpy(key, order, n);
                        key[n] = '\0';
                        if (disk_ok(config, key))
                                return 0;
                }
                order += n + (order[n] == ';' ? 1 : 0);
                if (n == 0)
                        break;
        }
        return -ENOENT;
}

int launcher_boot_disk(const json_t *config, char key[16], uint64_t *ret_bytes) {
        static const char *const fallback[] = { "scsi0", "virtio0", "sata0", "ide0", NULL };
        char k[16];
        int r = boot_order_disk(config, k);
        for (size_t i = 0; r < 0 && fallback[i]; i++) {
                if (disk_ok(config, fallback[i])) {
                        snprintf(k, sizeof k, "%s", fallback[i]);
                        r = 0;
                }
        }
        if (r < 0)
                return r;
        size_bytes(json_string_value(json_object_get(config, k)), ret_bytes);
        memcpy(key, k, sizeof k);
        return 0;
}

int launcher_disk_size(const char *size, char arg[32], uint64_t *ret_bytes) {
        char *end;
        if (!size || !isdigit((unsigned char)size[0]))
                return -EINVAL;
        unsigned long long n = strtoull(size, &end, 10);
        uint64_t mult;
        if (strcmp(end, "G") == 0 || strcmp(end, "Gi") == 0)
                mult = 1ULL << 30;
        else if (strcmp(end, "T") == 0 || strcmp(end, "Ti") == 0)
                mult = 1ULL << 40;
        else
                return -EINVAL;
        if (n == 0 || n > (1ULL << 20))
                return -EINVAL;
        snprintf(arg, 32, "%llu%c", n, end[0]);
        *ret_bytes = n * mult;
        return 0;
}

/* ---- fallback accounting ---- */

static bool skipped(uint32_t vmid, const uint32_t *skip, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (skip[i] == vmid)
                        return true;
        return false;
}

static int64_t vm_cpus(const json_t *vm) {
        json_t *c = json_object_get(vm, "cpus");
        if (!c)
                c = json_object_get(vm, "maxcpu");
        return json_is_number(c) ? (int64_t)json_number_value(c) : 0;
}

int launcher_room_from_pve(const json_t *node_status, const json_t *vms, const uint32_t *skip_vmids, size_t n_skip,
                           int64_t inflight_cpus, int64_t inflight_bytes, struct launcher_room *ret) {
        struct pve_node_status st;
        pve_node_status_decode(node_status, &st);
        const json_t *cpus = st.cpus, *mem = st.memory_total;
        size_t i;
        json_t *vm;
        if (!json_is_integer(cpus) || !json_is_integer(mem) || !json_is_array(vms))
                return -EINVAL;
        struct launcher_room room = { json_integer_value(cpus) - inflight_cpus,
                                      json_integer_value(mem) - inflight_bytes };
        json_array_foreach(vms, i, vm) {
                json_int_t id = json_integer_value(json_object_get(vm, "vmid"));
                json_t *tmpl = json_object_get(vm, "template");
                if ((tmpl && json_is_true(tmpl)) || json_integer_value(tmpl) == 1 || id <= 0 ||
                    skipped((uint32_t)id, skip_vmids, n_skip))
                        continue;
                room.cpus -= vm_cpus(vm);
                room.memory_bytes -= (int64_t)json_integer_value(json_object_get(vm, "maxmem"));
        }
        *ret = room;
        return 0;
}

/* ---- conditions ---- */

int launcher_condition_set(json_t *status, const char *type, const char *cstatus, const char *reason,
                           const char *message, int64_t now_ms) {
        json_t *conds = json_object_get(status, "conditions");
        char when[32];
        if (!json_is_array(conds)) {
                conds = json_array();
                if (!conds || json_object_set_new(status, "conditions", conds) < 0)
                        return -ENOMEM;
        }
        json_t *c = (json_t *)kube_condition(status, type);
        if (!c) {
                c = json_pack("{s:s}", "type", type);
                if (!c || json_array_append_new(conds, c) < 0)
                        return -ENOMEM;
        }
        const char *old = json_string_value(json_object_get(c, "status"));
        if (!old || strcmp(old, cstatus) != 0)
                json_object_set_new(c, "lastTransitionTime", json_string(rfc3339_format(now_ms, when, sizeof when)));
        json_object_set_new(c, "status", json_string(cstatus));
        json_object_set_new(c, "reason", json_string(reason));
        json_object_set_new(c, "message", json_string(message ? message : ""));
        return 0;
}

enum launcher_node_state launcher_node_state(const json_t *node, const json_t *startup_taints) {
        const json_t *taints = kube_node_of(node).taints;
        bool ephemeral = false;
        size_t i;
        json_t *t;
        if (!kube_condition_true(json_object_get(node, "status"), "Ready"))
                return LAUNCHER_NODE_NOT_READY;
        if (kube_taints_have_key(taints, CLOUDINIT_UNREGISTERED_TAINT_KEY))
                return LAUNCHER_NODE_TAINTED;
        json_array_foreach(startup_taints, i, t) {
                const char *k = json_string_value(json_object_get(t, "key"));
                if (k && kube_taints_have_key(taints, k))
                        return LAUNCHER_NODE_TAINTED;
        }
        json_array_foreach(taints, i, t)
                ephemeral = ephemeral || kube_taint_ephemeral(t);
        return ephemeral ? LAUNCHER_NODE_SETTLING : LAUNCHER_NODE_INITIALIZED;
}

int64_t launcher_node_ready_since(const json_t *node) {
        const json_t *status = json_object_get(node, "status");
        int64_t ms;
        if (!kube_condition_true(status, "Ready") ||
            rfc3339_parse(json_string_value(json_object_get(kube_condition(status, "Ready"),
                                                                     "lastTransitionTime")), &ms) < 0)
                return -1;
        return ms;
}

bool launcher_template_managed(const json_t *ref) {
        const char *kind = json_string_value(json_object_get(ref, "kind"));
        return kind && strcmp(kind, "ProxmoxTemplate") == 0;
}
