//! Every kind of bad token is refused with `Unauthenticated`, on Flight and HTTP.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

use crate::harness::*;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_unauthenticated() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let good = server.caller("alice", &["writer"]);
    good.create_table(events_table()).await;

    // Forge tokens with the server's own key, so only the named defect is wrong.
    let key_hex = std::fs::read_to_string(dir.path().join("issuer.hs256.key")).unwrap();
    let key = hex::decode(key_hex.trim()).unwrap();
    let sign = |patch: serde_json::Value| {
        let mut claims = serde_json::json!({"sub": "alice", "scope": "PRINCIPAL_ROLE:writer",
            "iss": "hotgate", "aud": "hotgate", "exp": now() + 600});
        for (k, v) in patch.as_object().unwrap() {
            claims[k] = v.clone();
        }
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(&key).unwrap(),
        )
        .unwrap()
    };
    let parts: Vec<String> = good.split('.').map(str::to_owned).collect();
    let none_header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let forged_claims = URL_SAFE_NO_PAD.encode(
        serde_json::json!({"sub": "root", "scope": "PRINCIPAL_ROLE:ALL", "iss": "hotgate", "aud": "hotgate", "exp": now() + 600}).to_string(),
    );
    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("missing", None, "no bearer token"),
        (
            "expired",
            Some(sign(serde_json::json!({"exp": now() - 600}))),
            "expired",
        ),
        (
            "wrong audience",
            Some(sign(serde_json::json!({"aud": "someone-else"}))),
            "audience",
        ),
        (
            "wrong issuer",
            Some(sign(serde_json::json!({"iss": "evil"}))),
            "issuer",
        ),
        ("alg none", Some(format!("{none_header}.{}.", parts[1])), ""),
        (
            "tampered",
            Some(format!("{}.{forged_claims}.{}", parts[0], parts[2])),
            "signature",
        ),
        ("garbage", Some("not-a-jwt".into()), "well-formed"),
    ];
    let mut client = server.client().await;
    for (what, token, needle) in cases {
        let ticket = arrow_flight::Ticket::new(r#"{"table":"app.events"}"#);
        let request = match &token {
            Some(t) => with_token(ticket, t),
            None => tonic::Request::new(ticket),
        };
        let status = client
            .do_get(request)
            .await
            .err()
            .unwrap_or_else(|| panic!("{what} was accepted"));
        assert_eq!(
            status.code(),
            tonic::Code::Unauthenticated,
            "{what}: {status:?}"
        );
        assert!(
            status.message().contains(needle),
            "{what}: {:?} lacks {needle:?}",
            status.message()
        );
        // The HTTP API refuses it too.
        let mut req = reqwest::Client::new().get(server.http_url("/v1/tables"));
        if let Some(t) = &token {
            req = req.bearer_auth(t);
        }
        assert_eq!(req.send().await.unwrap().status(), 401, "{what} over HTTP");
    }
    // And the good token works.
    assert!(
        good.get(serde_json::json!({"table": "app.events"}))
            .await
            .is_ok()
    );
}

/// An EC P-256 key pair made for these tests only; it protects nothing.
const TEST_EC_PRIVATE: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgpU89M4xGWqoCACXE\nwcPZ2YVsI9opGzknJUpkuX4H6CyhRANCAAR/sAy3MBg/Q9V9XylEPr1WjT8YlhzJ\nDxfKES0Sm7HcGkfAskv0e5QYyQyOdLcW/29j8XPAI/PITGmiByL8/CWJ\n-----END PRIVATE KEY-----\n";
const TEST_EC_JWKS: &str = r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"idp-1","use":"sig",
    "x":"f7AMtzAYP0PVfV8pRD69Vo0_GJYcyQ8XyhEtEpux3Bo","y":"R8CyS_R7lBjJDI50txb_b2Pxc8Aj88hMaaIHIvz8JYk"}]}"#;

/// A test double of an external identity provider: it only serves its JWKS document.
async fn stub_idp_jwks() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/.well-known/jwks.json",
        axum::routing::get(|| async { ([("content-type", "application/json")], TEST_EC_JWKS) }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_issuer_keys_come_from_a_jwks_url() {
    let idp = stub_idp_jwks().await;
    let url = format!("http://{idp}/.well-known/jwks.json");
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("HOTGATE_AUTH_JWKS_URL", url.as_str()),
        ("HOTGATE_AUTH_ISSUER", "https://idp.example"),
        ("HOTGATE_AUTH_AUDIENCE", "hotgate-prod"),
    ];
    let server = Server::start_vars(dir.path(), &env);
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("idp-1".into());
    let claims = serde_json::json!({"sub": "svc-ingest", "scope": "PRINCIPAL_ROLE:ingest",
        "iss": "https://idp.example", "aud": "hotgate-prod", "exp": now() + 600, "principalId": 42});
    let token = jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_ec_pem(TEST_EC_PRIVATE.as_bytes()).unwrap(),
    )
    .unwrap();
    let listed = reqwest::Client::new()
        .get(server.http_url("/v1/tables"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    // The embedded issuer's tokens are not accepted once an external issuer is configured.
    let embedded = server.caller("alice", &["writer"]);
    let refused = reqwest::Client::new()
        .get(server.http_url("/v1/tables"))
        .bearer_auth(&embedded)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    // An unreachable JWKS URL stops the server from starting: it fails closed.
    let out = std::process::Command::new(BIN)
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args([
            "--flight-addr",
            &free_addr().to_string(),
            "--http-addr",
            &free_addr().to_string(),
        ])
        .env(
            "HOTGATE_AUTH_JWKS_URL",
            format!("http://{}/jwks.json", free_addr()),
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot fetch the JWKS"), "{stderr}");
}

#[test]
fn audit_pubkey_prints_a_stable_ed25519_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        let mut command = std::process::Command::new(BIN);
        command
            .args(["audit", "pubkey", "--data-dir"])
            .arg(dir.path());
        stdout_of(&mut command).trim().to_owned()
    };
    let first = run();
    assert_eq!(first.len(), 64);
    assert!(first.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(run(), first, "the key pair is created once, then reused");
    let secret = std::fs::read_to_string(dir.path().join("audit.ed25519.key")).unwrap();
    assert_ne!(secret.trim(), first, "the public key is not the secret");
}
