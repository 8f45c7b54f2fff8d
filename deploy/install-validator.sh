#!/usr/bin/env bash
# Installs `kubernetes-validate` (PyPI; it ships Kubernetes' JSON schemas, so validation
# needs no network) into deploy/.validator, for tests/k8s_manifests.rs. Idempotent.
set -euo pipefail

VERSION="${KUBERNETES_VALIDATE_VERSION:-1.37.0}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.validator"

if [[ -x "$venv/bin/kubernetes-validate" ]] && "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$VERSION"; then
    echo "kubernetes-validate ${VERSION} already installed in $venv"
    exit 0
fi
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet "kubernetes-validate==${VERSION}"
"$venv/bin/kubernetes-validate" --version
