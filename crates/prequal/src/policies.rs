//! `prequal policies`: the policy catalogue, from the core's own tables.

use std::io::Write;

use anyhow::Result;
use prequal_core::catalog;

/// Arguments of `prequal policies`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Prints the catalogue.
pub fn run(args: &Args) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, catalog())?;
        writeln!(out)?;
        return Ok(());
    }
    for info in catalog() {
        writeln!(out, "{}", info.name)?;
        writeln!(out, "  signal: {}", info.signal)?;
        writeln!(out, "  rule:   {}", info.rule)?;
        writeln!(out, "  source: {}", info.source)?;
        if info.params.is_empty() {
            writeln!(out, "  parameters: none")?;
        } else {
            writeln!(out, "  parameters:")?;
            let width = info.params.iter().map(|p| p.key.len()).max().unwrap_or(0);
            for p in info.params {
                writeln!(
                    out,
                    "    {:width$}  default {:<10}  {}",
                    p.key, p.default, p.doc
                )?;
            }
        }
        writeln!(out)?;
    }
    Ok(())
}
