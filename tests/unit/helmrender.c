/* helmrender: render a Helm chart with the project's Go-template engine (coordinator/gotmpl) and read every
 * manifest back with libyaml; the chart's tests use it (no helm binary is needed). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "helmrender.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "gotmpl.h"
#include "yamlconf.h"

#define MAX_TEMPLATE (1024 * 1024)

static void merge(json_t *dst, const json_t *src) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)src, key, v) {
                json_t *d = json_object_get(dst, key);
                if (json_is_object(d) && json_is_object(v))
                        merge(d, v);
                else
                        json_object_set_new(dst, key, json_deep_copy(v));
        }
}

int helmrender_chart_meta(const char *chart_dir, json_t **ret, char *err, size_t errlen) {
        char path[4096];
        json_t *doc;
        snprintf(path, sizeof path, "%s/Chart.yaml", chart_dir);
        int r = yamlconf_load(path, &doc, err, errlen);
        if (r < 0)
                return r;
        json_t *meta = json_object();
        const char *key;
        json_t *v;
        json_object_foreach(doc, key, v) {
                char k[128];
                snprintf(k, sizeof k, "%s", strcmp(key, "apiVersion") == 0 ? "APIVersion" : key);
                k[0] = (char)toupper((unsigned char)k[0]);
                json_object_set(meta, k, v);
        }
        json_decref(doc);
        *ret = meta;
        return 0;
}

static int render_data(const char *chart_dir, const json_t *overrides, const char *ns, json_t **ret, char *err,
                       size_t errlen) {
        char path[4096];
        json_t *values, *chart;
        snprintf(path, sizeof path, "%s/values.yaml", chart_dir);
        int r = yamlconf_load(path, &values, err, errlen);
        if (r < 0)
                return r;
        if (helmrender_chart_meta(chart_dir, &chart, err, errlen) < 0) {
                json_decref(values);
                return -EINVAL;
        }
        if (overrides)
                merge(values, overrides);
        *ret = json_pack("{s:o, s:o, s:{s:s, s:s, s:s, s:b}}", "Values", values, "Chart", chart, "Release", "Name",
                         "pvescale", "Namespace", ns, "Service", "Helm", "IsInstall", 1);
        return *ret ? 0 : -ENOMEM;
}

/* Only whitespace and # comments? */
static int blank(const char *s, size_t n) {
        size_t i = 0;
        while (i < n) {
                while (i < n && isspace((unsigned char)s[i]))
                        i++;
                if (i < n && s[i] != '#')
                        return 0;
                while (i < n && s[i] != '\n')
                        i++;
        }
        return 1;
}

static int add_doc(json_t *docs, const char *file, const char *s, size_t n, char *err, size_t errlen) {
        json_t *obj;
        char why[256];
        if (blank(s, n))
                return 0;
        if (yamlconf_parse(s, n, &obj, why, sizeof why) < 0) {
                snprintf(err, errlen, "%s: rendered YAML: %s", file, why);
                return -EINVAL;
        }
        if (json_is_object(obj) && json_object_size(obj) == 0) {
                json_decref(obj);
                return 0;
        }
        return json_array_append_new(docs, json_pack("{s:s, s:o}", "template", file, "object", obj));
}

/* Split at lines that are "---". */
static int split_docs(json_t *docs, const char *file, const char *text, char *err, size_t errlen) {
        const char *start = text, *p = text;
        while (*p) {
                const char *eol = strchr(p, '\n');
                size_t len = eol ? (size_t)(eol - p) : strlen(p);
                if (len >= 3 && strncmp(p, "---", 3) == 0 && blank(p + 3, len - 3)) {
                        int r = add_doc(docs, file, start, (size_t)(p - start), err, errlen);
                        if (r < 0)
                                return r;
                        start = eol ? eol + 1 : p + len;
                }
                p = eol ? eol + 1 : p + len;
        }
        return add_doc(docs, file, start, strlen(start), err, errlen);
}

static int render_one(const char *chart_dir, const char *file, json_t *data, json_t *docs, char *err, size_t errlen) {
        char path[4096], *text, *out;
        size_t len;
        snprintf(path, sizeof path, "%s/templates/%s", chart_dir, file);
        int r = fileio_read(path, MAX_TEMPLATE, &text, &len);
        if (r < 0) {
                snprintf(err, errlen, "%s: %s", path, strerror(-r));
                return r;
        }
        r = gotmpl_render(file, text, data, NULL, &out, err, errlen);
        free(text);
        if (r < 0)
                return r;
        r = split_docs(docs, file, out, err, errlen);
        free(out);
        return r;
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The template files (*.yaml), sorted. */
static int list_templates(const char *chart_dir, char ***ret, size_t *ret_n) {
        char path[4096];
        snprintf(path, sizeof path, "%s/templates", chart_dir);
        DIR *d = opendir(path);
        if (!d)
                return -errno;
        char **names = NULL;
        size_t n = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
                size_t l = strlen(e->d_name);
                if (l < 6 || strcmp(e->d_name + l - 5, ".yaml") != 0)
                        continue;
                names = realloc(names, (n + 1) * sizeof *names);
                names[n++] = strdup(e->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp_str);
        *ret = names;
        *ret_n = n;
        return 0;
}

int helmrender_chart(const char *chart_dir, const json_t *overrides, const char *ns, json_t **ret_docs, char *err,
                     size_t errlen) {
        json_t *data, *docs = json_array();
        char **names = NULL;
        size_t n = 0;
        int r = render_data(chart_dir, overrides, ns, &data, err, errlen);
        if (r < 0) {
                json_decref(docs);
                return r;
        }
        r = list_templates(chart_dir, &names, &n);
        if (r < 0)
                snprintf(err, errlen, "%s/templates: %s", chart_dir, strerror(-r));
        for (size_t i = 0; i < n; i++) {
                if (r == 0)
                        r = render_one(chart_dir, names[i], data, docs, err, errlen);
                free(names[i]);
        }
        free(names);
        json_decref(data);
        if (r < 0) {
                json_decref(docs);
                return r;
        }
        *ret_docs = docs;
        return 0;
}
