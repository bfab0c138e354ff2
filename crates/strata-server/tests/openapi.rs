//! docs/api/server-openapi.json is the generated document, byte for byte;
//! the CLI's `tests/serve.rs` checks that the server serves the same.

use std::path::Path;

#[test]
fn the_checked_in_openapi_document_is_current() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/api/server-openapi.json");
    let generated = strata_server::openapi::document();
    if std::env::var_os("STRATA_WRITE_OPENAPI").is_some() {
        std::fs::write(&file, generated).expect("write docs/api/server-openapi.json");
    }
    let checked_in = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is not the document the code generates: regenerate it with \
         `STRATA_WRITE_OPENAPI=1 cargo test -p strata-server --test openapi` and commit it",
        file.display()
    );
    let v: serde_json::Value = serde_json::from_str(generated).unwrap();
    assert!(v["openapi"].as_str().unwrap().starts_with("3.1"));
    // Every route but the liveness probe needs the bearer token.
    assert_eq!(v["security"][0]["bearer"], serde_json::json!([]));
    assert_eq!(
        v["paths"]["/v1/healthz"]["get"]["security"][0],
        serde_json::json!({})
    );
}
