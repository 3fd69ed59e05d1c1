/* gotmpl_funcs: the template functions: Go's built-ins (and, or, not, eq.., len, index, print*) and the Sprig/Helm
 * string and encoding functions (default, quote, indent, nindent, b64enc, sha256sum, toJson, toYaml, join, upper,
 * ...). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include "cleanup.h"
#include "gotmpl_internal.h"

/* ---- helpers ---- */

static const char *str(json_t *v) {
        return json_string_value(v);
}

static size_t slen(json_t *v) {
        return json_string_length(v);
}

/* Turn a result buffer into *ret (a string value), or report why it failed. Frees the buffer. */
static int ret_buf(struct gt_exec *x, struct gt_buf *b, int r, json_t **ret) {
        if (r >= 0) {
                *ret = gotmpl__string(b->data ? b->data : "", b->len);
                r = *ret ? 0 : -ENOMEM;
        } else if (r == -EFBIG)
                r = gotmpl__fail(x, "function result exceeds %zu bytes", gotmpl__max_output(x));
        else if (r == -ELOOP)
                r = gotmpl__fail(x, "value nested too deeply");
        gotmpl__buf_done(b);
        return r;
}

static int ret_str(json_t **ret, const char *s, size_t len) {
        *ret = gotmpl__string(s, len);
        return *ret ? 0 : -ENOMEM;
}

static int ret_bool(json_t **ret, bool b) {
        *ret = json_boolean(b);
        return 0;
}

static struct gt_buf new_buf(struct gt_exec *x) {
        return (struct gt_buf){ .max = gotmpl__max_output(x) };
}

/* Sprig's strval: strings as they are, everything else as fmt %v. */
static int add_strval(struct gt_buf *b, json_t *v) {
        if (json_is_string(v))
                return gotmpl__buf_add(b, str(v), slen(v));
        return gotmpl__print_value(b, v, false, 0);
}

/* ---- Sprig / Helm ---- */

static int fn_default(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)x;
        *ret = json_incref(argc < 2 || gotmpl__empty(argv[1]) ? argv[0] : argv[1]);
        return 0;
}

static int fn_quote(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        struct gt_buf b = new_buf(x), v = new_buf(x);
        int r = 0;
        bool first = true;
        for (size_t i = 0; i < argc && r >= 0; i++) {
                if (!argv[i] || json_is_null(argv[i]))
                        continue; /* Sprig skips nil arguments */
                v.len = 0;
                r = add_strval(&v, argv[i]);
                if (r >= 0 && !first)
                        r = gotmpl__buf_adds(&b, " ");
                if (r >= 0)
                        r = gotmpl__quote(&b, v.data ? v.data : "", v.len);
                first = false;
        }
        gotmpl__buf_done(&v);
        return ret_buf(x, &b, r, ret);
}

static int indent_into(struct gt_exec *x, struct gt_buf *b, json_int_t n, json_t *s) {
        if (n < 0)
                return gotmpl__fail(x, "error calling indent: strings: negative Repeat count");
        if ((size_t)n > gotmpl__max_output(x))
                return -EFBIG;
        char *pad = malloc((size_t)n + 1);
        if (!pad)
                return -ENOMEM;
        memset(pad, ' ', (size_t)n);
        int r = gotmpl__buf_add(b, pad, (size_t)n);
        for (size_t i = 0; i < slen(s) && r >= 0; i++) {
                r = gotmpl__buf_add(b, str(s) + i, 1);
                if (r >= 0 && str(s)[i] == '\n')
                        r = gotmpl__buf_add(b, pad, (size_t)n);
        }
        free(pad);
        return r;
}

static int fn_indent(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        struct gt_buf b = new_buf(x);
        (void)argc;
        int r = indent_into(x, &b, json_integer_value(argv[0]), argv[1]);
        if (r == -EINVAL) {
                gotmpl__buf_done(&b);
                return r;
        }
        return ret_buf(x, &b, r, ret);
}

static int fn_nindent(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        struct gt_buf b = new_buf(x);
        (void)argc;
        int r = gotmpl__buf_adds(&b, "\n");
        if (r >= 0)
                r = indent_into(x, &b, json_integer_value(argv[0]), argv[1]);
        if (r == -EINVAL) {
                gotmpl__buf_done(&b);
                return r;
        }
        return ret_buf(x, &b, r, ret);
}

