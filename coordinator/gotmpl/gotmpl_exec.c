/* gotmpl_exec: walks the template AST over jansson data with Go's text/template semantics (truth, fields on
 * maps, missing keys, variable scopes, range order, pipelines, function calls, error positions). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "errmsg.h"
#include "gotmpl_internal.h"
#include "jsonutil.h"

#define CONTEXT_MAX 60 /* bytes of the failing action quoted in an error */

enum ctl { CTL_NONE, CTL_BREAK, CTL_CONTINUE };

struct gt_var {
        const char *name;
        json_t *value; /* owned; NULL = no value */
};

struct gt_exec {
        const struct gotmpl *t;
        const struct gotmpl_options *opt;
        struct gt_buf out;
        struct gt_var *vars;
        size_t n_vars, cap_vars;
        size_t at_pos, at_end; /* the node being evaluated, for errors */
        enum ctl ctl;
        char *err;
        size_t errlen;
};

int gotmpl__fail(struct gt_exec *x, const char *fmt, ...) {
        char where[256];
        va_list ap;
        size_t span = x->at_end > x->at_pos ? x->at_end - x->at_pos : 0;
        while (span > 0 && strchr(" \t\r\n", x->t->text[x->at_pos + span - 1]))
                span--;
        gotmpl__position(x->t, x->at_pos, where, sizeof where);
        snprintf(x->err, x->errlen, "%sat <%.*s%s>: ", where, (int)(span > CONTEXT_MAX ? CONTEXT_MAX : span),
                 x->t->text + x->at_pos, span > CONTEXT_MAX ? "..." : "");
        va_start(ap, fmt);
        int r = errmsg_vappend(x->err, x->errlen, -EINVAL, fmt, ap);
        va_end(ap);
        return r;
}

size_t gotmpl__max_output(const struct gt_exec *x) {
        return x->opt->max_output;
}

static void at(struct gt_exec *x, size_t pos, size_t end) {
        x->at_pos = pos;
        x->at_end = end;
}

/* ---- variables ---- */

static int var_push(struct gt_exec *x, const char *name, json_t *value) {
        if (x->n_vars >= GT_MAX_VARS)
                return gotmpl__fail(x, "too many variables");
        if (ARRAY_GROW(&x->vars, &x->cap_vars, x->n_vars, 16) < 0)
                return -ENOMEM;
        x->vars[x->n_vars++] = (struct gt_var){ name, json_incref(value) };
        return 0;
}

static void var_pop(struct gt_exec *x, size_t mark) {
        while (x->n_vars > mark)
                json_decref(x->vars[--x->n_vars].value);
}

static struct gt_var *var_find(struct gt_exec *x, const char *name) {
        for (size_t i = x->n_vars; i > 0; i--)
                if (strcmp(x->vars[i - 1].name, name) == 0)
                        return &x->vars[i - 1];
        return NULL;
}

static void var_set(struct gt_var *v, json_t *value) {
        json_decref(v->value);
        v->value = json_incref(value);
}

/* ---- fields ---- */

/* Go's evalField on a map[string]interface{} receiver. *ret is a new reference or NULL (no value). */
static int eval_field(struct gt_exec *x, json_t *recv, const char *name, bool has_args, json_t **ret) {
        if (!recv) {
                if (x->opt->missingkey == GOTMPL_MISSINGKEY_ERROR)
                        return gotmpl__fail(x, "nil data; no entry for key \"%s\"", name);
                *ret = NULL;
                return 0;
        }
        if (json_is_null(recv))
                return gotmpl__fail(x, "nil pointer evaluating interface {}.%s", name);
        if (!json_is_object(recv))
                return gotmpl__fail(x, "can't evaluate field %s in type %s", name, gotmpl__type_name(recv));
        if (has_args)
                return gotmpl__fail(x, "%s is not a method but has arguments", name);
        json_t *v = json_object_get(recv, name);
        if (!v && x->opt->missingkey == GOTMPL_MISSINGKEY_ERROR)
                return gotmpl__fail(x, "map has no entry for key \"%s\"", name);
        *ret = json_incref(v);
        return 0;
}

/* Apply fields[] to recv (a new reference, consumed); only the last field may see arguments. */
static int eval_chain(struct gt_exec *x, json_t *recv, char *const *fields, size_t n, bool has_args, json_t **ret) {
        for (size_t i = 0; i < n; i++) {
                json_t *v = NULL;
                int r = eval_field(x, recv, fields[i], has_args && i + 1 == n, &v);
                json_decref(recv);
                if (r < 0)
                        return r;
                recv = v;
        }
        *ret = recv;
        return 0;
}

/* ---- arguments, commands, pipelines ---- */

