/* ipam_config: a NodeClass's spec.ipam parsed into typed pools (subnet, range, gateway, exclusions per interface
 * and family) and addresses read and written as text. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "ipam.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "ipam_internal.h"

const char *ipam_addr_format(const struct ipam_addr *a, char *buf, size_t len) {
        if (!inet_ntop(a->v6 ? AF_INET6 : AF_INET, a->v6 ? a->b : a->b + 12, buf, (socklen_t)len))
                snprintf(buf, len, "?");
        return buf;
}

int ipam_addr_parse(const char *text, struct ipam_addr *ret) {
        char buf[64];
        size_t n = strcspn(text, "/-");
        if (n == 0 || n >= sizeof buf)
                return -EINVAL;
        memcpy(buf, text, n);
        buf[n] = '\0';
        memset(ret, 0, sizeof *ret);
        if (inet_pton(AF_INET, buf, ret->b + 12) == 1)
                return 0;
        ret->v6 = true;
        return inet_pton(AF_INET6, buf, ret->b) == 1 ? 0 : -EINVAL;
}

static unsigned family_bits(bool v6) {
        return v6 ? 128 : 32;
}

/* Bit i (0 = the most significant of the family) of a. */
static void set_host_bits(struct ipam_addr *a, unsigned prefix, bool ones) {
        unsigned off = a->v6 ? 0 : 96;
        for (unsigned i = prefix; i < family_bits(a->v6); i++) {
                unsigned bit = off + i;
                uint8_t m = (uint8_t)(0x80u >> (bit % 8));
                if (ones)
                        a->b[bit / 8] |= m;
                else
                        a->b[bit / 8] &= (uint8_t)~m;
        }
}

static int cmp(const struct ipam_addr *a, const struct ipam_addr *b) {
        if (a->v6 != b->v6)
                return a->v6 ? 1 : -1;
        return memcmp(a->b, b->b, sizeof a->b);
}

static void step(struct ipam_addr *a, int delta) {
        for (int i = 15; i >= 0; i--) {
                uint8_t old = a->b[i];
                a->b[i] = (uint8_t)(old + delta);
                if ((delta > 0 && a->b[i] != 0) || (delta < 0 && old != 0))
                        return;
        }
}

static bool in_range(const struct ipam_range *r, const struct ipam_addr *a) {
        return cmp(a, &r->first) >= 0 && cmp(a, &r->last) <= 0;
}

/* "10.0.0.0/24": the subnet (host bits must be 0, as the seed's ipconfig pools require). */
static int parse_subnet(const char *text, bool v6, struct ipam_pool *p, const char *field, char *err, size_t errlen) {
        const char *slash = strchr(text, '/');
        char *end;
        struct ipam_addr host;
        long prefix = slash ? strtol(slash + 1, &end, 10) : -1;
        if (!slash || ipam_addr_parse(text, &p->net) < 0 || p->net.v6 != v6 || *end || end == slash + 1 || prefix < 1 ||
            prefix > (long)family_bits(v6) - 1)
                return errmsg_invalid(err, errlen, "%s: \"%s\" is not an %s subnet (e.g. %s)", field, text,
                                      v6 ? "IPv6" : "IPv4", v6 ? "fd00:1::/64" : "10.0.0.0/24");
        p->prefix = (unsigned)prefix;
        host = p->net;
        set_host_bits(&host, p->prefix, false);
        if (cmp(&host, &p->net) != 0)
                return errmsg_invalid(err, errlen, "%s: \"%s\" has host bits set: give the subnet, not an address",
                                      field, text);
        p->range.first = p->range.last = p->net;
        step(&p->range.first, 1);
        set_host_bits(&p->range.last, p->prefix, true);
        if (!v6)
                step(&p->range.last, -1);
        if (cmp(&p->range.first, &p->range.last) > 0)
                return errmsg_invalid(err, errlen, "%s: \"%s\" has no host address", field, text);
        p->set = true;
        return 0;
}

static bool in_subnet(const struct ipam_pool *p, const struct ipam_addr *a) {
        struct ipam_addr net = *a;
        if (a->v6 != p->net.v6)
                return false;
        set_host_bits(&net, p->prefix, false);
        return cmp(&net, &p->net) == 0;
}