static int fn_b64enc(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        struct gt_buf b = new_buf(x);
        (void)argc;
        int r = gotmpl__base64(&b, (const unsigned char *)str(argv[0]), slen(argv[0]));
        return ret_buf(x, &b, r, ret);
}

/* Sprig's sha256sum: the lowercase hex SHA-256 of the string (Helm charts' checksum/config annotations). */
static int fn_sha256sum(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        unsigned char digest[32];
        char hex[2 * sizeof digest + 1];
        (void)x;
        (void)argc;
        if (gnutls_hash_fast(GNUTLS_DIG_SHA256, str(argv[0]), slen(argv[0]), digest) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < sizeof digest; i++)
                snprintf(hex + 2 * i, 3, "%02x", digest[i]);
        return ret_str(ret, hex, 2 * sizeof digest);
}

static int fn_to_json(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        struct gt_buf b = new_buf(x);
        const char *why = NULL;
        (void)argc;
        int r = gotmpl__to_json(argv[0], &b, &why);
        if (r == -EINVAL) {
                gotmpl__buf_done(&b);
                return gotmpl__fail(x, "error calling toJson: %s", why);
        }
        return ret_buf(x, &b, r, ret);
}

static int fn_to_yaml(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        struct gt_buf b = new_buf(x);
        const char *why = NULL;
        (void)argc;
        int r = gotmpl__to_yaml(argv[0], &b, &why);
        if (r == -EINVAL) {
                gotmpl__buf_done(&b);
                return gotmpl__fail(x, "error calling toYaml: %s", why);
        }
        return ret_buf(x, &b, r, ret);
}

/* Sprig's strslice: arrays element by element (nil elements skipped), nil as nothing, anything else as one. */
static int fn_join(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        struct gt_buf b = new_buf(x);
        json_t *list = argv[1];
        int r = 0;
        size_t n = 0;
        (void)argc;
        if (!json_is_array(list))
                r = !list || json_is_null(list) ? 0 : add_strval(&b, list);
        for (size_t i = 0; json_is_array(list) && i < json_array_size(list) && r >= 0; i++) {
                json_t *e = json_array_get(list, i);
                if (json_is_null(e))
                        continue;
                r = n++ ? gotmpl__buf_add(&b, str(argv[0]), slen(argv[0])) : 0;
                if (r >= 0)
                        r = add_strval(&b, e);
        }
        return ret_buf(x, &b, r, ret);
}

/* strings.ToUpper/ToLower: simple per-rune case mapping (towupper_l in the C.UTF-8 locale, ASCII only if
 * that locale is missing); invalid UTF-8 bytes are kept as they are. */
static int map_case(struct gt_exec *x, json_t *s, bool up, json_t **ret) {
        locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
        struct gt_buf b = new_buf(x);
        const unsigned char *u = (const unsigned char *)str(s);
        int r = 0;
        for (size_t i = 0, n; i < slen(s) && r >= 0; i += n) {
                uint32_t cp;
                n = gotmpl__utf8_decode(u + i, slen(s) - i, &cp);
                if (n == 0) {
                        n = 1;
                        r = gotmpl__buf_add(&b, (const char *)u + i, 1);
                        continue;
                }
                if (loc)
                        cp = (uint32_t)(up ? towupper_l((wint_t)cp, loc) : towlower_l((wint_t)cp, loc));
                else if (cp < 0x80)
                        cp = (uint32_t)(up ? toupper((int)cp) : tolower((int)cp));
                r = gotmpl__utf8_encode(&b, cp);
        }
        if (loc)
                freelocale(loc);
        return ret_buf(x, &b, r, ret);
}

static int fn_upper(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)argc;
        return map_case(x, argv[0], true, ret);
}

static int fn_lower(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)argc;
        return map_case(x, argv[0], false, ret);
}

static bool ascii_space(char c) {
        return c == ' ' || (c >= '\t' && c <= '\r');
}

