//! The Helm chart in `deploy/helm/gatehouse`. No `helm` binary can be
//! installed here, so `helm lint` and `helm install --dry-run` are not run;
//! what Helm would do is done by parts: values checked against
//! `values.schema.json` (draft-07, as Helm does), templates rendered by a
//! small renderer on Go's `text/template` with the Sprig functions the chart
//! uses (an unknown function fails the render), and every manifest checked
//! by `kubernetes-validate` against the schemas of the oldest Kubernetes the
//! chart supports and the newest it knows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_gatehouse");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn chart_dir() -> PathBuf {
    repo().join("deploy/helm/gatehouse")
}

/// The chart's own defaults, read from values.yaml as Helm reads them.
fn defaults() -> Value {
    let text = std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// Helm's coalescing of values: maps merge, anything else replaces, null
/// removes.
fn merged(mut base: Value, over: &Value) -> Value {
    fn merge(base: &mut Value, over: &Value) {
        match (base, over) {
            (Value::Object(b), Value::Object(o)) => {
                for (k, v) in o {
                    if v.is_null() {
                        b.remove(k);
                    } else if let Some(slot) = b.get_mut(k).filter(|s| s.is_object() && v.is_object()) {
                        merge(slot, v);
                    } else {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
            (b, o) => *b = o.clone(),
        }
    }
    merge(&mut base, over);
    base
}

/// The schema's complaints about `values`, each as "path: message".
fn schema_errors(values: &Value) -> Vec<String> {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap())
            .unwrap();
    let validator = jsonschema::draft7::new(&schema).expect("values.schema.json is a valid draft-07 schema");
    validator.iter_errors(values).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

/// A set of real keys, from `gatehouse keygen`, as the chart's values.
fn keys() -> &'static Value {
    static KEYS: OnceLock<Value> = OnceLock::new();
    KEYS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("k");
        let status = Command::new(BIN).env_clear().args(["keygen", "--out"]).arg(&out).output().unwrap();
        assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
        let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
        let line = |name: &str| read(name).trim().to_owned();
        json!({
            "manifest": {"privateKey": read("manifest-private.pem"), "publicKey": read("manifest-public.pem")},
            "keys": {
                "grantSecret": line("grant-secret"),
                "serviceToken": line("service-token"),
                "sessionKeySecret": line("session-key-secret"),
                "credentialSealingKey": line("credential-sealing-key"),
                "credentialSealingPublicKey": line("credential-sealing-public-key"),
                "interceptCaKey": read("intercept-ca-key.pem"),
                "interceptCaCert": read("intercept-ca.pem"),
                "adminPasswordHash": line("admin-password-hash"),
            },
        })
    })
}

fn stores() -> Value {
    json!({
        "database": {"url": "postgres://gatehouse:db-password-in-a-secret@db.internal:5432/gatehouse"},
        "redis": {"url": "redis://redis.internal:6379/0"},
    })
}

/// Values that should install: the defaults, real keys, a database, Redis.
fn complete() -> Value {
    merged(merged(defaults(), keys()), &stores())
}

/// The renderer, built once per test process from its Go sources (standard
/// library only; no module is downloaded).
fn renderer() -> &'static Path {
    static RENDERER: OnceLock<PathBuf> = OnceLock::new();
    RENDERER.get_or_init(|| {
        let out = std::env::temp_dir().join(format!("gatehouse-helm-render-{}", std::process::id()));
        let built =
            go(&repo().join("deploy/helm/render")).args(["build", "-o"]).arg(&out).arg(".").output().unwrap();
        assert!(built.status.success(), "go build: {}", String::from_utf8_lossy(&built.stderr));
        out
    })
}

fn go(dir: &Path) -> Command {
    let mut c = Command::new("go");
    c.current_dir(dir).env("GOTOOLCHAIN", "local").env("GOPROXY", "off").env("GOFLAGS", "-buildvcs=false");
    c
}