static int eval_pipe(struct gt_exec *x, const struct gt_pipe *pipe, json_t *dot, json_t **ret);
static int eval_call(struct gt_exec *x, const struct gt_arg *fn, struct gt_arg *const *args, size_t n,
                     json_t *dot, json_t *final, bool has_final, json_t **ret);

/* The value an operand starts from before its field chain (new reference or NULL). */
static int eval_base(struct gt_exec *x, const struct gt_arg *a, json_t *dot, json_t **ret) {
        struct gt_var *v;
        switch (a->type) {
        case GT_ARG_FIELD:
        case GT_ARG_DOT:
                *ret = json_incref(dot);
                return 0;
        case GT_ARG_VAR:
                v = var_find(x, a->name);
                if (!v)
                        return gotmpl__fail(x, "undefined variable: %s", a->name);
                *ret = json_incref(v->value);
                return 0;
        case GT_ARG_CONST:
                *ret = json_incref(a->constant);
                return 0;
        case GT_ARG_PIPE:
                return eval_pipe(x, a->pipe, dot, ret);
        case GT_ARG_NIL:
        case GT_ARG_FUNC:
                break;
        }
        *ret = NULL;
        return 0;
}

/* An operand used as a function argument. */
static int eval_arg(struct gt_exec *x, const struct gt_arg *a, json_t *dot, json_t **ret) {
        json_t *base = NULL;
        at(x, a->pos, a->end);
        if (a->type == GT_ARG_FUNC)
                return eval_call(x, a, NULL, 0, dot, NULL, false, ret);
        int r = eval_base(x, a, dot, &base);
        if (r < 0)
                return r;
        at(x, a->pos, a->end);
        return eval_chain(x, base, a->fields, a->n_fields, false, ret);
}

static int check_type(struct gt_exec *x, enum gt_ptype want, json_t *v) {
        const char *name = want == GT_P_STRING ? "string" : "int";
        if (want == GT_P_ANY)
                return 0;
        if (!v || json_is_null(v))
                return gotmpl__fail(x, "invalid value; expected %s", name);
        if ((want == GT_P_STRING && !json_is_string(v)) || (want == GT_P_INT && !json_is_integer(v)))
                return gotmpl__fail(x, "wrong type for value; expected %s; got %s", name, gotmpl__type_name(v));
        return 0;
}

static enum gt_ptype param_type(const struct gt_func *f, size_t i) {
        int fixed = f->max_args < 0 ? f->min_args : f->max_args; /* the parameters before the variadic rest */
        bool typed = i < 3 && (int)i < fixed;
        return typed ? f->types[i] : f->rest;
}

static int check_arg_count(struct gt_exec *x, const struct gt_func *f, size_t argc) {
        if (f->max_args < 0 && argc < (size_t)f->min_args)
                return gotmpl__fail(x, "wrong number of args for %s: want at least %d got %zu", f->name, f->min_args,
                                    argc);
        if (f->max_args >= 0 && (argc < (size_t)f->min_args || argc > (size_t)f->max_args))
                return gotmpl__fail(x, "wrong number of args for %s: want %d got %zu", f->name, f->max_args, argc);
        return 0;
}

/* and/or: arguments are evaluated left to right only as far as needed (Go 1.18). */
static int eval_lazy(struct gt_exec *x, const struct gt_func *f, struct gt_arg *const *args, size_t n,
                     json_t *dot, json_t *final, bool has_final, json_t **ret) {
        bool is_and = strcmp(f->name, "and") == 0;
        json_t *v = NULL;
        for (size_t i = 0; i < n + has_final; i++) {
                json_decref(v);
                v = NULL;
                if (i < n) {
                        int r = eval_arg(x, args[i], dot, &v);
                        if (r < 0)
                                return r;
                } else
                        v = json_incref(final);
                if (gotmpl__truth(v) != is_and)
                        break;
        }
        *ret = v;
        return 0;
}

static int call_with(struct gt_exec *x, const struct gt_func *f, json_t **argv, size_t argc, json_t **ret) {
        for (size_t i = 0; i < argc; i++) {
                int r = check_type(x, param_type(f, i), argv[i]);
                if (r < 0)
                        return r;
        }
        return f->fn(x, argv, argc, ret);
}

static int eval_call(struct gt_exec *x, const struct gt_arg *fn, struct gt_arg *const *args, size_t n,
                     json_t *dot, json_t *final, bool has_final, json_t **ret) {
        const struct gt_func *f = fn->func;
        size_t argc = n + has_final;
        at(x, fn->pos, fn->end);
        int r = check_arg_count(x, f, argc);
        if (r < 0)
                return r;
        if (f->lazy)
                return eval_lazy(x, f, args, n, dot, final, has_final, ret);
        json_t **argv = calloc(argc ? argc : 1, sizeof *argv);
        if (!argv)
                return -ENOMEM;
        for (size_t i = 0; i < n && r >= 0; i++)
                r = eval_arg(x, args[i], dot, &argv[i]);
        if (has_final)
                argv[n] = json_incref(final);
        at(x, fn->pos, fn->end);
        if (r >= 0)
                r = call_with(x, f, argv, argc, ret);
        for (size_t i = 0; i < argc; i++)
                json_decref(argv[i]);
        free(argv);
        return r;
}