/* U+0085 or U+00A0 (C2 85, C2 A0) at s[i]. */
static bool latin1_space(const char *s, size_t i, size_t end) {
        if (i + 1 >= end || (unsigned char)s[i] != 0xc2)
                return false;
        unsigned char next = (unsigned char)s[i + 1];
        return next == 0x85 || next == 0xa0;
}

/* strings.TrimSpace for ASCII white space, U+0085 and U+00A0. */
static int fn_trim(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        const char *s = str(argv[0]);
        size_t start = 0, end = slen(argv[0]);
        (void)x;
        (void)argc;
        for (;;) {
                if (start < end && ascii_space(s[start]))
                        start++;
                else if (latin1_space(s, start, end))
                        start += 2;
                else
                        break;
        }
        for (;;) {
                if (end > start && ascii_space(s[end - 1]))
                        end--;
                else if (end >= start + 2 && latin1_space(s, end - 2, end))
                        end -= 2;
                else
                        break;
        }
        return ret_str(ret, s + start, end - start);
}

static bool has_prefix(json_t *s, json_t *p) {
        return slen(s) >= slen(p) && memcmp(str(s), str(p), slen(p)) == 0;
}

static bool has_suffix(json_t *s, json_t *p) {
        return slen(s) >= slen(p) && memcmp(str(s) + slen(s) - slen(p), str(p), slen(p)) == 0;
}

static int fn_trim_prefix(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)x;
        (void)argc;
        size_t skip = has_prefix(argv[1], argv[0]) ? slen(argv[0]) : 0;
        return ret_str(ret, str(argv[1]) + skip, slen(argv[1]) - skip);
}

static int fn_trim_suffix(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)x;
        (void)argc;
        size_t cut = has_suffix(argv[1], argv[0]) ? slen(argv[0]) : 0;
        return ret_str(ret, str(argv[1]), slen(argv[1]) - cut);
}

static int fn_has_prefix(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)x;
        (void)argc;
        return ret_bool(ret, has_prefix(argv[1], argv[0]));
}

static int fn_has_suffix(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)x;
        (void)argc;
        return ret_bool(ret, has_suffix(argv[1], argv[0]));
}

static const char *find(json_t *hay, size_t from, json_t *needle) {
        return memmem(str(hay) + from, slen(hay) - from, str(needle), slen(needle));
}

static int fn_contains(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)x;
        (void)argc;
        return ret_bool(ret, find(argv[1], 0, argv[0]) != NULL);
}

/* replace old new src (strings.Replace(src, old, new, -1)); an empty old inserts between every byte. */
static int fn_replace(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        struct gt_buf b = new_buf(x);
        json_t *old = argv[0], *rep = argv[1], *src = argv[2];
        size_t i = 0;
        int r = 0;
        (void)argc;
        if (slen(old) == 0) {
                for (; i < slen(src) && r >= 0; i++) {
                        r = gotmpl__buf_add(&b, str(rep), slen(rep));
                        if (r >= 0)
                                r = gotmpl__buf_add(&b, str(src) + i, 1);
                }
                return ret_buf(x, &b, r < 0 ? r : gotmpl__buf_add(&b, str(rep), slen(rep)), ret);
        }
        for (const char *m; r >= 0 && (m = find(src, i, old)); i = (size_t)(m - str(src)) + slen(old)) {
                r = gotmpl__buf_add(&b, str(src) + i, (size_t)(m - str(src)) - i);
                if (r >= 0)
                        r = gotmpl__buf_add(&b, str(rep), slen(rep));
        }
        if (r >= 0)
                r = gotmpl__buf_add(&b, str(src) + i, slen(src) - i);
        return ret_buf(x, &b, r, ret);
}

/* The pieces of s between separators (strings.Split; an empty separator splits into bytes). */
static int split_pieces(json_t *sep, json_t *s, json_t **ret_list) {
        json_t *list = json_array();
        size_t i = 0;
        int r = list ? 0 : -ENOMEM;
        for (const char *m; r >= 0 && slen(sep) && (m = find(s, i, sep)); i = (size_t)(m - str(s)) + slen(sep))
                r = json_array_append_new(list, gotmpl__string(str(s) + i, (size_t)(m - str(s)) - i)) ? -ENOMEM : 0;
        for (; r >= 0 && !slen(sep) && i + 1 < slen(s); i++)
                r = json_array_append_new(list, gotmpl__string(str(s) + i, 1)) ? -ENOMEM : 0;
        if (r >= 0)
                r = json_array_append_new(list, gotmpl__string(str(s) + i, slen(s) - i)) ? -ENOMEM : 0;
        if (r < 0) {
                json_decref(list);
                return r;
        }
        *ret_list = list;
        return 0;
}

