//! `hotgate token`: mint a token from the embedded issuer.

use std::time::Duration;

pub(crate) fn token(
    config: &hotgate_gateway::Config,
    sub: &str,
    roles: &[String],
    ttl: Duration,
) -> Result<(), String> {
    let issuer = hotgate_gateway::server::embedded_issuer(config).map_err(|e| e.to_string())?;
    let token = issuer.mint(sub, roles, ttl).map_err(|e| e.to_string())?;
    println!("{token}");
    Ok(())
}