/* "10.0.0.5" or "10.0.0.5-10.0.0.9", inside the pool's subnet. */
static int parse_range(const char *text, const struct ipam_pool *p, struct ipam_range *ret, const char *field,
                       char *err, size_t errlen) {
        const char *dash = strchr(text, '-');
        char first[64];
        size_t n = dash ? (size_t)(dash - text) : strlen(text);
        if (n >= sizeof first)
                n = sizeof first - 1;
        memcpy(first, text, n);
        first[n] = '\0';
        if (strchr(text, '/') || ipam_addr_parse(first, &ret->first) < 0 ||
            (dash ? ipam_addr_parse(dash + 1, &ret->last) : (ret->last = ret->first, 0)) < 0)
                return errmsg_invalid(err, errlen, "%s: \"%s\" is not an address or a range first-last", field, text);
        if (!in_subnet(p, &ret->first) || !in_subnet(p, &ret->last))
                return errmsg_invalid(err, errlen, "%s: \"%s\" is not inside the subnet", field, text);
        if (cmp(&ret->first, &ret->last) > 0)
                return errmsg_invalid(err, errlen, "%s: \"%s\" ends before it begins", field, text);
        return 0;
}

static const char *str_field(const json_t *o, const char *key) {
        return json_string_value(json_object_get(o, key));
}

static int parse_gateway(const json_t *o, const char *key, struct ipam_pool *p, const char *where, char *err,
                         size_t errlen) {
        const char *gw = str_field(o, key);
        if (!gw)
                return 0;
        if (ipam_addr_parse(gw, &p->gw) < 0 || strchr(gw, '/') || !in_subnet(p, &p->gw))
                return errmsg_invalid(err, errlen, "%s.%s: \"%s\" is not an address inside %s", where, key, gw,
                                      str_field(o, p->net.v6 ? "ip6" : "ip"));
        p->has_gw = true;
        return 0;
}

/* ip/gw/range or ip6/gw6/range6 of one interface. */
static int parse_family(const json_t *o, bool v6, struct ipam_pool *p, const char *where, char *err, size_t errlen) {
        const char *kip = v6 ? "ip6" : "ip", *kgw = v6 ? "gw6" : "gw", *krange = v6 ? "range6" : "range";
        char field[96];
        const char *ip = str_field(o, kip), *range = str_field(o, krange);
        if (!ip) {
                if (json_object_get(o, kgw) || range)
                        return errmsg_invalid(err, errlen, "%s.%s: required with %s", where, kip, range ? krange : kgw);
                return 0;
        }
        snprintf(field, sizeof field, "%s.%s", where, kip);
        int r = parse_subnet(ip, v6, p, field, err, errlen);
        if (r == 0)
                r = parse_gateway(o, kgw, p, where, err, errlen);
        snprintf(field, sizeof field, "%s.%s", where, krange);
        if (r == 0 && range)
                r = parse_range(range, p, &p->range, field, err, errlen);
        return r;
}

static int parse_excludes(const json_t *o, struct ipam_interface *ifc, const char *where, char *err, size_t errlen) {
        json_t *list = json_object_get(o, "exclude"), *e;
        size_t i;
        char field[96];
        if (list && !json_is_array(list))
                return errmsg_invalid(err, errlen, "%s.exclude: must be a list", where);
        json_array_foreach(list, i, e) {
                struct ipam_addr a;
                const char *t = json_string_value(e);
                snprintf(field, sizeof field, "%s.exclude[%zu]", where, i);
                if (!t || ipam_addr_parse(t, &a) < 0)
                        return errmsg_invalid(err, errlen, "%s: must be an address or a range first-last", field);
                struct ipam_pool *p = a.v6 ? &ifc->v6 : &ifc->v4;
                if (!p->set)
                        return errmsg_invalid(err, errlen, "%s: \"%s\" but the interface has no %s pool", field, t,
                                              a.v6 ? "ip6" : "ip");
                if (p->n_exclude == IPAM_MAX_EXCLUDES)
                        return errmsg_invalid(err, errlen, "%s: at most %d per family", field, IPAM_MAX_EXCLUDES);
                int r = parse_range(t, p, &p->exclude[p->n_exclude], field, err, errlen);
                if (r < 0)
                        return r;
                p->n_exclude++;
        }
        return 0;
}

