/* gotmpl_format: how Go prints template values (fmt %v, strconv float and Quote), truth and emptiness, base64,
 * toJson (jansson, post-processed to encoding/json's escaping), the engine's output buffer, and error positions. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gotmpl_internal.h"
#include "jsonutil.h"

#define FLOAT_MAX_DIGITS 17 /* a double round-trips with 17 significant digits */
#define FLOAT_E_THRESHOLD 6 /* strconv 'g' shortest: %e when the exponent is < -4 or >= 6 */
#define JSON_SAFE_INTEGER 9007199254740992.0 /* 2^53: integral floats below it print as integers */

/* ---- buffer ---- */

int gotmpl__buf_add(struct gt_buf *b, const char *s, size_t n) {
        if (b->max && b->len + n > b->max)
                return -EFBIG;
        if (b->len + n + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 256;
                while (cap < b->len + n + 1)
                        cap *= 2;
                char *d = realloc(b->data, cap);
                if (!d)
                        return -ENOMEM;
                b->data = d;
                b->cap = cap;
        }
        if (n)
                memcpy(b->data + b->len, s, n);
        b->len += n;
        b->data[b->len] = 0;
        return 0;
}

int gotmpl__buf_adds(struct gt_buf *b, const char *s) {
        return gotmpl__buf_add(b, s, strlen(s));
}

int gotmpl__buf_printf(struct gt_buf *b, const char *fmt, ...) {
        char tmp[128];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= sizeof tmp)
                return -EINVAL;
        return gotmpl__buf_add(b, tmp, (size_t)n);
}

void gotmpl__buf_done(struct gt_buf *b) {
        free(b->data);
        *b = (struct gt_buf){ 0 };
}

json_t *gotmpl__string(const char *s, size_t len) {
        return json_stringn_nocheck(s, len);
}

/* ---- error positions ---- */

void gotmpl__position(const struct gotmpl *t, size_t pos, char *buf, size_t size) {
        size_t line = 1, col = 1;
        if (pos > t->len)
                pos = t->len;
        for (size_t i = 0; i < pos; i++) {
                col++;
                if (t->text[i] == '\n') {
                        line++;
                        col = 1;
                }
        }
        snprintf(buf, size, "%s:%zu:%zu: ", t->name, line, col);
}

/* ---- truth and types ---- */

bool gotmpl__truth(const json_t *v) {
        if (!v)
                return false;
        switch (json_typeof(v)) {
        case JSON_OBJECT:
                return json_object_size(v) > 0;
        case JSON_ARRAY:
                return json_array_size(v) > 0;
        case JSON_STRING:
                return json_string_length(v) > 0;
        case JSON_INTEGER:
                return json_integer_value(v) != 0;
        case JSON_REAL:
                return json_real_value(v) != 0;
        case JSON_TRUE:
                return true;
        case JSON_FALSE:
        case JSON_NULL:
                return false;
        }
        return false;
}

bool gotmpl__empty(const json_t *v) {
        return !gotmpl__truth(v);
}

const char *gotmpl__type_name(const json_t *v) {
        if (!v)
                return "<nil>";
        switch (json_typeof(v)) {
        case JSON_OBJECT:
                return "map[string]interface {}";
        case JSON_ARRAY:
                return "[]interface {}";
        case JSON_STRING:
                return "string";
        case JSON_INTEGER:
                return "int64";
        case JSON_REAL:
                return "float64";
        case JSON_TRUE:
        case JSON_FALSE:
                return "bool";
        case JSON_NULL:
                return "<nil>";
        }
        return "?";
}

/* ---- floats ---- */

/* Shortest digits that read back as f: "12345", and the decimal point position (0.12345e{dp}). */
static void shortest_digits(double f, char *digits, size_t size, int *ret_dp) {
        char tmp[40];
        for (int prec = 1; prec <= FLOAT_MAX_DIGITS; prec++) {
                snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
                if (strtod(tmp, NULL) == f)
                        break;
        }
        char *e = strchr(tmp, 'e');
        size_t n = 0;
        for (char *p = tmp; p < e && n + 1 < size; p++)
                if (*p >= '0' && *p <= '9')
                        digits[n++] = *p;
        while (n > 1 && digits[n - 1] == '0')
                n--;
        digits[n] = 0;
        *ret_dp = atoi(e + 1) + 1;
}

