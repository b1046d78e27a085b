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
