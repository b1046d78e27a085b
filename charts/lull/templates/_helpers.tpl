{{/*
The image of a component: lull.image (dict "image" .Values.scheduler.image "root" $).
The tag defaults to the chart's appVersion.
*/}}
{{- define "lull.image" -}}
{{ .image.repository }}:{{ .image.tag | default .root.Chart.AppVersion }}
{{- end }}

{{/*
Scheduling constraints of a component's pods: nodeSelector, affinity,
tolerations, each only when set. Indented for a pod spec.
*/}}
{{- define "lull.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
One file of the admission guard (files/admission, a copy of
manifests/admission) with what the values move: lull.admission (dict
"text" ($.Files.Get path) "Values" $.Values). Each substitution matches
only the one spelling the files use, so a change to them that this does not
follow makes TestChartAdmissionIsKustomize fail instead of installing a
guard that protects the wrong label or namespace:
- the maintenance label lull.dev/maintenance (never lull.dev/maintenance-*,
  the guard's own annotations);
- a binding's paramRef namespace (lull-system, which kustomize's
  namespace sets through kustomizeconfig.yaml);
- the namespace selectors of the lease and credentials bindings
  (lull-leases, lull-configs);
- the administrators' group lull:admins (a ClusterRoleBinding's subject
  and the messages that name it).
*/}}
{{- define "lull.admission" -}}
{{- $v := .Values -}}
{{- include "lull.admissionValues" $v -}}
{{- $t := .text -}}
{{- if regexMatch "<lull-[a-z-]+>" $t }}
{{- fail "a file of files/admission contains a <lull-...> placeholder of lull.admission: rename it" }}
{{- end }}
{{- /* First every default spelling becomes a placeholder no value can
contain, then each placeholder its value, by plain replacement: one
value never feeds the next substitution, and a $ in a value is never a
regexp group. Values in YAML positions are quoted (a namespace 1234 or a
label null stays a string). */ -}}
{{- $t = regexReplaceAll "\\{key: lull\\.dev/maintenance," $t "{key: <lull-label-key>," -}}
{{- $t = regexReplaceAll "lull\\.dev/maintenance([^-a-zA-Z0-9_.])" $t "<lull-label>${1}" -}}
{{- $t = regexReplaceAll "(?m)^(\\s+namespace: )lull-system$" $t "${1}<lull-namespace>" -}}
{{- $t = regexReplaceAll "(?m)^(\\s+kubernetes\\.io/metadata\\.name: )lull-leases$" $t "${1}<lull-lease-namespace>" -}}
{{- $t = regexReplaceAll "(?m)^(\\s+kubernetes\\.io/metadata\\.name: )lull-configs$" $t "${1}<lull-config-namespace>" -}}
{{- $t = regexReplaceAll "(?m)^(\\s+name: )lull:admins$" $t "${1}<lull-admin-subject>" -}}
{{- $t = replace "group lull:admins" "group <lull-admin-group>" $t -}}
{{- $t = replace "<lull-label-key>" ($v.maintenanceLabel | quote) $t -}}
{{- $t = replace "<lull-label>" $v.maintenanceLabel $t -}}
{{- $t = replace "<lull-namespace>" ($v.namespace | quote) $t -}}
{{- $t = replace "<lull-lease-namespace>" ($v.leaseNamespace | quote) $t -}}
{{- $t = replace "<lull-config-namespace>" ($v.configNamespace | quote) $t -}}
{{- $t = replace "<lull-admin-subject>" ($v.admission.adminGroup | quote) $t -}}
{{- $t = replace "<lull-admin-group>" $v.admission.adminGroup $t -}}
{{- trim $t -}}
{{- end }}

{{/*
The values lull.admission writes into the guard's selectors and CEL, each
refused with what to fix rather than rendered into a guard that fails to
install or, worse, matches something else: the maintenance label must be a
label key, the namespaces DNS labels, and the administrators' group must
not end the CEL string that names it.
*/}}
{{- define "lull.admissionValues" -}}
{{- range $name, $x := dict "maintenanceLabel" .maintenanceLabel "namespace" .namespace "leaseNamespace" .leaseNamespace "configNamespace" .configNamespace "admission.adminGroup" .admission.adminGroup }}
{{- if not (kindIs "string" $x) }}
{{- fail (printf "%s %v is not a string: quote it in the values (a name YAML reads as a number or a boolean)" $name $x) }}
{{- end }}
{{- end }}
{{- $parts := splitList "/" .maintenanceLabel }}
{{- $labelName := last $parts }}
{{- if or (not (regexMatch "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" .maintenanceLabel)) (gt (len $labelName) 63) (and (eq (len $parts) 2) (gt (len (first $parts)) 253)) }}
{{- fail (printf "maintenanceLabel %q is not a label key (an optional DNS subdomain prefix of at most 253 characters and /, then a name of at most 63 letters, digits, '-', '_' and '.'): the admission guard selects Nodes by it" .maintenanceLabel) }}
{{- end }}
{{- range $name, $ns := dict "namespace" .namespace "leaseNamespace" .leaseNamespace "configNamespace" .configNamespace }}
{{- if or (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $ns)) (gt (len $ns) 63) }}
{{- fail (printf "%s %q is not a namespace name (a DNS label: at most 63 lowercase letters, digits and '-')" $name $ns) }}
{{- end }}
{{- end }}
{{- if has .leaseNamespace (list "kube-system" "kube-node-lease" "kube-public") }}
{{- fail (printf "leaseNamespace %q holds Kubernetes' own leases (leader election, node heartbeats), which the admission guard's lease policies would then refuse: give lull a namespace of its own, such as lull-leases" .leaseNamespace) }}
{{- end }}
{{- if or (eq .admission.adminGroup "") (regexMatch "['\"\\\\\\p{Cc}\\p{Zl}\\p{Zp}]" .admission.adminGroup) }}
{{- fail (printf "admission.adminGroup %q must be a group name without quotes, backslashes, control characters or line breaks: the admission guard's messages name it in CEL strings" .admission.adminGroup) }}
{{- end }}
{{- end }}