static void format_e(const char *d, int dp, char *out, size_t size) {
        int exp = dp - 1;
        snprintf(out, size, "%c%s%se%c%02d", d[0], d[1] ? "." : "", d + 1, exp < 0 ? '-' : '+', abs(exp));
}

/* Only used for -4 <= exponent < 6, so at most 5 zeros are ever needed. */
static void format_f(const char *d, int dp, char *out, size_t size) {
        static const char zeros[] = "0000000000";
        int nd = (int)strlen(d);
        if (dp <= 0)
                snprintf(out, size, "0.%.*s%s", -dp, zeros, d);
        else if (dp >= nd)
                snprintf(out, size, "%s%.*s", d, dp - nd, zeros);
        else
                snprintf(out, size, "%.*s.%s", dp, d, d + dp);
}

void gotmpl__format_float(double f, char *buf, size_t size) {
        char digits[FLOAT_MAX_DIGITS + 2], body[64];
        int dp;
        if (isnan(f)) {
                snprintf(buf, size, "NaN");
                return;
        }
        if (isinf(f)) {
                snprintf(buf, size, "%sInf", f < 0 ? "-" : "+");
                return;
        }
        if (f == 0) {
                snprintf(buf, size, "%s0", signbit(f) ? "-" : "");
                return;
        }
        shortest_digits(fabs(f), digits, sizeof digits, &dp);
        if (dp - 1 < -4 || dp - 1 >= FLOAT_E_THRESHOLD)
                format_e(digits, dp, body, sizeof body);
        else
                format_f(digits, dp, body, sizeof body);
        snprintf(buf, size, "%s%s", f < 0 ? "-" : "", body);
}

/* ---- fmt %v ---- */

static int print_object(struct gt_buf *b, const json_t *v, int depth) {
        size_t n, i;
        const char **keys = jsonutil_sorted_keys(v, &n);
        if (!keys)
                return -ENOMEM;
        int r = gotmpl__buf_adds(b, "map[");
        for (i = 0; i < n && r >= 0; i++) {
                r = gotmpl__buf_adds(b, i ? " " : "");
                if (r >= 0)
                        r = gotmpl__buf_adds(b, keys[i]);
                if (r >= 0)
                        r = gotmpl__buf_adds(b, ":");
                if (r >= 0)
                        r = gotmpl__print_value(b, json_object_get(v, keys[i]), false, depth + 1);
        }
        free(keys);
        return r < 0 ? r : gotmpl__buf_adds(b, "]");
}

static int print_array(struct gt_buf *b, const json_t *v, int depth) {
        int r = gotmpl__buf_adds(b, "[");
        for (size_t i = 0; i < json_array_size(v) && r >= 0; i++) {
                r = gotmpl__buf_adds(b, i ? " " : "");
                if (r >= 0)
                        r = gotmpl__print_value(b, json_array_get(v, i), false, depth + 1);
        }
        return r < 0 ? r : gotmpl__buf_adds(b, "]");
}

int gotmpl__print_value(struct gt_buf *b, const json_t *v, bool top, int depth) {
        char num[64];
        if (depth > GT_MAX_VALUE_DEPTH)
                return -ELOOP;
        if (!v || json_is_null(v))
                return gotmpl__buf_adds(b, top ? "<no value>" : "<nil>");
        switch (json_typeof(v)) {
        case JSON_STRING:
                return gotmpl__buf_add(b, json_string_value(v), json_string_length(v));
        case JSON_INTEGER:
                return gotmpl__buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        case JSON_REAL:
                gotmpl__format_float(json_real_value(v), num, sizeof num);
                return gotmpl__buf_adds(b, num);
        case JSON_TRUE:
                return gotmpl__buf_adds(b, "true");
        case JSON_FALSE:
                return gotmpl__buf_adds(b, "false");
        case JSON_ARRAY:
                return print_array(b, v, depth);
        case JSON_OBJECT:
                return print_object(b, v, depth);
        case JSON_NULL:
                break;
        }
        return 0;
}

/* ---- strconv.Quote ---- */

