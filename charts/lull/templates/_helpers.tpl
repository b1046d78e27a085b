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
{{- $t := .text -}}
{{- $t = regexReplaceAll "lull\\.dev/maintenance([^-a-zA-Z0-9_.])" $t (printf "%s${1}" $v.maintenanceLabel) -}}
{{- $t = regexReplaceAll "(?m)^(\\s+namespace: )lull-system$" $t (printf "${1}%s" $v.namespace) -}}
{{- $t = regexReplaceAll "(?m)^(\\s+kubernetes\\.io/metadata\\.name: )lull-leases$" $t (printf "${1}%s" $v.leaseNamespace) -}}
{{- $t = regexReplaceAll "(?m)^(\\s+kubernetes\\.io/metadata\\.name: )lull-configs$" $t (printf "${1}%s" $v.configNamespace) -}}
{{- $t = regexReplaceAll "(?m)^(\\s+name: )lull:admins$" $t (printf "${1}%s" ($v.admission.adminGroup | quote)) -}}
{{- $t = replace "group lull:admins" (printf "group %s" $v.admission.adminGroup) $t -}}
{{- trim $t -}}
{{- end }}
