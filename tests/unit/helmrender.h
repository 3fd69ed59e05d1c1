/* helmrender: render a Helm chart with the project's Go-template engine (coordinator/gotmpl) and read every
 * manifest back with libyaml; the chart's tests use it (no helm binary is needed). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stddef.h>

/* Render chart_dir/templates/\*.yaml (sorted by name) with .Values = values.yaml deep-merged with overrides
 * (may be NULL), .Release = {Name: "pvescale", Namespace: ns, Service: "Helm"} and .Chart from Chart.yaml
 * (keys capitalised: Name, Version, AppVersion). Every rendered file is split at "---" lines; empty documents
 * are dropped. *ret_docs: [{"template": "deployment.yaml", "object": {...}}, ...]. 0, or a negative errno with
 * the file and reason in err. */
int helmrender_chart(const char *chart_dir, const json_t *overrides, const char *ns, json_t **ret_docs, char *err,
                     size_t errlen);

/* Chart.yaml as .Chart sees it. */
int helmrender_chart_meta(const char *chart_dir, json_t **ret, char *err, size_t errlen);
