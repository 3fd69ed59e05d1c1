/* gotmpl_internal: the template engine's AST, lexer tokens and helpers, shared by the gotmpl*.c files only. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gotmpl.h"

/* The files call each other one way only, each using those below it:
 *   gotmpl.c         entry points: parse, render, free
 *   gotmpl_parse.c   the AST; resolves function names against the table at parse time
 *   gotmpl_lex.c     tokens (used by the parser only)
 *   gotmpl_funcs.c   the function table; functions report errors through the executor (gotmpl__fail)
 *   gotmpl_exec.c    the executor (gotmpl_execute); it calls functions only through the table's pointers in the AST
 *   gotmpl_yaml.c    toYaml
 *   gotmpl_format.c  values, output buffer, error positions: calls none of the others
 * What the files share is named gotmpl__name (as hwloc's module__name); its types keep the short gt_ prefix. */

#define GT_MAX_NESTING 100     /* nested control structures and parentheses in one template */
#define GT_MAX_VALUE_DEPTH 200 /* nesting of data printed, or given to toJson/toYaml */
#define GT_MAX_VARS 1000       /* live variables during execution */

/* ---- growable byte buffer (gotmpl_format.c) ---- */
struct gt_buf {
        char *data;
        size_t len, cap;
        size_t max; /* 0: no limit; else appends beyond it fail with -EFBIG */
};
int gotmpl__buf_add(struct gt_buf *b, const char *s, size_t n);
int gotmpl__buf_adds(struct gt_buf *b, const char *s);
int gotmpl__buf_printf(struct gt_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gotmpl__buf_done(struct gt_buf *b);

/* ---- lexer (gotmpl_lex.c) ---- */
enum gt_tok {
        GT_TOK_EOF,
        GT_TOK_TEXT,    /* text outside actions */
        GT_TOK_LEFT,    /* {{ (trim: {{- ) */
        GT_TOK_RIGHT,   /* }} (trim: -}} ) */
        GT_TOK_COMMENT, /* a whole comment action (used inside the lexer only) */
        GT_TOK_IDENT,
        GT_TOK_KEYWORD,
        GT_TOK_FIELD,    /* .Name (text is the name) */
        GT_TOK_VARIABLE, /* $ or $name (text includes the $) */
        GT_TOK_DOT,
        GT_TOK_STRING, /* quoted or raw string; text is the source with quotes */
        GT_TOK_NUMBER,
        GT_TOK_CHAR,
        GT_TOK_BOOL,
        GT_TOK_NIL,
        GT_TOK_LPAREN,
        GT_TOK_RPAREN,
        GT_TOK_PIPE,
        GT_TOK_DECLARE, /* := */
        GT_TOK_ASSIGN,  /* = */
        GT_TOK_COMMA,
        GT_TOK_ERROR, /* text is the message */
};

struct gt_token {
        enum gt_tok type;
        size_t pos;        /* byte offset in the template */
        const char *text;  /* points into the template (or a static message for GT_TOK_ERROR) */
        size_t len;
        bool space_before; /* inside actions: whitespace separated it from the previous token */
        bool trim;         /* LEFT/RIGHT/COMMENT: a trim marker was present */
        bool trim_right;   /* COMMENT: a right trim marker was present */
};

struct gt_lexer {
        const char *text;
        size_t len, pos;
        bool in_action;
        int paren_depth;
};
void gotmpl__lex_init(struct gt_lexer *l, const char *text, size_t len);
/* The next token. After GT_TOK_EOF or GT_TOK_ERROR it keeps returning the same kind. */
struct gt_token gotmpl__lex_next(struct gt_lexer *l);

/* ---- AST (gotmpl_parse.c) ---- */
struct gt_pipe;
struct gt_func;

enum gt_arg_type {
        GT_ARG_FIELD, /* .A.B: fields applied to dot */
        GT_ARG_VAR,   /* $x.A.B */
        GT_ARG_DOT,
        GT_ARG_NIL,
        GT_ARG_CONST, /* string, number or bool literal */
        GT_ARG_FUNC,  /* identifier naming a function */
        GT_ARG_PIPE,  /* (pipeline).A.B */
};

struct gt_arg {
        enum gt_arg_type type;
        size_t pos, end; /* source span, for error contexts */
        char *name;      /* VAR (with $) or FUNC */
        const struct gt_func *func;
        json_t *constant;
        struct gt_pipe *pipe;
        char **fields;
        size_t n_fields;
};

struct gt_cmd {
        size_t pos, end;
        struct gt_arg **args;
        size_t n_args;
};

struct gt_pipe {
        size_t pos, end;
        bool is_assign; /* $x = ... rather than $x := ... */
        char *decl[2];
        size_t n_decl;
        struct gt_cmd **cmds;
        size_t n_cmds;
};

enum gt_node_type {
        GT_NODE_TEXT,
        GT_NODE_ACTION,
        GT_NODE_IF,
        GT_NODE_RANGE,
        GT_NODE_WITH,
        GT_NODE_BREAK,
        GT_NODE_CONTINUE
};

struct gt_node;
struct gt_list {
        struct gt_node **items;
        size_t n, cap;
};

struct gt_node {
        enum gt_node_type type;
        size_t pos;
        char *text; /* TEXT */
        size_t text_len;
        struct gt_pipe *pipe; /* ACTION, IF, RANGE, WITH */
        struct gt_list list, else_list;
};

struct gotmpl {
        char *name;
        char *text; /* the source, for error positions */
        size_t len;
        struct gt_list root;
};

/* Parse t->text into t->root. -EINVAL with "name:line:col: message" in err, or -ENOMEM. */
int gotmpl__parse(struct gotmpl *t, char *err, size_t errlen);
void gotmpl__list_done(struct gt_list *l);

/* ---- functions (gotmpl_funcs.c) ---- */
struct gt_exec;
enum gt_ptype { GT_P_ANY, GT_P_STRING, GT_P_INT };

/* Call contract: argv holds argc values (NULL = Go's invalid/nil value), already type-checked against
 * types/variadic; on success *ret is a new reference (or NULL for "no value"). On failure -EINVAL with
 * the message set by gotmpl__fail(), or -ENOMEM. */
typedef int (*gt_fn)(struct gt_exec *x, json_t **argv, size_t argc, json_t **ret);

struct gt_func {
        const char *name;
        gt_fn fn;
        int min_args, max_args; /* max_args < 0: variadic */
        enum gt_ptype types[3]; /* first fixed parameters */
        enum gt_ptype rest;     /* the others */
        bool lazy;              /* and/or: evaluated by the executor, fn is NULL */
};
const struct gt_func *gotmpl__func_lookup(const char *name, size_t len);

/* ---- executor services the functions use (gotmpl_exec.c) ---- */
int gotmpl__fail(struct gt_exec *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The largest output (and function result) allowed, in bytes. */
size_t gotmpl__max_output(const struct gt_exec *x);

/* ---- values and formatting (gotmpl_format.c, gotmpl_yaml.c) ---- */
/* "name:line:col: " for a byte offset (columns count bytes from 1). */
void gotmpl__position(const struct gotmpl *t, size_t pos, char *buf, size_t size);
bool gotmpl__truth(const json_t *v);
bool gotmpl__empty(const json_t *v); /* Sprig's empty(): the opposite of gotmpl__truth */
const char *gotmpl__type_name(const json_t *v);
/* Go's fmt %v. top: a top-level nil prints "<no value>" (template output), nested "<nil>". */
int gotmpl__print_value(struct gt_buf *b, const json_t *v, bool top, int depth);
/* Go's strconv.FormatFloat(f, 'g', -1, 64), as fmt %v prints a float64. */
void gotmpl__format_float(double f, char *buf, size_t size);
/* Decode one UTF-8 sequence: its length, or 0 for an invalid or truncated one. */
size_t gotmpl__utf8_decode(const unsigned char *s, size_t len, uint32_t *ret_cp);
/* Append the UTF-8 encoding of cp; -EINVAL for surrogates and values beyond U+10FFFF. */
int gotmpl__utf8_encode(struct gt_buf *b, unsigned long cp);
/* Go's strconv.Quote. */
int gotmpl__quote(struct gt_buf *b, const char *s, size_t len);
int gotmpl__base64(struct gt_buf *b, const unsigned char *s, size_t len);
/* Sprig toJson (encoding/json.Marshal). -EINVAL with *ret_why set for unencodable data. */
int gotmpl__to_json(const json_t *v, struct gt_buf *b, const char **ret_why);
/* Helm toYaml (sigs.k8s.io/yaml.Marshal without the final newline). */
int gotmpl__to_yaml(const json_t *v, struct gt_buf *b, const char **ret_why);
/* A string value that may hold any bytes (jansson checks nothing). New reference or NULL. */
json_t *gotmpl__string(const char *s, size_t len);