/* The length of the UTF-8 sequence that lead starts, or 0 when lead cannot start one. */
static size_t utf8_length(unsigned char lead) {
        if (lead < 0x80)
                return 1;
        if ((lead & 0xe0) == 0xc0)
                return 2;
        if ((lead & 0xf0) == 0xe0)
                return 3;
        if ((lead & 0xf8) == 0xf0)
                return 4;
        return 0;
}

/* Decode one UTF-8 sequence; its length, or 0 for an invalid byte. */
size_t gotmpl__utf8_decode(const unsigned char *s, size_t len, uint32_t *ret_cp) {
        static const uint32_t min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
        size_t n = utf8_length(s[0]);
        if (n == 0 || n > len)
                return 0;
        uint32_t cp = n == 1 ? s[0] : (uint32_t)(s[0] & (0x7f >> n));
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (s[i] & 0x3f);
        }
        if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        *ret_cp = cp;
        return n;
}

int gotmpl__utf8_encode(struct gt_buf *b, unsigned long cp) {
        char u[4];
        size_t n;
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return -EINVAL;
        if (cp < 0x80) {
                u[0] = (char)cp;
                n = 1;
        } else if (cp < 0x800) {
                u[0] = (char)(0xc0 | (cp >> 6));
                u[1] = (char)(0x80 | (cp & 0x3f));
                n = 2;
        } else if (cp < 0x10000) {
                u[0] = (char)(0xe0 | (cp >> 12));
                u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
                u[2] = (char)(0x80 | (cp & 0x3f));
                n = 3;
        } else {
                u[0] = (char)(0xf0 | (cp >> 18));
                u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
                u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
                u[3] = (char)(0x80 | (cp & 0x3f));
                n = 4;
        }
        return gotmpl__buf_add(b, u, n);
}

/* unicode.IsPrint, approximated: C1 controls, the soft hyphen, format characters, line/paragraph separators,
 * private use and non-characters are not printable. */
