/* gotmpl_lex: splits a template into text and action tokens as Go's text/template lexer does (trim markers,
 * comments, strings, numbers, fields, variables). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "gotmpl_internal.h"

static const char *const keywords[] = { "block", "break", "continue", "define", "else", "end",
                                        "if", "range", "template", "with", NULL };

static bool is_space(char c) {
        return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool is_alnum(char c) {
        return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               (unsigned char)c >= 0x80;
}

static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

static bool at(const struct gt_lexer *l, size_t pos, const char *s) {
        size_t n = strlen(s);
        return pos + n <= l->len && memcmp(l->text + pos, s, n) == 0;
}

/* "{{- " : a left trim marker right after the delimiter at pos. */
static bool left_trim_at(const struct gt_lexer *l, size_t pos) {
        return pos + 3 < l->len && l->text[pos + 2] == '-' && is_space(l->text[pos + 3]);
}

/* " -}}" at pos. */
static bool right_trim_at(const struct gt_lexer *l, size_t pos) {
        return pos + 1 < l->len && is_space(l->text[pos]) && l->text[pos + 1] == '-' && at(l, pos + 2, "}}");
}

static struct gt_token make(enum gt_tok type, size_t pos, const char *text, size_t len) {
        return (struct gt_token){ .type = type, .pos = pos, .text = text, .len = len };
}

static struct gt_token error_at(struct gt_lexer *l, size_t pos, const char *msg) {
        l->pos = l->len;
        l->in_action = false;
        l->paren_depth = -1000; /* sticky: keep failing */
        return make(GT_TOK_ERROR, pos, msg, strlen(msg));
}

static void skip_spaces(struct gt_lexer *l) {
        while (l->pos < l->len && is_space(l->text[l->pos]))
                l->pos++;
}

/* After a right delimiter (of an action or a comment): leave the action, applying a right trim. */
static void leave_action(struct gt_lexer *l, bool trim) {
        l->in_action = false;
        if (trim)
                skip_spaces(l);
}

/* A comment starts at l->pos (after "{{" and an optional trim marker). Consumes it and its right delimiter. */
static struct gt_token lex_comment(struct gt_lexer *l, size_t start) {
        const char *end = memmem(l->text + l->pos + 2, l->len - l->pos - 2, "*/", 2);
        if (!end)
                return error_at(l, start, "unclosed comment");
        l->pos = (size_t)(end - l->text) + 2;
        if (right_trim_at(l, l->pos)) {
                l->pos += 4;
                leave_action(l, true);
                return make(GT_TOK_COMMENT, start, NULL, 0);
        }
        if (!at(l, l->pos, "}}"))
                return error_at(l, start, "comment ends before closing delimiter");
        l->pos += 2;
        leave_action(l, false);
        return make(GT_TOK_COMMENT, start, NULL, 0);
}

/* At "{{": the left delimiter (or a whole comment). */
static struct gt_token lex_left(struct gt_lexer *l) {
        size_t start = l->pos;
        bool trim = left_trim_at(l, start);
        l->pos += trim ? 4 : 2;
        if (trim)
                skip_spaces(l);
        if (at(l, l->pos, "/*"))
                return lex_comment(l, start);
        l->in_action = true;
        l->paren_depth = 0;
        struct gt_token t = make(GT_TOK_LEFT, start, l->text + start, 2);
        t.trim = trim;
        return t;
}

static struct gt_token lex_text(struct gt_lexer *l) {
        size_t start = l->pos;
        const char *d = memmem(l->text + start, l->len - start, "{{", 2);
        size_t stop = d ? (size_t)(d - l->text) : l->len;
        size_t end = stop;
        if (d && left_trim_at(l, stop))
                while (end > start && is_space(l->text[end - 1]))
                        end--;
        l->pos = stop;
        if (end > start)
                return make(GT_TOK_TEXT, start, l->text + start, end - start);
        if (!d)
                return make(GT_TOK_EOF, l->len, NULL, 0);
        return lex_left(l);
}

