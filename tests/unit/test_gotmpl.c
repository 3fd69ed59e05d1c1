/* Tests for coordinator/gotmpl: Go text/template compatibility (a table checked against Go), errors with
 * file:line:col, parse once / execute many, missingkey, output and nesting limits. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gotmpl.h"

/* The data every table case runs with. Integers are jansson integers (Go int64), numbers with a fraction or
 * exponent are reals (Go float64). */
static const char DATA[] =
        "{\"Big\": 1234567.0, \"Count\": 3, \"Ctrl\": \"tab\\there\\u0001\\u007f\", \"Dot\": \"x.y\", \"E"
        "mpty\": \"\", \"EmptyList\": [], \"EmptyMap\": {}, \"F\": false, \"Floats\": [1.0, 2.5, 1e+21, 1"
        "e+20, 0.1, 100.0], \"Html\": \"<a&b>\", \"Int\": 42, \"Keys\": {\"\": \"empty\", \"1\": \"one\","
        " \"a b\": \"c\", \"null\": null, \"true\": 1, \"yes\": \"y\"}, \"List\": [\"a\", \"b\", \"c\"], "
        "\"Map\": {\"a\": 1, \"b\": 2, \"c\": {\"x\": \"y\"}}, \"Mixed\": [1, \"two\", null, true, 2.5, {"
        "\"k\": \"v\"}, [1, 2]], \"Name\": \"web\", \"Neg\": -7, \"Nested\": {\"A\": {\"B\": {\"C\": \"de"
        "ep\"}}}, \"Null\": null, \"Num\": 1.5, \"Small\": 0.0001, \"Spaces\": \"  padded \\t\\n\", \"T\""
        ": true, \"Tags\": [\"k8s\", \"pvescale\"], \"Text\": \"line1\\nline2\\n\", \"Tiny\": 1e-05, \"Un"
        "icode\": \"h\\u00e9llo w\\u00f6rld \\u2713\", \"YamlStrs\": [\"true\", \"false\", \"yes\", \"no"
        "\", \"on\", \"off\", \"null\", \"~\", \"\", \"123\", \"1.5\", \"0x1F\", \"1e3\", \"-1\", \"+1\","
        " \".5\", \"1:20\", \"2024-01-02\", \"2024-01-02T10:00:00Z\", \"a: b\", \"- x\", \"#c\", \"plain "
        "text\", \" lead\", \"trail \", \"@at\", \"`bt\", \"multi\\nline\", \"multi\\nline\\n\", \"a\\tb"
        "\", \"\\u00ff\", \"0o17\", \"08\", \"1_000\", \".inf\", \"NaN\", \"nan\"], \"Zero\": 0}";

struct tcase {
        const char *tmpl;
        const char *want;
};

/* Expected outputs were produced by Go itself: Go 1.19 text/template with Sprig v3.2.3's TxtFuncMap and Helm's
 * toYaml (ghodss/yaml Marshal, TrimSuffix "\n"), run on the same template and data (Debian bookworm packages
 * golang-go, golang-github-masterminds-sprig-dev, golang-github-ghodss-yaml-dev). They are not produced by
 * this engine. Covers fields, printing of every JSON type (fmt %v, floats), trim markers and comments,
 * if/else if/with/range (maps in key order, break/continue, $i/$v), variables, pipelines and parentheses,
 * literals, Go built-ins and the Sprig/Helm functions, and toJson/toYaml quoting. */
