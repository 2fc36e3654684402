//! Generates the message types from `protocol-specs/` at build time, so the Rust types
//! can never drift from the specs (the generator lives in `codegen/`).

use std::path::PathBuf;

fn main() {
    let specs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../protocol-specs");
    println!("cargo:rerun-if-changed={}", specs.display());
    let messages = match osprey_codegen::load_dir(&specs) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("protocol-specs: {e}");
            std::process::exit(1);
        }
    };
    let code = osprey_codegen::rust::generate(&messages);
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("messages.rs");
    std::fs::write(&out, code).expect("write generated messages");
}
