//! The policy reference in docs/policies.md is the output of `prequal policies --markdown`.

// A test file: its helpers may panic on failure like the tests themselves.
#![allow(clippy::expect_used)]

use std::process::Command;

const BEGIN: &str = "<!-- BEGIN GENERATED: prequal policies --markdown -->\n";
const END: &str = "<!-- END GENERATED -->";

fn prequal(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_prequal"))
        .args(args)
        .output()
        .expect("runs prequal");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).expect("utf-8")
}

#[test]
fn policies_reference_matches_the_code() {
    let generated = prequal(&["policies", "--markdown"]);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/policies.md");
    let doc = std::fs::read_to_string(path).expect("docs/policies.md exists");
    let start = doc.find(BEGIN).expect("begin marker") + BEGIN.len();
    let end = doc.find(END).expect("end marker");
    let written = &doc[start..end];
    if let Some((line, (w, g))) = written
        .lines()
        .zip(generated.lines())
        .enumerate()
        .find(|(_, (w, g))| w != g)
    {
        panic!(
            "docs/policies.md is stale (run scripts/gen-policies-doc.sh); first difference at \
             line {} of the generated section:\n  doc:  {w}\n  code: {g}",
            line + 1
        );
    }
    assert_eq!(
        written.lines().count(),
        generated.lines().count(),
        "docs/policies.md is stale (run scripts/gen-policies-doc.sh): a different number of lines"
    );
}

#[test]
fn every_policy_is_listed_by_the_text_form() {
    let text = prequal(&["policies"]);
    for name in [
        "random",
        "round-robin",
        "weighted-round-robin",
        "least-loaded",
        "least-loaded-p2c",
        "peak-ewma",
        "least-time",
        "yarp-p2c",
        "linear",
        "c3",
        "prequal",
        "prequal-sync",
    ] {
        assert!(
            text.lines().any(|l| l == name),
            "{name} missing from `prequal policies`"
        );
    }
}
