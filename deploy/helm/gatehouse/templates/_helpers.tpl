{{/*
The chart's partials. Every function used here is Helm's or Sprig's; the
test renderer (deploy/helm/render) implements exactly the ones used, so a new
one fails the tests until it is added there too.
*/}}

{{- define "gatehouse.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* A DNS-1123 name of at most 63 characters, with room for "-gateway". */}}
{{- define "gatehouse.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" -}}
{{- else if contains (include "gatehouse.name" .) .Release.Name -}}
{{- .Release.Name | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "gatehouse.name" .) | trunc 55 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* (dict "root" $ "role" ROLE) */}}
{{- define "gatehouse.roleName" -}}
{{- printf "%s-%s" (include "gatehouse.fullname" .root) .role -}}
{{- end -}}

{{- define "gatehouse.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gatehouse.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{- define "gatehouse.labels" -}}
{{ include "gatehouse.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: gatehouse
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "gatehouse.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
The keys each role holds, in one table, rendered three ways by "emit":
"check" fails the install naming each missing required key (the rules
`gatehouse config check` applies per role), "data" writes the role's own
Secret from inline values, "env" references the keys as environment
variables. An entry: environment variable, the key's name in a Secret (the
file name `gatehouse keygen` writes), its values path, its inline value,
which existing Secret may hold it, whether the role needs it.
(dict "root" $ "role" ROLE "emit" EMIT)
*/}}
{{- define "gatehouse.roleKeys" -}}
{{- $v := .root.Values -}}
{{- $k := $v.keys -}}
{{- $m := $v.manifest -}}
{{- $metrics := list "GATEHOUSE_METRICS_TOKEN" "metrics-token" "keys.metricsToken" $k.metricsToken "keys" false -}}
{{- $token := list "CODEAPI_INTERNAL_SERVICE_TOKEN" "service-token" "keys.serviceToken" $k.serviceToken "keys" true -}}
{{- $grant := list "CODEAPI_EGRESS_GRANT_SECRET" "grant-secret" "keys.grantSecret" $k.grantSecret "keys" true -}}
{{- $grantPrevious := list "GATEHOUSE_EGRESS_GRANT_PREVIOUS_SECRET" "grant-previous-secret" "keys.grantPreviousSecret" $k.grantPreviousSecret "keys" false -}}
{{- $caCert := list "GATEHOUSE_INTERCEPT_CA_CERT" "intercept-ca.pem" "keys.interceptCaCert" $k.interceptCaCert "keys" true -}}
{{- $table := dict
  "worker" (list
    (list "CODEAPI_EXECUTION_MANIFEST_PRIVATE_KEY" "manifest-private.pem" "manifest.privateKey" $m.privateKey "manifest" true)
    $token $grant $grantPrevious
    (list "GATEHOUSE_SESSION_KEY_SECRET" "session-key-secret" "keys.sessionKeySecret" $k.sessionKeySecret "keys" true)
    (list "GATEHOUSE_CREDENTIAL_SEALING_PUBLIC_KEY" "credential-sealing-public-key" "keys.credentialSealingPublicKey" $k.credentialSealingPublicKey "keys" true)
    $caCert
    (list "GATEHOUSE_ADMIN_PASSWORD_HASH" "admin-password-hash" "keys.adminPasswordHash" $k.adminPasswordHash "keys" false)
    $metrics)
  "gateway" (list
    $token $grant $grantPrevious
    (list "GATEHOUSE_CREDENTIAL_SEALING_KEY" "credential-sealing-key" "keys.credentialSealingKey" $k.credentialSealingKey "keys" true)
    (list "GATEHOUSE_CREDENTIAL_SEALING_PREVIOUS_KEY" "credential-sealing-previous-key" "keys.credentialSealingPreviousKey" $k.credentialSealingPreviousKey "keys" false)
    (list "GATEHOUSE_INTERCEPT_CA_KEY" "intercept-ca-key.pem" "keys.interceptCaKey" $k.interceptCaKey "keys" true)
    $caCert $metrics)
  "runner" (list
    (list "SANDBOX_EXECUTION_MANIFEST_PUBLIC_KEY" "manifest-public.pem" "manifest.publicKey" $m.publicKey "manifest" true)
    $token $metrics) -}}
{{- $secretName := include "gatehouse.roleName" . -}}
{{- range (index $table .role) -}}
{{- $env := index . 0 -}}
{{- $file := index . 1 -}}
{{- $path := index . 2 -}}
{{- $value := index . 3 -}}
{{- $from := index . 4 -}}
{{- $needed := index . 5 -}}
{{- $existing := ternary $m.existingSecret $k.existingSecret (eq $from "manifest") -}}
{{- if eq $.emit "check" -}}
{{- if and $needed (not $existing) -}}
{{- $_ := required (printf "%s (or %s.existingSecret) is required: the %s role needs it (run `gatehouse keygen`)" $path $from $.role) $value -}}
{{- end -}}
{{- else if eq $.emit "data" -}}
{{- if and $value (not $existing) }}
{{ $file }}: {{ $value | b64enc | quote }}
{{- end -}}
{{- else if or $existing $value }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ default $secretName $existing }}
      key: {{ $file }}
{{- if and $existing (not $needed) }}
      optional: true
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Whether the role talks to the store and the ledger. */}}
{{- define "gatehouse.usesDatastores" -}}
{{- if or (eq .role "worker") (eq .role "gateway") -}}true{{- end -}}
{{- end -}}