/// Renders the chart with `values` (the whole set, defaults included), as
/// `helm install` (or `upgrade`) would: the manifests' text, or the error.
fn render(values: &Value, upgrade: bool) -> Result<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.json");
    std::fs::write(&file, serde_json::to_vec(values).unwrap()).unwrap();
    let mut c = Command::new(renderer());
    c.arg("-chart").arg(chart_dir()).arg("-values").arg(&file).args(["-name", "gh", "-namespace", "sec"]);
    if upgrade {
        c.arg("-upgrade");
    }
    let out = c.output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        assert!(out.stdout.is_empty(), "a failed render printed manifests");
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The rendered manifests, parsed.
fn manifests(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap();
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// `kubernetes-validate --strict` on every manifest but the Prometheus
/// Operator's (its CRD is not among the Kubernetes schemas; its shape is
/// checked by hand below), against Kubernetes `version`.
fn kube_validate(docs: &[Value], version: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (i, doc) in docs.iter().enumerate().filter(|(_, d)| d["kind"] != "ServiceMonitor") {
        let path = dir.path().join(format!("{i:02}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(doc).unwrap()).unwrap();
        files.push(path);
    }
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--no-warn", "-k", version])
        .args(&files)
        .output()
        .expect("kubernetes-validate (PyPI; .ci/run installs it)");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !said.contains("ERROR"), "Kubernetes {version}: {said}");
}

fn deployment_env(docs: &[Value], role: &str) -> Vec<Value> {
    find(docs, "Deployment", &format!("gh-gatehouse-{role}"))["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone()
}

/// The Secret keys a role's pods reference: (secret, key).
fn referenced_keys(docs: &[Value], role: &str) -> Vec<(String, String)> {
    deployment_env(docs, role)
        .iter()
        .filter_map(|e| e["valueFrom"]["secretKeyRef"].as_object())
        .map(|r| (r["name"].as_str().unwrap().to_owned(), r["key"].as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn the_default_values_fail_on_install_and_upgrade_naming_the_manifest_keypair() {
    let errors = schema_errors(&defaults());
    for path in ["/manifest/privateKey", "/manifest/publicKey"] {
        assert!(errors.iter().any(|e| e.starts_with(path)), "schema errors name {path}: {errors:#?}");
    }
    for upgrade in [false, true] {
        let error = render(&defaults(), upgrade).unwrap_err();
        assert!(error.contains("manifest.privateKey (or manifest.existingSecret) is required"), "{error}");
    }
    // A keypair alone is not enough either: every key a role needs is named.
    let only_keypair = merged(merged(defaults(), &json!({"manifest": keys()["manifest"]})), &stores());
    let errors = schema_errors(&only_keypair);
    assert!(errors.iter().any(|e| e.starts_with("/keys/grantSecret")), "{errors:#?}");
    let error = render(&only_keypair, false).unwrap_err();
    assert!(error.contains("keys.serviceToken (or keys.existingSecret) is required"), "{error}");
}

#[test]
fn values_with_the_keys_a_database_and_redis_render_valid_kubernetes_manifests() {
    let values = complete();
    assert_eq!(schema_errors(&values), Vec::<String>::new());
    let text = render(&values, false).unwrap();
    let docs = manifests(&text);
    let kinds: BTreeMap<String, usize> = docs.iter().fold(BTreeMap::new(), |mut m, d| {
        *m.entry(d["kind"].as_str().unwrap().to_owned()).or_default() += 1;
        m
    });
    for (kind, n) in [
        ("Deployment", 3),
        ("Service", 3),
        ("PodDisruptionBudget", 3),
        ("NetworkPolicy", 3),
        ("ServiceAccount", 3),
    ] {
        assert_eq!(kinds.get(kind), Some(&n), "{kind}: {kinds:?}");
    }
    for version in ["1.30.0", "1.37.0"] {
        kube_validate(&docs, version);
    }
    // An upgrade renders the same.
    assert_eq!(render(&values, true).unwrap(), text);
    // No key ever lands in a ConfigMap, and no secret in a plain value.
    let key_texts: Vec<String> = ["manifest", "keys"]
        .iter()
        .flat_map(|g| keys()[*g].as_object().unwrap().values().map(|v| v.as_str().unwrap().trim().to_owned()))
        .collect();
    for doc in docs.iter().filter(|d| d["kind"] != "Secret") {
        let shown = serde_json::to_string(doc).unwrap();
        for key in &key_texts {
            let probe = &key[key.len().saturating_sub(24)..];
            assert!(!shown.contains(probe), "a key is in a {}: {shown}", doc["kind"]);
        }
        assert!(!shown.contains("db-password-in-a-secret"), "the database URL is in a {}", doc["kind"]);
    }
}

#[test]
fn existing_secrets_stand_in_for_every_inline_key() {
    let values = merged(
        defaults(),
        &json!({
            "manifest": {"existingSecret": "gatehouse-keys"},
            "keys": {"existingSecret": "gatehouse-keys"},
            "database": {"existingSecret": "gatehouse-db", "existingSecretKey": "url"},
            "redis": {"existingSecret": "gatehouse-redis"},
        }),
    );
    assert_eq!(schema_errors(&values), Vec::<String>::new());
    let docs = manifests(&render(&values, false).unwrap());
    assert!(!docs.iter().any(|d| d["kind"] == "Secret"), "no Secret is rendered from empty values");
    kube_validate(&docs, "1.30.0");
    let worker = referenced_keys(&docs, "worker");
    assert!(worker.contains(&("gatehouse-keys".into(), "manifest-private.pem".into())), "{worker:?}");
    assert!(worker.contains(&("gatehouse-db".into(), "url".into())), "{worker:?}");
    assert!(worker.contains(&("gatehouse-redis".into(), "redis-url".into())), "{worker:?}");
    // Optional keys are optional references; required ones are not, so a
    // pod without them never starts.
    for e in deployment_env(&docs, "worker") {
        let Some(r) = e["valueFrom"]["secretKeyRef"].as_object() else { continue };
        let optional = r.get("optional").and_then(Value::as_bool).unwrap_or(false);
        let should = ["admin-password-hash", "metrics-token", "grant-previous-secret"]
            .contains(&r["key"].as_str().unwrap());
        assert_eq!(optional, should, "{e}");
    }
}

/// Each key a role needs, removed alone, fails both checks naming it.
#[test]
fn every_key_a_role_needs_is_required_by_the_schema_and_the_templates() {
    let needed = [
        ("manifest", "privateKey", "worker"),
        ("manifest", "publicKey", "runner"),
        ("keys", "grantSecret", "worker"),
        ("keys", "serviceToken", "worker"),
        ("keys", "sessionKeySecret", "worker"),
        ("keys", "credentialSealingPublicKey", "worker"),
        ("keys", "interceptCaCert", "worker"),
        ("keys", "credentialSealingKey", "gateway"),
        ("keys", "interceptCaKey", "gateway"),
    ];
    for (group, key, role) in needed {
        let values = merged(complete(), &json!({ group: { key: "" } }));
        let errors = schema_errors(&values);
        assert!(
            errors.iter().any(|e| e.starts_with(&format!("/{group}/{key}"))),
            "{group}.{key}: {errors:#?}"
        );
        let error = render(&values, false).unwrap_err();
        assert!(
            error
                .contains(&format!("{group}.{key} (or {group}.existingSecret) is required: the {role} role")),
            "{group}.{key}: {error}"
        );
        // Without the roles that need it, it is not needed.
        let roles_needing: &[&str] = match key {
            "serviceToken" => &["worker", "gateway", "runner"],
            "grantSecret" | "interceptCaCert" => &["worker", "gateway"],
            _ => &[role],
        };
        let off: serde_json::Map<String, Value> =
            roles_needing.iter().map(|r| ((*r).to_owned(), json!({"enabled": false}))).collect();
        if off.len() < 3 {
            let fewer = merged(values, &Value::Object(off));
            assert_eq!(
                schema_errors(&fewer),
                Vec::<String>::new(),
                "{group}.{key} without {roles_needing:?}"
            );
            render(&fewer, false).unwrap();
        }
    }
    for (store, message) in [
        ("database", "database.url (or database.existingSecret)"),
        ("redis", "redis.url (or redis.existingSecret)"),
    ] {
        let values = merged(complete(), &json!({ store: { "url": "" } }));
        assert!(schema_errors(&values).iter().any(|e| e.starts_with(&format!("/{store}/url"))));
        assert!(render(&values, false).unwrap_err().contains(message));
    }
}

#[test]
fn insecure_values_are_refused() {
    let refused = [
        // A fleet never keeps its state in a SQLite file of its own.
        json!({"database": {"url": "sqlite:///var/lib/gatehouse/gatehouse.db"}}),
        // Keys belong in Secrets, and a role's settings are the chart's.
        json!({"env": {"LOCAL_MODE": "true"}}),
        json!({"worker": {"env": {"CODEAPI_EGRESS_GRANT_SECRET": "x".repeat(40)}}}),
        json!({"env": {"GATEHOUSE_ROLE": "all"}}),
        json!({"securityContext": {"readOnlyRootFilesystem": false}}),
        json!({"securityContext": {"allowPrivilegeEscalation": true}}),
        json!({"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}}),
        json!({"podSecurityContext": {"runAsNonRoot": false}}),
        json!({"keys": {"serviceToken": "short"}}),
        json!({"worker": {"enabled": false}, "gateway": {"enabled": false}, "runner": {"enabled": false}}),
        json!({"objectStore": {"url": "s3://key:secret@bucket"}}),
    ];
    for over in refused {
        let values = merged(complete(), &over);
        assert!(!schema_errors(&values).is_empty(), "the schema accepts {over}");
    }
    let sqlite = merged(complete(), &json!({"database": {"url": "sqlite:///x.db"}}));
    assert!(render(&sqlite, false).unwrap_err().contains("database.url must be a postgres:// URL"));
    let none = merged(
        complete(),
        &json!({"worker": {"enabled": false}, "gateway": {"enabled": false}, "runner": {"enabled": false}}),
    );
    assert!(render(&none, false).unwrap_err().contains("no role is enabled"));
}

#[test]
fn each_role_holds_only_its_own_keys() {
    let docs = manifests(&render(&complete(), false).unwrap());
    let keys_of = |role: &str| -> Vec<String> {
        let own = format!("gh-gatehouse-{role}");
        let referenced: Vec<String> = referenced_keys(&docs, role)
            .into_iter()
            .filter(|(secret, _)| secret == &own)
            .map(|(_, key)| key)
            .collect();
        let secret: Vec<String> =
            find(&docs, "Secret", &own)["data"].as_object().unwrap().keys().cloned().collect();
        let mut sorted = referenced.clone();
        sorted.sort();
        assert_eq!(sorted, secret, "{role}'s Secret holds exactly what its pods reference");
        referenced
    };
    let worker = keys_of("worker");
    let gateway = keys_of("gateway");
    let runner = keys_of("runner");
    for forbidden in ["credential-sealing-key", "intercept-ca-key.pem", "manifest-public.pem"] {
        assert!(!worker.iter().any(|k| k == forbidden), "worker holds {forbidden}");
    }
    for forbidden in ["manifest-private.pem", "session-key-secret", "admin-password-hash"] {
        assert!(!gateway.iter().any(|k| k == forbidden), "gateway holds {forbidden}");
    }
    assert_eq!(
        runner,
        ["manifest-public.pem", "service-token"],
        "a runner holds the public key and its token alone"
    );
    // The datastores' URLs reach the worker and the gateway, never a runner.
    assert!(!referenced_keys(&docs, "runner").iter().any(|(s, _)| s.ends_with("-datastores")));
}

/// Each role's environment, with its Secret references resolved from the
/// rendered Secrets, is what `gatehouse config check` accepts for that role.
#[test]
fn each_rendered_role_passes_config_check() {
    let docs = manifests(&render(&complete(), false).unwrap());
    let secrets: BTreeMap<String, &Value> = docs
        .iter()
        .filter(|d| d["kind"] == "Secret")
        .map(|d| (d["metadata"]["name"].as_str().unwrap().to_owned(), &d["data"]))
        .collect();
    for role in ["worker", "gateway", "runner"] {
        let mut c = Command::new(BIN);
        c.env_clear().args(["config", "check", "--json"]);
        for e in deployment_env(&docs, role) {
            let name = e["name"].as_str().unwrap();
            let value = match e["value"].as_str() {
                Some(v) => v.to_owned(),
                None => {
                    let r = &e["valueFrom"]["secretKeyRef"];
                    let encoded =
                        secrets[r["name"].as_str().unwrap()][r["key"].as_str().unwrap()].as_str().unwrap();
                    String::from_utf8(base64_decode(encoded)).unwrap()
                }
            };
            c.env(name, value);
        }
        let out = c.output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{role}: {said}{}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_str(&said).unwrap();
        assert_eq!(report["role"], role, "{report}");
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

#[test]
fn pods_run_locked_down_probed_and_drained() {
    let values = complete();
    let docs = manifests(&render(&values, false).unwrap());
    for role in ["worker", "gateway", "runner"] {
        let pod = &find(&docs, "Deployment", &format!("gh-gatehouse-{role}"))["spec"]["template"]["spec"];
        assert_eq!(pod["automountServiceAccountToken"], false, "{role}");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{role}");
        assert_ne!(pod["securityContext"]["runAsUser"], 0, "{role}");
        let c = &pod["containers"][0];
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{role}");
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false, "{role}");
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]), "{role}");
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz", "{role}");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{role}");
        // The grace period covers the preStop pause and the drain.
        let pause = c["lifecycle"]["preStop"]["sleep"]["seconds"].as_u64().unwrap();
        let drain: u64 = deployment_env(&docs, role)
            .iter()
            .find(|e| e["name"] == "GATEHOUSE_SHUTDOWN_DRAIN_SECS")
            .unwrap()["value"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap() > pause + drain, "{role}");
        let pdb = find(&docs, "PodDisruptionBudget", &format!("gh-gatehouse-{role}"));
        assert_eq!(pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"], role);
    }
}

#[test]
fn network_policies_keep_each_role_to_its_ways() {
    let docs = manifests(&render(&complete(), false).unwrap());
    let egress = |role: &str| {
        find(&docs, "NetworkPolicy", &format!("gh-gatehouse-{role}"))["spec"]["egress"]
            .as_array()
            .unwrap()
            .clone()
    };
    // The runner: DNS, and the worker's API port, nothing else.
    let runner = egress("runner");
    assert_eq!(runner.len(), 2, "{runner:#?}");
    assert_eq!(runner[1]["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"], "worker");
    assert_eq!(runner[1]["ports"], json!([{"port": 8700, "protocol": "TCP"}]));
    // The gateway: the world minus the cluster's ranges (and the datastores).
    let gateway = egress("gateway");
    let world = gateway.iter().find(|r| r["to"][0]["ipBlock"]["cidr"] == "0.0.0.0/0").expect("the world");
    let except = world["to"][0]["ipBlock"]["except"].as_array().unwrap();
    for cidr in ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"] {
        assert!(except.contains(&json!(cidr)), "{cidr} cut out of the gateway's world");
    }
    assert_eq!(world["to"][1]["ipBlock"]["except"], json!(["fc00::/7", "fe80::/10"]));
    // The worker: DNS, the datastores on their ports, HTTPS out for OSV.
    let worker = egress("worker");
    assert!(
        worker
            .iter()
            .any(|r| r["ports"]
                == json!([{"port": 5432, "protocol": "TCP"}, {"port": 6379, "protocol": "TCP"}]))
    );
    assert!(
        worker.iter().all(|r| r["ports"].as_array().is_some_and(|p| !p.is_empty())),
        "every worker rule names its ports"
    );
    // Ingress: the gateway's proxy port; nothing else but the API.
    let ingress = &find(&docs, "NetworkPolicy", "gh-gatehouse-gateway")["spec"]["ingress"][0]["ports"];
    assert_eq!(ingress, &json!([{"port": "api", "protocol": "TCP"}, {"port": "proxy", "protocol": "TCP"}]));
}

#[test]
fn the_service_monitor_reads_metrics_with_its_token() {
    let values = merged(
        complete(),
        &json!({"serviceMonitor": {"enabled": true}, "keys": {"metricsToken": "m".repeat(40)}}),
    );
    assert_eq!(schema_errors(&values), Vec::<String>::new());
    let docs = manifests(&render(&values, false).unwrap());
    let monitor = find(&docs, "ServiceMonitor", "gh-gatehouse-gateway");
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(
        endpoint["bearerTokenSecret"],
        json!({"name": "gh-gatehouse-gateway", "key": "metrics-token", "optional": false})
    );
    kube_validate(&docs, "1.37.0");
}

/// The renderer's own tests (Go's `go test` and `go vet`).
#[test]
fn the_renderer_passes_its_own_tests() {
    for args in [&["vet", "./..."][..], &["test", "./..."][..]] {
        let out = go(&repo().join("deploy/helm/render")).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "go {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_image_runs_the_one_binary_as_the_charts_user() {
    let containerfile = std::fs::read_to_string(repo().join("deploy/Containerfile")).unwrap();
    let last_stage = containerfile.rsplit("\nFROM ").next().unwrap();
    assert!(
        last_stage.starts_with("gcr.io/distroless/cc-debian12:nonroot"),
        "a minimal runtime: {last_stage}"
    );
    assert!(last_stage.contains("\nENTRYPOINT [\"/usr/local/bin/gatehouse\"]"));
    let user = last_stage.lines().find_map(|l| l.strip_prefix("USER ")).expect("a USER line");
    let uid: u32 =
        user.split(':').next().unwrap().parse().expect("a numeric user, so runAsNonRoot can check it");
    assert_ne!(uid, 0);
    let values = defaults();
    assert_eq!(values["podSecurityContext"]["runAsUser"], uid, "the chart runs the image's user");
    // The chart's default image is the one the Containerfile's build line tags.
    let chart = std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap();
    let app_version = chart.lines().find_map(|l| l.strip_prefix("appVersion: ")).unwrap().trim_matches('"');
    let tag = format!("-t {}:{app_version} ", values["image"]["repository"].as_str().unwrap());
    assert!(containerfile.contains(&tag), "the Containerfile's build line tags {tag}");
    // Nothing but the binary runs: no shell, so no `sh -c` anywhere in the chart.
    let docs = manifests(&render(&complete(), false).unwrap());
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["args"], json!(["serve"]));
        assert!(c.get("command").is_none());
    }
}

/// The renderer implements exactly the functions the chart uses: one it
/// lacks fails the render (Go's parser refuses an unknown function), and
/// one the chart does not use is not there to be trusted untested.
#[test]
fn the_renderer_provides_exactly_the_functions_the_chart_uses() {
    let funcs = std::fs::read_to_string(repo().join("deploy/helm/render/funcs.go")).unwrap();
    let map = funcs.split("template.FuncMap{").nth(1).expect("the function map").split("\n}").next().unwrap();
    let provided: Vec<&str> =
        map.lines().filter_map(|l| l.trim().strip_prefix('"')).filter_map(|l| l.split('"').next()).collect();
    assert!(provided.len() >= 10, "{provided:?}");
    let mut templates = String::new();
    for entry in std::fs::read_dir(chart_dir().join("templates")).unwrap() {
        templates.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    let words: std::collections::BTreeSet<&str> =
        templates.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).collect();
    let unused: Vec<&&str> = provided.iter().filter(|f| !words.contains(**f)).collect();
    assert!(unused.is_empty(), "the renderer provides functions the chart does not use: {unused:?}");
}
