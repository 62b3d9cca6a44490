//! hotgate-gateway: Flight, Flight SQL and HTTP, query planning, audit and orchestration.
//!
//! Owns: the `hotgate` binary, authentication, per-command authorization, DataFusion
//! planning over both tiers, the tiering scheduler, metrics, and the server's lifecycle.
//! Must not touch: segment files, Iceberg metadata or policy internals directly; it goes
//! through `hotgate-store`, `hotgate-tiering` and `hotgate-policy`.
//!
//! ```text
//! server ── flight (FlightService) ─┬─ ticket (JSON commands) ── planner (DataFusion)
//!        └─ http (axum)            ─┴─ auth (Authenticator, Authorizer) ── state
//! ```

pub mod audit;
pub mod audit_query;
pub mod auth;
pub mod background;
pub mod boundary;
pub mod config;
pub mod deletion;
pub mod error;
pub mod flight;
pub mod governance;
pub mod http;
pub mod metrics;
pub mod planner;
pub mod polaris;
pub mod pushdown;
pub mod scheduler;
pub mod secret_file;
pub mod server;
pub mod sources;
pub mod sql;
pub mod state;
pub mod ticket;
pub mod tiers;

pub use config::Config;
pub use error::GatewayError;
