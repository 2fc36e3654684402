//! The `osprey` binary. The broker itself arrives with the single-node broker issue; until
//! then the binary says so instead of pretending to serve.

fn main() {
    eprintln!(
        "osprey: the broker is not built yet (see the single-node broker issue); only the protocol codec exists."
    );
    std::process::exit(2);
}