static bool rune_printable(uint32_t cp) {
        if (cp < 0xa0 || cp == 0xad || (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
            (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff || (cp >= 0xe000 && cp <= 0xf8ff) ||
            (cp >= 0xfff9 && cp <= 0xfffb) || (cp & 0xfffe) == 0xfffe || cp >= 0xf0000)
                return false;
        return true;
}

static int quote_rune(struct gt_buf *b, uint32_t cp, const char *raw, size_t n) {
        static const char from[] = "\a\b\f\n\r\t\v", to[] = "abfnrtv";
        const char *k = cp && cp < 0x80 ? strchr(from, (int)cp) : NULL;
        if (cp == '"' || cp == '\\')
                return gotmpl__buf_printf(b, "\\%c", (char)cp);
        if (k)
                return gotmpl__buf_printf(b, "\\%c", to[k - from]);
        if (cp >= 0x20 && cp < 0x7f)
                return gotmpl__buf_add(b, raw, n);
        if (cp < 0x80)
                return gotmpl__buf_printf(b, "\\x%02x", cp);
        if (rune_printable(cp))
                return gotmpl__buf_add(b, raw, n);
        return gotmpl__buf_printf(b, cp < 0x10000 ? "\\u%04" PRIx32 : "\\U%08" PRIx32, cp);
}

int gotmpl__quote(struct gt_buf *b, const char *s, size_t len) {
        const unsigned char *u = (const unsigned char *)s;
        int r = gotmpl__buf_adds(b, "\"");
        for (size_t i = 0; i < len && r >= 0;) {
                uint32_t cp;
                size_t n = gotmpl__utf8_decode(u + i, len - i, &cp);
                if (n == 0) {
                        r = gotmpl__buf_printf(b, "\\x%02x", u[i]);
                        i++;
                        continue;
                }
                r = quote_rune(b, cp, s + i, n);
                i += n;
        }
        return r < 0 ? r : gotmpl__buf_adds(b, "\"");
}

/* ---- base64 ---- */

int gotmpl__base64(struct gt_buf *b, const unsigned char *s, size_t len) {
        static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        int r = 0;
        for (size_t i = 0; i < len && r >= 0; i += 3) {
                uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < len ? (uint32_t)s[i + 1] << 8 : 0) |
                             (i + 2 < len ? s[i + 2] : 0);
                char q[4] = { alphabet[v >> 18], alphabet[(v >> 12) & 63], i + 1 < len ? alphabet[(v >> 6) & 63] : '=',
                              i + 2 < len ? alphabet[v & 63] : '=' };
                r = gotmpl__buf_add(b, q, 4);
        }
        return r;
}

/* ---- toJson ---- */

static int value_depth(const json_t *v, int depth) {
        size_t i;
        const char *k;
        json_t *e;
        int max = depth;
        if (depth > GT_MAX_VALUE_DEPTH)
                return depth;
        if (json_is_array(v))
                json_array_foreach((json_t *)v, i, e) {
                        int d = value_depth(e, depth + 1);
                        max = d > max ? d : max;
                }
        if (json_is_object(v))
                json_object_foreach((json_t *)v, k, e) {
                        int d = value_depth(e, depth + 1);
                        max = d > max ? d : max;
                }
        return max;
}

/* encoding/json writes integral float64 values below 1e21 without a fraction; jansson writes "1.0". Replace
 * them (below 2^53, where the conversion is exact) in place in a deep copy. */
static void integral_reals(json_t *v) {
        size_t i;
        const char *k;
        json_t *e;
        if (json_is_array(v))
                json_array_foreach(v, i, e) {
                        double d = json_is_real(e) ? json_real_value(e) : 0.5;
                        if (d == floor(d) && fabs(d) < JSON_SAFE_INTEGER)
                                json_array_set_new(v, i, json_integer((json_int_t)d));
                        else
                                integral_reals(e);
                }
        if (json_is_object(v))
                json_object_foreach(v, k, e) {
                        double d = json_is_real(e) ? json_real_value(e) : 0.5;
                        if (d == floor(d) && fabs(d) < JSON_SAFE_INTEGER)
                                json_object_set_new(v, k, json_integer((json_int_t)d));
                        else
                                integral_reals(e);
                }
}

static const char *html_escape(const char *s) {
        if (*s == '<')
                return "\\u003c";
        if (*s == '>')
                return "\\u003e";
        if (*s == '&')
                return "\\u0026";
        if (strncmp(s, "\xe2\x80\xa8", 3) == 0)
                return "\\u2028";
        if (strncmp(s, "\xe2\x80\xa9", 3) == 0)
                return "\\u2029";
        return NULL;
}

/* encoding/json escapes <, >, & and U+2028/9 for HTML safety, and writes \b and \f as \u0008 and \u000c.
 * In jansson's output a backslash always starts a two-character escape, and these characters only occur
 * inside strings. */
static int go_json_escapes(const char *s, struct gt_buf *b) {
        int r = 0;
        for (size_t i = 0; s[i] && r >= 0; i++) {
                const char *u = html_escape(s + i);
                if (s[i] == '\\') {
                        char c = s[++i];
                        if (c == 'b')
                                r = gotmpl__buf_adds(b, "\\u0008");
                        else if (c == 'f')
                                r = gotmpl__buf_adds(b, "\\u000c");
                        else
                                r = gotmpl__buf_add(b, s + i - 1, 2);
                } else if (u) {
                        r = gotmpl__buf_adds(b, u);
                        i += u[2] == '2' ? 2 : 0; /* the two more bytes of U+2028/9 */
                } else
                        r = gotmpl__buf_add(b, s + i, 1);
        }
        return r;
}

int gotmpl__to_json(const json_t *v, struct gt_buf *b, const char **ret_why) {
        if (!v)
                return gotmpl__buf_adds(b, "null");
        if (value_depth(v, 0) > GT_MAX_VALUE_DEPTH) {
                *ret_why = "value nested too deeply";
                return -EINVAL;
        }
        json_t *copy = json_deep_copy(v);
        if (!copy)
                return -ENOMEM;
        integral_reals(copy);
        double d = json_is_real(copy) ? json_real_value(copy) : 0.5;
        if (d == floor(d) && fabs(d) < JSON_SAFE_INTEGER) {
                json_decref(copy);
                copy = json_integer((json_int_t)d);
        }
        char *s = copy ? json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;
        json_decref(copy);
        if (!s) {
                *ret_why = "invalid UTF-8 in a string";
                return -EINVAL;
        }
        int r = go_json_escapes(s, b);
        free(s);
        return r;
}
