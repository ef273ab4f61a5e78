//! The project's Python venv (the official client and the kubectl wheel), made on demand by
//! `scripts/python-venv`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The venv's directory, created (or completed) first.
pub fn venv() -> PathBuf {
    let root = super::repo();
    let venv = root.join("target/pyvenv");
    let status = Command::new(root.join("scripts/python-venv"))
        .arg(&venv)
        .status()
        .expect("run scripts/python-venv");
    assert!(
        status.success(),
        "could not create the Python venv with the kubernetes client and kubectl"
    );
    venv
}

/// A program of the venv (`python`, `kubectl`).
pub fn bin(name: &str) -> PathBuf {
    venv().join("bin").join(name)
}