static const struct tcase GO_CASES[] = {
        { "{{ .Name }}",
          "web" },
        { "{{ .Count }}",
          "3" },
        { "{{ .Missing }}",
          "<no value>" },
        { "{{ .Missing.Deeper }}",
          "<no value>" },
        { "{{ .Null }}",
          "<no value>" },
        { "{{ .T }} {{ .F }}",
          "true false" },
        { "{{ .List }}",
          "[a b c]" },
        { "{{ .EmptyList }}",
          "[]" },
        { "{{ .Map }}",
          "map[a:1 b:2 c:map[x:y]]" },
        { "{{ .EmptyMap }}",
          "map[]" },
        { "{{ .Nested.A.B.C }}",
          "deep" },
        { "{{ .Nested.A }}",
          "map[B:map[C:deep]]" },
        { "{{ .Num }} {{ .Big }} {{ .Small }} {{ .Tiny }}",
          "1.5 1.234567e+06 0.0001 1e-05" },
        { "{{ .Int }} {{ .Neg }}",
          "42 -7" },
        { "{{ .Mixed }}",
          "[1 two <nil> true 2.5 map[k:v] [1 2]]" },
        { "{{ . }}",
          "map[Big:1.234567e+06 Count:3 Ctrl:tab\there\001\177 Dot:x.y Empty: EmptyList:[] EmptyMap:map[] F:false Floats:[1 2.5 1e+21 1e+20 0.1 100] Html:<a&b> Int:42 Keys:map[:empty 1:one a b:c null:<nil> true:1 yes:y] List:[a b c] Map:map[a:1 b:2 c:map[x:y]] Mixed:[1 two <nil> true 2.5 map[k:v] [1 2]] Name:web Neg:-7 Nested:map[A:map[B:map[C:deep]]] Null:<nil> Num:1.5 Small:0.0001 Spaces:  padded \t\n T:true Tags:[k8s pvescale] Text:line1\nline2\n Tiny:1e-05 Unicode:h\303\251llo w\303\266rld \342\234\223 YamlStrs:[true false yes no on off null ~  123 1.5 0x1F 1e3 -1 +1 .5 1:20 2024-01-02 2024-01-02T10:00:00Z a: b - x #c plain text  lead trail  @at `bt multi\nline multi\nline\n a\tb \303\277 0o17 08 1_000 .inf NaN nan] Zero:0]" },
        { "{{ 1 }} {{ 1.0 }} {{ 1e6 }} {{ -3 }} {{ 0x1F }} {{ 1_000 }} {{ 0o17 }} {{ 017 }} {{ 0b101 }}",
          "1 1 1e+06 -3 31 1000 15 15 5" },
        { "{{ \"a\\tb\\n\\\"q\\\"\\x41\\u00e9\\101\" }}",
          "a\tb\n\"q\"A\303\251A" },
        { "{{ `raw\\n` }}",
          "raw\\n" },
        { "{{ true }} {{ false }}",
          "true false" },
        { "{{ .Floats }}",
          "[1 2.5 1e+21 1e+20 0.1 100]" },
        { "{{ 123456.0 }} {{ 1234567.0 }} {{ 0.001 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1e-7 }} {{ 3.14159 }} {{ 1e100 }} {{ 100000.0 }}",
          "123456 1.234567e+06 0.001 0.0001 1e-05 1e-07 3.14159 1e+100 100000" },
        { "a  {{- .Name -}}  b",
          "awebb" },
        { "a\n\n{{- .Name }}\n",
          "aweb\n" },
        { "{{ .Name -}}\n\n  x",
          "webx" },
        { "a {{/* comment */}} b",
          "a  b" },
        { "a {{- /* c */ -}} b",
          "ab" },
        { "x{{-3}}y",
          "x-3y" },
        { "x{{ -3 }}y",
          "x-3y" },
        { "{{- .Name}}",
          "web" },
        { "  {{- \"\" -}}  ",
          "" },
        { "a\n  {{- if .T }}\n  yes\n  {{- end }}\nb",
          "a\n  yes\nb" },
        { "{{/* multi\nline */}}ok",
          "ok" },
        { "{{ if .T }}yes{{ end }}",
          "yes" },
        { "{{ if .F }}yes{{ else }}no{{ end }}",
          "no" },
        { "{{ if .Missing }}yes{{ else }}no{{ end }}",
          "no" },
        { "{{ if .Zero }}a{{ else if .Empty }}b{{ else if .List }}c{{ else }}d{{ end }}",
          "c" },
        { "{{ if .EmptyList }}a{{ else }}b{{ end }}",
          "b" },
        { "{{ if .EmptyMap }}a{{ else }}b{{ end }}",
          "b" },
        { "{{ if .Null }}a{{ else }}b{{ end }}",
          "b" },
        { "{{ if .Num }}a{{ end }}",
          "a" },
        { "{{ with .Nested.A }}{{ .B.C }}{{ end }}",
          "deep" },
        { "{{ with .Missing }}x{{ else }}none{{ end }}",
          "none" },
        { "{{ with .Name }}{{ . }}-{{ $.Count }}{{ end }}",
          "web-3" },
        { "{{ with $x := .Name }}{{ $x }}{{ end }}",
          "web" },
        { "{{ if $x := .Count }}{{ $x }}{{ end }}",
          "3" },
        { "{{ with .Nested }}{{ with .A }}{{ with .B }}{{ .C }}{{ end }}{{ end }}{{ end }}",
          "deep" },
        { "{{ if .T }}{{ with .Map }}{{ .a }}{{ end }}{{ end }}",
          "1" },
        { "{{ if and .T .Name }}y{{ end }}",
          "y" },
        { "{{ if or .F .Zero }}y{{ else }}n{{ end }}",
          "n" },
        { "{{ and 1 0 2 }} {{ or 0 \"\" 3 }} {{ and 1 2 }} {{ or 0 false }}",
          "0 3 2 false" },
        { "{{ not .T }} {{ not .Empty }}",
          "false true" },
        { "{{ if not .Missing }}m{{ end }}",
          "m" },
        { "{{ if eq .Name \"web\" }}eq{{ end }}",
          "eq" },
        { "{{ eq .Count 3 }} {{ eq .Count 4 5 3 }} {{ ne .Name \"x\" }}",
          "true true true" },
        { "{{ eq .Missing \"x\" }}",
          "false" },
        { "{{ eq .Num 1.5 }}",
          "true" },
        { "{{ lt 1 2 }} {{ le 2 2 }} {{ gt \"b\" \"a\" }} {{ ge 1.5 2.5 }}",
          "true true true false" },
        { "{{ eq .T true }}",
          "true" },
        { "{{ range .List }}[{{ . }}]{{ end }}",
          "[a][b][c]" },
        { "{{ range $i, $v := .List }}{{ $i }}={{ $v }};{{ end }}",
          "0=a;1=b;2=c;" },
        { "{{ range $v := .List }}{{ $v }}{{ end }}",
          "abc" },
        { "{{ range .Map }}{{ . }};{{ end }}",
          "1;2;map[x:y];" },
        { "{{ range $k, $v := .Map }}{{ $k }}:{{ $v }};{{ end }}",
          "a:1;b:2;c:map[x:y];" },
        { "{{ range .EmptyList }}x{{ else }}empty{{ end }}",
          "empty" },
        { "{{ range .Missing }}x{{ else }}none{{ end }}",
          "none" },
        { "{{ range .Null }}x{{ else }}nil{{ end }}",
          "nil" },
        { "{{ range .EmptyMap }}x{{ else }}e{{ end }}",
          "e" },
        { "{{ range .List }}{{ if eq . \"b\" }}{{ break }}{{ end }}{{ . }}{{ end }}",
          "a" },
        { "{{ range .List }}{{ if eq . \"b\" }}{{ continue }}{{ end }}{{ . }}{{ end }}",
          "ac" },
        { "{{ range $i, $e := .List }}{{ range $.Tags }}{{ $e }}{{ . }} {{ end }}{{ end }}",
          "ak8s apvescale bk8s bpvescale ck8s cpvescale " },
        { "{{ range .Keys }}{{ . }},{{ end }}",
          "empty,one,c,<no value>,1,y," },
        { "{{ range $k, $v := .Keys }}{{ $k | quote }}{{ end }}",
          "\"\"\"1\"\"a b\"\"null\"\"true\"\"yes\"" },
        { "{{ $x := 0 }}{{ range .List }}{{ $x = . }}{{ end }}{{ $x }}",
          "c" },
        { "{{ range $i, $v := .Map }}{{ $i }}{{ end }}",
          "abc" },
        { "{{ range .Mixed }}{{ . }}|{{ end }}",
          "1|two|<no value>|true|2.5|map[k:v]|[1 2]|" },
        { "{{ range .List }}\n  - {{ . }}\n{{- end }}",
          "\n  - a\n  - b\n  - c" },
        { "{{ $x := .Name }}{{ $x }}",
          "web" },
        { "{{ $x := 1 }}{{ $x = 2 }}{{ $x }}",
          "2" },
        { "{{ $ }}",
          "map[Big:1.234567e+06 Count:3 Ctrl:tab\there\001\177 Dot:x.y Empty: EmptyList:[] EmptyMap:map[] F:false Floats:[1 2.5 1e+21 1e+20 0.1 100] Html:<a&b> Int:42 Keys:map[:empty 1:one a b:c null:<nil> true:1 yes:y] List:[a b c] Map:map[a:1 b:2 c:map[x:y]] Mixed:[1 two <nil> true 2.5 map[k:v] [1 2]] Name:web Neg:-7 Nested:map[A:map[B:map[C:deep]]] Null:<nil> Num:1.5 Small:0.0001 Spaces:  padded \t\n T:true Tags:[k8s pvescale] Text:line1\nline2\n Tiny:1e-05 Unicode:h\303\251llo w\303\266rld \342\234\223 YamlStrs:[true false yes no on off null ~  123 1.5 0x1F 1e3 -1 +1 .5 1:20 2024-01-02 2024-01-02T10:00:00Z a: b - x #c plain text  lead trail  @at `bt multi\nline multi\nline\n a\tb \303\277 0o17 08 1_000 .inf NaN nan] Zero:0]" },
        { "{{ $.Name }}",
          "web" },
        { "{{ $x := .Nested }}{{ $x.A.B.C }}",
          "deep" },
        { "{{ $x := .Map }}{{ range $x }}{{ . }}{{ end }}",
          "12map[x:y]" },
        { "{{ .Name | upper }}",
          "WEB" },
        { "{{ .Missing | default \"dflt\" }}",
          "dflt" },
        { "{{ .Empty | default \"dflt\" }}",
          "dflt" },
        { "{{ .Zero | default 5 }}",
          "5" },
        { "{{ .Name | default \"dflt\" }}",
          "web" },
        { "{{ default \"x\" .Null }}",
          "x" },
        { "{{ default \"x\" }}",
          "x" },
        { "{{ .Name | quote }}",
          "\"web\"" },
        { "{{ .Missing | quote }}",
          "" },
        { "{{ .Count | quote }}",
          "\"3\"" },
        { "{{ quote .Name .Count .Missing }}",
          "\"web\" \"3\"" },
        { "{{ quote }}",
          "" },
        { "{{ .Html | quote }}",
          "\"<a&b>\"" },
        { "{{ .Ctrl | quote }}",
          "\"tab\\there\\x01\\x7f\"" },
        { "{{ .Unicode | quote }}",
          "\"h\303\251llo w\303\266rld \342\234\223\"" },
        { "{{ .List | quote }}",
          "\"[a b c]\"" },
        { "{{ .Map | quote }}",
          "\"map[a:1 b:2 c:map[x:y]]\"" },
        { "{{ .Null | quote }}",
          "" },
        { "{{ (.Name) }}",
          "web" },
        { "{{ (.Nested.A).B.C }}",
          "deep" },
        { "{{ (index .List 1) | upper }}",
          "B" },
        { "{{ upper (default \"a\" .Missing) }}",
          "A" },
        { "{{ .Name | printf \"%s-%d\" \"x\" }}",
          "x-%!d(string=web)" },
        { "{{ printf \"%s=%v %q %d%%\" .Name .Map .Name .Count }}",
          "web=map[a:1 b:2 c:map[x:y]] \"web\" 3%" },
        { "{{ printf \"%d\" .Name }}",
          "%!d(string=web)" },
        { "{{ printf \"%s\" }}",
          "%!s(MISSING)" },
        { "{{ print 1 2 \"a\" \"b\" 3 }}",
          "1 2ab3" },
        { "{{ println 1 \"a\" }}",
          "1 a\n" },
        { "{{ print .Missing }}",
          "<nil>" },
        { "{{ .Name | }}",
          "web" },
        { "{{ 'a' }}",
          "97" },
        { "{{ indent 4 \"a\\nb\" }}",
          "    a\n    b" },
        { "{{ nindent 2 .Text }}",
          "\n  line1\n  line2\n  " },
        { "{{ .Text | indent 2 }}",
          "  line1\n  line2\n  " },
        { "{{ indent 0 \"x\" }}",
          "x" },
        { "{{ b64enc \"hello\" }} {{ b64enc \"\" }} {{ b64enc \"a\" }} {{ b64enc \"ab\" }} {{ b64enc .Unicode }}",
          "aGVsbG8=  YQ== YWI= aMOpbGxvIHfDtnJsZCDinJM=" },
        { "{{ sha256sum \"hello\" }} {{ \"\" | sha256sum }}",
          "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824 "
          "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
        { "{{ .List | join \",\" }}",
          "a,b,c" },
        { "{{ join \", \" .Mixed }}",
          "1, two, true, 2.5, map[k:v], [1 2]" },
        { "{{ join \",\" .Name }}",
          "web" },
        { "{{ join \",\" .Missing }}",
          "" },
        { "{{ join \",\" .Map }}",
          "map[a:1 b:2 c:map[x:y]]" },
        { "{{ join \",\" .EmptyList }}",
          "" },
        { "{{ upper .Unicode }} {{ lower \"ABC def\" }}",
          "H\303\211LLO W\303\226RLD \342\234\223 abc def" },
        { "{{ trim .Spaces }}|",
          "padded|" },
        { "{{ trim \"\\u00a0x\\u0085 \" }}|",
          "x|" },
        { "{{ trimPrefix \"we\" .Name }} {{ trimSuffix \"eb\" .Name }} {{ hasPrefix \"w\" .Name }} {{ hasSuffix \"x\" .Name }}",
          "b w true false" },
        { "{{ contains \"e\" .Name }} {{ replace \"b\" \"B\" \"abcb\" }} {{ replace \"\" \"-\" \"abc\" }}",
          "true aBcB -a-b-c-" },
        { "{{ splitList \",\" \"a,b,,c\" }}",
          "[a b  c]" },
        { "{{ split \".\" .Dot }}",
          "map[_0:x _1:y]" },
        { "{{ (split \".\" .Dot)._1 }}",
          "y" },
        { "{{ list 1 \"a\" .Missing }}",
          "[1 a <nil>]" },
        { "{{ dict \"a\" 1 \"b\" .Name }}",
          "map[a:1 b:web]" },
        { "{{ dict \"a\" }}",
          "map[a:]" },
        { "{{ empty .EmptyList }} {{ empty .Name }}",
          "true false" },
        { "{{ ternary \"y\" \"n\" .T }} {{ ternary \"y\" \"n\" .F }}",
          "y n" },
        { "{{ coalesce .Missing .Empty .Name }}",
          "web" },
        { "{{ len .List }} {{ len .Map }} {{ len .Name }} {{ len .Unicode }}",
          "3 3 3 17" },
        { "{{ index .List 0 }} {{ index .Map \"a\" }} {{ index .Nested \"A\" \"B\" \"C\" }} {{ index .Map \"zz\" }}",
          "a 1 deep <no value>" },
        { "{{ toJson .Map }}",
          "{\"a\":1,\"b\":2,\"c\":{\"x\":\"y\"}}" },
        { "{{ .List | toJson }}",
          "[\"a\",\"b\",\"c\"]" },
        { "{{ toJson .Html }}",
          "\"\\u003ca\\u0026b\\u003e\"" },
        { "{{ toJson .Missing }}",
          "null" },
        { "{{ toJson .Mixed }}",
          "[1,\"two\",null,true,2.5,{\"k\":\"v\"},[1,2]]" },
        { "{{ toJson .Ctrl }}",
          "\"tab\\there\\u0001\177\"" },
        { "{{ toJson \"\\u2028\" }}",
          "\"\\u2028\"" },
        { "{{ toJson 1.5 }}",
          "1.5" },
        { "{{ toJson 2.0 }}",
          "2" },
        { "{{ toYaml .Map }}",
          "a: 1\nb: 2\nc:\n  x: \"y\"" },
        { "{{ toYaml .List }}",
          "- a\n- b\n- c" },
        { "{{ toYaml .YamlStrs }}",
          "- \"true\"\n- \"false\"\n- \"yes\"\n- \"no\"\n- \"on\"\n- \"off\"\n- \"null\"\n- \"~\"\n- \"\"\n- \"123\"\n- \"1.5\"\n- \"0x1F\"\n- \"1e3\"\n- \"-1\"\n- \"+1\"\n- \".5\"\n- \"1:20\"\n- \"2024-01-02\"\n- \"2024-01-02T10:00:00Z\"\n- 'a: b'\n- '- x'\n- '#c'\n- plain text\n- ' lead'\n- 'trail '\n- '@at'\n- '`bt'\n- |-\n  multi\n  line\n- |\n  multi\n  line\n- \"a\\tb\"\n- \303\277\n- \"0o17\"\n- \"08\"\n- \"1_000\"\n- \".inf\"\n- NaN\n- nan" },
        { "{{ toYaml .Keys }}",
          "\"\": empty\n\"1\": one\na b: c\n\"null\": null\n\"true\": 1\n\"yes\": \"y\"" },
        { "{{ toYaml .Mixed }}",
          "- 1\n- two\n- null\n- true\n- 2.5\n- k: v\n- - 1\n  - 2" },
        { "{{ toYaml .EmptyMap }}",
          "{}" },
        { "{{ toYaml .EmptyList }}",
          "[]" },
        { "{{ toYaml .Missing }}",
          "null" },
        { "{{ toYaml .Name }}",
          "web" },
        { "{{ toYaml .Text }}",
          "|\n  line1\n  line2" },
        { "{{ toYaml .Floats }}",
          "- 1\n- 2.5\n- 1e+21\n- 1e+20\n- 0.1\n- 100" },
        { "{{ toYaml .Nested }}",
          "A:\n  B:\n    C: deep" },
        { "{{ toYaml .Count }}",
          "3" },
        { "{{ toYaml 1.5 }}",
          "1.5" },
        { "{{ toYaml \"true\" }}",
          "\"true\"" },
        { "{{ toYaml (dict \"long\" \"aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk llll mmmm nnnn oooo pppp qqqq rrrr\") }}",
          "long: aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk llll mmmm nnnn oooo pppp\n  qqqq rrrr" },
        { "{{ toYaml (dict \"k\" (list (dict \"a\" 1 \"b\" (list 1 2)) (list \"x\" \"y\"))) }}",
          "k:\n- a: 1\n  b:\n  - 1\n  - 2\n- - x\n  - \"y\"" },
        { "{{ toYaml (dict \"t\" \"a\\n\\nb\\n\\n\") }}",
          "t: |+\n  a\n\n  b\n" },
        { "{{ toYaml (dict \"t\" \"trailing \\nspace\") }}",
          "t: \"trailing \\nspace\"" },
        { "{{ toYaml (list \"x: y\" \"[a]\" \"{b}\" \"*c\" \"&d\" \"!e\" \"|f\" \">g\" \"%h\" \"'i\" \"\\\"j\") }}",
          "- 'x: y'\n- '[a]'\n- '{b}'\n- '*c'\n- '&d'\n- '!e'\n- '|f'\n- '>g'\n- '%h'\n- '''i'\n- '\"j'" },
        { "x:\n  {{- toYaml .Map | nindent 2 }}",
          "x:\n  a: 1\n  b: 2\n  c:\n    x: \"y\"" },
        { "{{ toYaml \"a\\tb\" }}",
          "\"a\\tb\"" },
        { "{{ toYaml \"\303\251\" }}",
          "\303\251" },
        { "#cloud-config\nhostname: {{ .Name }}\n{{- with .Tags }}\ntags:\n{{- range . }}\n  - {{ . | quote }}\n{{- end }}\n{{- end }}\nwrite_files:\n  - content: |\n      {{- .Text | nindent 6 }}\n",
          "#cloud-config\nhostname: web\ntags:\n  - \"k8s\"\n  - \"pvescale\"\nwrite_files:\n  - content: |\n      line1\n      line2\n      \n" },
};

/* Errors: this engine's messages, "name:line:col: [at <action>: ]message", columns counted in bytes from 1.
 * The messages follow Go's wording. */
static const struct tcase ERR_CASES[] = {
        { "{{ foo }}", "t:1:4: function \"foo\" not defined" },
        { "line1\n  {{ .Name | bar }}", "t:2:14: function \"bar\" not defined" },
        { "{{ .Null.X }}", "t:1:4: at <.Null.X>: nil pointer evaluating interface {}.X" },
        { "{{ .Name.X }}", "t:1:4: at <.Name.X>: can't evaluate field X in type string" },
        { "{{ .Map.a.b }}", "t:1:4: at <.Map.a.b>: can't evaluate field b in type int64" },
        { "{{/* unclosed", "t:1:1: unclosed comment" },
        { "{{/* c */ }}", "t:1:1: comment ends before closing delimiter" },
        { "{{ if .T }}x", "t:1:13: unexpected EOF" },
        { "{{ end }}", "t:1:1: unexpected {{end}}" },
        { "{{ else }}", "t:1:1: unexpected {{else}}" },
        { "{{ if .T }}x{{ else }}y{{ else }}z{{ end }}", "t:1:24: expected end; found {{else}}" },
        { "{{ range .Name }}x{{ end }}", "t:1:10: at <.Name>: range can't iterate over web" },
        { "{{ break }}", "t:1:4: {{break}} outside {{range}}" },
        { "{{ $undefined }}", "t:1:4: undefined variable \"$undefined\"" },
        { "{{ if .T }}{{ $y := 1 }}{{ end }}{{ $y }}", "t:1:37: undefined variable \"$y\"" },
        { "{{ $a, $b := 1 }}", "t:1:8: too many declarations in command" },
        { "{{ .Name | .Count }}", "t:1:12: at <.Count>: Count is not a method but has arguments" },
        { "{{ \"a\" | \"b\" }}", "t:1:10: non executable command in pipeline stage 2" },
        { "{{ 1 2 }}", "t:1:4: at <1 2>: can't give argument to non-function 1" },
        { "{{ nil }}", "t:1:4: nil is not a command" },
        { "{{ ( .Name }}", "t:1:12: unclosed left paren" },
        { "{{ .Name ) }}", "t:1:10: unexpected right paren" },
        { "{{ \"unterminated }}", "t:1:4: unterminated quoted string" },
        { "{{ .Name", "t:1:9: unclosed action" },
        { "{{ 3x }}", "t:1:4: bad number syntax" },
        { "{{ 99999999999999999999 }}", "t:1:4: 99999999999999999999 overflows int" },
        { "{{ \"\\q\" }}", "t:1:4: invalid syntax in \"\\q\"" },
        { "{{ 'ab' }}", "t:1:4: malformed character constant: 'ab'" },
        { "{{ if }}x{{ end }}", "t:1:7: missing value for if" },
        { "{{ define \"x\" }}{{ end }}", "t:1:4: {{define}} is not supported" },
        { "{{ indent -1 \"x\" }}", "t:1:4: at <indent>: error calling indent: strings: negative Repeat count" },
        { "{{ .Count | indent 2 }}", "t:1:13: at <indent>: wrong type for value; expected string; got int64" },
        { "{{ .Missing | upper }}", "t:1:15: at <upper>: invalid value; expected string" },
        { "{{ indent 2 }}", "t:1:4: at <indent>: wrong number of args for indent: want 2 got 1" },
        { "{{ printf 1 }}", "t:1:4: at <printf>: wrong type for value; expected string; got int64" },
        { "{{ eq .Count \"3\" }}", "t:1:4: at <eq>: error calling eq: incompatible types for comparison" },
        { "{{ lt .T .F }}", "t:1:4: at <lt>: error calling lt: invalid type for comparison" },
        { "{{ index .List 5 }}", "t:1:4: at <index>: error calling index: index out of range: 5" },
        { "{{ len .Count }}", "t:1:4: at <len>: error calling len: len of type int64" },
        { "{{ required \"need it\" .Missing }}", "t:1:4: at <required>: error calling required: need it" },
        { "a\nb\n{{ .Name }}\n{{ range .List }}{{ .X }}{{ end }}",
          "t:4:21: at <.X>: can't evaluate field X in type string" },
};

static json_t *load_data(void) {
        json_error_t e;
        json_t *d = json_loads(DATA, 0, &e);
        assert_non_null(d);
        return d;
}

static void test_go_table(void **state) {
        (void)state;
        json_t *data = load_data();
        for (size_t i = 0; i < sizeof GO_CASES / sizeof *GO_CASES; i++) {
                char err[GOTMPL_ERR_SIZE] = "", *out = NULL;
                int r = gotmpl_render("t", GO_CASES[i].tmpl, data, NULL, &out, err, sizeof err);
                if (r < 0 || strcmp(out, GO_CASES[i].want) != 0)
                        print_error("case %zu %s\n  want: [%s]\n  got:  [%s] %s\n", i, GO_CASES[i].tmpl,
                                    GO_CASES[i].want, out ? out : "", err);
                assert_int_equal(r, 0);
                assert_string_equal(out, GO_CASES[i].want);
                free(out);
        }
        json_decref(data);
}

static void test_errors(void **state) {
        (void)state;
        json_t *data = load_data();
        for (size_t i = 0; i < sizeof ERR_CASES / sizeof *ERR_CASES; i++) {
                char err[GOTMPL_ERR_SIZE] = "", *out = NULL;
                int r = gotmpl_render("t", ERR_CASES[i].tmpl, data, NULL, &out, err, sizeof err);
                if (r != -EINVAL || strcmp(err, ERR_CASES[i].want) != 0)
                        print_error("case %zu %s\n  want: %s\n  got:  %d %s\n", i, ERR_CASES[i].tmpl, ERR_CASES[i].want,
                                    r, err);
                assert_int_equal(r, -EINVAL);
                assert_null(out);
                assert_string_equal(err, ERR_CASES[i].want);
        }
        json_decref(data);
}

/* The file name given at parse time is the one errors name. */
static void test_error_names_file(void **state) {
        (void)state;
        struct gotmpl *t = NULL;
        char err[GOTMPL_ERR_SIZE];
        const char *text = "#cloud-config\nhostname: x\n\nruncmd:\n  - {{ .A | foo }}\n";
        assert_int_equal(gotmpl_parse("user-data", text, strlen(text), &t, err, sizeof err), -EINVAL);
        assert_null(t);
        assert_string_equal(err, "user-data:5:13: function \"foo\" not defined");
        text = "a: {{ .A.B | upper }}";
        assert_int_equal(gotmpl_parse("meta-data", text, strlen(text), &t, err, sizeof err), 0);
        json_t *d = json_pack("{s:{s:i}}", "A", "B", 5);
        char *out = NULL;
        assert_int_equal(gotmpl_execute(t, d, NULL, &out, NULL, err, sizeof err), -EINVAL);
        assert_null(out);
        assert_string_equal(err, "meta-data:1:14: at <upper>: wrong type for value; expected string; got int64");
        json_decref(d);
        gotmpl_free(t);
}

/* One parse, many executions with different data; the template is not changed by executing it. */
static void test_parse_once_execute_many(void **state) {
        (void)state;
        struct gotmpl *t = NULL;
        char err[GOTMPL_ERR_SIZE];
        const char *text = "{{ range $i, $n := .Nodes }}{{ if $i }},{{ end }}{{ $n.Name | upper }}={{ $n.CPU | default 1 }}"
                           "{{ end }}";
        assert_int_equal(gotmpl_parse("t", text, strlen(text), &t, err, sizeof err), 0);
        for (int round = 0; round < 50; round++) {
                json_t *nodes = json_array();
                for (int i = 0; i <= round % 4; i++)
                        json_array_append_new(nodes, json_pack("{s:s#, s:i}", "Name", "abcd" + i, (int)(4 - i), "CPU", i));
                json_t *d = json_pack("{s:o}", "Nodes", nodes);
                char *out = NULL;
                size_t len = 0;
                assert_int_equal(gotmpl_execute(t, d, NULL, &out, &len, err, sizeof err), 0);
                static const char *const want[] = { "ABCD=1", "ABCD=1,BCD=1", "ABCD=1,BCD=1,CD=2", "ABCD=1,BCD=1,CD=2,D=3" };
                assert_string_equal(out, want[round % 4]);
                assert_int_equal(len, strlen(want[round % 4]));
                free(out);
                json_decref(d);
        }
        gotmpl_free(t);
}

static void test_missingkey(void **state) {
        (void)state;
        json_t *d = json_pack("{s:{s:s}}", "A", "B", "b");
        struct gotmpl_options strict = { .missingkey = GOTMPL_MISSINGKEY_ERROR };
        char err[GOTMPL_ERR_SIZE], *out = NULL;
        assert_int_equal(gotmpl_render("t", "{{ .A.C }}|{{ .X.Y }}", d, NULL, &out, err, sizeof err), 0);
        assert_string_equal(out, "<no value>|<no value>");
        free(out);
        out = NULL;
        assert_int_equal(gotmpl_render("t", "{{ .A.B }}{{ .A.C }}", d, &strict, &out, err, sizeof err), -EINVAL);
        assert_string_equal(err, "t:1:14: at <.A.C>: map has no entry for key \"C\"");
        assert_int_equal(gotmpl_render("t", "{{ .A.B }}", d, &strict, &out, err, sizeof err), 0);
        assert_string_equal(out, "b");
        free(out);
        json_decref(d);
}

/* No data at all ($ and . are nil): fields give no value, as in Go with Execute(w, nil). */
static void test_nil_data(void **state) {
        (void)state;
        char err[GOTMPL_ERR_SIZE], *out = NULL;
        assert_int_equal(gotmpl_render("t", "{{ .A }}-{{ .A.B | default \"d\" }}-{{ $ }}", NULL, NULL, &out, err, sizeof err), 0);
        assert_string_equal(out, "<no value>-d-<no value>");
        free(out);
}

static void test_output_limit(void **state) {
        (void)state;
        json_t *d = json_pack("{s:[iiiiiiiiii]}", "L", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
        struct gotmpl_options small = { .max_output = 64 };
        char err[GOTMPL_ERR_SIZE], *out = NULL;
        assert_int_equal(gotmpl_render("t", "{{ range .L }}0123456789{{ end }}", d, &small, &out, err, sizeof err), -EFBIG);
        assert_null(out);
        assert_non_null(strstr(err, "output exceeds 64 bytes"));
        /* a function result is bounded too, before it is ever printed */
        assert_int_equal(gotmpl_render("t", "{{ indent 100000 \"x\" | len }}", d, &small, &out, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "function result exceeds 64 bytes"));
        /* exactly at the limit is fine */
        assert_int_equal(gotmpl_render("t", "{{ range .L }}012345{{ end }}0123", d, &small, &out, err, sizeof err), 0);
        assert_int_equal(strlen(out), 64);
        free(out);
        json_decref(d);
}

static void test_nesting_limit(void **state) {
        (void)state;
        char err[GOTMPL_ERR_SIZE], *out = NULL;
        size_t n = 150;
        char *text = malloc(n * 30 + 1), *p = text;
        for (size_t i = 0; i < n; i++)
                p += sprintf(p, "{{ if true }}");
        for (size_t i = 0; i < n; i++)
                p += sprintf(p, "{{ end }}");
        assert_int_equal(gotmpl_render("t", text, NULL, NULL, &out, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "nested too deeply"));
        p = text;
        for (size_t i = 0; i < n; i++)
                p += sprintf(p, "(");
        p += sprintf(p, "1");
        for (size_t i = 0; i < n; i++)
                p += sprintf(p, ")");
        char *action = malloc(strlen(text) + 8);
        sprintf(action, "{{ %s }}", text);
        assert_int_equal(gotmpl_render("t", action, NULL, NULL, &out, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "nested too deeply"));
        free(action);
        free(text);
}

/* Printing or serializing data nested deeper than the limit fails cleanly instead of recursing without end. */
static void test_deep_data(void **state) {
        (void)state;
        json_t *root = json_array(), *cur = root;
        for (int i = 0; i < 1000; i++) {
                json_t *next = json_array();
                json_array_append_new(cur, next);
                cur = next;
        }
        json_t *d = json_pack("{s:o}", "D", root);
        char err[GOTMPL_ERR_SIZE], *out = NULL;
        assert_int_equal(gotmpl_render("t", "{{ toJson .D }}", d, NULL, &out, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "nested too deeply"));
        assert_int_equal(gotmpl_render("t", "{{ toYaml .D }}", d, NULL, &out, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "nested too deeply"));
        json_decref(d);
}

/* Go 1.23's {{else with}}, which Go 1.19 (the table's reference) lacks. */
static void test_else_with(void **state) {
        (void)state;
        json_t *d = json_pack("{s:s}", "B", "b");
        char err[GOTMPL_ERR_SIZE], *out = NULL;
        assert_int_equal(gotmpl_render("t", "{{ with .A }}a{{ else with .B }}{{ . }}{{ else }}none{{ end }}", d, NULL, &out,
                                       err, sizeof err),
                         0);
        assert_string_equal(out, "b");
        free(out);
        json_decref(d);
}

/* Documented deviation: toJson writes non-integral numbers as jansson does (17 significant digits), integral ones
 * below 2^53 as integers like Go. */
static void test_to_json_numbers(void **state) {
        (void)state;
        json_t *d = json_pack("{s:[f,f,f,I]}", "N", 1.0, 2.5, -3.0, (json_int_t)9007199254740993LL);
        char err[GOTMPL_ERR_SIZE], *out = NULL;
        assert_int_equal(gotmpl_render("t", "{{ toJson .N }}", d, NULL, &out, err, sizeof err), 0);
        assert_string_equal(out, "[1,2.5,-3,9007199254740993]");
        free(out);
        json_decref(d);
}

/* Text that is not NUL-terminated, and a NUL inside it, are handled by length. */
static void test_lengths(void **state) {
        (void)state;
        struct gotmpl *t = NULL;
        char err[GOTMPL_ERR_SIZE], *out = NULL;
        const char text[] = { 'a', '\0', 'b', '{', '{', ' ', '1', ' ', '}', '}', 'X' };
        size_t len = 0;
        assert_int_equal(gotmpl_parse("t", text, 10, &t, err, sizeof err), 0);
        assert_int_equal(gotmpl_execute(t, NULL, NULL, &out, &len, err, sizeof err), 0);
        assert_int_equal(len, 4);
        assert_memory_equal(out, "a\0b1", 4);
        free(out);
        gotmpl_free(t);
        gotmpl_free(NULL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_go_table),
                cmocka_unit_test(test_errors),
                cmocka_unit_test(test_error_names_file),
                cmocka_unit_test(test_parse_once_execute_many),
                cmocka_unit_test(test_missingkey),
                cmocka_unit_test(test_nil_data),
                cmocka_unit_test(test_output_limit),
                cmocka_unit_test(test_nesting_limit),
                cmocka_unit_test(test_deep_data),
                cmocka_unit_test(test_else_with),
                cmocka_unit_test(test_to_json_numbers),
                cmocka_unit_test(test_lengths),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