static int fn_split_list(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)x;
        (void)argc;
        return split_pieces(argv[0], argv[1], ret);
}

/* Sprig's split returns a map with keys _0, _1, ... */
static int fn_split(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        _cleanup_(json_decrefp) json_t *map = json_object();
        _cleanup_(json_decrefp) json_t *list = NULL;
        json_t *e;
        size_t i;
        char key[32];
        (void)x;
        (void)argc;
        if (!map)
                return -ENOMEM;
        int r = split_pieces(argv[0], argv[1], &list);
        if (r < 0)
                return r;
        json_array_foreach(list, i, e) {
                snprintf(key, sizeof key, "_%zu", i);
                if (json_object_set(map, key, e) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(map);
        return 0;
}

static int fn_list(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        json_t *list = json_array();
        (void)x;
        for (size_t i = 0; list && i < argc; i++)
                if (json_array_append(list, argv[i] ? argv[i] : json_null()) < 0) {
                        json_decref(list);
                        list = NULL;
                }
        *ret = list;
        return list ? 0 : -ENOMEM;
}

/* The value after key argv[i]: "" when the key is the last argument, null for a nil value. */
static json_t *dict_value(json_t **argv, size_t argc, size_t i) {
        if (i + 1 >= argc)
                return json_string("");
        if (!argv[i + 1])
                return json_null();
        return json_incref(argv[i + 1]);
}

static int fn_dict(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        json_t *map = json_object();
        struct gt_buf k = { 0 };
        int r = map ? 0 : -ENOMEM;
        for (size_t i = 0; i < argc && r >= 0; i += 2) {
                json_t *v = dict_value(argv, argc, i);
                k.len = 0;
                r = add_strval(&k, argv[i]);
                if (r >= 0 && json_object_setn_new(map, k.data ? k.data : "", k.len, v) < 0)
                        r = gotmpl__fail(x, "error calling dict: invalid key");
                else if (r < 0)
                        json_decref(v);
        }
        gotmpl__buf_done(&k);
        if (r < 0) {
                json_decref(map);
                return r;
        }
        *ret = map;
        return 0;
}

static int fn_empty(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)x;
        (void)argc;
        return ret_bool(ret, gotmpl__empty(argv[0]));
}

/* Helm's required: the value, or an error carrying msg when the value is nil or an empty string. */
static int fn_required(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        json_t *v = argv[1];
        (void)argc;
        if (!v || json_is_null(v) || (json_is_string(v) && slen(v) == 0))
                return gotmpl__fail(x, "error calling required: %s", str(argv[0]));
        *ret = json_incref(v);
        return 0;
}

static int fn_ternary(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)x;
        (void)argc;
        *ret = json_incref(json_is_true(argv[2]) ? argv[0] : argv[1]);
        return 0;
}

static int fn_coalesce(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)x;
        *ret = NULL;
        for (size_t i = 0; i < argc; i++)
                if (!gotmpl__empty(argv[i])) {
                        *ret = json_incref(argv[i]);
                        break;
                }
        return 0;
}

/* ---- Go built-ins: comparisons ---- */

enum kind { K_INVALID, K_BOOL, K_INT, K_FLOAT, K_STRING, K_OTHER };

static enum kind kind_of(const json_t *v) {
        switch (v ? json_typeof(v) : JSON_NULL) {
        case JSON_TRUE:
        case JSON_FALSE:
                return K_BOOL;
        case JSON_INTEGER:
                return K_INT;
        case JSON_REAL:
                return K_FLOAT;
        case JSON_STRING:
                return K_STRING;
        case JSON_NULL:
                return K_INVALID;
        default:
                return K_OTHER;
        }
}

