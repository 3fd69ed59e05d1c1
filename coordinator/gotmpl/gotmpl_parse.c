/* gotmpl_parse: builds the template AST from tokens as Go's text/template/parse does (pipelines, commands,
 * operands, if/range/with/else/end, variable scopes), checking functions and variables at parse time. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "gotmpl_internal.h"

#define PEEK_MAX 4

enum stop { STOP_EOF, STOP_END, STOP_ELSE };

struct parser {
        struct gotmpl *t;
        struct gt_lexer lex;
        struct gt_token peek[PEEK_MAX];
        int n_peek;
        char **vars; /* names in scope (borrowed from the AST) */
        size_t n_vars, cap_vars;
        int range_depth, depth;
        char *err;
        size_t errlen;
};

static int grow(void *arr, size_t *cap, size_t need, size_t elem) {
        if (need <= *cap)
                return 0;
        size_t n = *cap ? *cap * 2 : 4;
        while (n < need)
                n *= 2;
        void *p = realloc(*(void **)arr, n * elem);
        if (!p)
                return -ENOMEM;
        *(void **)arr = p;
        *cap = n;
        return 0;
}

static int fail(struct parser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct parser *p, size_t pos, const char *fmt, ...) {
        char where[256];
        va_list ap;
        gotmpl__position(p->t, pos, where, sizeof where);
        snprintf(p->err, p->errlen, "%s", where);
        va_start(ap, fmt);
        int r = errmsg_vappend(p->err, p->errlen, -EINVAL, fmt, ap);
        va_end(ap);
        return r;
}

static struct gt_token *peek_n(struct parser *p, int i) {
        while (p->n_peek <= i)
                p->peek[p->n_peek++] = gotmpl__lex_next(&p->lex);
        return &p->peek[i];
}

static struct gt_token *peek(struct parser *p) {
        return peek_n(p, 0);
}

static struct gt_token next(struct parser *p) {
        struct gt_token t = *peek(p);
        memmove(p->peek, p->peek + 1, (size_t)(p->n_peek - 1) * sizeof *p->peek);
        p->n_peek--;
        return t;
}

static bool is_keyword(const struct gt_token *t, const char *kw) {
        return t->type == GT_TOK_KEYWORD && t->len == strlen(kw) && memcmp(t->text, kw, t->len) == 0;
}

/* A description of a token for "unexpected X" messages. */
static const char *describe(const struct gt_token *t, char *buf, size_t size) {
        switch (t->type) {
        case GT_TOK_EOF:
                return "EOF";
        case GT_TOK_RIGHT:
                return "\"}}\"";
        case GT_TOK_PIPE:
                return "\"|\"";
        default:
                snprintf(buf, size, "\"%.*s\"", (int)(t->len > 40 ? 40 : t->len), t->text ? t->text : "");
                return buf;
        }
}

static int unexpected(struct parser *p, const struct gt_token *t, const char *context) {
        char buf[64];
        if (t->type == GT_TOK_ERROR)
                return fail(p, t->pos, "%.*s", (int)t->len, t->text);
        return fail(p, t->pos, "unexpected %s in %s", describe(t, buf, sizeof buf), context);
}

static int expect(struct parser *p, enum gt_tok type, const char *context) {
        struct gt_token t = next(p);
        return t.type == type ? 0 : unexpected(p, &t, context);
}

/* ---- variables in scope ---- */

static bool var_defined(const struct parser *p, const char *name, size_t len) {
        for (size_t i = p->n_vars; i > 0; i--)
                if (strlen(p->vars[i - 1]) == len && memcmp(p->vars[i - 1], name, len) == 0)
                        return true;
        return false;
}

static int var_push(struct parser *p, char *name) {
        if (grow(&p->vars, &p->cap_vars, p->n_vars + 1, sizeof *p->vars) < 0)
                return -ENOMEM;
        p->vars[p->n_vars++] = name;
        return 0;
}

/* ---- literals ---- */

