{{- /* Named templates of the gpu-vk chart: names, labels, and values derived from the VK's config. */ -}}

{{- define "gpu-vk.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release name, with the chart name appended unless the release name contains it. */}}
{{- define "gpu-vk.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpu-vk.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-vk.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The overflow companion's pods: not the VK's selector labels, so the VK's Deployment, Services and NetworkPolicy never select them. */}}
{{- define "gpu-vk.overflowSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-overflow" (include "gpu-vk.name" .) }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The API server's addresses as NetworkPolicy peers: networkPolicy.apiServerCIDRs, else the
addresses of the kubernetes Service's EndpointSlices (looked up at install; `helm template`
cannot, and must be given them). */}}
{{- define "gpu-vk.apiServerPeers" -}}
{{- $cidrs := .Values.networkPolicy.apiServerCIDRs | default list }}
{{- if not $cidrs }}
{{- $slices := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "" }}
{{- range ($slices.items | default list) }}
{{- if eq (index (.metadata.labels | default dict) "kubernetes.io/service-name") "kubernetes" }}
{{- range .endpoints }}
{{- range .addresses }}
{{- $cidrs = append $cidrs (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if not $cidrs }}
{{- fail "networkPolicy.enabled: the API server's addresses are unknown (helm template cannot look them up): set networkPolicy.apiServerCIDRs to the addresses the API server calls pods from, or networkPolicy.enabled: false" }}
{{- end }}
{{- range (uniq $cidrs) }}
- ipBlock: {cidr: {{ . | quote }}}
{{- end }}
{{- end }}

{{- define "gpu-vk.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpu-vk.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "gpu-vk.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpu-vk.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret mounted at /var/run/secrets/gpu-vk. */}}
{{- define "gpu-vk.credentialsSecret" -}}
{{- if .Values.credentials.existingSecret }}
{{- .Values.credentials.existingSecret }}
{{- else }}
{{- printf "%s-credentials" (include "gpu-vk.fullname" .) }}
{{- end }}
{{- end }}

{{/* The port of config.metricsAddr (host:port or [v6]:port), after checking it is reachable from outside the pod. */}}
{{- define "gpu-vk.metricsPort" -}}
{{- $addr := required "config.metricsAddr is required (e.g. 0.0.0.0:10255)" .Values.config.metricsAddr | toString }}
{{- $host := regexReplaceAll ":[0-9]+$" $addr "" | trimPrefix "[" | trimSuffix "]" }}
{{- if or (hasPrefix "127." $host) (eq $host "::1" "localhost") }}
{{- fail (printf "config.metricsAddr %s is a loopback address: the probes and the metrics Service cannot reach it; use 0.0.0.0:PORT" $addr) }}
{{- end }}
{{- regexFind "[0-9]+$" $addr | required (printf "config.metricsAddr %s has no port" $addr) }}
{{- end }}

{{/* "true" when the replicas elect a leader: more than one, or asked for. */}}
{{- define "gpu-vk.leaderElection" -}}
{{- if or (gt (int .Values.replicas) 1) .Values.leaderElection.enabled }}true{{ end }}
{{- end }}

{{/* The VK's config.yaml: .Values.config, plus leaderElection when the replicas elect a leader. */}}
{{- define "gpu-vk.config" -}}
{{- $config := deepCopy .Values.config }}
{{- if include "gpu-vk.leaderElection" . }}
{{- $le := .Values.leaderElection }}
{{- $_ := set $config "leaderElection" (dict "enabled" true "leaseDurationMs" $le.leaseDurationMs "renewDeadlineMs" $le.renewDeadlineMs "retryPeriodMs" $le.retryPeriodMs) }}
{{- end }}
{{- if .Values.admission.enabled }}
{{- $_ := set $config "admission" (dict "enabled" true "addr" "0.0.0.0:9443" "service" (printf "%s/%s-admission" .Release.Namespace (include "gpu-vk.fullname" .))) }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* Checks of values the chart cannot work with; included by the Deployment. */}}
{{- define "gpu-vk.validate" -}}
{{- if hasKey .Values.config "leaderElection" }}
{{- fail "set leader election with the top-level value leaderElection (the chart writes config.leaderElection from it and from replicas)" }}
{{- end }}
{{- if hasKey .Values.config "admission" }}
{{- fail "set the admission check with the top-level value admission (the chart writes config.admission from it)" }}
{{- end }}
{{- if and .Values.credentials.existingSecret .Values.credentials.values }}
{{- fail "set credentials.existingSecret or credentials.values, not both" }}
{{- end }}
{{- if and (not .Values.config.allowedNamespaces) (not .Values.allNamespaces) }}
{{- fail "config.allowedNamespaces is empty: pods of every namespace could spend provider money and have their Secrets read; list the namespaces whose pods may run on the virtual node, or set allNamespaces: true to let every namespace's pod creators spend" }}
{{- end }}
{{- $_ := required "config.nodeName is required" .Values.config.nodeName }}
{{- $_ = required "config.clusterId is required (unique per cluster sharing a provider account)" .Values.config.clusterId }}
{{- $_ = required "config.providers needs at least one provider" .Values.config.providers }}
{{- end }}
