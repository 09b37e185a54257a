{{/*
Helpers of Shepherd's chart. The generated templates (templates/generated/, from config/ by
`make chart`) call these at the places where values enter; see hack/release/chart.go.
*/}}

{{/*
shepherd.labels: Helm's labels for an object's metadata, added to the labels config/ gives it.
The argument is the root context, or a list of it and a map of extra labels.
*/}}
{{- define "shepherd.labels" -}}
{{- $root := . -}}
{{- $extra := dict -}}
{{- if kindIs "slice" . -}}
{{- $root = index . 0 -}}
{{- $extra = index . 1 | default dict -}}
{{- end -}}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
{{- range $k, $v := $extra }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end }}

{{/*
shepherd.shardName: the name of one of Shepherd's objects outside the release's namespace
(cluster-scoped, or in a fixed namespace such as default), with "-<shard>" when .Values.shard is
set, so that shards installed side by side each own theirs. Argument: (list $ "name").
*/}}
{{- define "shepherd.shardName" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- if $root.Values.shard -}}
{{- if not $root.Values.watchNamespaces -}}
{{- fail "shard needs watchNamespaces: a shard reconciles its own namespaces; a cluster-wide manager would reconcile every other shard's sessions too" -}}
{{- end -}}
{{- printf "%s-%s" $name $root.Values.shard -}}
{{- else -}}
{{- $name -}}
{{- end -}}
{{- end }}

{{/*
shepherd.image: <registry>/<repository>:<tag>[@<digest>] of one of .Values.images' entries.
Argument: (list $ $.Values.images.<name>).
*/}}
{{- define "shepherd.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- $images := $root.Values.images -}}
{{- $repo := $img.repository -}}
{{- with $images.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- $ref := printf "%s:%s" $repo ($images.tag | default $root.Chart.AppVersion) -}}
{{- with $img.digest }}{{ $ref = printf "%s@%s" $ref . }}{{ end -}}
{{- $ref -}}
{{- end }}

{{/*
shepherd.podScheduling: the pod spec fields a component's values set (pull secrets, node
selector, tolerations, affinity, priority class). Argument: (list $ $.Values.<component>).
*/}}
{{- define "shepherd.podScheduling" -}}
{{- $root := index . 0 -}}
{{- $v := index . 1 -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
- name: {{ . | quote }}
{{- end }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- end }}

{{/*
shepherd.manager.args: the manager's flags that depend on values, after config/'s own.
*/}}
{{- define "shepherd.manager.args" -}}
{{- $v := .Values -}}
{{- if and (gt (int $v.manager.replicas) 1) (not $v.manager.leaderElection.enabled) -}}
{{- fail "manager.replicas above 1 needs manager.leaderElection.enabled: without a leader every replica would reconcile" -}}
{{- end -}}
{{- if and $v.watchNamespaces (has .Release.Namespace $v.watchNamespaces) -}}
{{- fail (printf "watchNamespaces lists the release namespace %s: agents run in tenant namespaces, never beside the manager's credentials" .Release.Namespace) -}}
{{- end -}}
{{- with $v.watchNamespaces }}
- --watch-namespaces={{ join "," . }}
{{- end }}
- --runner-image={{ include "shepherd.image" (list $ $v.images.runner) }}
{{- $agents := list -}}
{{- range $name, $img := $v.images.agents }}
{{- $agents = append $agents (printf "%s=%s" $name (include "shepherd.image" (list $ $img))) -}}
{{- end }}
{{- with $agents }}
- --agent-images={{ join "," . }}
{{- end }}
{{- with $v.egress.clusterCIDRs }}
- --cluster-cidrs={{ join "," . }}
{{- end }}
{{- with $v.egress.deniedCIDRs }}
- --denied-cidrs={{ join "," . }}
{{- end }}
{{- with $v.egress.outboundAllowCIDRs }}
- --outbound-allow-cidrs={{ join "," . }}
{{- end }}
{{- if not $v.egressProxy.enabled }}
- --egress-proxy-url=none
{{- end }}
{{- range $v.manager.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
shepherd.egressProxy.args: the egress proxy's flags that depend on values.
*/}}
{{- define "shepherd.egressProxy.args" -}}
{{- $v := .Values -}}
{{- with $v.watchNamespaces }}
- --watch-namespaces={{ join "," . }}
{{- end }}
{{- with $v.egressProxy.denyCIDRs }}
- --deny-cidrs={{ join "," . }}
{{- end }}
{{- range $v.egressProxy.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}
