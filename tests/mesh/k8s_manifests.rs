//! The Kubernetes manifests are valid: `deploy/k8s/*.yaml` and what `outrider inject`
//! prints, checked against Kubernetes' schemas by `kubernetes-validate` (installed by
//! `deploy/install-validator.sh`, which `.ci/run` runs). Without the tool the validation
//! test reports itself skipped, except in CI (`CI` set), where it fails.

use crate::common::skip::{Tool, skipped};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest Kubernetes with native sidecars (init containers with `restartPolicy`).
const KUBERNETES_VERSION: &str = "1.29.0";
const IMAGES: [&str; 4] = ["--image", "outrider:0.1.0", "--init-image", "outrider-init:0.1.0"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn inject(manifest: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_outrider"))
        .arg("inject")
        .args(IMAGES)
        .arg("-f")
        .arg(manifest)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

fn validator() -> Option<PathBuf> {
    let installed = root().join("deploy/.validator/bin/kubernetes-validate");
    if installed.exists() {
        return Some(installed);
    }
    let on_path = Command::new("kubernetes-validate").arg("--version").output().is_ok_and(|o| o.status.success());
    on_path.then(|| PathBuf::from("kubernetes-validate"))
}

#[test]
fn injected_example_is_what_inject_prints() {
    let expected = std::fs::read_to_string(root().join("deploy/k8s/demo-app.injected.yaml")).unwrap();
    assert!(
        inject(&root().join("deploy/k8s/demo-app.yaml")) == expected,
        "deploy/k8s/demo-app.injected.yaml is stale; regenerate it with\n  outrider inject {} -f deploy/k8s/demo-app.yaml",
        IMAGES.join(" ")
    );
}

#[test]
fn manifests_validate_against_kubernetes_schemas() {
    let Some(validator) = validator() else {
        skipped(Tool::Validator, "validating the manifests", "kubernetes-validate not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let injected = dir.path().join("app.injected.yaml");
    std::fs::write(&injected, inject(&root().join("tests/data/k8s/app.yaml"))).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/k8s"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    files.push(root().join("tests/data/k8s/app.yaml"));
    files.push(injected);
    let output =
        Command::new(&validator).args(["--strict", "--quiet", "-k", KUBERNETES_VERSION]).args(&files).output().unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_validator_refuses_what_kubernetes_would() {
    let Some(validator) = validator() else {
        skipped(Tool::Validator, "the validator's own check", "kubernetes-validate not found");
        return;
    };
    // Guards the check above against a validator that accepts anything.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers:\n  - name: a\n    image: b\n    restartPolicy: Sometimes\n    bogus: 1\n").unwrap();
    let output =
        Command::new(&validator).args(["--strict", "--quiet", "-k", KUBERNETES_VERSION]).arg(&bad).output().unwrap();
    assert!(!output.status.success());
}
