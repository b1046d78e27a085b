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
{{- $t = regexReplaceAll "lull\\.dev/maintenance([^-a-zA-Z0-9_.])" $t (printf "%s${1}" $v.maintenanceLabel) -}}
{{- $t = regexReplaceAll "(?m)^(\\s+namespace: )lull-system$" $t (printf "${1}%s" $v.namespace) -}}
{{- $t = regexReplaceAll "(?m)^(\\s+kubernetes\\.io/metadata\\.name: )lull-leases$" $t (printf "${1}%s" $v.leaseNamespace) -}}
{{- $t = regexReplaceAll "(?m)^(\\s+kubernetes\\.io/metadata\\.name: )lull-configs$" $t (printf "${1}%s" $v.configNamespace) -}}
{{- $t = regexReplaceAll "(?m)^(\\s+name: )lull:admins$" $t (printf "${1}%s" ($v.admission.adminGroup | quote)) -}}
{{- $t = replace "group lull:admins" (printf "group %s" $v.admission.adminGroup) $t -}}
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
{{- if not (regexMatch "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" .maintenanceLabel) }}
{{- fail (printf "maintenanceLabel %q is not a label key (an optional DNS subdomain prefix and /, then a name of letters, digits, '-', '_' and '.'): the admission guard selects Nodes by it" .maintenanceLabel) }}
{{- end }}
{{- range $name, $ns := dict "namespace" .namespace "leaseNamespace" .leaseNamespace "configNamespace" .configNamespace }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $ns) }}
{{- fail (printf "%s %q is not a namespace name (a DNS label: lowercase letters, digits and '-')" $name $ns) }}
{{- end }}
{{- end }}
{{- if or (eq .admission.adminGroup "") (regexMatch "['\"\\\\\n]" .admission.adminGroup) }}
{{- fail (printf "admission.adminGroup %q must be a group name without quotes, backslashes or line breaks: the admission guard's messages name it in CEL strings" .admission.adminGroup) }}
{{- end }}
{{- end }}