static int hexval(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

/* One escape after a backslash at s[*i] (pointing past the backslash); appends its bytes. */
/* How many digits follow the escape letter c: \x, \u, \U, or an octal \NNN that c starts; 0 for none. */
static int escape_digits(char c) {
        switch (c) {
        case 'x':
                return 2;
        case 'u':
                return 4;
        case 'U':
                return 8;
        default:
                return (c >= '0' && c <= '7') ? 3 : 0;
        }
}

static int unescape_one(const char *s, size_t len, size_t *i, struct gt_buf *b) {
        static const char simple_from[] = "abfnrtv\\\"", simple_to[] = "\a\b\f\n\r\t\v\\\"";
        char c = s[(*i)++];
        const char *k = strchr(simple_from, c);
        if (c && k)
                return gotmpl__buf_add(b, &simple_to[k - simple_from], 1);
        int digits = escape_digits(c);
        int base = (c >= '0' && c <= '7') ? 8 : 16;
        if (digits == 0)
                return -EINVAL;
        if (base == 8)
                (*i)--;
        unsigned long v = 0;
        for (int d = 0; d < digits; d++, (*i)++) {
                int h = *i < len ? hexval(s[*i]) : -1;
                if (h < 0 || h >= base)
                        return -EINVAL;
                v = v * (unsigned long)base + (unsigned long)h;
        }
        if (c == 'x' || base == 8) {
                if (v > 255)
                        return -EINVAL;
                char byte = (char)v;
                return gotmpl__buf_add(b, &byte, 1);
        }
        return gotmpl__utf8_encode(b, v);
}

/* Go's strconv.Unquote for "..." and `...` literals. */
static int unquote(const struct gt_token *t, json_t **ret) {
        struct gt_buf b = { 0 };
        const char *s = t->text + 1;
        size_t len = t->len - 2, i = 0;
        int r = 0;
        if (t->text[0] == '`')
                r = gotmpl__buf_add(&b, s, len);
        while (t->text[0] == '"' && r >= 0 && i < len) {
                if (s[i] != '\\') {
                        r = gotmpl__buf_add(&b, s + i++, 1);
                        continue;
                }
                i++;
                r = unescape_one(s, len, &i, &b);
        }
        json_t *v = NULL;
        if (r >= 0)
                v = gotmpl__string(b.data ? b.data : "", b.len);
        gotmpl__buf_done(&b);
        if (r < 0)
                return r;
        if (!v)
                return -ENOMEM;
        *ret = v;
        return 0;
}

/* Numbers: integers (decimal, 0x, 0o, 0b, leading-0 octal, '_' separators) become integers; anything with a
 * fraction or exponent becomes a float, as Go's idealConstant does. */
static int parse_number(const struct gt_token *t, json_t **ret) {
        char buf[128];
        size_t n = 0;
        for (size_t i = 0; i < t->len && n + 1 < sizeof buf; i++)
                if (t->text[i] != '_')
                        buf[n++] = t->text[i];
        buf[n] = 0;
        if (n == 0 || n + 1 >= sizeof buf || buf[n - 1] == 'i')
                return -EINVAL;
        const char *digits = buf + (buf[0] == '+' || buf[0] == '-');
        bool hex = digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X');
        bool is_float = strpbrk(digits, hex ? ".pP" : ".eE") != NULL;
        char *end;
        errno = 0;
        if (is_float) {
                double d = strtod(buf, &end);
                if (*end || errno)
                        return -EINVAL;
                *ret = json_real(d);
        } else {
                int base = 10;
                const char *num = digits;
                if (digits[0] == '0' && digits[1] && strchr("xXoObB", digits[1])) {
                        if (strchr("xX", digits[1]))
                                base = 16;
                        else if (strchr("oO", digits[1]))
                                base = 8;
                        else
                                base = 2;
                        num = digits + 2;
                } else if (digits[0] == '0' && digits[1])
                        base = 8;
                if (!*num)
                        return -EINVAL;
                unsigned long long u = strtoull(num, &end, base);
                bool neg = buf[0] == '-';
                if (*end || errno || u > (neg ? 9223372036854775808ULL : 9223372036854775807ULL))
                        return -ERANGE;
                *ret = json_integer(neg ? (json_int_t)(0 - u) : (json_int_t)u);
        }
        return *ret ? 0 : -ENOMEM;
}

/* ---- AST construction ---- */

static struct gt_pipe *parse_pipeline_alloc(void) {
        return calloc(1, sizeof(struct gt_pipe));
}

static void pipe_free(struct gt_pipe *p); /* an argument holds a pipeline, which holds arguments */

static void arg_free(struct gt_arg *a) {
        if (!a)
                return;
        free(a->name);
        json_decref(a->constant);
        pipe_free(a->pipe);
        for (size_t i = 0; i < a->n_fields; i++)
                free(a->fields[i]);
        free(a->fields);
        free(a);
}

static void cmd_free(struct gt_cmd *c) {
        if (!c)
                return;
        for (size_t i = 0; i < c->n_args; i++)
                arg_free(c->args[i]);
        free(c->args);
        free(c);
}

static void pipe_free(struct gt_pipe *p) {
        if (!p)
                return;
        for (size_t i = 0; i < p->n_cmds; i++)
                cmd_free(p->cmds[i]);
        free(p->cmds);
        free(p->decl[0]);
        free(p->decl[1]);
        free(p);
}

static void node_free(struct gt_node *n) {
        if (!n)
                return;
        free(n->text);
        pipe_free(n->pipe);
        gotmpl__list_done(&n->list);
        gotmpl__list_done(&n->else_list);
        free(n);
}

void gotmpl__list_done(struct gt_list *l) {
        for (size_t i = 0; i < l->n; i++)
                node_free(l->items[i]);
        free(l->items);
        *l = (struct gt_list){ 0 };
}

static int list_add(struct gt_list *l, struct gt_node *n) {
        if (grow(&l->items, &l->cap, l->n + 1, sizeof *l->items) < 0) {
                node_free(n);
                return -ENOMEM;
        }
        l->items[l->n++] = n;
        return 0;
}

static struct gt_node *node_new(enum gt_node_type type, size_t pos) {
        struct gt_node *n = calloc(1, sizeof *n);
        if (n) {
                n->type = type;
                n->pos = pos;
        }
        return n;
}

/* ---- operands, commands, pipelines ---- */

static int parse_pipeline(struct parser *p, const char *context, size_t max_decl, bool in_paren,
                          struct gt_pipe **ret);

static int arg_add_field(struct gt_arg *a, const struct gt_token *t) {
        size_t cap = a->n_fields;
        if (grow(&a->fields, &cap, a->n_fields + 1, sizeof *a->fields) < 0)
                return -ENOMEM;
        char *f = strndup(t->text, t->len);
        if (!f)
                return -ENOMEM;
        a->fields[a->n_fields++] = f;
        a->end = t->pos + t->len + 1;
        return 0;
}

static int term_ident(struct parser *p, const struct gt_token *t, struct gt_arg *a) {
        a->type = GT_ARG_FUNC;
        a->func = gotmpl__func_lookup(t->text, t->len);
        if (!a->func)
                return fail(p, t->pos, "function \"%.*s\" not defined", (int)t->len, t->text);
        a->name = strndup(t->text, t->len);
        return a->name ? 0 : -ENOMEM;
}

static int term_variable(struct parser *p, const struct gt_token *t, struct gt_arg *a) {
        a->type = GT_ARG_VAR;
        if (!var_defined(p, t->text, t->len))
                return fail(p, t->pos, "undefined variable \"%.*s\"", (int)t->len, t->text);
        a->name = strndup(t->text, t->len);
        return a->name ? 0 : -ENOMEM;
}

static int term_const(struct parser *p, const struct gt_token *t, struct gt_arg *a) {
        int r;
        a->type = GT_ARG_CONST;
        if (t->type == GT_TOK_BOOL) {
                a->constant = json_boolean(t->text[0] == 't');
                return 0;
        }
        if (t->type == GT_TOK_STRING) {
                r = unquote(t, &a->constant);
                return r == -EINVAL ? fail(p, t->pos, "invalid syntax in %.*s", (int)t->len, t->text) : r;
        }
        r = parse_number(t, &a->constant);
        if (r == -ERANGE)
                return fail(p, t->pos, "%.*s overflows int", (int)t->len, t->text);
        return r == -EINVAL ? fail(p, t->pos, "bad number syntax: %.*s", (int)t->len, t->text) : r;
}

/* 'a', '\n', '\x41', '\u00e9': the code point as an integer (Go's rune constants). */
static int term_char(struct parser *p, const struct gt_token *t, struct gt_arg *a) {
        struct gt_buf b = { 0 };
        const char *s = t->text + 1;
        size_t len = t->len - 2, i = 0, n = 0;
        uint32_t cp = 0;
        int r = 0;
        a->type = GT_ARG_CONST;
        if (len >= 2 && s[0] == '\\' && s[1] == '\'') {
                cp = '\'';
                i = n = 2;
        } else if (len >= 2 && s[0] == '\\') {
                i = 1;
                r = unescape_one(s, len, &i, &b);
                if (r >= 0 && b.len > 0)
                        n = gotmpl__utf8_decode((const unsigned char *)b.data, b.len, &cp) == b.len ? i : 0;
                if (r >= 0 && b.len == 1)
                        cp = (unsigned char)b.data[0];
        } else if (len > 0)
                n = gotmpl__utf8_decode((const unsigned char *)s, len, &cp);
        gotmpl__buf_done(&b);
        if (r == -ENOMEM)
                return r;
        if (r < 0 || n == 0 || n != len)
                return fail(p, t->pos, "malformed character constant: %.*s", (int)t->len, t->text);
        a->constant = json_integer(cp);
        return a->constant ? 0 : -ENOMEM;
}

static int term_paren(struct parser *p, struct gt_arg *a) {
        a->type = GT_ARG_PIPE;
        if (++p->depth > GT_MAX_NESTING)
                return fail(p, a->pos, "template nested too deeply (more than %d levels)", GT_MAX_NESTING);
        int r = parse_pipeline(p, "parenthesized pipeline", 0, true, &a->pipe);
        p->depth--;
        if (r < 0)
                return r;
        a->end = a->pipe->end + 1;
        return 0;
}

/* One term (Go's parser.term), without a field chain. */
static int parse_term(struct parser *p, const struct gt_token *t, struct gt_arg *a) {
        a->pos = t->pos;
        a->end = t->pos + t->len;
        switch (t->type) {
        case GT_TOK_IDENT:
                return term_ident(p, t, a);
        case GT_TOK_DOT:
                a->type = GT_ARG_DOT;
                return 0;
        case GT_TOK_NIL:
                a->type = GT_ARG_NIL;
                return 0;
        case GT_TOK_VARIABLE:
                return term_variable(p, t, a);
        case GT_TOK_FIELD:
                a->type = GT_ARG_FIELD;
                return arg_add_field(a, t);
        case GT_TOK_BOOL:
        case GT_TOK_NUMBER:
        case GT_TOK_STRING:
                return term_const(p, t, a);
        case GT_TOK_CHAR:
                return term_char(p, t, a);
        case GT_TOK_LPAREN:
                return term_paren(p, a);
        default:
                return unexpected(p, t, "operand");
        }
}

/* A term and the fields chained onto it without spaces: .A.B, $x.A, (pipe).A */
static int parse_operand(struct parser *p, struct gt_arg **ret) {
        struct gt_token t = next(p);
        struct gt_arg *a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        int r = parse_term(p, &t, a);
        while (r >= 0 && peek(p)->type == GT_TOK_FIELD && !peek(p)->space_before) {
                struct gt_token f = next(p);
                if (a->type != GT_ARG_FIELD && a->type != GT_ARG_VAR && a->type != GT_ARG_PIPE)
                        r = fail(p, f.pos, "unexpected . after term \"%.*s\"", (int)t.len, t.text);
                else
                        r = arg_add_field(a, &f);
        }
        if (r < 0) {
                arg_free(a);
                return r;
        }
        *ret = a;
        return 0;
}

static bool ends_command(enum gt_tok type) {
        return type == GT_TOK_RIGHT || type == GT_TOK_RPAREN || type == GT_TOK_PIPE;
}

static int parse_command(struct parser *p, struct gt_cmd **ret) {
        struct gt_cmd *c = calloc(1, sizeof *c);
        size_t cap = 0;
        int r = 0;
        if (!c)
                return -ENOMEM;
        c->pos = peek(p)->pos;
        while (r >= 0) {
                struct gt_arg *a = NULL;
                r = parse_operand(p, &a);
                if (r >= 0 && grow(&c->args, &cap, c->n_args + 1, sizeof *c->args) < 0)
                        r = -ENOMEM;
                if (r < 0) {
                        arg_free(a);
                        break;
                }
                c->args[c->n_args++] = a;
                c->end = a->end;
                struct gt_token *t = peek(p);
                if (ends_command(t->type))
                        break;
                if (!t->space_before)
                        r = unexpected(p, t, "operand");
        }
        if (r < 0) {
                cmd_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

/* "$x :=", "$x =", "$i, $v :=": how many variables a pipeline declares (0 when none). */
static size_t decl_count(struct parser *p, size_t max_decl) {
        if (max_decl == 0 || peek_n(p, 0)->type != GT_TOK_VARIABLE)
                return 0;
        enum gt_tok t1 = peek_n(p, 1)->type;
        if (t1 == GT_TOK_DECLARE || t1 == GT_TOK_ASSIGN)
                return 1;
        if (t1 == GT_TOK_COMMA && peek_n(p, 2)->type == GT_TOK_VARIABLE &&
            (peek_n(p, 3)->type == GT_TOK_DECLARE || peek_n(p, 3)->type == GT_TOK_ASSIGN))
                return 2;
        return 0;
}

static int parse_decl(struct parser *p, struct gt_pipe *pipe, size_t n, const char *context, size_t max_decl) {
        for (size_t i = 0; i < n; i++) {
                struct gt_token v = next(p);
                struct gt_token sep = next(p); /* "," or ":=" / "=" */
                if (i + 1 > max_decl)
                        return fail(p, v.pos, "too many declarations in %s", context);
                pipe->decl[i] = strndup(v.text, v.len);
                if (!pipe->decl[i])
                        return -ENOMEM;
                pipe->is_assign = sep.type == GT_TOK_ASSIGN;
                if (pipe->is_assign && !var_defined(p, v.text, v.len))
                        return fail(p, v.pos, "undefined variable \"%.*s\"", (int)v.len, v.text);
        }
        pipe->n_decl = n;
        return 0;
}

/* Go's checkPipeline: literals cannot take a piped value. */
static int check_pipeline(struct parser *p, const struct gt_pipe *pipe) {
        for (size_t i = 1; i < pipe->n_cmds; i++) {
                enum gt_arg_type t = pipe->cmds[i]->args[0]->type;
                if (t == GT_ARG_CONST || t == GT_ARG_DOT || t == GT_ARG_NIL)
                        return fail(p, pipe->cmds[i]->pos, "non executable command in pipeline stage %zu", i + 1);
        }
        if (pipe->n_cmds > 0 && pipe->cmds[0]->args[0]->type == GT_ARG_NIL)
                return fail(p, pipe->cmds[0]->pos, "nil is not a command");
        return 0;
}

static int pipeline_commands(struct parser *p, struct gt_pipe *pipe, const char *context, bool in_paren) {
        size_t cap = 0;
        for (;;) {
                struct gt_token *t = peek(p);
                if (t->type == (in_paren ? GT_TOK_RPAREN : GT_TOK_RIGHT)) {
                        pipe->end = t->pos;
                        next(p);
                        break;
                }
                if (pipe->n_cmds > 0) {
                        struct gt_token sep = next(p);
                        if (sep.type != GT_TOK_PIPE)
                                return unexpected(p, &sep, context);
                        if (peek(p)->type == (in_paren ? GT_TOK_RPAREN : GT_TOK_RIGHT))
                                continue; /* Go accepts a trailing "|" */
                }
                struct gt_cmd *c = NULL;
                int r = parse_command(p, &c);
                if (r >= 0 && grow(&pipe->cmds, &cap, pipe->n_cmds + 1, sizeof *pipe->cmds) < 0) {
                        cmd_free(c);
                        r = -ENOMEM;
                }
                if (r < 0)
                        return r;
                pipe->cmds[pipe->n_cmds++] = c;
        }
        if (pipe->n_cmds == 0)
                return fail(p, pipe->pos, "missing value for %s", context);
        return check_pipeline(p, pipe);
}

static int parse_pipeline(struct parser *p, const char *context, size_t max_decl, bool in_paren,
                          struct gt_pipe **ret) {
        struct gt_pipe *pipe = parse_pipeline_alloc();
        if (!pipe)
                return -ENOMEM;
        pipe->pos = peek(p)->pos;
        size_t n = decl_count(p, max_decl ? 2 : 0);
        int r = parse_decl(p, pipe, n, context, max_decl);
        if (r >= 0)
                r = pipeline_commands(p, pipe, context, in_paren);
        for (size_t i = 0; r >= 0 && !pipe->is_assign && i < pipe->n_decl; i++)
                r = var_push(p, pipe->decl[i]);
        if (r < 0) {
                pipe_free(pipe);
                return r;
        }
        *ret = pipe;
        return 0;
}

/* ---- lists and control structures ---- */

static int parse_list(struct parser *p, struct gt_list *list, enum stop *ret_stop, size_t *ret_pos);
static int parse_control(struct parser *p, enum gt_node_type type, size_t pos, struct gt_list *into);

static int control_else(struct parser *p, struct gt_node *n, const char *context) {
        struct gt_token *t = peek(p);
        if (is_keyword(t, "if") || is_keyword(t, "with")) {
                /* {{else if x}} is {{else}}{{if x}}..{{end}} sharing the outer {{end}} */
                struct gt_token kw = next(p);
                enum gt_node_type type = is_keyword(&kw, "if") ? GT_NODE_IF : GT_NODE_WITH;
                return parse_control(p, type, kw.pos, &n->else_list);
        }
        int r = expect(p, GT_TOK_RIGHT, context);
        enum stop stop;
        size_t pos;
        if (r >= 0)
                r = parse_list(p, &n->else_list, &stop, &pos);
        if (r < 0)
                return r;
        if (stop == STOP_ELSE)
                return fail(p, pos, "expected end; found {{else}}");
        if (stop == STOP_EOF)
                return fail(p, pos, "unexpected EOF");
        return 0;
}

static int control_body(struct parser *p, struct gt_node *n, const char *context) {
        enum stop stop;
        size_t pos, mark = p->n_vars;
        if (n->type == GT_NODE_RANGE)
                p->range_depth++;
        int r = parse_list(p, &n->list, &stop, &pos);
        if (n->type == GT_NODE_RANGE)
                p->range_depth--;
        p->n_vars = mark;
        if (r < 0)
                return r;
        if (stop == STOP_EOF)
                return fail(p, pos, "unexpected EOF");
        if (stop == STOP_ELSE)
                return control_else(p, n, context);
        return 0;
}

/* The keyword that opens a control node of this type, for messages. */
static const char *control_keyword(enum gt_node_type type) {
        switch (type) {
        case GT_NODE_IF:
                return "if";
        case GT_NODE_RANGE:
                return "range";
        default:
                return "with";
        }
}

static int parse_control(struct parser *p, enum gt_node_type type, size_t pos, struct gt_list *into) {
        const char *context = control_keyword(type);
        if (++p->depth > GT_MAX_NESTING)
                return fail(p, pos, "template nested too deeply (more than %d levels)", GT_MAX_NESTING);
        struct gt_node *n = node_new(type, pos);
        if (!n)
                return -ENOMEM;
        size_t mark = p->n_vars;
        int r = parse_pipeline(p, context, type == GT_NODE_RANGE ? 2 : 1, false, &n->pipe);
        if (r >= 0)
                r = control_body(p, n, context);
        p->n_vars = mark;
        p->depth--;
        if (r < 0) {
                node_free(n);
                return r;
        }
        return list_add(into, n);
}

static int parse_loop_control(struct parser *p, const struct gt_token *kw, struct gt_list *into) {
        bool is_break = is_keyword(kw, "break");
        int r = expect(p, GT_TOK_RIGHT, is_break ? "{{break}}" : "{{continue}}");
        if (r < 0)
                return r;
        if (p->range_depth == 0)
                return fail(p, kw->pos, "{{%s}} outside {{range}}", is_break ? "break" : "continue");
        struct gt_node *n = node_new(is_break ? GT_NODE_BREAK : GT_NODE_CONTINUE, kw->pos);
        return n ? list_add(into, n) : -ENOMEM;
}

static int parse_action(struct parser *p, size_t pos, struct gt_list *into) {
        struct gt_node *n = node_new(GT_NODE_ACTION, pos);
        if (!n)
                return -ENOMEM;
        int r = parse_pipeline(p, "command", 1, false, &n->pipe);
        if (r < 0) {
                node_free(n);
                return r;
        }
        return list_add(into, n);
}

/* After "{{": a keyword action or a pipeline. *ret_stop is set for {{end}} and {{else}}. */
static int parse_inside(struct parser *p, size_t pos, struct gt_list *into, enum stop *ret_stop) {
        struct gt_token *t = peek(p);
        *ret_stop = STOP_EOF;
        if (t->type != GT_TOK_KEYWORD)
                return parse_action(p, pos, into);
        struct gt_token kw = next(p);
        if (is_keyword(&kw, "end")) {
                *ret_stop = STOP_END;
                return expect(p, GT_TOK_RIGHT, "end");
        }
        if (is_keyword(&kw, "else")) {
                *ret_stop = STOP_ELSE;
                return 0;
        }
        if (is_keyword(&kw, "if"))
                return parse_control(p, GT_NODE_IF, kw.pos, into);
        if (is_keyword(&kw, "range"))
                return parse_control(p, GT_NODE_RANGE, kw.pos, into);
        if (is_keyword(&kw, "with"))
                return parse_control(p, GT_NODE_WITH, kw.pos, into);
        if (is_keyword(&kw, "break") || is_keyword(&kw, "continue"))
                return parse_loop_control(p, &kw, into);
        return fail(p, kw.pos, "{{%.*s}} is not supported", (int)kw.len, kw.text);
}

static int add_text(struct gt_list *list, const struct gt_token *t) {
        struct gt_node *n = node_new(GT_NODE_TEXT, t->pos);
        if (!n || !(n->text = malloc(t->len))) { /* text may hold NUL bytes: no strndup */
                free(n);
                return -ENOMEM;
        }
        memcpy(n->text, t->text, t->len);
        n->text_len = t->len;
        return list_add(list, n);
}

static int parse_list(struct parser *p, struct gt_list *list, enum stop *ret_stop, size_t *ret_pos) {
        for (;;) {
                struct gt_token t = next(p);
                int r;
                enum stop stop = STOP_EOF;
                *ret_pos = t.pos;
                if (t.type == GT_TOK_EOF) {
                        *ret_stop = STOP_EOF;
                        return 0;
                }
                if (t.type == GT_TOK_TEXT)
                        r = add_text(list, &t);
                else if (t.type == GT_TOK_LEFT)
                        r = parse_inside(p, t.pos, list, &stop);
                else
                        r = unexpected(p, &t, "input");
                if (r < 0)
                        return r;
                if (stop != STOP_EOF) {
                        *ret_stop = stop;
                        return 0;
                }
        }
}

int gotmpl__parse(struct gotmpl *t, char *err, size_t errlen) {
        struct parser p = { .t = t, .err = err, .errlen = errlen };
        enum stop stop;
        size_t pos;
        gotmpl__lex_init(&p.lex, t->text, t->len);
        int r = var_push(&p, (char *)"$");
        if (r >= 0)
                r = parse_list(&p, &t->root, &stop, &pos);
        if (r >= 0 && stop != STOP_EOF)
                r = fail(&p, pos, "unexpected {{%s}}", stop == STOP_END ? "end" : "else");
        free(p.vars);
        return r;
}