static int eval_cmd(struct gt_exec *x, const struct gt_cmd *c, json_t *dot, json_t *final, bool has_final,
                    json_t **ret) {
        const struct gt_arg *first = c->args[0];
        bool has_args = c->n_args > 1 || has_final;
        json_t *base = NULL;
        at(x, c->pos, c->end);
        if (first->type == GT_ARG_FUNC)
                return eval_call(x, first, c->args + 1, c->n_args - 1, dot, final, has_final, ret);
        if ((first->type == GT_ARG_CONST || first->type == GT_ARG_DOT) && has_args)
                return gotmpl__fail(x, "can't give argument to non-function %.*s", (int)(first->end - first->pos),
                               x->t->text + first->pos);
        if (c->n_args > 1)
                return gotmpl__fail(x, "%s is not a method but has arguments",
                               first->n_fields ? first->fields[first->n_fields - 1] : "value");
        int r = eval_base(x, first, dot, &base);
        if (r < 0)
                return r;
        at(x, first->pos, first->end);
        if (first->n_fields == 0 && has_final) {
                json_decref(base);
                return gotmpl__fail(x, "can't give argument to non-function %.*s", (int)(first->end - first->pos),
                               x->t->text + first->pos);
        }
        return eval_chain(x, base, first->fields, first->n_fields, has_final, ret);
}

static int pipe_declare(struct gt_exec *x, const struct gt_pipe *pipe, json_t *value) {
        for (size_t i = 0; i < pipe->n_decl; i++) {
                if (!pipe->is_assign) {
                        int r = var_push(x, pipe->decl[i], value);
                        if (r < 0)
                                return r;
                        continue;
                }
                struct gt_var *v = var_find(x, pipe->decl[i]);
                if (!v)
                        return gotmpl__fail(x, "undefined variable: %s", pipe->decl[i]);
                var_set(v, value);
        }
        return 0;
}

/* Evaluate a pipeline; declared variables are pushed (or assigned) with its value. */
static int eval_pipe(struct gt_exec *x, const struct gt_pipe *pipe, json_t *dot, json_t **ret) {
        json_t *v = NULL;
        for (size_t i = 0; i < pipe->n_cmds; i++) {
                json_t *nv = NULL;
                int r = eval_cmd(x, pipe->cmds[i], dot, v, i > 0, &nv);
                json_decref(v);
                if (r < 0)
                        return r;
                v = nv;
                if (json_is_null(v)) { /* a nil interface{} becomes "no value", as Go does */
                        json_decref(v);
                        v = NULL;
                }
        }
        at(x, pipe->pos, pipe->end);
        int r = pipe_declare(x, pipe, v);
        if (r < 0) {
                json_decref(v);
                return r;
        }
        *ret = v;
        return 0;
}

/* ---- control structures ---- */

static int walk(struct gt_exec *x, const struct gt_list *list, json_t *dot);

static int walk_if_with(struct gt_exec *x, const struct gt_node *n, json_t *dot) {
        size_t mark = x->n_vars;
        json_t *v = NULL;
        int r = eval_pipe(x, n->pipe, dot, &v);
        if (r >= 0) {
                bool truth = gotmpl__truth(v);
                json_t *new_dot = n->type == GT_NODE_WITH ? v : dot;
                r = walk(x, truth ? &n->list : &n->else_list, truth ? new_dot : dot);
        }
        json_decref(v);
        var_pop(x, mark);
        return r;
}

/* One range iteration: $i and $v (when declared) then the body. 1 = stop (break). */
static int range_step(struct gt_exec *x, const struct gt_node *n, size_t mark, json_t *key, json_t *elem) {
        const struct gt_pipe *p = n->pipe;
        struct gt_var *vk = NULL, *ve = NULL;
        if (p->n_decl >= 1)
                ve = p->is_assign ? var_find(x, p->decl[p->n_decl - 1]) : &x->vars[mark + p->n_decl - 1];
        if (p->n_decl == 2)
                vk = p->is_assign ? var_find(x, p->decl[0]) : &x->vars[mark];
        if (ve)
                var_set(ve, elem);
        if (vk)
                var_set(vk, key);
        size_t inner = x->n_vars;
        int r = walk(x, &n->list, elem);
        var_pop(x, inner);
        if (r < 0)
                return r;
        enum ctl c = x->ctl;
        x->ctl = CTL_NONE;
        return c == CTL_BREAK;
}

