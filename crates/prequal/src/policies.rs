//! `prequal policies`: the policy catalogue, from the core's own tables.

use std::io::Write;

use anyhow::Result;
use prequal_core::{PolicyInfo, catalog};

/// Arguments of `prequal policies`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print the Markdown reference that docs/policies.md embeds.
    #[arg(long)]
    markdown: bool,
}

/// Prints the catalogue.
pub fn run(args: &Args) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, catalog())?;
        writeln!(out)?;
    } else if args.markdown {
        out.write_all(markdown().as_bytes())?;
    } else {
        for info in catalog() {
            write_text(&mut out, info)?;
        }
    }
    Ok(())
}

fn write_text(out: &mut impl Write, info: &PolicyInfo) -> Result<()> {
    writeln!(out, "{}", info.name)?;
    writeln!(out, "  signal: {}", info.signal)?;
    writeln!(out, "  rule:   {}", info.rule)?;
    writeln!(out, "  source: {}", info.source)?;
    if info.params.is_empty() {
        writeln!(out, "  parameters: none")?;
    } else {
        writeln!(out, "  parameters:")?;
        let key_width = info.params.iter().map(|p| p.key.len()).max().unwrap_or(0);
        let default_width = info
            .params
            .iter()
            .map(|p| p.default.len())
            .max()
            .unwrap_or(0);
        for p in info.params {
            writeln!(
                out,
                "    {:key_width$}  = {:default_width$}  {}",
                p.key, p.default, p.doc
            )?;
        }
    }
    writeln!(out)?;
    Ok(())
}

/// The generated reference: one section per policy with a parameter table.
pub fn markdown() -> String {
    let mut md = String::new();
    for info in catalog() {
        md.push_str(&format!("### `{}`\n\n", info.name));
        md.push_str(&format!("- signal: {}\n", info.signal));
        md.push_str(&format!("- rule: {}\n", info.rule));
        md.push_str(&format!("- source: {}\n\n", info.source));
        if info.params.is_empty() {
            md.push_str("No parameters.\n\n");
            continue;
        }
        md.push_str("| key | default | meaning |\n|---|---|---|\n");
        for p in info.params {
            let doc = p.doc.replace('|', "\\|");
            md.push_str(&format!("| `{}` | `{}` | {} |\n", p.key, p.default, doc));
        }
        md.push('\n');
    }
    md
}
