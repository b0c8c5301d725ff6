{{/*
The chart's name, and the prefix of every object it names: at most 28
characters, so that the longest name (the metrics Service's) fits in 63. Installed as
release egress-proxies-operator (or with fullnameOverride
egress-proxies-operator), the prefix is the reference one of config/default.
*/}}
{{- define "epo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "epo.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 28 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 28 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 28 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels of every object: Helm's recommended ones and commonLabels. */}}
{{- define "epo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "epo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The operator's pods. The same two labels as config/default's, no more: a
Deployment's selector cannot change, and an install moved from kustomize to
Helm keeps its Deployment.
*/}}
{{- define "epo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "epo.name" . }}
control-plane: controller-manager
{{- end }}

{{/* metadata.annotations of every object, when commonAnnotations has any. */}}
{{- define "epo.annotations" -}}
{{- with .Values.commonAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Annotations of an object an uninstall keeps. */}}
{{- define "epo.keepAnnotations" -}}
annotations:
  helm.sh/resource-policy: keep
  {{- with .Values.commonAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{- define "epo.serviceAccountName" -}}
{{ include "epo.fullname" . }}-controller-manager
{{- end }}

{{/* The binding subject: the operator's ServiceAccount. */}}
{{- define "epo.subjects" -}}
subjects:
- kind: ServiceAccount
  name: {{ include "epo.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{- define "epo.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "epo.providersConfigMap" -}}
{{- .Values.providers.existingConfigMap | default (printf "%s-providers-config" (include "epo.fullname" .)) }}
{{- end }}

{{/*
The documents of the generated config/rbac/role.yaml (copied into
files/rbac by `make generate`), as a list of dicts.
*/}}
{{- define "epo.generatedRoles" -}}
{{- $docs := list }}
{{- range $doc := regexSplit "(?m)^---\\s*$" (.Files.Get "files/rbac/role.yaml") -1 }}
{{- if trim $doc }}
{{- $docs = append $docs (fromYaml $doc) }}
{{- end }}
{{- end }}
{{- toJson $docs }}
{{- end }}

{{/* The namespace of the generated Role of the kubernetes provider's pods. */}}
{{- define "epo.podsNamespace" -}}
{{- range $r := include "epo.generatedRoles" . | fromJsonArray }}
{{- if eq $r.kind "Role" }}{{ $r.metadata.namespace }}{{ end }}
{{- end }}
{{- end }}

{{/* The served namespaces, when not all: a list of names. */}}
{{- define "epo.servedNames" -}}
{{- if not .Values.servedNamespaces.all }}{{ join "," .Values.servedNamespaces.names }}{{ end }}
{{- end }}

{{/*
The rules of the hand-written Role or ClusterRole in files/rbac/<file>, a copy
of config/rbac/<file>: the chart and kustomize grant the same.
*/}}
{{- define "epo.rulesOf" -}}
{{- $role := .ctx.Files.Get (printf "files/rbac/%s" .file) | fromYaml }}
{{- if not $role.rules }}{{ fail (printf "files/rbac/%s holds no rules; run make generate" .file) }}{{ end }}
{{- toYaml (dict "rules" $role.rules) }}
{{- end }}
