// Validates rendered Kubernetes manifests offline: every document against its kind's schema
// (npm kubernetes-models for built-in kinds, @kubernetes-models/prometheus-operator for
// ServiceMonitor; KServe publishes no such package, so its two kinds get a structural check of
// the fields adapterd relies on), then adapterd's own rules for its Deployments (probes, non-root,
// read-only root file system, no privilege escalation, resources).
//   node scripts/validate-manifests.mjs NODE_DIR FILE.yaml...
// NODE_DIR holds node_modules with kubernetes-models, @kubernetes-models/prometheus-operator, yaml.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [nodeDir, ...files] = process.argv.slice(2);
if (!nodeDir || !files.length) {
  console.error("usage: validate-manifests.mjs NODE_DIR FILE.yaml...");
  process.exit(2);
}
const mod = (p) => import(pathToFileURL(join(nodeDir, "node_modules", p)).href);
const YAML = await mod("yaml/dist/index.js");

function modelPath(apiVersion, kind) {
  if (apiVersion.startsWith("monitoring.coreos.com/"))
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}.js`;
  return `kubernetes-models/${apiVersion}/${kind}.js`;
}

// KServe: the fields adapterd's manifests depend on
function checkKServe(doc) {
  const s = doc.spec ?? {};
  const need = (cond, what) => { if (!cond) throw new Error(what); };
  if (doc.kind === "ServingRuntime") {
    need(doc.apiVersion === "serving.kserve.io/v1alpha1", "ServingRuntime is serving.kserve.io/v1alpha1");
    need(Array.isArray(s.supportedModelFormats) && s.supportedModelFormats.every((f) => typeof f.name === "string"),
      "spec.supportedModelFormats[].name");
    need(Array.isArray(s.containers) && s.containers.length > 0 && s.containers.every((c) => c.name && c.image),
      "spec.containers[] with name and image");
    need((s.protocolVersions ?? []).includes("v2"), "spec.protocolVersions includes v2");
    return s.containers;
  }
  need(doc.apiVersion === "serving.kserve.io/v1beta1", "InferenceService is serving.kserve.io/v1beta1");
  const m = s.predictor?.model;
  need(m && typeof m.modelFormat?.name === "string", "spec.predictor.model.modelFormat.name");
  need(typeof m.storageUri === "string" && /^(pvc|s3|gs|https?):\/\//.test(m.storageUri), "spec.predictor.model.storageUri");
  return [];
}

// adapterd's rules for the pods that run it
function checkAdapterdPod(where, podSpec) {
  const errs = [];
  for (const c of podSpec.containers ?? []) {
    if (!String(c.image ?? "").includes("adapterd")) continue;
    const sc = c.securityContext ?? {};
    const nonRoot = sc.runAsNonRoot ?? podSpec.securityContext?.runAsNonRoot;
    if (!c.readinessProbe) errs.push("no readinessProbe");
    if (!c.livenessProbe) errs.push("no livenessProbe");
    if (nonRoot !== true) errs.push("not runAsNonRoot");
    if (sc.readOnlyRootFilesystem !== true) errs.push("root file system not read-only");
    if (sc.allowPrivilegeEscalation !== false) errs.push("privilege escalation allowed");
    if (!c.resources?.requests?.cpu || !c.resources?.limits?.memory) errs.push("no cpu request / memory limit");
  }
  return errs.map((e) => `${where}: ${e}`);
}

let n = 0, failed = 0;
for (const file of files) {
  const docs = YAML.parseAllDocuments(readFileSync(file, "utf8"));
  for (const d of docs) {
    if (d.errors.length) {
      console.error(`${file}: YAML: ${d.errors[0].message}`);
      failed++;
      continue;
    }
    const doc = d.toJS();
    if (!doc) continue;
    const where = `${file}: ${doc.kind}/${doc.metadata?.name}`;
    n++;
    try {
      if (!doc.apiVersion || !doc.kind) throw new Error("no apiVersion or kind");
      let pods = [];
      if (doc.apiVersion.startsWith("serving.kserve.io/")) {
        const containers = checkKServe(doc);
        if (doc.kind === "ServingRuntime") pods = [{ containers }];
      } else {
        let M;
        try {
          M = (await mod(modelPath(doc.apiVersion, doc.kind)))[doc.kind];
        } catch {
          throw new Error(`no schema for ${doc.apiVersion} ${doc.kind}`);
        }
        new M(doc).validate();
        if (doc.kind === "Deployment") pods = [doc.spec.template.spec];
      }
      const errs = pods.flatMap((p) => checkAdapterdPod(where, p));
      if (errs.length) throw new Error(errs.join("; "));
    } catch (e) {
      console.error(`${where}: ${e.message}`);
      failed++;
    }
  }
}
console.log(`validate-manifests: ${n} objects in ${files.length} files, ${failed} invalid`);
process.exit(failed ? 1 : 0);