/* -1, 0, 1 for two values of the same basic kind. */
static int compare_same(enum kind k, json_t *a, json_t *b) {
        if (k == K_INT) {
                json_int_t ia = json_integer_value(a), ib = json_integer_value(b);
                return (ia > ib) - (ia < ib);
        }
        if (k == K_FLOAT)
                return (json_real_value(a) > json_real_value(b)) - (json_real_value(a) < json_real_value(b));
        if (k == K_BOOL)
                return json_is_true(a) != json_is_true(b);
        if (k == K_STRING) {
                size_t n = slen(a) < slen(b) ? slen(a) : slen(b);
                int c = memcmp(str(a), str(b), n);
                return c ? (c > 0) - (c < 0) : (slen(a) > slen(b)) - (slen(a) < slen(b));
        }
        return 0; /* two invalid values are equal */
}

static int uncomparable(struct gt_exec *x, const char *fn, json_t *v) {
        struct gt_buf b = { .max = 200 };
        gotmpl__print_value(&b, v, false, 0);
        int r = gotmpl__fail(x, "error calling %s: uncomparable type %s: %.*s", fn, gotmpl__type_name(v), (int)b.len,
                        b.data ? b.data : "");
        gotmpl__buf_done(&b);
        return r;
}

static int equal_any(struct gt_exec *x, const char *fn, json_t **argv, size_t argc, bool *ret_eq) {
        enum kind k1 = kind_of(argv[0]);
        if (k1 == K_OTHER)
                return uncomparable(x, fn, argv[0]);
        *ret_eq = false;
        for (size_t i = 1; i < argc; i++) {
                enum kind k2 = kind_of(argv[i]);
                if (k1 != k2 && k1 != K_INVALID && k2 != K_INVALID)
                        return gotmpl__fail(x, "error calling %s: incompatible types for comparison", fn);
                if (k1 == k2 && compare_same(k1, argv[0], argv[i]) == 0) {
                        *ret_eq = true;
                        break;
                }
        }
        return 0;
}

static int fn_eq(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        bool eq;
        if (argc < 2)
                return gotmpl__fail(x, "error calling eq: missing argument for comparison");
        int r = equal_any(x, "eq", argv, argc, &eq);
        return r < 0 ? r : ret_bool(ret, eq);
}

static int fn_ne(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        bool eq;
        int r = equal_any(x, "ne", argv, argc, &eq);
        return r < 0 ? r : ret_bool(ret, !eq);
}

/* Go's lt: only numbers and strings of the same kind. *ret_cmp is -1, 0 or 1. */
static int order(struct gt_exec *x, const char *fn, json_t **argv, int *ret_cmp) {
        enum kind k1 = kind_of(argv[0]), k2 = kind_of(argv[1]);
        bool ok1 = k1 == K_INT || k1 == K_FLOAT || k1 == K_STRING || k1 == K_BOOL;
        bool ok2 = k2 == K_INT || k2 == K_FLOAT || k2 == K_STRING || k2 == K_BOOL;
        if (!ok1 || !ok2)
                return gotmpl__fail(x, "error calling %s: invalid type for comparison", fn);
        if (k1 != k2)
                return gotmpl__fail(x, "error calling %s: incompatible types for comparison", fn);
        if (k1 == K_BOOL)
                return gotmpl__fail(x, "error calling %s: invalid type for comparison", fn);
        *ret_cmp = compare_same(k1, argv[0], argv[1]);
        return 0;
}

static int fn_order(struct gt_exec *x, json_t **argv, json_t **ret, const char *fn, int lo, int hi) {
        int c = 0;
        int r = order(x, fn, argv, &c);
        return r < 0 ? r : ret_bool(ret, c >= lo && c <= hi);
}

static int fn_lt(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)argc;
        return fn_order(x, argv, ret, "lt", -1, -1);
}

static int fn_le(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)argc;
        return fn_order(x, argv, ret, "le", -1, 0);
}

static int fn_gt(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)argc;
        return fn_order(x, argv, ret, "gt", 1, 1);
}

static int fn_ge(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)argc;
        return fn_order(x, argv, ret, "ge", 0, 1);
}

static int fn_not(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        (void)x;
        (void)argc;
        return ret_bool(ret, !gotmpl__truth(argv[0]));
}

/* ---- Go built-ins: len, index, print ---- */