static struct gt_token lex_quote(struct gt_lexer *l, size_t start) {
        size_t p = start + 1;
        for (; p < l->len && l->text[p] != '"'; p++) {
                if (l->text[p] == '\n')
                        break;
                if (l->text[p] == '\\' && p + 1 < l->len && l->text[p + 1] != '\n')
                        p++;
        }
        if (p >= l->len || l->text[p] != '"')
                return error_at(l, start, "unterminated quoted string");
        l->pos = p + 1;
        return make(GT_TOK_STRING, start, l->text + start, l->pos - start);
}

static struct gt_token lex_raw(struct gt_lexer *l, size_t start) {
        const char *end = memchr(l->text + start + 1, '`', l->len - start - 1);
        if (!end)
                return error_at(l, start, "unterminated raw quoted string");
        l->pos = (size_t)(end - l->text) + 1;
        return make(GT_TOK_STRING, start, l->text + start, l->pos - start);
}

static struct gt_token lex_char(struct gt_lexer *l, size_t start) {
        size_t p = start + 1;
        for (; p < l->len && l->text[p] != '\'' && l->text[p] != '\n'; p++)
                if (l->text[p] == '\\' && p + 1 < l->len)
                        p++;
        if (p >= l->len || l->text[p] != '\'')
                return error_at(l, start, "unterminated character constant");
        l->pos = p + 1;
        return make(GT_TOK_CHAR, start, l->text + start, l->pos - start);
}

static size_t accept_run(const struct gt_lexer *l, size_t p, const char *valid) {
        while (p < l->len && l->text[p] && strchr(valid, l->text[p]))
                p++;
        return p;
}

/* Go's scanNumber: sign, base prefix, digits with '_', fraction, exponent, imaginary suffix. */
static struct gt_token lex_number(struct gt_lexer *l, size_t start) {
        const char *digits = "0123456789_", *exp = "eE";
        size_t p = accept_run(l, start, "+-") > start ? start + 1 : start;
        if (p + 1 < l->len && l->text[p] == '0' && strchr("xXoObB", l->text[p + 1])) {
                char b = l->text[p + 1];
                p += 2;
                bool hex = b == 'x' || b == 'X';
                if (hex)
                        digits = "0123456789abcdefABCDEF_";
                else if (b == 'o' || b == 'O')
                        digits = "01234567_";
                else
                        digits = "01_";
                exp = hex ? "pP" : "";
        }
        p = accept_run(l, p, digits);
        if (p < l->len && l->text[p] == '.')
                p = accept_run(l, p + 1, digits);
        if (p < l->len && *exp && strchr(exp, l->text[p])) {
                p = accept_run(l, p + 1, "+-") > p + 1 ? p + 2 : p + 1;
                p = accept_run(l, p, "0123456789_");
        }
        if (p < l->len && l->text[p] == 'i')
                p++;
        if (p == start || (p < l->len && is_alnum(l->text[p])))
                return error_at(l, start, "bad number syntax");
        l->pos = p;
        return make(GT_TOK_NUMBER, start, l->text + start, p - start);
}

static size_t word_end(const struct gt_lexer *l, size_t p) {
        while (p < l->len && is_alnum(l->text[p]))
                p++;
        return p;
}

static struct gt_token lex_word(struct gt_lexer *l, size_t start) {
        size_t end = word_end(l, start);
        size_t n = end - start;
        const char *w = l->text + start;
        l->pos = end;
        if ((n == 4 && memcmp(w, "true", 4) == 0) || (n == 5 && memcmp(w, "false", 5) == 0))
                return make(GT_TOK_BOOL, start, w, n);
        if (n == 3 && memcmp(w, "nil", 3) == 0)
                return make(GT_TOK_NIL, start, w, n);
        for (const char *const *k = keywords; *k; k++)
                if (strlen(*k) == n && memcmp(*k, w, n) == 0)
                        return make(GT_TOK_KEYWORD, start, w, n);
        return make(GT_TOK_IDENT, start, w, n);
}

