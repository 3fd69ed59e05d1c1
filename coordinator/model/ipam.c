/* ipam: the allocator: the addresses in use (a sorted set), the lowest free address of each pool, the claim's
 * record of what it got (status.ipconfig) and the .Network data of cloud-init templates. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "ipam.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "ipam_internal.h"

/* ---- the addresses in use ---- */

void ipam_inuse_done(struct ipam_inuse *u) {
        free(u->a);
        *u = (struct ipam_inuse){ 0 };
}

static size_t lower_bound(const struct ipam_inuse *u, const struct ipam_addr *a) {
        size_t lo = 0, hi = u->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (ipam__cmp(&u->a[mid], a) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

static bool ipam_inuse_has(const struct ipam_inuse *u, const struct ipam_addr *a) {
        size_t i = lower_bound(u, a);
        return i < u->n && ipam__cmp(&u->a[i], a) == 0;
}

static int inuse_add(struct ipam_inuse *u, const struct ipam_addr *a) {
        size_t i = lower_bound(u, a);
        if (i < u->n && ipam__cmp(&u->a[i], a) == 0)
                return 0;
        if (u->n == u->cap) {
                size_t cap = u->cap ? u->cap * 2 : 16;
                struct ipam_addr *n = realloc(u->a, cap * sizeof *n);
                if (!n)
                        return -ENOMEM;
                u->a = n;
                u->cap = cap;
        }
        memmove(&u->a[i + 1], &u->a[i], (u->n - i) * sizeof *u->a);
        u->a[i] = *a;
        u->n++;
        return 0;
}

int ipam_inuse_add_text(struct ipam_inuse *u, const char *text) {
        struct ipam_addr a;
        return text && ipam_addr_parse(text, &a) == 0 ? inuse_add(u, &a) : 0;
}

int ipam_inuse_add_ipconfig(struct ipam_inuse *u, const char *ipconfig) {
        char buf[IPAM_IPCONFIG_MAX * 2], *save = NULL;
        int r = 0;
        if (!ipconfig)
                return 0;
        snprintf(buf, sizeof buf, "%s", ipconfig);
        for (char *kv = strtok_r(buf, ",", &save); kv && r == 0; kv = strtok_r(NULL, ",", &save))
                if (strncmp(kv, "ip=", 3) == 0 || strncmp(kv, "ip6=", 4) == 0)
                        r = ipam_inuse_add_text(u, strchr(kv, '=') + 1);
        return r;
}

int ipam_inuse_add_status(struct ipam_inuse *u, const char *status) {
        struct ipam_ipconfig ic[IPAM_MAX_INTERFACES];
        int n = status ? ipam_status_split(status, ic, IPAM_MAX_INTERFACES) : 0, r = 0;
        for (int i = 0; i < n && r == 0; i++)
                r = ipam_inuse_add_ipconfig(u, ic[i].value);
        return r;
}

/* ---- the choice ---- */

struct chosen {
        struct ipam_addr a[IPAM_MAX_INTERFACES * 2];
        size_t n;
};

static bool was_chosen(const struct chosen *ch, const struct ipam_addr *a) {
        for (size_t i = 0; i < ch->n; i++)
                if (ipam__cmp(&ch->a[i], a) == 0)
                        return true;
        return false;
}

static const struct ipam_range *excluded(const struct ipam_pool *p, const struct ipam_addr *a) {
        for (size_t i = 0; i < p->n_exclude; i++)
                if (ipam__in_range(&p->exclude[i], a))
                        return &p->exclude[i];
        return NULL;
}

/* The lowest free address of p's range: 0, or -ENOSPC. Each step passes one address in use, one chosen, the
 * gateway or a whole excluded range, so the search ends after at most that many steps past the answer. */
static int lowest_free(const struct ipam_pool *p, const struct ipam_inuse *used, const struct chosen *ch,
                       struct ipam_addr *ret) {
        struct ipam_addr a = p->range.first;
        for (;;) {
                const struct ipam_range *ex = excluded(p, &a);
                bool taken = ex || (p->has_gw && ipam__cmp(&a, &p->gw) == 0) || ipam_inuse_has(used, &a) ||
                             was_chosen(ch, &a);
                if (!taken) {
                        *ret = a;
                        return 0;
                }
                if (ex)
                        a = ex->last;
                if (ipam__cmp(&a, &p->range.last) >= 0)
                        return -ENOSPC;
                ipam__step(&a, 1);
        }
}

static int append(char *out, size_t outlen, size_t *pos, const char *fmt, const char *a, unsigned prefix,
                  const char *gw_key, const char *gw) {
        int n = snprintf(out + *pos, outlen - *pos, fmt, a, prefix);
        if (n >= 0 && (size_t)n < outlen - *pos && gw)
                n += snprintf(out + *pos + n, outlen - *pos - (size_t)n, ",%s=%s", gw_key, gw);
        if (n < 0 || (size_t)n >= outlen - *pos)
                return -ENOBUFS;
        *pos += (size_t)n;
        return 0;
}

static int pool_failed(const struct ipam_interface *ifc, size_t i, const struct ipam_pool *p, char *err,
                       size_t errlen) {
        char first[64], last[64];
        ipam_addr_format(&p->range.first, first, sizeof first);
        ipam_addr_format(&p->range.last, last, sizeof last);
        return errmsg_set(err, errlen, -ENOSPC, "ipam.ipconfig[%zu] (net%u) %s pool %s-%s: no free address", i,
                          ifc->index, p->net.v6 ? "IPv6" : "IPv4", first, last);
}

/* ip=<a>/<prefix>[,gw=<gw>] of one family, appended to out. */
static int allocate_family(const struct ipam_interface *ifc, size_t i, const struct ipam_pool *p,
                           const struct ipam_inuse *used, struct chosen *ch, char *out, size_t outlen, size_t *pos,
                           char *err, size_t errlen) {
        struct ipam_addr a;
        char text[64], gw[64];
        if (!p->set)
                return 0;
        if (lowest_free(p, used, ch, &a) < 0)
                return pool_failed(ifc, i, p, err, errlen);
        ch->a[ch->n++] = a;
        ipam_addr_format(&a, text, sizeof text);
        if (p->has_gw)
                ipam_addr_format(&p->gw, gw, sizeof gw);
        bool first = out[*pos - 1] == '=';
        const char *fmt = "ip=%s/%u";
        if (p->net.v6)
                fmt = first ? "ip6=%s/%u" : ",ip6=%s/%u";
        return append(out, outlen, pos, fmt, text, p->prefix, p->net.v6 ? "gw6" : "gw", p->has_gw ? gw : NULL);
}

int ipam_allocate(const struct ipam_config *cfg, const struct ipam_inuse *used, char *out, size_t outlen, char *err,
                  size_t errlen) {
        struct chosen ch = { .n = 0 };
        size_t pos = 0;
        int r = 0;
        if (outlen == 0)
                return -ENOBUFS;
        out[0] = '\0';
        for (size_t i = 0; i < cfg->n_ifaces && r == 0; i++) {
                const struct ipam_interface *ifc = &cfg->ifaces[i];
                int n = snprintf(out + pos, outlen - pos, "%sipconfig%u=", i ? " " : "", ifc->index);
                if (n < 0 || (size_t)n >= outlen - pos)
                        return -ENOBUFS;
                pos += (size_t)n;
                r = allocate_family(ifc, i, &ifc->v4, used, &ch, out, outlen, &pos, err, errlen);
                if (r == 0)
                        r = allocate_family(ifc, i, &ifc->v6, used, &ch, out, outlen, &pos, err, errlen);
        }
        if (r < 0)
                out[0] = '\0';
        return r;
}

/* ---- status.ipconfig read back ---- */

int ipam_status_split(const char *status, struct ipam_ipconfig *out, size_t max) {
        size_t n = 0;
        const char *s = status;
        while (*s) {
                size_t len = strcspn(s, " ");
                char *end;
                if (len > 0) {
                        if (n == max || strncmp(s, "ipconfig", 8) != 0)
                                return -EINVAL;
                        unsigned long idx = strtoul(s + 8, &end, 10);
                        size_t vlen = len - (size_t)(end + 1 - s);
                        if (end == s + 8 || *end != '=' || idx > 31 || end + 1 > s + len || vlen >= IPAM_IPCONFIG_MAX)
                                return -EINVAL;
                        out[n].index = (unsigned)idx;
                        memcpy(out[n].value, end + 1, vlen);
                        out[n].value[vlen] = '\0';
                        n++;
                }
                s += len;
                s += *s == ' ';
        }
        return (int)n;
}

/* ---- .Network ---- */

static void set_str(json_t *o, const char *key, const char *v) {
        json_object_set_new(o, key, json_string(v ? v : ""));
}

/* "10.0.0.5/24" into the address and prefix keys of o. */
static void set_cidr(json_t *o, const char *cidr, const char *kaddr, const char *kcidr, const char *kprefix) {
        const char *slash = strchr(cidr, '/');
        json_t *addr = slash ? json_stringn(cidr, (size_t)(slash - cidr)) : json_string(cidr);
        json_object_set_new(o, kaddr, addr ? addr : json_string(""));
        set_str(o, kcidr, cidr);
        json_object_set_new(o, kprefix, json_integer(slash ? atoi(slash + 1) : 0));
}

/* The MAC of "virtio=BC:24:11:00:00:01,bridge=vmbr0". */
static json_t *mac_of(const char *net) {
        const char *eq = net ? strchr(net, '=') : NULL;
        if (!eq || strchr(net, ',') < eq)
                return json_string("");
        return json_stringn(eq + 1, strcspn(eq + 1, ","));
}

static json_t *interface_data(const struct ipam_ipconfig *ic, const json_t *vm_config) {
        char key[16], buf[IPAM_IPCONFIG_MAX], *save = NULL;
        json_t *o = json_object();
        if (!o)
                return NULL;
        snprintf(key, sizeof key, "net%u", ic->index);
        set_str(o, "Name", key);
        json_object_set_new(o, "Index", json_integer(ic->index));
        json_object_set_new(o, "MAC", mac_of(json_string_value(json_object_get(vm_config, key))));
        const char *keys[] = { "IPv4", "IPv4CIDR", "Prefix4", "Gateway4", "IPv6", "IPv6CIDR", "Prefix6", "Gateway6" };
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
                json_object_set_new(o, keys[i], i % 4 == 2 ? json_integer(0) : json_string(""));
        snprintf(buf, sizeof buf, "%s", ic->value);
        for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
                if (strncmp(kv, "ip=", 3) == 0)
                        set_cidr(o, kv + 3, "IPv4", "IPv4CIDR", "Prefix4");
                else if (strncmp(kv, "ip6=", 4) == 0)
                        set_cidr(o, kv + 4, "IPv6", "IPv6CIDR", "Prefix6");
                else if (strncmp(kv, "gw=", 3) == 0)
                        set_str(o, "Gateway4", kv + 3);
                else if (strncmp(kv, "gw6=", 4) == 0)
                        set_str(o, "Gateway6", kv + 4);
        }
        return o;
}

static json_t *words(const char *base, size_t width, size_t n) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
                json_array_append_new(a, json_string(base + i * width));
        return a;
}

json_t *ipam_network_data(const char *status, const struct ipam_config *cfg, const json_t *vm_config) {
        static const struct ipam_config none = { .n_ifaces = 0 };
        struct ipam_ipconfig ic[IPAM_MAX_INTERFACES];
        int n = status ? ipam_status_split(status, ic, IPAM_MAX_INTERFACES) : 0;
        json_t *o = json_object(), *ifs = json_array();
        if (!o || !ifs) {
                json_decref(o);
                json_decref(ifs);
                return NULL;
        }
        for (int i = 0; i < n; i++)
                json_array_append_new(ifs, interface_data(&ic[i], vm_config));
        json_object_set_new(o, "Static", json_boolean(n > 0));
        json_object_set_new(o, "Interfaces", ifs);
        if (!cfg)
                cfg = &none;
        json_object_set_new(o, "Nameservers", words(&cfg->nameservers[0][0], sizeof cfg->nameservers[0],
                                                    cfg->n_nameservers));
        json_object_set_new(o, "SearchDomains", words(&cfg->searchdomains[0][0], sizeof cfg->searchdomains[0],
                                                      cfg->n_searchdomains));
        return o;
}