static int fn_len(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        json_t *v = argv[0];
        (void)argc;
        if (!v || json_is_null(v))
                return gotmpl__fail(x, "error calling len: len of nil pointer");
        if (!json_is_string(v) && !json_is_array(v) && !json_is_object(v))
                return gotmpl__fail(x, "error calling len: len of type %s", gotmpl__type_name(v));
        size_t n;
        if (json_is_string(v))
                n = slen(v);
        else if (json_is_array(v))
                n = json_array_size(v);
        else
                n = json_object_size(v);
        *ret = json_integer((json_int_t)n);
        return *ret ? 0 : -ENOMEM;
}

static int index_one(struct gt_exec *x, json_t *item, json_t *key, json_t **ret) {
        if (!item || json_is_null(item))
                return gotmpl__fail(x, "error calling index: index of untyped nil");
        if (json_is_object(item)) {
                if (!json_is_string(key))
                        return gotmpl__fail(x, "error calling index: value has type %s; should be string",
                                            gotmpl__type_name(key));
                *ret = json_object_get(item, str(key));
                return 0;
        }
        if (!json_is_array(item) && !json_is_string(item))
                return gotmpl__fail(x, "error calling index: can't index item of type %s", gotmpl__type_name(item));
        if (!json_is_integer(key))
                return gotmpl__fail(x, "error calling index: cannot index slice/array with type %s",
                                    gotmpl__type_name(key));
        json_int_t i = json_integer_value(key);
        size_t n = json_is_array(item) ? json_array_size(item) : slen(item);
        if (i < 0 || (size_t)i >= n)
                return gotmpl__fail(x, "error calling index: index out of range: %" JSON_INTEGER_FORMAT, i);
        if (json_is_string(item))
                return gotmpl__fail(x, "error calling index: indexing strings is not supported");
        *ret = json_array_get(item, (size_t)i);
        return 0;
}

static int fn_index(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        json_t *v = argv[0];
        for (size_t i = 1; i < argc; i++) {
                json_t *next = NULL;
                int r = index_one(x, v, argv[i], &next);
                if (r < 0)
                        return r;
                v = next;
        }
        *ret = json_incref(v);
        return 0;
}

static int print_args(struct gt_exec *x, json_t **argv, size_t argc, bool ln, json_t **ret) {
        struct gt_buf b = new_buf(x);
        int r = 0;
        for (size_t i = 0; i < argc && r >= 0; i++) {
                bool space = ln ? i > 0 : i > 0 && !json_is_string(argv[i]) && !json_is_string(argv[i - 1]);
                r = space ? gotmpl__buf_adds(&b, " ") : 0;
                if (r >= 0)
                        r = gotmpl__print_value(&b, argv[i], false, 0);
        }
        if (r >= 0 && ln)
                r = gotmpl__buf_adds(&b, "\n");
        return ret_buf(x, &b, r, ret);
}

static int fn_print(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        return print_args(x, argv, argc, false, ret);
}

static int fn_println(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        return print_args(x, argv, argc, true, ret);
}

/* One printf verb for v: %s %v %d %q %t; anything else, or a wrong type, prints Go's %!verb(type=value). */
static int printf_verb(struct gt_buf *b, char verb, json_t *v) {
        if (verb == 'v' || (verb == 's' && json_is_string(v)))
                return gotmpl__print_value(b, v, false, 0);
        if (verb == 'd' && json_is_integer(v))
                return gotmpl__print_value(b, v, false, 0);
        if (verb == 't' && json_is_boolean(v))
                return gotmpl__print_value(b, v, false, 0);
        if (verb == 'q' && json_is_string(v))
                return gotmpl__quote(b, str(v), slen(v));
        int r = gotmpl__buf_printf(b, "%%!%c(%s=", verb, v ? gotmpl__type_name(v) : "<nil>");
        if (r >= 0)
                r = gotmpl__print_value(b, v, false, 0);
        return r < 0 ? r : gotmpl__buf_adds(b, ")");
}