static struct gt_token lex_dot(struct gt_lexer *l, size_t start) {
        if (start + 1 < l->len && is_digit(l->text[start + 1]))
                return lex_number(l, start);
        size_t end = word_end(l, start + 1);
        l->pos = end;
        if (end == start + 1)
                return make(GT_TOK_DOT, start, l->text + start, 1);
        return make(GT_TOK_FIELD, start, l->text + start + 1, end - start - 1);
}

static struct gt_token lex_punct(struct gt_lexer *l, size_t start) {
        char c = l->text[start];
        l->pos = start + 1;
        switch (c) {
        case '|':
                return make(GT_TOK_PIPE, start, l->text + start, 1);
        case ',':
                return make(GT_TOK_COMMA, start, l->text + start, 1);
        case '=':
                return make(GT_TOK_ASSIGN, start, l->text + start, 1);
        case '(':
                l->paren_depth++;
                return make(GT_TOK_LPAREN, start, l->text + start, 1);
        case ')':
                if (--l->paren_depth < 0)
                        return error_at(l, start, "unexpected right paren");
                return make(GT_TOK_RPAREN, start, l->text + start, 1);
        case ':':
                if (start + 1 < l->len && l->text[start + 1] == '=') {
                        l->pos++;
                        return make(GT_TOK_DECLARE, start, l->text + start, 2);
                }
                return error_at(l, start, "expected :=");
        default:
                return error_at(l, start, "unrecognized character in action");
        }
}

/* The right delimiter at l->pos (possibly with a trim marker), or an EOF error. 0 when not at one. */
static int lex_right(struct gt_lexer *l, struct gt_token *ret) {
        size_t start = l->pos;
        bool trim = right_trim_at(l, start);
        if (!trim && !at(l, start, "}}"))
                return 0;
        if (l->paren_depth > 0) {
                *ret = error_at(l, start, "unclosed left paren");
                return 1;
        }
        l->pos += trim ? 4 : 2;
        leave_action(l, trim);
        *ret = make(GT_TOK_RIGHT, start, l->text + start, trim ? 4 : 2);
        ret->trim = trim;
        return 1;
}

static struct gt_token lex_action(struct gt_lexer *l) {
        struct gt_token t;
        bool space = false;
        for (;;) {
                if (lex_right(l, &t))
                        return t;
                if (l->pos >= l->len)
                        return error_at(l, l->pos, "unclosed action");
                if (!is_space(l->text[l->pos]))
                        break;
                space = true;
                l->pos++;
        }
        size_t start = l->pos;
        char c = l->text[start];
        if (c == '"')
                t = lex_quote(l, start);
        else if (c == '`')
                t = lex_raw(l, start);
        else if (c == '\'')
                t = lex_char(l, start);
        else if (c == '$') {
                l->pos = word_end(l, start + 1);
                t = make(GT_TOK_VARIABLE, start, l->text + start, l->pos - start);
        } else if (c == '.')
                t = lex_dot(l, start);
        else if (c == '+' || c == '-' || is_digit(c))
                t = lex_number(l, start);
        else if (is_alnum(c))
                t = lex_word(l, start);
        else
                t = lex_punct(l, start);
        t.space_before = space;
        return t;
}

void gotmpl__lex_init(struct gt_lexer *l, const char *text, size_t len) {
        *l = (struct gt_lexer){ .text = text, .len = len };
}

struct gt_token gotmpl__lex_next(struct gt_lexer *l) {
        if (l->paren_depth <= -1000)
                return make(GT_TOK_ERROR, l->len, "unexpected EOF", 14);
        for (;;) {
                struct gt_token t = l->in_action ? lex_action(l) : lex_text(l);
                if (t.type != GT_TOK_COMMENT)
                        return t;
        }
}
