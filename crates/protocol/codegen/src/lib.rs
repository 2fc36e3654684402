//! The generator behind `osprey-protocol`: parses the project's message descriptions in
//! `protocol-specs/` (see [`spec`]) and writes Rust types with version-aware encoders and
//! decoders (see [`rust`]). It runs from the protocol crate's build script, so the
//! generated code can never drift from the specs and nobody edits it by hand.

pub mod rust;
pub mod spec;
pub mod versions;

use std::path::Path;

/// Reads every `*.spec` file below `dir`, sorted by path so output is deterministic.
pub fn load_dir(dir: &Path) -> Result<Vec<spec::Message>, String> {
    let mut files = Vec::new();
    collect(dir, &mut files).map_err(|e| format!("{}: {e}", dir.display()))?;
    files.sort();
    let mut messages = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let rel = file.strip_prefix(dir).unwrap_or(&file).display().to_string();
        messages.extend(spec::parse(&rel, &text)?);
    }
    spec::validate_set(&messages)?;
    Ok(messages)
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "spec") {
            out.push(path);
        }
    }
    Ok(())
}
