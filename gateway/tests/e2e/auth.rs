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
    let good = server.token("alice", &["writer"]);
    assert_eq!(
        create_table(&server, &good, events_table()).await.status(),
        201
    );

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
        get(
            &mut client,
            &good,
            serde_json::json!({"table": "app.events"})
        )
        .await
        .is_ok()
    );
}
