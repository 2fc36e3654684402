//! Writes the fuzzers' seed corpora: one random, valid request frame and response body
//! per API key at its lowest and highest version. Run from the repository root:
//! `cargo run -p osprey-protocol --features testing --example fuzz_seeds`.

use bytes::{BufMut, BytesMut};
use osprey_protocol::frame::encode_request;
use osprey_protocol::wire::TestRng;
use osprey_protocol::{ApiKey, RequestBody, RequestHeader, ResponseBody};
use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new("crates/protocol/fuzz/corpus");
    std::fs::create_dir_all(root.join("request"))?;
    std::fs::create_dir_all(root.join("response"))?;
    let mut rng = TestRng::new(0x5eed);
    let mut written = 0;
    for &key in ApiKey::ALL {
        let (min, max) = key.versions();
        for version in [min, max] {
            let header = RequestHeader {
                request_api_key: key as i16,
                request_api_version: version,
                correlation_id: 1,
                client_id: Some("seed".into()),
                ..Default::default()
            };
            let mut frame = BytesMut::new();
            encode_request(&header, &RequestBody::random(key, &mut rng, version), &mut frame)
                .expect("random requests encode");
            std::fs::write(root.join(format!("request/seed-{}-v{version}", key.name())), &frame)?;

            let mut body = BytesMut::new();
            body.put_i16(key as i16);
            body.put_i16(version);
            ResponseBody::random(key, &mut rng, version).encode(&mut body, version).expect("random responses encode");
            std::fs::write(root.join(format!("response/seed-{}-v{version}", key.name())), &body)?;
            written += 2;
        }
    }
    println!("wrote {written} seeds under {}", root.display());
    Ok(())
}