{{/*
Every rule an install must pass, in one place; each template that renders
a workload includes it, so `helm install` and `helm upgrade` both stop here.
*/}}
{{- define "gatehouse.validate" -}}
{{- $v := .Values -}}
{{- if not (or $v.worker.enabled $v.gateway.enabled $v.runner.enabled) -}}
{{- fail "no role is enabled: set worker.enabled, gateway.enabled or runner.enabled" -}}
{{- end -}}
{{- range (list "worker" "gateway" "runner") -}}
{{- if (index $v .).enabled -}}
{{- include "gatehouse.roleKeys" (dict "root" $ "role" . "emit" "check") -}}
{{- end -}}
{{- end -}}
{{- if or $v.worker.enabled $v.gateway.enabled -}}
{{- if not $v.database.existingSecret -}}
{{- $url := required "database.url (or database.existingSecret) is required: workers and gateways share one PostgreSQL" $v.database.url -}}
{{- if not (or (hasPrefix "postgres://" $url) (hasPrefix "postgresql://" $url)) -}}
{{- fail "database.url must be a postgres:// URL: nodes of a fleet never keep their state in a SQLite file of their own" -}}
{{- end -}}
{{- end -}}
{{- if not $v.redis.existingSecret -}}
{{- $url := required "redis.url (or redis.existingSecret) is required: the ledger and leases live in one Redis the fleet shares" $v.redis.url -}}
{{- if not (or (hasPrefix "redis://" $url) (hasPrefix "redis+unix://" $url)) -}}
{{- fail "redis.url must be a redis:// or redis+unix:// URL" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The environment every role's container gets. (dict "root" $ "role" ROLE) */}}
{{- define "gatehouse.env" -}}
{{- $v := .root.Values -}}
{{- $settings := index $v .role -}}
- name: GATEHOUSE_ROLE
  value: {{ .role | quote }}
- name: GATEHOUSE_LISTEN
  value: {{ printf "0.0.0.0:%v" $v.ports.api | quote }}
{{- if eq .role "gateway" }}
- name: GATEHOUSE_PROXY_LISTEN
  value: {{ printf "0.0.0.0:%v" $v.ports.proxy | quote }}
{{- end }}
- name: GATEHOUSE_DATA_DIR
  value: /var/lib/gatehouse
- name: GATEHOUSE_SHUTDOWN_DRAIN_SECS
  value: {{ $v.shutdown.drainSeconds | quote }}
{{- if eq .role "worker" }}
- name: GATEHOUSE_PROXY_PUBLIC_URL
  value: {{ default (printf "http://%s-gateway.%s.svc:%v" (include "gatehouse.fullname" .root) .root.Release.Namespace $v.ports.proxy) $v.proxyPublicUrl | quote }}
{{- end }}
{{- if include "gatehouse.usesDatastores" . }}
- name: GATEHOUSE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ default (printf "%s-datastores" (include "gatehouse.fullname" .root)) $v.database.existingSecret }}
      key: {{ ternary $v.database.existingSecretKey "database-url" (not (empty $v.database.existingSecret)) }}
- name: GATEHOUSE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ default (printf "%s-datastores" (include "gatehouse.fullname" .root)) $v.redis.existingSecret }}
      key: {{ ternary $v.redis.existingSecretKey "redis-url" (not (empty $v.redis.existingSecret)) }}
{{- if $v.objectStore.url }}
- name: GATEHOUSE_OBJECT_STORE_URL
  value: {{ $v.objectStore.url | quote }}
{{- end }}
{{- end }}
{{- if $v.callers.toml }}
- name: GATEHOUSE_CALLERS_FILE
  value: /etc/gatehouse/callers.toml
{{- end }}
{{- include "gatehouse.roleKeys" (dict "root" .root "role" .role "emit" "env") }}
{{- range $name := keys $v.env }}
- name: {{ $name }}
  value: {{ index $v.env $name | toString | quote }}
{{- end }}
{{- range $name := keys $settings.env }}
- name: {{ $name }}
  value: {{ index $settings.env $name | toString | quote }}
{{- end }}
{{- end -}}