/* "net3" -> 3 (net0 to net31, as Proxmox numbers them). */
static int parse_interface_name(const char *s, unsigned *ret) {
        char *end;
        if (!s || strncmp(s, "net", 3) != 0 || s[3] < '0' || s[3] > '9' || (s[3] == '0' && s[4]))
                return -EINVAL;
        unsigned long n = strtoul(s + 3, &end, 10);
        if (*end || n > 31)
                return -EINVAL;
        *ret = (unsigned)n;
        return 0;
}

static int parse_interface(const json_t *o, size_t i, struct ipam_config *cfg, char *err, size_t errlen) {
        char where[48];
        struct ipam_interface *ifc = &cfg->ifaces[cfg->n_ifaces];
        snprintf(where, sizeof where, "ipam.ipconfig[%zu]", i);
        if (!json_is_object(o))
                return errmsg_invalid(err, errlen, "%s: must be an object", where);
        const char *name = str_field(o, "interface");
        if (parse_interface_name(name ? name : "net0", &ifc->index) < 0)
                return errmsg_invalid(err, errlen, "%s.interface: \"%s\" is not net0 to net31", where, name);
        for (size_t j = 0; j < cfg->n_ifaces; j++)
                if (cfg->ifaces[j].index == ifc->index)
                        return errmsg_invalid(err, errlen, "%s.interface: net%u is given twice", where, ifc->index);
        int r = parse_family(o, false, &ifc->v4, where, err, errlen);
        if (r == 0)
                r = parse_family(o, true, &ifc->v6, where, err, errlen);
        if (r == 0 && !ifc->v4.set && !ifc->v6.set)
                r = errmsg_invalid(err, errlen, "%s: needs ip, ip6 or both", where);
        if (r == 0)
                r = parse_excludes(o, ifc, where, err, errlen);
        if (r == 0)
                cfg->n_ifaces++;
        return r;
}

static int parse_words(const json_t *list, const char *field, bool addresses, char *out, size_t width,
                       size_t *n, char *err, size_t errlen) {
        size_t i;
        json_t *e;
        if (list && (!json_is_array(list) || json_array_size(list) > IPAM_MAX_DNS))
                return errmsg_invalid(err, errlen, "ipam.%s: must be a list of at most %d", field, IPAM_MAX_DNS);
        json_array_foreach(list, i, e) {
                struct ipam_addr a;
                const char *t = json_string_value(e);
                bool ok = t && *t && strlen(t) < width && !strpbrk(t, " ,;\t\n") &&
                          (!addresses || (ipam_addr_parse(t, &a) == 0 && !strchr(t, '/')));
                if (!ok)
                        return errmsg_invalid(err, errlen, "ipam.%s[%zu]: must be %s", field, i,
                                              addresses ? "an IPv4 or IPv6 address" : "a domain name");
                snprintf(out + i * width, width, "%s", t);
                *n = i + 1;
        }
        return 0;
}

int ipam_config_parse(const json_t *ipam, struct ipam_config *ret, char *err, size_t errlen) {
        json_t *list = json_object_get(ipam, "ipconfig"), *e;
        size_t i;
        memset(ret, 0, sizeof *ret);
        if (!ipam || json_is_null(ipam))
                return 0;
        if (!json_is_object(ipam))
                return errmsg_invalid(err, errlen, "ipam: must be an object");
        if (list && (!json_is_array(list) || json_array_size(list) > IPAM_MAX_INTERFACES))
                return errmsg_invalid(err, errlen, "ipam.ipconfig: must be a list of at most %d", IPAM_MAX_INTERFACES);
        json_array_foreach(list, i, e) {
                int r = parse_interface(e, i, ret, err, errlen);
                if (r < 0)
                        return r;
        }
        int r = parse_words(json_object_get(ipam, "nameservers"), "nameservers", true,
                            &ret->nameservers[0][0], sizeof ret->nameservers[0], &ret->n_nameservers, err, errlen);
        if (r == 0)
                r = parse_words(json_object_get(ipam, "searchDomains"), "searchDomains", false,
                                &ret->searchdomains[0][0], sizeof ret->searchdomains[0], &ret->n_searchdomains, err,
                                errlen);
        return r;
}

/* For ipam.c: the helpers on addresses. */
int ipam__cmp(const struct ipam_addr *a, const struct ipam_addr *b) {
        return cmp(a, b);
}

void ipam__step(struct ipam_addr *a, int delta) {
        step(a, delta);
}

bool ipam__in_range(const struct ipam_range *r, const struct ipam_addr *a) {
        return in_range(r, a);
}
