{{/* True (non-empty) in ccm mode. */}}
{{- define "mooring.ccm" -}}
{{- if eq .Values.mode "ccm" }}true{{ end -}}
{{- end -}}

{{/* True when the approver runs: alone, or inside the CCM. */}}
{{- define "mooring.approver" -}}
{{- if or (eq .Values.mode "approver-only") (has "csr-approver" .Values.ccm.controllers) }}true{{ end -}}
{{- end -}}

{{/* The workload's name: its app.kubernetes.io/name. */}}
{{- define "mooring.name" -}}
{{- if include "mooring.ccm" . }}mooring-ccm{{ else }}mooring-csr-approver{{ end -}}
{{- end -}}

{{/* The workload's ServiceAccount. */}}
{{- define "mooring.serviceAccount" -}}
{{- if include "mooring.ccm" . }}cloud-controller-manager{{ else }}mooring-csr-approver{{ end -}}
{{- end -}}

{{/* Labels of every object; the selector is app.kubernetes.io/name only. */}}
{{- define "mooring.labels" -}}
app.kubernetes.io/part-of: mooring
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Refuses values that cannot run; called by every template. */}}
{{- define "mooring.validate" -}}
{{- if not (has .Values.mode (list "ccm" "approver-only")) }}
{{- fail (printf "mode must be ccm or approver-only, not %q" .Values.mode) }}
{{- end }}
{{- $bind := toString .Values.bindAddress }}
{{- if not (or (eq $bind "hostIP") (regexMatch "^[0-9a-fA-F:.]+$" $bind)) }}
{{- fail (printf "bindAddress must be an IP address (0.0.0.0, ::) or hostIP, not %q" $bind) }}
{{- end }}
{{- if .Values.apiServer.host }}
{{- $port := int .Values.apiServer.port }}
{{- if or (lt $port 1) (gt $port 65535) (ne (toString $port) (toString .Values.apiServer.port)) }}
{{- fail (printf "apiServer.port must be a port number (1-65535), not %v" .Values.apiServer.port) }}
{{- end }}
{{- if regexMatch "[:/ ]" (toString .Values.apiServer.host) }}
{{- if not (regexMatch "^[0-9a-fA-F:]+$" (toString .Values.apiServer.host)) }}
{{- fail (printf "apiServer.host must be a host name or address without scheme or port, not %q" .Values.apiServer.host) }}
{{- end }}
{{- end }}
{{- end }}
{{- if not .Values.cloud.provider }}
{{- fail "cloud.provider is required (local, aws, gce, azure, oci, digitalocean, hetzner, linode, vsphere, openstack)" }}
{{- end }}
{{- if and (not .Values.cloud.existingSecret) (not .Values.cloud.config) }}
{{- fail "cloud.config (the backend's cloud.yaml) or cloud.existingSecret is required" }}
{{- end }}
{{- if hasKey .Values.cloud.files "cloud.yaml" }}
{{- fail "cloud.files must not hold cloud.yaml: that is cloud.config" }}
{{- end }}
{{- if .Values.tickets.enabled }}
{{- if not (include "mooring.approver" .) }}
{{- fail "tickets.enabled: no approver runs to read the ticket keys (ccm.controllers lists no csr-approver)" }}
{{- end }}
{{- if not .Values.tickets.keysSecret }}
{{- fail "tickets.keysSecret (the join ticket keys Secret) is required with tickets.enabled" }}
{{- end }}
{{- else if and (include "mooring.approver" .) (has .Values.cloud.provider (list "digitalocean" "hetzner" "linode" "vsphere" "openstack")) }}
{{- fail (printf "cloud.provider %s signs no instance identity: its nodes join with join tickets only, and without tickets.enabled the approver denies every join (docs/tickets.md)" .Values.cloud.provider) }}
{{- end }}
{{- end -}}

{{/* The Lease's namespace flag, where it is not the programs' default. */}}
{{- define "mooring.leaseNamespaceArg" -}}
{{- if ne .Release.Namespace "kube-system" }}
- --leader-elect-resource-namespace={{ .Release.Namespace }}
{{- end }}
{{- end -}}