static int range_object(struct gt_exec *x, const struct gt_node *n, size_t mark, json_t *obj) {
        size_t count, i;
        const char **keys = jsonutil_sorted_keys(obj, &count);
        if (!keys)
                return -ENOMEM;
        int r = 0;
        for (i = 0; i < count && r == 0; i++) {
                json_t *k = json_string(keys[i]);
                r = k ? range_step(x, n, mark, k, json_object_get(obj, keys[i])) : -ENOMEM;
                json_decref(k);
        }
        free(keys);
        return r < 0 ? r : 0;
}

static int range_array(struct gt_exec *x, const struct gt_node *n, size_t mark, json_t *arr) {
        int r = 0;
        for (size_t i = 0; i < json_array_size(arr) && r == 0; i++) {
                json_t *k = json_integer((json_int_t)i);
                r = k ? range_step(x, n, mark, k, json_array_get(arr, i)) : -ENOMEM;
                json_decref(k);
        }
        return r < 0 ? r : 0;
}

static int walk_range(struct gt_exec *x, const struct gt_node *n, json_t *dot) {
        size_t mark = x->n_vars;
        json_t *v = NULL;
        int r = eval_pipe(x, n->pipe, dot, &v);
        if (r < 0)
                goto out;
        if ((json_is_array(v) && json_array_size(v) > 0))
                r = range_array(x, n, mark, v);
        else if (json_is_object(v) && json_object_size(v) > 0)
                r = range_object(x, n, mark, v);
        else if (!v || json_is_array(v) || json_is_object(v))
                r = walk(x, &n->else_list, dot);
        else {
                struct gt_buf b = { .max = CONTEXT_MAX };
                gotmpl__print_value(&b, v, true, 0);
                at(x, n->pipe->pos, n->pipe->end);
                r = gotmpl__fail(x, "range can't iterate over %.*s", (int)b.len, b.data ? b.data : "");
                gotmpl__buf_done(&b);
        }
out:
        json_decref(v);
        var_pop(x, mark);
        return r;
}

static int walk_action(struct gt_exec *x, const struct gt_node *n, json_t *dot) {
        json_t *v = NULL;
        int r = eval_pipe(x, n->pipe, dot, &v);
        if (r >= 0 && n->pipe->n_decl == 0)
                r = gotmpl__print_value(&x->out, v, true, 0);
        json_decref(v);
        if (r == -EFBIG) {
                gotmpl__fail(x, "output exceeds %zu bytes", x->opt->max_output);
                return -EFBIG;
        }
        return r;
}

static int walk_node(struct gt_exec *x, const struct gt_node *n, json_t *dot) {
        int r;
        switch (n->type) {
        case GT_NODE_TEXT:
                r = gotmpl__buf_add(&x->out, n->text, n->text_len);
                if (r == -EFBIG) {
                        at(x, n->pos, n->pos);
                        gotmpl__fail(x, "output exceeds %zu bytes", x->opt->max_output);
                }
                return r;
        case GT_NODE_ACTION:
                return walk_action(x, n, dot);
        case GT_NODE_IF:
        case GT_NODE_WITH:
                return walk_if_with(x, n, dot);
        case GT_NODE_RANGE:
                return walk_range(x, n, dot);
        case GT_NODE_BREAK:
                x->ctl = CTL_BREAK;
                return 0;
        case GT_NODE_CONTINUE:
                x->ctl = CTL_CONTINUE;
                return 0;
        }
        return -EINVAL;
}

static int walk(struct gt_exec *x, const struct gt_list *list, json_t *dot) {
        for (size_t i = 0; i < list->n && x->ctl == CTL_NONE; i++) {
                int r = walk_node(x, list->items[i], dot);
                if (r < 0)
                        return r;
        }
        return 0;
}

int gotmpl_execute(const struct gotmpl *tmpl, json_t *data, const struct gotmpl_options *options,
                   char **ret_text, size_t *ret_len, char *err, size_t errlen) {
        struct gotmpl_options opt = options ? *options : (struct gotmpl_options){ 0 };
        char dummy[1];
        if (opt.max_output == 0)
                opt.max_output = GOTMPL_DEFAULT_MAX_OUTPUT;
        struct gt_exec x = { .t = tmpl, .opt = &opt, .out = { .max = opt.max_output },
                             .err = err ? err : dummy, .errlen = err ? errlen : sizeof dummy };
        int r = var_push(&x, "$", data);
        if (r >= 0)
                r = walk(&x, &tmpl->root, data);
        if (r >= 0)
                r = gotmpl__buf_add(&x.out, "", 0); /* make sure there is a buffer to NUL-terminate */
        var_pop(&x, 0);
        free(x.vars);
        if (r < 0) {
                gotmpl__buf_done(&x.out);
                return r;
        }
        if (ret_len)
                *ret_len = x.out.len;
        *ret_text = x.out.data;
        return 0;
}