static int fn_printf(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret) {
        struct gt_buf b = new_buf(x);
        const char *f = str(argv[0]);
        size_t n = slen(argv[0]), next = 1;
        int r = 0;
        for (size_t i = 0; i < n && r >= 0; i++) {
                if (f[i] != '%' || i + 1 >= n) {
                        r = gotmpl__buf_add(&b, f + i, 1);
                        continue;
                }
                char verb = f[++i];
                if (verb == '%')
                        r = gotmpl__buf_adds(&b, "%");
                else if (next >= argc)
                        r = gotmpl__buf_printf(&b, "%%!%c(MISSING)", verb);
                else
                        r = printf_verb(&b, verb, argv[next++]);
        }
        for (; next < argc && r >= 0; next++) {
                r = gotmpl__buf_printf(&b, "%%!(EXTRA %s=", gotmpl__type_name(argv[next]));
                if (r >= 0)
                        r = gotmpl__print_value(&b, argv[next], false, 0);
                if (r >= 0)
                        r = gotmpl__buf_adds(&b, ")");
        }
        return ret_buf(x, &b, r, ret);
}

/* ---- the table ---- */

#define S GT_P_STRING
#define I GT_P_INT
#define A GT_P_ANY

static const struct gt_func funcs[] = {
        /* Go built-ins */
        { "and", NULL, 1, -1, { A }, A, true },
        { "or", NULL, 1, -1, { A }, A, true },
        { "not", fn_not, 1, 1, { A }, A, false },
        { "eq", fn_eq, 1, -1, { A }, A, false },
        { "ne", fn_ne, 2, 2, { A, A }, A, false },
        { "lt", fn_lt, 2, 2, { A, A }, A, false },
        { "le", fn_le, 2, 2, { A, A }, A, false },
        { "gt", fn_gt, 2, 2, { A, A }, A, false },
        { "ge", fn_ge, 2, 2, { A, A }, A, false },
        { "len", fn_len, 1, 1, { A }, A, false },
        { "index", fn_index, 1, -1, { A }, A, false },
        { "print", fn_print, 0, -1, { A }, A, false },
        { "println", fn_println, 0, -1, { A }, A, false },
        { "printf", fn_printf, 1, -1, { S }, A, false },
        /* Sprig / Helm */
        { "default", fn_default, 1, -1, { A }, A, false },
        { "quote", fn_quote, 0, -1, { A }, A, false },
        { "indent", fn_indent, 2, 2, { I, S }, A, false },
        { "nindent", fn_nindent, 2, 2, { I, S }, A, false },
        { "b64enc", fn_b64enc, 1, 1, { S }, A, false },
        { "sha256sum", fn_sha256sum, 1, 1, { S }, A, false },
        { "toJson", fn_to_json, 1, 1, { A }, A, false },
        { "toYaml", fn_to_yaml, 1, 1, { A }, A, false },
        { "join", fn_join, 2, 2, { S, A }, A, false },
        { "upper", fn_upper, 1, 1, { S }, A, false },
        { "lower", fn_lower, 1, 1, { S }, A, false },
        { "trim", fn_trim, 1, 1, { S }, A, false },
        { "trimPrefix", fn_trim_prefix, 2, 2, { S, S }, A, false },
        { "trimSuffix", fn_trim_suffix, 2, 2, { S, S }, A, false },
        { "hasPrefix", fn_has_prefix, 2, 2, { S, S }, A, false },
        { "hasSuffix", fn_has_suffix, 2, 2, { S, S }, A, false },
        { "contains", fn_contains, 2, 2, { S, S }, A, false },
        { "replace", fn_replace, 3, 3, { S, S, S }, A, false },
        { "split", fn_split, 2, 2, { S, S }, A, false },
        { "splitList", fn_split_list, 2, 2, { S, S }, A, false },
        { "list", fn_list, 0, -1, { A }, A, false },
        { "dict", fn_dict, 0, -1, { A }, A, false },
        { "empty", fn_empty, 1, 1, { A }, A, false },
        { "required", fn_required, 2, 2, { S, A }, A, false },
        { "ternary", fn_ternary, 3, 3, { A, A, A }, A, false },
        { "coalesce", fn_coalesce, 0, -1, { A }, A, false },
};

const struct gt_func *gotmpl__func_lookup(const char *name, size_t len) {
        for (size_t i = 0; i < sizeof funcs / sizeof *funcs; i++)
                if (strlen(funcs[i].name) == len && memcmp(funcs[i].name, name, len) == 0)
                        return &funcs[i];
        return NULL;
}
