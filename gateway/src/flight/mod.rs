//! The Arrow Flight service. Each call authenticates through the interceptor (which
//! puts the [`hotgate_policy::Principal`] in the request extensions); the service
//! decodes its ticket or descriptor, then authorizes the privilege that command needs
//! on that table.
//!
//! The modules depend one way:
//!
//! ```text
//! service ─┬─ sql ───┬─ (read, write)
//!          ├─ read ──┬─ changelog ─┬─ opened
//!          │         ├─ lookup ────┤
//!          │         └─ stored ────┘
//!          ├─ write
//!          └─ (sql, read, write) ── call, descriptor
//! ```

mod call;
mod changelog;
mod descriptor;
mod lookup;
mod opened;
mod read;
mod service;
mod sql;
mod stored;
mod write;

pub use service::HotgateFlight;
